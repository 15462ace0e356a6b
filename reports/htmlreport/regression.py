"""The regression section: this run against a baseline run, case by case.

The same comparison as `attncheck fuzz|run|check --baseline` (harness/verdict/
baseline.c), recomputed from the two JSON Lines files: each case of the kernel
under test is paired with the baseline's record of the same case line (the
first one not paired yet); over the cases that passed in both, per dtype x
output, the ratios new / old of the mean absolute error and of the max scaled
error; a regression when their median exceeds the threshold T with a
one-sided sign test p < alpha (an improvement: below 1/T).  The sign test is
exact (binomial sums in integers); the Wilcoxon signed-rank p-values beside it
come from scipy when it is importable.  Cases that could not be compared are
listed with the reason.  CI checks that these figures equal the harness's.
"""
import math
import os
import statistics
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from .inputs import OUTPUTS, CaseRecord, Inputs

METRICS = ("mean-abs", "max-scaled")
DEFAULT_RATIO, DEFAULT_ALPHA = 1.05, 1e-3


def budget_thresholds(budgets_path: str) -> Tuple[float, float]:
    """regression-ratio and regression-p of budgets.txt (the defaults when absent)."""
    ratio, alpha = DEFAULT_RATIO, DEFAULT_ALPHA
    try:
        with open(budgets_path, encoding="utf-8") as f:
            for line in f:
                tok = line.split("#", 1)[0].split()
                if len(tok) == 2 and tok[0] == "regression-ratio":
                    ratio = float(tok[1])
                elif len(tok) == 2 and tok[0] == "regression-p":
                    alpha = float(tok[1])
    except OSError:
        pass
    return ratio, alpha


def sign_test_p(above: int, below: int) -> float:
    """P(X >= above), X ~ Bin(above + below, 1/2): exact, in integers."""
    n = above + below
    if above <= 0 or n <= 0:
        return 1.0
    return sum(math.comb(n, k) for k in range(above, n + 1)) / 2 ** n


def wilcoxon_p(diffs: List[float], greater: bool) -> Optional[float]:
    """scipy's one-sided signed-rank p (zeros dropped, correction on), or None without scipy."""
    nonzero = [d for d in diffs if d != 0 and not math.isnan(d)]
    if not nonzero:
        return 1.0
    try:
        from scipy import stats
    except ImportError:
        return None
    finite = [max(min(d, 1e300), -1e300) for d in nonzero]     # +-inf (a zero old error): the top ranks
    return float(stats.wilcoxon(finite, alternative="greater" if greater else "less", zero_method="wilcox",
                                correction=True).pvalue)


@dataclass
class Cell:
    dtype: str
    output: str
    metric: str
    ratios: List[float]
    median: float = math.nan
    above: int = 0
    below: int = 0
    better: int = 0
    not_better: int = 0
    p_regression: float = 1.0
    p_improvement: float = 1.0
    wilcoxon_regression: Optional[float] = None
    wilcoxon_improvement: Optional[float] = None
    verdict: str = "same"

    def evaluate(self, ratio: float, alpha: float):
        r = self.ratios
        self.median = statistics.median(r)
        self.above, self.below = sum(x > ratio for x in r), sum(x < ratio for x in r)
        self.better, self.not_better = sum(x < 1 / ratio for x in r), sum(x > 1 / ratio for x in r)
        self.p_regression = sign_test_p(self.above, self.below)
        self.p_improvement = sign_test_p(self.better, self.not_better)
        logs = [math.log(x) if x > 0 else -math.inf for x in r]
        self.wilcoxon_regression = wilcoxon_p([v - math.log(ratio) for v in logs], True)
        self.wilcoxon_improvement = wilcoxon_p([v + math.log(ratio) for v in logs], False)
        if self.median > ratio and self.p_regression < alpha:
            self.verdict = "regression"
        elif self.median < 1 / ratio and self.p_improvement < alpha:
            self.verdict = "improvement"


@dataclass
class Comparison:
    baseline_path: str
    kernel: str
    baseline_kernel: str
    ratio: float
    alpha: float
    new_cases: int = 0
    compared: int = 0
    cells: Dict[Tuple[str, str, str], Cell] = field(default_factory=dict)
    listed: List[Tuple[str, str]] = field(default_factory=list)    # (line, why)

    @property
    def verdict(self) -> str:
        verdicts = {c.verdict for c in self.cells.values()}
        return "regression" if "regression" in verdicts else "improvement" if "improvement" in verdicts else "same"


def _ratio(new: float, old: float) -> float:
    if old == 0:
        return 1.0 if new == 0 else math.inf
    return new / old


def _word(c: CaseRecord) -> str:
    return c.verdict + (" [%s]" % c.kind if c.kind else "")


def _pick_old_kernel(kernel: str, old: List[CaseRecord]) -> Optional[str]:
    names = list(dict.fromkeys(c.kernel for c in old))
    return kernel if kernel in names else names[0] if len(names) == 1 else None


def _add_ratios(cmp: Comparison, new: CaseRecord, old: CaseRecord):
    for output in OUTPUTS:
        m, x = new.outputs.get(output), old.outputs.get(output)
        if m is None or x is None:
            continue
        pairs = [("max-scaled", m.get("max_scaled"), x.get("max_scaled"))]
        if m.get("n_mean") and x.get("n_mean"):
            pairs.insert(0, ("mean-abs", m.get("mean_abs"), x.get("mean_abs")))
        for metric, a, b in pairs:
            if a is None or b is None:
                continue
            key = (new.dtype, output, metric)
            cmp.cells.setdefault(key, Cell(new.dtype, output, metric, [])).ratios.append(_ratio(a, b))


def compare(new: Inputs, old: Inputs, kernel: str, baseline_path: str, ratio: float, alpha: float) -> Comparison:
    """The cases of `kernel` in new against the baseline's (same-named kernel, or its only one)."""
    old_kernel = _pick_old_kernel(kernel, old.cases)
    cmp = Comparison(baseline_path, kernel, old_kernel or "?", ratio, alpha)
    olds: Dict[str, List[CaseRecord]] = {}
    for c in old.cases:
        if c.kernel == old_kernel:
            olds.setdefault(c.line, []).append(c)
    for c in new.cases:
        if c.kernel != kernel:
            continue
        cmp.new_cases += 1
        twins = olds.get(c.line)
        if not twins:
            cmp.listed.append((c.line, "only in this run: not in the baseline"))
            continue
        o = twins.pop(0)
        if c.verdict != "pass" or o.verdict != "pass":
            cmp.listed.append((c.line, "not compared: baseline %s, this run %s" % (_word(o), _word(c))))
            continue
        cmp.compared += 1
        _add_ratios(cmp, c, o)
    for line, rest in olds.items():
        cmp.listed += [(line, "only in the baseline: not run this time")] * len(rest)
    for cell in cmp.cells.values():
        cell.evaluate(ratio, alpha)
    order = {(t, o, m): (i, j, k) for i, t in enumerate(("f32", "f16", "bf16", "e4m3", "e5m2")) for j, o in enumerate(OUTPUTS)
             for k, m in enumerate(METRICS)}
    cmp.cells = dict(sorted(cmp.cells.items(), key=lambda kv: order.get(kv[0], (9, 9, 9))))
    return cmp


def compare_all(new: Inputs, old: Inputs, subjects: List[str], baseline_path: str,
                budgets_path: str) -> List[Comparison]:
    ratio, alpha = budget_thresholds(budgets_path)
    return [compare(new, old, k, baseline_path, ratio, alpha) for k in subjects]


def default_budgets_path() -> str:
    return os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        "budgets.txt")
