#!/usr/bin/env python3
"""overhead.py --in-process: what PyTorch's memory living in rocmguard's pool costs a step, to
within 1%, measured inside one process per workload (separate processes on the shared GPU
machines differ by 10-15%, more than the target).

For each workload, one process (its own, so that a workload that fails takes no other's result
with it) runs with librocmguard.so preloaded and PyTorch's cache on. After a warm-up, many pairs
of blocks, each pair in the order `block_order` gives (alternating): one block with the pool on,
one with it paused (`rocmguard_pause(1)`: new cudaMallocs go to the runtime, as without the
shim). A block: synchronize and empty PyTorch's cache, set the pause,
move every persistent tensor (weights, buffers, optimizer state, inputs) to fresh memory of that
kind, empty the cache again, warm-up steps, then k timed steps (the garbage collector off); both
blocks of a pair replay the same sequence of shapes (`step.reseed`). The figure per pair is
median(pool block) / median(paused block); the result is the median over pairs with a 95%
bootstrap confidence interval: PASS when the whole interval is within 1.01, FAIL when wholly
past it, UNRESOLVED otherwise (also under 3 pairs). Each pair's line also gives each block's
seconds in all and in moving tensors, which is what decides how many pairs a budget buys.

Every hook is the same in both blocks (only where new allocations go differs), so this measures
the placement: pooled, virtually mapped pieces against the runtime's own cudaMalloc. The hooks'
CPU cost per call is overhead.py --counts's bound. Only PyTorch's cache on is measured: with it
off the paused phase would be a cudaMalloc per tensor, which is not what the cache-off target
compares against.

Where memory lives is checked, not assumed (rocmguard_pooled): in every block, each of PyTorch's
segments made during the block must be a pooled block (pool on) or not (paused), every tensor
must have moved, and at most 5% of PyTorch's reserved bytes may be of the other kind (segments
held across empty_cache by something no tensor shows); otherwise the row FAILs.

With --versus-cache (issue 24's comparison, target +2%), the pool's block also turns PyTorch's
cache off (`torch.cuda.memory.caching_allocator_enable(False)`: every tensor a `cudaMalloc`, so
rocmguard is the only cache, as with PYTORCH_NO_CUDA_MEMORY_CACHING=1), and the paused block is
PyTorch's own cache with the pool paused. Its checks: the pool's block makes no segment of
PyTorch's and leaves no tensor outside the pool; the paused block as above. Any corpus workload
(capture_traces.builder) may be named.

A workload whose steps are slow gets few pairs in one call: `overhead.py --pool A.json B.json`
gives the verdict of several calls' pairs together, from calls on the same kind of GPU only.
"""

import contextlib
import ctypes
import gc
import json
import statistics
import subprocess
import sys
import time
import weakref
from pathlib import Path

HERE = Path(__file__).resolve().parent
TAG = "INPROCESS-RESULT"
WORKLOAD_TAG = "INPROCESS-WORKLOAD"
# Workloads whose shapes stay the same every step; every other one's shapes change, so its
# warm-up replays the whole block once and the timed steps find the cache holding what they need.
FIXED_SHAPES = {"gpt2", "resnet50", "compiled_gpt"}
# The share of PyTorch's reserved bytes that may stay where it was in a block (segments held by
# something no tensor shows): more, and the block did not measure the placement it claims.
STAYED = 0.05
# The `mode` a --json file names, by whether the pool's blocks ran versus PyTorch's cache.
MODES = {False: "in-process", True: "in-process versus cache"}


