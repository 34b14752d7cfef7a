"""4. Freed while a side stream still writes it, reallocated at once: nothing overwritten
(reuse.py, caching off, under the shim; native as the control; and on the default stream
only, where the shim hands freed blocks out again at once)."""

from runner import HERE, broken


def check(ctx):
    iters = 100 if ctx.quick else 200
    args = [str(HERE / "reuse.py"), "--iters", str(iters)]
    shim = ctx.run("reuse-shim-nocache", args, shim=True, caching=False)
    native = ctx.run("reuse-native-nocache", args, shim=False, caching=False)
    in_order = ctx.run("reuse-default-stream-shim-nocache", args + ["--stream", "default"], shim=True, caching=False)
    name = "reuse after free, side stream and default stream only, caching off"
    if not shim.ok or not in_order.ok:
        ctx.row(4, name, *broken(shim, in_order))
        return
    d = in_order.result
    dbad = max(d["bad_fill"], d["bad_result"])
    r = shim.result
    bad = max(r["bad_fill"], r["bad_result"])
    figures = (
        f"{iters - bad}/{iters} iterations right under the shim (bad fills {r['bad_fill']}, bad side-stream "
        f"results {r['bad_result']}, worst relative error {r['worst_rel_err']:.2e}); a new tensor landed on a "
        f"just-freed address {r['reused_addresses']} times of {2 * iters}"
        f"; default stream only (reuse at once): {iters - dbad}/{iters} right, a new tensor on a just-freed "
        f"address {d['reused_addresses']} times of {2 * iters}"
    )
    problems = []
    if bad:
        problems.append(f"first failures {r['failures']}")
    if dbad:
        problems.append(f"default stream first failures {d['failures']}")
    if native.ok:
        n = native.result
        nbad = max(n["bad_fill"], n["bad_result"])
        figures += f"; native control {iters - nbad}/{iters}"
        if nbad:
            problems.append("the native control failed too: the program, not the shim, is wrong here")
    else:
        figures += f"; native control did not run ({native.failure()})"
    if r["reused_addresses"] == 0:
        figures += " (no address was reused at once: the reuse path was not exercised)"
    ctx.row(
        4, name, "FAIL" if problems else "PASS", figures + ("; " + "; ".join(problems) if problems else ""), result=r
    )
