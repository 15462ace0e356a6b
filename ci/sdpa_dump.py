#!/usr/bin/env python3
"""ci/sdpa_dump.py — dump one PyTorch attention call (forward and backward)
into a case directory that `attncheck check` reads: scaled_dot_product_attention
(SDPA) or flex_attention with score_mods.

    python3 ci/sdpa_dump.py --out case --dtype bf16 --backend flash --causal
    attncheck check case --dtype bf16 --mask causal-tl
    python3 ci/sdpa_dump.py --out case --api flex --softcap 30 --alibi --wrong
    sh case/check.sh            # the check must pass, the one with a wrong flag fail

Writes q.npy k.npy v.npy o.npy do.npy dq.npy dk.npy dv.npy (and mask.npy with
--mask-keep, bias.npy (and dbias.npy when PyTorch gives the mask's gradient)
with --bias, alibi.npy with --alibi) in (B, H, S, d) order, C-contiguous,
little-endian: f32 as <f4, f16 as <f2, bf16 as <u2 bit patterns (NumPy has no
bfloat16; pass --dtype bf16 to attncheck).  Inputs are random normal in the
dtype; dO too; with --softcap C, Q's std is C/2 so the scores reach the cap.  The attncheck command line that checks the dump is printed on
stdout and saved as DIR/check.txt; with --wrong, DIR/check_wrong.txt holds one
with a flag planted wrong (softcap C checked as 5C/3, the ALiBi slopes doubled,
the bias doubled, another scale), which must fail; DIR/check.sh runs both.

APIs:
  sdpa  torch.nn.functional.scaled_dot_product_attention; backends math, flash,
        efficient, cudnn (torch.nn.attention.SDPBackend) or default.  --bias SHAPE:
        a float attn_mask (1|B, 1|H, Nq, Nk) in the dtype (SHAPE 11, 1h, b1, bh),
        with --bias-inf F a fraction of -inf entries (never a whole row: PyTorch
        gives NaN there, attncheck's contract 0); its gradient, when the backend
        returns one, is dbias.npy.
  flex  torch.nn.attention.flex_attention with a score_mod: --softcap C
        (c tanh(s / c), Gemma 2's) and/or --alibi (the ALiBi paper's slopes for H
        heads, bottom-right: s - slope |i + Nk - Nq - j|), after the softcap as
        attncheck defines it; --causal as a mask_mod (top-left, as is_causal);
        --compile wraps flex_attention in torch.compile (needed for speed on a GPU;
        flex has no CPU backward).
GQA (--hq a multiple of --hkv) uses enable_gqa=True in both APIs (PyTorch >= 2.5).
PyTorch's is_causal is top-left aligned: attncheck's `--mask causal-tl`; a
boolean attn_mask goes to `--mask-file`.  Standard library and PyTorch only (no NumPy needed)."""
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
    p.add_argument("--api", choices=["sdpa", "flex"], default="sdpa")
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
    p.add_argument("--bias", choices=["11", "1h", "b1", "bh"], default=None,
                   help="sdpa: a float attn_mask of this broadcast shape over (B, H), normal(0, 1) in the dtype")
    p.add_argument("--bias-inf", type=float, default=0.0, help="with --bias: this fraction of entries -inf")
    p.add_argument("--softcap", type=float, default=None, help="flex: score_mod c tanh(s / c)")
    p.add_argument("--alibi", action="store_true", help="flex: score_mod with the ALiBi paper's slopes")
    p.add_argument("--compile", action="store_true", help="flex: torch.compile(flex_attention)")
    p.add_argument("--wrong", action="store_true", help="also write check_wrong.txt, one flag planted wrong")
    p.add_argument("--scale", type=float, default=None, help="softmax scale (default 1/sqrt(d))")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-backward", action="store_true")
    return p.parse_args(argv)


