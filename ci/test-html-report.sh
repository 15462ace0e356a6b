#!/usr/bin/env bash
# The HTML report, tested as a reader sees it:
#   1. installs python3-matplotlib, chromium, chromium-driver and python3-selenium
#      from Debian (quiet, idempotent: nothing happens when they are there);
#   2. builds attncheck if needed (ci/build.sh; BUILD_DIR and MESON_ARGS respected);
#   3. makes real inputs with it: a cpu-flash fuzz campaign, a mutant that fails
#      (so the failures section has entries) and a small prove run (100 cases a mutant:
#      cpu-flash-fp8-mutant-p-unscaled needs 52);
#   4. runs the report script's unit tests (reports/tests), then its bad-input
#      path on a real record cut short;
#   5. builds the report from those inputs plus the H100 bench and PyTorch files;
#   6. opens it in headless Chromium: any console error or JS exception, or a
#      missing section or chart (by id, in the DOM Chromium rendered), fails;
#      a page with a planted exception must fail the same check;
#   7. saves a screenshot: $BUILD_DIR/html-report/report.png, or
#      HTML_REPORT_SCREENSHOT=docs/img/html-report.png to refresh the README's.
set -euo pipefail
cd "$(dirname "$0")/.."
export BUILD_DIR=${BUILD_DIR:-build}

packages=(python3-matplotlib chromium chromium-driver python3-selenium)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "test-html-report: installing ${missing[*]}" >&2
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  if ! "${sudo_cmd[@]}" apt-get update -qq >/tmp/attncheck-apt-html.log 2>&1 ||
     ! "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" \
       >>/tmp/attncheck-apt-html.log 2>&1; then
    cat /tmp/attncheck-apt-html.log >&2
    echo "test-html-report: FAILED to install: ${missing[*]}" >&2
    exit 1
  fi
fi
bash ci/build.sh

