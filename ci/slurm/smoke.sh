#!/usr/bin/env bash
# ci/slurm/smoke.sh — the Slurm smoke test: builds attncheck (ci/build.sh), starts
# a real one-node Slurm cluster on localhost (ci/slurm/local-cluster.sh; installs
# munge and Slurm from Debian's packages the first time), submits a sharded
# campaign with ci/slurm/submit.sh — a 4-task job array of campaign.sbatch on
# cpu-flash, then the dependent merge job, waited for with `sbatch --wait` — and
# checks it against the unsharded run of the same campaign (same seed, same total
# cases) with ci/slurm/compare_runs.py: the same JSON Lines records, the same
# summary lines, the same Markdown and JUnit reports.  Stops the cluster on exit.
# Prints the time of each phase.  Runs as root (CI does).
#
# Variables: SMOKE_KERNEL (default cpu-flash), SMOKE_SEED (default 20261123),
#   SMOKE_CASES (the whole campaign, default 160: 40 a shard), SMOKE_SHARDS
#   (default 4), SMOKE_DIR (work folder, wiped first and kept; default a new
#   /tmp/attncheck-slurm-smoke.XXXXXX, removed after a pass, kept after a failure), BUILD_DIR (default build), ATTNCHECK (the executable; default
#   BUILD_DIR/harness/attncheck).
# Exit status: 0 equal; 1 a difference or a failed job; 2 bad usage; 3 no cluster.
set -euo pipefail
cd "$(dirname "$0")/../.."
export BUILD_DIR=${BUILD_DIR:-build}
kernel=${SMOKE_KERNEL:-cpu-flash}
seed=${SMOKE_SEED:-20261123}
cases=${SMOKE_CASES:-160}
shards=${SMOKE_SHARDS:-4}
work=${SMOKE_DIR:-}
[ -n "$work" ] || { work=$(mktemp -d /tmp/attncheck-slurm-smoke.XXXXXX); made_work=1; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
t_start=$(now)

bash ci/build.sh
attncheck=${ATTNCHECK:-$PWD/$BUILD_DIR/harness/attncheck}
export ATTNCHECK_SOURCE_DIR=$PWD OPENBLAS_NUM_THREADS=1
rm -rf "$work"
mkdir -p "$work"
export SLURM_LOCAL_DIR=$work/cluster

# The unsharded run, before the cluster takes the CPUs.
t0=$(now)
urc=0
"$attncheck" fuzz --kernel "$kernel" --seed "$seed" --cases "$cases" --quiet \
    --json "$work/unsharded.jsonl" --junit "$work/unsharded.xml" --markdown "$work/unsharded.md" \
    >"$work/unsharded.txt" || urc=$?
t_unsharded=$(secs "$t0" "$(now)")

t0=$(now)
trap 'bash ci/slurm/local-cluster.sh stop' EXIT
trap 'exit 130' INT TERM
eval "$(bash ci/slurm/local-cluster.sh start)" || exit 3
t_cluster=$(secs "$t0" "$(now)")

t0=$(now)
mrc=0
SHARDS=$shards GRES=none CPUS_PER_TASK=1 FUZZ_KERNEL=$kernel FUZZ_SEED=$seed FUZZ_CASES=$cases \
    RESULTS_DIR=$work/results ATTNCHECK=$attncheck WAIT=1 bash ci/slurm/submit.sh || mrc=$?
t_done=$(now)
t_jobs=$(secs "$t0" "$t_done")
# The array's span: from the submission to the last shard's end line.
last_end=$(grep -h -o 'end [0-9.]*' "$work"/results/logs/shard-*.out 2>/dev/null | awk '{print $2}' | sort -g | tail -n 1)
t_array=$( [ -n "$last_end" ] && secs "$t0" "$last_end" || echo "?")

ok=1 worst=0
for ((i = 0; i < shards; i++)); do
    src=$(sed -n "s/^shard $i\/$shards end .* rc=\([0-9]*\)\$/\1/p" "$work/results/logs/shard-$i.out" 2>/dev/null)
    if [ -z "$src" ]; then
        echo "smoke: shard $i has no end line:"; cat "$work/results/logs/shard-$i.out" 2>/dev/null; ok=0
    elif [ "$src" -gt "$worst" ]; then
        worst=$src
    fi
done
[ "$worst" = "$urc" ] || { echo "smoke: the shards' worst exit status is $worst, the unsharded run's $urc"; ok=0; }
[ "$mrc" = "$urc" ] || { echo "smoke: the merge job ended with $mrc, the unsharded run with $urc"; ok=0; }
python3 ci/slurm/compare_runs.py --results "$work/results" --shards "$shards" --unsharded "$work/unsharded" || ok=0

echo "smoke: times: cluster start ${t_cluster} s (package installs included when missing);" \
     "array ${t_array} s and array + merge ${t_jobs} s (submission to sbatch --wait's return);" \
     "unsharded run ${t_unsharded} s; total $(secs "$t_start" "$(now)") s with the build check"
if [ "$ok" = 1 ]; then
    trap - EXIT
    bash ci/slurm/local-cluster.sh stop
    [ "${made_work:-0}" = 1 ] && rm -rf "$work"
    echo "smoke: PASS (fuzz --shard + merge, $shards shards)"
    exit 0
fi
echo "smoke: FAIL (results in $work/results, cluster logs in $work/cluster/log)"
exit 1
