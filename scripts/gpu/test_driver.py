#!/usr/bin/env python3
"""Tests of driver.py without a GPU: the parsing of what the shim and the programs print, and
every check's verdicts on made-up runs (good ones and broken ones), through a fake launcher.

Why: the driver runs once, remotely, on a machine this project cannot reach at will; whatever
can go wrong in its own logic has to be found here. Run: python3 scripts/gpu/test_driver.py
"""

import json
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import driver  # noqa: E402

GIB, MIB = driver.GIB, driver.MIB

# Printed by the real librocmguard.so (ROCMGUARD_STATS=1) in front of the simulated HIP runtime.
REAL_TABLE = """rocmguard 0.1.0: guarding HIP device memory | cap none | headroom 0 B | trim at 80% | max split none | retries 3
 INFO rocmguard: dev0: pool over 16.00 GiB of device memory, cap 16.00 GiB
rocmguard: HIP memory at exit
device        live   peak live    reserved  peak resvd         cap  peak-resv/live  allocs   hits  dev-allocs  dev-frees  trims  retries  ooms
dev0      55.0 MiB    55.0 MiB    62.0 MiB    62.0 MiB   16.00 GiB          1.127x      10      6           4          0      0        0     0
"""


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
        "dev-allocs  dev-frees  trims  retries  ooms\n"
    )
    for d, s in devices.items():
        sizes = " ".join(f"{format_size(s[k]):>11}" for k in ("live", "peak_live", "reserved", "peak_reserved", "cap"))
        ratio = 0.0 if s["peak_live"] == 0 else s["peak_reserved"] / s["peak_live"]
        out += (
            f"dev{d:<3} {sizes} {ratio:>14.3f}x {s.get('allocs', 10):>7} {s.get('hits', 5):>6} "
            f"{s.get('dev_allocs', 3):>11} {s.get('dev_frees', 1):>10} {s.get('trims', 0):>6} "
            f"{s.get('retries', 0):>8} {s.get('ooms', 0):>5}\n"
        )
    return out


FIRST_USE = "rocmguard 0.1.0: guarding CUDA device memory | cap 8.00 GiB | headroom 0 B | trim at 80% | max split none | retries 3"


class FakeGpu:
    """Plays the programs: writes what each would print for the command and environment it
    gets. Attributes switch on the faults the tests look for."""

    def __init__(self):
        self.calls = []
        self.gpt2_losses = ["10.98", "10.75", "10.5"]
        self.shim_loss_change = None  # (step, value) in shim runs
        self.shim_silent = False  # the shim prints no first-use line
        self.peak_reserved = 10 * GIB
        self.step_ms = {"native": 100.0, "shim": 100.5, "native-nocache": 180.0, "shim-nocache": 103.0}
        self.swap_reserved = 6 * GIB
        self.reuse_bad = 0
        self.rank_devices = {0: [0], 1: [1]}

    def __call__(self, command, env, timeout, out_path, err_path):
        self.calls.append((command, env))
        shim = "LD_PRELOAD" in env
        nocache = env.get("PYTORCH_NO_CUDA_MEMORY_CACHING") == "1"
        script = next((Path(c).name for c in command if c.endswith(".py")), "")
        err = ""
        if shim and not self.shim_silent:
            err += FIRST_USE + "\n INFO rocmguard: dev0: pool over 79.19 GiB of device memory, cap 8.00 GiB\n"
        result = getattr(self, "play_" + script[:-3])(command, env, shim, nocache, out_path)
        if shim:
            cap = int(env.get("ROCMGUARD_VRAM_LIMIT", "0").replace("8GiB", str(driver.CAP))) or 79 * GIB
            err += stats_table(
                {
                    0: {
                        "live": 0,
                        "peak_live": 9 * GIB,
                        "reserved": 2 * GIB,
                        "peak_reserved": min(self.peak_reserved, cap),
                        "cap": cap,
                    }
                }
            )
        out_path.write_text("some output\n" + (f"{driver.RESULT_TAG} {json.dumps(result)}\n" if result else ""))
        err_path.write_text("a warning\n" + err)
        return 0, False

    def play_cap(self, command, env, shim, nocache, out_path):
        cap = driver.CAP if env.get("ROCMGUARD_VRAM_LIMIT") == "8GiB" else 80 * GIB
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

    def play_train(self, command, env, shim, nocache, out_path):
        losses = list(self.gpt2_losses)
        if shim and self.shim_loss_change:
            step, value = self.shim_loss_change
            losses[step] = value
        key = ("shim" if shim else "native") + ("-nocache" if nocache else "")
        ms = self.step_ms[key]
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
        }

    def play_reuse(self, command, env, shim, nocache, out_path):
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

    def play_swap(self, command, env, shim, nocache, out_path):
        cap = int(env.get("ROCMGUARD_VRAM_LIMIT", 80 * GIB))
        return {
            "models": {"bert-large": int(1.25 * GIB)},
            "stages": 12,
            "checksums": ["1.0/2.0"] * 12,
            "max_memory_allocated": 0 if nocache else 4 * GIB,
            "max_memory_reserved": 0 if nocache else self.swap_reserved,
            "mem_get_info": [1, cap],
        }

    def play_ddp(self, command, env, shim, nocache, out_path):
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
                "mem_get_info": [1, driver.CAP],
            }
            (d / "stdout.log").write_text(f"{driver.RESULT_TAG} {json.dumps(res)}\n")
            rows = {
                x: {"live": 0, "peak_live": GIB, "reserved": GIB, "peak_reserved": GIB, "cap": driver.CAP}
                for x in self.rank_devices[rank]
            }
            (d / "stderr.log").write_text(FIRST_USE + "\n" + stats_table(rows))
        return None


