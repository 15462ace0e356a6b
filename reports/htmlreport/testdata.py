"""Records in the harness's formats, with values the tests plant and then find
in the report.  The case record has exactly the keys harness/report.c
(write_json) writes; reports/tests compares them with a real record when
ci/test-html-report.sh hands one over (ATTNCHECK_HTML_REAL_JSONL).

    python3 -m htmlreport.testdata OUTDIR    (from reports/) writes a sample
    campaign, a prove run, an environment record, bench and torch output.
"""
import json
import os
import random
import sys
from typing import Dict, List, Optional

from .inputs import OUTPUTS

NO_PLACE = [-1, -1, -1, -1]


def metrics(max_scaled: float = 0.5, mean_abs: float = 1e-3, naive_mean_abs: float = 1.2e-3,
            mean_escale: float = 2.0, max_abs: float = 4e-3, naive_max_abs: float = 5e-3,
            n_compared: int = 4096, has_naive: bool = True, **counts) -> dict:
    """One output's metrics, keys in write_json's order; counts sets the
    special classes and masked-row counts (unexpected_nan=3, ...)."""
    def ratio(a, b):
        return a / b if b else 0.0
    m = {"n_compared": n_compared, "n_mean": n_compared, "max_ulp": max_scaled * 3.0, "mean_ulp": max_scaled,
         "at_max_ulp": [0, 0, 1, 2], "max_scaled": max_scaled, "at_max_scaled": [0, 0, 1, 2],
         "max_abs": max_abs, "mean_abs": mean_abs, "rmse": mean_abs * 1.25, "has_naive": has_naive,
         "naive_max_abs": naive_max_abs if has_naive else 0, "naive_mean_abs": naive_mean_abs if has_naive else 0,
         "naive_rmse": naive_mean_abs * 1.25 if has_naive else 0,
         "vs_naive_max": ratio(max_abs, naive_max_abs) if has_naive else 0,
         "vs_naive_mean": ratio(mean_abs, naive_mean_abs) if has_naive else 0, "mean_escale": mean_escale}
    for name in ("unexpected_nan", "overflow", "lost_special", "wrong_zero", "unwritten"):
        m[name] = counts.pop(name, 0)
    m["first_special"] = [0, 0, 0, 0] if any(m[k] for k in ("unexpected_nan", "overflow", "lost_special",
                                                            "wrong_zero", "unwritten")) else NO_PLACE
    for name in ("masked_rows", "masked_rows_zero", "masked_rows_nan", "masked_rows_lse_posinf"):
        m[name] = counts.pop(name, 0)
    m["n_measured"] = n_compared
    if counts:
        raise TypeError("unknown metric counts: %s" % ", ".join(counts))
    return m


def case_line(seed: int = 1, b: int = 1, hq: int = 2, hkv: int = 1, nq: int = 64, nk: int = 64, d: int = 32,
              dtype: str = "f16", mask: str = "none") -> str:
    return ("v1 seed=%d b=%d hq=%d hkv=%d nq=%d nk=%d d=%d dtype=%s mask=%s layout=bhsd dist=normal(0,1) "
            "scale=auto" % (seed, b, hq, hkv, nq, nk, d, dtype, mask))


def case_record(kernel: str, line: str, outputs: Dict[str, dict], verdict: str = "pass", kind: str = "",
                why: str = "", minimal: Optional[str] = None, certified: bool = True, rows_checked: int = 2,
                index: int = 0) -> dict:
    dtype = next((f[6:] for f in line.split() if f.startswith("dtype=")), "f16")
    rec = {"kernel": kernel, "index": index, "case": line, "dtype": dtype, "verdict": verdict, "status": 0,
           "kind": kind, "why": why,
           "certification": {"rows_checked": rows_checked, "certified": certified,
                             "max_ulp_o": 0.0 if certified else 0.5, "max_abs_lse": 0.0},
           "failures": [kind] if verdict == "fail" and kind else [], "reference": {"tier": "cpu"},
           "outputs": outputs,
           "diagnosis": {}}  # per output: budgets, failed classes, worst values, places, hint (not read here)
    if verdict == "fail" and minimal:
        rec["minimal"] = minimal
    return rec


MASKS = ("none", "causal-tl", "causal-br", "window-br(8,0)", "dense(0.5)")


def random_case(rng: random.Random, kernel: str, seed: int, dtypes=("f32", "f16", "bf16"),
                backward: bool = True) -> dict:
    """A passing case with random shape and errors a correct kernel shows."""
    line = case_line(seed=seed, nq=rng.choice([1, 17, 64, 129, 300]), nk=rng.choice([5, 64, 200, 512]),
                     d=rng.choice([8, 32, 64, 128]), dtype=rng.choice(dtypes), mask=rng.choice(MASKS))
    names = OUTPUTS if backward else OUTPUTS[:2]
    outs = {}
    for name in names:
        err = 10.0 ** rng.uniform(-3, -2)
        outs[name] = metrics(max_scaled=10.0 ** rng.uniform(-2, 0.2), mean_abs=err,
                             naive_mean_abs=err * rng.uniform(0.8, 1.4), mean_escale=10.0 ** rng.uniform(-0.5, 1),
                             max_abs=err * 8, naive_max_abs=err * 8 * rng.uniform(0.8, 1.4))
    return case_record(kernel, line, outs)


