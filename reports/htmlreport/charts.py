"""The report's charts: one function per chart, each returning an inline SVG
string (matplotlib's SVG backend, text as paths so no font is needed).

Every SVG's internal ids (glyphs, clip paths, markers) get a per-chart prefix:
several SVGs inline in one HTML document share one id namespace, and matplotlib
reuses the same ids in every figure.  History charts (per release) go here too,
as more functions of the same shape."""
import io
import math
import re
from typing import Dict, List, Optional, Sequence

import matplotlib
from matplotlib.figure import Figure

from .inputs import BenchRun, TorchRun
from .model import SHAPE_AXES, GroupSummary, shape_series

matplotlib.rcParams.update({
    "svg.hashsalt": "attncheck",        # the same inputs give the same SVG
    "svg.fonttype": "path",
    "font.size": 8,
    "axes.titlesize": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "legend.fontsize": 8,
})

DTYPE_COLOURS = {"f32": "tab:green", "f16": "tab:blue", "bf16": "tab:orange", "e4m3": "tab:red", "e5m2": "tab:purple"}
_SVG_ID = re.compile(r'\bid="([^"]+)"')
_SVG_REF = re.compile(r'(url\(#|href="#)([^")]+)')
_SVG_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.S)


def to_svg(fig: Figure, prefix: str) -> str:
    """The figure as an <svg> element, ids prefixed to be unique in the page."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]                   # drop the XML declaration and DOCTYPE
    svg = _SVG_METADATA.sub("", svg, count=1)       # RDF naming matplotlib: no use inline
    svg = _SVG_ID.sub(lambda m: 'id="%s-%s"' % (prefix, m.group(1)), svg)
    svg = _SVG_REF.sub(lambda m: "%s%s-%s" % (m.group(1), prefix, m.group(2)), svg)
    return svg.replace("<svg ", '<svg role="img" ', 1)


# ---- error distributions ------------------------------------------------------------

SCALED_FLOOR = 1e-4   # scaled errors below this are exact for any reader: the left edge of the axis


ECDF_MAX_STEPS = 400     # a long campaign's CDF drawn through 400 of its points: the same picture, a small SVG


def _thinned(n: int) -> List[int]:
    """Indices 0..n-1, at most ECDF_MAX_STEPS of them, evenly spread, the last always kept."""
    if n <= ECDF_MAX_STEPS:
        return list(range(n))
    step = (n - 1) / (ECDF_MAX_STEPS - 1)
    return sorted({round(i * step) for i in range(ECDF_MAX_STEPS)})


def _ecdf(ax, values: Sequence[Optional[float]], label: str, **style) -> str:
    """Steps of the empirical CDF over all the cases given, on a log x axis
    starting at SCALED_FLOOR: cases at or below it (zeros too) count from the
    left edge; non-finite values are never reached.  Returns a note on what
    the axis cannot show."""
    present = [v for v in values if v is not None]
    if not present:
        return ""
    above = sorted(v for v in present if math.isfinite(v) and v > SCALED_FLOOR)
    low = sum(1 for v in present if math.isfinite(v) and v <= SCALED_FLOOR)
    nonfinite = len(present) - len(above) - low
    n = len(present)
    ranks = _thinned(len(above))
    ax.step([SCALED_FLOOR] + [above[i] for i in ranks], [low / n] + [(low + i + 1) / n for i in ranks],
            where="post", label=label, **style)
    parts = (["%d at or below %g" % (low, SCALED_FLOOR)] if low else []) + \
        (["%d inf/nan" % nonfinite] if nonfinite else [])
    return "%s: %s" % (label, ", ".join(parts)) if parts else ""


DIST_SERIES = (
    # attribute, legend label, style
    ("max_scaled", "kernel max", dict(color="tab:red")),
    ("naive_max_scaled", "naive max", dict(color="tab:red", linestyle="--")),
    ("mean_scaled", "kernel mean", dict(color="tab:blue")),
    ("naive_mean_scaled", "naive mean", dict(color="tab:blue", linestyle="--")),
)


def _budget_line(ax, group: GroupSummary):
    budgets = {s.metrics.get("budget_scaled") for s in group.samples} - {None}
    if len(budgets) == 1:                       # a future field: the gate's budget for this output
        ax.axvline(budgets.pop(), color="black", linewidth=0.8, linestyle=":", label="budget")


def error_distribution(kernel: str, dtype: str, groups: List[GroupSummary], prefix: str) -> str:
    """Per output, the CDF over the cases of the scaled error (max and mean),
    beside the same cases' naive computation measured against the same E."""
    fig = Figure(figsize=(2.7 * len(groups) + 0.6, 2.9), layout="constrained")
    axes = fig.subplots(1, len(groups), squeeze=False)[0]
    for i, (ax, g) in enumerate(zip(axes, groups)):
        notes = [_ecdf(ax, [getattr(s, attr) for s in g.samples], label, **style)
                 for attr, label, style in DIST_SERIES]
        _budget_line(ax, g)
        ax.set_xscale("log")
        ax.set_xlim(left=SCALED_FLOOR)
        ax.set_ylim(0, 1.02)
        ax.set_title("%s (%d cases)" % (g.output, len(g.samples)))
        ax.set_xlabel("scaled error |y - x| / (u E)")
        if i == 0:
            ax.set_ylabel("fraction of cases at or below")
        note = "\n".join(n for n in notes if n)
        if note:   # below and right of a CDF is empty
            ax.text(0.98, 0.03, note, transform=ax.transAxes, ha="right", va="bottom", fontsize=6,
                    bbox=dict(facecolor="white", edgecolor="none", alpha=0.8, pad=1))
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), bbox_to_anchor=(0.5, -0.08), frameon=False)
    fig.suptitle("%s, %s: distribution of the scaled error over the cases (kernel solid, naive dashed)"
                 % (kernel, dtype), fontsize=10)
    return to_svg(fig, prefix)


