#!/usr/bin/env python3
"""ci/torch_decode_bench.py — PyTorch scaled_dot_product_attention on the decode
shapes of `attncheck bench --decode`, printed beside cuda-decode's numbers.

    python3 ci/torch_decode_bench.py [--ours BENCH_LOG] [--quick] [--peak-gbs GBS] [--placements N]

Shapes: bf16, d = 128, Hq = 32, Hkv = 4 (enable_gqa), Nq = 1 (no mask: with one
query row bottom-right causal hides nothing), B in 1, 8, 32, 128, Nk in 1k .. 128k.
K and V are contiguous (B, Hkv, Nk, d): a paged cache gathered beforehand, the
gather not timed.  Every SDPA backend (flash, efficient, cuDNN, math) is tried;
a backend that refuses the shape or runs out of memory is left blank; the best
is reported.  Each shape runs in a Python process of its own, timed on
--placements placements of its tensors (default 3: allocated behind pads of
0, 66, 132 MiB, as bench --decode's rows): the first, a fresh allocation,
printed, with the best backend's range over all.  Times:
CUDA events, median of repeats after a warm-up, the L2 flushed before each.  Bandwidth = bytes of K and V / time, as in our bench;
the peak is read from BENCH_LOG's header (`peak HBM N GB/s`), else NVML, else
--peak-gbs.  With BENCH_LOG the table adds cuda-decode's times for pages of 16
and 128 and for contiguous K/V (page 0, the layout PyTorch reads here), and the
speedups torch_ms / ours_ms (>= 1: cuda-decode is faster)."""
import argparse
import json
import os
import re
import subprocess
import sys

from torch_timing import median_ms  # ci/, beside this script

HQ, HKV, D = 32, 4, 128
BATCHES = (1, 8, 32, 128)
LENGTHS = (1024, 4096, 16384, 65536, 131072)


def table_rows(lines, first_cells):
    """Each row of the Markdown tables among lines whose header starts with first_cells, as {header cell: cell}:
    a header is a row whose first cell is neither a number nor a separator; rows under other headers, headers and
    separators are not yielded.  A short row (a "skipped" or "failed" note) lacks the later keys."""
    header = None
    for line in lines:
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not cells[0].isdigit() and not cells[0].startswith("-"):  # a header
            header = cells if cells[:len(first_cells)] == list(first_cells) else None
        elif header and cells[0].isdigit():
            yield dict(zip(header, cells))


def bench_table(lines):
    """Each timed row of a `bench --decode` table among lines (under a "| page | B | Nk |" header; MLA's
    table starts "| Hq |") as ((page, B, Nk), ms, {header cell: cell}); skipped rows are not yielded."""
    for row in table_rows(lines, ("page", "B", "Nk")):
        try:  # older logs lack the last columns; a skipped row's ms cell is its note
            yield (int(row["page"]), int(row["B"]), int(row["Nk"])), float(row["ms"]), row
        except (KeyError, ValueError):
            pass


def bench_rows(lines):
    """(page, B, Nk, splits cell, ms) of each timed row of a `bench --decode` table among lines."""
    for (page, B, nk), ms, row in bench_table(lines):
        yield page, B, nk, row["splits"], ms


def parse_ours(path):
    """{(page, B, Nk): ms} and the peak GB/s from a `bench --decode` log."""
    rows, peak = {}, None
    if not path:
        return rows, peak
    with open(path) as f:
        lines = f.readlines()
    for line in lines:
        m = re.search(r"peak HBM (\d+) GB/s", line)
        if m:
            peak = float(m.group(1))
    for page, B, nk, _, ms in bench_rows(lines):
        rows[(page, B, nk)] = ms
    return rows, peak


def nvml_peak():
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        mhz = pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM)
        bits = pynvml.nvmlDeviceGetMemoryBusWidth(h)
        return 2.0 * mhz * 1e6 * bits / 8 / 1e9
    except Exception:  # no pynvml, or an old one: the caller falls back
        return None


PAD_STEP = 66 << 20  # bytes: placement p allocates p * PAD_STEP before Q, K, V (as bench --decode)


