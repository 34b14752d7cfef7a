#!/usr/bin/env python3
"""Fills the GPU with 1 GiB tensors until PyTorch reports out of memory, then frees some and
carries on, and prints what torch said about the device's memory, as one JSON line.

Why: a program sizes itself from torch.cuda.mem_get_info() and
get_device_properties().total_memory, and a well-behaved one catches the out-of-memory error
and goes on with less. Whatever caps the memory must show the cap in both figures, refuse past
it with an error PyTorch recognises, and keep serving within it afterwards. This program only
observes; it knows nothing of what imposes the cap.
"""

import argparse
import json
import sys
import time

import torch

RESULT_TAG = "GPUCHECK-RESULT"
MIB = 1 << 20
# torch.OutOfMemoryError since 2.5; torch.cuda.OutOfMemoryError before.
OOM_TYPES = (getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError),)


def emit(result):
    print(RESULT_TAG, json.dumps(result), flush=True)


def is_oom(error):
    """PyTorch's caching allocator raises OutOfMemoryError; with
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 its cudaMalloc goes through C10_CUDA_CHECK and an
    out-of-memory comes back as a RuntimeError subclass saying "out of memory"."""
    return isinstance(error, OOM_TYPES) or "out of memory" in str(error).lower()


def describe(error):
    lines = str(error).strip().splitlines()
    return {"type": type(error).__name__, "message": lines[0][:300] if lines else ""}


def try_alloc(nbytes, value):
    """A filled tensor of nbytes, or the out-of-memory error (anything else propagates)."""
    try:
        t = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        t.fill_(value)
        return t, None
    except RuntimeError as e:
        if not is_oom(e):
            raise
        return None, describe(e)


def intact(held):
    """Each tensor still holds the value it was filled with (nobody else wrote into it).
    Checked on the host: at the cap a reduction on the GPU has no room for its scratch."""
    torch.cuda.synchronize()
    for t, v in held:
        host = t.cpu()
        if int(host.min()) != v or int(host.max()) != v:
            return False
    return True


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--chunk-mib", type=int, default=1024, help="size of the big tensors")
    p.add_argument("--piece-mib", type=int, default=64, help="size of the small tensors")
    args = p.parse_args(argv)
    chunk, piece = args.chunk_mib * MIB, args.piece_mib * MIB
    started = time.perf_counter()

    torch.cuda.init()
    device = torch.cuda.current_device()
    free0, total = torch.cuda.mem_get_info(device)
    props_total = torch.cuda.get_device_properties(device).total_memory
    # Never ask for more than the device says it has, plus two chunks to step past it.
    limit = total + 2 * chunk
    result = {
        "gpu": torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "mem_get_info_start": [free0, total],
        "props_total": props_total,
        "chunk": chunk,
        "piece": piece,
    }

    # 1. Big tensors until the first out-of-memory.
    held, oom = [], None
    while (len(held) + 1) * chunk <= limit:
        t, oom = try_alloc(chunk, len(held) % 250 + 1)
        if t is None:
            break
        held.append((t, len(held) % 250 + 1))
    result["first_oom"] = oom
    result["held_at_first_oom"] = len(held) * chunk
    result["mem_get_info_at_oom"] = list(torch.cuda.mem_get_info(device))

    # 2. Free two, hand the cache back, allocate two again: must succeed.
    n = min(2, len(held))
    del held[len(held) - n :]
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    realloc_error = None
    for _ in range(n):
        value = len(held) % 250 + 1
        t, realloc_error = try_alloc(chunk, value)
        if t is None:
            break
        held.append((t, value))
    result["freed_and_reallocated"] = n
    result["realloc_error"] = realloc_error

    # 3. The cap still holds after the recovery: one more big tensor is refused again.
    extra, second_oom = try_alloc(chunk, 255)
    result["second_oom"] = second_oom
    result["extra_allocated"] = extra is not None
    del extra
    result["intact"] = intact(held)

    # 4. All freed; small tensors until out-of-memory: how much of the cap is usable.
    held.clear()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    small, fine_oom = [], None
    while (len(small) + 1) * piece <= limit:
        t, fine_oom = try_alloc(piece, len(small) % 250 + 1)
        if t is None:
            break
        small.append((t, len(small) % 250 + 1))
    result["fine_oom"] = fine_oom
    result["held_at_fine_oom"] = len(small) * piece
    result["fine_intact"] = intact(small)
    result["mem_get_info_full"] = list(torch.cuda.mem_get_info(device))
    small.clear()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    result["mem_get_info_end"] = list(torch.cuda.mem_get_info(device))
    result["wall_s"] = time.perf_counter() - started
    emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
