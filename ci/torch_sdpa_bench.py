#!/usr/bin/env python3
"""ci/torch_sdpa_bench.py — PyTorch scaled_dot_product_attention (flash and
cuDNN backends) on the shapes of `attncheck bench`, printed beside our numbers.

    python3 ci/torch_sdpa_bench.py [--ours BENCH_LOG] [--quick]

BENCH_LOG is the output of `attncheck bench`; its rows
    fwd f16 128 0 4096 4 16 1.234 321.0   (dir dtype d causal N B H ms TFLOP/s)
are matched by (dir, dtype, d, causal, N).  FLOPs are counted as in the bench:
4*B*H*N^2*d forward, 2.5x backward, halved for causal.  Times: CUDA events,
median of repeats after warm-up, random normal inputs."""
import argparse
import sys

from torch_timing import median_ms  # ci/, beside this script


def parse_ours(path):
    rows = {}
    if not path:
        return rows
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 9 and parts[0] in ("fwd", "bwd"):
                try:
                    key = (parts[0], parts[1], int(parts[2]), int(parts[3]), int(parts[4]))
                    rows[key] = float(parts[8])
                except ValueError:
                    pass
    return rows


def time_backend(torch, F, backend, dtype, B, H, N, d, causal, reps):
    from torch.nn.attention import sdpa_kernel
    q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
    d_o = torch.randn(B, H, N, d, device="cuda", dtype=dtype)
    with sdpa_kernel([backend]):
        fwd = median_ms(torch, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)), reps)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
        bwd = median_ms(torch, lambda: torch.autograd.grad(out, (q, k, v), d_o, retain_graph=True), reps)
    return fwd, bwd


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ours", help="output of `attncheck bench`")
    ap.add_argument("--quick", action="store_true", help="N in {1024, 8192} only")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend
    except ImportError as e:
        print(f"torch_sdpa_bench: PyTorch not available ({e})", file=sys.stderr)
        return 3
    if not torch.cuda.is_available():
        print("torch_sdpa_bench: no CUDA device", file=sys.stderr)
        return 3
    ours = parse_ours(args.ours)
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]
    print(f"# torch {torch.__version__} on {torch.cuda.get_device_name(0)}: TFLOP/s, ratio = ours / torch")
    head = f"{'dir':4} {'dtype':5} {'d':>4} {'causal':>6} {'N':>6} {'ours':>8}"
    for name, _ in backends:
        head += f" {name:>8} {'ratio':>6}"
    print(head)
    dtypes = {"f16": torch.float16, "bf16": torch.bfloat16}
    for tname, dtype in dtypes.items():
        for d in (64, 128):
            for causal in (0, 1):
                n = 512
                while n <= 16384:
                    if args.quick and n not in (1024, 8192):
                        n *= 2
                        continue
                    B, H = 16384 // n, 2048 // d
                    flops = 4.0 * B * H * n * n * d * (0.5 if causal else 1.0)
                    res = {}
                    for name, be in backends:
                        try:
                            fwd, bwd = time_backend(torch, F, be, dtype, B, H, n, d, causal, args.reps)
                            res[name] = (flops / fwd * 1e-9, 2.5 * flops / bwd * 1e-9)
                        except Exception as e:  # a backend may not take this shape
                            print(f"# {name} failed on {tname} d={d} N={n}: {str(e).splitlines()[0]}", file=sys.stderr)
                            res[name] = None
                    for di, dname in enumerate(("fwd", "bwd")):
                        mine = ours.get((dname, tname, d, causal, n))
                        line = f"{dname:4} {tname:5} {d:>4} {causal:>6} {n:>6} {mine if mine is not None else float('nan'):>8.1f}"
                        for name, _ in backends:
                            r = res[name]
                            if r is None:
                                line += f" {'-':>8} {'-':>6}"
                            else:
                                ratio = mine / r[di] if mine else float("nan")
                                line += f" {r[di]:>8.1f} {ratio:>6.2f}"
                        print(line, flush=True)
                    n *= 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
