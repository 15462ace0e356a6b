"""Reading the report's inputs.

Three kinds of file, told apart by their first non-blank line:
  - JSON Lines from `attncheck fuzz|run|check|prove --json` (merged shards are
    the same records concatenated).  A record without "type" is a case record
    (harness/report.c, write_json); {"type": "environment", ...} describes the
    run and {"type": "campaign", ...} closes it (its timing); the baseline
    comparison's records (TYPED_RECORDS) are kept too; any other "type" is
    skipped with a note.
  - `attncheck bench` output (kernels/cuda/bench.cu): "# attncheck bench v1 on
    GPU", then "## " sections of whitespace-separated columns.
  - `ci/torch_sdpa_bench.py` output: "# torch VERSION on GPU: ...", a header
    naming the backends, one row per shape.
Anything malformed raises InputError naming the file and line: the caller
prints it and exits 2.
"""
import json
import math
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

OUTPUTS = ("O", "LSE", "dQ", "dK", "dV", "dSink", "dBias")  # dSink: the sinks' gradient (README, "Variants")
VERDICTS = ("pass", "fail", "error", "skipped")
SPECIAL_CLASSES = ("unexpected_nan", "overflow", "lost_special", "wrong_zero", "unwritten")
MASKED_ROW_COUNTS = ("masked_rows", "masked_rows_zero", "masked_rows_nan", "masked_rows_lse_posinf")
# The unit roundoff u of each output dtype; LSE (and dSink) is stored and measured in f32
# whatever the inputs' dtype (README, "Metrics", "Variants").
# The unit roundoff the metrics are in, by the case's (input) dtype.  fp8 inputs (e4m3, e5m2)
# write O in bf16 or f16 (the line's out=): their charts take bf16's, so an out=f16 case's
# mean scaled error reads 8x small there (the records' own max_scaled are exact).
UNIT_ROUNDOFF = {"f32": 2.0 ** -24, "f16": 2.0 ** -11, "bf16": 2.0 ** -8, "e4m3": 2.0 ** -8, "e5m2": 2.0 ** -8}
LSE_UNIT_ROUNDOFF = 2.0 ** -24
NONFINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}
# Typed records kept for the sections that use them (the rest are noted and skipped).
TYPED_RECORDS = ("campaign", "baseline", "baseline-case", "baseline-summary")


class InputError(Exception):
    """Bad input: the message names the file and, where there is one, the line."""

    def __init__(self, path: str, line_no: Optional[int], message: str):
        super().__init__(message)
        self.path, self.line_no, self.message = path, line_no, message

    def __str__(self):
        where = self.path if self.line_no is None else "%s:%d" % (self.path, self.line_no)
        return "%s: %s" % (where, self.message)


@dataclass(frozen=True)
class Shape:
    """What a v1 case line says about the problem (harness/case.c)."""
    dtype: str
    b: int
    hq: int
    hkv: int
    nq: int
    nk: int
    d: int
    mask_kind: str          # "none", "causal-tl", "window-br", "dense", ...

    @property
    def seqlen(self) -> int:
        return max(self.nq, self.nk)


@dataclass
class CaseRecord:
    source: str             # "file:line", for messages
    kernel: str
    line: str               # the case line ("check PATH" for `attncheck check`)
    verdict: str
    kind: str
    why: str
    minimal: Optional[str]
    rows_checked: int
    certified: Optional[bool]
    dtype: str              # from the line or a "dtype" field; "unknown" when neither
    shape: Optional[Shape]
    outputs: Dict[str, dict]


@dataclass
class EnvironmentRecord:
    source: str
    fields: Dict[str, object]


@dataclass
class TypedRecord:
    """A {"type": "campaign" | "baseline" | "baseline-case" | "baseline-summary"}
    record: the campaign's timing (harness/campaign), or the harness's own
    baseline comparison (harness/report/report_baseline.c), kept as is."""
    source: str
    type: str
    fields: Dict[str, object]


@dataclass
class SpeedRow:
    direction: str          # "fwd" | "bwd"
    dtype: str
    d: int
    causal: int
    n: int
    batch: int
    heads: int
    ms: float
    tflops: float