class Parsing(unittest.TestCase):
    def test_real_table(self):
        tables = driver.parse_tables(REAL_TABLE, face="HIP")
        self.assertEqual(len(tables), 1)
        row = tables[0][0]
        self.assertEqual(row["live"], 55 * MIB)
        self.assertEqual(row["peak_reserved"], 62 * MIB)
        self.assertEqual(row["cap"], 16 * GIB)
        self.assertEqual(row["peak_reserved_per_live"], 1.127)
        self.assertEqual((row["allocs"], row["hits"], row["dev_allocs"], row["ooms"]), (10, 6, 4, 0))
        self.assertEqual(driver.parse_tables(REAL_TABLE), [])  # HIP, not CUDA

    def test_generated_table_round_trips(self):
        devices = {
            0: {
                "live": 512,
                "peak_live": 3 * 1024,
                "reserved": 2 * MIB,
                "peak_reserved": int(19.2 * GIB),
                "cap": 8 * GIB,
            },
            1: {"live": 0, "peak_live": 0, "reserved": 0, "peak_reserved": 0, "cap": GIB},
        }
        rows = driver.parse_tables("noise\n" + stats_table(devices) + "after\n")[0]
        self.assertEqual(sorted(rows), [0, 1])
        self.assertAlmostEqual(rows[0]["peak_reserved"], 19.2 * GIB, delta=0.005 * GIB)
        self.assertEqual(rows[0]["live"], 512)
        self.assertEqual(rows[1]["cap"], GIB)

    def test_shim_line_and_results(self):
        text = "x\n" + FIRST_USE + "\n"
        self.assertEqual(driver.shim_line(text), FIRST_USE)
        self.assertIsNone(driver.shim_line(REAL_TABLE))  # HIP's line is not CUDA's
        out = f'hello\n{driver.RESULT_TAG} {{"a": 1}}\n{driver.RESULT_TAG} not json\n'
        self.assertEqual(driver.results(out), [{"a": 1}])

    def test_fmt_bytes(self):
        self.assertEqual(driver.fmt_bytes(8 * GIB), "8.00 GiB")
        self.assertEqual(driver.fmt_bytes(64 * MIB), "64.0 MiB")


