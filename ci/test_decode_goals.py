#!/usr/bin/env python3
"""ci/test_decode_goals.py — decode_goals.py on planted logs: the bandwidth goal counts exactly the paged
rows from 16k (79.9% misses, 80.0% meets; contiguous, 4k and MLA rows are not judged), marks a miss out of
reach only where its plain read is under 80%; the speedup goal lists exactly the paged shapes under 1.0x
(a tie meets it) and leaves out a shape PyTorch refused; one file may hold both tables; a missing log, a log
without a decode table and a missing PyTorch table exit 2 with a message naming the file.  Standard library
only; run by ci/test.sh."""
import io
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode_goals import report  # noqa: E402  (after the path)

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "decode_goals.py")

BENCH = """# attncheck bench v1 on NVIDIA H200 (sm_90, 132 SMs; L2 60 MiB, flushed before each timed run)
## cuda-decode: bf16, d = 128; peak HBM 4814 GB/s (memory clock 3201 MHz, bus 6016 bits)
| page | B | Nk | splits | ms | GB/s | % of peak | % across placements | plain read |
| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
| 16 | 1 | 16384 | 64 | 0.0199 | 1689 | 35.1% | 35.1-35.2% (3) | 62.2% |
| 16 | 8 | 4096 | 8 | 0.0276 | 2427 | 50.4% | 50.4-50.7% (3) | 75.0% |
| 16 | 8 | 16384 | 8 | 0.0727 | 3694 | 79.9% | 76.3-80.7% (3) | 87.8% |
| 128 | 8 | 16384 | 8 | 0.0700 | 3729 | 80.0% | 77.4-80.0% (3) | 87.9% |
| 128 | 32 | 65536 | 2, cluster | 0.9550 | 4500 | 93.4% | 93.3-93.6% (3) | 94.0% |
| 0 | 8 | 16384 | 8 | 0.0690 | 3780 | 70.0% | 70.0% (3) | 88.0% |
| 16 | 128 | 131072 | - | skipped: K and V need 32.0 GiB | | | | |
| Hq | page | B | Nk | splits | ms | GB/s | % of peak | % across placements | plain read | TFLOP/s |
| 16 | 64 | 8 | 16384 | 4 | 0.3861 | 391 | 8.1% | - | 9.0% | 95 |
"""

TORCH = """## PyTorch 2.11 SDPA on NVIDIA H200: bf16, d = 128, Hq = 32, Hkv = 4 (enable_gqa), Nq = 1, contiguous K/V
| B | Nk | flash ms | efficient ms | cudnn ms | math ms | best | ms | GB/s | % of peak |
| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
| 1 | 16384 | 0.0332 | - | 0.0196 | 0.7093 | cudnn | 0.0196 | 1711 | 35.5% |
| 8 | 4096 | 0.0300 | - | 0.0251 | 0.3894 | cudnn | 0.0251 | 2673 | 55.6% |
| 8 | 16384 | 0.0800 | - | 0.0700 | 1.0000 | cudnn | 0.0700 | 3834 | 79.6% |
| 32 | 65536 | - | - | - | - | none | | | |
"""


def write(d, name, text):
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def run_report(bench, torch=None):
    with tempfile.TemporaryDirectory() as d:
        b = write(d, "bench.log", bench)
        t = write(d, "torch.log", torch) if torch is not None else b
        out = io.StringIO()
        report(b, t, out)
        return out.getvalue()


def table_after(text, heading):
    """The body rows of the first Markdown table after the paragraph starting `heading`, as lists of cells."""
    lines = text[text.index(heading):].splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[start + 2:end]]


class Goals(unittest.TestCase):
    def test_bandwidth_goal_judges_paged_rows_from_16k(self):
        text = run_report(BENCH, TORCH)
        self.assertIn("on NVIDIA H200", text)
        self.assertIn("at Nk >= 16k** (pages of 16 and 128): met on 2 of 4 rows.", text)
        misses = table_after(text, "**>= 80% of the peak")
        self.assertEqual([m[:5] for m in misses], [["16", "1", "16384", "35.1%", "62.2%"],
                                                   ["16", "8", "16384", "79.9%", "87.8%"]])
        self.assertTrue(misses[0][5].startswith("out of reach"))
        self.assertEqual(misses[1][5], "")

    def test_speedup_goal_lists_the_paged_shapes_under_one(self):
        text = run_report(BENCH, TORCH)
        self.assertIn("every Nk): met on 1 of 4 rows.", text)  # 128:8:16k ties cuDNN's 0.0700
        slow = table_after(text, "**>= 1.0x PyTorch's best**")
        self.assertEqual([(s[0], s[1], s[2], s[6]) for s in slow],
                         [("16", "1", "16384", "0.985x"), ("16", "8", "4096", "0.909x"),
                          ("16", "8", "16384", "0.963x")])
        self.assertIn("no PyTorch figure (refused, failed or not run): 1 paged row(s).", text)  # 128:32:64k
        self.assertIn("contiguous K/V (PyTorch's layout) reaches >= 1.0x on 1 of 1 rows (1.01-1.01x)", text)

    def test_one_file_with_both_tables(self):
        judged = lambda text: [ln for ln in text.splitlines() if not ln.startswith("From `")]
        self.assertEqual(judged(run_report(BENCH + TORCH)), judged(run_report(BENCH, TORCH)))


class BadInput(unittest.TestCase):
    def exit_of(self, *args):
        p = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)
        return p.returncode, p.stderr

    def test_missing_file(self):
        code, err = self.exit_of("/nonexistent/bench.log")
        self.assertEqual(code, 2)
        self.assertIn("cannot read /nonexistent/bench.log", err)

    def test_no_decode_table_and_no_torch_table(self):
        with tempfile.TemporaryDirectory() as d:
            code, err = self.exit_of(write(d, "t.log", TORCH))
            self.assertEqual(code, 2)
            self.assertIn("holds no `bench --decode` table", err)
            bench = write(d, "b.log", BENCH)
            code, err = self.exit_of(bench)
            self.assertEqual(code, 2)
            self.assertIn(f"{bench} holds no PyTorch table", err)
            code, _ = self.exit_of(bench, write(d, "torch.log", TORCH))
            self.assertEqual(code, 0)


if __name__ == "__main__":
    unittest.main()
