#!/usr/bin/env bash
# ci/bench-scale.sh [DIR] — issue 12's speed figures, from a build tree or a bundle:
#   1. one case end to end, stage by stage (attncheck-bench-e2e): b=1 hkv=hq d=128
#      bf16 causal, forward and backward; hq=16 at N=8192 and 32768, hq=8 at 131072;
#   2. the default campaign's cases/s (`attncheck fuzz`, backward on, lengths up to
#      512) with --jobs 1, 4 and 16.
# Variables: E2E_ARGS (more attncheck-bench-e2e options, e.g. "--n 512,1024 --hq 4
#   --kernel cpu-flash --reference cpu" for a CPU machine), KERNEL (the campaign's;
#   default: attncheck's best), JOBS (default "1 4 16"), CASES (default 300, the
#   default campaign), SKIP_E2E=1 / SKIP_CAMPAIGN=1.  Output to stdout and, when
#   OUT is set, $OUT/bench-scale.txt.
set -euo pipefail
dir=${1:-build}
if [ -x "$dir/attncheck" ]; then bin=$dir; else bin=$dir/harness; fi
[ -d "$dir/lib" ] && export LD_LIBRARY_PATH="$dir/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
[ -f "$dir/budgets.txt" ] && export ATTNCHECK_BUDGETS=${ATTNCHECK_BUDGETS:-$dir/budgets.txt}
log=/dev/null
[ -n "${OUT:-}" ] && { mkdir -p "$OUT"; log=$OUT/bench-scale.txt; }
{
echo "== $(date -u +%FT%TZ) $(hostname), $(nproc) CPUs; GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1 || echo none)"
if [ "${SKIP_E2E:-0}" != 1 ]; then
    echo "== one case end to end: attncheck-bench-e2e ${E2E_ARGS:-}"
    # shellcheck disable=SC2086 # E2E_ARGS is a list of options
    "$bin/attncheck-bench-e2e" ${E2E_ARGS:-} || echo "attncheck-bench-e2e: exit $?"
fi
if [ "${SKIP_CAMPAIGN:-0}" != 1 ]; then
    echo "== the default campaign's rate: attncheck fuzz --seed 1 --cases ${CASES:-300}${KERNEL:+ --kernel $KERNEL} --jobs J"
    printf '%5s %7s %9s %9s\n' jobs cases seconds cases/s
    for j in ${JOBS:-1 4 16}; do
        line=$("$bin/attncheck" fuzz --seed 1 --cases "${CASES:-300}" ${KERNEL:+--kernel "$KERNEL"} --jobs "$j" --quiet |
               grep -m1 ' cases, ') || true
        secs=$(echo "$line" | sed -n 's/.* in \([0-9.e+-]*\) s (.*/\1/p')
        cases=$(echo "$line" | sed -n 's/^[^:]*: \([0-9]*\) cases,.*/\1/p')
        awk -v j="$j" -v c="$cases" -v s="$secs" 'BEGIN { printf "%5d %7d %9.2f %9.1f\n", j, c, s, (s > 0 ? c / s : 0) }'
    done
fi
} 2>&1 | tee "$log"
