#!/usr/bin/env bash
# ci/slurm/submit.sh — submit a sharded `attncheck fuzz` campaign to Slurm: a job
# array of SHARDS tasks (ci/slurm/campaign.sbatch, one GPU each), then a merge job
# (ci/slurm/merge.sbatch) that waits for the whole array (--dependency=afterany)
# and writes merged.jsonl, merged.xml, merged.md and summary.txt into RESULTS_DIR.
# Run it from a repository checkout or a bundle (ci/make-bundle.sh); the campaign
# options (FUZZ_KERNEL, FUZZ_SEED, FUZZ_CASES, FUZZ_TIME, FUZZ_ARGS) are documented
# in campaign.sbatch.  Example, 64 shards of 100 000 cuda-flash cases in all:
#   SHARDS=64 FUZZ_KERNEL=cuda-flash FUZZ_CASES=100000 SBATCH_ARGS="--partition=gpu" \
#     bash ci/slurm/submit.sh
#
# Variables:
#   SHARDS         shard count N (default 4)
#   ARRAY          array indices to submit (default 0-(N-1)); e.g. "3,5" reruns two
#                  shards of an N-shard campaign into the same RESULTS_DIR
#   MAX_PARALLEL   at most this many shards running at once (the array's %M; default none)
#   GRES           generic resources per shard (default gpu:1; "none" on CPU nodes)
#   CPUS_PER_TASK  CPUs per shard (default 8; the reference and certification run there)
#   TIME_LIMIT     sbatch --time for each shard (default: FUZZ_TIME + 15 min when
#                  FUZZ_TIME is set, else the partition's default)
#   SBATCH_ARGS    more sbatch options for both jobs, split on spaces
#                  (e.g. "--partition=gpu --account=proj --qos=long")
#   RESULTS_DIR    results folder (default ./slurm-results-DATE-TIME); logs go to
#                  RESULTS_DIR/logs/; on a file system the nodes share
#   ATTNCHECK      the attncheck executable (default: the bundle's ./attncheck beside
#                  ci/, else BUILD_DIR/harness/attncheck, BUILD_DIR defaulting to build)
#   WAIT           1: wait until the merge job has ended (sbatch --wait) and exit
#                  with its status (default 0: submit and return)
# Prints the array job's and the merge job's ids.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
shards=${SHARDS:-4}
[[ $shards =~ ^[1-9][0-9]*$ ]] || { echo "submit.sh: SHARDS must be a positive integer, not '$shards'" >&2; exit 2; }
array=${ARRAY:-0-$((shards - 1))}
[ -n "${MAX_PARALLEL:-}" ] && array="$array%$MAX_PARALLEL"

attncheck=${ATTNCHECK:-}
if [ -z "$attncheck" ]; then
    attncheck=$root/${BUILD_DIR:-build}/harness/attncheck
    [ -x "$root/attncheck" ] && attncheck=$root/attncheck
fi
[ -x "$attncheck" ] || { echo "submit.sh: no attncheck executable at $attncheck (build it, or set ATTNCHECK)" >&2; exit 2; }
attncheck=$(cd "$(dirname "$attncheck")" && pwd)/$(basename "$attncheck")
results=${RESULTS_DIR:-slurm-results-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$results/logs"
results=$(cd "$results" && pwd)
# Budgets from the tree (a bundle's sit beside attncheck)
export ATTNCHECK=$attncheck RESULTS_DIR=$results SHARDS=$shards
export ATTNCHECK_SOURCE_DIR=${ATTNCHECK_SOURCE_DIR:-$root}

# shellcheck disable=SC2206 # SBATCH_ARGS is a list of options, split on spaces
common=(--parsable --export=ALL ${SBATCH_ARGS:-})
task_opts=(--cpus-per-task="${CPUS_PER_TASK:-8}" --gres="${GRES:-gpu:1}")
if [ -n "${TIME_LIMIT:-}" ]; then
    task_opts+=(--time="$TIME_LIMIT")
elif [ -n "${FUZZ_TIME:-}" ]; then
    task_opts+=(--time=$(((FUZZ_TIME + 59) / 60 + 15)))
fi

array_id=$(sbatch "${common[@]}" "${task_opts[@]}" --array="$array" \
    --output="$results/logs/shard-%a.out" "$here/campaign.sbatch")
array_id=${array_id%%;*}
echo "submit.sh: array job $array_id ($array of $shards shards), results in $results"
merge_opts=("${common[@]}" --dependency="afterany:$array_id" --output="$results/logs/merge.out")
if [ "${WAIT:-0}" = 1 ]; then
    echo "submit.sh: waiting for the merge job"
    rc=0
    merge_id=$(sbatch "${merge_opts[@]}" --wait "$here/merge.sbatch") || rc=$?
    echo "submit.sh: merge job ${merge_id%%;*} ended, exit status $rc; summary in $results/summary.txt"
    exit "$rc"
fi
merge_id=$(sbatch "${merge_opts[@]}" "$here/merge.sbatch")
echo "submit.sh: merge job ${merge_id%%;*} after it; watch with: squeue -j $array_id,${merge_id%%;*}"