def child(name, budget_s, block_s, versus_cache=False):
    """The measuring process for one workload (the shim preloaded): prints its WORKLOAD_TAG line."""
    import torch

    sys.path.insert(0, str(HERE))
    import capture_traces
    import workloads as w
    from overhead import STEPS

    started = time.monotonic()
    shim = ctypes.CDLL(None)
    if not hasattr(shim, "rocmguard_pause") or not hasattr(shim, "rocmguard_pooled"):
        print(f"{WORKLOAD_TAG}-ERROR no rocmguard_pause/rocmguard_pooled: the shim is not preloaded", flush=True)
        return 1
    shim.rocmguard_pause.argtypes = [ctypes.c_int]
    shim.rocmguard_pooled.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
    torch.manual_seed(0)
    device = torch.device("cuda")
    torch.zeros(1, device=device)
    if shim.rocmguard_pause(0) != 0:
        print(f"{WORKLOAD_TAG}-ERROR rocmguard_pause(0) did not answer 0: the guard is not on", flush=True)
        return 1
    cache_enable = getattr(torch.cuda.memory, "caching_allocator_enable", None)
    if versus_cache and cache_enable is None:
        print(f"{WORKLOAD_TAG}-ERROR this torch has no torch.cuda.memory.caching_allocator_enable", flush=True)
        return 1

    def pooled(addr):
        start, size = ctypes.c_size_t(), ctypes.c_size_t()
        found = shim.rocmguard_pooled(ctypes.c_void_p(addr), ctypes.byref(start), ctypes.byref(size)) == 1
        return found, start.value, size.value

    def segments():
        return {(s["address"], s["total_size"]) for s in torch.cuda.memory_snapshot() if s.get("device", 0) == device_index}

    device_index = torch.cuda.current_device()
    if name in w.BUILDERS:
        warmup, _ = STEPS[name]
        step = w.BUILDERS[name](device)
    else:
        warmup = 3
        step = capture_traces.builder(name)[0](device)
    times = []
    for _ in range(max(3, warmup)):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    k = steps_for(block_s, times[1:])
    warm = 1 if name in FIXED_SHAPES else k
    persistent = tensors(torch)
    # What exists now is never garbage: the collector need not walk it again (a full
    # collection over torch's and transformers' objects is a spike of its own in a step).
    gc.freeze()

    def block(paused, seed):
        began = time.monotonic()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        kept = segments()
        shim.rocmguard_pause(1 if paused else 0)
        if versus_cache:
            cache_enable(paused)
        # What was made since the last look (gradients, mostly): not frozen, so found cheaply.
        moving = {id(t): ref for ref in persistent + tensors(torch) for t in [ref()] if t is not None}
        stuck = relocate(torch, list(moving.values()), pooled, want_pooled=not paused)
        moved = time.monotonic()
        step.reseed(seed)
        for _ in range(warm):
            step()
        torch.cuda.synchronize()
        now = segments()
        in_pool = {seg: pooled(seg[0]) for seg in now}
        in_pool = {seg: ok and start == seg[0] and size >= seg[1] for seg, (ok, start, size) in in_pool.items()}
        # With PyTorch's cache off, any segment of its own is in the wrong place.
        misplaced = [seg for seg in now - kept if in_pool[seg] == paused or (versus_cache and not paused)]
        pooled_bytes = sum(seg[1] for seg in now if in_pool[seg])
        step.reseed(seed)
        ms = []
        gc.collect()
        gc.disable()  # no collection inside a timed step; each block's garbage goes after it
        for _ in range(k):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            ms.append((time.perf_counter() - t0) * 1e3)
        gc.enable()
        return {
            # Where a block's time goes (seconds): moving the tensors, then all of it.
            "moving_s": moved - began,
            "block_s": time.monotonic() - began,
            "median_ms": statistics.median(ms),
            "step_ms": ms,
            "pooled_bytes": pooled_bytes,
            "reserved_bytes": sum(seg[1] for seg in now),
            "new_segments": len(now - kept),
            "misplaced_segments": len(misplaced),
            "stuck_tensors": stuck,
        }

    pairs = []
    burn_in = True
    seed = 0
    while True:
        t0 = time.monotonic()
        order = block_order(len(pairs) + (0 if burn_in else 1))
        seed += 1
        result = {paused: block(paused, seed) for paused in order}
        pair = {"pool_first": not order[0], "shim": result[False], "paused": result[True]}
        took = time.monotonic() - t0
        which = "burn-in" if burn_in else f"pair {len(pairs):3d}"
        print(f"[{time.monotonic() - started:5.0f}s] {name} {which} {pair_line(pair, versus_cache)}", flush=True)
        if burn_in:  # steps per block from steady steps, not the first ones
            k = steps_for(block_s, [t / 1e3 for b in result.values() for t in b["step_ms"]])
            warm = 1 if name in FIXED_SHAPES else k
        else:
            pairs.append(pair)
        burn_in = False
        now = time.monotonic()
        if now + took > started + budget_s:
            break
    print(WORKLOAD_TAG, json.dumps({"workload": name, "device": torch.cuda.get_device_name(), "steps_per_block": k,
                                    "warmup_steps": warm, "pairs": pairs}), flush=True)
    return 0


