#!/usr/bin/env bash
# Line coverage of ref/ and harness/ under the unit tests and the fixture corpus (gcovr).
set -euo pipefail
cd "$(dirname "$0")/.."
export BUILD_DIR=build-coverage MESON_ARGS="-Db_coverage=true -Dcuda=disabled"
bash ci/build.sh
find build-coverage -name '*.gcda' -delete
ATTNCHECK_SOURCE_DIR=$PWD build-coverage/attncheck-tests --jobs=2 >/dev/null
build-coverage/harness/attncheck run fixtures --kernel cpu-flash --quiet >/dev/null || true
gcovr --root . --filter 'ref/' --filter 'harness/' --exclude '.*test_.*' --print-summary build-coverage | tail -n 20
