"""The speed section: `attncheck bench` tables, with PyTorch's TFLOP/s and the
ratios ours / theirs when ci/torch_sdpa_bench.py output is given."""
from typing import Dict, List, Optional, Tuple

from . import charts
from .html import Cell, esc, figure, num, section, table
from .model import Model

Section = Optional[Tuple[str, str, str]]


def _ratio_cell(ratio: Optional[float]) -> Cell:
    if ratio is None:
        return Cell("-", "num")
    return Cell("%.2f" % ratio, "num good" if ratio >= 1.0 else "num bad")


def _speed_rows(model: Model) -> Tuple[List[str], Dict[tuple, dict]]:
    """{(dtype, d, causal, N): {"fwd": {"ours": t, backend: (t, ratio)}, "bwd": {...}}}."""
    backends: List[str] = []
    rows: Dict[tuple, dict] = {}
    for b in model.inputs.benches:
        for r in b.speed:
            rows.setdefault((r.dtype, r.d, r.causal, r.n), {}).setdefault(r.direction, {})["ours"] = r.tflops
    for t in model.inputs.torch_runs:
        backends += [n for n in t.backend_names if n not in backends]
        for r in t.rows:
            cell = rows.setdefault((r.dtype, r.d, r.causal, r.n), {}).setdefault(r.direction, {})
            if r.ours_tflops is not None:
                cell.setdefault("ours", r.ours_tflops)
            cell.update(r.backends)
    return backends, rows


def speed_table(model: Model) -> str:
    backends, rows = _speed_rows(model)
    headers = ["dtype", "d", "causal", "N"]
    for direction in ("fwd", "bwd"):
        headers.append("%s ours" % direction)
        for b in backends:
            headers += ["%s %s" % (direction, b), "ours / %s" % b]
    out = []
    for (dtype, d, causal, n), per_dir in sorted(rows.items(), key=lambda kv: (kv[0][0] != "f16",) + kv[0]):
        row = [dtype, Cell(str(d), "num"), Cell(str(causal), "num"), Cell(str(n), "num")]
        for direction in ("fwd", "bwd"):
            cell = per_dir.get(direction, {})
            row.append(Cell(num(cell.get("ours")), "num"))
            for b in backends:
                theirs = cell.get(b)
                row += [Cell(num(theirs[0]) if theirs else "-", "num"), _ratio_cell(theirs[1] if theirs else None)]
        out.append(row)
    caption = "TFLOP/s; ours / theirs &gt; 1: ours faster" if backends else "TFLOP/s"
    return table("speed-table", headers, out, caption)


def memory_table(model: Model) -> str:
    rows = []
    for b in model.inputs.benches:
        for r in b.memory:
            rows.append([Cell(str(r.n), "num"), Cell(num(r.fused_ms), "num"),
                         Cell(num(r.naive_ms) if r.naive_ms is not None else esc(r.note), "num"),
                         Cell(num(r.speedup), "num"), Cell(num(r.fused_mib), "num"), Cell(num(r.naive_mib), "num"),
                         Cell(num(r.mib_ratio), "num")])
    if not rows:
        return ""
    return table("memory-table", ["N", "fused ms", "naive ms", "speedup", "fused MiB", "naive MiB",
                                  "memory ratio"], rows, "fused vs naive forward (f16, d = 128, B = 1, H = 16)")


def speed(model: Model) -> Section:
    benches, torch_runs = model.inputs.benches, model.inputs.torch_runs
    if not any(b.speed or b.memory for b in benches) and not any(t.rows for t in torch_runs):
        return None
    body = []
    if any(b.speed for b in benches) or any(t.rows for t in torch_runs):
        body.append(figure("chart-speed", charts.speed(benches, torch_runs, "chart-speed"),
                           "ours solid; PyTorch SDPA backends dashed and dotted; causal: square markers"))
        body.append(speed_table(model))
    body.append(memory_table(model))
    devices = sorted({b.device for b in benches} | {t.device for t in torch_runs})
    body.append('<p class="muted">Measured on %s.</p>' % esc("; ".join(devices)))
    return "speed", "Speed", section("speed", "Speed", body)
