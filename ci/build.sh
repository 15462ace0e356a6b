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
# Meson < 1.4 tracks no header a .cu includes (meson.build): drop each CUDA object that is older than a
# file its nvcc -MD list (X.cu.d beside X.cu.o; paths relative to the build directory) names.
# The list is make's syntax: paths split by blanks and continued lines, a blank inside a path written "\ ".
cuda_dep_paths() {
  sed -e '1s/^[^:]*://' -e 's/\\$//' -e 's/\\ /\x01/g' "$1" | tr -s ' \t' '\n\n' | tr '\001' ' '
}
drop_stale_cuda_objects() {
  local dep obj f
  while IFS= read -r -d '' dep; do
    obj=${dep%.d}.o
    [ -f "$obj" ] || continue
    while IFS= read -r f; do
      [ -n "$f" ] || continue
      if [ ! -e "$build/$f" ] && [ ! -e "$f" ]; then rm -f "$obj"; break; fi
      if [ "$build/$f" -nt "$obj" ] || [ "$f" -nt "$obj" ]; then rm -f "$obj"; break; fi
    done < <(cuda_dep_paths "$dep")
  done < <(find "$build" -name '*.cu.d' -print0)
}
drop_stale_cuda_objects
ninja -C "$build" -j"$(nproc)" >"$build/ninja.log" 2>&1 || { cat "$build/ninja.log"; exit 1; }
if grep -q 'warning:' "$build/ninja.log"; then
  echo "build: compiler warnings (the build must be warning-clean):" >&2
  grep -A3 'warning:' "$build/ninja.log" >&2
  exit 1
fi