# Debian's python3: python3-matplotlib and python3-selenium live there, and a
# python3 earlier in PATH (pyenv's, a venv's) does not see them.
py=/usr/bin/python3
a=$BUILD_DIR/harness/attncheck
out=$BUILD_DIR/html-report
shot=${HTML_REPORT_SCREENSHOT:-$out/report.png}
mkdir -p "$out"
rm -f "$out"/*.jsonl "$out"/*.html
export ATTNCHECK_SOURCE_DIR=$PWD OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-2}
step() { printf '\n== %s\n' "$*"; }
t0=$SECONDS

step "inputs: attncheck fuzz, a failing mutant, prove (--json)"
"$a" fuzz --kernel cpu-flash --seed 11 --cases 60 --json "$out/fuzz.jsonl" --quiet >"$out/fuzz.log"
rc=0
"$a" fuzz --kernel cpu-flash-mutant-no-rescale-o --seed 1 --cases 30 --json "$out/mutant.jsonl" --quiet \
  >"$out/mutant.log" || rc=$?
[ "$rc" -eq 1 ] || { cat "$out/mutant.log"; echo "the mutant campaign gave exit $rc, expected 1 (caught)" >&2; exit 1; }
"$a" prove --seed 1 --cases 100 --clean-cases 50 --json "$out/prove.jsonl" --quiet >"$out/prove.log" ||
  { cat "$out/prove.log"; exit 1; }
wc -l "$out"/*.jsonl

step "unit tests of the report script"
ATTNCHECK_HTML_REAL_JSONL=$out/fuzz.jsonl "$py" -m unittest discover -s reports/tests

step "bad input: a real record cut short is refused with its file and line, exit 2"
head -c 300 "$out/fuzz.jsonl" >"$out/cut.jsonl"
rc=0
"$py" reports/html_report.py --out "$out/cut.html" "$out/cut.jsonl" 2>"$out/cut.err" || rc=$?
grep -q "^html_report: $out/cut.jsonl:1: not valid JSON" "$out/cut.err" && [ "$rc" -eq 2 ] &&
  [ ! -e "$out/cut.html" ] ||
  { cat "$out/cut.err"; echo "expected exit 2 naming cut.jsonl:1, got $rc" >&2; exit 1; }
cat "$out/cut.err"

step "the report"
"$py" reports/html_report.py --out "$out/report.html" --title "attncheck report (CI, cpu-flash)" \
  "$out/fuzz.jsonl" "$out/mutant.jsonl" "$out/prove.jsonl" reports/h100-bench.txt reports/h100-torch-sdpa.txt

step "regression and history: attncheck report --baseline, --history (exit codes through the CLI)"
"$a" fuzz --kernel cpu-flash --seed 11 --dtype f16 --cases 150 --json "$out/base16.jsonl" --quiet >"$out/base16.log"
rc=0
"$a" fuzz --kernel cpu-flash-precision-o-rounded-twice --baseline "$out/base16.jsonl" --json "$out/new.jsonl" \
  --quiet >"$out/new.log" || rc=$?
[ "$rc" -eq 1 ] || { cat "$out/new.log"; echo "fuzz --baseline gave exit $rc, expected 1 (a regression)" >&2; exit 1; }
grep -q "^baseline: REGRESSION" "$out/new.log" || { cat "$out/new.log"; echo "the precision mutant was not flagged" >&2; exit 1; }
rm -rf "$out/history" && mkdir -p "$out/history/0.3" && cp "$out/base16.jsonl" "$out/history/0.3/" &&
  cp "$out/base16.jsonl" "$out/history/0.4.jsonl"
"$a" report "$out/new.jsonl" --baseline "$out/base16.jsonl" --history "$out/history" \
  --html "$out/report-baseline.html" --title "attncheck report (CI, baseline)" >"$out/history.txt"
grep -q "cpu-flash f16 O mean error unchanged since 0.3 (median of" "$out/history.txt" ||
  { cat "$out/history.txt"; echo "the history table lacks its change line" >&2; exit 1; }
# the script's own pairing and sign test must give the harness's figures
"$py" - "$out/new.jsonl" "$out/base16.jsonl" <<'PY'
import json, sys
sys.path.insert(0, "reports")
from htmlreport import inputs, regression
new, old = inputs.read_inputs([sys.argv[1]]), inputs.read_inputs([sys.argv[2]])
kernel = new.cases[0].kernel
cmp = regression.compare(new, old, kernel, sys.argv[2], 1.05, 1e-3)
harness = [r.fields for r in new.typed if r.type == "baseline"]
assert harness and len(harness) == len(cmp.cells), (len(harness), len(cmp.cells))
for h in harness:
    c = cmp.cells[(h["dtype"], h["output"], h["metric"])]
    assert (len(c.ratios), c.above, c.below, c.verdict) == (h["pairs"], h["above"], h["below"], h["verdict"]), h
    assert abs(c.median - h["median_ratio"]) <= 1e-12 * abs(c.median), (c.median, h)
    assert abs(c.p_regression - h["p_regression"]) <= 1e-9 * c.p_regression, (c.p_regression, h)
print("regression.py agrees with the harness on %d cells" % len(harness))
PY

step "headless Chromium"
ids=(summary verdict kernels-table environment environment-table overview overview-table distributions
     chart-dist-cpu-flash-f32 chart-dist-cpu-flash-f16 chart-dist-cpu-flash-bf16 shape chart-shape-cpu-flash
     special special-table failures failure-kinds-table mutant-failures detection detection-table
     speed chart-speed speed-table memory-table)
"$py" reports/tests/browser_check.py "$out/report.html" "${ids[@]/#/--expect-id=}" --screenshot "$shot" --height 2600
"$py" reports/tests/browser_check.py "$out/report-baseline.html" --expect-id=regression \
  --expect-id=regression-table-cpu-flash-precision-o-rounded-twice \
  --expect-id=chart-regression-cpu-flash-precision-o-rounded-twice \
  --expect-id=regression-not-compared-cpu-flash-precision-o-rounded-twice --expect-id=history \
  --expect-id=history-table --expect-id=chart-history-cpu-flash --expect-id=history-changes \
  --screenshot "$out/report-baseline.png"
printf '<!DOCTYPE html><title>planted</title><p id="x">x</p><script>throw new Error("planted")</script>\n' \
  >"$out/planted-error.html"
rc=0
"$py" reports/tests/browser_check.py "$out/planted-error.html" --expect-id=x 2>"$out/planted.err" || rc=$?
grep -q "Uncaught Error: planted" "$out/planted.err" && [ "$rc" -eq 1 ] ||
  { cat "$out/planted.err"; echo "the browser check missed a planted JS exception (exit $rc)" >&2; exit 1; }
echo "browser_check: a planted JS exception fails the check, as it must"

step "html report: all passed in $((SECONDS - t0)) s after the build; screenshot $shot"