# ---- error against the shape ----------------------------------------------------------

def _plot_shape(ax, axis: str, per_dtype: Dict[str, GroupSummary]):
    categories: List[object] = []
    series = {t: shape_series(g, axis) for t, g in per_dtype.items()}
    if axis == "mask":
        for points in series.values():
            categories += [p.key for p in points if p.key not in categories]
    for dtype, points in series.items():
        xs = [categories.index(p.key) if axis == "mask" else p.key for p in points]
        colour = DTYPE_COLOURS.get(dtype, "tab:gray")
        # values below the floor sit on the bottom edge: exact for any reader
        max_ys = [max(p.max_of_max_scaled, SCALED_FLOOR) for p in points]
        mean_ys = [max(p.mean_of_mean_scaled, SCALED_FLOOR) if p.mean_of_mean_scaled is not None else math.nan
                   for p in points]
        ax.plot(xs, max_ys, marker="o", markersize=3, color=colour, label="%s max" % dtype)
        ax.plot(xs, mean_ys, marker="x", markersize=3, color=colour, linestyle="--", label="%s mean" % dtype)
    ax.set_yscale("log")
    ax.set_ylim(bottom=SCALED_FLOOR / 2)
    if axis == "mask":
        ax.set_xticks(range(len(categories)))
        ax.set_xticklabels([str(c) for c in categories], rotation=30, ha="right")
        ax.set_xlim(-0.5, max(len(categories) - 0.5, 0.5))
    else:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(SHAPE_AXES[axis][0])


def error_vs_shape(kernel: str, by_output: Dict[str, Dict[str, GroupSummary]], prefix: str) -> str:
    """Rows: outputs; columns: sequence length, head dim, mask kind.  Solid: the
    worst max scaled error among the bin's cases; dashed: the average of their
    mean scaled errors; one colour per dtype."""
    outputs = list(by_output)
    fig = Figure(figsize=(13, 2.4 * len(outputs) + 0.8), layout="constrained")
    axes = fig.subplots(len(outputs), len(SHAPE_AXES), squeeze=False)
    for r, output in enumerate(outputs):
        for c, axis in enumerate(SHAPE_AXES):
            _plot_shape(axes[r][c], axis, by_output[output])
            axes[r][c].set_title("%s against %s" % (output, SHAPE_AXES[axis][1]))
        axes[r][0].set_ylabel("%s scaled error" % output)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=max(len(labels), 1), bbox_to_anchor=(0.5, -0.03),
               frameon=False)
    fig.suptitle("%s: scaled error against the problem's shape (solid: worst max in the bin; "
                 "dashed: average mean)" % kernel, fontsize=10)
    return to_svg(fig, prefix)