def pair_line(pair, versus_cache):
    """What a pair's log line says of it: each block's median step, their ratio, where the
    memory was, each block's seconds in all and in moving tensors, and the placement checks."""
    shim, paused = pair["shim"], pair["paused"]
    # With PyTorch's cache off in the pool's block there is nothing of PyTorch's to pool: what
    # it holds there (nothing, if the block is right) says more.
    held = (f"PyTorch holds {shim['reserved_bytes'] >> 20} / {paused['reserved_bytes'] >> 20} MiB"
            if versus_cache else f"pooled {share(shim):.1%} / {share(paused):.1%} of reserved")
    return (
        f"({'pool' if pair['pool_first'] else 'paused'} first): pool {shim['median_ms']:.2f} ms, "
        f"paused {paused['median_ms']:.2f} ms, ratio {shim['median_ms'] / paused['median_ms']:.4f}; {held}; "
        f"blocks {shim['block_s']:.1f} / {paused['block_s']:.1f} s, moving {shim['moving_s']:.1f} / "
        f"{paused['moving_s']:.1f}; misplaced {shim['misplaced_segments'] + paused['misplaced_segments']}, "
        f"stuck {shim['stuck_tensors'] + paused['stuck_tensors']}"
    )


def block_order(n):
    """The `paused` flags of pair n's two blocks, in the order they run: the pool first in even
    pairs (the burn-in is pair 0), paused first in odd ones. Alternating, not drawn at random: a
    drift within a pair (clocks, heat, the other block's leftovers) then falls on each side
    equally often; 9 random draws once put the pool first twice (framepack, session 26)."""
    return [False, True] if n % 2 == 0 else [True, False]


def steps_for(block_s, times):
    """Timed steps per block: about block_s seconds of steps of these times, 3 to 25."""
    return max(3, min(25, round(block_s / max(statistics.median(times), 1e-4))))


def share(block):
    return block["pooled_bytes"] / block["reserved_bytes"] if block["reserved_bytes"] else 0.0


def tensors(torch, device="cuda"):
    """Weak references to every live tensor on `device` that is not an intermediate of a graph
    (weights, buffers, optimizer state, inputs, gradients, and views of them): what a block
    moves. Views are moved with their storage: FSDP2's local shards are views of a padded flat
    parameter, and one left on the old storage kept it, its segment, and the values the optimizer
    updates apart from the parameter the next gather reads."""
    import warnings

    gc.collect()
    found = []
    # Asking some of torch's objects warns of deprecations (`torch.distributed.reduce_op`).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for obj in gc.get_objects():
            try:
                if isinstance(obj, torch.Tensor) and obj.device.type == device and obj.grad_fn is None:
                    # What relocate moves is the storage. torch.compile's fake tensors keep
                    # theirs on the meta device; a wrapper subclass (FSDP2's DTensor) has none
                    # that can be asked (it raises), and its local tensor is found on its own.
                    storage = obj.untyped_storage()
                    storage.data_ptr()
                    if storage.device.type == device:
                        found.append(weakref.ref(obj))
            except Exception:  # an object that cannot even be asked: not a tensor of ours
                continue
    return found


def relocate(torch, refs, pooled, want_pooled):
    """Moves each tensor whose memory is of the wrong kind (in the pool, or not) into memory of
    the current kind: through the host, so that its old segments empty and go back (a copy made
    on the device would land in a free part of an old segment). Tensors that share one storage
    (cuDNN's RNN weights are views of one flat buffer) move together, onto one new storage, so
    they still share it. Returns how many tensors are still of the wrong kind."""

    def wrong():
        alive = [t for t in (r() for r in refs) if t is not None]
        return [ts for ts in by_storage(alive).values() if pooled(ts[0].data_ptr())[0] != want_pooled]

    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    owners = wrong()
    with torch.no_grad():
        host = [(ts, ts[0].untyped_storage().cpu(), [(t.storage_offset(), t.size(), t.stride()) for t in ts])
                for ts in owners]
        for ts, _, _ in host:
            for t in ts:
                with in_place(torch, t):
                    t.set_(torch.empty(0, dtype=t.dtype, device=t.device))
        torch.cuda.synchronize()
        # cuBLAS's workspaces are blocks of PyTorch's cache that no tensor shows: they would keep
        # their segments, and the free space around them, of the old kind. Made again at the
        # next matrix product.
        clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear is not None:
            clear()
        torch.cuda.empty_cache()
        for ts, h, shapes in host:
            storage = h.cuda(ts[0].device.index)
            for t, (offset, size, stride) in zip(ts, shapes):
                with in_place(torch, t):
                    t.set_(storage, offset, size, stride)
    del host
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return sum(len(ts) for ts in wrong())


