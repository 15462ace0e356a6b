#!/usr/bin/env python3
"""ci/decode_split_audit.py — does cuda-decode's automatic split count choose well on this device?

    python3 ci/decode_split_audit.py [--attncheck PATH] [--fp8] [--batches 1,8,...] [--lengths 1024,...]
                                     [--page 16] [--threshold 3]

The split rule (decode_host.cu's acd_decode_splits) was measured on the H200 (kernels/cuda/PERF.md,
sessions 5-11); this re-measures it on the device at hand. For each shape (bf16, or e4m3 with --fp8;
d = 128, Hq = 32, Hkv = 4, Nq = 1, pages of --page keys, every sequence Nk keys) `attncheck bench
--decode` times the rule's split count S, then 1, S/2 and 2S splits (at most one a 64-key unit), each
row in a process of its own on one placement (ACD_DEC_BENCH_SHAPES, ACD_DEC_BENCH_PLACEMENTS=1). The
table gives the best count measured and how much longer the rule's took; a shape where that exceeds
--threshold percent is marked. Differences of a percent or two are within one placement's spread.
Exit 0 with the table; 1 when the bench fails; 2 on bad arguments."""
import argparse
import os
import shutil
import subprocess
import sys

from torch_decode_bench import bench_rows  # ci/, beside this script

BATCHES = (1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 64, 96, 128)
LENGTHS = (1024, 4096, 16384, 65536)
MAX_SPLITS, UNIT = 256, 64  # decode.cuh: a hint's clamp, and the split boundaries' unit of keys


def splits_of(cell):
    """The split count of a row's splits cell ("8" or "2, cluster")."""
    return int(cell.split(",")[0])


def candidates(rule, nk):
    """The counts tried beside the rule's: 1, half and twice it, at most one a 64-key unit, the rule's own left out."""
    units = max(1, (nk + UNIT - 1) // UNIT)
    tried = {1, max(1, rule // 2), min(2 * rule, MAX_SPLITS, units)}
    tried.discard(rule)
    return sorted(tried)


def run_bench(attncheck, rows, fp8):
    """The bench's output for rows ("B:Nk:page[:splits]" entries), one placement each."""
    env = dict(os.environ, ACD_DEC_BENCH_SHAPES=" ".join(rows), ACD_DEC_BENCH_PLACEMENTS="1")
    cmd = [attncheck, "bench", "--decode"] + (["--fp8"] if fp8 else [])
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {p.returncode}):\n{p.stdout[-2000:]}")
    return p.stdout.splitlines()


def audit(rule_rows, tried_rows, threshold):
    """Table lines for each shape of rule_rows {(B, Nk): (S, ms)} against tried_rows {(B, Nk, S): ms}, and
    the shapes whose rule took more than threshold percent longer than the best count tried."""
    lines = ["| B | Nk | rule's splits | ms | best splits | ms | rule's time over the best |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    flagged = []
    for (B, nk), (rule, rule_ms) in sorted(rule_rows.items()):
        times = {rule: rule_ms}
        times.update({s: ms for (b, n, s), ms in tried_rows.items() if (b, n) == (B, nk)})
        best = min(times, key=lambda s: (times[s], s))
        over = 100.0 * (rule_ms / times[best] - 1.0)
        mark = " **over**" if over > threshold else ""
        lines.append(f"| {B} | {nk} | {rule} | {rule_ms:.4f} | {best} | {times[best]:.4f} | {over:.1f}%{mark} |")
        if over > threshold:
            flagged.append((B, nk))
    return lines, flagged


def default_attncheck():
    """attncheck beside ci/ (a bundle), else on PATH."""
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "attncheck")
    return here if os.access(here, os.X_OK) else shutil.which("attncheck")


def int_list(text):
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of integers")
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"'{text}': every value must be >= 1")
    return values


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--attncheck", default=None, help="the attncheck executable (default: beside ci/, else on PATH)")
    ap.add_argument("--fp8", action="store_true", help="cuda-decode-fp8 (bench --decode --fp8)")
    ap.add_argument("--batches", type=int_list, default=list(BATCHES))
    ap.add_argument("--lengths", type=int_list, default=list(LENGTHS))
    ap.add_argument("--page", type=int, default=16, help="page size in keys (0: contiguous K/V)")
    ap.add_argument("--threshold", type=float, default=3.0, help="percent over the best that marks a shape")
    args = ap.parse_args(argv)
    attncheck = args.attncheck or default_attncheck()
    if not attncheck or not os.access(attncheck, os.X_OK):
        ap.error("no attncheck executable: give --attncheck PATH")
    if args.page < 0:
        ap.error("--page must be >= 0")
    shapes = [(B, nk) for B in args.batches for nk in args.lengths]
    try:
        lines = run_bench(attncheck, [f"{B}:{nk}:{args.page}" for B, nk in shapes], args.fp8)
        rule_rows = {(B, nk): (splits_of(cell), ms) for page, B, nk, cell, ms in bench_rows(lines)}
        tries = [f"{B}:{nk}:{args.page}:{s}" for (B, nk), (rule, _) in sorted(rule_rows.items())
                 for s in candidates(rule, nk)]
        tried_lines = run_bench(attncheck, tries, args.fp8) if tries else []
    except RuntimeError as e:
        print(f"decode_split_audit: {e}", file=sys.stderr)
        return 1
    tried_rows = {(B, nk, splits_of(cell)): ms for page, B, nk, cell, ms in bench_rows(tried_lines)}
    table, flagged = audit(rule_rows, tried_rows, args.threshold)
    header = next((x for x in lines if x.startswith("# attncheck bench")), "")
    print(f"\n## The split rule against 1, S/2 and 2S: {'e4m3' if args.fp8 else 'bf16'}, pages of {args.page} "
          f"(0: contiguous), one placement a row\n{header}\n")
    print("\n".join(table))
    print(f"\n{len(flagged)} of {len(rule_rows)} shapes over {args.threshold:g}%"
          + (": " + ", ".join(f"B = {B}, Nk = {nk}" for B, nk in flagged) if flagged else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
