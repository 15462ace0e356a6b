#!/usr/bin/env python3
"""ci/decode_goals.py — issue 16's two speed goals judged from one GPU visit's logs.

    python3 ci/decode_goals.py BENCH_LOG [TORCH_LOG]

BENCH_LOG is `attncheck bench --decode`'s output, TORCH_LOG ci/torch_decode_bench.py's
(default: BENCH_LOG, for a file that holds both tables, as reports/h100-decode-bench.md).
  * >= 80% of the peak HBM bandwidth at Nk >= 16k, pages of 16 and 128: the bench's
    "% of peak" (its first placement).  A miss is marked out of reach where the row's
    plain read (the bench's last column, where the log has it: one launch reading the
    same bytes and nothing else) reads under 80% itself.
  * >= 1.0x PyTorch's best backend on the same shapes (contiguous K/V), pages of 16 and
    128, every Nk: PyTorch's best ms / ours, both as the logs print them (4 decimals: a
    tie within the rounding reads 1.00x and counts as met).
Our kernel on contiguous K/V (page 0, PyTorch's layout) is printed beside, not judged.
Prints a Markdown summary and exits 0; exits 2 when a log cannot be read or holds no
decode table."""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_decode_bench import bench_table, table_rows  # noqa: E402  (after the path)

GOAL_PCT, GOAL_NK, GOAL_SPEEDUP = 80.0, 16384, 1.0
PAGED = (16, 128)


class BadLog(Exception):
    pass


def read_lines(path):
    try:
        with open(path) as f:
            return f.readlines()
    except OSError as e:
        raise BadLog(f"cannot read {path}: {e.strerror}")


def percent(cell):
    """A "% of peak" cell ("76.7%") as a number; None for "-" or a note."""
    try:
        return float(cell.rstrip("%"))
    except (AttributeError, ValueError):
        return None


def ours_rows(lines, path):
    """{(page, B, Nk): (ms, % of peak, plain read % or None)} from a bench --decode log."""
    rows = {key: (ms, percent(r.get("% of peak")), percent(r.get("plain read"))) for key, ms, r in bench_table(lines)}
    if not rows:
        raise BadLog(f"{path} holds no `bench --decode` table (a \"| page | B | Nk |\" header and its rows)")
    return rows


def torch_rows(lines, path):
    """{(B, Nk): (best backend, ms)} from ci/torch_decode_bench.py's table; shapes no backend ran are left out."""
    rows, seen = {}, False
    for r in table_rows(lines, ("B", "Nk")):
        seen = True
        try:
            rows[(int(r["B"]), int(r["Nk"]))] = (r["best"], float(r["ms"]))
        except (KeyError, ValueError):  # refused, failed or did not fit
            continue
    if not seen:
        raise BadLog(f"{path} holds no PyTorch table (ci/torch_decode_bench.py's \"| B | Nk |\" header): "
                     "give its output as TORCH_LOG")
    return rows


def device_of(lines):
    for line in lines:
        m = re.search(r"bench v\d+ on ([^(]+?) \(", line) or re.search(r"## PyTorch \S+ SDPA on ([^:]+):", line)
        if m:
            return m.group(1)
    return "a device the logs do not name"


def bandwidth_goal(ours):
    """The rows the goal covers, and its misses: (page, B, Nk, %, plain %, out of reach)."""
    covered = [k for k in sorted(ours) if k[0] in PAGED and k[2] >= GOAL_NK and ours[k][1] is not None]
    misses = []
    for k in covered:
        _, pct, plain = ours[k]
        if pct < GOAL_PCT:
            misses.append((*k, pct, plain, plain is not None and plain < GOAL_PCT))
    return covered, misses


def speedups(ours, torch, pages):
    """[(page, B, Nk, ours ms, best backend, its ms, torch ms / ours ms)] for the shapes both logs have."""
    out = []
    for (page, B, nk), (ms, _, _) in sorted(ours.items()):
        if page in pages and (B, nk) in torch:
            best, tms = torch[(B, nk)]
            out.append((page, B, nk, ms, best, tms, tms / ms))
    return out


def print_bandwidth_goal(ours, p):
    covered, misses = bandwidth_goal(ours)
    p(f"**>= {GOAL_PCT:.0f}% of the peak at Nk >= {GOAL_NK // 1024}k** (pages of 16 and 128): "
      f"met on {len(covered) - len(misses)} of {len(covered)} rows.")
    if misses:
        p("\n| page | B | Nk | % of peak | plain read | |\n| ---: | ---: | ---: | ---: | ---: | --- |")
        for page, B, nk, pct, plain, beyond in misses:
            plain_cell = "-" if plain is None else f"{plain:.1f}%"
            note = "out of reach: the plain read of these bytes is under the goal" if beyond else ""
            p(f"| {page} | {B} | {nk} | {pct:.1f}% | {plain_cell} | {note} |")


def print_speedup_goal(ours, torch, p):
    paged = speedups(ours, torch, PAGED)
    slow = [s for s in paged if s[6] < GOAL_SPEEDUP]
    p(f"\n**>= {GOAL_SPEEDUP:.1f}x PyTorch's best** (its ms / ours; pages of 16 and 128, every Nk): "
      f"met on {len(paged) - len(slow)} of {len(paged)} rows.")
    if slow:  # three decimals: a miss never prints as 1.00x
        p("\n| page | B | Nk | ours ms | PyTorch's best | its ms | speedup |")
        p("| ---: | ---: | ---: | ---: | --- | ---: | ---: |")
        for page, B, nk, ms, best, tms, x in slow:
            p(f"| {page} | {B} | {nk} | {ms:.4f} | {best} | {tms:.4f} | {x:.3f}x |")
    unmatched = sum(1 for k in ours if k[0] in PAGED and k[1:] not in torch)
    if unmatched:
        p(f"\nNot judged, no PyTorch figure (refused, failed or not run): {unmatched} paged row(s).")
    flat = speedups(ours, torch, (0,))
    if flat:
        xs = [s[6] for s in flat]
        p(f"\nNot a goal: our kernel on contiguous K/V (PyTorch's layout) reaches >= {GOAL_SPEEDUP:.1f}x on "
          f"{sum(x >= GOAL_SPEEDUP for x in xs)} of {len(xs)} rows ({min(xs):.2f}-{max(xs):.2f}x).")


def report(bench_path, torch_path, out=sys.stdout):
    bench_lines = read_lines(bench_path)
    torch_lines = bench_lines if torch_path == bench_path else read_lines(torch_path)
    ours, torch = ours_rows(bench_lines, bench_path), torch_rows(torch_lines, torch_path)
    both = bench_lines if torch_lines is bench_lines else bench_lines + torch_lines
    p = lambda *a: print(*a, file=out)
    p(f"## Issue 16's speed goals on {device_of(both)}\n")
    p(f"From `{bench_path}`" + ("" if torch_path == bench_path else f" and `{torch_path}`") + ".\n")
    print_bandwidth_goal(ours, p)
    print_speedup_goal(ours, torch, p)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bench_log", help="output of `attncheck bench --decode`")
    ap.add_argument("torch_log", nargs="?", help="output of ci/torch_decode_bench.py (default: BENCH_LOG)")
    args = ap.parse_args()
    try:
        report(args.bench_log, args.torch_log or args.bench_log)
    except BadLog as e:
        print(f"decode_goals: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
