#!/usr/bin/env bash
# ci/make-bundle.sh BUILD_DIR [BUNDLE_DIR] — copy the GPU-relevant executables
# of a CUDA build (attncheck, attncheck-tests, attncheck-test-cuda, bench
# binaries) into BUNDLE_DIR (default .bundle), with lib/ holding the shared
# libraries ldd lists for them except the C runtime, the loader, the NVIDIA
# driver and the CUDA toolkit's own (cudart, cuBLAS, cuBLASLt), which a GPU
# node has.  See docs/GPU-RUNS.md.  Run it where the build was made.
set -euo pipefail
build=${1:?usage: ci/make-bundle.sh BUILD_DIR [BUNDLE_DIR]}
bundle=${2:-.bundle}
src=$(cd "$(dirname "$0")/.." && pwd)

rm -rf "$bundle"
mkdir -p "$bundle/lib"
bins=()
# BUNDLE_UNIT_TESTS=0 leaves the Criterion suite out (and with it libgit2, krb5,
# OpenSSL and the rest of Criterion's dependencies: ~15 MB) to fit a size limit.
rels="harness/attncheck harness/attncheck-bench-e2e kernels/cuda/attncheck-test-cuda kernels/cuda/attncheck-copy-patterns ref/attncheck-bench-ref attncheck-test-gpuref ref/cuda/attncheck-bench-gpuref"
[ "${BUNDLE_UNIT_TESTS:-1}" = 1 ] && rels="$rels attncheck-tests"
for rel in $rels; do
    if [ -x "$build/$rel" ]; then
        cp "$build/$rel" "$bundle/"
        strip --strip-debug "$bundle/$(basename "$rel")" 2>/dev/null || true
        bins+=("$bundle/$(basename "$rel")")
    else
        echo "make-bundle: $build/$rel not built, skipped" >&2
    fi
done
[ ${#bins[@]} -gt 0 ] || { echo "make-bundle: no executables in $build" >&2; exit 2; }

# Libraries to leave out: glibc pieces, the loader, the driver, the toolkit's own.
skip='^(linux-vdso|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|ld-linux|libcuda\.so|libcudart\.so|libcublas\.so|libcublasLt\.so|libstdc\+\+\.so|libgcc_s\.so)'
for b in "${bins[@]}"; do
    ldd "$b" | awk '/=>/ {print $1, $3}' | while read -r name path; do
        if [[ "$name" =~ $skip ]] || [ ! -f "$path" ]; then continue; fi
        cp -L -n "$path" "$bundle/lib/$name"
    done
done

# Plugins: the example, the one that faults on the device on purpose and the CUDA ones that
# scribble on purpose (gpu-run.sh, step "plugins").
for so in "$build"/plugins/libattncheck-example-plugin.so "$build"/plugins/libattncheck-faulting-cuda-plugin.so \
          "$build"/plugins/libattncheck-hostile-cuda-*.so; do
    [ -f "$so" ] && cp "$so" "$bundle/"
done

# attncheck report execs reports/html_report.py beside the executable.
mkdir -p "$bundle/reports"
cp -r "$src/reports/html_report.py" "$src/reports/htmlreport" "$bundle/reports/" 2>/dev/null || true

# Kernels that are not C (--exec examples) and their capability files.
mkdir -p "$bundle/plugins"
cp "$src"/plugins/*.py "$src"/plugins/*.caps.json "$bundle/plugins/" 2>/dev/null || true

# What the scripts read at run time: the GPU script, the torch peer, budgets, fixtures.
mkdir -p "$bundle/ci"
cp "$src"/ci/*.sh "$src"/ci/*.py "$bundle/ci/" 2>/dev/null || true
for f in "$src"/budgets*.txt; do [ -f "$f" ] && cp "$f" "$bundle/"; done
[ -d "$src/fixtures" ] && cp -r "$src/fixtures" "$bundle/fixtures"
[ -d "$src/ci/slurm" ] && cp -r "$src/ci/slurm" "$bundle/ci/"
# The CUDA kernels' own GPU scripts and corpora (kernels/cuda/variants-gpu.sh finds the bundle's top level).
mkdir -p "$bundle/kernels/cuda"
cp "$src"/kernels/cuda/*.sh "$src"/kernels/cuda/*.cases "$bundle/kernels/cuda/" 2>/dev/null || true
echo "bundle: $bundle ($(du -sh "$bundle" | cut -f1)); libs: $(ls "$bundle/lib" | tr '\n' ' ')"
