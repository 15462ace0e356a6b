#!/usr/bin/env python3
"""ci/campaign_report.py — merge the JSON Lines of several `attncheck fuzz`
runs (one object per case, see README "Outputs") into one Markdown accuracy
report: cases per kernel and what they covered (dtype, mask kind, head dim),
the worst ulp / scaled / vs-naive figures per kernel x dtype x output with the
case where each sits, NaN/Inf class counts, and every failure with its minimal
line.  The runs' environment records (GPU, driver, commit) head the report; their
campaign records (seconds, stop reason) sit under each kernel.  Standard library
only (runs on the GPU machine).

usage: campaign_report.py --title TEXT [--machine TEXT] [--command TEXT] OUT.md RUN.jsonl...
"""
import argparse
import collections
import json
import os
import re
import sys

OUTPUTS = ["O", "LSE", "dQ", "dK", "dV", "dSink", "dBias"]  # dSink: the sinks' gradient (README, "Variants")
CLASSES = ["unexpected_nan", "overflow", "lost_special", "wrong_zero", "unwritten"]
DTYPES = ["f32", "f16", "bf16", "e4m3", "e5m2"]  # the report's row order; others follow


def field(case, name):
    m = re.search(r"(?:^| )%s=(\S+)" % re.escape(name), case)
    return m.group(1) if m else None


def mask_kind(case):
    mask = field(case, "mask") or "none"
    return re.sub(r"\(.*", "", mask)


class Worst:
    def __init__(self):
        self.value, self.case = -1.0, ""

    def add(self, value, case):
        if isinstance(value, str):  # non-finite numbers travel as "inf" / "nan"
            value = float(value)
        if value is not None and value == value and value > self.value:
            self.value, self.case = value, case


def load(paths):
    for path in paths:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as e:
                    # a run stopped at a time limit may leave its last line cut
                    print("%s:%d: skipped, not JSON (%s)" % (path, n, e), file=sys.stderr)


def collect(objs):
    per = collections.defaultdict(lambda: {
        "cases": 0, "pass": 0, "fail": 0, "error": 0,
        "dtypes": collections.Counter(), "masks": collections.Counter(), "dims": collections.Counter(),
        "worst": collections.defaultdict(lambda: collections.defaultdict(Worst)),
        "classes": collections.defaultdict(collections.Counter),
        "counts": collections.Counter(), "masked_rows": collections.Counter(), "failures": []})
    runs = []
    for o in objs:
        k, case = o.get("kernel", "?"), o.get("case", "")
        if o.get("type"):  # a run's environment or campaign record, not a case
            runs.append(o)
            continue
        s = per[k]
        s["cases"] += 1
        verdict = o.get("verdict", "error")
        s[verdict if verdict in ("pass", "fail") else "error"] += 1
        dtype = field(case, "dtype")
        s["dtypes"][dtype] += 1
        s["masks"][mask_kind(case)] += 1
        s["dims"][int(field(case, "d") or 0)] += 1
        if verdict != "pass":
            s["failures"].append(o)
        for out, m in (o.get("outputs") or {}).items():
            w = s["worst"][(dtype, out)]
            w["max_ulp"].add(m.get("max_ulp"), case)
            w["max_scaled"].add(m.get("max_scaled"), case)
            w["rmse"].add(m.get("rmse"), case)
            if m.get("has_naive"):
                w["naive_rmse"].add(m.get("naive_rmse"), case)
            if m.get("has_naive"):
                w["vs_naive_max"].add(m.get("vs_naive_max"), case)
                w["vs_naive_mean"].add(m.get("vs_naive_mean"), case)
            s["counts"][(dtype, out)] += 1
            for c in CLASSES:
                s["classes"][(dtype, out)][c] += int(m.get(c, 0) or 0)
            if out == "O":
                s["masked_rows"]["rows"] += int(m.get("masked_rows", 0) or 0)
                s["masked_rows"]["zero"] += int(m.get("masked_rows_zero", 0) or 0)
    return per, runs


def dtype_order(worst):
    seen = {dtype for dtype, _ in worst}
    return [d for d in DTYPES if d in seen] + sorted(d for d in seen if d not in DTYPES and d)


def run_lines(runs):
    envs = [o for o in runs if o.get("type") == "environment"]
    lines = []
    for e in {(o.get("gpu") or "no GPU", o.get("driver") or "-", o.get("cuda") or "-", o.get("commit") or "?"): 0
              for o in envs}:
        lines.append("- GPU %s, driver %s, CUDA %s, attncheck commit %s" % e)
    for o in runs:
        if o.get("type") == "campaign":
            lines.append("- %s: %s cases in %.0f s (%.3g cases/s, %s jobs)%s" % (
                o.get("kernel"), o.get("cases"), o.get("seconds", 0), o.get("cases_per_s", 0), o.get("jobs", 1),
                ", " + o["stopped"] if o.get("stopped") else ""))
    return lines + [""] if lines else []


