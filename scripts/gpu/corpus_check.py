#!/usr/bin/env python3
"""The corpus on the GPU with rocmguard as the only cache (issue 24's GPU criterion).

For every workload of data/traces/corpus.tsv that runs here, one process with PyTorch's cache
off (`PYTORCH_NO_CUDA_MEMORY_CACHING=1`) under `LD_PRELOAD=<librocmguard.so>`
(`ROCMGUARD_STATS=1`): rocmguard's peak reserved / peak live from its exit table, beside
PyTorch's own figures of the same workload (data/traces/gpu_figures.json). These run side by
side (each process measures its own peaks). Then step time, rocmguard with the cache off
against PyTorch's cache, in interleaved pairs of processes run one at a time (order alternating
within pairs; each workload's first pair before any workload's second): per pair the time of
the steps after the first (the same shapes in both, as the seeds are fixed), then the median of
the pairs' ratios per workload with its 95% interval; beside it (MEDTIME) the same of the ratio
of the median steps after the first, which a step disturbed now and then moves less
(seg_infer's per-process median step varies by about 0.5% where its sum varies by 5%:
docs/benchmarks.md, session 16).
With `--tune-confs FILE`, each line `WORKLOAD CONF [PREDICTED_BYTES]` runs that workload with
PyTorch's cache on and `PYTORCH_CUDA_ALLOC_CONF=CONF` (`default` for none; a `pytorch:` or
`PYTORCH_HIP_ALLOC_CONF=` prefix is dropped, so `rocmguard tune`'s line pastes as it is) and
prints the measured peak reserved, against the prediction when given; these run with the first
batch.

Usage:
  python3 scripts/gpu/corpus_check.py --lib target/gpu/librocmguard.so [--jobs 8]
      [--pairs 2] [--pair-workloads gpt2m_accum,moe_top2,vit_multires] [--pair-steps N]
      [--pair-skip 1] [--only a,b] [--tune-confs FILE] [--budget 510] [--json FILE] [--logs DIR]
      [--set KEY=VALUE]
      [--at-own-peak]
With `--at-own-peak`, each workload runs once more under the shim, capped at the peak reserved
its first run printed (plus the print's precision), side by side: a cap the program fits in must
not fail it; a capped run refused because the program's own live memory passed the cap (the
shim's refusal says so: a run whose kernels took other workspaces than the first) is reported as
outgrowing it, not as a failure. Exit status 1 when a workload gave no exit table or its ratio is
over 1.05, or a capped run failed otherwise.
"""

import argparse
import json
import math
import os
import re
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
import capture_traces  # noqa: E402
import shim_output  # noqa: E402

TARGET = 1.05
# Traces whose program is a workload of another name, and those this script cannot run.
WORKLOAD_OF = {"gpt2_train": "gpt2", "resnet_train": "resnet50"}
NOT_RUN = {
    "gpt2_nocache": "the same program as gpt2_train",
    "model_swap_video": "a public trace whose program is not in this repository",
}


def corpus():
    """(trace, half) of data/traces/corpus.tsv."""
    out = []
    for line in (ROOT / "data/traces/corpus.tsv").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            cols = line.split("\t")
            out.append((cols[0], cols[1]))
    return out


def pytorch_figures():
    """trace -> {default, expandable_segments, recorded: {ratio, ...}} measured at capture."""
    path = ROOT / "data/traces/gpu_figures.json"
    return json.loads(path.read_text())["workloads"] if path.exists() else {}


def clean_env(**extra):
    """The environment with no rocmguard or preload settings of the caller's, plus extra."""
    env = capture_traces.child_env(**extra)
    for k in [k for k in env if k.startswith("ROCMGUARD_") or k == "LD_PRELOAD"]:
        del env[k]
    env.update(extra)
    return env


# `--set KEY=VALUE`: rocmguard settings for every run under the shim, as ROCMGUARD_KEY=VALUE.
SETTINGS = {}


def shim_env(lib):
    return clean_env(LD_PRELOAD=str(Path(lib).resolve()), PYTORCH_NO_CUDA_MEMORY_CACHING="1", ROCMGUARD_STATS="1",
                     **SETTINGS)


def argv(workload):
    return [sys.executable, str(HERE / "capture_traces.py"), ".", "--one", workload, "--mode", "measure"]


def shim_row(text):
    """The exit table's device row with the highest peak reserved (helper processes, such as
    Inductor's compile workers, print tables of their own), or None."""
    rows = [row for table in shim_output.parse_tables(text) for row in table.values()]
    return max(rows, key=lambda r: r["peak_reserved"], default=None)


def parse_conf(conf):
    for prefix in ("PYTORCH_HIP_ALLOC_CONF=", "PYTORCH_CUDA_ALLOC_CONF=", "pytorch:"):
        conf = conf[len(prefix) :] if conf.startswith(prefix) else conf
    return "" if conf in ("default", "pytorch") else conf


