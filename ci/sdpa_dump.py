#!/usr/bin/env python3
"""ci/sdpa_dump.py — dump one PyTorch scaled_dot_product_attention call
(forward and backward) into a case directory that `attncheck check` reads.

    python3 ci/sdpa_dump.py --out case --dtype bf16 --backend flash --causal
    attncheck check case --dtype bf16 --mask causal-tl

Writes q.npy k.npy v.npy o.npy do.npy dq.npy dk.npy dv.npy (and mask.npy with
--mask-keep) in (B, H, S, d) order, C-contiguous, little-endian: f32 as <f4,
f16 as <f2, bf16 as <u2 bit patterns (NumPy has no bfloat16; pass
--dtype bf16 to attncheck).  Inputs are random normal in the dtype; dO too.
The attncheck command line that checks the dump is printed on stdout and
saved as DIR/check.txt.

Backends: math, flash, efficient, cudnn (torch.nn.attention.SDPBackend), or
default (PyTorch picks).  GQA (--hq a multiple of --hkv) uses enable_gqa=True
(PyTorch >= 2.5).  PyTorch's is_causal is top-left aligned: attncheck's
`--mask causal-tl`; a boolean attn_mask goes to `--mask-file`.  Standard library and PyTorch only (no NumPy needed)."""
import argparse
import ctypes
import os
import sys

try:
    import torch
except ImportError:
    sys.exit("sdpa_dump: PyTorch is not installed here (pip install torch)")

BACKENDS = ["default", "math", "flash", "efficient", "cudnn"]
DTYPES = {"f32": (torch.float32, "<f4"), "f16": (torch.float16, "<f2"), "bf16": (torch.bfloat16, "<u2")}


def npy_bytes(t, descr):
    """The .npy (format 1.0) bytes of a tensor: header padded to 64 bytes, then the raw data."""
    t = t.detach().contiguous().cpu()
    shape = "(" + ", ".join(str(n) for n in t.shape) + ("," if t.dim() == 1 else "") + ")"
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}"
    pad = 64 - (10 + len(header) + 1) % 64
    header = header + " " * (pad % 64) + "\n"
    data = ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()) if t.numel() else b""
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode("ascii") + data


def write_npy(path, t, descr):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(npy_bytes(t, descr))
    os.replace(tmp, path)  # atomic: a reader never sees half a file


def backend_context(name):
    if name == "default":
        import contextlib
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    which = {"math": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION,
             "efficient": SDPBackend.EFFICIENT_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[name]
    return sdpa_kernel([which])


def runs_here(name, device, dtype):
    """Does backend `name` run a tiny forward and backward on this device and dtype?"""
    try:
        with backend_context(name):
            x = torch.randn(1, 1, 16, 64, dtype=torch.float32).to(dtype).to(device).requires_grad_()
            torch.nn.functional.scaled_dot_product_attention(x, x, x).sum().backward()
        return True
    except Exception:
        return False


def unavailable(a, dtype, e):
    """One line, not a traceback: the backend asked for, why it failed, the backends that do run here."""
    ok = [b for b in BACKENDS if b != a.backend and runs_here(b, a.device, dtype)]
    why = (str(e).strip().splitlines() or [type(e).__name__])[0]
    sys.exit(f"sdpa_dump: backend {a.backend} is unavailable for {a.dtype} on {a.device} "
             f"(torch {torch.__version__}: {why}); backends that run here: {', '.join(ok) or 'none'}")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="case directory to write")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="f16")
    p.add_argument("--backend", choices=BACKENDS, default="default")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--b", type=int, default=2)
    p.add_argument("--hq", type=int, default=4)
    p.add_argument("--hkv", type=int, default=None, help="K/V heads (default: --hq; fewer = GQA)")
    p.add_argument("--nq", type=int, default=128)
    p.add_argument("--nk", type=int, default=None, help="default: --nq")
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--causal", action="store_true", help="is_causal=True (top-left: attncheck --mask causal-tl)")
    p.add_argument("--mask-keep", type=float, default=None,
                   help="a random boolean attn_mask (1, 1, Nq, Nk) keeping this fraction; written as mask.npy")
    p.add_argument("--scale", type=float, default=None, help="softmax scale (default 1/sqrt(d))")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-backward", action="store_true")
    return p.parse_args(argv)


def main(argv):
    a = parse_args(argv)
    hkv = a.hkv or a.hq
    nk = a.nk or a.nq
    if a.hq % hkv:
        sys.exit(f"sdpa_dump: --hq {a.hq} is not a multiple of --hkv {hkv}")
    if a.causal and a.mask_keep is not None:
        sys.exit("sdpa_dump: --causal and --mask-keep together are not allowed by scaled_dot_product_attention")
    dtype, descr = DTYPES[a.dtype]
    g = torch.Generator(device="cpu").manual_seed(a.seed)

    def rand(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float32).to(dtype).to(a.device).requires_grad_()

    try:
        q, k, v = rand(a.b, a.hq, a.nq, a.d), rand(a.b, hkv, nk, a.d), rand(a.b, hkv, nk, a.d)
        d_o = torch.randn(a.b, a.hq, a.nq, a.d, generator=g).to(dtype).to(a.device)
    except (RuntimeError, AssertionError) as e:  # no such device: CUDA asked for on a machine without it
        sys.exit(f"sdpa_dump: device {a.device} is unavailable (torch {torch.__version__}: "
                 f"{(str(e).strip().splitlines() or ['?'])[0]}); try --device cpu")
    mask = None
    if a.mask_keep is not None:
        mask = (torch.rand(1, 1, a.nq, nk, generator=g) < a.mask_keep).to(a.device)
    kwargs = {"attn_mask": mask, "is_causal": a.causal, "scale": a.scale}
    if hkv != a.hq:
        kwargs["enable_gqa"] = True
    try:
        with backend_context(a.backend):
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, **kwargs)
            if not a.no_backward:
                o.backward(d_o)
    except (RuntimeError, ImportError, AttributeError) as e:
        unavailable(a, dtype, e)

    os.makedirs(a.out, exist_ok=True)
    as_bits = (lambda t: t.view(torch.int16)) if a.dtype == "bf16" else (lambda t: t)
    tensors = {"q": q, "k": k, "v": v, "o": o}
    if not a.no_backward:
        tensors.update({"do": d_o, "dq": q.grad, "dk": k.grad, "dv": v.grad})
    for name, t in tensors.items():
        write_npy(os.path.join(a.out, name + ".npy"), as_bits(t.detach()), descr)
    cmd = ["attncheck", "check", a.out]
    if a.dtype == "bf16":
        cmd += ["--dtype", "bf16"]
    if a.causal:
        cmd += ["--mask", "causal-tl"]
    if mask is not None:
        write_npy(os.path.join(a.out, "mask.npy"), mask.to(torch.uint8), "|u1")
        cmd += ["--mask-file", os.path.join(a.out, "mask.npy")]
    if a.scale is not None:
        cmd += ["--scale", repr(a.scale)]
    line = " ".join(cmd)
    with open(os.path.join(a.out, "check.txt"), "w") as f:
        f.write(f"# torch {torch.__version__}, backend {a.backend}, device {a.device}\n{line}\n")
    print(line)


if __name__ == "__main__":
    main(sys.argv[1:])
