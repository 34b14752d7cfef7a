#!/usr/bin/env python3
"""The trace corpus replayed through some policies: per trace peak reserved / peak live, modelled
driver ms and min capacity / peak live; then per half (data/traces/corpus.tsv) the median, the
max, how many traces are over 1.05, and the driver ms and the synchronizes in all (those asked
for, and the frees that waited for the program's work: `replay --json`'s `syncs`). With
--steady, also the driver ms of each trace's second half (the whole trace's less its first
half's, replayed alone): what a run keeps paying once past its peak, the part of the driver time
a longer run multiplies. With --capacity F:live (or F:reserved), also each trace replayed on a
device of F times its peak live (or its peak reserved under that policy uncapped): the traces
some request fails on and the driver ms there, per half (a cap a program fits in).

Usage: python3 scripts/corpus_summary.py [--rocmguard PATH] [--steady] [--capacity F:BASE] POLICY...
  e.g. python3 scripts/corpus_summary.py rocmguard rocmguard:piece_size=16MiB pytorch
POLICY is what `rocmguard replay --policy` takes (default: rocmguard pytorch).
"""

import argparse
import gzip
import json
import statistics
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rocmguard", default=str(ROOT / "target/release/rocmguard"))
    p.add_argument("--steady", action="store_true", help="also the driver ms of each second half")
    p.add_argument("--capacity", type=capacity, metavar="F:BASE",
                   help="also replay on a device of F x each trace's peak live or peak reserved")
    p.add_argument("policies", nargs="*", default=["rocmguard", "pytorch"])
    args = p.parse_args()
    halves = {}
    for line in (ROOT / "data/traces/corpus.tsv").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, half = line.split("\t")[:2]
            halves[name] = half
    paths = [str(ROOT / f"data/traces/{t}.csv.gz") for t in halves]
    out = replay(args, paths)
    second = {}
    if args.steady:
        with tempfile.TemporaryDirectory() as tmp:
            firsts = [first_half(path, tmp) for path in paths]
            for w, f in zip(out["traces"], replay(args, firsts)["traces"]):
                for rw, rf in zip(w["policies"], f["policies"]):
                    second[(w["trace"], rw["policy"])] = rw["driver_ms"] - rf["driver_ms"]
    rows = {}
    width = 34 if args.steady else 27
    print(f"{'trace':17} {'half':6} " + " ".join(f"{p[:width]:>{width}}" for p in args.policies))
    for t in out["traces"]:
        cells = []
        for r in t["policies"]:
            cap = r["min_capacity"] / r["peak_live"] if r.get("min_capacity") else float("nan")
            tail = second.get((t["trace"], r["policy"]))
            steady = "" if tail is None else f" {tail:6.1f}"
            cells.append(f"{r['ratio']:.3f} {r['driver_ms']:7.1f} ms{steady} m{cap:.3f}".rjust(width))
            rows.setdefault(r["policy"], []).append(
                (halves[t["trace"]], r["ratio"], r["driver_ms"], tail or 0.0, r.get("syncs", 0)))
        print(f"{t['trace']:17} {halves[t['trace']]:6} " + " ".join(cells))
    print("\n(ratio, modelled driver ms" + (", of it in the second half" if args.steady else "")
          + ", min capacity / peak live)\n")
    for policy, r in rows.items():
        for half in ("tune", "report"):
            ratios = [x[1] for x in r if x[0] == half]
            ms = sum(x[2] for x in r if x[0] == half)
            tail = f"  second halves {sum(x[3] for x in r if x[0] == half):7.1f}" if args.steady else ""
            syncs = sum(x[4] for x in r if x[0] == half)
            print(f"{policy[:30]:30} {half:6} median {statistics.median(ratios):.3f} max {max(ratios):.3f} "
                  f"over 1.05: {sum(x > 1.05 for x in ratios):2}  driver ms {ms:7.1f}{tail}  syncs {syncs:4}")
    if args.capacity:
        capped(args, out, halves)


def capacity(text):
    """`F:live` or `F:reserved`, as (F, the key of `replay --json` that F multiplies)."""
    factor, _, base = text.partition(":")
    try:
        factor = float(factor)
    except ValueError:
        factor = 0.0
    if base not in ("live", "reserved") or not factor > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give F:live or F:reserved, e.g. 1.02:live")
    return factor, "peak_" + base


def capped(args, out, halves):
    """Each trace again on a device of the --capacity: per policy and half, the traces that fail
    (with their failed requests) and the driver ms of the capped runs."""
    factor, base = args.capacity
    print(f"\non a device of {factor} x each trace's {base.replace('_', ' ')}:")
    for i, policy in enumerate(args.policies):
        results = []
        for t in out["traces"]:
            r = t["policies"][i]
            cmd = [args.rocmguard, "replay", "--json", "--policy", policy,
                   "--capacity", str(int(r[base] * factor)), t["file"]]
            run = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
            results.append((t["trace"], run["traces"][0]["policies"][0]))
        for half in ("tune", "report"):
            rs = [(name, r) for name, r in results if halves[name] == half]
            failed = ", ".join(f"{name} {r['ooms']}" for name, r in rs if r["ooms"])
            print(f"{policy[:30]:30} {half:6} failing {sum(r['ooms'] > 0 for _, r in rs):2} of {len(rs)}"
                  f"  driver ms {sum(r['driver_ms'] for _, r in rs):7.1f}  ({failed or 'none'})")


def replay(args, paths):
    """`rocmguard replay --json` of every policy over `paths`."""
    cmd = [args.rocmguard, "replay", "--json"]
    for policy in args.policies:
        cmd += ["--policy", policy]
    return json.loads(subprocess.run(cmd + paths, capture_output=True, text=True, check=True).stdout)


def first_half(path, tmp):
    """The first half of the trace's rows (its header kept), as a file in tmp. Replaying it
    leaves the pool as the whole trace's replay has it at that row: the replay is deterministic."""
    lines = gzip.open(path, "rt").read().splitlines(True)
    out = Path(tmp) / Path(path).name
    with gzip.open(out, "wt") as f:
        f.writelines(lines[: len(lines) // 2])
    return str(out)


if __name__ == "__main__":
    main()