# ---- speed --------------------------------------------------------------------------

def _speed_points(benches: List[BenchRun], torch_runs: List[TorchRun]):
    """{(dtype, d, dir, causal): {"ours": {N: TFLOP/s}, backend: {N: TFLOP/s}}}."""
    series: Dict[tuple, Dict[str, Dict[int, float]]] = {}
    for b in benches:
        for r in b.speed:
            series.setdefault((r.dtype, r.d, r.direction, r.causal), {}).setdefault("ours", {})[r.n] = r.tflops
    for t in torch_runs:
        for r in t.rows:
            lines = series.setdefault((r.dtype, r.d, r.direction, r.causal), {})
            if r.ours_tflops is not None:
                lines.setdefault("ours", {}).setdefault(r.n, r.ours_tflops)
            for name, value in r.backends.items():
                if value is not None:
                    lines.setdefault("torch " + name, {})[r.n] = value[0]
    return series


def speed(benches: List[BenchRun], torch_runs: List[TorchRun], prefix: str) -> str:
    """TFLOP/s against N: columns dtype x head dim, rows forward / backward;
    ours solid, PyTorch's backends dashed; causal with square markers."""
    series = _speed_points(benches, torch_runs)
    panels = sorted({(k[0], k[1]) for k in series}, key=lambda p: (p[0] != "f16", p[1]))
    dirs = [d for d in ("fwd", "bwd") if any(k[2] == d for k in series)]
    fig = Figure(figsize=(2.8 * len(panels) + 0.6, 2.6 * len(dirs) + 0.6), layout="constrained")
    axes = fig.subplots(len(dirs), len(panels), squeeze=False)
    styles = {"ours": ("-", "tab:red"), "torch flash": ("--", "tab:gray"), "torch cudnn": (":", "tab:purple")}
    for r, direction in enumerate(dirs):
        for c, (dtype, d) in enumerate(panels):
            ax = axes[r][c]
            for causal in (0, 1):
                for name, points in series.get((dtype, d, direction, causal), {}).items():
                    ns = sorted(points)
                    linestyle, colour = styles.get(name, ("-.", "tab:brown"))
                    ax.plot(ns, [points[n] for n in ns], linestyle=linestyle, color=colour,
                            marker="s" if causal else "o", markersize=3, alpha=0.55 if causal else 1.0,
                            label="%s%s" % (name, ", causal" if causal else ""))
            ax.set_xscale("log", base=2)
            ax.set_title("%s %s, d = %d" % (direction, dtype, d))
            ax.set_xlabel("sequence length N")
            ax.set_ylabel("TFLOP/s")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, bbox_to_anchor=(0.5, -0.06), frameon=False)
    fig.suptitle("attention speed (B = 16384/N, H = 2048/d; causal: square markers, paler)", fontsize=10)
    return to_svg(fig, prefix)


# ---- regression against a baseline -------------------------------------------------------