def read_tune_confs(path):
    """(workload, conf, predicted bytes or None) per line of FILE."""
    out = []
    for line in Path(path).read_text().splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        name = WORKLOAD_OF.get(words[0], words[0])
        out.append((name, parse_conf(words[1]) if len(words) > 1 else "", int(words[2]) if len(words) > 2 else None))
    return out


def memory_deadline(budget, pair_s, at_own_peak):
    """Seconds the memory runs may take (no run starts in the last 45 of them): the budget less
    the step-time pairs' `pair_s` (about 20 s a process) and, where a later phase needs it, 30 s
    for its start; at least 120. With nothing after them the runs have the whole budget: a
    budget of 150 once stopped starting them at 75 s and left two unrun (session 26)."""
    later = pair_s > 0 or at_own_peak
    return max(120.0, budget - pair_s - (30 if later else 0))


def memory(args, runnable, confs, deadline, logs):
    """The shim run of every workload and the --tune-confs runs, side by side."""
    tasks = [(f"shim.{w}", argv(w), shim_env(args.lib), ("shim", w, None)) for w in runnable]
    for i, (w, conf, predicted) in enumerate(confs):
        tasks.append((f"tune{i}.{w}", argv(w), clean_env(PYTORCH_CUDA_ALLOC_CONF=conf) if conf else clean_env(),
                      ("tune", w, (conf, predicted))))
    return capture_traces.run_processes(tasks, args.jobs, deadline, logs)


def pair_order(workloads, pairs):
    """The processes of the pairs, in the order they run: (workload, pair, who). Pair k of every
    workload before pair k + 1 of any, so a budget that runs out leaves each workload its first
    pairs rather than some workloads all of theirs and the rest none; within a pair the order
    alternates."""
    return [(w, k, who) for k in range(pairs) for w in workloads
            for who in (("torch", "shim") if k % 2 == 0 else ("shim", "torch"))]


def step_pairs(args, deadline, logs):
    """Interleaved processes, one at a time: (workload, pair) -> {who: [step seconds]}."""
    tasks = []
    steps = ["--steps", str(args.pair_steps)] if args.pair_steps else []
    for w, k, who in pair_order(args.pair_workloads.split(","), args.pairs):
        env = shim_env(args.lib) if who == "shim" else clean_env()
        tasks.append((f"time.{w}.{k}.{who}", argv(w) + steps, env, (w, k, who)))
    times = {}
    for (_, _, _, (w, k, who)), text, rc, _ in capture_traces.run_processes(tasks, 1, deadline, logs):
        r = capture_traces.result_of(text)
        if r:
            times.setdefault((w, k), {})[who] = r["step_s"]
        else:
            print(f"TIME {w} pair {k} {who}: no result (exit {rc}): {shim_output.tail(text, 3)}", flush=True)
    return times


def pair_ratio(shim, torch, skip=1):
    """The shim's time over PyTorch's for the steps both ran after the first `skip`: step i has
    the same shapes in both processes (fixed seeds), so the sums compare like with like."""
    n = min(len(shim), len(torch))
    return sum(shim[skip:n]) / sum(torch[skip:n]) if n > skip else shim[0] / torch[0]


def pair_ratio_of_medians(shim, torch, skip=1):
    """The shim's median step over PyTorch's, of the steps both ran after the first `skip`."""
    n = min(len(shim), len(torch))
    return statistics.median(shim[skip:n]) / statistics.median(torch[skip:n]) if n > skip else shim[0] / torch[0]


def median_interval(values):
    """The median's distribution-free 95% interval: the order statistics k and n + 1 - k, k the
    largest with P(Binomial(n, 1/2) < k) <= 0.025 (None below 6 values)."""
    n, xs = len(values), sorted(values)
    k, below = 0, 0.0
    while below + math.comb(n, k) / 2**n <= 0.025:
        below += math.comb(n, k) / 2**n
        k += 1
    return (xs[k - 1], xs[n - k]) if k >= 1 else None


