#!/usr/bin/env python3
"""Peak reserved / peak live on the GPU, per workload (workloads.py), for the allocator that
serves PyTorch: PyTorch's own cache (native, `max_memory_reserved / max_memory_allocated`), and
rocmguard as the only cache (`PYTORCH_NO_CUDA_MEMORY_CACHING=1` under the shim, the pool's own
`peak-resv/live` from its exit table, `ROCMGUARD_STATS=1`). Issue 15's target: rocmguard <= 1.05
on moe and decode.

Usage: fragmentation.py --lib librocmguard.so [--workloads moe,decode] [--steps 12]
Prints `FRAG <workload> <allocator> <ratio>` lines and a table.
"""

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(name, steps):
    import torch

    sys.path.insert(0, str(HERE))
    import workloads as w

    torch.manual_seed(0)
    step = w.BUILDERS[name](torch.device("cuda"))
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    reserved, allocated = torch.cuda.max_memory_reserved(), torch.cuda.max_memory_allocated()
    if allocated:
        print(f"TORCH {reserved / allocated:.4f}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lib", required=False)
    p.add_argument("--workloads", default="moe,decode")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child, args.steps)
        return 0
    base = {k: v for k, v in os.environ.items() if not k.startswith("ROCMGUARD_") and k != "LD_PRELOAD"}
    base.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    failed = False
    print(f"{'workload':<10} {'PyTorch cache':>14} {'rocmguard':>10}  (peak reserved / peak live; target rocmguard <= 1.05)")
    for name in args.workloads.split(","):
        cmd = [sys.executable, __file__, "--child", name, "--steps", str(args.steps)]
        native = subprocess.run(cmd, env=base, capture_output=True, text=True, timeout=300)
        torch_ratio = re.search(r"^TORCH (\S+)", native.stdout, re.M)
        env = dict(base, LD_PRELOAD=args.lib, PYTORCH_NO_CUDA_MEMORY_CACHING="1", ROCMGUARD_STATS="1")
        shim = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        # The exit table's device row: ... peak-resv/live is the column ending in "x".
        row = re.search(r"^\s*dev\d+\s.*?\s(\d+\.\d+)x\s", shim.stderr, re.M)
        t = float(torch_ratio.group(1)) if torch_ratio else None
        r = float(row.group(1)) if row else None
        failed |= r is None or r > 1.05
        for who, v in (("pytorch", t), ("rocmguard", r)):
            print(f"FRAG {name} {who} {v if v is not None else 'none'}")
        print(f"{name:<10} {t if t else float('nan'):14.3f} {r if r else float('nan'):10.3f}"
              + ("" if r else f"  (no table: exit {shim.returncode} {shim.stderr[-300:]})"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
