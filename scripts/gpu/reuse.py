#!/usr/bin/env python3
"""Kernels on a side stream write into buffers that the program frees while those kernels are
still queued; it then allocates the same sizes at once on the default stream and overwrites
them. Repeated many times, every result is checked.

Why: with PYTORCH_NO_CUDA_MEMORY_CACHING=1 each `del` of a CUDA tensor is a cudaFree, with no
record_stream bookkeeping. The native cudaFree waits for the device, so this is safe; an
allocator that handed such a block out again before the side stream was done with it would let
two streams write the same memory, and the fill values or the side stream's result below would
come out wrong. The program prints how often a new tensor landed on a just-freed address, so
the reader can see the reuse path was taken.

With --stream default the chain runs on the default stream too and the program never makes a
stream: all its work runs in one order, which is when rocmguard hands a freed block out again
at once; the results must come out right all the same.
"""

import argparse
import json
import sys
import time

import torch

RESULT_TAG = "GPUCHECK-RESULT"


def emit(result):
    print(RESULT_TAG, json.dumps(result), flush=True)


def chain(a, w, bufs, out, steps):
    """out = a @ w @ w ... (steps + 1 products), through the two buffers in turn."""
    src = a
    for k in range(steps):
        dst = bufs[k % 2]
        torch.mm(src, w, out=dst)
        src = dst
    torch.mm(src, w, out=out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--n", type=int, default=4096, help="square float32 matrices of n x n")
    p.add_argument("--chain", type=int, default=8, help="products queued on the side stream")
    p.add_argument("--stream", choices=("side", "default"), default="side", help="where the chain runs")
    args = p.parse_args(argv)
    started = time.perf_counter()
    dev = torch.device("cuda")
    n = args.n

    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(dev)
    w = (torch.randn(n, n, generator=gen) / n**0.5).to(dev)  # keeps the chain's scale
    # The reference, on the default stream, synchronized.
    ref = torch.empty(n, n, device=dev)
    chain(a, w, (torch.empty(n, n, device=dev), torch.empty(n, n, device=dev)), ref, args.chain)
    torch.cuda.synchronize()
    ref_scale = ref.abs().max().item()

    main_stream = torch.cuda.current_stream()
    side = torch.cuda.Stream() if args.stream == "side" else main_stream
    bad_fill = bad_result = reused = 0
    failures = []
    worst = 0.0
    for i in range(args.iters):
        side.wait_stream(main_stream)
        with torch.cuda.stream(side):
            b1 = torch.empty(n, n, device=dev)
            b2 = torch.empty(n, n, device=dev)
            res = torch.empty(n, n, device=dev)
            chain(a, w, (b1, b2), res, args.chain)
        freed = {b1.data_ptr(), b2.data_ptr()}
        del b1, b2  # freed while the side stream is still working on them

        # At once, on the default stream: the same sizes, overwritten.
        v1, v2 = 1.0e4 + i, -1.0e4 - i
        n1 = torch.empty(n, n, device=dev)
        n1.fill_(v1)
        n2 = torch.empty(n, n, device=dev)
        n2.fill_(v2)
        reused += (n1.data_ptr() in freed) + (n2.data_ptr() in freed)
        torch.cuda.synchronize()

        fill_ok = bool((n1 == v1).all()) and bool((n2 == v2).all())
        err = ((res - ref).abs().max().item()) / ref_scale
        worst = max(worst, err)
        if not fill_ok:
            bad_fill += 1
        if not err <= 1e-3:  # also catches NaN
            bad_result += 1
        if (not fill_ok or not err <= 1e-3) and len(failures) < 5:
            failures.append({"iter": i, "fill_ok": fill_ok, "result_rel_err": err})
        del n1, n2, res

    emit(
        {
            "gpu": torch.cuda.get_device_name(dev),
            "torch": torch.__version__,
            "iters": args.iters,
            "n": n,
            "chain": args.chain,
            "stream": args.stream,
            "bad_fill": bad_fill,
            "bad_result": bad_result,
            "worst_rel_err": worst,
            "reused_addresses": reused,
            "failures": failures,
            "wall_s": time.perf_counter() - started,
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
