"""The report page: one function per section, each returning (id, nav title,
HTML) or None when its data is absent.  Ids are stable: CI and readers link to
them (#summary, #regression, #environment, #overview, #distributions, #shape,
#special, #failures, #detection, #speed, #history, #notes; charts chart-dist-KERNEL-DTYPE,
chart-shape-KERNEL, chart-speed)."""
import collections
from typing import Dict, List, Optional, Tuple

from . import charts, failures, gating, speed
from .html import Cell, code, esc, figure, num, page, section, slug, table
from .inputs import MASKED_ROW_COUNTS, SPECIAL_CLASSES
from .model import NOT_RECORDED, Model, environment, is_mutant

Section = Optional[Tuple[str, str, str]]


# ---- summary ----------------------------------------------------------------------

def _headline(model: Model) -> str:
    if not model.cases:
        return "No case records: the inputs hold speed measurements only."
    counts = model.subject_counts()
    n_cases = sum(counts.values())
    kernels = ", ".join(code(k) for k in model.subjects)
    parts = ["%d cases on %s: %d passed, %d failed, %d errors, %d skipped."
             % (n_cases, kernels, counts["pass"], counts["fail"], counts["error"], counts["skipped"])]
    if model.detection:
        caught = sum(1 for r in model.detection if r.first_catch is not None)
        parts.append("Detection power: %d of %d mutant campaigns caught their mutant."
                     % (caught, len(model.detection)))
    uncertified = len(model.uncertified())
    if uncertified:
        parts.append("%d cases whose reference was not certified." % uncertified)
    return " ".join(parts)


VERDICT_WORD = {"pass": "PASS", "warn": "PASS, with warnings", "fail": "FAIL", "none": "NO ACCURACY RECORDS"}
VERDICT_CLASS = {"pass": "pass", "warn": "warn", "fail": "fail", "none": "warn"}


def summary(model: Model) -> Section:
    verdict = model.verdict()
    body = ['<div class="verdict %s" id="verdict">%s</div>' % (VERDICT_CLASS[verdict], VERDICT_WORD[verdict]),
            "<p>%s</p>" % _headline(model)]
    rows = []
    for k in model.kernels.values():
        if k.mutant and k.name not in model.subjects:
            continue
        c = k.counts
        rows.append([k.name, Cell(str(k.cases), "num"), Cell(str(c["pass"]), "num"),
                     Cell(str(c["fail"]), "num bad" if c["fail"] else "num"),
                     Cell(str(c["error"]), "num bad" if c["error"] else "num"), Cell(str(c["skipped"]), "num"),
                     ", ".join("%s %d" % (t, n) for t, n in k.dtypes.items())])
    body.append(table("kernels-table", ["kernel", "cases", "passed", "failed", "errors", "skipped", "dtypes"], rows))
    mutants = [k for k in model.kernels.values() if k.mutant and k.name not in model.subjects]
    if mutants:
        body.append('<p class="muted">And %d mutant kernels (planted bugs), %d cases: see '
                    '<a href="#detection">detection power</a>.</p>' % (len(mutants), sum(k.cases for k in mutants)))
    files = ["%s (%s, %d records)" % (code(f.path), f.kind, f.records) for f in model.inputs.files]
    body.append('<p class="muted">Inputs: %s.</p>' % "; ".join(files))
    return "summary", "Summary", section("summary", "Summary", body)


def environment_section(model: Model) -> Section:
    rows = []
    for r in environment(model):
        if not r.values:
            rows.append([r.label, Cell('<span class="muted">%s</span>' % NOT_RECORDED), ""])
        for value, source in r.values:
            rows.append([r.label, Cell(esc(value)), Cell('<span class="muted">%s</span>' % esc(source))])
    body = [table("environment-table", ["field", "value", "from"], rows)]
    if not model.inputs.environments:
        body.append('<p class="muted">The inputs hold no <code>{"type": "environment"}</code> record.</p>')
    return "environment", "Environment", section("environment", "Environment", body)


# ---- accuracy ---------------------------------------------------------------------

def _worst_cell(group, attr: str) -> Cell:
    value, at = group.worst(attr)
    return Cell(num(value), "num", at.case.line if at else "")


def overview(model: Model) -> Section:
    headers = ["kernel", "dtype", "output", "cases", "worst max scaled", "median max scaled",
               "worst mean scaled", "median naive mean scaled", "worst vs-naive max", "worst vs-naive mean"]
    rows = []
    for (kernel, dtype, output), g in model.groups.items():
        if kernel not in model.subjects:
            continue
        rows.append([kernel, dtype, output, Cell(str(len(g.samples)), "num"), _worst_cell(g, "max_scaled"),
                     Cell(num(g.median("max_scaled")), "num"), _worst_cell(g, "mean_scaled"),
                     Cell(num(g.median("naive_mean_scaled")), "num"), _worst_cell(g, "vs_naive_max"),
                     _worst_cell(g, "vs_naive_mean")])
    body = [table("overview-table", headers, rows),
            '<p class="muted">Scaled error: |y - x| / (u E) (README, "Metrics"); the "mean scaled" error is '
            'mean|y - x| / (u mean E) over the elements in the means, for the kernel and for the naive '
            'computation against the same E. Hover a worst value for its case line.</p>']
    return "overview", "Accuracy overview", section("overview", "Accuracy overview", body)