def check_args(a, hkv):
    if a.hq % hkv:
        sys.exit(f"sdpa_dump: --hq {a.hq} is not a multiple of --hkv {hkv}")
    if a.causal and (a.mask_keep is not None or a.bias):
        sys.exit("sdpa_dump: --causal with an attn_mask is not allowed by scaled_dot_product_attention")
    if a.api == "sdpa" and (a.softcap is not None or a.alibi or a.compile):
        sys.exit("sdpa_dump: --softcap, --alibi and --compile are flex's (--api flex)")
    if a.api == "flex" and (a.bias or a.mask_keep is not None or a.backend != "default"):
        sys.exit("sdpa_dump: --bias, --mask-keep and --backend are sdpa's")


def paper_slopes(n):
    """The ALiBi paper's slopes for n heads (its get_slopes): 2^(-8 (h+1) / n) for
    n a power of two, else the power of two p below n's, then 2p's odd-numbered ones."""
    p = 1
    while p * 2 <= n:
        p *= 2
    first = [2.0 ** (-8.0 * (h + 1) / p) for h in range(p)]
    return first + [2.0 ** (-8.0 * (2 * h + 1) / (2 * p)) for h in range(n - p)]


def make_bias(a, g, nk, dtype):
    """A float attn_mask of the requested broadcast shape; -inf entries at
    fraction --bias-inf, key 0 of every row left finite (no fully masked row)."""
    shape = (a.b if a.bias[0] == "b" else 1, a.hq if a.bias[1] == "h" else 1, a.nq, nk)
    bias = torch.randn(*shape, generator=g)
    hide = torch.rand(*shape, generator=g) < a.bias_inf
    hide[..., 0] = False
    return bias.masked_fill(hide, float("-inf")).to(dtype).to(a.device)


def flex_call(a, q, k, v, nk, kwargs):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    slopes = torch.tensor(paper_slopes(a.hq), dtype=torch.float32, device=a.device) if a.alibi else None
    cap, shift = a.softcap, nk - a.nq

    def score_mod(score, b, h, q_idx, kv_idx):
        if cap is not None:
            score = cap * torch.tanh(score / cap)
        if slopes is not None:
            score = score - slopes[h] * torch.abs(q_idx + shift - kv_idx)
        return score

    block_mask = None
    if a.causal:
        block_mask = create_block_mask(lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, None, None, a.nq, nk,
                                       device=a.device)
    fn = torch.compile(flex_attention) if a.compile else flex_attention
    extra = {"enable_gqa": True} if kwargs.get("enable_gqa") else {}
    return fn(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=a.scale, **extra), slopes


def write_check(a, lines):
    with open(os.path.join(a.out, "check.txt"), "w") as f:
        f.write(f"# torch {torch.__version__}, api {a.api}, backend {a.backend}, device {a.device}\n{lines[0]}\n")
    script = ["#!/bin/sh", "# the dump's check must pass (exit 0) and, with --wrong, the planted one fail (exit 1)",
              lines[0] + " || exit 1"]
    if len(lines) > 1:
        with open(os.path.join(a.out, "check_wrong.txt"), "w") as f:
            f.write(f"# a flag planted wrong: must fail (exit 1)\n{lines[1]}\n")
        script += [lines[1] + "; rc=$?", '[ "$rc" -eq 1 ] || { echo "the wrong flag was not caught: rc=$rc"; exit 1; }']
    with open(os.path.join(a.out, "check.sh"), "w") as f:
        f.write("\n".join(script) + "\n")


