"""2 (and 3's bound). What the shim does to step time, measured where 1% can be resolved.

- The bound (overhead.py --counts): hooked calls per step (a counting interposer in front of
  the shim) x ns per call through the shim (hook_cost.cu), over the native step; PyTorch's cache
  on (target 1%, check 2) and off (target 5%, check 3). It covers the hooks' CPU work.
- In one process (overhead.py --in-process, inprocess.py): pairs of blocks with PyTorch's
  memory in the pool and with the pool paused; the median of pooled / paused over pairs with a
  95% bootstrap interval. PASS when the whole interval is within 1.01, FAIL when it is wholly
  past it (or the memory was not where a block claims), UNRESOLVED when it straddles 1.01 after
  all the pairs the part had time for: information, neither a pass nor a fail. One workload a
  part, which gets all of the part's time."""

from runner import HERE
from shim_output import tagged, tail

TARGET = 1.01
TITLES = {"gpt2": "GPT-2 small", "resnet50": "ResNet-50", "decode": "decode (launch-bound)"}
# Seconds of a part kept back from the in-process pairs: the child's start (import torch, build
# the workload) and the parent's summary, so that the whole part ends within its budget.
IN_PROCESS_RESERVE = 45


def measuring_env(ctx):
    """The environment overhead.py gets (it preloads the shim itself where it should): the
    driver's, without deterministic cuBLAS, which only the loss comparisons need, so that the
    step times are those of the programs as users run them (and as docs/benchmarks.md has them)."""
    env = ctx.env_for(False, True)
    env.pop("CUBLAS_WORKSPACE_CONFIG")
    return env


def settings_args(ctx):
    """The driver's `--set` settings, passed on: overhead.py drops the ROCMGUARD_* variables it
    is given, so that each of its variants runs as described, and sets these on the shim's."""
    return [arg for key, value in ctx.settings.items() for arg in ("--set", f"{key}={value}")]


def check_cost_bound(ctx):
    command = [ctx.python, str(HERE / "overhead.py"), "--lib", ctx.lib, "--workloads", ",".join(TITLES),
               "--variants", "native", "--counts", "--rounds", "1", "--json", str(ctx.logs / "cost-bound.json")]
    command += settings_args(ctx)
    s = ctx.script("cost-bound", command, measuring_env(ctx), limit=400)
    bounds = tagged(s.out, "BOUND-RESULT")
    name = "shim's CPU work per step (bound)"
    if bounds is None:
        if s.out_of_time:
            ctx.row(2, name, "INCOMPLETE", s.out_of_time)
        else:
            ctx.row(2, name, "FAIL", f"no bound (exit {s.rc}): {tail(s.err or s.out)}")
        return
    for b in bounds:
        on = b.get("mode", "cache on") == "cache on"
        ctx.row(
            2 if on else 3,
            f"{b['workload']}, caching {'on' if on else 'off'}: {name}",
            b["status"],
            f"{b['added_us_per_step']:.2f} us per step = {b['share'] * 100:.5f}% of the native step "
            f"(target < {b.get('target', 0.01):.0%}; hooked calls per step x ns per call through the shim)",
            added_us_per_step=b["added_us_per_step"],
            share=b["share"],
        )


def in_process(workload):
    """The check for one workload's in-process rows, spending what is left of the part."""

    def check(ctx):
        name = f"{TITLES[workload]}, caching on: step time, pooled / paused in one process"
        budget = int(ctx.left() - IN_PROCESS_RESERVE)
        if budget < 60:
            ctx.row(2, name, "INCOMPLETE", f"{budget + IN_PROCESS_RESERVE} s left in the part: too few for pairs")
            return
        command = [ctx.python, str(HERE / "overhead.py"), "--in-process", "--lib", ctx.lib, "--workloads", workload,
                   "--budget", str(budget), "--json", str(ctx.logs / f"in-process-{workload}.json")]
        command += settings_args(ctx)
        s = ctx.script(f"in-process-{workload}", command, measuring_env(ctx), limit=budget + IN_PROCESS_RESERVE - 5)
        found = {r["workload"]: r for r in tagged(s.out, "INPROCESS-RESULT") or []}
        r = found.get(workload)
        if r is None or r.get("ratio") is None:
            if s.out_of_time:
                ctx.row(2, name, "INCOMPLETE", s.out_of_time)
            else:
                why = r["placement"] if r else f"no INPROCESS-RESULT (exit {s.rc}): {tail(s.err or s.out)}"
                ctx.row(2, name, "FAIL", f"no figure: {why}")
            return
        status, note = judge(r)
        lo, hi = r["ci"]
        ctx.row(
            2,
            name,
            status,
            f"{r['ratio']:.4f}, 95% CI [{lo:.4f}, {hi:.4f}] over {r['pairs']} pairs of {r['steps_per_block']}-step "
            f"blocks in {s.wall_s:.0f} s (target: the whole interval <= {TARGET:.2f}){note}; pooled "
            f"{r['shim_ms']:.2f} ms, paused {r['paused_ms']:.2f} ms; {r['placement']}",
            ratio=r["ratio"],
            ci=r["ci"],
            pairs=r["pairs"],
            verdict=r["status"],
        )

    check.__name__ = f"in_process_{workload}"
    return check


def judge(r):
    """(status, note) of one in-process result: inprocess.summarize's verdict on the interval
    (PASS, FAIL, UNRESOLVED), and FAIL when the memory was not where the blocks claim (then
    they measured nothing)."""
    if not r.get("placement_ok"):
        return "FAIL", "; the memory was not where the blocks claim"
    if r["status"] == "PASS" and r["ci"][1] <= TARGET:
        return "PASS", ""
    if r["status"] == "FAIL":
        return "FAIL", "; the whole interval is past the target"
    return "UNRESOLVED", (f"; the interval straddles {TARGET:.2f} after the {r['pairs']} pairs this part had "
                          "time for: not a pass, not a fail")