def regression_ratios(cmp, prefix: str) -> str:
    """Per dtype (columns) and metric (rows): per output, the paired ratios new / old
    over the cases as points (jittered) with their median as a bar; the
    threshold T and 1/T dashed.  Log y axis; infinite ratios sit on the top edge."""
    dtypes = list(dict.fromkeys(c.dtype for c in cmp.cells.values()))
    metrics = [m for m in ("mean-abs", "max-scaled") if any(c.metric == m for c in cmp.cells.values())]
    fig = Figure(figsize=(3.4 * max(len(dtypes), 1) + 0.6, 2.6 * max(len(metrics), 1) + 0.6), layout="constrained")
    axes = fig.subplots(max(len(metrics), 1), max(len(dtypes), 1), squeeze=False)
    for r, metric in enumerate(metrics):
        for col, dtype in enumerate(dtypes):
            ax = axes[r][col]
            cells = [c for c in cmp.cells.values() if c.dtype == dtype and c.metric == metric]
            finite = [x for c in cells for x in c.ratios if 0 < x < math.inf]
            top = max(finite + [cmp.ratio * 1.2]) * 1.3
            bottom = min(finite + [1 / cmp.ratio / 1.2]) / 1.3
            for i, c in enumerate(cells):
                ys = [min(max(x, bottom), top) for x in c.ratios]
                xs = [i + 0.3 * (((k * 0.6180339887) % 1.0) - 0.5) for k in range(len(ys))]
                colour = {"regression": "tab:red", "improvement": "tab:green"}.get(c.verdict, "tab:blue")
                ax.scatter(xs, ys, s=4, alpha=0.35, color=colour, linewidths=0)
                ax.hlines(c.median, i - 0.35, i + 0.35, color=colour, linewidth=2)
            ax.axhline(cmp.ratio, color="black", linestyle="--", linewidth=0.8)
            ax.axhline(1 / cmp.ratio, color="black", linestyle=":", linewidth=0.8)
            ax.set_yscale("log")
            ax.set_ylim(bottom, top)
            ax.set_xticks(range(len(cells)))
            ax.set_xticklabels([c.output for c in cells])
            ax.set_title("%s, %s" % (dtype, metric))
            if col == 0:
                ax.set_ylabel("ratio new / old per case")
    fig.suptitle("%s against %s: paired ratios per case (bar: median; dashed: threshold %.3g; dotted: 1/%.3g; "
                 "red: regression, green: improvement)" % (cmp.kernel, cmp.baseline_kernel, cmp.ratio, cmp.ratio),
                 fontsize=9)
    return to_svg(fig, prefix)


# ---- history of releases -------------------------------------------------------------------

def history(kernel: str, releases, keys, prefix: str) -> str:
    """Columns: mean scaled error, worst max scaled error, cases/s; x: the releases in
    order; one line per dtype x output (colour per dtype)."""
    versions = [r.version for r in releases]
    fig = Figure(figsize=(12, 3.2), layout="constrained")
    axes = fig.subplots(1, 3)
    markers = {"O": "o", "LSE": "s", "dQ": "^", "dK": "v", "dV": "D", "dSink": "P", "dBias": "X"}
    for key in [k for k in keys if k[0] == kernel]:
        _, dtype, output = key
        style = dict(color=DTYPE_COLOURS.get(dtype, "tab:gray"), marker=markers.get(output, "o"), markersize=3,
                     label="%s %s" % (dtype, output))
        for ax, attr in zip(axes[:2], ("mean_scaled", "max_scaled")):
            ys = [getattr(r.points[key], attr) if key in r.points and getattr(r.points[key], attr) is not None
                  else math.nan for r in releases]
            ax.plot(range(len(versions)), [max(y, SCALED_FLOOR) if y == y else y for y in ys], **style)
    speeds = [r.cases_per_s.get(kernel, math.nan) for r in releases]
    axes[2].plot(range(len(versions)), speeds, color="black", marker="o", markersize=3)
    if all(math.isnan(s) for s in speeds):
        axes[2].text(0.5, 0.5, "no campaign records\n(seconds, cases/s)", transform=axes[2].transAxes,
                     ha="center", va="center", fontsize=8)
    for ax, title in zip(axes, ("mean scaled error (mean over the cases)", "worst max scaled error", "cases/s")):
        ax.set_xticks(range(len(versions)))
        ax.set_xticklabels(versions)
        ax.set_xlim(-0.5, len(versions) - 0.5)
        ax.set_title(title)
        ax.set_xlabel("release")
    axes[0].set_yscale("log")
    axes[1].set_yscale("log")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 8) or 1, bbox_to_anchor=(0.5, -0.12),
               frameon=False)
    fig.suptitle("%s across releases" % kernel, fontsize=10)
    return to_svg(fig, prefix)
