"""5. Model swapping (swap.py: four models in turn to the GPU and back) completes under the
shim, PyTorch's cache off, with a cap below what PyTorch's own cache reserved for it."""

from runner import HERE, broken
from shim_output import MIB, fmt_bytes


def check(ctx):
    rounds = 2 if ctx.quick else 3
    args = [str(HERE / "swap.py"), "--rounds", str(rounds)]
    base = ctx.run("swap-native-caching", args, shim=False, caching=True)
    name = "model swapping under a cap"
    if not base.ok:
        ctx.row(5, name, *broken(base))
        return
    reserved, allocated = base.result["max_memory_reserved"], base.result["max_memory_allocated"]
    by_reserved, by_allocated = int(0.9 * reserved), int(1.05 * allocated)
    cap = -(-max(by_reserved, by_allocated) // MIB) * MIB
    how = "0.9 x PyTorch's peak reserved" if by_reserved >= by_allocated else "1.05 x PyTorch's peak allocated"
    shim = ctx.run("swap-shim-nocache", args, shim=True, caching=False, env={"ROCMGUARD_VRAM_LIMIT": str(cap)})
    head = (
        f"PyTorch (caching on): peak reserved {fmt_bytes(reserved)}, peak allocated {fmt_bytes(allocated)}; "
        f"cap {fmt_bytes(cap)} ({how})"
    )
    if not shim.ok:
        status, why = broken(shim)
        ctx.row(5, name, status, f"{head}; {why}", cap=cap)
    else:
        status, figures, row = judge(base.result, shim, cap)
        ctx.row(5, name, status, f"{head}; {figures}", cap=cap, peak_reserved_native=reserved,
                peak_allocated_native=allocated, table=row)
    if cap < reserved:
        ctx.row(5, "cap below PyTorch's peak reserved", "PASS",
                f"cap {fmt_bytes(cap)} = {cap / reserved:.2f} x PyTorch's peak reserved {fmt_bytes(reserved)}")
    else:
        ctx.row(
            5,
            "cap below PyTorch's peak reserved",
            "SKIP",
            f"PyTorch reserved only {fmt_bytes(reserved)} for {fmt_bytes(allocated)} allocated, so a cap of "
            f"1.05 x allocated ({fmt_bytes(cap)}) is not below it: this workload put no pressure on the cache",
        )


def judge(native, shim, cap):
    """(status, figures, exit-table row) of the run under the cap against the native one."""
    s = shim.result
    row = shim.cuda_table().get(0)
    same = s["checksums"] == native["checksums"]
    problems = []
    if not same:
        problems.append("stage outputs differ from the native run")
    if s["stages"] != native["stages"]:
        problems.append(f"{s['stages']} stages vs {native['stages']}")
    if s["mem_get_info"][1] != cap:
        problems.append(f"mem_get_info total {s['mem_get_info'][1]}, not the cap")
    if row is None:
        problems.append("no `rocmguard: CUDA memory at exit` table with a dev0 row")
    elif row["peak_reserved"] > cap + 16 * MIB:  # the table prints GiB to 2 decimals
        problems.append(f"rocmguard reserved {fmt_bytes(row['peak_reserved'])}, above the cap")
    sizes = ", ".join(f"{k} {fmt_bytes(v)}" for k, v in native["models"].items())
    figures = (
        f"under the shim (caching off): {s['stages']}/{native['stages']} stages done in {shim.wall_s:.0f} s, "
        f"outputs {'identical' if same else 'DIFFERENT'}, rocmguard peak reserved "
        f"{fmt_bytes(row['peak_reserved']) if row else '?'}, retries {row['retries'] if row else '?'}, "
        f"trims {row['trims'] if row else '?'}; models: {sizes}"
    )
    return ("FAIL" if problems else "PASS"), figures + ("; " + "; ".join(problems) if problems else ""), row
