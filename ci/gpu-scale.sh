#!/usr/bin/env bash
# ci/gpu-scale.sh [DIR] — issue 12's scale checks on a GPU machine, from a bundle
# (ci/make-bundle.sh) or a CUDA build tree; every log under $OUT (default ./gpu-out).
# Steps (SCALE_STEPS, default "e2e jobs tiers long"), each well inside 10 minutes:
#   e2e     attncheck-bench-e2e on cuda-flash, reference auto: N=8192 and 32768 (hq=16)
#   e2e-128k  N=131072 at hq=8: the 5-minute goal; its own step
#   jobs    the default campaign's cases/s with --jobs 1, 4, 16 (ci/bench-scale.sh), and
#           --jobs 1 against --jobs 8: the same case records and summary
#   tiers   one campaign on the gpu tier and the same on the cpu tier (--max-seqlen 2048,
#           cases big enough for auto to pick the device): the same verdicts, every gpu
#           record certified and spot-checked
#   long    a time-bounded long-profile campaign (--profile long --time 240 --jobs 4)
#           whose summary must print within the time
# Exit status: the first failing step's.
set -uo pipefail
dir=${1:-.bundle}
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
if [ -x "$dir/attncheck" ]; then bin=$dir; else bin=$dir/harness; fi
[ -d "$dir/lib" ] && export LD_LIBRARY_PATH="$dir/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
[ -f "$dir/budgets.txt" ] && export ATTNCHECK_BUDGETS=${ATTNCHECK_BUDGETS:-$dir/budgets.txt}
here=$(cd "$(dirname "$0")" && pwd)
a=$bin/attncheck
rc=0
step() { echo "== $1: $(date -u +%T)"; }
records() { grep -v '^{"type"' "$1"; }
summary() { sed -n '/ cases, /,$p' "$1" | sed 's/ in [0-9.e+-]* s ([0-9.e+-]* cases\/s)//'; }
for s in ${SCALE_STEPS:-e2e jobs tiers long}; do
    case $s in
    e2e) step e2e; "$bin/attncheck-bench-e2e" --kernel cuda-flash --n 8192,32768 --hq 16 2>&1 | tee "$out/e2e.txt" || rc=${rc/#0/1} ;;
    e2e-128k) step e2e-128k; "$bin/attncheck-bench-e2e" --kernel cuda-flash --n 131072 --hq 8 2>&1 | tee "$out/e2e-128k.txt" || rc=${rc/#0/1} ;;
    jobs)
        step jobs
        SKIP_E2E=1 KERNEL=cuda-flash CASES=2000 OUT=$out bash "$here/bench-scale.sh" "$dir" || rc=${rc/#0/1}
        "$a" fuzz --kernel cuda-flash --cases 2000 --jobs 1 --quiet --json "$out/jobs1.jsonl" >"$out/jobs1.txt"
        "$a" fuzz --kernel cuda-flash --cases 2000 --jobs 8 --quiet --json "$out/jobs8.jsonl" >"$out/jobs8.txt"
        if cmp -s <(records "$out/jobs1.jsonl") <(records "$out/jobs8.jsonl") &&
           cmp -s <(summary "$out/jobs1.txt") <(summary "$out/jobs8.txt"); then
            echo "jobs: --jobs 1 and --jobs 8 give the same $(records "$out/jobs1.jsonl" | wc -l) records and summary"
        else
            echo "jobs: --jobs 1 and --jobs 8 DIFFER"; rc=${rc/#0/1}
        fi ;;
    tiers)
        step tiers
        for t in gpu cpu; do
            "$a" fuzz --kernel cuda-flash --seed 9 --cases 60 --min-seqlen 1024 --max-seqlen 2048 --reference $t \
                --jobs 8 --quiet --json "$out/tier-$t.jsonl" >"$out/tier-$t.txt" 2>&1
            echo "tier $t: exit $? $(grep -m1 ' cases, ' "$out/tier-$t.txt")"
        done
        python3 - "$out/tier-gpu.jsonl" "$out/tier-cpu.jsonl" <<'PY' || rc=${rc/#0/1}
import json, sys
def load(p): return [r for r in map(json.loads, open(p)) if "type" not in r]
g, c = load(sys.argv[1]), load(sys.argv[2])
bad = [(x["index"], x["verdict"], y["verdict"]) for x, y in zip(g, c) if x["verdict"] != y["verdict"]]
unchecked = [x["index"] for x in g if x.get("reference", {}).get("tier") != "gpu"
             or not x["certification"]["certified"] or not x["reference"].get("spot_check", {}).get("agrees")]
print("tiers: %d cases; verdicts differ on %s; gpu records not gpu/certified/spot-checked: %s"
      % (len(g), bad or "none", unchecked or "none"))
sys.exit(1 if bad or unchecked or len(g) != len(c) else 0)
PY
        ;;
    long)
        step long
        start=$SECONDS
        "$a" fuzz --kernel cuda-flash --profile long --time 240 --jobs 4 --mem-budget 24 --json "$out/long.jsonl" \
            --markdown "$out/long.md" >"$out/long.txt" 2>&1
        st=$?
        echo "long: exit $st after $((SECONDS - start)) s (--time 240)"; grep -m1 -A0 ' cases, ' "$out/long.txt"
        grep -q ' cases, ' "$out/long.txt" && [ $((SECONDS - start)) -le 270 ] && [ "$st" -le 1 ] || rc=${rc/#0/1} ;;
    *) echo "unknown step $s"; rc=2 ;;
    esac
done
exit "$rc"
