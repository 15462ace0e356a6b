#!/usr/bin/env python3
"""torch_sdpa_kernel.py - PyTorch's scaled_dot_product_attention as an attncheck --exec kernel.

Needs torch (>= 2.0, for scaled_dot_product_attention) and numpy.  Runs on CUDA when torch sees a GPU,
else on the CPU; ATTNCHECK_TORCH_DEVICE=cpu|cuda and ATTNCHECK_SDPA_BACKEND=math|flash|efficient|cudnn
choose (default: PyTorch picks).

    attncheck fuzz --exec-persistent 'python3 plugins/torch_sdpa_kernel.py --serve' \
        --caps plugins/torch_sdpa_kernel.caps.json --cases 200
    attncheck fuzz --exec 'python3 plugins/torch_sdpa_kernel.py {in} {out}' \
        --caps plugins/torch_sdpa_kernel.caps.json --cases 20

SDPA gives O only: LSE is computed beside it (float32 logsumexp of the scaled, masked scores).  Every
mask is passed as a boolean attn_mask built from attncheck's visibility rule (window, alignment,
lengths, dense mask); rows with no visible key get O = 0, LSE = -inf, dQ = 0 (attncheck's
convention), computed with a harmless mask and a zero dO there so they add nothing to dK, dV.
"""
import os
import sys

import numpy as np

import attncheck_case

try:
    import torch
except ImportError:
    sys.exit("torch_sdpa_kernel: PyTorch is not installed here (pip install torch)")
if not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
    sys.exit("torch_sdpa_kernel: torch %s has no scaled_dot_product_attention (needs >= 2.0)" % torch.__version__)

DEVICE = os.environ.get("ATTNCHECK_TORCH_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")
BACKEND = os.environ.get("ATTNCHECK_SDPA_BACKEND")
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def backend():
    if not BACKEND:
        import contextlib
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel([{"math": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION,
                         "efficient": SDPBackend.EFFICIENT_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[BACKEND]])


def tensor(x, dtype, grad=False):
    """float32 numpy holding dtype values -> the exact torch tensor of that dtype."""
    return torch.from_numpy(np.ascontiguousarray(x)).to(dtype).to(DEVICE).requires_grad_(grad)


def kernel(case, out_dir):
    dtype = DTYPES[case.dtype]
    case.zero_padding()  # padding is NaN: SDPA on the padded tensors must not see it
    group = case.p["heads_q"] // case.p["heads_kv"]
    backward = "dq" in case.want
    keep = torch.from_numpy(np.ascontiguousarray(case.visible())).to(DEVICE)
    empty = ~keep.any(-1, keepdim=True)  # rows with no visible key
    q = tensor(case.t["q"], dtype, backward)
    k = tensor(case.t["k"], dtype, backward)
    v = tensor(case.t["v"], dtype, backward)
    kq, vq = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)  # GQA: K/V head h // group
    with backend():
        o = torch.nn.functional.scaled_dot_product_attention(q, kq, vq, attn_mask=keep | empty, scale=case.scale)
    if not backward:
        s = case.scale * (q.float() @ kq.float().transpose(-1, -2))
        lse = torch.logsumexp(s.masked_fill(~keep, float("-inf")), -1)
        o = o.masked_fill(empty, 0)
        case.write(out_dir, o=o.detach().float().cpu().numpy(), lse=lse.detach().cpu().numpy())
        return
    d_o = tensor(case.t["do"], dtype).masked_fill(empty, 0)
    o.backward(d_o)
    dq = q.grad.masked_fill(empty, 0)
    case.write(out_dir, dq=dq.float().cpu().numpy(), dk=k.grad.float().cpu().numpy(), dv=v.grad.float().cpu().numpy())


if __name__ == "__main__":
    attncheck_case.main(kernel)
