#!/usr/bin/env python3
"""Real-GPU checks that memory paths around rocmguard behave as without it (issues 14 and 17).

Each check starts plain PyTorch programs (this file with --role) under LD_PRELOAD=librocmguard.so
and prints one line `CHECK <name> PASS|FAIL <figures>`; the exit status is 1 when one failed.

  expandable  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True under a 4 GiB cap: a 2 GiB tensor
              shows in torch.cuda.mem_get_info, a 6 GiB one raises torch.OutOfMemoryError, and
              the process then still allocates 1 GiB.
  group       ROCMGUARD_GROUP: two processes under one 4 GiB cap; while the first holds 3 GiB the
              second is refused 2 GiB (torch.OutOfMemoryError) and sees at most 1 GiB free; after
              the first exits the second gets its 2 GiB.

Usage: transparency.py [--lib target/release/librocmguard.so] [--only expandable,group]
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
GiB = 1 << 30


def role_expandable():
    import torch

    a = torch.empty(2 * GiB, dtype=torch.uint8, device="cuda")
    free, total = torch.cuda.mem_get_info()
    counted = free <= 2 * GiB + 256 * (1 << 20)
    try:
        b = torch.empty(6 * GiB, dtype=torch.uint8, device="cuda")
        refused = False
        del b
    except torch.OutOfMemoryError:
        refused = True
    c = torch.ones(GiB, dtype=torch.uint8, device="cuda")
    # min, not sum: a uint8 sum widens to int64 and would need 8 GiB of its own.
    after = int(c.min().item()) == 1
    del a
    ok = counted and refused and after
    print(f"free {free / GiB:.2f} of {total / GiB:.2f} GiB with 2 GiB held; 6 GiB refused: {refused}; 1 GiB after: {after}")
    return 0 if ok else 1


def role_hold(ready, release):
    import torch

    t = torch.ones(3 * GiB, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    Path(ready).write_text("held")
    deadline = time.time() + 60
    while not Path(release).exists() and time.time() < deadline:
        time.sleep(0.05)
    del t
    return 0


def role_want(ready, release):
    import torch

    deadline = time.time() + 60
    while not Path(ready).exists() and time.time() < deadline:
        time.sleep(0.05)
    free, _ = torch.cuda.mem_get_info()
    try:
        x = torch.empty(2 * GiB, dtype=torch.uint8, device="cuda")
        refused = False
        del x
    except torch.OutOfMemoryError:
        refused = True
    Path(release).write_text("go")
    start = time.time()
    got = None
    while time.time() - start < 10:
        try:
            x = torch.ones(2 * GiB, dtype=torch.uint8, device="cuda")
            got = time.time() - start
            break
        except torch.OutOfMemoryError:
            time.sleep(0.1)
    print(f"free while held {free / GiB:.2f} GiB; 2 GiB refused while held: {refused}; got it {got if got is None else round(got, 2)} s after release")
    return 0 if refused and free <= 1 * GiB + 64 * (1 << 20) and got is not None else 1


def run_check(name, lib):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMGUARD_") and k != "PYTORCH_CUDA_ALLOC_CONF"}
    env.update({"LD_PRELOAD": lib, "ROCMGUARD_VRAM_LIMIT": "4GiB"})
    me = [sys.executable, str(Path(__file__).resolve())]
    if name == "expandable":
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        p = subprocess.run(me + ["--role", "expandable"], env=env, capture_output=True, text=True, timeout=180)
        return p.returncode == 0, (p.stdout.strip() or p.stderr.strip()[-600:]) + f" (exit {p.returncode})"
    if name == "group":
        import tempfile

        d = Path(tempfile.mkdtemp())
        ready, release = str(d / "ready"), str(d / "release")
        env["ROCMGUARD_GROUP"] = f"gpucheck{os.getpid()}"
        holder = subprocess.Popen(me + ["--role", "hold", ready, release], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        want = subprocess.run(me + ["--role", "want", ready, release], env=env, capture_output=True, text=True, timeout=180)
        holder.wait(timeout=120)
        return want.returncode == 0, (want.stdout.strip() or want.stderr.strip()[-600:]) + f" (exit {want.returncode})"
    raise SystemExit(f"unknown check {name}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lib", default=str(HERE.parent.parent / "target/release/librocmguard.so"))
    p.add_argument("--only", default="expandable,group")
    p.add_argument("--role", nargs="+", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.role:
        role, rest = args.role[0], args.role[1:]
        return {"expandable": role_expandable, "hold": role_hold, "want": role_want}[role](*rest)
    failed = 0
    for name in args.only.split(","):
        ok, text = run_check(name, str(Path(args.lib).resolve()))
        failed += not ok
        print(f"CHECK {name} {'PASS' if ok else 'FAIL'} {text}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