def report_memory(done, halves, figures, out):
    """Prints a CORPUS line per workload and a summary per half; returns whether all passed."""
    ok, by_half = True, {}
    print(f"\n{'trace':<16} {'half':<6} {'rocmguard':>9} {'torch':>7} {'expand':>7}  peak reserved / peak live")
    for (tag, _, _, (kind, w, extra)), text, rc, wall in done:
        if kind != "shim":
            continue
        trace = next((t for t, _ in halves if WORKLOAD_OF.get(t, t) == w), w)
        half = dict(halves).get(trace, "?")
        row = shim_row(text)
        fig = figures.get(trace, {})
        torch_r = fig.get("default", {}).get("ratio")
        exp_r = fig.get("expandable_segments", {}).get("ratio")
        ratio = row["peak_reserved_per_live"] if row else None
        # A figure of plain segments is not one of the default pool: say so beside it.
        plain = "first-use check" in text
        out["memory"][trace] = dict(half=half, rocmguard=ratio, row=row, pytorch_default=torch_r,
                                    pytorch_expandable=exp_r, plain_segments=plain, exit=rc, wall_s=wall)
        if ratio is None:
            ok = False
            print(f"CORPUS {trace:<16} {half:<6} {'none':>9}  (exit {rc}: {shim_output.tail(text, 2)})")
            continue
        ok &= ratio <= TARGET
        by_half.setdefault(half, []).append(ratio)
        cells = [f"{v:.3f}" if v else "-" for v in (torch_r, exp_r)]
        print(f"CORPUS {trace:<16} {half:<6} {ratio:>9.3f} {cells[0]:>7} {cells[1]:>7}  "
              f"{shim_output.fmt_bytes(row['peak_reserved'])} / {shim_output.fmt_bytes(row['peak_live'])}"
              + ("  OVER" if ratio > TARGET else "") + ("  PLAIN (virtual memory failed its first-use check)" if plain else ""))
    for half, rs in sorted(by_half.items()):
        over = sum(r > TARGET for r in rs)
        print(f"HALF {half:<6} workloads {len(rs)} median {statistics.median(rs):.3f} max {max(rs):.3f} over-{TARGET} {over}")
        out["halves"][half] = dict(n=len(rs), median=statistics.median(rs), max=max(rs), over=over)
    return ok


def at_own_peak(args, done, deadline, logs):
    """Each shim workload again, capped at its own peak reserved from the first run (as printed,
    plus the print's precision): a cap the program fits in must not fail it."""
    tasks = []
    for (_, _, _, (kind, w, _)), text, _, _ in done:
        row = shim_row(text) if kind == "shim" else None
        if row:
            step = shim_output.GIB // 100 if row["peak_reserved"] >= shim_output.GIB else shim_output.MIB // 10
            cap = row["peak_reserved"] + step
            env = dict(shim_env(args.lib), ROCMGUARD_VRAM_LIMIT=str(cap))
            tasks.append((f"cap.{w}", argv(w), env, (w, cap)))
    return capture_traces.run_processes(tasks, args.jobs, deadline, logs)


# The shim's refusal when the program's live memory and the request pass the cap
# (shim/guard/src/guard/cap.rs).
OUTGROWN = re.compile(r"over the cap: the program holds [^,;]* and asks")


def report_caps(capped, out):
    """Prints a CAP line per workload; returns whether every capped run completed."""
    ok = True
    if capped:
        print("\nrocmguard capped at its own peak reserved (a cap the program fits in must not fail it)")
    for (_, _, _, (w, cap)), text, rc, _ in capped:
        done = capture_traces.result_of(text) is not None
        row = shim_row(text)
        # The shim's refusal says when the program's own live memory passed the cap (a run
        # that took other kernels' workspaces than the first): then it did not fit, whatever
        # the placement.
        outgrown = [l for l in text.splitlines() if OUTGROWN.search(l)]
        verdict = "completes" if done else "OUTGROWS THE CAP" if outgrown else "FAILS"
        ok &= done or bool(outgrown)
        ratio = f"{row['peak_reserved_per_live']:.3f}" if row else "-"
        # Otherwise the shim's own refusal, or the program's last error line, says why.
        said = [l for l in text.splitlines() if "refused" in l or "Error" in l]
        why = outgrown or said[:1] + said[-1:] or [shim_output.tail(text, 2)]
        why = " | ".join(dict.fromkeys(line.strip() for line in why))
        print(f"CAP {w:<16} cap {cap:>12} B  {verdict}  {ratio}" + ("" if done else f"  (exit {rc}: {why})"))
        out["at_own_peak"][w] = dict(cap=cap, completes=done, outgrown=bool(outgrown),
                                     ratio=row["peak_reserved_per_live"] if row else None, exit=rc)
    return ok


def report_tune(done, out):
    lines = [d for d in done if d[0][3][0] == "tune"]
    if lines:
        print(f"\n{'workload':<16} {'PYTORCH_CUDA_ALLOC_CONF':<48} {'peak reserved':>15} {'predicted':>15} {'meas/pred':>9}")
    for (tag, _, _, (_, w, (conf, predicted))), text, rc, _ in lines:
        r = capture_traces.result_of(text)
        got = r["peak_reserved"] if r else None
        rel = f"{got / predicted:.4f}" if got and predicted else "-"
        print(f"CONF {w:<16} {conf or 'default':<48} {got if got else 'failed':>15} {predicted or '-':>15} {rel:>9}")
        out["tune"].append(dict(workload=w, conf=conf, measured_peak_reserved=got, predicted=predicted,
                                peak_allocated=r["peak_allocated"] if r else None, exit=rc))


