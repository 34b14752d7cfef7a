#!/usr/bin/env python3
"""A DistributedDataParallel training step, one process per GPU, started by torchrun.

Why: each rank allocates on its own device and NCCL all-reduces the gradients between them. The
program prints, per rank, its device, its losses, what torch reports of the device's memory, an
all-reduce of known values and a checksum of its parameters after training (DDP keeps every
rank's parameters equal, so the checksums must agree). It knows nothing of what allocates for
it; run it under `torchrun --nproc_per_node N ddp.py`.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

RESULT_TAG = "GPUCHECK-RESULT"


def emit(result):
    print(RESULT_TAG, json.dumps(result), flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--backend", default="nccl", help="nccl (the check) or gloo (CPU tests)")
    p.add_argument("--device", default="cuda")
    args = p.parse_args(argv)
    started = time.perf_counter()

    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world = int(os.environ["WORLD_SIZE"])
    if args.device == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device(args.device)
    dist.init_process_group(args.backend)

    torch.manual_seed(0)  # the same initial weights on every rank
    d = args.width
    model = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)).to(device)
    ddp = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-3, momentum=0.9)
    gen = torch.Generator().manual_seed(1000 + rank)  # each rank its own data
    x = torch.randn(64, d, generator=gen).to(device)
    y = torch.randn(64, d, generator=gen).to(device)

    losses = []
    for _ in range(args.steps):
        optimizer.zero_grad(set_to_none=True)
        loss = F.mse_loss(ddp(x), y)
        loss.backward()  # gradients all-reduced across ranks here
        optimizer.step()
        losses.append(repr(loss.item()))

    known = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(known)
    checksum = torch.stack([p.detach().double().sum() for p in model.parameters()]).sum().view(1)
    gathered = [torch.zeros_like(checksum) for _ in range(world)]
    dist.all_gather(gathered, checksum)
    result = {
        "rank": rank,
        "local_rank": local_rank,
        "world": world,
        "backend": args.backend,
        "losses": losses,
        "allreduce_sum": known.item(),
        "allreduce_expected": world * (world + 1) / 2,
        "param_checksums": [repr(g.item()) for g in gathered],
        "torch": torch.__version__,
    }
    if device.type == "cuda":
        result.update(
            {
                "device": torch.cuda.current_device(),
                "gpu": torch.cuda.get_device_name(device),
                "mem_get_info": list(torch.cuda.mem_get_info(device)),
                "max_memory_allocated": torch.cuda.max_memory_allocated(device),
            }
        )
    if args.backend == "nccl":
        dist.barrier(device_ids=[local_rank])
    else:
        dist.barrier()
    dist.destroy_process_group()
    result["wall_s"] = time.perf_counter() - started
    emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
