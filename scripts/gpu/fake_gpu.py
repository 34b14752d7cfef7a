"""A fake GPU machine for test_driver.py: plays every program the driver runs (what each would
print for the command and environment it gets), so that the driver's verdicts can be judged
without a GPU. Nothing it prints is a measurement; its GPU is called FAKE_GPU in every table."""

import json
from dataclasses import dataclass
from pathlib import Path

from runner import CAP
from shim_output import GIB, MIB, RESULT_TAG

FAKE_GPU = "FAKE GPU (test_driver.py's made-up runs; not a measurement)"
FIRST_USE = (
    "rocmguard 0.1.0: guarding CUDA device memory | cap 8.00 GiB | headroom 0 B | trim at 80% | "
    "max split none | retries 3"
)


def format_size(n):
    """rocmguard_core::format_size."""
    if n >= 1 << 30:
        return f"{n / (1 << 30):.2f} GiB"
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f} MiB"
    if n >= 1 << 10:
        return f"{n / 1024:.1f} KiB"
    return f"{n} B"


def stats_table(devices, face="CUDA"):
    """rocmguard_core::Stats::table, as the shim prints it at exit."""
    out = f"rocmguard: {face} memory at exit\n"
    out += (
        "device        live   peak live    reserved  peak resvd         cap  peak-resv/live  allocs   hits  "
        "dev-allocs  dev-frees  trims  retries  ooms  syncs  dev-ms  sync-ms\n"
    )
    for d, s in devices.items():
        sizes = " ".join(f"{format_size(s[k]):>11}" for k in ("live", "peak_live", "reserved", "peak_reserved", "cap"))
        ratio = 0.0 if s["peak_live"] == 0 else s["peak_reserved"] / s["peak_live"]
        out += (
            f"dev{d:<3} {sizes} {ratio:>14.3f}x {s.get('allocs', 10):>7} {s.get('hits', 5):>6} "
            f"{s.get('dev_allocs', 3):>11} {s.get('dev_frees', 1):>10} {s.get('trims', 0):>6} "
            f"{s.get('retries', 0):>8} {s.get('ooms', 0):>5} {s.get('syncs', 0):>6} {s.get('dev_ms', 1):>7} "
            f"{s.get('sync_ms', 0):>8}\n"
        )
    return out


@dataclass
class Raw:
    """What a program that judges itself prints: exit status, stdout, stderr."""

    rc: int
    out: str
    err: str = ""


def in_process_row(workload, ci=(0.997, 1.004), status="PASS", placement_ok=True, pairs=20):
    """One row of overhead.py --in-process's INPROCESS-RESULT line."""
    return {"workload": workload, "ratio": sum(ci) / 2, "ci": list(ci), "status": status, "pairs": pairs,
            "steps_per_block": 8, "shim_ms": 70.0, "paused_ms": 70.1, "placement_ok": placement_ok,
            "placement": "pool blocks: at least 100.0% pooled; 0 in the wrong place"}


# A stand-in for overhead.py --in-process-child: the workload named gets 20 pairs of equal
# blocks (PyTorch's cache off in the pool's, as --versus-cache), except "crashes", which exits 3,
# and "slow", whose warm-up took its whole share of the budget (no pairs).
IN_PROCESS_CHILD = """
import json, sys
name = sys.argv[sys.argv.index("--in-process-child") + 1]
if name == "crashes":
    sys.exit(3)
block = {"median_ms": 100.0, "pooled_bytes": 0, "reserved_bytes": 0, "new_segments": 0,
         "misplaced_segments": 0, "stuck_tensors": 0}
paused = dict(block, reserved_bytes=1 << 30, new_segments=2)
pairs = [] if name == "slow" else [{"shim": block, "paused": paused}] * 20
entry = {"workload": name, "steps_per_block": 8, "pairs": pairs}
print("INPROCESS-WORKLOAD " + json.dumps(entry), flush=True)
"""