def campaign(kernel: str, n_cases: int, seed: int, **kw) -> List[dict]:
    rng = random.Random(seed)
    return [random_case(rng, kernel, rng.getrandbits(30), **kw) for _ in range(n_cases)]


def failing_case(kernel: str, line: str, minimal: str, max_scaled: float = 3.8e5, output: str = "O") -> dict:
    outs = {name: metrics() for name in OUTPUTS}
    outs[output] = metrics(max_scaled=max_scaled, mean_abs=2.0, max_abs=24.0)
    why = "%s scaled error %.3g > budget 4" % (output, max_scaled)
    return case_record(kernel, line, outs, verdict="fail", kind="%s:scaled" % output, why=why, minimal=minimal)


def environment(**fields) -> dict:
    return dict({"type": "environment"}, **fields)


def bench_text(rows, device: str = "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)", memory=()) -> str:
    """rows: (dir, dtype, d, causal, N, ms, tflops); memory: (N, fused ms, naive ms or None, ...)."""
    out = ["# attncheck bench v1 on %s" % device, "",
           "## cuda-flash TFLOP/s (B = 16384/N, H = 2048/d, FLOPs 4BHN^2d fwd, 2.5x bwd, /2 causal)",
           "%-4s %-5s %4s %6s %6s %3s %3s %10s %9s" % ("dir", "dtype", "d", "causal", "N", "B", "H", "ms", "TFLOP/s")]
    for direction, dtype, d, causal, n, ms, tflops in rows:
        out.append("%-4s %-5s %4d %6d %6d %3d %3d %10.3f %9.1f" % (direction, dtype, d, causal, n, 16384 // n,
                                                                  2048 // d, ms, tflops))
    if memory:
        out += ["", "## fused vs naive forward (f16, d=128, B=1, H=16, no mask)",
                "%-6s %12s %12s %8s %14s %14s %8s" % ("N", "fused ms", "naive ms", "speedup", "fused MiB",
                                                      "naive MiB", "ratio")]
        for row in memory:
            out.append("%-6d %12.3f %12.3f %8.1f %14.1f %14.1f %8.1f" % row)
    return "\n".join(out) + "\n"


def torch_text(rows, version: str = "2.11.0+cu130", device: str = "NVIDIA H100 80GB HBM3") -> str:
    """rows: (dir, dtype, d, causal, N, ours, flash, cudnn); ratios computed."""
    out = ["# torch %s on %s: TFLOP/s, ratio = ours / torch" % (version, device),
           "dir  dtype    d causal      N     ours    flash  ratio    cudnn  ratio"]
    for direction, dtype, d, causal, n, ours, flash, cudnn in rows:
        out.append("%-4s %-5s %4d %6d %6d %8.1f %8.1f %6.2f %8.1f %6.2f" % (direction, dtype, d, causal, n, ours,
                                                                           flash, ours / flash, cudnn, ours / cudnn))
    return "\n".join(out) + "\n"


def write_jsonl(path: str, records: List[dict]):
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")


def write_sample(folder: str):
    """A sample set of inputs: a campaign, a prove run, environment, bench, torch."""
    os.makedirs(folder, exist_ok=True)
    runs = campaign("cpu-flash", 120, seed=7)
    runs.append(environment(gpu="none (CPU)", commit="0123abc", budgets_version=1, seed=7, reference="fp64"))
    write_jsonl(os.path.join(folder, "campaign.jsonl"), runs)
    proof = campaign("cpu-flash", 20, seed=8)
    bad = case_line(seed=99, nq=64, nk=256, d=21, dtype="bf16", mask="causal-br")
    small = case_line(seed=2, b=1, hq=1, nq=2, nk=77, d=1, dtype="bf16")
    proof += campaign("cpu-flash-mutant-no-rescale-o", 3, seed=9) + \
        [failing_case("cpu-flash-mutant-no-rescale-o", bad, small)]
    write_jsonl(os.path.join(folder, "prove.jsonl"), proof)
    speed = [(dr, "f16", 128, 0, n, 1.0, tf * (0.7 if dr == "bwd" else 1.0))
             for n, tf in ((1024, 401.8), (4096, 480.8)) for dr in ("fwd", "bwd")]
    with open(os.path.join(folder, "bench.txt"), "w") as f:
        f.write(bench_text(speed, memory=[(1024, 0.033, 0.181, 5.5, 16.1, 112.1, 7.0)]))
    with open(os.path.join(folder, "torch.txt"), "w") as f:
        f.write(torch_text([(dr, dt, d, c, n, tf, tf / 1.3, tf / 0.8) for dr, dt, d, c, n, _, tf in speed]))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python3 -m htmlreport.testdata OUTDIR", file=sys.stderr)
        sys.exit(2)
    write_sample(sys.argv[1])
