#!/usr/bin/env python3
"""The trace corpus replayed through some policies: per trace peak reserved / peak live, modelled
driver ms and min capacity / peak live; then per half (data/traces/corpus.tsv) the median, the
max, how many traces are over 1.05, and the driver ms in all.

Usage: python3 scripts/corpus_summary.py [--rocmguard PATH] POLICY...
  e.g. python3 scripts/corpus_summary.py rocmguard rocmguard:piece_size=16MiB pytorch
POLICY is what `rocmguard replay --policy` takes (default: rocmguard pytorch).
"""

import argparse
import json
import statistics
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rocmguard", default=str(ROOT / "target/release/rocmguard"))
    p.add_argument("policies", nargs="*", default=["rocmguard", "pytorch"])
    args = p.parse_args()
    halves = {}
    for line in (ROOT / "data/traces/corpus.tsv").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, half = line.split("\t")[:2]
            halves[name] = half
    cmd = [args.rocmguard, "replay", "--json"]
    for policy in args.policies:
        cmd += ["--policy", policy]
    cmd += [str(ROOT / f"data/traces/{t}.csv.gz") for t in halves]
    out = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    rows = {}
    print(f"{'trace':17} {'half':6} " + " ".join(f"{p[:27]:>27}" for p in args.policies))
    for t in out["traces"]:
        cells = []
        for r in t["policies"]:
            cap = r["min_capacity"] / r["peak_live"] if r.get("min_capacity") else float("nan")
            cells.append(f"{r['ratio']:.3f} {r['driver_ms']:7.1f} ms m{cap:.3f}".rjust(27))
            rows.setdefault(r["policy"], []).append((halves[t["trace"]], r["ratio"], r["driver_ms"]))
        print(f"{t['trace']:17} {halves[t['trace']]:6} " + " ".join(cells))
    print("\n(ratio, modelled driver ms, min capacity / peak live)\n")
    for policy, r in rows.items():
        for half in ("tune", "report"):
            ratios = [x[1] for x in r if x[0] == half]
            ms = sum(x[2] for x in r if x[0] == half)
            print(f"{policy[:30]:30} {half:6} median {statistics.median(ratios):.3f} max {max(ratios):.3f} "
                  f"over 1.05: {sum(x > 1.05 for x in ratios):2}  driver ms {ms:7.1f}")


if __name__ == "__main__":
    main()
