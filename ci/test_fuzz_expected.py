#!/usr/bin/env python3
"""ci/test_fuzz_expected.py — ci/fuzz_expected.py on planted JSON Lines: failures of an allowed
kind on an allowed line pass, a failure of another kind or on another line does not, an error
never does, and bad input is exit 2.  Standard library only; run by ci/test.sh."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
HUGE = "v1 seed=7 b=1 hq=2 hkv=2 nq=16 nk=42 d=33 dtype=f16 mask=none layout=bhsd dist=huge(1) scale=2"
NORMAL = "v1 seed=8 b=1 hq=2 hkv=2 nq=16 nk=42 d=32 dtype=f16 mask=none layout=bhsd dist=normal(0,1) scale=auto"
ALLOW = ["--allow", "O:overflow", r"dist=huge\(", "--allow", "O:vs-naive-mean", r"dist=(huge|tiny)\("]


def case(line, verdict="pass", kind=""):
    return {"kernel": "cuda-naive", "index": 0, "case": line, "verdict": verdict, "kind": kind, "why": "w"}


class FuzzExpected(unittest.TestCase):
    def run_on(self, records, text=None, args=ALLOW):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "r.jsonl")
            with open(path, "w") as f:
                f.write(text if text is not None else "".join(json.dumps(r) + "\n" for r in records))
            p = subprocess.run([sys.executable, os.path.join(HERE, "fuzz_expected.py"), path] + args,
                               capture_output=True, text=True)
            return p.returncode, p.stdout + p.stderr

    def test_allowed_failures_pass_and_are_listed(self):
        env = {"type": "environment", "kernel": "cuda-naive"}
        rc, out = self.run_on([env, case(NORMAL), case(HUGE, "fail", "O:overflow"),
                               case(HUGE, "fail", "O:vs-naive-mean")])
        self.assertEqual(rc, 0, out)
        self.assertIn("3 cases, 2 expected failures, 0 unexpected", out)
        self.assertIn("expected   [O:overflow]", out)

    def test_another_kind_or_line_fails(self):
        rc, out = self.run_on([case(HUGE, "fail", "LSE:scaled")])
        self.assertEqual(rc, 1, out)
        self.assertIn("UNEXPECTED fail [LSE:scaled]", out)
        rc, out = self.run_on([case(NORMAL, "fail", "O:overflow")])
        self.assertEqual(rc, 1, out)
        self.assertIn("1 cases, 0 expected failures, 1 unexpected", out)

    def test_an_error_is_never_expected(self):
        rc, out = self.run_on([case(HUGE, "error", "O:overflow")])
        self.assertEqual(rc, 1, out)
        self.assertIn("UNEXPECTED error", out)

    def test_bad_input_is_exit_2(self):
        rc, out = self.run_on([], text='{"case": "x", "verdict": "pass"}\nnot json\n')
        self.assertEqual(rc, 2, out)
        self.assertIn("r.jsonl:2: not a JSON record", out)
        rc, out = self.run_on([{"type": "environment"}])
        self.assertEqual(rc, 2, out)
        self.assertIn("no case records", out)
        rc, out = self.run_on([case(HUGE)], args=["--allow", "O:overflow", "dist=(huge"])
        self.assertEqual(rc, 2, out)


if __name__ == "__main__":
    unittest.main()
