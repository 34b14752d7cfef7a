#!/usr/bin/env python3
"""rocmguard under real PyTorch on a real NVIDIA GPU: runs the programs beside this file with and
without librocmguard.so preloaded, compares what they print, and reports a table of figures
(stdout) and the same as JSON.

The checks run in parts that each fit one 10-minute call of the device tool (at most --budget
seconds, default 540) and each print a table with its own verdict (docs/gpu-check.md):

  part 1  the cap, reuse after free, model swapping under a cap, paths around the pool, two GPUs
  part 2  training across processes: losses, memory, step times as information; the shim's
          CPU work per step (bound)
  part 3  step time in one process, pooled / paused: GPT-2 small
  part 4  the same: ResNet-50
  part 5  the same: decode (launch-bound)
  --quick parts 1 and 2, smaller and without the bound: every correctness row, no step-time verdict

The programs (cap.py, train.py, reuse.py, swap.py, ddp.py, ...) are ordinary PyTorch programs
that know nothing of rocmguard; the checks (checks/*.py) set LD_PRELOAD and ROCMGUARD_* and read
the shim's stderr (its first-use line and its stats table at exit).

Usage: driver.py --lib PATH [--part N | --quick] [--out DIR] [--only 1,4] [--budget S] [--set KEY=VALUE]
Exit status: 0 PASS, 1 a row failed or a part ran out of time, 2 could not start, 3 nothing
failed but an in-process row is UNRESOLVED.
"""

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import report
from checks import cap, paths, reuse, step_time, swap, training, two_gpus
from runner import PART_BUDGET, Context
from shim_output import settings_env


@dataclass
class Part:
    title: str
    checks: list  # (the check numbers it writes rows for, the function)


CORRECTNESS = [({1}, cap.check), ({4}, reuse.check), ({5}, swap.check), ({7}, paths.check), ({6}, two_gpus.check)]
PARTS = {
    1: Part("part 1 of 5: the cap, reuse after free, model swapping under a cap, paths around the pool, two GPUs",
            CORRECTNESS),
    2: Part("part 2 of 5: training across processes (losses, memory, step times as information) and the "
            "shim's CPU work per step", [({2, 3}, training.check), ({2, 3}, step_time.check_cost_bound)]),
    3: Part("part 3 of 5: step time in one process, GPT-2 small", [({2}, step_time.in_process("gpt2"))]),
    4: Part("part 4 of 5: step time in one process, ResNet-50", [({2}, step_time.in_process("resnet50"))]),
    5: Part("part 5 of 5: step time in one process, decode", [({2}, step_time.in_process("decode"))]),
}
QUICK = Part("quick: parts 1 and 2 smaller, without the bound (no step-time verdict: parts 3 to 5 give it)",
             CORRECTNESS + [({2, 3}, training.check)])
EXIT = {"PASS": 0, "FAIL": 1, "INCOMPLETE": 1, "UNRESOLVED": 3}


def arguments(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lib", default="target/release/librocmguard.so")
    p.add_argument("--part", type=int, choices=sorted(PARTS), help="one part (default: all of them, in turn)")
    p.add_argument("--quick", action="store_true", help="parts 1 and 2, smaller, in one call")
    p.add_argument("--out", default=None, help="where the JSON and the logs go (default: $OUT, else .)")
    p.add_argument("--only", default=None, help="comma-separated check numbers (3 comes with 2)")
    p.add_argument("--budget", type=float, default=PART_BUDGET, help=f"seconds per part (default {PART_BUDGET})")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a rocmguard setting for every run under the shim (vmm=0 sets ROCMGUARD_VMM=0); repeatable")
    args = p.parse_args(argv)
    if args.part and args.quick:
        p.error("--part and --quick: one or the other")
    return args


def main(argv=None, launcher=None, machine=report.machine, out=None):
    """launcher and machine: the tests' fake GPU; out: where the tables go (stdout)."""
    out = out or sys.stdout
    say = lambda line="": print(line, file=out, flush=True)  # noqa: E731
    args = arguments(argv)
    try:
        settings = settings_env(args.set)
    except ValueError as e:
        print(f"gpu-check: {e}", file=sys.stderr)
        return 2
    if not Path(args.lib).is_file():
        print(f"gpu-check: {args.lib} does not exist (build it with `cargo build --release`)", file=sys.stderr)
        return 2

    if args.quick:
        chosen = {"quick": QUICK}
    else:
        chosen = {n: PARTS[n] for n in ([args.part] if args.part else sorted(PARTS))}
    if args.only:
        wanted = {int(x) for x in args.only.split(",")}
        chosen = {k: Part(p.title, [c for c in p.checks if c[0] & wanted]) for k, p in chosen.items()}
        chosen = {k: p for k, p in chosen.items() if p.checks}
        if not chosen:
            print(f"gpu-check: --only {args.only}: no such check in the parts asked for", file=sys.stderr)
            return 2
    if len(chosen) > 1:
        say(f"gpu-check: {len(chosen)} parts in turn, up to {args.budget:.0f} s each; through the device tool "
            "(10 minutes a call) run one a call: --part N")
    out_dir = Path(args.out or os.environ.get("OUT") or ".")
    out_dir.mkdir(parents=True, exist_ok=True)

    meta, verdicts = None, {}
    for key, part in chosen.items():
        name = key if key == "quick" else f"part{key}"
        ctx = Context(args.lib, args.quick, out_dir / "gpu-check-logs" / name, args.budget,
                      launcher=launcher, settings=settings)
        ctx.progress = say
        json_path = out_dir / f"gpu-check-{name}.json"
        ctx.on_change = lambda: report.save(ctx, json_path, part.title)
        if meta is None:  # the first part's time includes the probe
            meta = machine(ctx)
            probe = meta["probe"]
            say(f"gpu-check: {meta.get('nvidia_smi') or 'no nvidia-smi output'}; torch {probe.get('torch')}, "
                f"CUDA {probe.get('cuda')}; libcudart {probe.get('libcudart')}; {len(chosen)} part(s)")
        ctx.meta = meta
        say(f"\n== {part.title}")
        if not meta["probe"].get("available"):
            ctx.row(0, "PyTorch sees a CUDA device", "FAIL", f"probe: {meta['probe']}")
        else:
            for numbers, check in part.checks:
                try:
                    check(ctx)
                except Exception as e:  # a bug here must not cost the other checks' figures
                    ctx.row(min(numbers), f"{check.__module__}.{check.__name__}", "FAIL",
                            f"driver error: {type(e).__name__}: {e}")
        report.save(ctx, json_path, part.title)
        say()
        say(report.table(ctx, part.title))
        say(f"JSON: {json_path}\nlogs: {ctx.logs}")
        verdicts[name] = report.overall(ctx.rows)
        if not meta["probe"].get("available"):
            break
    if len(verdicts) > 1:
        say("\ngpu-check: " + ", ".join(f"{k} {v}" for k, v in verdicts.items()))
    return EXIT[report.overall([{"status": v} for v in verdicts.values()])]


if __name__ == "__main__":
    sys.exit(main())
