#!/usr/bin/env bash
# Runs each libFuzzer target of fuzz/ from its committed seed corpus
# (fuzz/corpus/<target>, never modified: new inputs go to a scratch folder)
# with its dictionary, for FUZZ_SECONDS seconds each (default 20), or for
# FUZZ_RUNS executions each when that is set (the long runs the README counts:
# FUZZ_RUNS=10000000 nice -n 19 bash ci/fuzz-targets.sh).  Two targets at a
# time (2 cores).  A finding (crash, sanitizer report, failed property, leak,
# timeout) fails the script; its input is kept in $FUZZ_OUT (default
# ${FUZZ_BUILD_DIR}/fuzz-out) with the log, to become a regression test.
# Needs the build of ci/sanitize.sh (FUZZ_BUILD_DIR, default build-asan).
set -euo pipefail
cd "$(dirname "$0")/.."
b=${FUZZ_BUILD_DIR:-build-asan}
out=${FUZZ_OUT:-$b/fuzz-out}
targets=${FUZZ_TARGETS:-case_line corpus budgets npy safetensors}
mkdir -p "$out"
[ -x "$b/fuzz/fuzz-case-line" ] || { echo "fuzz-targets: no fuzz targets in $b (run ci/sanitize.sh)" >&2; exit 2; }
if [ -n "${FUZZ_RUNS:-}" ]; then budget=(-runs="$FUZZ_RUNS"); else budget=(-max_total_time="${FUZZ_SECONDS:-20}"); fi

one() {
  local t=$1 exe=$b/fuzz/fuzz-${1//_/-} work=$out/$1-corpus
  rm -rf "$work" && mkdir -p "$work"
  if "$exe" "${budget[@]}" -dict="fuzz/dict/$t.dict" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
       -print_final_stats=1 -artifact_prefix="$out/$t-" "$work" "fuzz/corpus/$t" >"$out/$t.log" 2>&1; then
    echo "fuzz-targets: $t: $(grep -m1 -o 'stat::number_of_executed_units: [0-9]*' "$out/$t.log" |
      grep -o '[0-9]*$') executions, 0 findings"
  else
    echo "fuzz-targets: $t: FINDING (log and input in $out/$t.log, $out/$t-*)" >&2
    grep -m1 -B2 -A25 -E 'ERROR|runtime error|property failed|deadly signal' "$out/$t.log" >&2 || tail -30 "$out/$t.log" >&2
    return 1
  fi
}

status=0
set -- $targets
while [ $# -gt 0 ]; do
  one "$1" & p1=$!
  p2=
  if [ $# -gt 1 ]; then one "$2" & p2=$!; fi
  wait $p1 || status=1
  [ -z "$p2" ] || wait $p2 || status=1
  shift $(( $# > 1 ? 2 : 1 ))
done
exit $status
