#!/usr/bin/env python3
"""Whether every failure of a campaign is one its kernel is known to have.

    python3 ci/fuzz_expected.py RUN.jsonl --allow KIND LINE_REGEX [--allow KIND LINE_REGEX ...]

RUN.jsonl is `attncheck fuzz --json`'s record file. A failing case is expected when its kind
(`O:overflow`, `O:vs-naive-mean`, ...) equals the KIND of some --allow and its case line matches
that --allow's LINE_REGEX (re.search). Errors (the harness could not judge a case) are never
expected. ci/gpu-run.sh uses it for cuda-naive, the naive three-kernel foil: it computes O
from P rounded to the dtype, so at the dtype's extremes (dist=huge, dist=tiny) it overflows
where the exact O rounds to the largest finite value, or errs more on average than the CPU's
naive baseline. Those verdicts are right, but they are not news.

Prints each failure with the --allow it matched, or UNEXPECTED. Exit 0 when every failure is
expected, 1 when one is not (or a case is an error), 2 for bad input: an unreadable file, a line
that is not JSON, or no case records.
"""
import argparse
import json
import re
import sys


def load_cases(path):
    """The case records of a --json file; raises ValueError naming the file and line."""
    cases = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not a JSON record ({e.msg})") from None
            if isinstance(rec, dict) and "case" in rec and "verdict" in rec:
                cases.append(rec)
    if not cases:
        raise ValueError(f"{path}: no case records")
    return cases


def classify(cases, allows):
    """(expected, unexpected) failing cases, each (record, the matching allow or None)."""
    expected, unexpected = [], []
    for rec in cases:
        if rec["verdict"] == "pass":
            continue
        match = None
        if rec["verdict"] == "fail":
            match = next((a for a in allows if rec.get("kind") == a[0] and a[1].search(rec["case"])), None)
        (expected if match else unexpected).append((rec, match))
    return expected, unexpected


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("jsonl")
    ap.add_argument("--allow", nargs=2, action="append", default=[], metavar=("KIND", "LINE_REGEX"))
    args = ap.parse_args(argv)
    try:
        allows = [(kind, re.compile(rx)) for kind, rx in args.allow]
        cases = load_cases(args.jsonl)
    except (OSError, ValueError, re.error) as e:
        print(f"fuzz_expected: {e}", file=sys.stderr)
        return 2
    expected, unexpected = classify(cases, allows)
    for rec, match in expected:
        print(f"expected   [{rec['kind']}] ({match[1].pattern}) {rec['case']}")
    for rec, _ in unexpected:
        print(f"UNEXPECTED {rec['verdict']} [{rec.get('kind', '')}] {rec['case']}: {rec.get('why', '')}")
    print(f"fuzz_expected: {len(cases)} cases, {len(expected)} expected failures, {len(unexpected)} unexpected")
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
