#!/usr/bin/env python3
"""Tests of the GPU check's driver (driver.py, checks/, runner.py, report.py) without a GPU: the
parsing of what the shim and the programs print, and every check's verdicts on FAKE runs (good
ones and broken ones) played by fake_gpu.FakeGpu. Nothing here is a measurement: the tables the
driver prints for the fake runs are kept out of the output unless a test fails.

Why: the driver runs once, remotely, on a machine this project cannot reach at will; whatever
can go wrong in its own logic has to be found here. Run: python3 scripts/gpu/test_driver.py
"""

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import unittest
import unittest.mock
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import driver  # noqa: E402
import inprocess  # noqa: E402
import overhead  # noqa: E402
import report  # noqa: E402
import runner  # noqa: E402
import shim_output  # noqa: E402
from checks import cap, paths, reuse, step_time, swap, training, two_gpus  # noqa: E402
from fake_gpu import FAKE_GPU, FIRST_USE, IN_PROCESS_CHILD, FakeGpu, in_process_row, stats_table  # noqa: E402
from test_step_time import CorpusStepTime, PooledCalls, StepRounds, TraceRows  # noqa: E402

GIB, MIB = shim_output.GIB, shim_output.MIB
# The corpus harness's tests live in test_step_time.py; unittest.main() runs them here too.
CORPUS_HARNESS_TESTS = (CorpusStepTime, PooledCalls, StepRounds, TraceRows)
IPC_PATH = two_gpus.IPC_PATH

# Printed by the real librocmguard.so (ROCMGUARD_STATS=1) in front of the simulated HIP runtime
# (`bash scripts/demo.sh`, its run with rocmguard).
REAL_TABLE = """rocmguard 0.1.0: guarding HIP device memory | cap 4.00 GiB | headroom 0 B | trim at 100% | max split none | retries 3
rocmguard: HIP memory at exit
device        live   peak live    reserved  peak resvd         cap  peak-resv/live  allocs   hits  dev-allocs  dev-frees  trims  retries  ooms  syncs  dev-ms  sync-ms
dev0      65.0 MiB    2.97 GiB    3.00 GiB    3.00 GiB    4.00 GiB          1.010x    8929   8787         615         41     41       10     0      9      28        0
dev0: allocations waited 0 ms for 5 of those synchronizes
"""


class Parsing(unittest.TestCase):
    def test_real_table(self):
        tables = shim_output.parse_tables(REAL_TABLE, face="HIP")
        self.assertEqual(len(tables), 1)
        row = tables[0][0]
        self.assertEqual(row["live"], 65 * MIB)
        self.assertEqual(row["peak_reserved"], 3 * GIB)
        self.assertEqual(row["cap"], 4 * GIB)
        self.assertEqual(row["peak_reserved_per_live"], 1.010)
        self.assertEqual((row["allocs"], row["hits"], row["dev_allocs"], row["ooms"]), (8929, 8787, 615, 0))
        self.assertEqual((row["syncs"], row["dev_ms"], row["sync_ms"], row["waits"], row["wait_ms"]), (9, 28, 0, 5, 0))
        self.assertEqual(shim_output.parse_tables(REAL_TABLE), [])  # HIP, not CUDA

    def test_generated_table_round_trips(self):
        devices = {
            0: {"live": 512, "peak_live": 3 * 1024, "reserved": 2 * MIB, "peak_reserved": int(19.2 * GIB), "cap": 8 * GIB},
            1: {"live": 0, "peak_live": 0, "reserved": 0, "peak_reserved": 0, "cap": GIB},
        }
        rows = shim_output.parse_tables("noise\n" + stats_table(devices) + "after\n")[0]
        self.assertEqual(sorted(rows), [0, 1])
        self.assertAlmostEqual(rows[0]["peak_reserved"], 19.2 * GIB, delta=0.005 * GIB)
        self.assertEqual(rows[0]["live"], 512)
        self.assertEqual(rows[1]["cap"], GIB)

    def test_shim_line_results_and_tags(self):
        text = "x\n" + FIRST_USE + "\n"
        self.assertEqual(shim_output.shim_line(text), FIRST_USE)
        self.assertIsNone(shim_output.shim_line(REAL_TABLE))  # HIP's line is not CUDA's
        out = f'hello\n{shim_output.RESULT_TAG} {{"a": 1}}\n{shim_output.RESULT_TAG} not json\n'
        self.assertEqual(shim_output.results(out), [{"a": 1}])
        self.assertEqual(shim_output.tagged('BOUND-RESULT [1]\nBOUND-RESULT [2]\n', "BOUND-RESULT"), [2])
        self.assertIsNone(shim_output.tagged("BOUND-RESULT {", "BOUND-RESULT"))

    def test_settings_reach_the_shim_only(self):
        """--set KEY=VALUE as ROCMGUARD_KEY, and overhead.py's processes with the shim alone get it."""
        self.assertEqual(shim_output.settings_env(["vmm=0", "ROCMGUARD_piece_size=8MiB"]),
                         {"ROCMGUARD_VMM": "0", "ROCMGUARD_PIECE_SIZE": "8MiB"})
        with self.assertRaises(ValueError):
            shim_output.settings_env(["vmm"])
        saved = dict(overhead.SETTINGS)
        overhead.SETTINGS.update(shim_output.settings_env(["vmm=0"]))
        try:
            with unittest.mock.patch.dict("os.environ", {"ROCMGUARD_CAP": "1GiB"}):
                for variant in ("shim", "shim-nocache", "count"):
                    env = overhead.env_for(variant, "/lib/rg.so", "/lib/empty.so", "/lib/count.so")
                    self.assertEqual(env["ROCMGUARD_VMM"], "0", variant)
                    self.assertNotIn("ROCMGUARD_CAP", env)
                for variant in ("native", "empty"):
                    env = overhead.env_for(variant, "/lib/rg.so", "/lib/empty.so", "/lib/count.so")
                    self.assertFalse([k for k in env if k.startswith("ROCMGUARD_")], variant)
        finally:
            overhead.SETTINGS.clear()
            overhead.SETTINGS.update(saved)

    def test_fmt_bytes(self):
        self.assertEqual(shim_output.fmt_bytes(8 * GIB), "8.00 GiB")
        self.assertEqual(shim_output.fmt_bytes(64 * MIB), "64.0 MiB")


