"""Release history: one set of JSON Lines per release, DIR/VERSION.jsonl or
DIR/VERSION/*.jsonl, read with the report's own reader.

Per release and kernel x dtype x output: the cases, the mean over the cases of
their mean scaled error, the worst max scaled error, and the speed in cases/s
from the {"type": "campaign"} records (seconds, cases_per_s, cases) when the
release has them (older releases do not: shown as "-").  A change between two
releases is also measured on the case lines both ran (same seeds give the same
lines): the median of the paired ratios of mean absolute error, which is what
a release note can quote ("bf16 dQ mean error down 12% since 0.3").
"""
import glob
import math
import os
import re
import statistics
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from . import inputs
from .model import DTYPE_ORDER, is_mutant, mean_scaled


class HistoryError(Exception):
    pass


def version_key(version: str):
    """0.10 after 0.9; numbers as numbers, the rest as text."""
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"[.\-_]", version)]


def release_files(folder: str) -> List[Tuple[str, List[str]]]:
    """[(version, [files])] in version order; HistoryError when there is none."""
    if not os.path.isdir(folder):
        raise HistoryError("%s: not a directory" % folder)
    releases: Dict[str, List[str]] = {}
    for entry in sorted(os.listdir(folder)):
        path = os.path.join(folder, entry)
        if os.path.isfile(path) and entry.endswith(".jsonl"):
            releases.setdefault(entry[:-len(".jsonl")], []).append(path)
        elif os.path.isdir(path):
            files = sorted(glob.glob(os.path.join(path, "*.jsonl")))
            if files:
                releases.setdefault(entry, []).extend(files)
    if not releases:
        raise HistoryError("%s: no release (VERSION.jsonl or VERSION/*.jsonl)" % folder)
    return [(v, releases[v]) for v in sorted(releases, key=version_key)]


@dataclass
class Point:
    """One release of one kernel x dtype x output."""
    cases: int
    mean_scaled: Optional[float]        # mean over the cases of each case's mean scaled error
    max_scaled: Optional[float]         # the worst case's
    mean_abs: Dict[str, float]          # case line -> mean absolute error (for the paired change)


@dataclass
class Release:
    version: str
    files: List[str]
    kernels: List[str]
    points: Dict[Tuple[str, str, str], Point] = field(default_factory=dict)
    cases_per_s: Dict[str, float] = field(default_factory=dict)     # kernel -> cases/s (campaign records)


def _speed(data: inputs.Inputs) -> Dict[str, float]:
    """cases/s per kernel from the campaign records: total cases over total seconds."""
    cases: Dict[str, float] = {}
    seconds: Dict[str, float] = {}
    for r in data.typed:
        if r.type != "campaign":
            continue
        f = r.fields
        kernel = f.get("kernel", "")
        n, s = f.get("cases"), f.get("seconds")
        if isinstance(n, (int, float)) and isinstance(s, (int, float)) and s > 0:
            cases[kernel] = cases.get(kernel, 0) + n
            seconds[kernel] = seconds.get(kernel, 0) + s
        elif isinstance(f.get("cases_per_s"), (int, float)):
            cases[kernel], seconds[kernel] = float(f["cases_per_s"]), 1.0
    return {k: cases[k] / seconds[k] for k in cases}


def read_release(version: str, files: List[str]) -> Release:
    data = inputs.read_inputs(files)
    kernels = list(dict.fromkeys(c.kernel for c in data.cases if not is_mutant(c.kernel)))
    rel = Release(version, files, kernels, cases_per_s=_speed(data))
    groups: Dict[Tuple[str, str, str], List[Tuple[inputs.CaseRecord, dict]]] = {}
    for c in data.cases:
        if c.kernel in kernels and c.verdict == "pass":
            for output, m in c.outputs.items():
                groups.setdefault((c.kernel, c.dtype, output), []).append((c, m))
    for key, rows in groups.items():
        means = [v for v in (mean_scaled(key[1], key[2], m) for _, m in rows) if v is not None and math.isfinite(v)]
        maxes = [m["max_scaled"] for _, m in rows if math.isfinite(m.get("max_scaled", math.nan))]
        abs_by_line = {c.line: m["mean_abs"] for c, m in rows if m.get("n_mean") and "mean_abs" in m}
        rel.points[key] = Point(len(rows), statistics.fmean(means) if means else None,
                                max(maxes) if maxes else None, abs_by_line)
    return rel