def by_storage(tensors):
    """The tensors grouped by the storage they share, by its address. A storage of no bytes has
    no memory to move and no address of its own: FSDP2 frees each gathered parameter by
    resizing its storage to 0, and grouped under address 0 they were all put onto one storage,
    which FSDP2's next gather then resized for one of them under all the others."""
    owners = {}
    for t in tensors:
        storage = t.untyped_storage()
        if storage.nbytes():
            owners.setdefault(storage.data_ptr(), []).append(t)
    return owners


def in_place(torch, t):
    """What an in-place update of `t` needs: inference mode for an inference tensor (a KV cache
    made under `torch.inference_mode()`), else nothing more than the caller's `no_grad`
    (`inference_mode(False)` would turn gradients back on)."""
    return torch.inference_mode() if t.is_inference() else contextlib.nullcontext()


def summarize(entry, versus_cache=False):
    """One workload's row from the child's pairs (`versus_cache`: the pool's blocks ran with
    PyTorch's cache off, so PyTorch holds no segment there to be pooled)."""
    from overhead import bootstrap_ci, verdict

    pairs = entry["pairs"]
    ratios = [p["shim"]["median_ms"] / p["paused"]["median_ms"] for p in pairs]
    row = {"workload": entry["workload"], "pairs": len(pairs), "steps_per_block": entry["steps_per_block"], "ratios": ratios}
    if not ratios:
        return dict(row, ratio=None, ci=None, status="UNRESOLVED", placement_ok=False, placement="no pairs")
    ratio = statistics.median(ratios)
    lo, hi = bootstrap_ci(ratios)
    blocks = [(p["shim"], False) for p in pairs] + [(p["paused"], True) for p in pairs]
    misplaced = sum(b["misplaced_segments"] for b, _ in blocks)
    stuck = sum(b["stuck_tensors"] for b, _ in blocks)
    new = sum(b["new_segments"] for b, _ in blocks)
    pool_share = 1.0 if versus_cache else min(share(p["shim"]) for p in pairs)
    paused_share = max(share(p["paused"]) for p in pairs)
    placement_ok = misplaced == 0 and stuck == 0 and new > 0 and pool_share >= 1 - STAYED and paused_share <= STAYED
    pool_blocks = "PyTorch's cache off" if versus_cache else f"at least {pool_share:.1%} of PyTorch's reserved bytes pooled"
    placement = (
        f"pool blocks: {pool_blocks}; paused blocks: at most "
        f"{paused_share:.1%} (what stayed: segments PyTorch kept across empty_cache; at most {STAYED:.0%} "
        f"allowed); {new} segments made in blocks, {misplaced} in the wrong place; {stuck} tensors not moved"
    )
    status = verdict("versus-cache" if versus_cache else "shim", lo, hi, len(ratios)) if placement_ok else "FAIL"
    return dict(
        row,
        ratio=ratio,
        ci=[lo, hi],
        status=status,
        shim_ms=statistics.median(p["shim"]["median_ms"] for p in pairs),
        paused_ms=statistics.median(p["paused"]["median_ms"] for p in pairs),
        pool_share_min=pool_share,
        paused_share_max=paused_share,
        misplaced_segments=misplaced,
        stuck_tensors=stuck,
        placement_ok=placement_ok,
        placement=placement,
    )


def pooled(docs):
    """One entry per workload from the JSONs of several calls (`--json`), their pairs together,
    and whether they ran versus the cache. Refused (ValueError) where the calls differ in mode
    or a workload's device differs or is not named: an H100's pairs and an H200's measure two
    machines, not one more closely."""
    modes = {d["mode"] for d in docs}
    if len(modes) != 1:
        raise ValueError(f"the calls ran in different modes: {', '.join(sorted(modes))}")
    entries = {}
    for d in docs:
        for name, e in d["workloads"].items():
            first = entries.setdefault(name, dict(e, pairs=[]))
            if e.get("device") is None or e.get("device") != first.get("device"):
                raise ValueError(f"{name}: pairs from {first.get('device') or 'an unnamed device'} and "
                                 f"{e.get('device') or 'an unnamed device'} are not pooled")
            first["pairs"] = first["pairs"] + e["pairs"]
    return entries, modes.pop() == MODES[True]


def child_command(args, workload, budget):
    """The measuring process for one workload, pinned to args.cpus."""
    cmd = ["taskset", "-c", args.cpus, sys.executable, str(HERE / "overhead.py"), "--in-process-child",
           workload, "--budget", f"{budget:.0f}", "--block-s", str(args.block_s)]
    return cmd + (["--versus-cache"] if args.versus_cache else [])


