#!/usr/bin/env python3
"""ci/torch_fp8_probe.py — does PyTorch on this machine expose an fp8 attention
path?  Issue 17 asks to compare cuda-flash-fp8 with one where it exists.  Tries
scaled_dot_product_attention on float8_e4m3fn Q, K, V under each SDPA backend
(and with no backend forced), B = 4, H = 16, N = 4096, d = 128; prints for each
whether it ran (and its forward TFLOP/s, 4BHN^2d FLOPs, CUDA events, median of
10) or the error PyTorch gave.  Exit 0 either way: the answer is the output.

    python3 ci/torch_fp8_probe.py"""
import sys

from torch_timing import median_ms  # ci/, beside this script


def main():
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as e:
        print("no PyTorch here (%s): nothing to probe" % e)
        return 0
    if not torch.cuda.is_available():
        print("PyTorch %s sees no GPU: nothing to probe" % torch.__version__)
        return 0
    print("PyTorch %s, %s" % (torch.__version__, torch.cuda.get_device_name()))
    B, H, N, d = 4, 16, 4096, 128
    flops = 4.0 * B * H * N * N * d
    q, k, v = (torch.randn(B, H, N, d, device="cuda").to(torch.float8_e4m3fn) for _ in range(3))
    # SDPBackend is a pybind11 enum, not iterable: the backends by name, those this build has.
    names = ["FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"]
    backends = [("default", None)] + [(n, getattr(SDPBackend, n)) for n in names if hasattr(SDPBackend, n)]
    for name, backend in backends:
        def call():
            if backend is None:
                return F.scaled_dot_product_attention(q, k, v)
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v)
        try:
            out = call()
            ms = median_ms(torch, call, 10)
            print("%-22s ran: out %s, %.3f ms, %.1f TFLOP/s" % (name, out.dtype, ms, flops / ms / 1e9))
        except Exception as e:  # the answer, not a failure of the probe
            print("%-22s no: %s" % (name, str(e).splitlines()[0][:160] if str(e) else type(e).__name__))
    return 0


if __name__ == "__main__":
    sys.exit(main())