def main(argv):
    a = parse_args(argv)
    hkv = a.hkv or a.hq
    nk = a.nk or a.nq
    check_args(a, hkv)
    dtype, descr = DTYPES[a.dtype]
    g = torch.Generator(device="cpu").manual_seed(a.seed)

    def rand(*shape, std=1.0):
        t = (std * torch.randn(*shape, generator=g, dtype=torch.float32)).to(dtype).to(a.device)
        return t if a.no_backward else t.requires_grad_()

    try:
        # With a softcap, Q is drawn with std C/2 so the scores (std C/2 at the default scale) reach the
        # cap and tanh bends them: at std 1 a cap of 30 changes scores by ~1e-3 and is not tested.
        q_std = a.softcap / 2 if a.softcap else 1.0
        q, k, v = rand(a.b, a.hq, a.nq, a.d, std=q_std), rand(a.b, hkv, nk, a.d), rand(a.b, hkv, nk, a.d)
        d_o = torch.randn(a.b, a.hq, a.nq, a.d, generator=g).to(dtype).to(a.device)
    except (RuntimeError, AssertionError) as e:  # no such device: CUDA asked for on a machine without it
        sys.exit(f"sdpa_dump: device {a.device} is unavailable (torch {torch.__version__}: "
                 f"{(str(e).strip().splitlines() or ['?'])[0]}); try --device cpu")
    mask = None
    if a.mask_keep is not None:
        mask = (torch.rand(1, 1, a.nq, nk, generator=g) < a.mask_keep).to(a.device)
    if a.bias:
        mask = make_bias(a, g, nk, dtype)
        mask = mask if a.no_backward else mask.requires_grad_()
    kwargs = {"attn_mask": mask, "is_causal": a.causal, "scale": a.scale}
    if hkv != a.hq:
        kwargs["enable_gqa"] = True
    slopes = None
    try:
        if a.api == "flex":
            o, slopes = flex_call(a, q, k, v, nk, kwargs)
            if not a.no_backward:
                o.backward(d_o)
        else:
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
        if a.bias and mask.grad is not None:  # the bias's gradient, summed over its broadcast by autograd
            tensors["dbias"] = mask.grad
    for name, t in tensors.items():
        write_npy(os.path.join(a.out, name + ".npy"), as_bits(t.detach()), descr)
    cmd = ["attncheck", "check", a.out]
    if a.dtype == "bf16":
        cmd += ["--dtype", "bf16"]
    if a.causal:
        cmd += ["--mask", "causal-tl"]
    if mask is not None and not a.bias:
        write_npy(os.path.join(a.out, "mask.npy"), mask.to(torch.uint8), "|u1")
        cmd += ["--mask-file", os.path.join(a.out, "mask.npy")]
    wrong = None
    if a.bias:
        path = os.path.join(a.out, "bias.npy")
        write_npy(path, as_bits(mask.detach()), descr)
        write_npy(os.path.join(a.out, "bias_wrong.npy"), as_bits((2 * mask).detach()), descr)  # -inf stays
        cmd += ["--bias", path]
        wrong = ("--bias", path, os.path.join(a.out, "bias_wrong.npy"))
    if slopes is not None:
        path = os.path.join(a.out, "alibi.npy")
        write_npy(path, slopes.detach().float(), "<f4")
        write_npy(os.path.join(a.out, "alibi_wrong.npy"), (2 * slopes).detach().float(), "<f4")
        cmd += ["--alibi", path]
        wrong = ("--alibi", path, os.path.join(a.out, "alibi_wrong.npy"))
    if a.softcap is not None:
        cmd += ["--softcap", repr(a.softcap)]
        wrong = ("--softcap", repr(a.softcap), repr(a.softcap * 5 / 3))
    if a.scale is not None:
        cmd += ["--scale", repr(a.scale)]
    lines = [" ".join(cmd)]
    if a.wrong:
        if wrong is None:  # no variant: a scale 1.25 times the one used
            used = a.scale if a.scale is not None else a.d ** -0.5
            bad = cmd + ["--scale", repr(used * 1.25)] if a.scale is None else \
                [x if x != repr(a.scale) else repr(used * 1.25) for x in cmd]
        else:
            at = cmd.index(wrong[0]) + 1
            bad = cmd[:at] + [wrong[2]] + cmd[at + 1:]
        lines.append(" ".join(bad))
    write_check(a, lines)
    print(lines[0])


if __name__ == "__main__":
    main(sys.argv[1:])
