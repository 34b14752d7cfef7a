#!/usr/bin/env python3
"""Records tensor allocation traces of PyTorch workloads from the caching allocator's own
history, for the fragmentation benchmark, and measures PyTorch's peak reserved / peak allocated
with its default settings and with `expandable_segments:True`.

A trace is `<name>.csv.gz` in the RMM allocation-log layout of data/traces (allocate/free for
the tensors, segment_alloc/segment_free for what the caching allocator took from the driver).
Workloads: the TUNE half's moe, decode, unet, lora (workloads.py) and every workload of
`corpus_workloads.CORPUS` (which gathers the corpus_*.py files); data/traces/corpus.tsv says
which half each is in.

Usage:
  capture_traces.py OUTDIR [--steps N] [--only a,b]     record traces in this process
  capture_traces.py --corpus OUTDIR [--jobs 8] [--deadline S] [--names a,b]
      every REPORT workload (or those named) recorded (default settings) and measured in separate processes with
      the default settings and with expandable_segments:True, the TUNE half's moe, decode, unet
      and lora measured both ways; processes run side by side on the one GPU (each measures its
      own peaks); OUTDIR gets the traces, logs/ and figures.json
  capture_traces.py [OUTDIR] --one NAME --mode capture|measure [--steps N]   (one child)
"""

import argparse
import csv
import gzip
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

ACTIONS = {"alloc": "allocate", "free_completed": "free", "segment_alloc": "segment_alloc", "segment_free": "segment_free"}
RESULT_TAG = "CORPUS-RESULT"
EXPANDABLE = "expandable_segments:True"
# The TUNE half's workloads.py traces were recorded with 12 steps (data/traces/README.md).
TUNE_STEPS = {"moe": 12, "decode": 12, "unet": 12, "lora": 12}


def builder(name):
    """(build function, steps a trace records) of a workload of either half."""
    import corpus_workloads
    import workloads

    if name in corpus_workloads.CORPUS:
        return corpus_workloads.CORPUS[name]
    build = getattr(workloads, f"build_{name}", None) or workloads.BUILDERS[name]
    return build, TUNE_STEPS.get(name, 12)


