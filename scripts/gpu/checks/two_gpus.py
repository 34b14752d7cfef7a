"""6. Two ranks under torchrun (ddp.py), NCCL all-reduce, each rank's own device pool: with
NCCL's defaults, and with NCCL_CUMEM_ENABLE=0, where NCCL shares its buffers between the ranks'
processes through cudaIpcGetMemHandle (the path RCCL takes on ROCm). Then a P2P copy of pooled
tensors from GPU 0 to GPU 1 (p2p.py). Needs two GPUs; SKIP with one."""

import shutil

from runner import CAP, CAP_TEXT, HERE, broken
from shim_output import tail

IPC_PATH = " (NCCL_CUMEM_ENABLE=0: NCCL's IPC path)"


def check(ctx):
    gpus = ctx.meta.get("gpus", 0)
    if gpus < 2:
        ctx.row(6, "two GPUs (DDP, NCCL; NCCL's IPC path; P2P copy)", "SKIP", f"one GPU (nvidia-smi -L lists {gpus})")
        return
    ddp_rows(ctx, "", {})
    ddp_rows(ctx, IPC_PATH, {"NCCL_CUMEM_ENABLE": "0"})
    name = "two GPUs: P2P copy of pooled tensors"
    p2p = ctx.script("p2p-shim", [ctx.python, str(HERE / "p2p.py")], ctx.env_for(False, True, preload(ctx)))
    if p2p.out_of_time:
        ctx.row(6, name, "INCOMPLETE", p2p.out_of_time)
        return
    line = next((l for l in p2p.out.splitlines() if l.startswith("CHECK p2p ")), None)
    words = line.split()[2:] if line else []
    figures = dict(zip(words[::2], words[1::2]))
    ok = p2p.rc == 0 and figures.get("wrong") == "0" and figures.get("intact", "0") != "0"
    ctx.row(6, name, "PASS" if ok else "FAIL",
            (" ".join(words) if line else f"no CHECK line: {tail(p2p.err)}") + f" (exit {p2p.rc})")


def preload(ctx):
    """LD_PRELOAD and the --set settings, for the programs that judge themselves."""
    return dict(ctx.settings, LD_PRELOAD=ctx.lib)


def ddp_rows(ctx, suffix, extra_env):
    """One torchrun of ddp.py under the shim and its rows (names end in `suffix`)."""
    slug = "".join(c for c in suffix if c.isalnum())[:24]
    log_dir = ctx.logs / f"ddp-ranks{slug}"
    shutil.rmtree(log_dir, ignore_errors=True)  # only this run's rank files in it
    args = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "--log-dir", str(log_dir),
            "--redirects", "3", str(HERE / "ddp.py"), "--steps", "10" if ctx.quick else "20"]
    run = ctx.run(
        f"ddp-shim-2gpu{('-' + slug) if slug else ''}",
        args,
        shim=True,
        caching=True,
        env=dict({"ROCMGUARD_VRAM_LIMIT": CAP_TEXT}, **extra_env),
        rank_logs=log_dir,
    )
    name = "two GPUs: both ranks finish" + suffix
    if run.out_of_time:
        ctx.row(6, name, *broken(run))
        return
    ranks = run.ranks
    done = sorted(r for r, v in ranks.items() if v["result"])
    if run.rc == 0 and done == [0, 1]:
        devices = [ranks[r]["result"].get("device") for r in (0, 1)]
        ctx.row(6, name, "PASS", f"ranks 0 and 1 finished in {run.wall_s:.1f} s; devices {devices}")
    else:
        why = run.failure() or f"torchrun exit {run.rc}"
        ctx.row(
            6,
            name,
            "FAIL",
            f"{why}; ranks with a result: {done}"
            + "".join(f"; rank {r}: {tail(v['stderr_tail'], 2)}" for r, v in sorted(ranks.items()) if not v["result"]),
        )
    if done != [0, 1]:
        return
    problems, seen = [], []
    for r in (0, 1):
        v = ranks[r]
        devices = sorted(v["tables"][-1]) if v["tables"] else []
        total = v["result"].get("mem_get_info", [None, None])[1]
        seen.append(f"rank {r}: table {['dev%d' % x for x in devices]}, mem_get_info total {total}")
        if v["shim_line"] is None:
            problems.append(f"rank {r}: shim not active")
        if devices != [r]:
            problems.append(f"rank {r}: pools on {devices}, expected only dev{r}")
        if total != CAP:
            problems.append(f"rank {r}: mem_get_info total {total} != {CAP}")
    ctx.row(6, "two GPUs: a pool per device" + suffix, "FAIL" if problems else "PASS", "; ".join(seen + problems))
    r0, r1 = ranks[0]["result"], ranks[1]["result"]
    sums_ok = all(x["allreduce_sum"] == x["allreduce_expected"] for x in (r0, r1))
    sums_equal = r0["param_checksums"] == r1["param_checksums"] and len(set(r0["param_checksums"])) == 1
    ctx.row(
        6,
        "two GPUs: all-reduce" + suffix,
        "PASS" if sums_ok and sums_equal else "FAIL",
        f"all-reduce of 1+2 = {r0['allreduce_sum']} (expected {r0['allreduce_expected']}); parameter checksums "
        f"after {len(r0['losses'])} DDP steps {'equal' if sums_equal else 'DIFFERENT'} on both ranks "
        f"({r0['param_checksums'][0]})",
    )
