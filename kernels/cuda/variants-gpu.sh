#!/usr/bin/env bash
# kernels/cuda/variants-gpu.sh [DIR] — cuda-flash's variants (softcap, ALiBi,
# bias, sinks, d_v, packed THD) on a GPU.  DIR: a CUDA build tree (default
# build-cuda under the repository root) or a bundle (ci/make-bundle.sh, with
# this script and variants.cases copied to its kernels/cuda/).  Logs and a
# summary go under $OUT (default ./gpu-out/variants).  No step needs more than a
# few minutes on an H100.
#   SEED, CASES  the fuzz campaign (default 1, 2000)
#   STEPS        steps to run (default "test corpus fuzz sanitize bench")
# Exit status: 0 when every step passed, else the first failure's.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd) # the repository, or the bundle
dir=$(cd "${1:-$root/build-cuda}" && pwd)
OUT=${OUT:-$PWD/gpu-out/variants}
SEED=${SEED:-1}
CASES=${CASES:-2000}
mkdir -p "$OUT"
export ATTNCHECK_SOURCE_DIR=${ATTNCHECK_SOURCE_DIR:-$root} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-8}
[ -f "$root/budgets.txt" ] && export ATTNCHECK_BUDGETS=${ATTNCHECK_BUDGETS:-$root/budgets.txt}
[ -d /usr/local/cuda/bin ] && export PATH="$PATH:/usr/local/cuda/bin"
[ -d "$dir/lib" ] && export LD_LIBRARY_PATH="$dir/lib:${LD_LIBRARY_PATH:-}"
find_bin() { # name: a bundle's top level, else its place in a build tree
    for p in "$dir/$1" "$dir/harness/$1" "$dir/kernels/cuda/$1"; do
        [ -x "$p" ] && { echo "$p"; return 0; }
    done
    echo "variants-gpu: no $1 under $dir" >&2
    return 1
}
ac=$(find_bin attncheck) || exit 2
tc=$(find_bin attncheck-test-cuda) || exit 2
status=0
step() { # name command...: runs it, log in $OUT/name.txt
    local name=$1
    shift
    "$@" >"$OUT/$name.txt" 2>&1
    local rc=$?
    echo "== $name: rc=$rc" | tee -a "$OUT/summary.txt"
    if [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then status=$rc; fi
}
for s in ${STEPS:-test corpus fuzz sanitize bench}; do
    case $s in
    test) # every variant case of attncheck-test-cuda, wgmma then mma.sync on Hopper
        step test-wgmma "$tc" --variants cuda-flash
        step test-mma-sync env ACD_NO_WGMMA=1 "$tc" --variants cuda-flash ;;
    corpus) # the variant corpora through the harness's comparator and gate
        for f in "$here/variants.cases" "$root/fixtures/variants.cases"; do
            n=$(basename "$(dirname "$f")")-$(basename "$f" .cases) # cuda-variants, fixtures-variants
            step "run-$n" "$ac" run "$f" --kernel cuda-flash
            step "run-$n-mma-sync" env ACD_NO_WGMMA=1 "$ac" run "$f" --kernel cuda-flash
        done ;;
    fuzz) # the caps draw softcap, ALiBi, sinks, d_v and THD (12-15% of the cases each)
        step fuzz "$ac" fuzz --kernel cuda-flash --cases "$CASES" --seed "$SEED" --json "$OUT/fuzz.jsonl" \
            --save-failures "$OUT/found" ;;
    sanitize) # small variant cases; racecheck on both tensor-core paths
        command -v compute-sanitizer >/dev/null || { echo "no compute-sanitizer" | tee -a "$OUT/summary.txt"; status=3; continue; }
        step memcheck compute-sanitizer --tool memcheck --error-exitcode 9 "$tc" --small --variants cuda-flash
        step racecheck compute-sanitizer --tool racecheck --error-exitcode 9 "$tc" --small --variants cuda-flash
        step racecheck-mma-sync env ACD_NO_WGMMA=1 compute-sanitizer --tool racecheck --error-exitcode 9 "$tc" --small \
            --variants cuda-flash ;;
    bench) # N = 8k, d = 128, f16 and bf16: plain, then each variant alone, then all three
        for v in none softcap=30 alibi sinks softcap=30,alibi,sinks; do
            var=()
            [ "$v" != none ] && var=(--variant "$v")
            step "bench-${v//[=,]/-}" "$ac" bench --speed-only --d 128 --n 8192 "${var[@]}"
            step "bench-${v//[=,]/-}-mma-sync" env ACD_NO_WGMMA=1 "$ac" bench --speed-only --d 128 --n 8192 "${var[@]}"
        done
        # d_v != d_qk on the tensor cores: MLA's 192/128, 256/128, 128/96 (wgmma forward and
        # backward where they have a tile, mma.sync otherwise: 128/96's forward, 256/128's backward)
        for dd in 192:128 256:128 128:96; do
            step "bench-d${dd%:*}-dv${dd#*:}" "$ac" bench --speed-only --d "${dd%:*}" --n 8192 --variant "dv=${dd#*:}"
            step "bench-d${dd%:*}-dv${dd#*:}-mma-sync" env ACD_NO_WGMMA=1 "$ac" bench --speed-only --d "${dd%:*}" \
                --n 8192 --variant "dv=${dd#*:}"
        done ;;
    *) echo "unknown step $s" | tee -a "$OUT/summary.txt"; status=2 ;;
    esac
done
exit "$status"
