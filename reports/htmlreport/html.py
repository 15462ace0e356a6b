"""Small HTML helpers: escaping, numbers, tables, sections, and the page shell
(inline CSS, a Content-Security-Policy that forbids every load, so a browser
reports any reference outside the file as an error)."""
import html
import math
import re
import shlex
from typing import Iterable, List, Optional, Sequence

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; color: #1d232a; margin: 0; background: #f6f7f9; }
header, main { max-width: 1400px; margin: 0 auto; padding: 0 24px; }
header { padding-top: 18px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 19px; border-bottom: 2px solid #d5dae0; padding-bottom: 4px; margin-top: 34px; }
h3 { font-size: 15px; margin: 20px 0 6px; }
nav { margin: 10px 0; }
nav a { margin-right: 14px; color: #0b5cad; text-decoration: none; }
nav a:hover { text-decoration: underline; }
section { background: #fff; border: 1px solid #e1e5ea; border-radius: 6px; padding: 4px 18px 14px; margin: 14px 0; }
section > h2 { margin-top: 10px; }
table.t { border-collapse: collapse; margin: 6px 0 10px; font-size: 13px; }
table.t th, table.t td { border: 1px solid #d9dee4; padding: 3px 8px; text-align: left; vertical-align: top; }
table.t th { background: #eef1f4; font-weight: 600; }
table.t td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.t tr:nth-child(even) td { background: #fafbfc; }
td.bad, span.bad { background: #fde2e1 !important; color: #9b1c1c; }
td.good { background: #e3f5e6 !important; }
code, pre { font: 12px/1.4 ui-monospace, "DejaVu Sans Mono", monospace; }
pre.cmd { background: #1d232a; color: #e8edf2; padding: 6px 10px; border-radius: 4px; overflow-x: auto; margin: 2px 0 8px; }
.verdict { font-size: 20px; font-weight: 700; padding: 10px 16px; border-radius: 6px; margin: 10px 0; }
.verdict.pass { background: #e3f5e6; color: #14532d; border: 1px solid #9fd8a9; }
.verdict.warn { background: #fff4d6; color: #6b4e00; border: 1px solid #f0d78a; }
.verdict.fail { background: #fde2e1; color: #7f1d1d; border: 1px solid #f3a5a1; }
.muted { color: #5f6b78; }
figure { margin: 10px 0 18px; }
figure svg { max-width: 100%; height: auto; }
figcaption { color: #5f6b78; font-size: 12px; }
dl.failure { display: grid; grid-template-columns: 74px minmax(0, 1fr); gap: 2px 8px; margin: 4px 0 12px;
             padding: 6px 10px; border-left: 3px solid #e06c6c; background: #fdf6f6; }
dl.failure dt { font-weight: 600; }
dl.failure dd { margin: 0; }
dl.failure pre.cmd { margin: 0; }
details summary { cursor: pointer; color: #0b5cad; }
"""

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def esc(text) -> str:
    return html.escape(str(text), quote=True)


def slug(name: str) -> str:
    """An id fragment from a kernel name: [A-Za-z0-9_-] only."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", name)


def num(x: Optional[float]) -> str:
    """3 significant digits; "-" for a missing value; inf and nan by name."""
    if x is None:
        return "-"
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "0"
    return "%.3g" % x


def code(text) -> str:
    return "<code>%s</code>" % esc(text)


def reproduce_command(kernel: str, line: str) -> str:
    """The command that replays a case: a v1 case line through `attncheck run`;
    a `check PATH` record through `attncheck check` (its other options are
    not in the record)."""
    if line.startswith("check "):
        return "attncheck " + line
    return "attncheck run --kernel %s --case %s" % (shlex.quote(kernel), shlex.quote(line))


class Cell:
    """A table cell with a class (num, bad, good) and an optional tooltip."""

    def __init__(self, html_text: str, cls: str = "", title: str = ""):
        self.html, self.cls, self.title = html_text, cls, title

    def render(self) -> str:
        attrs = (' class="%s"' % self.cls if self.cls else "") + (' title="%s"' % esc(self.title) if self.title else "")
        return "<td%s>%s</td>" % (attrs, self.html)


def table(table_id: str, headers: Sequence[str], rows: Iterable[Sequence], caption: str = "") -> str:
    """rows hold Cells or plain values (escaped)."""
    out = ['<table class="t" id="%s">' % esc(table_id)]
    if caption:
        out.append('<caption class="muted">%s</caption>' % caption)
    out.append("<thead><tr>%s</tr></thead><tbody>" % "".join("<th>%s</th>" % esc(h) for h in headers))
    for row in rows:
        cells = [c.render() if isinstance(c, Cell) else "<td>%s</td>" % esc(c) for c in row]
        out.append("<tr>%s</tr>" % "".join(cells))
    out.append("</tbody></table>")
    return "\n".join(out)


def section(section_id: str, title: str, body: List[str]) -> str:
    return '<section id="%s">\n<h2><a href="#%s">%s</a></h2>\n%s\n</section>' % (
        esc(section_id), esc(section_id), esc(title), "\n".join(body))


def figure(figure_id: str, svg: str, caption: str) -> str:
    return '<figure id="%s" class="chart">\n%s\n<figcaption>%s</figcaption>\n</figure>' % (
        esc(figure_id), svg, caption)


def page(title: str, nav: List[tuple], sections: List[str], subtitle: str) -> str:
    links = " ".join('<a href="#%s">%s</a>' % (esc(i), esc(t)) for i, t in nav)
    return """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="%s">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>%s</title>
<style>%s</style>
</head>
<body>
<header>
<h1 id="top">%s</h1>
<div class="muted">%s</div>
<nav id="nav">%s</nav>
</header>
<main>
%s
</main>
</body>
</html>
""" % (CSP, esc(title), CSS, esc(title), subtitle, links, "\n".join(sections))
