#!/usr/bin/env bash
# kernels/cuda/same-results.sh OLD NEW — on a GPU: whether a change to the CUDA
# kernels left their results alone.  OLD and NEW are two builds (bundles from
# ci/make-bundle.sh or build trees).  Both run the same fuzz campaigns of
# cuda-flash (as dispatched, and with ACD_NO_WGMMA=1: the mma.sync kernels) and
# the fixture corpus, with --json; the JSON Lines are compared case by case.
#   O, LSE, dK, dV   every figure equal (their kernels are deterministic)
#   dQ               summed with atomics in no fixed order: figures may differ
#                    in the last bits between any two runs, so only the verdict
#                    must agree; the largest relative change of max_scaled is shown
# Results under $OUT (default ./same-out).  Exit 0 when everything agrees.
#   CASES  cases per campaign (default 300)
#   KERNEL the kernel (default cuda-flash; KERNEL_NEW for the new build, default KERNEL)
set -uo pipefail
old=${1:?usage: same-results.sh OLD_BUILD NEW_BUILD}
new=${2:?usage: same-results.sh OLD_BUILD NEW_BUILD}
src=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$PWD/same-out}
mkdir -p "$OUT"
export ATTNCHECK_SOURCE_DIR=${ATTNCHECK_SOURCE_DIR:-$src} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-8}
export ATTNCHECK_BUDGETS=${ATTNCHECK_BUDGETS:-$src/budgets.txt}

bin_of() { # build -> its attncheck
    for p in "$1/attncheck" "$1/harness/attncheck"; do [ -x "$p" ] && { echo "$p"; return 0; }; done
    echo "same-results: no attncheck in $1" >&2
    return 1
}
run_all() { # name build kernel
    local exe lib k=$3
    exe=$(bin_of "$2") || return 2
    lib="$2/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
    LD_LIBRARY_PATH=$lib "$exe" fuzz --kernel "$k" --seed 41 --cases "${CASES:-300}" --quiet --json "$OUT/$1-fuzz.jsonl" >"$OUT/$1-fuzz.log" 2>&1
    LD_LIBRARY_PATH=$lib ACD_NO_WGMMA=1 "$exe" fuzz --kernel "$k" --seed 42 --cases "${CASES:-300}" --quiet \
        --json "$OUT/$1-fuzz-mma-sync.jsonl" >"$OUT/$1-fuzz-mma-sync.log" 2>&1
    LD_LIBRARY_PATH=$lib "$exe" run "$src/fixtures" --kernel "$k" --quiet --json "$OUT/$1-fixtures.jsonl" >"$OUT/$1-fixtures.log" 2>&1
    return 0
}
run_all old "$old" "${KERNEL:-cuda-flash}" || exit 2
run_all new "$new" "${KERNEL_NEW:-${KERNEL:-cuda-flash}}" || exit 2

python3 - "$OUT" <<'EOF' | tee "$OUT/summary.txt"
import json, sys
out = sys.argv[1]
exact, bad = ("O", "LSE", "dK", "dV"), 0
for run in ("fuzz", "fuzz-mma-sync", "fixtures"):
    a = [json.loads(l) for l in open(f"{out}/old-{run}.jsonl")]
    b = [json.loads(l) for l in open(f"{out}/new-{run}.jsonl")]
    diff, dq_rel = [], 0.0
    if len(a) != len(b):
        diff.append(f"{len(a)} cases vs {len(b)}")
    for x, y in zip(a, b):
        if x["case"] != y["case"] or x["verdict"] != y["verdict"]:
            diff.append(f"{x['case']}: {x['verdict']} vs {y['verdict']} ({y['case']})")
            continue
        for name in exact:
            if x.get("outputs", {}).get(name) != y.get("outputs", {}).get(name):
                diff.append(f"{x['case']}: {name} figures differ")
        qa, qb = x.get("outputs", {}).get("dQ"), y.get("outputs", {}).get("dQ")
        if qa and qb and qa.get("max_scaled") and qb.get("max_scaled"):
            dq_rel = max(dq_rel, abs(qa["max_scaled"] - qb["max_scaled"]) / abs(qa["max_scaled"]))
    print(f"{run}: {len(a)} cases, {len(diff)} differences; dQ max_scaled moved by at most {dq_rel:.3g} (relative)")
    for d in diff[:20]:
        print("  " + d)
    bad += len(diff)
print("SAME" if bad == 0 else f"DIFFERENT: {bad}")
sys.exit(1 if bad else 0)
EOF
