"""1. The cap is what torch sees, refusals are PyTorch out-of-memory errors, and the program
carries on within the cap after catching one; with PyTorch's cache on and off (cap.py)."""

from runner import CAP, CAP_TEXT, HERE, broken
from shim_output import fmt_bytes


def check(ctx):
    for caching in (True, False):
        mode = "on" if caching else "off"
        name = f"cap {fmt_bytes(CAP)}, caching {mode}"
        run = ctx.run(
            f"cap-shim-caching-{mode}",
            [str(HERE / "cap.py")],
            shim=True,
            caching=caching,
            env={"ROCMGUARD_VRAM_LIMIT": CAP_TEXT},
        )
        if not run.ok:
            ctx.row(1, name, *broken(run))
            continue
        status, figures = judge(run.result, caching)
        ctx.row(1, name, status, figures, result=run.result)


def judge(r, caching):
    """(status, figures) of one cap.py result."""
    problems = []
    total, props = r["mem_get_info_start"][1], r["props_total"]
    if total != CAP:
        problems.append(f"mem_get_info total {total} != {CAP}")
    if props != CAP:
        problems.append(f"total_memory {props} != {CAP}")
    oom, held, chunk = r["first_oom"], r["held_at_first_oom"], r["chunk"]
    if oom is None:
        problems.append(f"no out-of-memory after {fmt_bytes(held)}")
    elif caching and oom["type"] != "OutOfMemoryError":
        problems.append(f"raised {oom['type']}, not OutOfMemoryError")
    if held > CAP or held < CAP - chunk:
        problems.append(f"held {fmt_bytes(held)} at the first out-of-memory (cap {fmt_bytes(CAP)})")
    if r["realloc_error"]:
        problems.append(f"re-allocating after freeing failed: {r['realloc_error']['message']}")
    if r["second_oom"] is None:
        problems.append("a tensor past the cap was allowed after the recovery")
    if not (r["intact"] and r["fine_intact"]):
        problems.append("tensor contents changed")
    fine, piece = r["held_at_fine_oom"], r["piece"]
    if r["fine_oom"] is None or fine > CAP or fine < CAP - 8 * piece:
        problems.append(f"{fmt_bytes(fine)} usable in {fmt_bytes(piece)} tensors")
    figures = (
        f"mem_get_info total {total}, total_memory {props}; "
        f"{oom['type'] if oom else 'no error'} after {held // chunk} x {fmt_bytes(chunk)}; "
        f"freed {r['freed_and_reallocated']} and re-allocated: {'ok' if not r['realloc_error'] else 'FAILED'}; "
        f"next one refused: {'yes' if r['second_oom'] else 'NO'}; "
        f"usable in {fmt_bytes(piece)} tensors: {fmt_bytes(fine)}; contents intact: "
        f"{'yes' if r['intact'] and r['fine_intact'] else 'NO'}"
    )
    if oom and oom["type"] != "OutOfMemoryError":
        figures += f" ({oom['type']} is how PyTorch's uncached path reports cudaErrorMemoryAllocation)"
    return ("FAIL" if problems else "PASS"), figures + ("; " + "; ".join(problems) if problems else "")