@dataclass
class MemoryRow:
    n: int
    fused_ms: float
    naive_ms: Optional[float]     # None: the naive kernel ran out of memory
    speedup: Optional[float]
    fused_mib: Optional[float]
    naive_mib: Optional[float]
    mib_ratio: Optional[float]
    note: str = ""


@dataclass
class BenchRun:
    source: str
    device: str
    speed: List[SpeedRow] = field(default_factory=list)
    memory: List[MemoryRow] = field(default_factory=list)


@dataclass
class TorchRow:
    direction: str
    dtype: str
    d: int
    causal: int
    n: int
    ours_tflops: Optional[float]
    backends: Dict[str, Optional[Tuple[float, float]]]   # name -> (TFLOP/s, ours / theirs)


@dataclass
class TorchRun:
    source: str
    torch_version: str
    device: str
    backend_names: List[str]
    rows: List[TorchRow] = field(default_factory=list)


@dataclass
class InputFile:
    path: str
    kind: str               # "jsonl" | "bench" | "torch"
    records: int


@dataclass
class Inputs:
    files: List[InputFile] = field(default_factory=list)
    cases: List[CaseRecord] = field(default_factory=list)
    environments: List[EnvironmentRecord] = field(default_factory=list)
    typed: List[TypedRecord] = field(default_factory=list)
    campaigns: List[dict] = field(default_factory=list)
    benches: List[BenchRun] = field(default_factory=list)
    torch_runs: List[TorchRun] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)


# ---- case lines -------------------------------------------------------------

CASE_INT_FIELDS = ("b", "hq", "hkv", "nq", "nk", "d")


def parse_case_line(line: str) -> Optional[Shape]:
    """The shape of a v1 case line; None for other lines ("check PATH").
    Raises ValueError naming the field when a v1 line lacks one."""
    tokens = line.split()
    if not tokens or tokens[0] != "v1":
        return None
    fields = dict(t.split("=", 1) for t in tokens[1:] if "=" in t)
    ints = {}
    for name in CASE_INT_FIELDS:
        if name not in fields:
            raise ValueError("case line has no %s=: %r" % (name, line))
        try:
            ints[name] = int(fields[name])
        except ValueError:
            raise ValueError("case line field %s=%s is not an integer" % (name, fields[name])) from None
    dtype = fields.get("dtype")
    if dtype not in UNIT_ROUNDOFF:
        raise ValueError("case line has dtype=%s, expected f32, f16, bf16, e4m3 or e5m2" % dtype)
    mask_kind = re.sub(r"\(.*", "", fields.get("mask", "none"))
    return Shape(dtype=dtype, mask_kind=mask_kind, **ints)


# ---- JSON Lines ------------------------------------------------------------------

