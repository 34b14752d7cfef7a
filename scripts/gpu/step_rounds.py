#!/usr/bin/env python3
"""Step time of one workload under PyTorch's cache and under the shim with several settings, in
rounds of processes run one at a time, each round in a rotated order (issue 24's step-time
criterion, more than two kinds of process in one call).

Each arm is `NAME:VAR=VALUE;VAR=VALUE` (environment of the shim's processes, with PyTorch's
cache off under `LD_PRELOAD=--lib`; `NAME:` alone is the shim as configured). Per round each
arm's figure over PyTorch's of the same round, then the median of the rounds with its
distribution-free 95% interval (corpus_check.median_interval), for three statistics: the
ratio of median steps after the first (MEDTIME, as corpus_check), the ratio of the sums of the
steps after the first `--skip` (what a user waits for, PyTorch's warm-up left out), and the
ratio of the median steps after the first `--skip`. The shim's exit table of each arm's first
process says what the pool did.

Usage:
  python3 scripts/gpu/step_rounds.py --lib target/gpu/librocmguard.so [--workload seg_infer]
      [--steps 40] [--skip 10] [--budget 470] [--json FILE] default: "slack25:ROCMGUARD_PEAK_SLACK=25%"
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import capture_traces  # noqa: E402
import corpus_check  # noqa: E402


def arm_env(lib, settings):
    """PyTorch's cache on (`settings` None), or the shim with PyTorch's cache off and `settings`."""
    if settings is None:
        return corpus_check.clean_env()
    return dict(corpus_check.shim_env(lib), **settings)


def parse_arm(spec):
    name, _, rest = spec.partition(":")
    settings = dict(item.split("=", 1) for item in rest.split(";") if item)
    return name, settings


def run_one(argv, env):
    """(step seconds, the shim's exit table row or "") of one process, or None."""
    p = subprocess.run(argv, env=env, capture_output=True, text=True)
    text = p.stdout + p.stderr
    r = capture_traces.result_of(text)
    if not r:
        print(f"no result (exit {p.returncode}): {text[-1500:]}", flush=True)
        return None
    rows = [line for line in text.splitlines() if line.startswith("dev")]
    return r["step_s"], rows[-1] if rows else ""


def figures(mine, torch, skip):
    """One round's three ratios of an arm's steps to PyTorch's (corpus_check's arithmetic)."""
    return dict(
        medtime=corpus_check.pair_ratio_of_medians(mine, torch),
        sum_after_skip=corpus_check.pair_ratio(mine, torch, skip),
        median_after_skip=corpus_check.pair_ratio_of_medians(mine, torch, skip),
    )


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lib", required=True)
    p.add_argument("--workload", default="seg_infer")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--skip", type=int, default=10, help="steps left out of the *_after_skip figures")
    p.add_argument("--budget", type=float, default=470.0, help="seconds; rounds start while there is time")
    p.add_argument("--json", help="every process's steps and every round's figures")
    p.add_argument("arms", nargs="+", metavar="NAME:VAR=VALUE;...")
    args = p.parse_args()
    if args.skip < 1 or args.skip >= args.steps:
        p.error("--skip must be at least 1 and below --steps")
    arms = {"torch": None}
    for spec in args.arms:
        name, settings = parse_arm(spec)
        if not name or name in arms:
            p.error(f"arm {spec!r}: give each a new name")
        arms[name] = settings
    argv = corpus_check.argv(args.workload) + ["--steps", str(args.steps)]
    names = list(arms)
    steps, tables = {n: {} for n in names}, {}
    start, r = time.monotonic(), 0
    while time.monotonic() - start < args.budget:
        order = names[r % len(names):] + names[: r % len(names)]
        for n in order:
            got = run_one(argv, arm_env(args.lib, arms[n]))
            if got:
                steps[n][r], table = got
                tables.setdefault(n, table)
        print(f"round {r}: " + " ".join(f"{n}={statistics.median(steps[n][r][args.skip:]) * 1e3:.2f}ms"
                                         for n in order if r in steps[n]), flush=True)
        r += 1
    out = dict(workload=args.workload, steps=args.steps, skip=args.skip, arms=arms, rounds={})
    print(f"\n{args.workload}: each arm over PyTorch's cache, median of the rounds [95% interval]")
    for n in names[1:]:
        rounds = [figures(steps[n][k], steps["torch"][k], args.skip) for k in steps[n] if k in steps["torch"]]
        out["rounds"][n] = rounds
        cells = []
        for key in ("medtime", "sum_after_skip", "median_after_skip"):
            xs = [f[key] for f in rounds]
            ci = corpus_check.median_interval(xs) if xs else None
            interval = f"[{ci[0]:.4f}, {ci[1]:.4f}]" if ci else "[too few rounds]"
            cells.append(f"{key} {statistics.median(xs):.4f} {interval}" if xs else f"{key} -")
        print(f"ARM {n:<12} rounds {len(rounds)}  " + "  ".join(cells))
        print(f"    {tables.get(n, '')}")
    if args.json:
        out["process_steps"] = {n: {str(k): v for k, v in s.items()} for n, s in steps.items()}
        Path(args.json).write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
