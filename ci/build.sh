#!/usr/bin/env bash
# Configures (once) and builds attncheck in ${BUILD_DIR:-build}. CUDA kernels are
# compiled when nvcc is found (-Dcuda=auto), so CI compiles them even without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
bash ci/install-deps.sh
# nvcc lives outside PATH on some machines
[ -x /usr/local/cuda/bin/nvcc ] && case ":$PATH:" in *:/usr/local/cuda/bin:*) ;; *) export PATH=$PATH:/usr/local/cuda/bin;; esac
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" --buildtype=debugoptimized ${MESON_ARGS:-} >/dev/null
fi
ninja -C "$build" -j"$(nproc)" >"$build/ninja.log" 2>&1 || { cat "$build/ninja.log"; exit 1; }
if grep -q 'warning:' "$build/ninja.log"; then
  echo "build: compiler warnings (the build must be warning-clean):" >&2
  grep -A3 'warning:' "$build/ninja.log" >&2
  exit 1
fi
