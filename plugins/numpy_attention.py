#!/usr/bin/env python3
"""numpy_attention.py - a plain attention in numpy as an attncheck --exec kernel (numpy only).

Forward and backward in float32, as a fused kernel computes them, outputs rounded to the dtype:

    attncheck fuzz --exec 'python3 plugins/numpy_attention.py {in} {out}' \
        --caps plugins/numpy_attention.caps.json --cases 50
    attncheck fuzz --exec-persistent 'python3 plugins/numpy_attention.py --serve' \
        --caps plugins/numpy_attention.caps.json --cases 50

`--bug=no-max-subtraction` plants the classic bug: P = exp(S) without the row maximum, which
overflows for large scores (O and LSE become Inf/NaN) yet passes on normal(0,1) inputs.
"""
import sys

import numpy as np

import attncheck_case

BUG = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--bug=")), None)


def softmax_parts(case, q, k):
    """P (B, Hq, Nq, Nk) and LSE (B, Hq, Nq) in float32; rows with no visible key: P = 0, LSE = -inf."""
    keep = case.visible()
    s = np.where(keep, case.scale * (q @ k.transpose(0, 1, 3, 2)), -np.inf).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if BUG == "no-max-subtraction":  # the planted bug: exp(S) overflows f32 once a score passes ~88.7
            e = np.where(keep, np.exp(s), 0.0).astype(np.float32)
            l = e.sum(-1, keepdims=True)
            p = np.where(keep, e / np.where(l > 0, l, 1.0), 0.0).astype(np.float32)
            return p, np.where(l[..., 0] > 0, np.log(np.where(l > 0, l, 1.0)[..., 0]), -np.inf).astype(np.float32)
        m = np.where(keep.any(-1, keepdims=True), s.max(-1, keepdims=True), 0.0).astype(np.float32)
        e = np.where(keep, np.exp(s - m), 0.0).astype(np.float32)
        l = e.sum(-1, keepdims=True)
        p = np.where(l > 0, e / np.where(l > 0, l, 1.0), 0.0).astype(np.float32)
        lse = np.where(l[..., 0] > 0, m[..., 0] + np.log(np.where(l > 0, l, 1.0)[..., 0]), -np.inf)
    return p, lse.astype(np.float32)


def by_query_head(case, x):
    """K or V (B, Hkv, Nk, d) repeated over the query heads of each GQA group."""
    return np.repeat(x, case.p["heads_q"] // case.p["heads_kv"], axis=1)


def kernel(case, out_dir):
    case.zero_padding()  # padding is NaN: the padded matmuls below must not see it
    q, k, v = case.t["q"], by_query_head(case, case.t["k"]), by_query_head(case, case.t["v"])
    p, lse = softmax_parts(case, q, k)
    if "o" in case.want:
        case.write(out_dir, o=p @ v, lse=lse)
        return
    d_o = case.t["do"]
    dv = p.transpose(0, 1, 3, 2) @ d_o
    dp = d_o @ v.transpose(0, 1, 3, 2)
    delta = (d_o * (p @ v)).sum(-1, keepdims=True)
    ds = p * (dp - delta)
    dq = case.scale * (ds @ k)
    dk = case.scale * (ds.transpose(0, 1, 3, 2) @ q)
    b, hkv, g = case.p["batch"], case.p["heads_kv"], case.p["heads_q"] // case.p["heads_kv"]
    group_sum = lambda x: x.reshape(b, hkv, g, *x.shape[2:]).sum(2)  # dK, dV summed over the GQA group
    case.write(out_dir, dq=dq, dk=group_sum(dk), dv=group_sum(dv))


if __name__ == "__main__":
    attncheck_case.main(kernel)
