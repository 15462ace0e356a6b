"""What the report shows, computed from the inputs, with no HTML or plotting.

Kernels whose name contains "mutant" carry planted bugs (`attncheck prove`,
harness/prove.c): their failures are the point, so they are judged by the
detection-power table, and the charts show the kernels under test (every
kernel when the inputs hold mutants only)."""
import collections
import json
import math
import re
import statistics
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from .inputs import (LSE_UNIT_ROUNDOFF, OUTPUTS, UNIT_ROUNDOFF, CaseRecord, Inputs)

DTYPE_ORDER = ("f32", "f16", "bf16", "e4m3", "e5m2")


def is_mutant(kernel: str) -> bool:
    return "mutant" in kernel          # the rule prove's find_mutants uses


def mutant_base(kernel: str) -> str:
    """cpu-flash-mutant-no-rescale-o -> cpu-flash."""
    return kernel.split("-mutant", 1)[0]


def _ordered(keys, order) -> list:
    known = [k for k in order if k in keys]
    return known + sorted(k for k in keys if k not in order)


# ---- per-case figures ------------------------------------------------------------

def unit_roundoff(dtype: str, output: str) -> Optional[float]:
    return LSE_UNIT_ROUNDOFF if output in ("LSE", "dSink") else UNIT_ROUNDOFF.get(dtype)


def mean_scaled(dtype: str, output: str, m: dict, naive: bool = False) -> Optional[float]:
    """mean|y - x| / (u * mean E) over the n_mean elements of a case: the mean
    error in the units of the scaled error (a ratio of means, since the record
    carries the two means).  With naive=True the naive computation's, measured
    against the same E.  None where it cannot be formed."""
    u = unit_roundoff(dtype, output)
    e_mean = m.get("mean_escale", 0.0)
    key = "naive_mean_abs" if naive else "mean_abs"
    if u is None or not m.get("n_mean") or not e_mean > 0 or key not in m:
        return None
    if naive and not m.get("has_naive"):
        return None
    return m[key] / (u * e_mean)


def naive_max_scaled(m: dict) -> Optional[float]:
    """The naive computation's max scaled error: not in the records yet (the
    harness would add outputs.X.naive_max_scaled); charted when present."""
    return m.get("naive_max_scaled") if m.get("has_naive") else None


@dataclass
class Sample:
    """One case's figures for one output."""
    case: CaseRecord
    max_scaled: float
    mean_scaled: Optional[float]
    naive_mean_scaled: Optional[float]
    naive_max_scaled: Optional[float]
    vs_naive_max: Optional[float]
    vs_naive_mean: Optional[float]
    metrics: dict


def measured_dtype(case: CaseRecord, output: str) -> str:
    """The dtype an output is measured in: dBias is stored like its bias, f32
    when the case line's bias says :f32 (README, "Variants")."""
    if output == "dBias" and re.search(r" bias=\S*:f32", " " + case.line):
        return "f32"
    return case.dtype


def sample(case: CaseRecord, output: str, m: dict) -> Sample:
    has_naive = m.get("has_naive", False)
    dtype = measured_dtype(case, output)
    return Sample(case, m.get("max_scaled", math.nan), mean_scaled(dtype, output, m),
                  mean_scaled(dtype, output, m, naive=True), naive_max_scaled(m),
                  m.get("vs_naive_max") if has_naive else None, m.get("vs_naive_mean") if has_naive else None, m)


# ---- aggregates ------------------------------------------------------------------

@dataclass
class KernelSummary:
    name: str
    counts: Dict[str, int] = field(default_factory=lambda: collections.Counter())
    dtypes: Dict[str, int] = field(default_factory=lambda: collections.Counter())

    @property
    def cases(self) -> int:
        return sum(self.counts.values())

    @property
    def mutant(self) -> bool:
        return is_mutant(self.name)


@dataclass
class GroupSummary:
    """One kernel x dtype x output over the cases where the output was compared."""
    kernel: str
    dtype: str
    output: str
    samples: List[Sample]

    def finite(self, attr: str) -> List[float]:
        return [v for v in (getattr(s, attr) for s in self.samples) if v is not None and math.isfinite(v)]

    def worst(self, attr: str) -> Tuple[Optional[float], Optional[Sample]]:
        """The largest value (inf and nan outrank any number) and its case."""
        best, at = None, None
        for s in self.samples:
            v = getattr(s, attr)
            if v is None:
                continue
            rank = math.inf if math.isnan(v) else v
            if best is None or rank > (math.inf if math.isnan(best) else best):
                best, at = v, s
        return best, at

    def median(self, attr: str) -> Optional[float]:
        values = self.finite(attr)
        return statistics.median(values) if values else None

    def special_total(self, name: str) -> Tuple[int, int]:
        """(elements, cases) of a special-value class or masked-row count."""
        per_case = [int(s.metrics.get(name, 0)) for s in self.samples]
        return sum(per_case), sum(1 for v in per_case if v)


