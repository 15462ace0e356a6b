#!/usr/bin/env python3
"""ci/test_torch_decode_bench.py — torch_decode_bench.parse_ours on a planted `bench --decode` log:
the rows of the three table formats (without and with the range across placements, and with
the plain read's column), paged and contiguous (page 0), are read with their ms, the peak from
the header, and MLA rows (under their own header, even where a row's cells would parse as a
decode row's), headers and skipped rows are not; and over_placements' first placement and range, where a backend refused
some placements or all; and a shape's process that fails (here: no PyTorch) reported as a failure,
not as a shape that did not fit.  Standard library only (PyTorch is imported only to time); run by
ci/test.sh."""
import contextlib
import importlib.util
import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_decode_bench import over_placements, parse_ours, runs_in_child  # noqa: E402  (after the path)

LOG = """## cuda-decode: bf16, d = 128, Hq = 32, Hkv = 4 (GQA 8:1), Nq = 1, causal-br, paged (page 0: contiguous); peak HBM 4814 GB/s (memory \
clock 3201 MHz, bus 6016 bits); split + combine kernels, median, L2 flushed
| page | B | Nk | splits | ms | GB/s | % of peak |
| ---: | ---: | ---: | ---: | ---: | ---: | ---: |
| 16 | 8 | 16384 | 8 | 0.0772 | 3476 | 72.2% |
| page | B | Nk | splits | ms | GB/s | % of peak | % across placements |
| 128 | 32 | 131072 | 2 | 2.2735 | 3778 | 78.5% | 78.4-89.2% (3) |
| 16 | 1 | 1024 | 8 | 0.0124 | 169 | 3.5% | - |
| 0 | 8 | 16384 | 8 | 0.0697 | 3852 | 80.0% | 79.8-80.0% (3) |
| 16 | 128 | 131072 | - | skipped: K and V need 32.0 GiB | | | |
| Hq | page | B | Nk | splits | ms | GB/s | % of peak | % across placements | TFLOP/s |
| 128 | 64 | 8 | 16384 | 4 | 0.3861 | 391 | 8.1% | - | 95 |
| Hq | page | B | Nk | splits | ms | GB/s | % of peak | % across placements | plain read | TFLOP/s |
| 128 | 64 | 1 | 1024 | 4 | 0.0300 | 100 | 2.1% | - | 9.0% | 95 |
| 16 | 16 | 1024 | 4 | 0.0300 | 100 | 2.1% | 9.0% | 95 |
| page | B | Nk | splits | ms | GB/s | % of peak | % across placements | plain read |
| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
| 16 | 32 | 16384 | 2, cluster | 0.2461 | 4363 | 90.6% | 90.4-90.7% (3) | 93.1% |
| 16 | 1 | 131072 | - | skipped: K and V need 0.5 GiB | | | | |
"""


class ParseOurs(unittest.TestCase):
    def test_both_formats_and_nothing_else(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "bench.log")
            with open(path, "w") as f:
                f.write(LOG)
            rows, peak = parse_ours(path)
        self.assertEqual(peak, 4814.0)
        self.assertEqual(rows, {(16, 8, 16384): 0.0772, (128, 32, 131072): 2.2735, (16, 1, 1024): 0.0124,
                                (0, 8, 16384): 0.0697, (16, 32, 16384): 0.2461})

    def test_no_log(self):
        self.assertEqual(parse_ours(None), ({}, None))


class OverPlacements(unittest.TestCase):
    def test_first_and_range_skip_refusals(self):
        runs = [{"cudnn": 3.0, "flash": None}, {"cudnn": 1.0, "flash": 5.0}, {"cudnn": 2.0, "flash": 4.0}]
        first, spread = over_placements(runs)
        self.assertEqual(first, {"cudnn": 3.0, "flash": 5.0})  # the first placement where each ran
        self.assertEqual(spread, {"cudnn": (1.0, 3.0), "flash": (4.0, 5.0)})

    def test_refused_everywhere(self):
        first, spread = over_placements([{"math": None}, {"math": None}])
        self.assertEqual((first, spread), ({"math": None}, {"math": None}))


class RunsInChild(unittest.TestCase):
    def test_a_failed_process_is_none_not_an_empty_run(self):
        # [] means no placement fit (the row says "do not fit"); a crashed process must not read so.
        if importlib.util.find_spec("torch") is not None:
            self.skipTest("PyTorch is installed here: the shape's process may succeed")
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertIsNone(runs_in_child(1, 1024, 1, 3))
        self.assertIn("the process for B = 1, Nk = 1024 failed", err.getvalue())


if __name__ == "__main__":
    unittest.main()
