#!/usr/bin/env python3
"""ci/slurm/compare_runs.py — check that a sharded campaign (ci/slurm/submit.sh's
RESULTS_DIR) equals the unsharded run of the same campaign:

  * records: the shards' JSON Lines together, and merge's merged.jsonl, hold the
    same case records as the unsharded --json, once each (compared sorted by case
    index when the records carry one, else by their text; the environment and
    campaign records, with their dates and timings, are left out);
  * shard assignment: with a case index in the records, shard I holds exactly the
    cases k with k mod N = I;
  * summary: merge's printed summary (summary.txt) equals the unsharded run's
    from its "KERNEL: N cases, ..." line on, the elapsed time and rate removed;
  * reports: merged.md equals the unsharded --markdown; merged.xml holds the
    unsharded --junit's suites and test cases (their time attributes removed).

--records-only checks the records alone (for runs whose summary and reports are
not compared).  Standard library only.  Exit status 0: equal;
1: a difference (printed); 2: a file missing or unreadable.

usage: compare_runs.py --results DIR --shards N --unsharded PREFIX [--records-only]
  PREFIX.jsonl, PREFIX.txt (stdout), PREFIX.md, PREFIX.xml: the unsharded run's files
"""
import argparse
import difflib
import json
import os
import re
import sys
import xml.etree.ElementTree as ET

INDEX_KEYS = ("index", "case_index")
TIMING = re.compile(r" in [0-9.eE+-]+ s \([0-9.eE+-]+ cases/s\)")
COUNTS_LINE = re.compile(r"^\S+: \d+ cases, ")


def read_records(path):
    """The case records of a JSON Lines file: the {"type": ...} ones (the
    environment record first, the campaign record last) hold dates, hosts and
    timings, which differ between runs by design."""
    with open(path, encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    return [r for r in records if "type" not in r]


def case_index(record):
    for key in INDEX_KEYS:
        if isinstance(record.get(key), int):
            return record[key]
    return None


def sort_key(record):
    k = case_index(record)
    return (0, k, "") if k is not None else (1, 0, json.dumps(record, sort_keys=True))


def canonical(records):
    return [json.dumps(r, sort_keys=True) for r in sorted(records, key=sort_key)]


def differing_field(a, b, path=""):
    """The first key path where two decoded records differ, with both values."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return differing_field(a.get(key), b.get(key), path + "." + key)
    return "%s: sharded %s, unsharded %s" % (path or "record", json.dumps(a)[:200], json.dumps(b)[:200])


def first_difference(name, got, want):
    if len(got) != len(want):
        print("%s: %d records, the unsharded run has %d" % (name, len(got), len(want)))
    for i, (a, b) in enumerate(zip(got, want)):
        if a != b:
            ra, rb = json.loads(a), json.loads(b)
            print("%s: sorted record %d (case '%s') differs at %s"
                  % (name, i, rb.get("case", "?"), differing_field(ra, rb)))
            return


def check_records(results, shards, unsharded):
    want = canonical(read_records(unsharded))
    by_shard = {}
    for i in range(shards):
        by_shard[i] = read_records(os.path.join(results, "shard-%d.jsonl" % i))
    union = [r for i in range(shards) for r in by_shard[i]]
    ok = True
    got = canonical(union)
    if got != want:
        first_difference("shards", got, want)
        ok = False
    merged = os.path.join(results, "merged.jsonl")
    if canonical(read_records(merged)) != want:
        first_difference("merged.jsonl", canonical(read_records(merged)), want)
        ok = False
    indexed = all(case_index(r) is not None for r in union)
    for i in range(shards):
        wrong = [case_index(r) for r in by_shard[i] if indexed and case_index(r) % shards != i]
        if wrong:
            print("shard %d holds cases %s, not of its residue mod %d" % (i, wrong[:5], shards))
            ok = False
    sizes = ", ".join(str(len(by_shard[i])) for i in range(shards))
    print("records: %d unsharded; shards %s; %s" % (len(want), sizes,
          "sorted by case index" if indexed else "no case index in the records: compared sorted by text"))
    return ok


def summary_block(path):
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if COUNTS_LINE.match(line)), None)
    if start is None:
        return None
    return [TIMING.sub("", line).rstrip() for line in lines[start:] if line.strip()]


def check_summary(results, unsharded):
    want = summary_block(unsharded + ".txt")
    got = summary_block(os.path.join(results, "summary.txt"))
    if want is None or got is None:
        print("summary: no 'KERNEL: N cases, ...' line in %s" % ("the unsharded output" if want is None else "summary.txt"))
        return False
    if got != want:
        print("summary differs (- unsharded, + merged):")
        sys.stdout.writelines(line + "\n" for line in difflib.unified_diff(want, got, lineterm="", n=1))
        return False
    print("summary: %d lines equal (%s)" % (len(got), got[0]))
    return True


def junit_cases(path):
    suites = []
    for suite in ET.parse(path).getroot().iter("testsuite"):
        attrs = {k: v for k, v in suite.attrib.items() if k != "time"}
        cases = []
        for case in suite.iter("testcase"):
            body = [(child.tag, child.get("message"), child.get("type")) for child in case]
            cases.append((case.get("classname"), case.get("name"), repr(body)))
        suites.append((json.dumps(attrs, sort_keys=True), sorted(cases)))
    return sorted(suites)


def check_reports(results, unsharded):
    ok = True
    with open(unsharded + ".md", encoding="utf-8") as f:
        want_md = f.read()
    with open(os.path.join(results, "merged.md"), encoding="utf-8") as f:
        got_md = f.read()
    if got_md != want_md:
        print("merged.md differs from the unsharded --markdown (- unsharded, + merged):")
        diff = difflib.unified_diff(want_md.splitlines(), got_md.splitlines(), lineterm="", n=1)
        sys.stdout.writelines(line + "\n" for line in diff)
        ok = False
    if junit_cases(os.path.join(results, "merged.xml")) != junit_cases(unsharded + ".xml"):
        print("merged.xml: its suites or test cases differ from the unsharded --junit's")
        ok = False
    if ok:
        print("reports: merged.md equal, merged.xml the same suites and test cases")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", required=True)
    ap.add_argument("--shards", type=int, required=True)
    ap.add_argument("--unsharded", required=True, help="prefix of the unsharded run's files")
    ap.add_argument("--records-only", action="store_true")
    args = ap.parse_args()
    try:
        ok = check_records(args.results, args.shards, args.unsharded + ".jsonl")
        if not args.records_only:
            ok = check_summary(args.results, args.unsharded) and ok
            ok = check_reports(args.results, args.unsharded) and ok
    except (OSError, ValueError, ET.ParseError) as e:
        print("compare_runs: %s" % e)
        return 2
    print("sharded run %s the unsharded run" % ("EQUALS" if ok else "DIFFERS FROM"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