@dataclass
class DetectionRow:
    mutant: str
    base: str
    path: str                           # the input file: each file is its own campaign
    cases_run: int
    first_catch: Optional[int]          # 1-based index of its first failing case
    caught_case: Optional[CaseRecord]


@dataclass
class Model:
    inputs: Inputs
    kernels: Dict[str, KernelSummary]
    subjects: List[str]                 # the kernels charted and judged by the verdict
    groups: Dict[Tuple[str, str, str], GroupSummary]
    detection: List[DetectionRow]

    @property
    def cases(self) -> List[CaseRecord]:
        return self.inputs.cases

    def groups_of(self, kernel: str, dtype: Optional[str] = None) -> List[GroupSummary]:
        return [g for (k, t, _), g in self.groups.items() if k == kernel and (dtype is None or t == dtype)]

    def dtypes_of(self, kernel: str) -> List[str]:
        return _ordered({t for (k, t, _) in self.groups if k == kernel}, DTYPE_ORDER)

    def failures(self, verdict: str = "fail") -> List[CaseRecord]:
        """Failures of the kernels under test first, then the mutants'."""
        rows = [c for c in self.cases if c.verdict == verdict]
        return sorted(rows, key=lambda c: c.kernel not in self.subjects)

    def certification(self) -> Tuple[int, int]:
        """(cases with rows certified against MPFR, cases where rows were checked)."""
        checked = [c for c in self.cases if c.rows_checked > 0 and c.verdict != "skipped"]
        return sum(1 for c in checked if c.certified), len(checked)

    def uncertified(self) -> List[CaseRecord]:
        return [c for c in self.cases if c.rows_checked > 0 and c.certified is False]

    def subject_counts(self) -> Dict[str, int]:
        total = collections.Counter()
        for name in self.subjects:
            total.update(self.kernels[name].counts)
        return total

    def verdict(self) -> str:
        """"none" without case records; "fail" when a kernel under test failed or errored, a mutant went
        uncaught or a mutant's base is not clean; "warn" when cases were not
        certified; "pass" otherwise."""
        if not self.cases:
            return "none"
        counts = self.subject_counts()
        bad_proof = any(r.first_catch is None for r in self.detection) or \
            any(self.base_clean(r.base) is False for r in self.detection)
        if counts["fail"] or counts["error"] or bad_proof:
            return "fail"
        return "warn" if self.uncertified() else "pass"

    def base_clean(self, base: str) -> Optional[bool]:
        """None when the base kernel's cases are not in the inputs."""
        k = self.kernels.get(base)
        if k is None or not k.cases:
            return None
        return not (k.counts["fail"] or k.counts["error"])


def _detection(cases: List[CaseRecord]) -> List[DetectionRow]:
    """One row per mutant and input file: the cases to the first catch count
    within one campaign, not across files that ran the mutant again."""
    rows: Dict[Tuple[str, str], DetectionRow] = {}
    for c in cases:
        if not is_mutant(c.kernel):
            continue
        path = c.source.rsplit(":", 1)[0]
        r = rows.setdefault((c.kernel, path), DetectionRow(c.kernel, mutant_base(c.kernel), path, 0, None, None))
        r.cases_run += 1
        if c.verdict == "fail" and r.first_catch is None:
            r.first_catch, r.caught_case = r.cases_run, c
    return list(rows.values())


def build(inputs: Inputs) -> Model:
    kernels: Dict[str, KernelSummary] = {}
    groups: Dict[Tuple[str, str, str], GroupSummary] = {}
    for c in inputs.cases:
        k = kernels.setdefault(c.kernel, KernelSummary(c.kernel))
        k.counts[c.verdict] += 1
        k.dtypes[c.dtype] += 1
        if c.verdict == "skipped":
            continue
        for output, m in c.outputs.items():
            key = (c.kernel, c.dtype, output)
            groups.setdefault(key, GroupSummary(*key, samples=[])).samples.append(sample(c, output, m))
    subjects = [n for n in kernels if not is_mutant(n)] or list(kernels)
    order = {n: i for i, n in enumerate(kernels)}
    dtype_rank = {t: i for i, t in enumerate(DTYPE_ORDER)}
    out_rank = {o: i for i, o in enumerate(OUTPUTS)}
    ordered = sorted(groups, key=lambda g: (order[g[0]], dtype_rank.get(g[1], 9), g[1],
                                            out_rank.get(g[2], 9), g[2]))
    return Model(inputs, kernels, subjects, {g: groups[g] for g in ordered}, _detection(inputs.cases))


