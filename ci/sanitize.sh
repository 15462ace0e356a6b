#!/usr/bin/env bash
# The standing defence against memory errors and undefined behaviour: attncheck
# built by clang with AddressSanitizer and UndefinedBehaviorSanitizer (every
# report fatal), CUDA off, in its own build folder (${ASAN_BUILD_DIR:-build-asan}),
# then, under the sanitizers:
#   1. the Criterion unit tests;
#   2. the fixture corpus on cpu-flash;
#   3. a short fuzz campaign on cpu-flash and on the example plugin;
#   4. the libFuzzer targets of fuzz/, FUZZ_SECONDS each (ci/fuzz-targets.sh).
# ci/test.sh runs it last.  About 3 minutes on 2 cores from a fresh folder.
set -euo pipefail
cd "$(dirname "$0")/.."
b=${ASAN_BUILD_DIR:-build-asan}
# clang-14 carries the sanitizer runtimes and libFuzzer (Debian 12: clang-14).
if ! command -v clang-14 >/dev/null; then
  echo "sanitize: installing clang-14" >&2
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends clang-14 \
    >/tmp/attncheck-apt.log 2>&1 || { cat /tmp/attncheck-apt.log >&2; exit 1; }
fi
t0=$SECONDS
CC=clang-14 BUILD_DIR=$b \
  MESON_ARGS="-Dcuda=disabled -Dfuzz=enabled -Db_sanitize=address,undefined -Db_lundef=false -Dc_args=-fno-sanitize-recover=all" \
  bash ci/build.sh
echo "sanitize: built $b in $((SECONDS - t0)) s"
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-2}
export ATTNCHECK_SOURCE_DIR=$PWD
step() { printf '\n== sanitize: %s\n' "$*"; }

step "unit tests under ASan+UBSan"
t=$SECONDS
# Leaks are not checked here: some suites' test doubles keep what they allocate
# (harness/verdict/test_compare.c's input bundles).  They are where it matters:
# the binary's own runs below and every fuzz target.
# One BLAS thread a test, as ci/test.sh's run (two spinning OpenBLAS threads per test oversubscribe 2 cores).
ASAN_OPTIONS=${ASAN_OPTIONS/detect_leaks=1/detect_leaks=0} ATTNCHECK_BIN=$PWD/$b/harness/attncheck \
  OPENBLAS_NUM_THREADS=1 "$b/attncheck-tests" --jobs=2
echo "unit tests: $((SECONDS - t)) s"

step "fixtures on cpu-flash under ASan+UBSan"
t=$SECONDS
"$b/harness/attncheck" run fixtures --kernel cpu-flash --quiet | grep ' cases, '
echo "fixtures: $((SECONDS - t)) s"

step "a short fuzz campaign under ASan+UBSan"
t=$SECONDS
"$b/harness/attncheck" fuzz --kernel cpu-flash --seed 13 --cases 300 --quiet | grep ' cases, '
"$b/harness/attncheck" fuzz --plugin "$b/plugins/libattncheck-example-plugin.so" --kernel example-flash-cpu \
  --seed 14 --cases 100 --quiet | grep ' cases, '
echo "campaign: $((SECONDS - t)) s"

step "libFuzzer targets"
FUZZ_BUILD_DIR=$b bash ci/fuzz-targets.sh
echo "sanitize: all passed in $((SECONDS - t0)) s"