class FakeGpu:
    """The launcher the driver's runner calls (runner.launch's signature). Attributes switch on
    the faults the tests look for."""

    def __init__(self, gpus=1):
        self.gpus = gpus
        self.calls = []  # (command, env, timeout)
        self.gpt2_losses = ["10.98", "10.75", "10.5"]
        self.shim_loss_change = None  # (step, value) in shim runs
        self.shim_silent = False  # the shim prints no first-use line
        self.peak_reserved = 10 * GIB
        self.step_ms = {"native": 100.0, "shim": 100.5, "native-nocache": 180.0, "shim-nocache": 103.0}
        self.second_native = {}  # what differs in every second native caching-on run's result
        self.native_runs = 0
        self.swap_reserved = 6 * GIB
        self.reuse_bad = 0
        self.rank_devices = {0: [0], 1: [1]}
        self.wrong = 0  # IPC and P2P tensors that arrive with wrong data
        self.bound_share = 0.0001  # decode's bound, as a share of its step
        self.bound_missing = False
        self.in_process = {}  # workload -> its INPROCESS-RESULT row (default: within 1%)
        self.takes = {}  # program stem -> seconds it would need (more than its limit: killed)

    def __call__(self, command, env, timeout, out_path, err_path):
        self.calls.append((command, env, timeout))
        shim = "LD_PRELOAD" in env
        nocache = env.get("PYTORCH_NO_CUDA_MEMORY_CACHING") == "1"
        script = next((Path(c).stem for c in command if c.endswith(".py")), Path(command[0]).name)
        result = getattr(self, "play_" + script)(command, env, shim, nocache)
        if self.takes.get(script, 0) > timeout:  # killed: a program that judges itself got one line out
            out_path.write_text(result.out.splitlines(keepends=True)[0] if isinstance(result, Raw) else "")
            err_path.write_text("")
            return -9, True
        if isinstance(result, Raw):
            out_path.write_text(result.out)
            err_path.write_text(result.err)
            return result.rc, False
        err = ""
        if shim and not self.shim_silent:
            err += FIRST_USE + "\n INFO rocmguard: dev0: pool over 79.19 GiB of device memory, cap 8.00 GiB\n"
        if shim:
            cap = int(env.get("ROCMGUARD_VRAM_LIMIT", "0").replace("8GiB", str(CAP))) or 79 * GIB
            err += stats_table({0: {"live": 0, "peak_live": 9 * GIB, "reserved": 2 * GIB,
                                    "peak_reserved": min(self.peak_reserved, cap), "cap": cap}})
        out_path.write_text("some output\n" + (f"{RESULT_TAG} {json.dumps(result)}\n" if result else ""))
        err_path.write_text("a warning\n" + err)
        return 0, False

    def play_cap(self, command, env, shim, nocache):
        cap = CAP if env.get("ROCMGUARD_VRAM_LIMIT") == "8GiB" else 80 * GIB
        return {
            "mem_get_info_start": [cap - 1, cap],
            "props_total": cap,
            "chunk": GIB,
            "piece": 64 * MIB,
            "first_oom": {"type": "AcceleratorError" if nocache else "OutOfMemoryError", "message": "out of memory"},
            "held_at_first_oom": 8 * GIB,
            "realloc_error": None,
            "freed_and_reallocated": 2,
            "second_oom": {"type": "OutOfMemoryError", "message": "x"},
            "intact": True,
            "fine_intact": True,
            "fine_oom": {"type": "OutOfMemoryError", "message": "x"},
            "held_at_fine_oom": 8 * GIB,
        }

    def play_train(self, command, env, shim, nocache):
        losses = list(self.gpt2_losses)
        if shim and self.shim_loss_change:
            step, value = self.shim_loss_change
            losses[step] = value
        ms = self.step_ms[("shim" if shim else "native") + ("-nocache" if nocache else "")]
        second = {}
        if not shim and not nocache:
            self.native_runs += 1
            second = self.second_native if self.native_runs % 2 == 0 else {}
        return {
            "losses": losses,
            "step_ms": [ms - 1, ms, ms + 1],
            "median_step_ms": ms,
            "batch": 8,
            "seq": 1024,
            "attn_implementation": "sdpa",
            "resnet": "torchvision",
            "max_memory_allocated": 0 if nocache else 10 * GIB,
            "max_memory_reserved": 0 if nocache else 11 * GIB,
        } | second

    def play_reuse(self, command, env, shim, nocache):
        iters = int(command[command.index("--iters") + 1])
        bad = self.reuse_bad if shim else 0
        return {
            "iters": iters,
            "bad_fill": bad,
            "bad_result": bad,
            "worst_rel_err": 0.0,
            "reused_addresses": 2 * iters if shim else 0,
            "failures": [{"iter": 3}] if bad else [],
        }

    def play_swap(self, command, env, shim, nocache):
        cap = int(env.get("ROCMGUARD_VRAM_LIMIT", 80 * GIB))
        return {
            "models": {"bert-large": int(1.25 * GIB)},
            "stages": 12,
            "checksums": ["1.0/2.0"] * 12,
            "max_memory_allocated": 0 if nocache else 4 * GIB,
            "max_memory_reserved": 0 if nocache else self.swap_reserved,
            "mem_get_info": [1, cap],
        }

    def play_ddp(self, command, env, shim, nocache):
        log_dir = Path(command[command.index("--log-dir") + 1])
        for rank in (0, 1):
            d = log_dir / "run_abc" / "attempt_0" / str(rank)
            d.mkdir(parents=True, exist_ok=True)
            res = {
                "rank": rank,
                "local_rank": rank,
                "world": 2,
                "device": rank,
                "losses": ["1.0"] * 5,
                "allreduce_sum": 3.0,
                "allreduce_expected": 3.0,
                "param_checksums": ["7.5", "7.5"],
                "mem_get_info": [1, CAP],
            }
            (d / "stdout.log").write_text(f"{RESULT_TAG} {json.dumps(res)}\n")
            rows = {
                x: {"live": 0, "peak_live": GIB, "reserved": GIB, "peak_reserved": GIB, "cap": CAP}
                for x in self.rank_devices[rank]
            }
            (d / "stderr.log").write_text(FIRST_USE + "\n" + stats_table(rows))
        return None

    def play_overhead(self, command, env, shim, nocache):
        if "--in-process" in command:
            w = command[command.index("--workloads") + 1]
            row = self.in_process.get(w, in_process_row(w))
            return Raw(0, "pair 1 ...\n" + ("INPROCESS-RESULT " + json.dumps([row]) + "\n" if row else ""))
        if self.bound_missing:
            return Raw(1, "", "hook_cost.cu not built (nvcc: not found); no bound")
        bounds = [
            {"workload": w, "mode": mode, "added_us_per_step": 1.0, "share": share, "target": target,
             "status": "PASS" if share < target else "FAIL"}
            for mode, target in (("cache on", 0.01), ("cache off", 0.05))
            for w, share in (("gpt2", 0.00002), ("resnet50", 0.00004), ("decode", self.bound_share))
        ]
        return Raw(0, "BOUND-RESULT " + json.dumps(bounds) + "\n")

    def play_transparency(self, command, env, shim, nocache):
        return Raw(0, "CHECK expandable PASS free 1.99 GiB\nCHECK group PASS got it 0.5 s after\n")

    def play_ipc(self, command, env, shim, nocache):
        w = self.wrong
        line = f"CHECK ipc intact {18 - w} refused 0 failed-to-open 0 wrong {w}\n"
        if "--opener-without-shim" in command:
            line = f"CHECK ipc intact 0 refused 0 failed-to-open {18 - w} wrong {w}\n"
        return Raw(1 if w else 0, line)

    def play_ipc_driver(self, command, env, shim, nocache):
        w = self.wrong
        return Raw(1 if w else 0, f"CHECK ipc-driver intact {10 - w} failed-to-open 0 wrong {w}\n")

    def play_p2p(self, command, env, shim, nocache):
        w = self.wrong
        return Raw(1 if w else 0, f"CHECK p2p intact {18 - w} wrong {w} peer 1\n")

    def play_nvcc(self, command, env, shim, nocache):
        return Raw(0, "")

    def play_peer_kernel(self, command, env, shim, nocache):
        return Raw(0, "enable 0\npeer before OK\npeer after OK\n")

    def machine(self, ctx):
        """report.machine's answer on this fake machine."""
        return {
            "date": "now",
            "lib": ctx.lib,
            "gpus": self.gpus,
            "nvidia_smi": FAKE_GPU,
            "probe": {"available": True, "torch": "2.11.0", "cuda": "13.0", "libcudart": ["x"]},
        }
