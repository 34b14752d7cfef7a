#!/usr/bin/env python3
"""Tests of scripts/corpus_summary.py's --capacity: the whole corpus replayed on devices of a
size relative to each trace, through the built `rocmguard` (target/release, as scripts/test.sh
builds it)."""

import re
import subprocess
import sys
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def summary(*args):
    """corpus_summary.py's run with `args`: (exit status, stdout and stderr together)."""
    run = subprocess.run([sys.executable, str(ROOT / "scripts/corpus_summary.py"), *args],
                         capture_output=True, text=True)
    return run.returncode, run.stdout + run.stderr


def failing(out):
    """{half: (traces failing, traces)} from the capped lines of `out`."""
    return {half: (int(bad), int(all_))
            for half, bad, all_ in re.findall(r"^rocmguard +(tune|report) +failing +(\d+) of (\d+)",
                                              out, re.M)}


class Capacity(unittest.TestCase):
    def capped(self, capacity):
        """{half: (traces failing, traces)} of rocmguard on devices of `capacity`."""
        rc, out = summary("--capacity", capacity, "rocmguard")
        self.assertEqual(rc, 0, out)
        counts = failing(out)
        self.assertEqual(set(counts), {"tune", "report"}, out)
        return counts, out[-600:]

    def test_each_trace_fits_a_device_of_its_own_peak_reserved(self):
        # What tests/tests/replay_caps.rs holds the pool to, seen through the tool.
        counts, tail = self.capped("1.0:reserved")
        for half, (bad, all_) in counts.items():
            self.assertGreaterEqual(all_, 10, half)
            self.assertEqual(bad, 0, f"{half}: {tail}")

    def test_no_trace_fits_a_device_smaller_than_its_peak_live(self):
        counts, tail = self.capped("0.99:live")
        for half, (bad, all_) in counts.items():
            self.assertEqual(bad, all_, f"{half}: {tail}")

    def test_a_capacity_without_its_base_or_a_size_is_refused_with_the_forms(self):
        for bad in ("1.02", "0:reserved", "x:live"):
            rc, out = summary("--capacity", bad, "rocmguard")
            self.assertEqual(rc, 2, bad)
            self.assertIn("give F:live or F:reserved", out)


if __name__ == "__main__":
    unittest.main()