def time_backends(torch, F, backends, B, nk, flush, reps, pad_bytes=0):
    """{backend name: ms or None} for one shape, its tensors allocated behind a pad of pad_bytes."""
    from torch.nn.attention import sdpa_kernel
    out = {}
    try:
        pad = torch.empty(pad_bytes, dtype=torch.uint8, device="cuda") if pad_bytes else None
        q = torch.randn(B, HQ, 1, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(B, HKV, nk, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(B, HKV, nk, D, device="cuda", dtype=torch.bfloat16)
    except RuntimeError:  # out of memory (torch's OutOfMemoryError is a RuntimeError)
        torch.cuda.empty_cache()
        return None
    for name, backend in backends:
        try:
            with sdpa_kernel([backend]):
                # before each run a read of 2x the L2: it leaves clean lines (zero_() left dirty ones to
                # write back inside the timing)
                out[name] = median_ms(torch, lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), reps,
                                      before=flush.sum)
        except RuntimeError:  # the backend refuses the shape, or memory ran out
            out[name] = None
        torch.cuda.empty_cache()
    del q, k, v, pad
    torch.cuda.empty_cache()
    return out


def over_placements(runs):
    """{backend: ms on the first placement where it ran (a fresh allocation), or None} and
    {backend: (min, max) ms over all}."""
    first, spread = {}, {}
    for name in runs[0]:
        ts = [r[name] for r in runs if r.get(name) is not None]
        first[name] = ts[0] if ts else None
        spread[name] = (min(ts), max(ts)) if ts else None
    return first, spread


def backends_of(torch):
    from torch.nn.attention import SDPBackend
    return [("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION),
            ("cudnn", SDPBackend.CUDNN_ATTENTION), ("math", SDPBackend.MATH)]


def one_shape(B, nk, placements, reps):
    """The placements' {backend: ms} of one shape, as JSON on stdout (this script run with --one, in a
    process of its own: memory freed and allocated again in one process reads slower, as in bench --decode)."""
    import torch
    import torch.nn.functional as F
    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")
    runs = [time_backends(torch, F, backends_of(torch), B, nk, flush, reps, p * PAD_STEP) for p in range(placements)]
    print(json.dumps([r for r in runs if r is not None]))


def runs_in_child(B, nk, placements, reps):
    """one_shape in a fresh Python process: its placements' runs ([]: none fit), or None when the process
    failed (its stderr is shown)."""
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", f"{B}:{nk}", "--placements",
                        str(placements), "--reps", str(reps)], stdout=subprocess.PIPE, text=True)
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        print(f"torch_decode_bench: the process for B = {B}, Nk = {nk} failed (exit {p.returncode})", file=sys.stderr)
        return None
    return json.loads(lines[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ours", help="output of `attncheck bench --decode`")
    ap.add_argument("--quick", action="store_true", help="B 1 and 32 at Nk 16k only, as bench --quick")
    ap.add_argument("--peak-gbs", type=float, default=3352.0, help="peak HBM GB/s when neither the log nor NVML has it")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--placements", type=int, default=3,
                    help="placements of the tensors a shape is timed on (pads of 0, 66, 132 MiB ...; --quick: 1)")
    ap.add_argument("--one", metavar="B:NK", help=argparse.SUPPRESS)  # a shape's process (runs_in_child)
    args = ap.parse_args()
    if args.one:
        B, nk = (int(x) for x in args.one.split(":"))
        return one_shape(B, nk, max(1, args.placements), args.reps)
    import torch
    ours, peak = parse_ours(args.ours)
    peak = peak or nvml_peak() or args.peak_gbs
    backends = backends_of(torch)
    print(f"\n## PyTorch {torch.__version__} SDPA on {torch.cuda.get_device_name(0)}: bf16, d = {D}, Hq = {HQ}, "
          f"Hkv = {HKV} (enable_gqa), Nq = 1, contiguous K/V; peak HBM {peak:.0f} GB/s\n")
    names = [n for n, _ in backends]
    placements = 1 if args.quick else max(1, args.placements)
    print(f"Each shape in a process of its own, on {placements} placement(s) (the tensors allocated behind pads of "
          "0, 66, 132 MiB ...): the first (a fresh allocation) printed, the range over all beside it, as bench "
          "--decode's rows.\n")
    print("| B | Nk | " + " | ".join(f"{n} ms" for n in names) + " | best | ms | GB/s | % of peak "
          "| best's % across placements | ours p16 ms | ours p128 ms | ours contiguous ms | speedup p16 "
          "| speedup p128 | speedup contiguous |")
    print("| " + " | ".join(["---:"] * (len(names) + 13)) + " |")
    for B in BATCHES:
        for nk in LENGTHS:
            if args.quick and (nk != 16384 or B not in (1, 32)):
                continue
            kv_bytes = 2 * B * HKV * nk * D * 2
            reps = max(3, args.reps // (4 if kv_bytes > 4 << 30 else 1))
            runs = runs_in_child(B, nk, placements, reps)
            if runs is None:
                print(f"| {B} | {nk} | failed: its process did not finish (see stderr) |")
                continue
            if not runs:
                print(f"| {B} | {nk} | skipped: K and V do not fit |")
                continue
            times, spread = over_placements(runs)
            done = {n: t for n, t in times.items() if t is not None}
            cells = [f"{times[n]:.4f}" if times[n] is not None else "-" for n in names]
            if not done:
                print(f"| {B} | {nk} | " + " | ".join(cells) + " | none | | | | | | | | | | |")
                continue
            best = min(done, key=done.get)
            ms = done[best]
            gbs = kv_bytes / (ms * 1e-3) / 1e9
            o16, o128, o0 = ours.get((16, B, nk)), ours.get((128, B, nk)), ours.get((0, B, nk))
            fmt = lambda x: f"{x:.4f}" if x else "-"
            ratio = lambda x: f"{ms / x:.2f}x" if x else "-"
            pct = lambda t: 100 * kv_bytes / (t * 1e-3) / 1e9 / peak
            lo, hi = spread[best]
            rng = f"{pct(hi):.1f}-{pct(lo):.1f}% ({len(runs)})" if len(runs) > 1 else "-"
            print(f"| {B} | {nk} | " + " | ".join(cells) + f" | {best} | {ms:.4f} | {gbs:.0f} | {100 * gbs / peak:.1f}% "
                  f"| {rng} | {fmt(o16)} | {fmt(o128)} | {fmt(o0)} | {ratio(o16)} | {ratio(o128)} | {ratio(o0)} |",
                  flush=True)


if __name__ == "__main__":
    main()
