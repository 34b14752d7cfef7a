"""2 and 3 across processes. GPT-2 small and ResNet-50 training (train.py), native and under
the shim, with PyTorch's cache on (2) and off (3, rocmguard the only cache): losses bitwise
equal, rocmguard's peak reserved against PyTorch's peak allocated, and the step times.

Step times of separate processes on these machines differ by 5-30% from run to run, so those
rows are INFO: the figure beside the native runs' own spread, never a verdict. The verdict on
step time with the cache on is the in-process rows (checks/step_time.py, parts 3 to 5)."""

import statistics

from runner import HERE, broken
from shim_output import fmt_bytes, ratio_text

RESERVE_TARGET = 1.05  # rocmguard's peak reserved / PyTorch's peak allocated, cache off
STEP_TARGET_CACHING = 0.01  # the 1% the in-process rows judge
STEP_TARGET_NO_CACHE = 0.05  # rocmguard as the only cache against PyTorch's cache
MODELS = (("gpt2", "GPT-2 small", 3), ("resnet50", "ResNet-50", 4))  # (name, title, its in-process part)


def check(ctx):
    warmup, steps = ctx.train_steps
    for model, title, part in MODELS:
        args = [str(HERE / "train.py"), "--model", model, "--warmup", str(warmup), "--steps", str(steps)]
        a = ctx.run(f"{model}-native-caching", args, shim=False, caching=True)
        b = ctx.run(f"{model}-shim-caching", args, shim=True, caching=True)
        c = ctx.run(f"{model}-native-nocache", args, shim=False, caching=False)
        d = ctx.run(f"{model}-shim-nocache", args, shim=True, caching=False)
        # The native run again, last: their spread is how far separate processes can judge.
        a2 = ctx.run(f"{model}-native-caching-again", args, shim=False, caching=True)
        caching_on(ctx, model, title, part, steps, a, a2, b)
        caching_off(ctx, title, a, a2, c, d)


def baseline_median(runs):
    """Median step time over the native caching-on runs that finished, pooled, and their
    run-to-run spread (max / min of their medians - 1; None with fewer than two runs)."""
    good = [r for r in runs if r is not None and r.ok]
    if not good:
        return None, None
    pooled = [t for r in good for t in r.result["step_ms"]]
    medians = [r.result["median_step_ms"] for r in good]
    spread = (max(medians) / min(medians) - 1) if len(medians) > 1 else None
    return statistics.median(pooled), spread


def spread_text(spread):
    if spread is None:
        return "native run-to-run spread not measured (one native run finished)"
    return f"native run-to-run spread {spread * 100:.2f}%"


def compare_losses(a, b):
    """(equal, text): b's losses against a's, bit for bit (repr of each float)."""
    la, lb = a.result["losses"], b.result["losses"]
    if not la or len(la) != len(lb):
        return False, f"{len(lb)} losses vs {len(la)}"
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            return False, f"first difference at step {i}: {y} vs {x}"
    if any(x == "nan" for x in la):
        return False, "losses are NaN: nothing to compare"
    return True, f"{len(la)}/{len(la)} steps bitwise equal (first {la[0]}, last {la[-1]})"


def determinism(*runs):
    """How the runs enforced determinism (train.py falls back to warn_only and says why)."""
    modes = sorted({str(r.result.get("determinism")) for r in runs})
    return modes[0] if len(modes) == 1 else " / ".join(modes)


def native_control(a, a2):
    """Two native runs with equal losses show the program deterministic on this machine (True);
    if they differ (False), a difference under the shim proves nothing either way."""
    return compare_losses(a, a2)[0] if (a.ok and a2.ok) else None


def losses_row(ctx, check, name, ref, run, control, extra=""):
    equal, text = compare_losses(ref, run)
    status = "PASS" if equal else "FAIL"
    if not equal and control is False:
        status, text = "SKIP", f"{text}, but two native runs differ as well: not deterministic here"
    ctx.row(check, name, status, text + extra)


def caching_on(ctx, model, title, part, steps, a, a2, b):
    """Check 2's rows across processes: losses (a verdict) and step time (INFO)."""
    name = f"{title}, caching on"
    if not (a.ok and b.ok):
        ctx.row(2, name + ": losses", *broken(a, b))
        return
    r = a.result
    shape = (f"batch {r['batch']}x{r['seq']}, attention {r.get('attn_implementation')}" if model == "gpt2"
             else f"batch {r['batch']}, {r.get('resnet')}")
    control = native_control(a, a2)
    losses_row(ctx, 2, name + ": losses", a, b, control,
               ("; two native runs equal too" if control else "") + f"; {shape}; determinism {determinism(a, b)}")
    base_ms, spread = baseline_median([a, a2])
    ms = b.result["median_step_ms"]
    ctx.row(
        2,
        name + ": step time across processes",
        "INFO",
        f"median {ms:.2f} ms vs {base_ms:.2f} ms native ({ratio_text(ms, base_ms)}) over {steps} steps; "
        f"{spread_text(spread)}: separate processes differ this much without the shim, so this is no "
        f"verdict; the {STEP_TARGET_CACHING:.0%} target is judged in one process (part {part})",
        shim_ms=ms,
        native_ms=base_ms,
        spread=spread,
    )


def caching_off(ctx, title, a, a2, c, d):
    """Check 3's rows: losses and memory (verdicts), step time against PyTorch's cache (INFO)."""
    name = f"{title}, caching off"
    if not (c.ok and d.ok):
        ctx.row(3, name + ": losses", *broken(c, d))
    else:
        same_as_cached = a.ok and a.result["losses"] == d.result["losses"]
        losses_row(ctx, 3, name + ": losses", c, d, native_control(a, a2),
                   f" vs native no-caching; equal to the caching-on run too: {'yes' if same_as_cached else 'no'}")
    if not (a.ok and d.ok):
        ctx.row(3, name + ": memory", *broken(a, d))
        return
    base_ms, spread = baseline_median([a, a2])
    ms = d.result["median_step_ms"]
    nc_ms = c.result["median_step_ms"] if c.ok else None
    native_nc = f"; native no-caching {nc_ms:.2f} ms (rocmguard {ratio_text(ms, nc_ms)})" if c.ok else ""
    ctx.row(
        3,
        name + ": step time across processes",
        "INFO",
        f"median {ms:.2f} ms vs PyTorch's caching allocator {base_ms:.2f} ms ({ratio_text(ms, base_ms)}; "
        f"target <= +{STEP_TARGET_NO_CACHE:.0%}, not judged across processes: {spread_text(spread)}){native_nc}",
        shim_ms=ms,
        native_ms=base_ms,
        native_nocache_ms=nc_ms,
        spread=spread,
    )
    row = d.cuda_table().get(0)
    allocated = a.result["max_memory_allocated"]
    if row is None:
        ctx.row(3, name + ": memory", "FAIL", f"{d.label}: no `rocmguard: CUDA memory at exit` table with a dev0 row")
        return
    ratio = row["peak_reserved"] / allocated
    ctx.row(
        3,
        name + ": memory",
        "PASS" if ratio <= RESERVE_TARGET else "FAIL",
        f"rocmguard peak reserved {fmt_bytes(row['peak_reserved'])} / PyTorch peak allocated "
        f"{fmt_bytes(allocated)} = {ratio:.3f} (target <= {RESERVE_TARGET}); PyTorch's own peak reserved "
        f"{fmt_bytes(a.result['max_memory_reserved'])}",
        peak_reserved=row["peak_reserved"],
        peak_allocated=allocated,
        ratio=ratio,
        table=row,
    )
