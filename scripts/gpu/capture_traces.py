#!/usr/bin/env python3
"""Records tensor allocation traces of PyTorch workloads from the caching allocator's own
history, for the fragmentation benchmark, and measures PyTorch's peak reserved / peak allocated
with its default settings and with `expandable_segments:True`.

A trace is `<name>.csv.gz` in the RMM allocation-log layout of data/traces (allocate/free for
the tensors, segment_alloc/segment_free for what the caching allocator took from the driver).
Workloads: the TUNE half's moe, decode, unet, lora (workloads.py) and the REPORT half
(corpus_workloads.py, corpus_vision.py); data/traces/corpus.tsv says which is which.

Usage:
  capture_traces.py OUTDIR [--steps N] [--only a,b]     record traces in this process
  capture_traces.py --corpus OUTDIR [--jobs 8] [--deadline S]
      every REPORT workload recorded (default settings) and measured in separate processes with
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
    return getattr(workloads, f"build_{name}"), TUNE_STEPS.get(name, 12)


def write_trace(snap, path):
    rows = 0
    with gzip.open(path, "wt", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Thread", "Time", "Action", "Pointer", "Size", "Stream"])
        for e in snap["device_traces"][0]:
            action = ACTIONS.get(e["action"])
            if action:
                w.writerow([0, e.get("time_us", rows), action, hex(e["addr"]), e["size"], 0])
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
    step = build("cuda")
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
        step_s_median=round(statistics.median(times), 4),
        torch=torch.__version__,
    )
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


def tasks():
    """(name, mode, alloc conf), in launch order: the compiled model first (its measuring runs
    then find Inductor's cache warm), recordings before measurements."""
    import corpus_workloads

    report = sorted(corpus_workloads.CORPUS, key=lambda n: n != "compiled_gpt")
    out = [(n, "capture", "") for n in report]
    for conf in (EXPANDABLE, ""):
        out += [(n, "measure", conf) for n in report + list(TUNE_STEPS)]
    return out


def corpus(args):
    """Runs every task in its own process, args.jobs at a time, and gives up on what has not
    ended by args.deadline seconds (so the whole call fits the device's limit)."""
    logs = os.path.join(args.corpus, "logs")
    os.makedirs(logs, exist_ok=True)
    start = time.monotonic()
    pending, running, results = tasks(), [], []
    me = os.path.abspath(__file__)
    while pending or running:
        now = time.monotonic() - start
        while pending and len(running) < args.jobs and now < args.deadline - 45:
            name, mode, conf = pending.pop(0)
            env = dict(os.environ, OMP_NUM_THREADS="2")
            env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
            if conf:
                env["PYTORCH_CUDA_ALLOC_CONF"] = conf
            tag = f"{name}.{mode}.{'expandable' if conf else 'default'}"
            log = open(os.path.join(logs, tag + ".log"), "w")
            cmd = [sys.executable, me, args.corpus, "--one", name, "--mode", mode]
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
            running.append((proc, tag, log, time.monotonic(), (name, mode, conf)))
            print(f"[{now:6.1f}s] start {tag}", flush=True)
        for item in list(running):
            proc, tag, log, t0, task = item
            late = time.monotonic() - start > args.deadline
            if proc.poll() is None and not late:
                continue
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
            running.remove(item)
            text = open(log.name).read()
            found = [json.loads(line.split(" ", 1)[1]) for line in text.splitlines() if line.startswith(RESULT_TAG)]
            r = found[0] if found else dict(zip(("name", "mode", "alloc_conf"), task), failed=True)
            r.update(rc=proc.returncode, wall_s=round(time.monotonic() - t0, 1))
            if not found:
                r["error"] = text.strip().splitlines()[-1:] if text.strip() else ["no output"]
            results.append(r)
            print(f"[{time.monotonic() - start:6.1f}s] end {tag} rc={proc.returncode} "
                  f"ratio={r.get('ratio')} rows={r.get('rows')} wall={r['wall_s']}", flush=True)
        if pending and time.monotonic() - start >= args.deadline - 45 and not running:
            break
        time.sleep(0.5)
    for name, mode, conf in pending:
        results.append(dict(name=name, mode=mode, alloc_conf=conf, failed=True, error=["not started: deadline"]))
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
