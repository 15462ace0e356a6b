"""attncheck_case.py - read an attncheck case directory, write a kernel's outputs (numpy only).

attncheck runs an external kernel (`attncheck fuzz --exec 'python3 k.py {in} {out}' --caps k.caps.json`)
on case directories: q.npy k.npy v.npy [do.npy o.npy lse.npy mask.npy] and problem.json.  This module
is all a Python kernel needs around its own arithmetic; copy it next to yours.

    case = load(in_dir)            # tensors as float32 (B, H, S, d) whatever the layout; the problem
    keep = case.visible()          # bool (B, Hq, Nq, Nk): attncheck's visibility rule
    case.write(out_dir, o=..., lse=...)         # forward call: case.want == ["o", "lse"]
    case.write(out_dir, dq=..., dk=..., dv=...) # backward call: case.want == ["dq", "dk", "dv"]
    main(kernel)                   # one-shot (argv: IN OUT) or persistent (--serve) for kernel(case, out_dir)

Conventions (attncheck's README, "Kernels that are not C"): LSE is float32, natural log, (B, Hq, Nq)
in every layout; a row with no visible key has O = 0, LSE = -inf (and dQ = 0); padding rows
(i >= seqlens_q[b]) and keys are never compared.  bf16 travels as uint16 bit patterns.
"""
import json
import os
import sys

import numpy as np


def bf16_bits_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x):
    """Round to nearest even, as the hardware does; NaN stays NaN."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), rounded)


class Case:
    def __init__(self, in_dir):
        with open(os.path.join(in_dir, "problem.json")) as f:
            self.p = json.load(f)
        self.dir = in_dir
        self.dtype = self.p["dtype"]
        self.bshd = self.p["layout"] == "bshd"
        self.scale = float(self.p["scale"])
        self.want = self.p["want"]
        self.t = {name: self._load(name) for name in self.p["inputs"]}

    def _load(self, name):
        x = np.load(os.path.join(self.dir, name + ".npy"))
        if name == "lse":
            return x.astype(np.float32)
        x = bf16_bits_to_f32(x) if x.dtype == np.uint16 else x.astype(np.float32)
        return x.transpose(0, 2, 1, 3) if self.bshd else x  # always (B, H, S, d) here

    def visible(self):
        """bool (B, Hq, Nq, Nk): key j visible from query i of batch b, head h (attncheck's rule)."""
        p = self.p
        b, hq, nq, nk = p["batch"], p["heads_q"], p["seqlen_q"], p["seqlen_k"]
        lq = np.array(p["seqlens_q"] or [nq] * b)[:, None, None]
        lk = np.array(p["seqlens_k"] or [nk] * b)[:, None, None]
        i = np.arange(nq)[None, :, None]
        j = np.arange(nk)[None, None, :]
        keep = (i < lq) & (j < lk)
        if p["window"] is not None:
            c = i + (lk - lq if p["align"] == "br" else 0)
            left, right = p["window"]["left"], p["window"]["right"]
            if left is not None:
                keep &= j >= c - left
            if right is not None:
                keep &= j <= c + right
        keep = np.broadcast_to(keep[:, None], (b, hq, nq, nk))
        if p["dense_mask"]:
            keep = keep & (np.load(os.path.join(self.dir, p["dense_mask"])) != 0)
        return keep

    def zero_padding(self):
        """Zeroes the padding of q, k, v, do (rows i >= seqlens_q[b], keys j >= seqlens_k[b]) in place.

        attncheck fills padding with NaN (README, "Varlen"), so a kernel that lets it reach a sum
        fails; a kernel that computes on the padded tensors (batched matmuls, as these examples
        do) must zero it first, as a varlen kernel that never loads it would."""
        p = self.p
        for name, seqlens, n in (("q", "seqlens_q", "seqlen_q"), ("do", "seqlens_q", "seqlen_q"),
                                 ("k", "seqlens_k", "seqlen_k"), ("v", "seqlens_k", "seqlen_k")):
            if name in self.t and p[seqlens]:
                rows = np.arange(p[n])[None, :] < np.array(p[seqlens])[:, None]  # (B, S)
                self.t[name] = np.where(rows[:, None, :, None], self.t[name], np.float32(0))

    def _store(self, x):
        x = np.asarray(x, dtype=np.float32)
        if self.bshd and x.ndim == 4:
            x = x.transpose(0, 2, 1, 3)
        x = np.ascontiguousarray(x)
        out = self.p["out_dtype"]
        return f32_to_bf16_bits(x) if out == "bf16" else x.astype(np.float16 if out == "f16" else np.float32)

    def write(self, out_dir, **outputs):
        """Writes each output (float arrays, (B, H, S, d) or LSE (B, Hq, Nq)) as NAME.npy in out_dir."""
        for name, x in outputs.items():
            arr = np.ascontiguousarray(x, dtype=np.float32) if name == "lse" else self._store(x)
            np.save(os.path.join(out_dir, name + ".npy"), arr)


def load(in_dir):
    return Case(in_dir)


def serve(kernel):
    """Persistent mode: one case directory per line on stdin, "ok" or "error MESSAGE" per line on stdout."""
    for line in sys.stdin:
        in_dir = line.strip()
        if not in_dir:
            continue
        try:
            case = load(in_dir)
            kernel(case, case.p["out"])
            reply = "ok"
        except Exception as e:  # the kernel's own failure: attncheck reports it as kernel:error
            reply = "error " + (type(e).__name__ + ": " + str(e)).replace("\n", " ")
        sys.stdout.write(reply + "\n")
        sys.stdout.flush()


def main(kernel, argv=None):
    """`k.py IN OUT` (one-shot) or `k.py --serve` (persistent); kernel(case, out_dir) does the work."""
    args = [a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("--bug")]
    if args == ["--serve"]:
        serve(kernel)
    elif len(args) == 2:
        case = load(args[0])
        kernel(case, args[1])
    else:
        sys.exit("usage: %s IN_DIR OUT_DIR | --serve" % os.path.basename(sys.argv[0]))