def fmt(x):
    if x is None or x < 0:
        return "-"
    if x == float("inf"):
        return "inf"
    return "%.3g" % x


def report(collected, title, machine, command):
    per, runs = collected
    lines = ["# %s" % title, ""]
    if machine:
        lines += ["Machine: %s" % machine, ""]
    lines += run_lines(runs)
    if command:
        lines += ["Command:", "", "```", command, "```", ""]
    total = sum(s["cases"] for s in per.values())
    lines += ["%d cases in all.  The vs-naive columns are the largest ratios seen, including" % total,
              "cases where the gate does not apply them (a naive error near zero, or fewer than",
              "1024 elements / 32 rows and keys); the gate's verdicts are in the pass/fail counts.", ""]
    for k in sorted(per):
        s = per[k]
        lines += ["## %s" % k, "",
                  "%d cases: %d passed, %d failed, %d errors." % (s["cases"], s["pass"], s["fail"], s["error"]), "",
                  "Coverage: dtypes %s; masks %s; head dims %s." % (
                      ", ".join("%s %d" % kv for kv in sorted(s["dtypes"].items(), key=str)),
                      ", ".join("%s %d" % kv for kv in sorted(s["masks"].items())),
                      ", ".join("%d:%d" % kv for kv in sorted(s["dims"].items()))), "",
                  "Fully masked query rows seen: %d (O written as exact zeros on %d)." % (
                      s["masked_rows"]["rows"], s["masked_rows"]["zero"]), "",
                  "| dtype | output | cases | max ulp | max scaled | vs-naive max | vs-naive mean | max RMSE (naive) | NaN | overflow | lost special | wrong zero | unwritten |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for dtype in dtype_order(s["worst"]):
            for out in OUTPUTS:
                if (dtype, out) not in s["worst"]:
                    continue
                w, c = s["worst"][(dtype, out)], s["classes"][(dtype, out)]
                lines.append("| %s | %s | %d | %s | %s | %s | %s | %s (%s) | %d | %d | %d | %d | %d |" % (
                    dtype, out, s["counts"][(dtype, out)], fmt(w["max_ulp"].value), fmt(w["max_scaled"].value),
                    fmt(w["vs_naive_max"].value), fmt(w["vs_naive_mean"].value), fmt(w["rmse"].value),
                    fmt(w["naive_rmse"].value),
                    *[c[x] for x in CLASSES]))
        lines += ["", "Where the worst scaled error of each dtype sits:", ""]
        for dtype in dtype_order(s["worst"]):
            best = max(((s["worst"][(dtype, out)]["max_scaled"].value, out, s["worst"][(dtype, out)]["max_scaled"].case)
                        for out in OUTPUTS if (dtype, out) in s["worst"]), default=None)
            if best:
                lines.append("- %s %s %s: `%s`" % (dtype, best[1], fmt(best[0]), best[2]))
        lines += [""]
        if s["failures"]:
            groups = collections.OrderedDict()
            for o in s["failures"]:
                case = o.get("case", "")
                key = (o.get("kind") or "error", field(case, "dtype"), re.sub(r"\(.*", "", field(case, "dist") or ""))
                groups.setdefault(key, []).append(o)
            lines += ["Failures by kind, dtype and input distribution:", "",
                      "| kind | dtype | dist | cases | worst message (first) | a minimal line |", "|---|---|---|---:|---|---|"]
            for (kind, dtype, dist), os_ in sorted(groups.items(), key=lambda kv: -len(kv[1])):
                lines.append("| %s | %s | %s | %d | %s | `%s` |" % (kind, dtype, dist, len(os_),
                             (os_[0].get("why") or "").replace("|", "/"), os_[0].get("minimal") or os_[0].get("case")))
            lines += ["", "The first 50 failures (%d in all):" % len(s["failures"]), ""]
            for o in s["failures"][:50]:
                lines += ["- %s" % (o.get("why") or o.get("kind") or o.get("verdict")),
                          "  - original: `%s`" % o.get("case", ""),
                          "  - minimal: `%s`" % (o.get("minimal") or "(not shrunk)")]
            lines += [""]
        else:
            lines += ["No failures.", ""]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--title", required=True)
    ap.add_argument("--machine", default="")
    ap.add_argument("--command", default="")
    ap.add_argument("out")
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    text = report(collect(load(a.runs)), a.title, a.machine, a.command)
    tmp = a.out + ".tmp"  # written whole, then renamed: never a half-written report
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
