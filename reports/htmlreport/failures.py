"""The failures section (grouped by kernel and failure kind, each with the
command that reproduces it) and the detection-power table of `prove`."""
import collections
from typing import List, Optional, Tuple

from .html import Cell, code, esc, reproduce_command, section, table
from .inputs import CaseRecord
from .model import Model

FAILURES_SHOWN_PER_GROUP = 5       # the rest of a group folds into a <details>
FAILURES_LISTED_PER_GROUP = 100    # beyond this, the JSON has them
Section = Optional[Tuple[str, str, str]]


def _failure_block(c: CaseRecord) -> str:
    replay = c.minimal or c.line
    rows = ["<dt>why</dt><dd>%s</dd>" % esc(c.why or "-"),
            "<dt>original</dt><dd>%s</dd>" % code(c.line)]
    if c.minimal:
        rows.append("<dt>minimal</dt><dd>%s</dd>" % code(c.minimal))
    rows.append('<dt>replay</dt><dd><pre class="cmd">%s</pre></dd>' % esc(reproduce_command(c.kernel, replay)))
    rows.append('<dt>record</dt><dd class="muted">%s</dd>' % esc(c.source))
    return '<dl class="failure">%s</dl>' % "".join(rows)


def _group_blocks(cases: List[CaseRecord]) -> List[str]:
    shown = [_failure_block(c) for c in cases[:FAILURES_SHOWN_PER_GROUP]]
    folded = cases[FAILURES_SHOWN_PER_GROUP:FAILURES_LISTED_PER_GROUP]
    if folded:
        shown.append("<details><summary>%d more</summary>%s</details>"
                     % (len(folded), "".join(_failure_block(c) for c in folded)))
    if len(cases) > FAILURES_LISTED_PER_GROUP:
        shown.append('<p class="muted">... and %d more (see the JSON Lines).</p>'
                     % (len(cases) - FAILURES_LISTED_PER_GROUP))
    return shown


def plural(n: int, word: str) -> str:
    return "%d %s%s" % (n, word, "" if n == 1 else "s")


def _kind_groups(cases: List[CaseRecord]) -> "collections.OrderedDict":
    groups = collections.OrderedDict()
    for c in cases:
        groups.setdefault((c.kernel, c.kind), []).append(c)
    return groups


def _groups_html(groups) -> List[str]:
    body = []
    for (kernel, kind), cases in groups.items():
        body.append("<h3>%s: %s, %s</h3>" % (code(kernel), code(kind or "?"), plural(len(cases), "failure")))
        body += _group_blocks(cases)
    return body


def failures(model: Model) -> Section:
    """The kernels under test's failures in full; the mutants' (expected: each
    is a planted bug) folded, since a prove run has one per mutant."""
    fails, errors = model.failures("fail"), model.failures("error")
    groups = _kind_groups(fails)
    body = [] if fails or errors else ["<p>No failures and no errors.</p>"]
    if groups:
        rows = [[k, kind, Cell(str(len(cs)), "num")] for (k, kind), cs in groups.items()]
        body.append(table("failure-kinds-table", ["kernel", "failure kind", "cases"], rows))
    subject = collections.OrderedDict((g, cs) for g, cs in groups.items() if g[0] in model.subjects)
    mutant = collections.OrderedDict((g, cs) for g, cs in groups.items() if g[0] not in model.subjects)
    body += _groups_html(subject)
    if mutant:
        body.append('<details id="mutant-failures"><summary>The mutants\' failures (%s, planted bugs: '
                    'expected)</summary>%s</details>' % (plural(sum(len(cs) for cs in mutant.values()), "failure"),
                                                         "\n".join(_groups_html(mutant))))
    if errors:
        body.append("<h3>Errors (the case could not run)</h3>")
        body += _group_blocks(errors)
    body.append('<p class="muted">A kernel from a plugin needs its <code>--plugin PATH.so</code> added to the '
                'command.</p>')
    return "failures", "Failures", section("failures", "Failures", body)


def detection(model: Model) -> Section:
    if not model.detection:
        return None
    rows, caught = [], 0
    several_files = len({r.path for r in model.detection}) > 1
    for r in model.detection:
        clean = model.base_clean(r.base)
        base = "%s (%s)" % (r.base, {True: "clean", False: "NOT clean", None: "not in the inputs"}[clean])
        first = [r.mutant] + ([r.path] if several_files else []) + [base]
        if r.first_catch is None:
            rows.append(first + [Cell("no", "bad"), Cell("not in %d" % r.cases_run, "num bad"), "-", "-"])
            continue
        caught += 1
        c = r.caught_case
        rows.append(first + [Cell("yes", "good"), Cell(str(r.first_catch), "num"), Cell(code(c.kind)),
                             Cell(code(c.minimal or c.line))])
    headers = ["mutant"] + (["file"] if several_files else []) + \
        ["base", "caught", "cases to first catch", "failure kind", "minimal case"]
    body = ["<p>%d of %d mutant campaigns caught their mutant.</p>" % (caught, len(model.detection)),
            table("detection-table", headers, rows),
            '<p class="muted">Cases to first catch: the position of the mutant\'s first failing case among its '
            'records (a prove campaign stops at the first catch; the records carry no timings).</p>']
    return "detection", "Detection power", section("detection", "Detection power", body)
