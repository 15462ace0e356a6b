#!/usr/bin/env python3
"""ci/test_decode_split_audit.py — decode_split_audit on a planted bench: the counts it tries beside
the rule's, the loss it reports (exactly, at the shape where it was planted, and only there), and its
whole run through a fake `attncheck` that prints bench tables from the rows it is given (so the rows
asked for, one placement, and the parsing of "S, cluster" cells are checked too). Standard library
only; run by ci/test.sh."""
import contextlib
import io
import os
import stat
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode_split_audit import audit, candidates, main, splits_of  # noqa: E402  (after the path)

# A fake attncheck: `bench --decode` prints a table row for each ACD_DEC_BENCH_SHAPES entry. The auto
# count is 8 (B = 8) or 2 merged in a cluster (B = 32); the times are planted so that at B = 32, 1k one
# split is 10% faster than the rule's two, and the rule is best elsewhere.
FAKE = r'''#!/usr/bin/env python3
import os, sys
assert sys.argv[1:3] == ["bench", "--decode"], sys.argv
assert os.environ["ACD_DEC_BENCH_PLACEMENTS"] == "1"
times = {(8, 1024, 8): 0.0150, (8, 1024, 4): 0.0160, (8, 1024, 1): 0.0400, (8, 1024, 16): 0.0155,
         (32, 1024, 2): 0.0275, (32, 1024, 1): 0.0250, (32, 1024, 4): 0.0350}
print("# attncheck bench v1 on Fake GPU")
print("| page | B | Nk | splits | ms | GB/s | % of peak | % across placements | plain read |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for row in os.environ["ACD_DEC_BENCH_SHAPES"].split():
    f = [int(x) for x in row.split(":")]
    B, nk, page = f[:3]
    s = f[3] if len(f) > 3 else (8 if B == 8 else 2)
    cell = f"{s}, cluster" if (B, s) == (32, 2) else str(s)
    print(f"| {page} | {B} | {nk} | {cell} | {times[(B, nk, s)]:.4f} | 1 | 1.0% | - | 2.0% |")
'''


class Candidates(unittest.TestCase):
    def test_one_half_and_twice_the_rule_within_the_units(self):
        self.assertEqual(candidates(8, 1024), [1, 4, 16])
        self.assertEqual(candidates(1, 1024), [2])
        self.assertEqual(candidates(61, 131072), [1, 30, 122])
        self.assertEqual(candidates(8, 512), [1, 4])  # 8 units of 64 keys: no 16
        self.assertEqual(candidates(200, 1 << 20), [1, 100, 256])  # a hint is clamped to 256

    def test_cells(self):
        self.assertEqual(splits_of("2, cluster"), 2)
        self.assertEqual(splits_of("61"), 61)


class Audit(unittest.TestCase):
    def test_the_loss_exactly_where_planted(self):
        rule = {(8, 1024): (8, 0.0150), (32, 1024): (2, 0.0275)}
        tried = {(8, 1024, 1): 0.0400, (8, 1024, 4): 0.0160, (32, 1024, 1): 0.0250, (32, 1024, 4): 0.0350}
        lines, flagged = audit(rule, tried, 3.0)
        self.assertEqual(flagged, [(32, 1024)])
        self.assertIn("| 32 | 1024 | 2 | 0.0275 | 1 | 0.0250 | 10.0% **over** |", lines)
        self.assertIn("| 8 | 1024 | 8 | 0.0150 | 8 | 0.0150 | 0.0% |", lines)
        self.assertEqual(audit(rule, tried, 10.5)[1], [])  # under a higher threshold nothing is marked


def write_fake(directory, script):
    """An executable named attncheck in directory, running script."""
    fake = os.path.join(directory, "attncheck")
    with open(fake, "w") as f:
        f.write(script)
    os.chmod(fake, os.stat(fake).st_mode | stat.S_IXUSR)
    return fake


class WholeRun(unittest.TestCase):
    def test_through_a_fake_attncheck(self):
        with tempfile.TemporaryDirectory() as d:
            fake = write_fake(d, FAKE)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                rc = main(["--attncheck", fake, "--batches", "8,32", "--lengths", "1024"])
        text = out.getvalue()
        self.assertEqual(rc, 0, text)
        self.assertIn("| 32 | 1024 | 2 | 0.0275 | 1 | 0.0250 | 10.0% **over** |", text)
        self.assertIn("| 8 | 1024 | 8 | 0.0150 | 8 | 0.0150 | 0.0% |", text)
        self.assertIn("1 of 2 shapes over 3%: B = 32, Nk = 1024", text)
        self.assertIn("# attncheck bench v1 on Fake GPU", text)

    def test_a_failing_bench_is_exit_1(self):
        with tempfile.TemporaryDirectory() as d:
            fake = write_fake(d, "#!/bin/sh\necho 'no CUDA device' >&2\nexit 1\n")
            err = io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(main(["--attncheck", fake, "--batches", "8", "--lengths", "1024"]), 1)
        self.assertIn("no CUDA device", err.getvalue())

    def test_bad_arguments_are_exit_2(self):
        with contextlib.redirect_stderr(io.StringIO()):
            with self.assertRaises(SystemExit) as e:
                main(["--attncheck", sys.executable, "--batches", "8,x"])
        self.assertEqual(e.exception.code, 2)


if __name__ == "__main__":
    unittest.main()
