"""The sections a reviewer and a release manager read: the regression
section (this run against a baseline run, regression.py) and the history of
releases (history.py).  Ids: #regression, regression-table-KERNEL,
chart-regression-KERNEL, regression-not-compared-KERNEL; #history,
history-table, chart-history-KERNEL, history-changes."""
from typing import List, Optional, Tuple

from . import charts, history as hist
from .html import Cell, code, esc, figure, num, section, slug, table

Section = Optional[Tuple[str, str, str]]
NOT_COMPARED_SHOWN = 50


def _p(p: Optional[float]) -> str:
    return "-" if p is None else "%.2g" % p


def _cell_row(c) -> list:
    cls = {"regression": "bad", "improvement": "good"}.get(c.verdict, "")
    return [c.dtype, c.output, c.metric, Cell(str(len(c.ratios)), "num"), Cell(num(c.median), "num " + cls),
            Cell(str(c.above), "num"), Cell(str(c.below), "num"), Cell(_p(c.p_regression), "num"),
            Cell(_p(c.p_improvement), "num"), Cell(_p(c.wilcoxon_regression), "num"),
            Cell(_p(c.wilcoxon_improvement), "num"), Cell(esc(c.verdict.upper() if cls == "bad" else c.verdict), cls)]


def _comparison(cmp) -> List[str]:
    verdict = {"regression": "fail", "improvement": "pass", "same": "pass"}[cmp.verdict]
    word = {"regression": "REGRESSION", "improvement": "no regression; improved", "same": "no regression"}
    body = ['<h3>%s against %s in %s</h3>' % (code(cmp.kernel), code(cmp.baseline_kernel), code(cmp.baseline_path)),
            '<div class="verdict %s" id="regression-verdict-%s">%s</div>' % (verdict, slug(cmp.kernel),
                                                                            word[cmp.verdict]),
            "<p>%d cases run, %d compared (passed in both runs), %d not compared. A regression: the median of the "
            "paired ratios new / old above %.3g with a one-sided sign test p &lt; %.2g; an improvement: below "
            "%.3g.</p>" % (cmp.new_cases, cmp.compared, len(cmp.listed), cmp.ratio, cmp.alpha, 1 / cmp.ratio)]
    for c in cmp.cells.values():
        if c.verdict != "same":
            pct = abs(c.median - 1) * 100
            body.append('<p class="%s">%s %s %s error %s %.3g%% (median ratio %s over %d cases, sign test p = %s)'
                        "</p>" % ("bad" if c.verdict == "regression" else "muted", esc(c.dtype), esc(c.output),
                                  esc(c.metric), "up" if c.verdict == "regression" else "down", pct, num(c.median),
                                  len(c.ratios), _p(c.p_regression if c.verdict == "regression"
                                                    else c.p_improvement)))
    headers = ["dtype", "output", "metric", "pairs", "median ratio", "> T", "< T", "sign p (regression)",
               "sign p (improvement)", "Wilcoxon p (regression)", "Wilcoxon p (improvement)", "verdict"]
    body.append(table("regression-table-%s" % slug(cmp.kernel), headers, [_cell_row(c) for c in cmp.cells.values()]))
    if cmp.cells:
        fid = "chart-regression-%s" % slug(cmp.kernel)
        body.append(figure(fid, charts.regression_ratios(cmp, fid), "paired ratios new / old, one point per case"))
    rows = [[Cell(code(line)), why] for line, why in cmp.listed[:NOT_COMPARED_SHOWN]]
    more = len(cmp.listed) - NOT_COMPARED_SHOWN
    body.append(table("regression-not-compared-%s" % slug(cmp.kernel), ["case", "why not compared"], rows,
                      "cases not compared (%d%s)" % (len(cmp.listed), ", the first %d shown" % NOT_COMPARED_SHOWN
                                                     if more > 0 else "")))
    return body


def regression(comparisons) -> Section:
    if comparisons is None:
        return None
    body = []
    for cmp in comparisons:
        body += _comparison(cmp)
    if not comparisons:
        body.append("<p>No kernel under test to compare.</p>")
    return "regression", "Regression", section("regression", "Regression against the baseline", body)


def history_section(releases) -> Section:
    if releases is None:
        return None
    keys = hist.keys(releases)
    versions = [r.version for r in releases]
    rows = []
    for key in keys:
        row = list(key)
        for r in releases:
            p = r.points.get(key)
            row.append(Cell("-" if p is None else "%s / %s" % (num(p.mean_scaled), num(p.max_scaled)), "num",
                            "" if p is None else "%d cases" % p.cases))
        rows.append(row)
    for kernel in dict.fromkeys(k[0] for k in keys):
        rows.append([kernel, "", "cases/s"] + [Cell(num(r.cases_per_s.get(kernel)), "num") for r in releases])
    body = ["<p>Releases %s; per kernel, dtype and output the mean over the cases of the mean scaled error, "
            "then the worst max scaled error (hover: cases).</p>" % ", ".join(code(v) for v in versions),
            table("history-table", ["kernel", "dtype", "output"] + versions, rows)]
    for kernel in dict.fromkeys(k[0] for k in keys):
        fid = "chart-history-%s" % slug(kernel)
        body.append(figure(fid, charts.history(kernel, releases, keys, fid), esc(kernel)))
    changes = [hist.describe(c) for old in releases[:-1] for c in
               (hist.change(old, releases[-1], k) for k in keys) if c is not None]
    body.append('<ul id="history-changes">%s</ul>' % "".join("<li>%s</li>" % esc(c) for c in changes) if changes
                else '<p id="history-changes" class="muted">One release: nothing to compare yet.</p>')
    return "history", "History", section("history", "History of releases", body)
