#!/usr/bin/env python3
"""torch.multiprocessing sharing of CUDA tensors (cudaIpcGetMemHandle underneath), as a user's
program does it: a spawned consumer receives tensors of 4 KiB to 64 MiB, many of them slices at
varied offsets of bigger tensors (up to 192 MiB: past 128 MiB a block lies on several of the
pool's pieces), and compares each with a CPU copy sent beside it.

Prints `CHECK ipc intact N refused N failed-to-open N wrong N` and exits 0 when no tensor
arrived with wrong data (a refusal is a clean error in the producer, a failure to open one in
the consumer; wrong data is the failure that must never happen), 1 otherwise. Run it with and
without LD_PRELOAD=librocmguard.so; `--opener-without-shim` starts the consumer without it.
"""

import os
import sys

import torch
import torch.multiprocessing as mp

SIZES = [4 << 10, 64 << 10, 1 << 20, 3 << 20, 10 << 20, 40 << 20, 64 << 20]


def consumer(queue, results):
    intact = wrong = failed = 0
    while True:
        try:
            item = queue.get()
        except RuntimeError:  # the handle did not open here: a clean error
            failed += 1
            continue
        if item is None:
            break
        gpu, cpu = item
        if torch.equal(gpu.cpu(), cpu):
            intact += 1
        else:
            wrong += 1
        del gpu
    results.put((intact, wrong, failed))


def main():
    mp.set_start_method("spawn")
    if "--opener-without-shim" in sys.argv:
        # The consumer starts without LD_PRELOAD: it must get a clean error, never wrong data.
        os.environ.pop("LD_PRELOAD", None)
    # SimpleQueue pickles in put(), so a refused export raises here, not in a feeder thread.
    queue, results = mp.SimpleQueue(), mp.Queue()
    proc = mp.Process(target=consumer, args=(queue, results))
    proc.start()
    refused, keep = 0, []
    gen = torch.Generator().manual_seed(0)
    for i, size in enumerate(SIZES * 3):
        base = torch.randint(0, 255, (size * 3,), dtype=torch.uint8, generator=gen).cuda()
        offset = [0, size // 2 + 256 * i, size][i % 3]
        t = base[offset : offset + size]
        try:
            queue.put((t, t.cpu()))
            keep.append(base)  # the producer must keep shared memory alive until read
        except RuntimeError as e:
            refused += 1
            print(f"refused {size} at offset {offset}: {str(e).splitlines()[0][:120]}", flush=True)
    queue.put(None)
    intact, wrong, failed = results.get(timeout=120)
    proc.join(timeout=60)
    print(f"CHECK ipc intact {intact} refused {refused} failed-to-open {failed} wrong {wrong}", flush=True)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
