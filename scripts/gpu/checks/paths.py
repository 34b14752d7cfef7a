"""7. Paths around the pool: expandable segments and a group (transparency.py), IPC of pooled
tensors (ipc.py, ipc_driver.py), and a kernel on GPU 1 using GPU 0's pooled memory after peer
access (peer_kernel.cu; SKIP with one GPU). Each program judges itself and prints CHECK lines."""

from checks.two_gpus import preload
from runner import HERE
from shim_output import check_lines, tail

IPC = [
    ("IPC of pooled tensors (torch.multiprocessing)", "ipc.py", [], "every tensor intact"),
    ("IPC, consumer not preloaded", "ipc.py", ["--opener-without-shim"], "a clean error, never wrong data"),
    ("IPC through the driver API (cuIpc*, ctypes)", "ipc_driver.py", [], "every tensor intact"),
]
PEER = "kernel on GPU 1 using GPU 0's pooled memory after peer access"


def check(ctx):
    s = ctx.script("transparency", [ctx.python, str(HERE / "transparency.py"), "--lib", ctx.lib])
    found = check_lines(s.out)
    for name, rest in found:
        status, _, figures = rest.partition(" ")
        ctx.row(7, name, status, figures)
    if not found or s.out_of_time:  # nothing, or not all of what it checks
        ctx.row(7, "expandable segments; a group", *missing(s, "no CHECK line"))

    env = ctx.env_for(False, True, preload(ctx))
    for name, script, extra, want in IPC:
        s = ctx.script(f"{script[:-3]}{''.join(extra).replace('-', '_')}", [ctx.python, str(HERE / script), *extra], env)
        found = check_lines(s.out)
        if not found:
            ctx.row(7, name, *missing(s, "no CHECK line"))
            continue
        text = found[0][1]
        figures = dict(zip(text.split()[::2], text.split()[1::2]))
        ok = s.rc == 0 and figures.get("wrong") == "0"
        if not extra:
            ok = ok and figures.get("refused", "0") == "0" and figures.get("failed-to-open") == "0"
        ctx.row(7, name, "PASS" if ok else "FAIL", f"{text}: {want} (exit {s.rc})")

    gpus = ctx.meta.get("gpus", 0)
    if gpus < 2:
        ctx.row(7, PEER, "SKIP", f"one GPU (nvidia-smi -L lists {gpus})")
        return
    exe = ctx.logs / "peer_kernel"
    built = ctx.script("nvcc-peer_kernel", ["nvcc", "-O2", "-cudart", "shared", "-o", str(exe), str(HERE / "peer_kernel.cu")])
    if built.rc != 0:
        ctx.row(7, PEER, *missing(built, "nvcc"))
        return
    s = ctx.script("peer_kernel", [str(exe)], env)
    if s.out_of_time:
        ctx.row(7, PEER, "INCOMPLETE", s.out_of_time)
        return
    ctx.row(7, PEER, "PASS" if s.rc == 0 else "FAIL", "; ".join(s.out.strip().splitlines()))


def missing(s, what):
    """(status, figures) for a program that printed nothing to judge: INCOMPLETE when the part's
    time ran out on it, FAIL otherwise."""
    if s.out_of_time:
        return "INCOMPLETE", s.out_of_time
    return "FAIL", f"{what} (exit {s.rc}): {tail(s.err or s.out)}"