def report_times(times, out, skip=1):
    print("\nstep time, rocmguard (cache off) / PyTorch's cache, interleaved processes: per pair the"
          f" sum of the steps after the first{'' if skip == 1 else f' {skip}'}, then the median of the pairs"
          " and its 95% interval"
          " (TIME); the same of the pairs' ratio of median steps (MEDTIME)")
    per = {}
    for (w, k), t in sorted(times.items()):
        if "shim" in t and "torch" in t:
            per.setdefault(w, []).append((pair_ratio(t["shim"], t["torch"], skip),
                                          pair_ratio_of_medians(t["shim"], t["torch"], skip)))
    for w, both in per.items():
        figures = dict(steps={k: t for (x, k), t in times.items() if x == w})
        for tag, key, rs in (("TIME", "", [r for r, _ in both]), ("MEDTIME", "median_step_", [r for _, r in both])):
            m, ci = statistics.median(rs), median_interval(rs)
            interval = f"[{ci[0]:.4f}, {ci[1]:.4f}]" if ci else "[too few pairs]"
            print(f"{tag} {w:<16} pairs {len(rs)} median {m:.4f} ({(m - 1) * 100:+.2f}%) {interval} "
                  f"pairs {' '.join(f'{r:.4f}' for r in rs)}")
            figures.update({key + "pairs": rs, key + "median": m, key + "interval": ci})
        out["step_time"][w] = dict(figures, skip=skip)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lib", required=True, help="librocmguard.so")
    p.add_argument("--jobs", type=int, default=8, help="memory runs side by side")
    p.add_argument("--pairs", type=int, default=2)
    p.add_argument("--pair-workloads", default="gpt2m_accum,moe_top2,vit_multires")
    p.add_argument("--pair-steps", type=int, help="steps a timed process runs (default: its trace's)")
    p.add_argument("--pair-skip", type=int, default=1,
                   help="steps a pair's figures leave out at the start of each process (PyTorch's own"
                        " warm-up: cuDNN's and cuBLAS's first calls, the caching allocator's first"
                        " segments); default 1")
    p.add_argument("--only", help="workloads (trace names) to run, comma-separated")
    p.add_argument("--tune-confs", metavar="FILE")
    p.add_argument("--budget", type=float, default=510.0, help="seconds for the whole run")
    p.add_argument("--logs", default="/tmp/corpus_check_logs", help="one log per process")
    p.add_argument("--json", help="write the figures here (default: $OUT/corpus_check.json if OUT is set)")
    p.add_argument("--at-own-peak", action="store_true",
                   help="then run each workload again capped at its own peak reserved; fail if one does not complete")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a rocmguard setting for every run under the shim (piece_size=16MiB); repeatable")
    args = p.parse_args()
    try:
        SETTINGS.update(shim_output.settings_env(args.set))
    except ValueError as e:
        p.error(str(e))
    start = time.monotonic()
    halves = corpus()
    wanted = set(args.only.split(",")) if args.only else None
    runnable = []
    for trace, _ in halves:
        if trace in NOT_RUN:
            print(f"not run: {trace}: {NOT_RUN[trace]}")
        elif wanted is None or trace in wanted:
            runnable.append(WORKLOAD_OF.get(trace, trace))
    confs = read_tune_confs(args.tune_confs) if args.tune_confs else []
    logs = args.logs
    pair_s = 20 * 2 * args.pairs * len(args.pair_workloads.split(","))
    done = memory(args, runnable, confs, memory_deadline(args.budget, pair_s, args.at_own_peak), logs)
    out = dict(memory={}, halves={}, tune=[], step_time={}, at_own_peak={})
    ok = report_memory(done, halves, pytorch_figures(), out)
    report_tune(done, out)
    if args.at_own_peak:
        left = args.budget - (time.monotonic() - start)
        capped = at_own_peak(args, done, max(60.0, left - pair_s - 30), logs)
        caps_ok = report_caps(capped, out)
    else:
        caps_ok = True
    left = args.budget - (time.monotonic() - start)
    report_times(step_pairs(args, left, logs) if args.pairs and left > 60 else {}, out, args.pair_skip)
    path = args.json or (os.path.join(os.environ["OUT"], "corpus_check.json") if os.environ.get("OUT") else None)
    if path:
        Path(path).write_text(json.dumps(out, indent=1))
    print(f"\ncorpus_check: {'all within' if ok else 'NOT all within'} {TARGET}"
          + ("" if caps_ok else "; a run capped at its own peak did not complete")
          + f" ({time.monotonic() - start:.0f} s)")
    return 0 if ok and caps_ok else 1


if __name__ == "__main__":
    sys.exit(main())