def write_trace(snap, path):
    """Writes the history's tensor and segment rows, each with the stream it was made on
    (PyTorch caches blocks per stream: FSDP2 gathers parameters on streams of its own)."""
    rows = 0
    with gzip.open(path, "wt", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Thread", "Time", "Action", "Pointer", "Size", "Stream"])
        for e in snap["device_traces"][0]:
            action = ACTIONS.get(e["action"])
            if action:
                w.writerow([0, e.get("time_us", rows), action, hex(e["addr"]), e["size"], e.get("stream", 0)])
                rows += 1
    return rows


def run_one(name, mode, steps, out):
    """Runs one workload in this process; returns its figures. mode `capture` records the
    trace (recording starts before the model is built, so its weights are in the trace)."""
    import torch

    build, default_steps = builder(name)
    steps = steps or default_steps
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    if mode == "capture":
        # No stacks: only the events are needed (stack capture also trips on checkpointed
        # recomputation in torch 2.11: "returned NULL without setting an exception").
        torch.cuda.memory._record_memory_history(context=None, max_entries=2_000_000)
    start = time.perf_counter()
    step = build(torch.device("cuda"))
    built = time.perf_counter()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    result = dict(
        name=name,
        mode=mode,
        alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        steps=steps,
        peak_reserved=torch.cuda.max_memory_reserved(),
        peak_allocated=torch.cuda.max_memory_allocated(),
        build_s=round(built - start, 2),
        # The first step (cuBLAS handles, compilation) is left out where there are others.
        step_s_median=round(statistics.median(times[1:] or times), 4),
        # Every step, in order: steps of one index have the same shapes in every process.
        step_s=[round(t, 5) for t in times],
        torch=torch.__version__,
    )
    # PyTorch counts nothing with its cache off (PYTORCH_NO_CUDA_MEMORY_CACHING=1).
    if result["peak_allocated"]:
        result["ratio"] = round(result["peak_reserved"] / result["peak_allocated"], 4)
    if mode == "capture":
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        path = os.path.join(out, f"{name}.csv.gz")
        result["rows"] = write_trace(snap, path)
        result["trace_bytes"] = os.path.getsize(path)
    return result


def child(args):
    result = run_one(args.one, args.mode, args.steps, args.out or ".")
    print(RESULT_TAG, json.dumps(result), flush=True)


def tasks(names=None):
    """(name, mode, alloc conf), in launch order: the compiled models first (their measuring
    runs then find Inductor's cache warm), recordings before measurements; only `names` where
    given (a REPORT workload is recorded and measured, a TUNE one measured)."""
    import corpus_workloads

    report = sorted(corpus_workloads.CORPUS, key=lambda n: not n.startswith("compiled_"))
    tune = list(TUNE_STEPS)
    if names:
        report, tune = [n for n in report if n in names], [n for n in tune if n in names]
    out = [(n, "capture", "") for n in report]
    for conf in (EXPANDABLE, ""):
        out += [(n, "measure", conf) for n in report + tune]
    return out


def run_processes(tasks, jobs, deadline, logs):
    """Runs each task (tag, argv, env) in its own process, `jobs` at a time, their output in
    logs/<tag>.log; starts none later than 45 s before `deadline` (seconds from now) and kills
    what is still running at it. Returns (task, output, exit code or None if never started,
    seconds) per task."""
    os.makedirs(logs, exist_ok=True)
    start = time.monotonic()
    pending, running, done = list(tasks), [], []
    while pending or running:
        now = time.monotonic() - start
        while pending and len(running) < jobs and now < deadline - 45:
            task = pending.pop(0)
            log = open(os.path.join(logs, task[0] + ".log"), "w")
            proc = subprocess.Popen(task[1], stdout=log, stderr=subprocess.STDOUT, env=task[2])
            running.append((proc, task, log, time.monotonic()))
            print(f"[{now:6.1f}s] start {task[0]}", flush=True)
        for item in list(running):
            proc, task, log, t0 = item
            if proc.poll() is None and time.monotonic() - start <= deadline:
                continue
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
            running.remove(item)
            wall = round(time.monotonic() - t0, 1)
            done.append((task, open(log.name).read(), proc.returncode, wall))
            print(f"[{time.monotonic() - start:6.1f}s] end {task[0]} rc={proc.returncode} wall={wall}", flush=True)
        if pending and not running and time.monotonic() - start >= deadline - 45:
            break
        time.sleep(0.5)
    return done + [(task, "not started: deadline", None, 0) for task in pending]


def result_of(text):
    """The child's CORPUS-RESULT, or None."""
    found = [json.loads(line.split(" ", 1)[1]) for line in text.splitlines() if line.startswith(RESULT_TAG + " ")]
    return found[0] if found else None


def child_env(conf="", **extra):
    """The environment of a child: PYTORCH_CUDA_ALLOC_CONF=conf only, few CPU threads each."""
    env = {k: v for k, v in os.environ.items() if k != "PYTORCH_CUDA_ALLOC_CONF"}
    env.update(OMP_NUM_THREADS="2", **extra)
    if conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    return env


def corpus(args):
    """Every task in its own process (run_processes), then figures.json and a summary."""
    me = os.path.abspath(__file__)
    runs = []
    for name, mode, conf in tasks(args.names.split(",") if args.names else None):
        tag = f"{name}.{mode}.{'expandable' if conf else 'default'}"
        argv = [sys.executable, me, args.corpus, "--one", name, "--mode", mode]
        runs.append((tag, argv, child_env(conf), (name, mode, conf)))
    results = []
    for (tag, _, _, (name, mode, conf)), text, rc, wall in run_processes(
        runs, args.jobs, args.deadline, os.path.join(args.corpus, "logs")
    ):
        r = result_of(text) or dict(name=name, mode=mode, alloc_conf=conf, failed=True,
                                    error=text.strip().splitlines()[-1:] or ["no output"])
        r.update(rc=rc, wall_s=wall)
        results.append(r)
    with open(os.path.join(args.corpus, "figures.json"), "w") as f:
        json.dump(results, f, indent=1)
    summarize(results)


def summarize(results):
    """One line per workload: the recorded and measured ratios side by side."""
    by = {}
    for r in results:
        key = "capture" if r.get("mode") == "capture" else ("expandable" if r.get("alloc_conf") else "default")
        by.setdefault(r["name"], {})[key] = r
    for name, rs in sorted(by.items()):
        cells = []
        for key in ("capture", "default", "expandable"):
            r = rs.get(key)
            cells.append("-" if r is None else ("FAIL" if r.get("failed") else f"{r['ratio']:.3f}"))
        cap = rs.get("capture", {})
        print(f"SUMMARY {name:16} capture {cells[0]:>6} default {cells[1]:>6} expandable {cells[2]:>6} "
              f"rows {cap.get('rows', '-')} peak_alloc {rs.get('default', {}).get('peak_allocated', '-')}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", nargs="?")
    p.add_argument("--steps", type=int, default=0, help="steps (default: the workload's own)")
    p.add_argument("--only", default="moe,decode,unet,lora")
    p.add_argument("--corpus", metavar="OUTDIR")
    p.add_argument("--names", help="with --corpus: only these workloads (comma-separated)")
    p.add_argument("--jobs", type=int, default=8)
    p.add_argument("--deadline", type=float, default=440.0, help="seconds before running children are killed")
    p.add_argument("--one")
    p.add_argument("--mode", choices=("capture", "measure"), default="measure")
    args = p.parse_args()
    if args.one:
        child(args)
    elif args.corpus:
        corpus(args)
    else:
        os.makedirs(args.out, exist_ok=True)
        for name in args.only.split(","):
            r = run_one(name, "capture", args.steps, args.out)
            print(f"TRACE {name} steps {r['steps']} rows {r['rows']} pytorch-reserved/allocated {r['ratio']:.3f} "
                  f"peak-allocated {r['peak_allocated']} bytes {r['trace_bytes']}", flush=True)


if __name__ == "__main__":
    main()
