#!/usr/bin/env bash
# The main job: installs, builds, and runs the default fuzz campaign on the best
# kernel present (cuda-flash when a GPU is there, else the CPU emulation).
# Extra arguments go to `attncheck fuzz` (e.g. --seed 7 --time 600 --save-failures fixtures/found).
set -euo pipefail
cd "$(dirname "$0")/.."
export BUILD_DIR=${BUILD_DIR:-build}
bash ci/build.sh
exec "$BUILD_DIR/harness/attncheck" fuzz "$@"