def distributions(model: Model) -> Section:
    body = ['<p class="muted">Per kernel, dtype and output: the empirical CDF over the cases of the max and the '
            'mean scaled error, beside the same cases\' naive computation (same dtype, S and P rounded; README, '
            '"vs-naive"). A curve further left is more accurate.</p>']
    for kernel in model.subjects:
        for dtype in model.dtypes_of(kernel):
            groups = model.groups_of(kernel, dtype)
            fid = "chart-dist-%s-%s" % (slug(kernel), slug(dtype))
            svg = charts.error_distribution(kernel, dtype, groups, fid)
            body.append(figure(fid, svg, "%s, %s: %d cases" % (esc(kernel), esc(dtype),
                                                                  max(len(g.samples) for g in groups))))
    if any(is_mutant(k) for k in model.kernels) and model.subjects != list(model.kernels):
        body.append('<p class="muted">Mutant kernels are not charted: see detection power and failures.</p>')
    return "distributions", "Error distributions", section("distributions", "Error distributions", body)


def shape(model: Model) -> Section:
    body = ['<p class="muted">The case line gives each case\'s shape. Solid: the worst max scaled error among '
            'the cases in a bin; dashed: the average of their mean scaled errors. Lengths and head dims are '
            'binned by octave (the bin is its lower edge).</p>']
    for kernel in model.subjects:
        by_output: Dict[str, Dict[str, object]] = collections.OrderedDict()
        for g in model.groups_of(kernel):
            if any(s.case.shape for s in g.samples):
                by_output.setdefault(g.output, {})[g.dtype] = g
        if not by_output:
            continue
        fid = "chart-shape-%s" % slug(kernel)
        body.append(figure(fid, charts.error_vs_shape(kernel, by_output, fid), esc(kernel)))
    return "shape", "Error against shape", section("shape", "Error against shape", body)


def special(model: Model) -> Section:
    names = list(SPECIAL_CLASSES) + list(MASKED_ROW_COUNTS)
    rows = []
    for (kernel, dtype, output), g in model.groups.items():
        totals = [g.special_total(n) for n in names]
        bad = any(t[0] for t in totals[:len(SPECIAL_CLASSES)])
        if kernel not in model.subjects and not bad:
            continue                  # mutants: only the rows where they broke a class
        cells = [Cell("%d (%d)" % t if t[0] else "0",
                      "num bad" if t[0] and i < len(SPECIAL_CLASSES) else "num") for i, t in enumerate(totals)]
        rows.append([kernel, dtype, output, Cell(str(len(g.samples)), "num")] + cells)
    headers = ["kernel", "dtype", "output", "cases"] + [n.replace("_", " ") for n in names]
    body = [table("special-table", headers, rows),
            '<p class="muted">Elements in each special-value class, checked before any magnitude (README, '
            '"Metrics"), then the fully masked rows seen and how they came out (0 / NaN / LSE +inf). '
            'A nonzero count is followed by the number of cases it came from.</p>']
    return "special", "Special values", section("special", "Special values", body)


def notes(model: Model) -> Section:
    body = []
    uncertified = model.uncertified()
    if uncertified:
        body.append("<h3>Cases whose reference was not certified (%d)</h3><ul>%s</ul>" % (
            len(uncertified), "".join("<li>%s %s: %s</li>" % (esc(c.kernel), code(c.line), esc(c.why))
                                      for c in uncertified[:50])))
    if model.inputs.notes:
        body.append("<h3>Skipped input</h3><ul>%s</ul>" % "".join("<li>%s</li>" % esc(n)
                                                                 for n in model.inputs.notes))
    if not body:
        return None
    return "notes", "Notes", section("notes", "Notes", body)


def _accuracy_sections(model: Model) -> List[Section]:
    if not model.groups:
        return []
    return [overview(model), distributions(model), shape(model), special(model), failures.failures(model),
            failures.detection(model)]


def build_page(model: Model, title: str, comparisons=None, releases=None) -> str:
    """The whole report as one HTML document; comparisons (regression.py) and
    releases (history.py) add their sections when given."""
    parts = [summary(model), gating.regression(comparisons), environment_section(model)] + \
        _accuracy_sections(model) + [speed.speed(model), gating.history_section(releases), notes(model)]
    parts = [p for p in parts if p]
    n_files = len(model.inputs.files)
    subtitle = "attncheck report from %d input file%s: %d case records, %d bench tables." % (
        n_files, "" if n_files == 1 else "s", len(model.cases),
        len(model.inputs.benches) + len(model.inputs.torch_runs))
    return page(title, [(sid, name) for sid, name, _ in parts], [body for _, _, body in parts], esc(subtitle))
