#!/usr/bin/env python3
"""Tests of the corpus harness from made-up inputs (no GPU): the step-time figures of
corpus_check.py and step_rounds.py, and the rows capture_traces.py writes. test_driver.py runs
them with the rest; this file runs them alone."""

import contextlib
import csv
import gzip
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import capture_traces  # noqa: E402
import corpus_check  # noqa: E402
import inprocess  # noqa: E402
import step_rounds  # noqa: E402


class TraceRows(unittest.TestCase):
    """A recorded trace keeps each row's stream: the replay's model of PyTorch caches blocks
    per stream, and a trace of FSDP2 (parameters gathered on a stream of its own) read as one
    stream came out 3.3% under what PyTorch reserved."""

    def test_rows_keep_their_stream_and_only_completed_frees(self):
        side = 0x5A5A00
        history = [
            {"action": "segment_alloc", "addr": 0x1000000, "size": 2 << 20, "stream": side, "time_us": 1},
            {"action": "alloc", "addr": 0x1000000, "size": 512, "stream": side, "time_us": 2},
            {"action": "alloc", "addr": 0x2000000, "size": 1024, "stream": 0, "time_us": 3},
            {"action": "free_requested", "addr": 0x1000000, "size": 512, "stream": side, "time_us": 4},
            {"action": "free_completed", "addr": 0x1000000, "size": 512, "stream": side, "time_us": 5},
        ]
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "t.csv.gz"
            self.assertEqual(capture_traces.write_trace({"device_traces": [history]}, path), 4)
            with gzip.open(path, "rt", newline="") as f:
                rows = list(csv.reader(f))
        self.assertEqual(rows[0], ["Thread", "Time", "Action", "Pointer", "Size", "Stream"])
        self.assertEqual([(r[2], r[5]) for r in rows[1:]],
                         [("segment_alloc", str(side)), ("allocate", str(side)), ("allocate", "0"), ("free", str(side))])


class CorpusStepTime(unittest.TestCase):
    """corpus_check's step-time figures from made-up step lists (seconds), as a run's JSON
    holds them: a step disturbed now and then must move the ratio of median steps (MEDTIME)
    far less than the ratio of sums (TIME)."""

    def pairs(self, spike):
        # Eight pairs; the shim's steps 2% longer; in every other pair one shim step spiked.
        times = {}
        for k in range(8):
            shim = [0.5] + [0.0102] * 19
            if k % 2:
                shim[5] = spike
            times[("w", k)] = {"shim": shim, "torch": [0.5] + [0.0100] * 19}
        return times

    def test_a_spike_moves_the_sums_not_the_medians(self):
        out = {"step_time": {}}
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            corpus_check.report_times(self.pairs(spike=0.05), out)
        figures = out["step_time"]["w"]
        self.assertAlmostEqual(figures["median_step_median"], 1.02, places=6)
        self.assertEqual(figures["median_step_interval"], (1.02, 1.02))
        low, high = figures["interval"]
        self.assertLess(low, 1.03)
        self.assertGreater(high, 1.2, "the spiked pairs' sums")
        self.assertEqual(sorted(figures["steps"]), list(range(8)), "every step kept")
        self.assertIn("MEDTIME w", printed.getvalue())

    def test_the_first_step_is_left_out(self):
        shim, torch = [9.0, 1.0, 1.0, 1.0], [0.1, 1.0, 1.0, 1.0]
        self.assertEqual(corpus_check.pair_ratio_of_medians(shim, torch), 1.0)
        self.assertEqual(corpus_check.pair_ratio(shim, torch), 1.0)

    def test_pair_skip_leaves_out_the_warm_up(self):
        # PyTorch's own warm-up swings by far more than the pool's cost (seg_infer: 8-9 steps,
        # +-100 ms): with --pair-skip past it, only the steady steps count.
        shim = [0.5, 0.30, 0.20, 0.0102, 0.0102, 0.0102]
        torch = [0.5, 0.10, 0.25, 0.0100, 0.0100, 0.0100]
        self.assertGreater(corpus_check.pair_ratio(shim, torch), 1.3)
        self.assertAlmostEqual(corpus_check.pair_ratio(shim, torch, 3), 1.02, places=9)
        self.assertAlmostEqual(corpus_check.pair_ratio_of_medians(shim, torch, 3), 1.02, places=9)
        out = {"step_time": {}}
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            corpus_check.report_times({("w", 0): {"shim": shim, "torch": torch}}, out, 3)
        self.assertEqual(out["step_time"]["w"]["skip"], 3)
        self.assertAlmostEqual(out["step_time"]["w"]["median"], 1.02, places=9)
        self.assertIn("after the first 3,", printed.getvalue())

    def test_memory_runs_keep_the_budget_nothing_later_needs(self):
        self.assertEqual(corpus_check.memory_deadline(150, 0, False), 150)
        self.assertEqual(corpus_check.memory_deadline(510, 160, False), 320, "pairs: 30 s for them to start")
        self.assertEqual(corpus_check.memory_deadline(300, 0, True), 270)
        self.assertEqual(corpus_check.memory_deadline(60, 0, False), 120, "at least 120 s")

    def test_every_workload_gets_its_first_pair_before_any_its_second(self):
        # A budget that ends after three pairs' processes must have timed all three workloads.
        order = corpus_check.pair_order(["a", "b", "c"], 2)
        self.assertEqual(len(order), 12)
        self.assertEqual({w for w, _, _ in order[:6]}, {"a", "b", "c"})
        self.assertEqual(order[:2], [("a", 0, "torch"), ("a", 0, "shim")], "a pair runs together")
        self.assertEqual(order[6:8], [("a", 1, "shim"), ("a", 1, "torch")], "its order alternates")