class FakeRuns(unittest.TestCase):
    """A part's context on a fake GPU; the runs' progress lines are kept, not printed."""

    gpus = 1

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        lib = Path(self.dir.name) / "librocmguard.so"
        lib.write_bytes(b"\x7fELF")
        self.gpu = FakeGpu(self.gpus)
        self.ctx = runner.Context(lib, quick=False, logs=Path(self.dir.name) / "logs", budget_s=540,
                                  python="python3", launcher=self.gpu)
        self.ctx.meta = self.gpu.machine(self.ctx)
        self.progress = []
        self.ctx.progress = self.progress.append

    def tearDown(self):
        self.dir.cleanup()

    def rows(self, check=None):
        return {r["name"]: r for r in self.ctx.rows if check is None or r["check"] == check}

    def statuses(self, check=None):
        return {name: r["status"] for name, r in self.rows(check).items()}


class Checks(FakeRuns):
    def test_cap(self):
        cap.check(self.ctx)
        rows = self.rows(1)
        self.assertEqual([r["status"] for r in rows.values()], ["PASS", "PASS"], rows)
        (_, on, _), (_, off, _) = self.gpu.calls
        self.assertEqual(on["ROCMGUARD_VRAM_LIMIT"], "8GiB")
        self.assertNotIn("PYTORCH_NO_CUDA_MEMORY_CACHING", on)
        self.assertEqual(off["PYTORCH_NO_CUDA_MEMORY_CACHING"], "1")
        self.assertIn("AcceleratorError", rows["cap 8.00 GiB, caching off"]["figures"])

    def test_cap_fails_without_the_cap(self):
        play = self.gpu.play_cap
        self.gpu.play_cap = lambda *a: dict(play(*a), props_total=80 * GIB)
        cap.check(self.ctx)
        self.assertEqual(set(self.statuses(1).values()), {"FAIL"})

    def test_training_all_good(self):
        training.check(self.ctx)
        rows = self.rows()
        # Per model: check 2 losses and step time, check 3 losses, step time and memory.
        self.assertEqual(len(rows), 2 * 5)
        for name, row in rows.items():
            self.assertEqual(row["status"], "INFO" if "step time" in name else "PASS", row)
        self.assertIn("two native runs equal too", rows["GPT-2 small, caching on: losses"]["figures"])
        step = rows["GPT-2 small, caching on: step time across processes"]
        self.assertIn("native run-to-run spread 0.00%", step["figures"])
        self.assertIn("judged in one process (part 3)", step["figures"])
        self.assertIn("gpt2-native-caching-again", self.ctx.runs)
        self.assertAlmostEqual(rows["GPT-2 small, caching off: memory"]["details"]["ratio"], 1.0, places=3)
        for command, env, _ in self.gpu.calls:  # the environment each run got
            self.assertEqual(env["CUBLAS_WORKSPACE_CONFIG"], ":4096:8")
            self.assertEqual(env["NCCL_NVLS_ENABLE"], "0")
            if "LD_PRELOAD" in env:
                self.assertEqual(env["ROCMGUARD_STATS"], "1")

    def test_training_failures_are_reported(self):
        self.gpu.shim_loss_change = (2, "10.51")
        self.gpu.peak_reserved = 12 * GIB
        training.check(self.ctx)
        rows = self.rows()
        self.assertEqual(rows["GPT-2 small, caching on: losses"]["status"], "FAIL")
        self.assertIn("step 2: 10.51 vs 10.5", rows["GPT-2 small, caching on: losses"]["figures"])
        self.assertEqual(rows["GPT-2 small, caching off: losses"]["status"], "FAIL")
        self.assertEqual(rows["GPT-2 small, caching off: memory"]["status"], "FAIL")
        self.assertIn("= 1.200 (target <= 1.05)", rows["GPT-2 small, caching off: memory"]["figures"])

    def test_step_time_across_processes_is_information_never_a_verdict(self):
        """A shim process 50% slower than native (what the machines' noise alone has shown) is
        printed beside the native spread and decides nothing."""
        self.gpu.step_ms.update({"shim": 150.0, "shim-nocache": 160.0})
        self.gpu.second_native = {"median_step_ms": 110.0, "step_ms": [109.0, 110.0, 111.0]}
        training.check(self.ctx)
        rows = self.rows()
        on = rows["GPT-2 small, caching on: step time across processes"]
        off = rows["ResNet-50, caching off: step time across processes"]
        self.assertEqual((on["status"], off["status"]), ("INFO", "INFO"))
        self.assertIn("native run-to-run spread 10.00%", on["figures"])
        self.assertIn("(+42.86%)", on["figures"])
        self.assertEqual(report.overall(self.ctx.rows), "PASS")

    def test_a_cost_bound_over_its_target_or_missing_fails(self):
        self.gpu.bound_share = 0.012
        step_time.check_cost_bound(self.ctx)
        rows = self.rows()
        self.assertEqual(len(rows), 6)
        self.assertEqual(rows["decode, caching on: shim's CPU work per step (bound)"]["status"], "FAIL")
        self.assertIn("1.20000% of the native step", rows["decode, caching on: shim's CPU work per step (bound)"]["figures"])
        self.assertEqual(rows["decode, caching off: shim's CPU work per step (bound)"]["status"], "PASS")
        self.assertEqual(self.rows(3)["gpt2, caching off: shim's CPU work per step (bound)"]["status"], "PASS")
        self.ctx.rows.clear()
        self.gpu.bound_missing = True
        step_time.check_cost_bound(self.ctx)
        self.assertEqual([r["status"] for r in self.ctx.rows], ["FAIL"])
        self.assertIn("nvcc: not found", self.ctx.rows[0]["figures"])

    def test_nondeterministic_program_is_not_blamed_on_the_shim(self):
        self.gpu.shim_loss_change = (2, "10.51")
        self.gpu.second_native = {"losses": ["10.98", "10.76", "10.5"]}
        training.check(self.ctx)
        row = self.rows()["GPT-2 small, caching on: losses"]
        self.assertEqual(row["status"], "SKIP", row)
        self.assertIn("two native runs differ", row["figures"])

    def test_a_silent_shim_fails(self):
        self.gpu.shim_silent = True
        training.check(self.ctx)
        row = self.rows()["ResNet-50, caching on: losses"]
        self.assertEqual(row["status"], "FAIL")
        self.assertIn("not active", row["figures"])

    def test_reuse(self):
        reuse.check(self.ctx)
        self.assertEqual(self.ctx.rows[-1]["status"], "PASS")
        self.gpu.reuse_bad = 3
        reuse.check(self.ctx)
        self.assertEqual(self.ctx.rows[-1]["status"], "FAIL")
        self.assertIn("197/200", self.ctx.rows[-1]["figures"])

    def test_swap_cap_from_the_native_run(self):
        swap.check(self.ctx)
        rows = self.rows(5)
        self.assertEqual(rows["model swapping under a cap"]["status"], "PASS", rows)
        cap_bytes = rows["model swapping under a cap"]["details"]["cap"]
        self.assertEqual(cap_bytes, -(-int(0.9 * 6 * GIB) // MIB) * MIB)
        self.assertEqual(self.gpu.calls[-1][1]["ROCMGUARD_VRAM_LIMIT"], str(cap_bytes))
        self.assertEqual(rows["cap below PyTorch's peak reserved"]["status"], "PASS")
        # Its runs get a program's whole limit, not what a shared budget left over.
        self.assertEqual([t for _, _, t in self.gpu.calls], [self.ctx.run_limit] * 2)

    def test_swap_without_pressure_says_so(self):
        self.gpu.swap_reserved = 4 * GIB + 10 * MIB
        swap.check(self.ctx)
        rows = self.rows(5)
        self.assertEqual(rows["cap below PyTorch's peak reserved"]["status"], "SKIP")
        self.assertEqual(rows["model swapping under a cap"]["details"]["cap"], -(-int(1.05 * 4 * GIB) // MIB) * MIB)

    def test_transparency_and_ipc_with_one_gpu(self):
        self.gpu.wrong = 1
        paths.check(self.ctx)
        seen = self.statuses(7)
        self.assertEqual((seen["expandable"], seen["group"]), ("PASS", "PASS"))
        self.assertEqual(seen["IPC of pooled tensors (torch.multiprocessing)"], "FAIL")
        self.assertEqual(seen["IPC, consumer not preloaded"], "FAIL")
        self.assertEqual(seen["IPC through the driver API (cuIpc*, ctypes)"], "FAIL")
        self.assertEqual(seen[paths.PEER], "SKIP")
        ipc = [env for command, env, _ in self.gpu.calls if command[-1].endswith("ipc.py")]
        self.assertTrue(ipc and all(env["LD_PRELOAD"] == self.ctx.lib for env in ipc))


class InProcess(FakeRuns):
    NAME = "decode (launch-bound), caching on: step time, pooled / paused in one process"

    def judged(self, row):
        self.ctx.rows.clear()
        self.gpu.in_process["decode"] = row
        step_time.in_process("decode")(self.ctx)
        (r,) = self.ctx.rows
        self.assertEqual(r["name"], self.NAME)
        return r

    def test_within_one_percent_passes(self):
        r = self.judged(in_process_row("decode", (0.9990, 1.0060)))
        self.assertEqual(r["status"], "PASS")
        self.assertIn("0.9990, 1.0060] over 20 pairs", r["figures"])

    def test_an_interval_across_the_target_is_unresolved_not_a_fail(self):
        r = self.judged(in_process_row("decode", (0.9861, 1.0131), "UNRESOLVED", pairs=141))
        self.assertEqual(r["status"], "UNRESOLVED")
        self.assertIn("[0.9861, 1.0131]", r["figures"])
        self.assertIn("straddles 1.01 after the 141 pairs", r["figures"])
        self.assertEqual(report.overall(self.ctx.rows), "UNRESOLVED")

    def test_past_the_target_misplaced_or_missing_fails(self):
        self.assertEqual(self.judged(in_process_row("decode", (1.012, 1.03), "FAIL"))["status"], "FAIL")
        self.assertEqual(self.judged(in_process_row("decode", placement_ok=False))["status"], "FAIL")
        self.assertEqual(self.judged(dict(in_process_row("decode"), ratio=None, placement="no pairs"))["status"], "FAIL")
        missing = self.judged(None)
        self.assertEqual(missing["status"], "FAIL")
        self.assertIn("no figure", missing["figures"])

    def test_the_pairs_get_the_rest_of_the_part_and_end_within_it(self):
        self.ctx.deadline = self.ctx.started + 400
        step_time.in_process("gpt2")(self.ctx)
        command, env, limit = self.gpu.calls[-1]
        budget = float(command[command.index("--budget") + 1])
        self.assertEqual(command[command.index("--workloads") + 1], "gpt2")
        self.assertGreater(budget, 400 - step_time.IN_PROCESS_RESERVE - 5)
        self.assertLessEqual(budget + step_time.IN_PROCESS_RESERVE, 400)
        self.assertLessEqual(limit, 400 - 5)
        self.assertNotIn("LD_PRELOAD", env)  # overhead.py preloads the shim in its child itself
        self.assertNotIn("CUBLAS_WORKSPACE_CONFIG", env)  # step times as users get them

    def test_a_part_out_of_time_says_incomplete(self):
        self.ctx.deadline = self.ctx.started + 50
        step_time.in_process("decode")(self.ctx)
        self.assertEqual(self.ctx.rows[-1]["status"], "INCOMPLETE")
        self.assertEqual(self.gpu.calls, [])

    def test_the_verdict_the_rows_rest_on(self):
        """overhead.verdict and inprocess.summarize, which the rows pass on."""
        self.assertEqual(overhead.verdict("shim", 0.99, 1.009, 20), "PASS")
        self.assertEqual(overhead.verdict("shim", 0.99, 1.011, 20), "UNRESOLVED")
        self.assertEqual(overhead.verdict("shim", 1.011, 1.02, 20), "FAIL")
        self.assertEqual(overhead.verdict("shim", 0.99, 1.0, 2), "UNRESOLVED")

        def block(ms, pooled):
            return {"median_ms": ms, "pooled_bytes": GIB if pooled else 0, "reserved_bytes": GIB,
                    "new_segments": 2, "misplaced_segments": 0, "stuck_tensors": 0}

        pairs = [{"shim": block(100.0 + (i % 3) * 0.1, True), "paused": block(100.0, False)} for i in range(30)]
        row = inprocess.summarize({"workload": "gpt2", "steps_per_block": 8, "pairs": pairs})
        self.assertEqual((row["status"], row["placement_ok"]), ("PASS", True))
        self.assertLessEqual(row["ci"][1], 1.01)
        slow = [{"shim": block(103.0, True), "paused": block(100.0, False)} for _ in range(30)]
        self.assertEqual(inprocess.summarize({"workload": "gpt2", "steps_per_block": 8, "pairs": slow})["status"], "FAIL")
        pairs[0]["paused"]["misplaced_segments"] = 1
        self.assertEqual(inprocess.summarize({"workload": "gpt2", "steps_per_block": 8, "pairs": pairs})["status"], "FAIL")

    def test_the_pool_goes_first_in_half_the_pairs_never_twice_running(self):
        """A drift within a pair must fall on each side equally often: every order puts each
        block first once, and any even run of pairs splits evenly."""
        orders = [inprocess.block_order(n) for n in range(40)]
        self.assertTrue(all(sorted(o) == [False, True] for o in orders))
        self.assertEqual(orders[0], [False, True], "the burn-in (pair 0) runs the pool first")
        for n in range(len(orders) - 1):
            self.assertNotEqual(orders[n], orders[n + 1])
        for start in range(len(orders) - 10):
            self.assertEqual(sum(o[0] is False for o in orders[start:start + 10]), 5)

    def test_against_pytorchs_cache_the_target_is_two_percent_and_pytorch_holds_nothing(self):
        """--versus-cache: the pool's blocks ran with PyTorch's cache off, so PyTorch's reserved
        bytes there are none (not a placement failure), and the target is issue 24's +2%."""
        self.assertEqual(overhead.verdict("versus-cache", 0.99, 1.019, 20), "PASS")
        self.assertEqual(overhead.verdict("versus-cache", 1.021, 1.03, 20), "FAIL")

        def block(ms, reserved, misplaced=0):
            return {"median_ms": ms, "pooled_bytes": 0, "reserved_bytes": reserved,
                    "new_segments": 2 if reserved else 0, "misplaced_segments": misplaced, "stuck_tensors": 0}

        pairs = [{"shim": block(101.5 + (i % 3) * 0.1, 0), "paused": block(100.0, GIB)} for i in range(30)]
        entry = {"workload": "moe", "steps_per_block": 8, "pairs": pairs}
        row = inprocess.summarize(entry, versus_cache=True)
        self.assertEqual((row["status"], row["placement_ok"]), ("PASS", True))
        self.assertEqual(inprocess.summarize(entry)["status"], "FAIL", "as a cache-on row: nothing pooled")
        pairs[3]["shim"]["misplaced_segments"] = 1  # PyTorch made a segment while its cache was off
        self.assertEqual(inprocess.summarize(entry, versus_cache=True)["status"], "FAIL")


    def test_a_pairs_line_says_where_its_blocks_time_went(self):
        """A pair's line gives each block's seconds in all and in moving tensors (what decides
        how many pairs a budget buys: shampoo_train's took 18 s for 1.2 s of timed steps)."""
        def block(ms, total, moving):
            return {"median_ms": ms, "pooled_bytes": 0, "reserved_bytes": 0, "misplaced_segments": 0,
                    "stuck_tensors": 0, "block_s": total, "moving_s": moving}

        pair = {"pool_first": True, "shim": block(40.0, 9.25, 7.5), "paused": block(38.0, 8.5, 6.25)}
        line = inprocess.pair_line(pair, versus_cache=True)
        self.assertIn("pool 40.00 ms, paused 38.00 ms, ratio 1.0526", line)
        self.assertIn("blocks 9.2 / 8.5 s, moving 7.5 / 6.2", line)
        self.assertIn("PyTorch holds 0 / 0 MiB", line)


class InProcessWorkloads(unittest.TestCase):
    def test_a_workload_that_fails_takes_no_other_result_with_it(self):
        """One child per workload (fake_gpu.IN_PROCESS_CHILD; session 29 lost every workload to one
        tensor the move could not handle); one whose warm-up took its share says so (vlm_infer)."""
        calls = []
        with tempfile.TemporaryDirectory() as tmp:
            (child := Path(tmp) / "child.py").write_text(IN_PROCESS_CHILD)
            command = lambda args, w, budget: calls.append((w, budget)) or [sys.executable, str(child), "--in-process-child", w]  # noqa: E731
            args = argparse.Namespace(workloads="crashes,slow,moe", budget=90.0, versus_cache=True,
                                      json=str(Path(tmp) / "overhead.json"))
            with unittest.mock.patch.object(inprocess, "child_command", command), \
                    contextlib.redirect_stdout(io.StringIO()):
                rc = inprocess.parent(args, "librocmguard.so", dict(os.environ))
            rows = {r["workload"]: r for r in json.loads(Path(args.json).read_text())["rows"]}
        self.assertEqual([(w, rows[w]["status"]) for w, _ in calls] + [rc],
                         [("crashes", "FAIL"), ("slow", "UNRESOLVED"), ("moe", "PASS"), 1])
        self.assertIn("no result (exit 3", rows["crashes"]["placement"])
        self.assertRegex(rows["slow"]["placement"], r"no pairs within its 4\d s share of the budget")
        self.assertAlmostEqual(calls[0][1], 30.0, delta=1.0, msg="an equal share of the budget")
        self.assertGreater(calls[2][1], 40.0, "the time a failed workload left goes to the rest")


class TwoGpus(FakeRuns):
    gpus = 2

    def test_ddp(self):
        two_gpus.check(self.ctx)
        rows = self.statuses(6)
        names = ("two GPUs: both ranks finish", "two GPUs: a pool per device", "two GPUs: all-reduce")
        self.assertEqual([rows[n + s] for s in ("", IPC_PATH) for n in names], ["PASS"] * 6, rows)
        self.assertEqual(rows["two GPUs: P2P copy of pooled tensors"], "PASS")
        torchruns = [(c, e) for c, e, _ in self.gpu.calls if "torch.distributed.run" in c]
        self.assertEqual(len(torchruns), 2)
        self.assertTrue(all("LD_PRELOAD" in e for _, e in torchruns))
        self.assertNotIn("NCCL_CUMEM_ENABLE", torchruns[0][1])
        self.assertEqual(torchruns[1][1].get("NCCL_CUMEM_ENABLE"), "0")

    def test_one_gpu_skips(self):
        self.ctx.meta["gpus"] = 1
        two_gpus.check(self.ctx)
        self.assertEqual([r["status"] for r in self.ctx.rows], ["SKIP"])
        self.assertEqual(self.gpu.calls, [])

    def test_wrong_p2p_data_fails(self):
        self.gpu.wrong = 2
        two_gpus.check(self.ctx)
        self.assertEqual(self.statuses(6)["two GPUs: P2P copy of pooled tensors"], "FAIL")

    def test_ddp_pools_on_the_wrong_device(self):
        self.gpu.rank_devices = {0: [0], 1: [0, 1]}
        two_gpus.check(self.ctx)
        self.assertEqual(self.statuses(6)["two GPUs: a pool per device"], "FAIL")

    def test_peer_kernel_and_ipc_pass_with_two_gpus(self):
        paths.check(self.ctx)
        self.assertEqual(set(self.statuses(7).values()), {"PASS"}, self.statuses(7))


class PartTime(FakeRuns):
    def test_out_of_time_is_incomplete_never_a_pass_or_a_skip(self):
        self.ctx.deadline = self.ctx.started + 5
        reuse.check(self.ctx)
        self.assertEqual(self.ctx.rows[-1]["status"], "INCOMPLETE")
        self.assertIn("the part's time was spent", self.ctx.rows[-1]["figures"])
        paths.check(self.ctx)
        self.assertEqual({r["status"] for r in self.ctx.rows}, {"INCOMPLETE", "SKIP"})  # SKIP: one GPU
        self.assertEqual(self.gpu.calls, [])
        self.assertEqual(report.overall(self.ctx.rows), "INCOMPLETE")

    def test_a_program_that_judges_itself_stopped_at_the_parts_end(self):
        self.ctx.deadline = self.ctx.started + 100
        self.gpu.takes["transparency"] = 200
        paths.check(self.ctx)
        rows = self.rows(7)
        self.assertEqual(rows["expandable"]["status"], "PASS")  # its line came out before the end
        self.assertNotIn("group", rows)
        self.assertEqual(rows["expandable segments; a group"]["status"], "INCOMPLETE")
        self.assertIn("stopped at the part's end", rows["expandable segments; a group"]["figures"])

    def test_a_run_stopped_at_the_parts_end_or_by_its_own_limit(self):
        self.ctx.deadline = self.ctx.started + 100
        self.gpu.takes["swap"] = 150  # more than the part has left, less than its own limit
        swap.check(self.ctx)
        row = self.rows(5)["model swapping under a cap"]
        self.assertEqual(row["status"], "INCOMPLETE")
        self.assertIn("stopped at the part's end", row["figures"])
        self.ctx.rows.clear()
        self.ctx.deadline = self.ctx.started + 540
        self.gpu.takes["swap"] = 500  # past its own limit: it hung
        swap.check(self.ctx)
        self.assertEqual(self.rows(5)["model swapping under a cap"]["status"], "FAIL")


def run_main(args, gpu):
    """driver.main on the fake GPU: (exit status, what it printed, {part: its JSON})."""
    with tempfile.TemporaryDirectory() as d:
        lib = Path(d) / "librocmguard.so"
        lib.write_bytes(b"\x7fELF")
        out = io.StringIO()
        rc = driver.main(["--lib", str(lib), "--out", str(Path(d) / "out"), *args], launcher=gpu,
                         machine=gpu.machine, out=out)
        data = {p.stem.removeprefix("gpu-check-"): json.loads(p.read_text()) for p in (Path(d) / "out").glob("*.json")}
        logs = sorted(p.name for p in (Path(d) / "out" / "gpu-check-logs").glob("*"))
    return rc, out.getvalue(), data, logs


@contextlib.contextmanager
def shown_on_failure(text):
    """The driver's output on the fake runs, printed only when an assertion fails."""
    try:
        yield
    except AssertionError as e:
        raise AssertionError(f"{e}\n--- what the driver printed for these FAKE runs ---\n{text}") from None


class Main(unittest.TestCase):
    def test_each_part_prints_a_table_of_its_own(self):
        rows_of = {1: {1, 4, 5, 6, 7}, 2: {2, 3}, 3: {2}, 4: {2}, 5: {2}}
        for part, checks in rows_of.items():
            rc, text, data, logs = run_main(["--part", str(part)], FakeGpu(gpus=2))
            with shown_on_failure(text):
                self.assertEqual(rc, 0)
                self.assertEqual(list(data), [f"part{part}"])
                self.assertEqual(logs, [f"part{part}"])
                self.assertEqual({r["check"] for r in data[f"part{part}"]["rows"]}, checks)
                self.assertIn(f"rocmguard GPU check, part {part} of 5: ", text)
                self.assertIn(f"verdict of part {part} of 5: PASS", text)
                self.assertIn(FAKE_GPU, text)
                self.assertNotIn("SKIP", text)

    def test_quick_has_every_correctness_row_and_no_step_time_verdict(self):
        gpu = FakeGpu(gpus=1)
        rc, text, data, _ = run_main(["--quick"], gpu)
        with shown_on_failure(text):
            self.assertEqual(rc, 0)
            rows = data["quick"]["rows"]
            self.assertEqual({r["check"] for r in rows}, {1, 2, 3, 4, 5, 6, 7})
            self.assertFalse([c for c, _, _ in gpu.calls if any(x.endswith("overhead.py") for x in c)])
            self.assertTrue(all(r["status"] == "INFO" for r in rows if "step time" in r["name"]))
            self.assertIn("verdict of quick: PASS", text)

    def test_all_parts_in_turn_and_their_exit_status(self):
        gpu = FakeGpu()
        gpu.in_process["decode"] = in_process_row("decode", (0.9861, 1.0131), "UNRESOLVED")
        rc, text, data, _ = run_main([], gpu)
        with shown_on_failure(text):
            self.assertEqual(rc, 3)  # nothing failed; decode unresolved
            self.assertEqual(sorted(data), [f"part{n}" for n in range(1, 6)])
            self.assertIn("gpu-check: part1 PASS, part2 PASS, part3 PASS, part4 PASS, part5 UNRESOLVED", text)
        gpu = FakeGpu()
        gpu.reuse_bad = 1
        rc, text, _, _ = run_main(["--part", "1"], gpu)
        with shown_on_failure(text):
            self.assertEqual(rc, 1)
            self.assertIn("verdict of part 1 of 5: FAIL", text)

    def test_only_and_set(self):
        gpu = FakeGpu()
        rc, text, data, _ = run_main(["--only", "4", "--set", "vmm=0"], gpu)
        with shown_on_failure(text):
            self.assertEqual((rc, list(data)), (0, ["part1"]))
            self.assertEqual({r["check"] for r in data["part1"]["rows"]}, {4})
            self.assertTrue(all(e["ROCMGUARD_VMM"] == "0" for _, e, _ in gpu.calls if "LD_PRELOAD" in e))
        # overhead.py drops the ROCMGUARD_* variables it gets: the step-time checks pass --set on.
        gpu = FakeGpu()
        rc, text, _, _ = run_main(["--part", "2", "--set", "vmm=0"], gpu)
        with shown_on_failure(text):
            timed = [c for c, _, _ in gpu.calls if any(x.endswith("overhead.py") for x in c)]
            self.assertTrue(timed)
            self.assertTrue(all(c[c.index("--set") + 1] == "ROCMGUARD_VMM=0" for c in timed if "--set" in c))
            self.assertTrue(all("--set" in c for c in timed))
        with contextlib.redirect_stderr(io.StringIO()) as err:
            self.assertEqual(run_main(["--part", "3", "--only", "4"], FakeGpu())[0], 2)
        self.assertIn("no such check", err.getvalue())


def torch_python(modules="torch, transformers"):
    """A Python that imports `modules`: $GPUCHECK_TEST_PYTHON, else this one, else None."""
    import os
    import subprocess

    for python in (os.environ.get("GPUCHECK_TEST_PYTHON"), sys.executable):
        if python and subprocess.run([python, "-c", f"import {modules}"], capture_output=True).returncode == 0:
            return python
    return None


@unittest.skipUnless(torch_python("torch"), "no Python with torch (set GPUCHECK_TEST_PYTHON)")
class InProcessTensorsOnCpu(unittest.TestCase):
    """inprocess.py's choice of what to move, asked of a CPU build of torch in a process of its
    own (torch is not imported here)."""

    # relocate's device calls, faked: a copy "to the device" is a host copy.
    FAKE_DEVICE = ("torch.cuda.synchronize = torch.cuda.empty_cache = lambda: None\n"
                   "torch.UntypedStorage.cuda = lambda self, index=None: self.clone()\n")

    def printed(self, program):
        import subprocess

        run = subprocess.run([torch_python("torch"), "-c", "import torch, inprocess\n" + program],
                             cwd=Path(__file__).resolve().parent, capture_output=True, text=True, timeout=120)
        self.assertEqual(run.returncode, 0, run.stderr[-2000:])
        return run.stdout.split()

    def test_a_fake_cuda_tensor_is_not_moved(self):
        """torch.compile's fake tensors say they are on the GPU but keep their storage on the
        meta device: moving one fails the whole in-process workload (compiled_dynamic did)."""
        program = ("from torch._subclasses.fake_tensor import FakeTensorMode\n"
                   "with FakeTensorMode(allow_non_fake_inputs=True):\n"
                   "    fake = torch.empty(4, device='cuda')\n"
                   "assert fake.is_cuda\n"
                   "print(len(inprocess.tensors(torch)))\n")
        self.assertEqual(self.printed(program), ["0"])

    def test_relocate_moves_shared_storages_together_and_leaves_empty_ones(self):
        """FSDP2 frees a gathered parameter by resizing its storage to 0: such tensors have no
        memory to move, and grouped under address 0 they were put onto one storage (fsdp_shard
        failed its first block). Tensors sharing a storage with bytes still move together, and
        keep their values. The device is faked: its copies are host copies."""
        program = (self.FAKE_DEVICE +
                   "w = torch.arange(16.).reshape(4, 4); half = torch.empty(0).set_(w.untyped_storage(), 8, (2, 4), (4, 1))\n"
                   "gone = [torch.zeros(3, 3), torch.zeros(5)]\n"
                   "for g in gone: g.untyped_storage().resize_(0)\n"
                   "old = w.untyped_storage().data_ptr()\n"
                   "pooled = lambda addr: (addr != 0 and not old <= addr < old + 64, addr, 0)  # as the shim: 0 is in no pool\n"
                   "stuck = inprocess.relocate(torch, [weakref.ref(t) for t in (w, half, *gone)], pooled, True)\n"
                   "gone[0].untyped_storage().resize_(36)  # gathered again, as FSDP2 does\n"
                   "print(stuck, w.untyped_storage().data_ptr() != old, half.untyped_storage().data_ptr() == w.data_ptr(),\n"
                   "      torch.equal(w.flatten(), torch.arange(16.)), torch.equal(half, w[2:]), gone[1].untyped_storage().nbytes())\n")
        self.assertEqual(self.printed("import weakref\n" + program), ["0", "True", "True", "True", "True", "0"])

    def test_a_view_moves_with_its_storage(self):
        """FSDP2's local shard is a view of a padded flat parameter. Left behind, it kept the old
        storage (fsdp_shard's paused blocks kept 496 MiB in the pool), and the optimizer's
        updates went to memory the next gather no longer read."""
        program = (self.FAKE_DEVICE +
                   "flat = torch.arange(12.); local = flat[:10].view(2, 5)\n"
                   "old = flat.untyped_storage().data_ptr()\n"
                   "pooled = lambda addr: (not old <= addr < old + 48, addr, 0)\n"
                   "stuck = inprocess.relocate(torch, inprocess.tensors(torch, 'cpu'), pooled, True)\n"
                   "local.add_(1)  # the optimizer's step\n"
                   "print(stuck, local.untyped_storage().data_ptr() == flat.untyped_storage().data_ptr() != old,\n"
                   "      int(flat[:10].sum()))\n")
        self.assertEqual(self.printed(program), ["0", "True", "55"])


LIB = Path(__file__).resolve().parents[2] / "target" / "release" / "librocmguard.so"


@unittest.skipUnless(torch_python(), "no Python with torch and transformers (set GPUCHECK_TEST_PYTHON)")
class RealProgramsOnCpu(unittest.TestCase):
    """The real programs, tiny, on the CPU, through the driver's own runner: what they print is
    what the driver parses, and preloading the shim does not disturb a torch process."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        lib = LIB if LIB.exists() else Path(self.dir.name) / "missing.so"
        self.ctx = runner.Context(lib, quick=True, logs=Path(self.dir.name), budget_s=600, python=torch_python())
        self.ctx.progress = lambda line: None

    def tearDown(self):
        self.dir.cleanup()

    def test_train_is_deterministic_and_parsed(self):
        for model, extra in (("gpt2", ["--tiny", "--batch", "2", "--seq", "32"]), ("resnet50", ["--batch", "2", "--image", "32"])):
            args = [str(runner.HERE / "train.py"), "--model", model, "--device", "cpu", "--warmup", "1", "--steps", "2"]
            a = self.ctx.run(f"{model}-a", args + extra, shim=False, caching=True)
            b = self.ctx.run(f"{model}-b", args + extra, shim=False, caching=False)
            self.assertTrue(a.ok, a.failure())
            self.assertTrue(b.ok, b.failure())
            equal, text = training.compare_losses(a, b)
            self.assertTrue(equal, text)
            self.assertEqual(len(a.result["step_ms"]), 2)

    @unittest.skipUnless(LIB.exists(), "no target/release/librocmguard.so")
    def test_shim_preloaded_on_a_machine_without_gpu(self):
        args = [str(runner.HERE / "swap.py"), "--tiny", "--device", "cpu", "--rounds", "1"]
        run = self.ctx.run("swap-preloaded", args, shim=True, caching=False)
        self.assertEqual(run.rc, 0, run.stderr_tail)
        self.assertEqual(run.result["stages"], 4)
        # No CUDA call was made, so the shim stayed dormant and says nothing.
        self.assertIsNone(run.shim_line)
        self.assertIn("not active", run.failure())

    def test_torchrun_rank_logs(self):
        log_dir = Path(self.dir.name) / "ranks"
        args = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "--log-dir", str(log_dir),
                "--redirects", "3", str(runner.HERE / "ddp.py"), "--backend", "gloo", "--device", "cpu",
                "--width", "32", "--steps", "3"]
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
            rc, timed_out = runner.launch([sys.executable, "-c", "import sys; print('hi'); sys.exit(3)"], {}, 30, out, err)
            self.assertEqual((rc, timed_out, out.read_text()), (3, False, "hi\n"))
            rc, timed_out = runner.launch(["sh", "-c", "sleep 30 & sleep 30"], {"PATH": "/usr/bin:/bin"}, 1, out, err)
            self.assertTrue(timed_out)



if __name__ == "__main__":
    print("test_driver.py: the GPU check's driver judged against FAKE runs (no GPU, no shim); "
          "no figure here is a measurement", file=sys.stderr, flush=True)
    unittest.main(verbosity=1)
