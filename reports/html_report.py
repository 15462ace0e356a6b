#!/usr/bin/env python3
"""reports/html_report.py — one self-contained HTML accuracy report from
attncheck runs: no network, no script, charts as inline SVG (matplotlib).

usage: python3 reports/html_report.py --out OUT.html [--title T] [--baseline OLD.jsonl] [--history DIR] FILE...

FILE: JSON Lines from `attncheck fuzz|run|check|prove --json` (merged shards:
the same records concatenated), `attncheck bench` output, and
ci/torch_sdpa_bench.py output (PyTorch's TFLOP/s and ours / theirs).
--baseline OLD.jsonl adds the regression section: FILE's cases paired with
OLD's by case line, per dtype x output the ratios new / old, sign and
Wilcoxon tests, the threshold from budgets.txt (htmlreport/regression.py).
--history DIR adds the releases (DIR/VERSION.jsonl or DIR/VERSION/*.jsonl):
mean and max scaled error and cases/s per release, and prints the table a
release note can quote (htmlreport/history.py); with --history, FILE and
--out are optional.
`attncheck report FILE... --html OUT.html` runs this script.

Exit status: 0 written; 2 bad usage or input (the message names the file and
line); 3 environment (matplotlib cannot be imported).  Records of an unknown
"type" are skipped with a note on stderr and in the report.
"""
import argparse
import importlib.util
import os
import sys
import tempfile
import traceback

DEBIAN_PYTHON = "/usr/bin/python3"     # where Debian's python3-matplotlib is importable
REEXEC_GUARD = "ATTNCHECK_HTML_REPORT_REEXEC"
PROG = "html_report"


def matplotlib_or_reexec() -> str:
    """"" when matplotlib can be imported (found, not imported: bad input is
    refused before paying for it).  Otherwise, once, re-runs this script with
    Debian's python3 (a python3 earlier in PATH, e.g. pyenv's, does not see
    Debian's packages); returns why when that is not possible."""
    if importlib.util.find_spec("matplotlib") is not None:
        return ""
    error = "No module named 'matplotlib'"
    here = os.path.realpath(sys.executable or "")
    if os.environ.get(REEXEC_GUARD) or not os.access(DEBIAN_PYTHON, os.X_OK) or \
            here == os.path.realpath(DEBIAN_PYTHON):
        return error
    os.environ[REEXEC_GUARD] = "1"
    os.execv(DEBIAN_PYTHON, [DEBIAN_PYTHON, os.path.abspath(__file__)] + sys.argv[1:])
    return error                          # not reached


def parse_args(argv):
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                 usage="%(prog)s --out OUT.html [--title T] [--baseline OLD.jsonl] [--history DIR] "
                                       "FILE...")
    ap.add_argument("--out", help="the HTML file to write (atomically)")
    ap.add_argument("--title", default="attncheck accuracy report", help="the page title")
    ap.add_argument("--baseline", metavar="OLD.jsonl", help="compare FILE's cases with this run's, case by case")
    ap.add_argument("--history", metavar="DIR", help="one JSON Lines set per release: DIR/VERSION[.jsonl|/]")
    ap.add_argument("--budgets", metavar="FILE", help="where regression-ratio and regression-p are read "
                                                      "(default: budgets.txt of this checkout)")
    ap.add_argument("files", nargs="*", metavar="FILE", help="JSON Lines, bench or torch output")
    args = ap.parse_args(argv)
    if not args.history and (not args.out or not args.files):
        ap.error("the following arguments are required: --out" if not args.out else
                 "the following arguments are required: FILE")
    if args.baseline and not args.files:
        ap.error("--baseline needs FILE (the run to compare with it)")
    return args


def write_atomic(path: str, text: str):
    """Temp file beside the target, then rename: never a half-written report."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".html_report.", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def read_extras(args, data, m):
    """The baseline comparisons and the releases, when asked for (InputError,
    HistoryError on bad input)."""
    from htmlreport import history, inputs, regression
    comparisons = releases = None
    if args.baseline:
        old = inputs.read_inputs([args.baseline])
        comparisons = regression.compare_all(data, old, m.subjects, args.baseline,
                                             args.budgets or regression.default_budgets_path())
    if args.history:
        releases = history.read_history(args.history)
        sys.stdout.write(history.text_table(releases))
    return comparisons, releases


def run(args) -> int:
    from htmlreport import history, inputs, model, page
    try:
        data = inputs.read_inputs(args.files) if args.files else inputs.Inputs()
        m = model.build(data)
        comparisons, releases = read_extras(args, data, m)
    except (inputs.InputError, history.HistoryError) as e:
        print("%s: %s" % (PROG, e), file=sys.stderr)
        return 2
    for note in data.notes:
        print("%s: note: %s" % (PROG, note), file=sys.stderr)
    if not args.out:
        return 0
    document = page.build_page(m, args.title, comparisons, releases)
    try:
        write_atomic(args.out, document)
    except OSError as e:
        print("%s: cannot write %s: %s" % (PROG, args.out, e.strerror or e), file=sys.stderr)
        return 2
    regressed = any(c.verdict == "regression" for c in comparisons or [])
    print("%s: wrote %s (%d KiB, %d case records): %s%s" % (PROG, args.out, (len(document) + 1023) // 1024,
                                                            len(data.cases), page.VERDICT_WORD[m.verdict()],
                                                            "; REGRESSION against the baseline" if regressed else ""))
    return 0


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    missing = matplotlib_or_reexec()
    if missing:
        print("%s: matplotlib is not importable by %s (%s): install Debian's python3-matplotlib "
              "(bash ci/test-html-report.sh does)" % (PROG, sys.executable, missing), file=sys.stderr)
        return 3
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        return run(args)
    except Exception as e:  # a bug here: one line naming where (in this tool's files), not a traceback
        frames = traceback.extract_tb(e.__traceback__)
        here = os.path.dirname(os.path.abspath(__file__))
        where = ([f for f in frames if f.filename.startswith(here)] or frames)[-1]
        print("%s: internal error: %s: %s (at %s:%d)" % (PROG, type(e).__name__, e,
                                                         os.path.basename(where.filename), where.lineno),
              file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