def read_history(folder: str) -> List[Release]:
    return [read_release(v, files) for v, files in release_files(folder)]


def keys(releases: List[Release]) -> List[Tuple[str, str, str]]:
    seen = list(dict.fromkeys(k for r in releases for k in r.points))
    rank = {t: i for i, t in enumerate(DTYPE_ORDER)}
    outs = {o: i for i, o in enumerate(inputs.OUTPUTS)}
    return sorted(seen, key=lambda k: (k[0], rank.get(k[1], 9), outs.get(k[2], 9)))


@dataclass
class Change:
    key: Tuple[str, str, str]
    since: str
    to: str
    ratio_of_means: Optional[float]     # latest mean / earlier mean (all cases)
    paired_cases: int
    paired_median: Optional[float]      # median ratio over the case lines both ran


def change(old: Release, new: Release, key) -> Optional[Change]:
    a, b = old.points.get(key), new.points.get(key)
    if a is None or b is None:
        return None
    ratio = b.mean_scaled / a.mean_scaled if a.mean_scaled and b.mean_scaled is not None else None
    common = [line for line in b.mean_abs if line in a.mean_abs and a.mean_abs[line] > 0]
    paired = statistics.median(b.mean_abs[line] / a.mean_abs[line] for line in common) if common else None
    return Change(key, old.version, new.version, ratio, len(common), paired)


def describe(c: Change) -> str:
    """'cpu-flash bf16 dQ mean error down 12% since 0.3 (...)'."""
    r = c.paired_median if c.paired_median is not None else c.ratio_of_means
    kernel, dtype, output = c.key
    if r is None:
        return "%s %s %s: no mean error to compare with %s" % (kernel, dtype, output, c.since)
    pct = abs(r - 1) * 100
    word = "unchanged" if pct < 0.5 else "down" if r < 1 else "up"
    how = ("median of %d paired cases" % c.paired_cases if c.paired_median is not None
           else "ratio of means, no case in common")
    amount = "" if word == "unchanged" else " %.0f%%" % pct
    return "%s %s %s mean error %s%s since %s (%s)" % (kernel, dtype, output, word, amount, c.since, how)


def text_table(releases: List[Release]) -> str:
    """What `attncheck report --history DIR` prints: per release the mean and
    worst scaled error and cases/s, then the change of the latest release
    since each earlier one."""
    versions = [r.version for r in releases]
    lines = ["%-14s %-5s %-4s %s" % ("kernel", "dtype", "out", " ".join("%18s" % v for v in versions)),
             "%-25s %s" % ("", " ".join("%18s" % "mean / max scaled" for _ in versions))]
    for key in keys(releases):
        cells = []
        for r in releases:
            p = r.points.get(key)
            cells.append("%18s" % ("-" if p is None else "%s / %s" % (_g(p.mean_scaled), _g(p.max_scaled))))
        lines.append("%-14s %-5s %-4s %s" % (key[0], key[1], key[2], " ".join(cells)))
    kernels = list(dict.fromkeys(k[0] for k in keys(releases)))
    for kernel in kernels:
        speeds = ["%18s" % (_g(r.cases_per_s[kernel]) if kernel in r.cases_per_s else "-") for r in releases]
        lines.append("%-25s %s" % ("%s cases/s" % kernel, " ".join(speeds)))
    if len(releases) > 1:
        latest = releases[-1]
        lines.append("")
        lines.append("changes in %s:" % latest.version)
        for old in releases[:-1]:
            for key in keys(releases):
                c = change(old, latest, key)
                if c is not None:
                    lines.append("  " + describe(c))
    return "\n".join(lines) + "\n"


def _g(x: Optional[float]) -> str:
    return "-" if x is None else "%.3g" % x
