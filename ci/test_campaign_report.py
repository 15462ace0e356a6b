#!/usr/bin/env python3
"""ci/test_campaign_report.py — ci/campaign_report.py on planted JSON Lines: the
run records are read as runs, not cases; each dtype's row (fp8 included) shows
exactly the worst figures planted, at the case that holds them; a failure is
listed with its minimal line.  Standard library only; run by ci/test.sh."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def case(index, dtype, scaled, rmse, verdict="pass", **extra):
    line = "v1 seed=%d b=1 hq=1 hkv=1 nq=8 nk=8 d=64 dtype=%s mask=none" % (index, dtype)
    rec = {"kernel": "k", "index": index, "case": line, "dtype": dtype, "verdict": verdict,
           "outputs": {"O": {"max_ulp": 2.0, "max_scaled": scaled, "rmse": rmse, "has_naive": True,
                             "naive_rmse": 2 * rmse, "vs_naive_max": 1.0, "vs_naive_mean": 0.9,
                             "unexpected_nan": 1 if verdict == "fail" else 0}}}
    rec.update(extra)
    return rec


class CampaignReport(unittest.TestCase):
    def report(self, records):
        with tempfile.TemporaryDirectory() as d:
            runs, out = os.path.join(d, "r.jsonl"), os.path.join(d, "r.md")
            with open(runs, "w") as f:
                f.write("".join(json.dumps(r) + "\n" for r in records))
            subprocess.run([sys.executable, os.path.join(HERE, "campaign_report.py"), "--title", "T", out, runs],
                           check=True)
            with open(out) as f:
                return f.read()

    def test_runs_are_not_cases_and_each_dtype_shows_its_worst(self):
        text = self.report([
            {"type": "environment", "kernel": "k", "gpu": "GPU-X", "driver": "1.2", "cuda": "13.0", "commit": "abc"},
            case(0, "e4m3", 0.5, 0.01), case(1, "e4m3", 3.25, 0.02), case(2, "bf16", 1.5, 0.004),
            case(3, "e5m2", 0.75, 0.125),
            {"type": "campaign", "kernel": "k", "cases": 4, "seconds": 2.0, "cases_per_s": 2.0, "jobs": 3},
        ])
        self.assertIn("4 cases: 4 passed, 0 failed, 0 errors.", text)
        self.assertIn("GPU GPU-X, driver 1.2, CUDA 13.0, attncheck commit abc", text)
        self.assertIn("k: 4 cases in 2 s (2 cases/s, 3 jobs)", text)
        self.assertIn("| e4m3 | O | 2 | 2 | 3.25 | 1 | 0.9 | 0.02 (0.04) |", text)
        self.assertIn("| e5m2 | O | 1 | 2 | 0.75 | 1 | 0.9 | 0.125 (0.25) |", text)
        self.assertIn("- e4m3 O 3.25: `v1 seed=1 ", text)
        rows = [l for l in text.splitlines() if l.startswith("| bf16") or l.startswith("| e4m3")]
        self.assertTrue(rows[0].startswith("| bf16"), "dtype rows in the order f32, f16, bf16, e4m3, e5m2")

    def test_a_failure_is_listed_with_its_minimal_line(self):
        text = self.report([case(0, "f16", 9.0, 0.1, verdict="fail", kind="O:scaled", why="O over budget",
                                 minimal="v1 seed=7 minimal"), case(1, "f16", 0.25, 0.1)])
        self.assertIn("2 cases: 1 passed, 1 failed, 0 errors.", text)
        self.assertIn("| O:scaled | f16 |", text)
        self.assertIn("`v1 seed=7 minimal`", text)
        self.assertIn("| f16 | O | 2 | 2 | 9 | 1 | 0.9 | 0.1 (0.2) | 1 |", text)


if __name__ == "__main__":
    unittest.main()