class Checks(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        lib = Path(self.dir.name) / "librocmguard.so"
        lib.write_bytes(b"\x7fELF")
        self.gpu = FakeGpu()
        self.ctx = driver.Context(
            lib, quick=False, logs=Path(self.dir.name) / "logs", budget_s=600, python="python3", launcher=self.gpu
        )
        # The fake runs' verdict lines (some fail on purpose) are kept, not printed as FAILED.
        self.progress = []
        self.ctx.progress = self.progress.append
        self.saved_scripts = driver.run_script
        driver.run_script = fake_scripts(wrong=0)

    def tearDown(self):
        driver.run_script = self.saved_scripts
        self.dir.cleanup()

    def rows(self, check=None):
        return {r["name"]: r for r in self.ctx.rows if check is None or r["check"] == check}

    def test_cap(self):
        driver.check_cap(self.ctx)
        rows = self.rows(1)
        self.assertEqual([r["status"] for r in rows.values()], ["PASS", "PASS"], rows)
        on, off = self.gpu.calls
        self.assertEqual(on[1]["ROCMGUARD_VRAM_LIMIT"], "8GiB")
        self.assertNotIn("PYTORCH_NO_CUDA_MEMORY_CACHING", on[1])
        self.assertEqual(off[1]["PYTORCH_NO_CUDA_MEMORY_CACHING"], "1")
        self.assertIn("AcceleratorError", rows["cap 8.00 GiB, caching off"]["figures"])

    def test_cap_fails_without_the_cap(self):
        self.gpu.play_cap_orig = self.gpu.play_cap
        self.gpu.play_cap = lambda *a: dict(self.gpu.play_cap_orig(*a), props_total=80 * GIB)
        driver.check_cap(self.ctx)
        self.assertTrue(all(r["status"] == "FAIL" for r in self.rows(1).values()))

    def test_training_all_good(self):
        driver.check_training(self.ctx)
        rows = self.ctx.rows
        # Per model: 2 rows of check 2, 3 of check 3; 3 bounds; 3 in-process step times.
        self.assertEqual(len(rows), 2 * 5 + 3 + 3)
        self.assertTrue(all(r["status"] == "PASS" for r in rows), [r for r in rows if r["status"] != "PASS"])
        self.assertIn("two native runs equal too", self.rows(2)["GPT-2 small, caching on: losses"]["figures"])
        labels = list(self.ctx.runs)
        self.assertIn("gpt2-native-caching-again", labels)
        mem = self.rows(3)["GPT-2 small, caching off: memory"]
        self.assertAlmostEqual(mem["details"]["ratio"], 1.0, places=3)
        # The environment each run got.
        for command, env in self.gpu.calls:
            self.assertEqual(env["CUBLAS_WORKSPACE_CONFIG"], ":4096:8")
            self.assertEqual(env["NCCL_NVLS_ENABLE"], "0")
            if "LD_PRELOAD" in env:
                self.assertEqual(env["ROCMGUARD_STATS"], "1")

    def test_training_failures_are_reported(self):
        self.gpu.shim_loss_change = (2, "10.51")
        self.gpu.peak_reserved = 12 * GIB
        self.gpu.step_ms["shim"] = 102.0
        driver.check_training(self.ctx)
        rows = self.rows()
        self.assertEqual(rows["GPT-2 small, caching on: losses"]["status"], "FAIL")
        self.assertIn("step 2: 10.51 vs 10.5", rows["GPT-2 small, caching on: losses"]["figures"])
        self.assertEqual(rows["GPT-2 small, caching on: step time"]["status"], "FAIL")
        self.assertIn("(+2.00%; target <= +1%)", rows["GPT-2 small, caching on: step time"]["figures"])
        self.assertEqual(rows["GPT-2 small, caching off: memory"]["status"], "FAIL")
        self.assertEqual(rows["GPT-2 small, caching off: step time"]["status"], "PASS")

    def test_a_cost_bound_over_one_percent_or_missing_fails(self):
        driver.run_script = fake_scripts(wrong=0, bound_share=0.012)
        driver.check_cost_bound(self.ctx)
        rows = self.rows(2)
        self.assertEqual(rows["decode, caching on: shim's CPU work per step (bound)"]["status"], "FAIL")
        self.assertIn("1.20000% of the native step", rows["decode, caching on: shim's CPU work per step (bound)"]["figures"])
        self.ctx.rows.clear()
        driver.run_script = lambda command, env=None, timeout=300: (1, "", "nvcc: not found")
        driver.check_cost_bound(self.ctx)
        self.assertEqual([r["status"] for r in self.ctx.rows], ["FAIL"])

    def test_in_process_rows_pass_only_within_one_percent(self):
        """Strict: UNRESOLVED (an interval across 1.01) and an unmoved memory are FAILs, a missing
        result too; only a whole interval within 1.01 with the memory moved is a PASS."""
        name = "decode, caching on: step time, pooled / paused in one process (strict)"
        driver.check_in_process(self.ctx)
        rows = self.rows(2)
        self.assertEqual([rows[n]["status"] for n in rows], ["PASS"] * 3, rows)
        self.assertIn("0.9990, 1.0060] over 20 pairs", rows[name]["figures"])
        for case in (in_process_rows((0.998, 1.015), "UNRESOLVED"), in_process_rows((1.012, 1.03), "FAIL"),
                     in_process_rows(placement_ok=False), []):
            self.ctx.rows.clear()
            driver.run_script = fake_scripts(wrong=0, in_process=case)
            driver.check_in_process(self.ctx)
            self.assertEqual(self.rows(2)[name]["status"], "FAIL", case)
        self.assertIn("no figure", self.rows(2)[name]["figures"])
        self.ctx.rows.clear()
        self.ctx.deadline = self.ctx.started + 50
        driver.check_in_process(self.ctx)
        self.assertEqual({r["status"] for r in self.ctx.rows}, {"SKIP"})

    def test_a_miss_within_the_native_spread_still_fails(self):
        self.assertEqual(driver.timing_status(100.5, 100.0, 0.01, 0.002), "PASS")
        self.assertEqual(driver.timing_status(104.0, 100.0, 0.01, 0.05), "FAIL")
        self.assertEqual(driver.timing_status(104.0, 100.0, 0.01, 0.005), "FAIL")
        self.assertEqual(driver.timing_status(104.0, 100.0, 0.01, None), "FAIL")
        self.assertEqual(driver.timing_status(110.0, 100.0, 0.01, 0.05), "FAIL")

    def test_nondeterministic_program_is_not_blamed_on_the_shim(self):
        self.gpu.shim_loss_change = (2, "10.51")
        runs = {"n": 0}
        play = self.gpu.play_train

        def native_runs_differ(command, env, shim, nocache, out_path):
            result = play(command, env, shim, nocache, out_path)
            if not shim and not nocache:
                runs["n"] += 1
                if runs["n"] % 2 == 0:  # every second native caching-on run
                    result["losses"][1] = "10.76"
            return result

        self.gpu.play_train = native_runs_differ
        driver.check_training(self.ctx)
        row = self.rows()["GPT-2 small, caching on: losses"]
        self.assertEqual(row["status"], "SKIP", row)
        self.assertIn("two native runs differ", row["figures"])

    def test_a_silent_shim_fails(self):
        self.gpu.shim_silent = True
        driver.check_training(self.ctx)
        rows = self.rows()
        self.assertEqual(rows["ResNet-50, caching on: losses"]["status"], "FAIL")
        self.assertIn("not active", rows["ResNet-50, caching on: losses"]["figures"])

    def test_reuse(self):
        driver.check_reuse(self.ctx)
        self.assertEqual(self.ctx.rows[-1]["status"], "PASS")
        self.gpu.reuse_bad = 3
        driver.check_reuse(self.ctx)
        self.assertEqual(self.ctx.rows[-1]["status"], "FAIL")
        self.assertIn("197/200", self.ctx.rows[-1]["figures"])

    def test_swap_cap_from_the_native_run(self):
        driver.check_swap(self.ctx)
        rows = self.rows(5)
        self.assertEqual(rows["model swapping under a cap"]["status"], "PASS", rows)
        cap = rows["model swapping under a cap"]["details"]["cap"]
        self.assertEqual(cap, -(-int(0.9 * 6 * GIB) // MIB) * MIB)
        self.assertEqual(self.gpu.calls[-1][1]["ROCMGUARD_VRAM_LIMIT"], str(cap))
        self.assertEqual(rows["cap below PyTorch's peak reserved"]["status"], "PASS")

    def test_swap_without_pressure_says_so(self):
        self.gpu.swap_reserved = 4 * GIB + 10 * MIB
        driver.check_swap(self.ctx)
        rows = self.rows(5)
        self.assertEqual(rows["cap below PyTorch's peak reserved"]["status"], "SKIP")
        self.assertEqual(rows["model swapping under a cap"]["details"]["cap"], -(-int(1.05 * 4 * GIB) // MIB) * MIB)

    def test_ddp(self):
        driver.check_ddp(self.ctx, gpus=1)
        self.assertEqual(self.ctx.rows[-1]["status"], "SKIP")
        driver.check_ddp(self.ctx, gpus=2)
        rows = self.rows(6)
        self.assertEqual(
            [
                rows[n + suffix]["status"]
                for suffix in ("", " (NCCL_CUMEM_ENABLE=0: NCCL's IPC path)")
                for n in ("two GPUs: both ranks finish", "two GPUs: a pool per device", "two GPUs: all-reduce")
            ],
            ["PASS"] * 6,
            rows,
        )
        self.assertEqual(rows["two GPUs: P2P copy of pooled tensors"]["status"], "PASS")
        command, env = self.gpu.calls[-1]
        self.assertIn("torch.distributed.run", command)
        self.assertIn("LD_PRELOAD", env)
        self.assertEqual(env.get("NCCL_CUMEM_ENABLE"), "0")
        self.assertNotIn("NCCL_CUMEM_ENABLE", self.gpu.calls[-2][1])

    def test_wrong_p2p_data_fails(self):
        driver.run_script = fake_scripts(wrong=2)
        driver.check_ddp(self.ctx, gpus=2)
        self.assertEqual(self.rows(6)["two GPUs: P2P copy of pooled tensors"]["status"], "FAIL")

    def test_ddp_pools_on_the_wrong_device(self):
        self.gpu.rank_devices = {0: [0], 1: [0, 1]}
        driver.check_ddp(self.ctx, gpus=2)
        self.assertEqual(self.rows(6)["two GPUs: a pool per device"]["status"], "FAIL")

    def test_budget_skips_late_runs(self):
        self.ctx.deadline = self.ctx.started + 5
        driver.check_reuse(self.ctx)
        self.assertEqual(self.ctx.rows[-1]["status"], "SKIP")
        self.assertIn("time budget", self.ctx.rows[-1]["figures"])
        driver.check_ddp(self.ctx, gpus=2)
        self.assertEqual(self.ctx.rows[-1]["status"], "SKIP")
        self.assertEqual(self.gpu.calls, [])


def in_process_rows(decode_ci=(0.9990, 1.0060), decode_status="PASS", placement_ok=True):
    """overhead.py --in-process's rows: gpt2 and resnet50 within 1%, decode as given."""
    rows = []
    for w, ci, status in (("gpt2", (0.997, 1.004), "PASS"), ("resnet50", (0.995, 1.008), "PASS"),
                          ("decode", decode_ci, decode_status)):
        rows.append({"workload": w, "ratio": sum(ci) / 2, "ci": list(ci), "status": status, "pairs": 20,
                     "steps_per_block": 8, "shim_ms": 70.0, "paused_ms": 70.1, "placement_ok": placement_ok,
                     "placement": "pool blocks: at least 100.0% pooled; 0 in the wrong place"})
    return rows


def fake_scripts(wrong, bound_share=0.0001, in_process=None):
    """Check 7's programs as they print on a GPU: transparency.py's two checks pass, ipc.py
    reports `wrong` tensors with wrong data, the peer kernel passes; check 2's cost bound
    (overhead.py --counts) with `bound_share` of the step for decode; and check 2's in-process
    A/B (overhead.py --in-process) printing `in_process` rows (default: all within 1%)."""

    def run(command, env=None, timeout=300):
        if "--in-process" in command:
            rows = in_process_rows() if in_process is None else in_process
            return 0, "pair 1 ...\nINPROCESS-RESULT " + json.dumps(rows) + "\n", ""
        if any(c.endswith("overhead.py") for c in command):
            bounds = [
                {"workload": w, "added_us_per_step": 1.0, "share": share, "status": "PASS" if share < 0.01 else "FAIL"}
                for w, share in (("gpt2", 0.00002), ("resnet50", 0.00004), ("decode", bound_share))
            ]
            return 0, "BOUND-RESULT " + json.dumps(bounds) + "\n", ""
        if any(c.endswith("transparency.py") for c in command):
            return 0, "CHECK expandable PASS free 1.99 GiB\nCHECK group PASS got it 0.5 s after\n", ""
        if any(c.endswith("ipc_driver.py") for c in command):
            return (1 if wrong else 0), f"CHECK ipc-driver intact {10 - wrong} failed-to-open 0 wrong {wrong}\n", ""
        if any(c.endswith("ipc.py") for c in command):
            line = f"CHECK ipc intact {18 - wrong} refused 0 failed-to-open 0 wrong {wrong}\n"
            if "--opener-without-shim" in command:
                line = f"CHECK ipc intact 0 refused 0 failed-to-open {18 - wrong} wrong {wrong}\n"
            return (1 if wrong else 0), line, ""
        if any(c.endswith("p2p.py") for c in command):
            return (1 if wrong else 0), f"CHECK p2p intact {18 - wrong} wrong {wrong} peer 1\n", ""
        if command[0] == "nvcc":
            return 0, "", ""
        return 0, "enable 0\npeer before OK\npeer after OK\n", ""

    return run


class Transparency(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.ctx = driver.Context("/x/librocmguard.so", True, Path(self.dir.name), 100)
        self.saved = driver.run_script

    def tearDown(self):
        driver.run_script = self.saved
        self.dir.cleanup()

    def statuses(self, wrong, gpus):
        driver.run_script = fake_scripts(wrong)
        driver.check_transparency(self.ctx, gpus)
        return {r["name"]: r["status"] for r in self.ctx.rows}

    def test_wrong_ipc_data_fails_and_one_gpu_skips_peer(self):
        seen = self.statuses(wrong=1, gpus=1)
        self.assertEqual(seen["expandable"], "PASS")
        self.assertEqual(seen["group"], "PASS")
        self.assertEqual(seen["IPC of pooled tensors (torch.multiprocessing)"], "FAIL")
        self.assertEqual(seen["IPC, consumer not preloaded"], "FAIL")
        self.assertEqual(seen["IPC through the driver API (cuIpc*, ctypes)"], "FAIL")
        self.assertEqual(seen["kernel on GPU 1 using GPU 0's pooled memory after peer access"], "SKIP")

    def test_all_pass_with_two_gpus(self):
        seen = self.statuses(wrong=0, gpus=2)
        self.assertEqual(set(seen.values()), {"PASS"}, seen)


class Main(unittest.TestCase):
    def test_end_to_end_with_a_fake_gpu(self):
        with tempfile.TemporaryDirectory() as d:
            lib = Path(d) / "librocmguard.so"
            lib.write_bytes(b"\x7fELF")
            gpu = FakeGpu()
            saved = driver.launch, driver.machine, driver.run_script

            def machine(ctx):
                ctx.meta = {
                    "mode": "full",
                    "date": "now",
                    "lib": ctx.lib,
                    "gpus": 2,
                    "nvidia_smi": "Fake H100",
                    "probe": {"available": True, "torch": "2.11.0", "cuda": "13.0", "libcudart": ["x"]},
                }
                return ctx.meta

            driver.launch, driver.machine, driver.run_script = gpu, machine, fake_scripts(wrong=0)
            try:
                rc = driver.main(["--lib", str(lib), "--json", str(Path(d) / "out.json")])
            finally:
                driver.launch, driver.machine, driver.run_script = saved
            data = json.loads((Path(d) / "out.json").read_text())
            self.assertEqual(rc, 0)
            self.assertEqual(data["status"], "PASS")
            self.assertEqual(sorted({r["check"] for r in data["rows"]}), [1, 2, 3, 4, 5, 6, 7])
            self.assertTrue((Path(d) / "gpu-check-logs" / "gpt2-shim-caching.stderr").exists())


def torch_python():
    """A Python that imports torch: $GPUCHECK_TEST_PYTHON, else this one, else None."""
    import os
    import subprocess

    for python in (os.environ.get("GPUCHECK_TEST_PYTHON"), sys.executable):
        if python and subprocess.run([python, "-c", "import torch, transformers"], capture_output=True).returncode == 0:
            return python
    return None


@unittest.skipUnless(torch_python(), "no Python with torch and transformers (set GPUCHECK_TEST_PYTHON)")
class RealProgramsOnCpu(unittest.TestCase):
    """The real programs, tiny, on the CPU, through the driver's own runner: what they print is
    what the driver parses, and preloading the shim does not disturb a torch process."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        lib = Path(__file__).resolve().parents[2] / "target" / "release" / "librocmguard.so"
        self.lib_exists = lib.exists()
        self.ctx = driver.Context(
            lib if lib.exists() else Path(self.dir.name) / "missing.so",
            quick=True,
            logs=Path(self.dir.name),
            budget_s=600,
            python=torch_python(),
        )

    def tearDown(self):
        self.dir.cleanup()

    def test_train_is_deterministic_and_parsed(self):
        for model, extra in (
            ("gpt2", ["--tiny", "--batch", "2", "--seq", "32"]),
            ("resnet50", ["--batch", "2", "--image", "32"]),
        ):
            args = [str(driver.HERE / "train.py"), "--model", model, "--device", "cpu", "--warmup", "1", "--steps", "2"]
            a = self.ctx.run(f"{model}-a", args + extra, shim=False, caching=True)
            b = self.ctx.run(f"{model}-b", args + extra, shim=False, caching=False)
            self.assertTrue(a.ok, a.failure())
            self.assertTrue(b.ok, b.failure())
            equal, text = driver.compare_losses(a, b)
            self.assertTrue(equal, text)
            self.assertEqual(len(a.result["step_ms"]), 2)

    @unittest.skipUnless(
        (Path(__file__).resolve().parents[2] / "target/release/librocmguard.so").exists(),
        "no target/release/librocmguard.so",
    )
    def test_shim_preloaded_on_a_machine_without_gpu(self):
        args = [str(driver.HERE / "swap.py"), "--tiny", "--device", "cpu", "--rounds", "1"]
        run = self.ctx.run("swap-preloaded", args, shim=True, caching=False)
        self.assertEqual(run.rc, 0, run.stderr_tail)
        self.assertEqual(run.result["stages"], 4)
        # No CUDA call was made, so the shim stayed dormant and says nothing.
        self.assertIsNone(run.shim_line)
        self.assertIn("not active", run.failure())

    def test_torchrun_rank_logs(self):
        log_dir = Path(self.dir.name) / "ranks"
        args = [
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            "--log-dir",
            str(log_dir),
            "--redirects",
            "3",
            str(driver.HERE / "ddp.py"),
            "--backend",
            "gloo",
            "--device",
            "cpu",
            "--width",
            "32",
            "--steps",
            "3",
        ]
        run = self.ctx.run("ddp-cpu", args, shim=False, caching=True, rank_logs=log_dir)
        self.assertEqual(sorted(run.ranks), [0, 1])
        results = [run.ranks[r]["result"] for r in (0, 1)]
        # gloo on the CPU may abort in its teardown after the result is printed; the results count.
        self.assertTrue(all(results), run.stderr_tail)
        self.assertEqual(results[0]["param_checksums"], results[1]["param_checksums"])
        self.assertEqual(results[0]["allreduce_sum"], 3.0)


class Launch(unittest.TestCase):
    def test_exit_code_output_and_timeout(self):
        with tempfile.TemporaryDirectory() as d:
            out, err = Path(d) / "o", Path(d) / "e"
            rc, timed_out = driver.launch(
                [sys.executable, "-c", "import sys; print('hi'); sys.exit(3)"], {}, 30, out, err
            )
            self.assertEqual((rc, timed_out, out.read_text()), (3, False, "hi\n"))
            rc, timed_out = driver.launch(["sh", "-c", "sleep 30 & sleep 30"], {"PATH": "/usr/bin:/bin"}, 1, out, err)
            self.assertTrue(timed_out)


if __name__ == "__main__":
    unittest.main(verbosity=1)
