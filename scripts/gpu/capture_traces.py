#!/usr/bin/env python3
"""Records tensor allocation traces of the workloads nobody tuned for (scripts/gpu/workloads.py:
moe, decode, unet, lora) from PyTorch's caching allocator's own history, for the fragmentation
benchmark. Writes, per workload, `<name>.csv.gz` in the RMM allocation-log layout of
data/traces (allocate/free for the tensors, segment_alloc/segment_free for what the caching
allocator took from the driver) and prints PyTorch's peak reserved / peak allocated with its
default allocator, run natively (no shim).

Usage: capture_traces.py OUTDIR [--steps N]
"""

import argparse
import csv
import gzip
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workloads  # noqa: E402

ACTIONS = {"alloc": "allocate", "free_completed": "free", "segment_alloc": "segment_alloc", "segment_free": "segment_free"}


def capture(name, steps, out):
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    # Recording first, so the model's own tensors are in the trace too.
    # No stacks: only the events are needed (stack capture also trips on checkpointed
    # recomputation in torch 2.11: "returned NULL without setting an exception").
    torch.cuda.memory._record_memory_history(context=None, max_entries=2_000_000)
    step = getattr(workloads, f"build_{name}")("cuda")
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    rows = 0
    path = os.path.join(out, f"{name}.csv.gz")
    with gzip.open(path, "wt", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Thread", "Time", "Action", "Pointer", "Size", "Stream"])
        for e in snap["device_traces"][0]:
            action = ACTIONS.get(e["action"])
            if action:
                w.writerow([0, e.get("time_us", rows), action, hex(e["addr"]), e["size"], 0])
                rows += 1
    reserved, allocated = torch.cuda.max_memory_reserved(), torch.cuda.max_memory_allocated()
    print(f"TRACE {name} steps {steps} rows {rows} pytorch-reserved/allocated {reserved / allocated:.3f} "
          f"peak-allocated {allocated} bytes {os.path.getsize(path)}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--only", default="moe,decode,unet,lora")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name in args.only.split(","):
        capture(name, args.steps, args.out)


if __name__ == "__main__":
    main()
