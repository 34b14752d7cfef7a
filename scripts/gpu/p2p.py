#!/usr/bin/env python3
"""Pooled tensors on GPU 0 copied to GPU 1 and back (P2P), compared with CPU copies: what
rocmguard's virtual segments must allow as the runtime's own allocations do (issue 14). Tensors
of 4 KiB to 40 MiB, taken at offsets inside larger allocations so they sit at varied places in
the pool. Knows nothing of rocmguard. Prints `CHECK p2p intact N wrong N peer 0|1`; exit 1 on
any wrong tensor. Needs two GPUs.
"""

import sys

import torch


def main():
    if torch.cuda.device_count() < 2:
        print("CHECK p2p intact 0 wrong 0 peer 0 (one GPU)")
        return 0
    peer = int(torch.cuda.can_device_access_peer(1, 0))
    g = torch.Generator().manual_seed(0)
    intact = wrong = 0
    keep = []
    for size in (4 << 10, 64 << 10, 1 << 20, 3 << 20, 9 << 20, 40 << 20):
        for offset in (0, size // 2 + 8, 2 * size):
            host = torch.randint(0, 255, (size,), dtype=torch.uint8, generator=g)
            big = torch.empty(3 * size + 64, dtype=torch.uint8, device="cuda:0")
            src = big[offset : offset + size]
            src.copy_(host)
            there = src.to("cuda:1")  # GPU 0 -> GPU 1
            back = torch.empty_like(src)
            back.copy_(there)  # GPU 1 -> GPU 0
            torch.cuda.synchronize(0)
            torch.cuda.synchronize(1)
            ok = torch.equal(there.cpu(), host) and torch.equal(back.cpu(), host)
            intact += ok
            wrong += not ok
            keep.append(big)  # held, so later tensors land elsewhere in the pool
    print(f"CHECK p2p intact {intact} wrong {wrong} peer {peer}", flush=True)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
