#!/usr/bin/env bash
# The GPU check of issue 13's f32 LSE fix (docs/cuda-f32-lse.md), for the H100:
# the failing line, the gpu-found fixtures and a short fresh-seed f32 campaign
# on cuda-flash.  DIR is a bundle (ci/make-bundle.sh) or a CUDA build tree.
#   OUT=$PWD/gpu-out bash ci/gpu-lse-check.sh .bundle
# Writes OUT/lse-line.log, lse-fixtures.log, lse-campaign.log (+ .jsonl) and
# prints the LSE rows; the exit status is the first failing step's.
set -uo pipefail
dir=${1:-.bundle}
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
[ -d "$dir/lib" ] && export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
attncheck=
for p in "$dir/attncheck" "$dir/harness/attncheck"; do [ -x "$p" ] && attncheck=$p && break; done
[ -n "$attncheck" ] || { echo "gpu-lse-check: no attncheck in $dir" >&2; exit 2; }
[ -f "$dir/budgets.txt" ] && export ATTNCHECK_BUDGETS=${ATTNCHECK_BUDGETS:-$dir/budgets.txt}
fixtures=$dir/fixtures/gpu-found.cases
[ -f "$fixtures" ] || fixtures=$(dirname "$0")/../fixtures/gpu-found.cases
line='v1 seed=462997489 b=3 hq=16 hkv=2 nq=64 nk=30 d=32 dtype=f32 mask=none layout=bhsd dist=outliers(1,0.001) scale=auto'
status=0
step() { # name rc
  echo "== $1: rc=$2"
  [ "$status" -ne 0 ] || status=$2
}
"$attncheck" run --kernel cuda-flash --case "$line" >"$OUT/lse-line.log" 2>&1
step "the issue's line (was LSE 2.68x the naive mean; expect PASS near 1.8x)" $?
grep -E '^(PASS|FAIL|ERROR)|^f32   LSE' "$OUT/lse-line.log"
"$attncheck" run "$fixtures" --kernel cuda-flash --quiet >"$OUT/lse-fixtures.log" 2>&1
step "fixtures/gpu-found.cases on cuda-flash" $?
grep -E '^(FAIL|ERROR)| cases, ' "$OUT/lse-fixtures.log"
"$attncheck" fuzz --kernel cuda-flash --dtype f32 --seed 462997 --cases "${LSE_CASES:-3000}" --quiet \
  --json "$OUT/lse-campaign.jsonl" >"$OUT/lse-campaign.log" 2>&1
step "a fresh-seed f32 campaign on cuda-flash" $?
grep -E '^FAIL| cases, |^f32   LSE' "$OUT/lse-campaign.log"
exit $status