def run_child(cmd, env, budget):
    """Runs one child, printing its progress: (its entry or None, its exit status, its errors)."""
    entry, errors = None, []
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + budget + 120
    for line in proc.stdout:
        if line.startswith(WORKLOAD_TAG + " "):
            entry = json.loads(line[len(WORKLOAD_TAG) + 1 :])
            continue
        if line.startswith(WORKLOAD_TAG + "-ERROR"):
            errors.append(line.strip())
        if not line.startswith(" INFO rocmguard"):
            print(line, end="", flush=True)
        if time.monotonic() > deadline:
            proc.kill()
            errors.append("stopped: past the budget")
            break
    return entry, proc.wait(), errors


def parent(args, lib, env):
    """Runs one child per workload, each with an equal share of what is left of the budget, so
    that a workload that fails takes no other's result with it; prints the table and TAG line."""
    workloads = args.workloads.split(",")
    what = "the pool with PyTorch's cache off against PyTorch's cache" if args.versus_cache else "PyTorch's cache on"
    print(f"in-process A/B, one process per workload with {lib} preloaded, {what}; budget {args.budget:.0f} s",
          flush=True)
    entries, failures, shares = {}, {}, {}
    started = time.monotonic()
    for i, name in enumerate(workloads):
        shares[name] = budget = (args.budget - (time.monotonic() - started)) / (len(workloads) - i)
        entry, rc, errors = run_child(child_command(args, name, budget), env, budget)
        if entry is not None:
            entries[name] = entry
        else:
            failures[name] = f"no result (exit {rc}{'; ' + '; '.join(errors) if errors else ''})"
    return report(workloads, entries, failures, shares, args.versus_cache, args.json)


def pool_calls(paths, json_path):
    """`overhead.py --pool`: the verdicts of several calls' pairs together (see `pooled`)."""
    try:
        if len({Path(p).resolve() for p in paths}) < len(paths):
            raise ValueError("a file is named twice: its pairs would count twice")
        docs = [json.loads(Path(p).read_text()) for p in paths]
        for path, d in zip(paths, docs):
            if d.get("mode") not in MODES.values():
                raise ValueError(f"{path} is not the --json of an --in-process call")
        entries, versus_cache = pooled(docs)
    except (OSError, ValueError) as e:
        print(f"overhead.py --pool: {e}", file=sys.stderr)
        return 2
    print(f"pairs of {len(paths)} calls together")
    return report(list(entries), entries, {}, {}, versus_cache, json_path)


def report(workloads, entries, failures, shares, versus_cache, json_path):
    """Prints the table, where the memory was and the TAG line; writes `json_path`. Exit status
    0 only where every row passes."""
    from overhead import TARGETS

    target = TARGETS["versus-cache" if versus_cache else "shim"]
    rows = []
    print(f"\n{'workload':<10} {'pool ms':>9} {'paused ms':>10} {'ratio':>7} {'95% CI':>17} {'pairs':>5} {'k':>3}  verdict (target: CI within {target})")
    for name in workloads:
        if name not in entries:
            rows.append({"workload": name, "status": "FAIL", "pairs": 0, "placement_ok": False,
                         "placement": failures[name]})
            print(f"{name:<10} {failures[name]}  FAIL")
            continue
        row = summarize(entries[name], versus_cache)
        rows.append(row)
        if row["ratio"] is None:
            row["placement"] = (f"no pairs within its {shares.get(name, 0):.0f} s share of the budget (warm-up and burn-in "
                                "took it): run it alone or with a larger --budget")
            print(f"{name:<10} no pairs  {row['status']}")
            continue
        lo, hi = row["ci"]
        print(f"{name:<10} {row['shim_ms']:9.2f} {row['paused_ms']:10.2f} {row['ratio']:7.4f} [{lo:.4f}, {hi:.4f}] "
              f"{row['pairs']:5d} {row['steps_per_block']:3d}  {row['status']}")
    print("\nwhere the memory was (rocmguard_pooled on each of PyTorch's segments):")
    for row in rows:
        failed = not row.get("placement_ok") and (row["pairs"] > 0 or row["workload"] in failures)
        print(f"  {row['workload']}: {row['placement']}" + ("  -> FAIL" if failed else ""))
    print(TAG + " " + json.dumps([{k: v for k, v in r.items() if k != "ratios"} for r in rows]), flush=True)
    if json_path:
        Path(json_path).write_text(json.dumps({"mode": MODES[versus_cache], "rows": rows, "workloads": entries}, indent=1))
    return 0 if rows and all(r["status"] == "PASS" for r in rows) else 1