class StepRounds(unittest.TestCase):
    """step_rounds.py's arms and its three figures of a round."""

    def test_an_arm_is_a_name_and_settings(self):
        self.assertEqual(step_rounds.parse_arm("default:"), ("default", {}))
        self.assertEqual(step_rounds.parse_arm("s:ROCMGUARD_PEAK_SLACK=25%;ROCMGUARD_VMM=0"),
                         ("s", {"ROCMGUARD_PEAK_SLACK": "25%", "ROCMGUARD_VMM": "0"}))

    def test_a_round_gives_the_sum_and_the_medians(self):
        torch = [0.5] + [0.010] * 11 + [0.020]
        shim = [0.9] + [0.010] * 11 + [0.030]
        f = step_rounds.figures(shim, torch, 10)
        self.assertAlmostEqual(f["medtime"], 1.0, places=9, msg="one slow step leaves the median")
        self.assertAlmostEqual(f["median_after_skip"], 1.0, places=9)
        self.assertAlmostEqual(f["sum_after_skip"], 0.050 / 0.040, places=9, msg="the sum shows it")

    def test_the_shim_arm_preloads_with_pytorch_cache_off(self):
        env = step_rounds.arm_env("lib.so", {"ROCMGUARD_PEAK_SLACK": "25%"})
        self.assertTrue(env["LD_PRELOAD"].endswith("lib.so"))
        self.assertEqual(env["PYTORCH_NO_CUDA_MEMORY_CACHING"], "1")
        self.assertEqual(env["ROCMGUARD_PEAK_SLACK"], "25%")
        self.assertNotIn("LD_PRELOAD", step_rounds.arm_env("lib.so", None))


class PooledCalls(unittest.TestCase):
    """overhead.py --pool: one verdict from the pairs of several in-process calls, never from
    two machines' pairs."""

    @staticmethod
    def call(ratios, device="NVIDIA H200", mode="in-process versus cache"):
        block = {"median_ms": 100.0, "pooled_bytes": 0, "reserved_bytes": 1 << 30, "new_segments": 2,
                 "misplaced_segments": 0, "stuck_tensors": 0}
        pairs = [{"shim": dict(block, median_ms=100.0 * r, reserved_bytes=0), "paused": block} for r in ratios]
        entry = {"workload": "w", "device": device, "steps_per_block": 5, "pairs": pairs}
        return {"mode": mode, "rows": [], "workloads": {"w": entry}}

    def verdict(self, *calls):
        with tempfile.TemporaryDirectory() as d:
            paths = [str(Path(d) / f"{i}.json") for i in range(len(calls))]
            for path, call in zip(paths, calls):
                Path(path).write_text(json.dumps(call))
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
                rc = inprocess.pool_calls(paths, str(Path(d) / "out.json"))
            rows = json.loads((Path(d) / "out.json").read_text())["rows"] if rc != 2 else None
        return rc, rows, err.getvalue()

    def test_two_calls_unresolved_alone_pass_together(self):
        spread = [0.90, 1.05, 0.95, 1.04, 0.97, 1.03]
        self.assertEqual(self.verdict(self.call(spread))[1][0]["status"], "UNRESOLVED")
        rc, rows, _ = self.verdict(self.call(spread), self.call([0.98, 0.99, 1.00, 0.985, 0.995, 0.99] * 3))
        self.assertEqual((rc, rows[0]["status"], rows[0]["pairs"]), (0, "PASS", 24))

    def test_other_machines_modes_or_the_same_file_twice_are_refused(self):
        same = self.call([1.0] * 6)
        for other, why in ((self.call([1.0] * 6, device="NVIDIA H100 80GB HBM3"), "not pooled"),
                           (self.call([1.0] * 6, device=None), "unnamed device"),
                           (self.call([1.0] * 6, mode="in-process"), "different modes"),
                           ({"rounds": 3, "rows": []}, "not the --json of an --in-process call")):
            rc, _, err = self.verdict(same, other)
            self.assertEqual(rc, 2)
            self.assertIn(why, err)
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "a.json"
            path.write_text(json.dumps(same))
            with contextlib.redirect_stderr(io.StringIO()) as err:
                self.assertEqual(inprocess.pool_calls([str(path), str(path)], str(Path(d) / "out.json")), 2)
            self.assertIn("named twice", err.getvalue())

    def test_pooling_from_the_command_line_leaves_no_file_unasked(self):
        """`overhead.py --pool` prints the verdict; it wrote ./overhead.json unasked, and one was
        committed by mistake in session 36."""
        with tempfile.TemporaryDirectory() as d:
            Path(d, "a.json").write_text(json.dumps(self.call([0.98, 0.99, 1.00] * 4)))
            env = {k: v for k, v in os.environ.items() if k != "OUT"}
            cmd = [sys.executable, str(Path(__file__).resolve().parent / "overhead.py"), "--in-process",
                   "--versus-cache", "--pool", "a.json"]
            out = subprocess.run(cmd, cwd=d, env=env, capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertIn("PASS", out.stdout)
            self.assertEqual(sorted(os.listdir(d)), ["a.json"])
            out = subprocess.run(cmd + ["--json", "b.json"], cwd=d, env=env, capture_output=True, text=True)
            self.assertEqual(json.loads(Path(d, "b.json").read_text())["rows"][0]["pairs"], 12)


if __name__ == "__main__":
    unittest.main(verbosity=1)