# ---- error against the problem's shape ----------------------------------------------

def pow2_bin(x: int) -> int:
    """The power of two at or below x: lengths and head dims binned by octave."""
    return 1 << (max(int(x), 1).bit_length() - 1)


SHAPE_AXES = {   # axis: (axis label, short name, the bin of a Shape)
    "seqlen": ("sequence length max(Nq, Nk), binned by octave", "sequence length", lambda s: pow2_bin(s.seqlen)),
    "head_dim": ("head dim d, binned by octave", "head dim", lambda s: pow2_bin(s.d)),
    "mask": ("mask kind", "mask kind", lambda s: s.mask_kind),
}
MASK_ORDER = ("none", "causal-tl", "causal-br", "window-tl", "window-br", "dense")


@dataclass
class ShapePoint:
    key: object                     # the bin (int) or the mask kind
    cases: int
    max_of_max_scaled: float        # the worst case's max scaled error in the bin
    mean_of_mean_scaled: Optional[float]   # the average over the bin's cases of their mean scaled error


def shape_series(group: GroupSummary, axis: str) -> List[ShapePoint]:
    """The group's cases binned along one shape axis (SHAPE_AXES)."""
    key_of = SHAPE_AXES[axis][2]
    bins: Dict[object, List[Sample]] = collections.defaultdict(list)
    for s in group.samples:
        if s.case.shape is not None and math.isfinite(s.max_scaled):
            bins[key_of(s.case.shape)].append(s)
    keys = _ordered(set(bins), MASK_ORDER) if axis == "mask" else sorted(bins)
    points = []
    for key in keys:
        means = [s.mean_scaled for s in bins[key] if s.mean_scaled is not None and math.isfinite(s.mean_scaled)]
        points.append(ShapePoint(key, len(bins[key]), max(s.max_scaled for s in bins[key]),
                                 statistics.fmean(means) if means else None))
    return points


# ---- the environment -----------------------------------------------------------------

# The fields an {"type": "environment", ...} record is expected to carry, in the
# order shown; aliases read the same field.  Anything else it carries is shown
# after these under its own key.
ENV_FIELDS = (
    ("gpu", "GPU", ()), ("driver", "Driver", ()), ("cuda", "CUDA", ("cuda_version",)),
    ("commit", "Commit", ()), ("version", "attncheck version", ()),
    ("command", "Command", ()), ("budgets_version", "Budgets version", ()),
    ("seed", "Seeds", ("seeds",)), ("reference", "Reference tier", ()),
    ("cert_rows", "Certified rows per case", ()), ("host", "Host", ()), ("torch", "PyTorch", ()),
)
NOT_RECORDED = "not recorded"


@dataclass
class EnvRow:
    key: str
    label: str
    values: List[Tuple[str, str]]       # (value, where it came from); empty: not recorded


def _add_value(row: EnvRow, value, source: str):
    text = value if isinstance(value, str) else json_text(value)
    for i, (v, sources) in enumerate(row.values):
        if v == text:
            row.values[i] = (v, sources + ", " + source)
            return
    row.values.append((text, source))


def json_text(value) -> str:
    return json.dumps(value, sort_keys=True)


def environment(model: Model) -> List[EnvRow]:
    rows = {key: EnvRow(key, label, []) for key, label, _ in ENV_FIELDS}
    alias = {a: key for key, _, aliases in ENV_FIELDS for a in aliases}
    extra: Dict[str, EnvRow] = {}
    for rec in model.inputs.environments:
        for key, value in rec.fields.items():
            key = alias.get(key, key)
            row = rows.get(key) or extra.setdefault(key, EnvRow(key, key, []))
            _add_value(row, value, rec.source)
    for b in model.inputs.benches:
        _add_value(rows["gpu"], b.device, b.source + " (bench header)")
    for t in model.inputs.torch_runs:
        _add_value(rows["gpu"], t.device, t.source + " (torch header)")
        _add_value(rows["torch"], t.torch_version, t.source)
    certified, checked = model.certification()
    cert = EnvRow("certification", "Certification rate", [])
    if checked:
        cert.values.append(("%d of %d cases (%.1f%%) with every sampled row certified against MPFR"
                            % (certified, checked, 100.0 * certified / checked), "the case records"))
    out = list(rows.values())
    out.insert([r.key for r in out].index("cert_rows") + 1, cert)
    return out + list(extra.values())