def _number(value, what: str) -> float:
    """A metric: a JSON number, or "inf"/"-inf"/"nan" (cJSON cannot print non-finite numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError("%s is %r, not a number" % (what, value))
    if isinstance(value, str):
        if value not in NONFINITE:
            raise ValueError("%s is %r, not a number" % (what, value))
        return NONFINITE[value]
    return float(value)


def _metrics(name: str, raw) -> dict:
    if not isinstance(raw, dict):
        raise ValueError("outputs.%s is not an object" % name)
    out = {}
    for key, value in raw.items():
        if key == "has_naive":
            out[key] = bool(value)
        elif key.startswith("at_") or key == "first_special":
            out[key] = value            # [b, h, row, col]: shown, never computed with
        else:
            out[key] = _number(value, "outputs.%s.%s" % (name, key))
    return out


def _string(obj: dict, key: str, required: bool = True) -> Optional[str]:
    value = obj.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise ValueError("field %r is %s, expected a string" % (key, "missing" if value is None else repr(value)))
    return value


def _case_record(obj: dict, source: str) -> CaseRecord:
    kernel, line = _string(obj, "kernel"), _string(obj, "case")
    verdict = _string(obj, "verdict")
    if verdict not in VERDICTS:
        raise ValueError("verdict %r is not one of %s" % (verdict, ", ".join(VERDICTS)))
    outputs_raw = obj.get("outputs", {})
    if not isinstance(outputs_raw, dict):
        raise ValueError("field 'outputs' is not an object")
    cert = obj.get("certification") or {}
    if not isinstance(cert, dict):
        raise ValueError("field 'certification' is not an object")
    shape = parse_case_line(line)
    dtype = _string(obj, "dtype", required=False) or (shape.dtype if shape else "unknown")
    return CaseRecord(
        source=source, kernel=kernel, line=line, verdict=verdict,
        kind=_string(obj, "kind", required=False) or "", why=_string(obj, "why", required=False) or "",
        minimal=_string(obj, "minimal", required=False),
        rows_checked=int(_number(cert.get("rows_checked", 0), "certification.rows_checked")),
        certified=cert.get("certified") if isinstance(cert.get("certified"), bool) else None,
        dtype=dtype, shape=shape,
        outputs={name: _metrics(name, raw) for name, raw in outputs_raw.items()})


def _json_record(obj, source: str, into: Inputs) -> bool:
    """Files one decoded line; False when it was skipped."""
    if not isinstance(obj, dict):
        raise ValueError("a record must be a JSON object, this is %s" % type(obj).__name__)
    rtype = obj.get("type")
    if rtype is None:
        into.cases.append(_case_record(obj, source))
    elif rtype == "environment":
        into.environments.append(EnvironmentRecord(source, {k: v for k, v in obj.items() if k != "type"}))
    elif rtype in TYPED_RECORDS:
        fields = {k: v for k, v in obj.items() if k != "type"}
        into.typed.append(TypedRecord(source, rtype, fields))
        if rtype == "campaign":  # the JSON Lines' last record: counts and timings the cases give anyway
            into.campaigns.append(fields)
    else:
        into.notes.append("%s: skipped a record of unknown type %r" % (source, rtype))
        return False
    return True


def read_jsonl(path: str, text: str, into: Inputs) -> int:
    count = 0
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(path, line_no, "not valid JSON (%s)" % e) from None
        try:
            count += _json_record(obj, "%s:%d" % (path, line_no), into)
        except ValueError as e:
            raise InputError(path, line_no, str(e)) from None
    return count


# ---- bench and torch text ---------------------------------------------------------

SPEED_COLUMNS = ["dir", "dtype", "d", "causal", "N", "B", "H", "ms", "TFLOP/s"]


def _speed_row(cols: List[str]) -> SpeedRow:
    if len(cols) != len(SPEED_COLUMNS):
        raise ValueError("expected %d columns (%s), got %d" % (len(SPEED_COLUMNS), " ".join(SPEED_COLUMNS), len(cols)))
    return SpeedRow(direction=cols[0], dtype=cols[1], d=int(cols[2]), causal=int(cols[3]), n=int(cols[4]),
                    batch=int(cols[5]), heads=int(cols[6]), ms=float(cols[7]), tflops=float(cols[8]))


def _memory_row(cols: List[str], line: str) -> MemoryRow:
    if len(cols) >= 3 and cols[2] == "OOM":       # "N  fused_ms  OOM  (naive: why)"
        note = line.split("(", 1)[1].rstrip(")") if "(" in line else "naive: out of memory"
        return MemoryRow(int(cols[0]), float(cols[1]), None, None, None, None, None, note)
    if len(cols) != 7:
        raise ValueError("expected 7 columns (N, fused ms, naive ms, speedup, fused MiB, naive MiB, ratio), got %d"
                         % len(cols))
    v = [float(c) for c in cols[1:]]
    return MemoryRow(int(cols[0]), v[0], v[1], v[2], v[3], v[4], v[5])


def _header_index(lines: List[str]) -> int:
    """The index of the first non-blank line (sniff saw there is one)."""
    return next(i for i, ln in enumerate(lines) if ln.strip())


def read_bench(path: str, text: str, into: Inputs) -> int:
    lines = text.splitlines()
    top = _header_index(lines)
    run = BenchRun(source=path, device=re.sub(r"^# attncheck bench v\d+ on ", "", lines[top].strip()))
    section = None
    for line_no, line in enumerate(lines[top + 1:], top + 2):
        cols = line.split()
        if not cols:
            continue
        if line.startswith("## "):
            section = "speed" if "TFLOP/s" in line else "memory" if "fused vs naive" in line else "unknown"
            if section == "unknown":
                into.notes.append("%s:%d: skipped an unknown bench section: %s" % (path, line_no, line[3:].strip()))
            continue
        if line.startswith("#") or section == "unknown" or cols[0] in ("dir", "N"):
            continue                      # comments and column headers
        if section is None:
            raise InputError(path, line_no, "a bench row before any '## ' section")
        try:
            if section == "speed":
                run.speed.append(_speed_row(cols))
            else:
                run.memory.append(_memory_row(cols, line))
        except ValueError as e:
            raise InputError(path, line_no, "bad %s row: %s" % (section, e)) from None
    into.benches.append(run)
    return len(run.speed) + len(run.memory)


def _torch_header(path: str, line_no: int, cols: List[str]) -> List[str]:
    """'dir dtype d causal N ours NAME ratio NAME ratio ...' -> the backend names."""
    if cols[:6] != ["dir", "dtype", "d", "causal", "N", "ours"] or len(cols) % 2 or \
            any(c != "ratio" for c in cols[7::2]):
        raise InputError(path, line_no, "expected the header 'dir dtype d causal N ours NAME ratio ...'")
    return cols[6::2]


def _optional_float(text: str) -> Optional[float]:
    value = float(text) if text != "-" else None
    return None if value is not None and math.isnan(value) else value


def _torch_row(cols: List[str], backends: List[str]) -> TorchRow:
    if len(cols) != 6 + 2 * len(backends):
        raise ValueError("expected %d columns, got %d" % (6 + 2 * len(backends), len(cols)))
    per = {}
    for i, name in enumerate(backends):
        tflops, ratio = _optional_float(cols[6 + 2 * i]), _optional_float(cols[7 + 2 * i])
        per[name] = (tflops, ratio) if tflops is not None else None
    return TorchRow(cols[0], cols[1], int(cols[2]), int(cols[3]), int(cols[4]), _optional_float(cols[5]), per)


def read_torch(path: str, text: str, into: Inputs) -> int:
    lines = text.splitlines()
    top = _header_index(lines)
    m = re.match(r"# torch (\S+) on (.*?): ", lines[top].strip())
    run = TorchRun(path, m.group(1) if m else "unknown", m.group(2) if m else "unknown", [])
    for line_no, line in enumerate(lines[top + 1:], top + 2):
        cols = line.split()
        if not cols or line.startswith("#"):
            continue
        if cols[0] == "dir":
            run.backend_names = _torch_header(path, line_no, cols)
            continue
        if not run.backend_names:
            raise InputError(path, line_no, "a row before the column header")
        try:
            run.rows.append(_torch_row(cols, run.backend_names))
        except ValueError as e:
            raise InputError(path, line_no, "bad row: %s" % e) from None
    into.torch_runs.append(run)
    return len(run.rows)


# ---- files ------------------------------------------------------------------------

def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        raise InputError(path, None, "no such file") from None
    except IsADirectoryError:
        raise InputError(path, None, "is a directory, expected a file") from None
    except UnicodeDecodeError as e:
        raise InputError(path, None, "not UTF-8 text (%s)" % e.reason) from None
    except OSError as e:
        raise InputError(path, None, "cannot read (%s)" % (e.strerror or e)) from None


def sniff(path: str, text: str) -> str:
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), None)
    if first is None:
        raise InputError(path, None, "empty: no records")
    if first.startswith(("{", "[")):        # "[": JSON, though not an object: refused by its line
        return "jsonl"
    if first.startswith("# attncheck bench"):
        return "bench"
    if first.startswith("# torch "):
        return "torch"
    raise InputError(path, 1, "not attncheck JSON Lines (--json), `attncheck bench` output "
                              "nor ci/torch_sdpa_bench.py output")


READERS = {"jsonl": read_jsonl, "bench": read_bench, "torch": read_torch}


def read_inputs(paths: List[str]) -> Inputs:
    into = Inputs()
    for path in paths:
        text = _read_text(path)
        kind = sniff(path, text)
        count = READERS[kind](path, text, into)
        into.files.append(InputFile(path, kind, count))
    return into
