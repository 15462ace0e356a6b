#!/usr/bin/env bash
# ci/gpu-run.sh [DIR] — the GPU verification run, from a bundle (ci/make-bundle.sh)
# or a build tree: GPU tests, compute-sanitizer memcheck + racecheck on small
# cases, a fuzz campaign over the CUDA kernels, `attncheck bench` and the
# PyTorch SDPA peer.  Logs go under $OUT (default ./gpu-out).
#   GPU_STEPS  steps to run (default "info test sanitize fixtures fuzz prove bench torch")
#   FP8_CASES, FP8_PROVE_CASES  the "fp8" step's fuzz and prove cases (default 3000, 200)
#   PROVE_ARGS extra arguments for `attncheck prove --base cuda-flash` (default: --cases 300)
#   FUZZ_ARGS  extra arguments for `attncheck fuzz` (default: --cases 2000)
#   (step "exec", not in the defaults: PyTorch SDPA as an --exec-persistent kernel, when torch imports;
#   (step "plugins", not in the defaults: a CUDA plugin that faults the device must be a FAIL of kind
#   kernel:device-fault naming itself, exit 1, and a 20-case campaign of it must count 20 failures, each in a
#   fresh worker; CUDA plugins that write past O or change Q on the device must be named by the device guard
#   zones and the input check; cuda-flash fuzzed with and without --in-process, for the isolation's cost;
#   step "sdpa", not in the defaults: PyTorch SDPA backends (float attn_mask bias with dBias, enable_gqa) and
#   flex_attention (softcap and ALiBi score_mods) dumped and judged by `attncheck check`; a dump made with
#   --wrong must also fail its check_wrong.txt)
#   (step "fp8", not in the defaults: cuda-flash-fp8's tests, memcheck, fuzz --cases 3000, prove --base
#   cuda-flash-fp8 --cases 200, and `bench --fp8`: its forward TFLOP/s beside cuda-flash bf16 at d = 128, 64; d = 256 alone)
#   (step "decode", not in the defaults: cuda-decode's, cuda-decode-fp8's and cuda-decode-mla's tests, memcheck,
#   racecheck and synccheck on the small ones, fuzz --profile decode --cases ${DECODE_CASES:-3000} --jobs 8
#   (cuda-decode-fp8: ${DECODE_FP8_CASES:-1000}, cuda-decode-mla: ${DECODE_MLA_CASES:-1000}), prove --base cuda-decode --cases
#   ${DECODE_PROVE_CASES:-200} --clean-cases ${DECODE_PROVE_CLEAN:-300}, `bench --decode` (HBM bandwidth; also
#   --fp8 and --mla) and
#   ci/torch_decode_bench.py beside it, then ci/decode_goals.py's verdict on the issue's two speed goals from both
#   tables (decode-goals.md); DECODE_FUZZ_ARGS adds fuzz options, e.g. --max-seqlen 16384;
#   DECODE_PARTS a subset of "test sanitize fixtures fuzz prove bench torch", or "audit", not in the
#   default: ci/decode_split_audit.py, the automatic split count against 1, S/2 and 2S, bf16 and fp8)
#   BENCH_ARGS extra arguments for `attncheck bench` (e.g. --quick)
#   CAMPAIGN_PROCS, CAMPAIGN_CASES  the "campaign" step (not in the defaults): that
#              many fuzz processes of cuda-flash in parallel, CAMPAIGN_CASES cases
#              each (seeds 1001..), plus cuda-naive and long-sequence runs, merged
#              by ci/campaign_report.py into $OUT/accuracy-report.md
# Exit status: 0 when every step that ran passed, else the first failure's.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-}
if [ -z "$dir" ]; then
    if [ -x "$here/attncheck-test-cuda" ]; then dir=$here; elif [ -d "$here/.bundle" ]; then dir=$here/.bundle; else dir=$here/build; fi
fi
dir=$(cd "$dir" && pwd)
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
steps=${GPU_STEPS:-info test sanitize fixtures fuzz prove bench torch}
export LD_LIBRARY_PATH="$dir/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-8}
[ -d /usr/local/cuda/bin ] && export PATH="$PATH:/usr/local/cuda/bin"

find_bin() { # name: bundle top level, else its place in a build tree
    for p in "$dir/$1" "$dir/harness/$1" "$dir/kernels/cuda/$1" "$dir/ref/$1"; do
        [ -x "$p" ] && { echo "$p"; return 0; }
    done
    return 1
}
test_cuda=$(find_bin attncheck-test-cuda) || test_cuda=
attncheck=$(find_bin attncheck) || attncheck=
unit=$(find_bin attncheck-tests) || unit=
gpuref=$(find_bin attncheck-test-gpuref) || gpuref=
[ -f "$dir/budgets.txt" ] && export ATTNCHECK_BUDGETS=${ATTNCHECK_BUDGETS:-$dir/budgets.txt}
[ -d "$dir/fixtures" ] && export ATTNCHECK_SOURCE_DIR=${ATTNCHECK_SOURCE_DIR:-$dir}

status=0
record() { # step rc
    echo "== $1: rc=$2" | tee -a "$OUT/summary.txt"
    if [ "$2" -ne 0 ] && [ "$status" -eq 0 ]; then status=$2; fi
    return 0
}
has_cmd() { [ -n "$attncheck" ] && "$attncheck" "$1" --help >/dev/null 2>&1; }

for step in $steps; do
    case $step in
    info)
        { nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; uname -a; } >"$OUT/info.txt" 2>&1
        record info $? ;;
    test)
        [ -n "$test_cuda" ] && { "$test_cuda" 2>&1 | tee "$OUT/test-cuda.log"; record test-cuda "${PIPESTATUS[0]}"; }
        # On Hopper d = 64/128 run the wgmma forward; the mma.sync one (other GPUs) is checked too.
        [ -n "$test_cuda" ] && { ACD_NO_WGMMA=1 "$test_cuda" cuda-flash >"$OUT/test-cuda-mma-sync.log" 2>&1; record test-cuda-mma-sync $?; tail -n 1 "$OUT/test-cuda-mma-sync.log"; }
        # Which kernel family each dispatcher launched (the run above ends with it too): wgmma where
        # Hopper has it, and with ACD_NO_WGMMA=1 every fallback; both paths pass the cases above.
        for nw in 0 1; do
            [ -n "$test_cuda" ] && { ACD_NO_WGMMA=$nw "$test_cuda" --dispatch >"$OUT/test-cuda-dispatch-nowgmma$nw.log" 2>&1
                record "test-cuda-dispatch-nowgmma$nw" $?; tail -n 1 "$OUT/test-cuda-dispatch-nowgmma$nw.log"; }
        done
        [ -n "$unit" ] && { (cd "$dir" && "$unit" --jobs=8) >"$OUT/unit-tests.log" 2>&1; record unit-tests $?; tail -3 "$OUT/unit-tests.log"; }
        # The GPU reference tier against the CPU tier on every fixture line it implements and on random lines
        # (ref/cuda/test_gpuref_main.c); it writes $OUT/gpuref-test.log itself.
        [ -n "$gpuref" ] && { OUT="$OUT" "$gpuref" --fixtures "$dir/fixtures" >/dev/null 2>&1; record test-gpuref $?; tail -n 2 "$OUT/gpuref-test.log"; } ;;
    sanitize)
        command -v compute-sanitizer >/dev/null || { echo "no compute-sanitizer"; record sanitize 3; continue; }
        [ -n "$test_cuda" ] || continue
        compute-sanitizer --tool memcheck --error-exitcode 9 "$test_cuda" --small --plain cuda-flash >"$OUT/memcheck-flash.log" 2>&1
        record memcheck-cuda-flash $?
        compute-sanitizer --tool memcheck --error-exitcode 9 "$test_cuda" --small cuda-naive >"$OUT/memcheck-naive.log" 2>&1
        record memcheck-cuda-naive $?
        compute-sanitizer --tool racecheck --error-exitcode 9 "$test_cuda" --small --plain cuda-flash >"$OUT/racecheck-flash.log" 2>&1
        record racecheck-cuda-flash $?
        # racecheck does not see wgmma's shared-memory reads (async proxy): the mma.sync
        # kernels, which other GPUs run, are where it checks every barrier.
        ACD_NO_WGMMA=1 compute-sanitizer --tool racecheck --error-exitcode 9 "$test_cuda" --small --plain cuda-flash >"$OUT/racecheck-flash-mma-sync.log" 2>&1
        record racecheck-cuda-flash-mma-sync $?
        # The race mutant must be caught: racecheck reports hazards (exit 9 expected).
        compute-sanitizer --tool racecheck --error-exitcode 9 "$test_cuda" --small cuda-flash-mutant-race >"$OUT/racecheck-mut-race.log" 2>&1
        rc=$?
        grep -m3 -E "hazard|RACECHECK SUMMARY" "$OUT/racecheck-mut-race.log"
        if [ $rc -eq 9 ]; then record racecheck-catches-mut-race 0; else record racecheck-catches-mut-race 1; fi
        tail -n 2 "$OUT"/memcheck-*.log "$OUT"/racecheck-flash.log ;;
    fixtures)
        # The regression corpus on the CUDA kernels (cases outside their claims are skipped).
        if [ -d "$dir/fixtures" ]; then
            for k in cuda-flash cuda-naive; do
                "$attncheck" run "$dir/fixtures" --kernel "$k" >"$OUT/fixtures-$k.log" 2>&1
                record "fixtures-$k" $?
                grep -E "^(FAIL|ERROR)|cases, " "$OUT/fixtures-$k.log" | head -n 20
            done
        fi ;;
    exec)
        # A kernel that is not C: PyTorch's SDPA through --exec-persistent (plugins/torch_sdpa_kernel.py,
        # on the GPU when torch sees one); CI skips it (torch is too large to install there).
        kdir="$here/plugins"; [ -f "$kdir/torch_sdpa_kernel.py" ] || kdir="$dir/plugins"
        if ! python3 -c 'import torch, numpy' 2>/dev/null; then echo "no PyTorch/numpy: exec step skipped"; record exec-skipped 0; continue; fi
        "$attncheck" fuzz --exec-persistent "python3 $kdir/torch_sdpa_kernel.py --serve" --caps "$kdir/torch_sdpa_kernel.caps.json" \
            --seed 1 --cases "${EXEC_CASES:-300}" --quiet >"$OUT/exec-torch.log" 2>&1
        rc=$?
        # PyTorch's SDPA is a third-party kernel: its failures are findings (README, "Kernels that are
        # not C"), so the step fails only when attncheck could not judge it (exit 2 or 3).
        if [ $rc -le 1 ]; then record exec-torch-sdpa 0; else record exec-torch-sdpa $rc; fi
        grep -m1 ' cases, ' "$OUT/exec-torch.log"; grep -A2 '^distinct failures' "$OUT/exec-torch.log" ;;
    sdpa)
        # The check door on third-party kernels: PyTorch's SDPA backends, dumped by
        # ci/sdpa_dump.py and judged by `attncheck check` (each must exit 0).
        script="$here/ci/sdpa_dump.py"; [ -f "$script" ] || script="$dir/ci/sdpa_dump.py"
        if ! python3 -c 'import torch' 2>/dev/null; then echo "no PyTorch: sdpa step skipped"; record sdpa-skipped 0; continue; fi
        i=0
        while read -r spec; do
            i=$((i + 1)); case_dir="${SDPA_DIR:-/tmp/attncheck-sdpa}/$i"
            # shellcheck disable=SC2086  # spec is a list of options
            if python3 "$script" --out "$case_dir" --seed "$i" $spec >"$OUT/sdpa-$i.log" 2>&1; then
                line=$(tail -n 1 "$case_dir/check.txt")
                # shellcheck disable=SC2086
                "$attncheck" ${line#attncheck } >>"$OUT/sdpa-$i.log" 2>&1
                rc=$?
                if [ $rc -eq 0 ] && [ -f "$case_dir/check_wrong.txt" ]; then # a flag planted wrong must fail (1)
                    wrong=$(tail -n 1 "$case_dir/check_wrong.txt")
                    # shellcheck disable=SC2086
                    "$attncheck" ${wrong#attncheck } >>"$OUT/sdpa-$i.log" 2>&1
                    wrc=$?
                    echo "sdpa $i: the wrong flag gives rc=$wrc (1 expected)"
                    [ $wrc -eq 1 ] || rc=1
                fi
            else rc=3; fi
            echo "sdpa $i ($spec): rc=$rc"
            grep -E "^(PASS|FAIL|ERROR)" "$OUT/sdpa-$i.log" | head -n 3
            record "sdpa-$i" $rc
        done <<'SPECS'
--dtype bf16 --backend flash --causal --nq 300 --d 128
--dtype f16 --backend flash --hq 8 --hkv 2 --nq 257 --nk 511
--dtype f16 --backend efficient --mask-keep 0.7 --nq 129
--dtype f32 --backend efficient --nq 200 --d 96
--dtype bf16 --backend cudnn --causal --nq 512 --d 128
--dtype f16 --backend math --nq 64 --nk 700
--dtype f32 --backend math --causal --nq 100 --nk 300
--dtype bf16 --backend efficient --bias 1h --nq 257 --nk 300 --d 64 --wrong
--dtype f16 --backend efficient --bias bh --bias-inf 0.2 --nq 129 --d 128 --wrong
--dtype f32 --backend math --bias b1 --hq 8 --hkv 2 --nq 100 --nk 200 --d 64 --wrong
--dtype bf16 --backend default --bias 11 --nq 512 --d 128 --wrong
--dtype bf16 --backend flash --hq 8 --hkv 2 --nq 300 --d 128 --causal --wrong
--api flex --compile --dtype bf16 --softcap 30 --nq 300 --nk 500 --d 128 --wrong
--api flex --compile --dtype f16 --softcap 50 --causal --hq 8 --hkv 2 --nq 256 --d 64 --wrong
--api flex --compile --dtype bf16 --alibi --hq 8 --nq 300 --nk 400 --d 64 --wrong
--api flex --compile --dtype f32 --softcap 5 --alibi --hq 6 --hkv 3 --nq 129 --nk 257 --d 64 --wrong
--api flex --dtype bf16 --softcap 30 --alibi --nq 64 --nk 100 --d 64 --wrong
SPECS
        ;;
    fuzz)
        if has_cmd fuzz; then
            "$attncheck" fuzz --kernel cuda-flash ${FUZZ_ARGS:---cases 2000} >"$OUT/fuzz-cuda-flash.log" 2>&1
            record fuzz-cuda-flash $?
            tail -n 5 "$OUT/fuzz-cuda-flash.log"
            # cuda-naive, the naive foil, fails where naive attention does: at the dtype's extremes (O from P
            # rounded to the dtype overflows where the exact O rounds to the largest finite value; its mean error
            # exceeds 1.5x the CPU naive baseline's on huge and tiny inputs; README, "cuda-naive and the GPU tier's own
            # test"). Those failures are expected; any other is not (ci/fuzz_expected.py).
            "$attncheck" fuzz --kernel cuda-naive ${FUZZ_ARGS:---cases 2000} --json "$OUT/fuzz-cuda-naive.jsonl" \
                >"$OUT/fuzz-cuda-naive.log" 2>&1
            rc=$?
            if [ "$rc" -eq 1 ]; then
                python3 "$here/ci/fuzz_expected.py" "$OUT/fuzz-cuda-naive.jsonl" --allow O:overflow 'dist=huge\(' \
                    --allow O:vs-naive-mean 'dist=(huge|tiny)\(' >"$OUT/fuzz-cuda-naive-expected.log" 2>&1
                rc=$?
                tail -n 1 "$OUT/fuzz-cuda-naive-expected.log"
            fi
            record fuzz-cuda-naive "$rc"
            tail -n 5 "$OUT/fuzz-cuda-naive.log"
        else
            echo "attncheck fuzz not available in this build: skipped"; record fuzz-skipped 0
        fi ;;
    campaign)
        procs=${CAMPAIGN_PROCS:-8}; per=${CAMPAIGN_CASES:-2600}
        pids=()
        for i in $(seq 1 "$procs"); do
            OPENBLAS_NUM_THREADS=2 timeout "${CAMPAIGN_LIMIT_S:-480}" "$attncheck" fuzz --kernel cuda-flash --seed $((1000 + i)) --cases "$per" \
                --quiet --json "$OUT/campaign-flash-$i.jsonl" >"$OUT/campaign-flash-$i.log" 2>&1 & pids+=($!)
        done
        OPENBLAS_NUM_THREADS=2 timeout "${CAMPAIGN_LIMIT_S:-480}" "$attncheck" fuzz --kernel cuda-flash --seed 2001 --cases $((per / 10)) --max-seqlen 4096 \
            --quiet --json "$OUT/campaign-flash-long.jsonl" >"$OUT/campaign-flash-long.log" 2>&1 & pids+=($!)
        OPENBLAS_NUM_THREADS=2 timeout "${CAMPAIGN_LIMIT_S:-480}" "$attncheck" fuzz --kernel cuda-naive --seed 3001 --cases "$per" \
            --quiet --json "$OUT/campaign-naive.jsonl" >"$OUT/campaign-naive.log" 2>&1 & pids+=($!)
        rc=0
        for p in "${pids[@]}"; do wait "$p" || rc=$?; done
        record campaign $rc
        tail -n 2 "$OUT"/campaign-*.log
        script="$here/ci/campaign_report.py"; [ -f "$script" ] || script="$dir/ci/campaign_report.py"
        python3 "$script" --title "Accuracy report: cuda-flash and cuda-naive on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" \
            --machine "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1); $(uname -sr)" \
            --command "CAMPAIGN_PROCS=$procs CAMPAIGN_CASES=$per GPU_STEPS=campaign ci/gpu-run.sh" \
            "$OUT/accuracy-report.md" "$OUT"/campaign-*.jsonl
        record campaign-report $?
        gzip -f "$OUT"/campaign-*.jsonl ;;
    plugins)
        # A CUDA plugin that faults the device on purpose: a kernel failure (exit 1, kind
        # kernel:device-fault) naming the plugin, never an environment error (exit 3); a campaign
        # of it goes on, each case in a fresh worker with a fresh CUDA context (20 failures, 0 errors).
        so=$(ls "$dir"/libattncheck-faulting-cuda-plugin.so "$dir"/plugins/libattncheck-faulting-cuda-plugin.so 2>/dev/null | head -n 1)
        if [ -n "$so" ]; then
            "$attncheck" run --plugin "$so" --kernel faulting-cuda \
                --case 'v1 seed=1 b=1 hq=2 hkv=2 nq=64 nk=64 d=64 dtype=f16 mask=none layout=bhsd dist=normal(0,1) scale=auto' \
                >"$OUT/plugin-fault.log" 2>&1
            rc=$?
            cat "$OUT/plugin-fault.log"
            if [ $rc -eq 1 ] && grep -q "\[kernel:device-fault\] device-fault: kernel faulting-cuda (plugin $so)" "$OUT/plugin-fault.log"
            then record plugin-fault-is-device-fault 0; else record plugin-fault-is-device-fault 1; fi
            "$attncheck" fuzz --plugin "$so" --kernel faulting-cuda --seed 1 --cases 20 --shrink-steps 0 --quiet \
                >"$OUT/plugin-fault-campaign.log" 2>&1
            rc=$?
            tail -n 3 "$OUT/plugin-fault-campaign.log"
            if [ $rc -eq 1 ] && grep -q "faulting-cuda: 20 cases, 0 passed, 20 failed, 0 errors" "$OUT/plugin-fault-campaign.log" &&
               [ "$(grep -c '^FAIL faulting-cuda \[kernel:device-fault\]' "$OUT/plugin-fault-campaign.log")" -eq 20 ]
            then record plugin-fault-campaign-goes-on 0; else record plugin-fault-campaign-goes-on 1; fi
        fi
        # The device guard zones and the input check: CUDA kernels that write 64 floats past O, or flip
        # a bit of Q, on the device (no fault: the stores land in the guards) must be named (exit 1).
        for kind in o-past modify-q; do
            so=$(ls "$dir"/libattncheck-hostile-cuda-$kind.so "$dir"/plugins/libattncheck-hostile-cuda-$kind.so 2>/dev/null | head -n 1)
            [ -n "$so" ] || { echo "libattncheck-hostile-cuda-$kind.so is not in $dir"; record "device-guard-$kind" 1; continue; }
            "$attncheck" run --plugin "$so" --kernel hostile-cuda-$kind \
                --case 'v1 seed=1 b=2 hq=2 hkv=2 nq=40 nk=70 d=64 dtype=f32 mask=none layout=bhsd' >"$OUT/plugin-$kind.log" 2>&1
            rc=$?
            cat "$OUT/plugin-$kind.log"
            want='\[kernel:out-of-bounds-write\] .*forward wrote past the end of O: elements end+0 to end+63'
            [ $kind = modify-q ] && want='\[kernel:input-modified\] .*forward changed 1 element of Q, the first at element 0 '
            if [ $rc -eq 1 ] && grep -q "$want" "$OUT/plugin-$kind.log"; then record "device-guard-$kind" 0
            else record "device-guard-$kind" 1; fi
        done
        # The isolation's cost on the GPU: cases/s of the same campaign in a worker and in-process.
        for mode in isolated in-process; do
            extra=; [ $mode = in-process ] && extra=--in-process
            "$attncheck" fuzz --kernel cuda-flash --seed 1 --cases 300 --quiet $extra >"$OUT/isolation-$mode.log" 2>&1
            record "isolation-cost-$mode" $?
            grep -m1 ' cases, ' "$OUT/isolation-$mode.log"
        done ;;
    prove)
        # Detection power: cuda-flash must pass, each cuda-flash-mutant-* must be caught.
        if has_cmd prove; then
            "$attncheck" prove --base cuda-flash ${PROVE_ARGS:---cases 300} --markdown "$OUT/prove-cuda.md" >"$OUT/prove-cuda.log" 2>&1
            record prove-cuda $?
            tail -n 12 "$OUT/prove-cuda.log"
        else
            echo "attncheck prove not available in this build: skipped"; record prove-skipped 0
        fi ;;
    fp8)
        # cuda-flash-fp8 (issue 17, not in the defaults): its attncheck-test-cuda cases (mutants must fail),
        # on the wgmma kernel (and its lockstep loop) and again on the CUDA-core one, memcheck, racecheck and synccheck
        # on the small ones, a fuzz campaign, prove (its two mutants caught), the fp8 vs bf16 bench rows.
        if [ -n "$test_cuda" ]; then
            "$test_cuda" cuda-flash-fp8 >"$OUT/fp8-test.log" 2>&1
            record fp8-test $?
            tail -n 14 "$OUT/fp8-test.log"
            # d = 64, 128, 256 run on wgmma (flash_fp8_sm90.cu); the same cases again on the CUDA-core kernel.
            ACD_NO_WGMMA=1 "$test_cuda" cuda-flash-fp8 >"$OUT/fp8-test-cuda-cores.log" 2>&1
            record fp8-test-cuda-cores $?
            tail -n 3 "$OUT/fp8-test-cuda-cores.log"
            # the lockstep main loop kept beside the default ping-pong (flash_fp8_sm90.cu)
            ACD_FP8_SCHED=0 "$test_cuda" cuda-flash-fp8 >"$OUT/fp8-test-lockstep.log" 2>&1
            record fp8-test-lockstep $?
            tail -n 1 "$OUT/fp8-test-lockstep.log"
            if command -v compute-sanitizer >/dev/null; then
                # racecheck and synccheck for the ping-pong's named barriers and shared stages
                for tool in memcheck racecheck synccheck; do
                    compute-sanitizer --tool $tool --error-exitcode 9 "$test_cuda" --small cuda-flash-fp8 >"$OUT/fp8-$tool.log" 2>&1
                    record "fp8-$tool" $?
                    tail -n 2 "$OUT/fp8-$tool.log"
                done
            fi
        fi
        if has_cmd fuzz; then
            "$attncheck" fuzz --kernel cuda-flash-fp8 --cases "${FP8_CASES:-3000}" >"$OUT/fp8-fuzz.log" 2>&1
            record fp8-fuzz $?
            tail -n 5 "$OUT/fp8-fuzz.log"
        fi
        if has_cmd prove; then
            "$attncheck" prove --base cuda-flash-fp8 --cases "${FP8_PROVE_CASES:-200}" --markdown "$OUT/fp8-prove.md" >"$OUT/fp8-prove.log" 2>&1
            record fp8-prove $?
            tail -n 12 "$OUT/fp8-prove.log"
        fi
        if [ -n "$test_cuda" ]; then
            "$test_cuda" --bench --fp8 2>&1 | tee "$OUT/fp8-bench.log"
            record fp8-bench "${PIPESTATUS[0]}"
        fi ;;
    decode)
        # cuda-decode (issue 16, not in the defaults): its attncheck-test-cuda cases (mutants must fail; again
        # with ACD_DEC_NO_PDL=1, the combine as a plain launch), memcheck, racecheck, synccheck on the small ones, the
        # decode fixtures, a decode-profile fuzz campaign, prove (its mutants caught), the bandwidth table and
        # PyTorch SDPA on the same shapes (the ratio in one visit).  DECODE_PARTS picks the parts (default all:
        # "test sanitize fixtures fuzz prove bench torch"), so a visit with a time limit can split them.
        parts=" ${DECODE_PARTS:-test sanitize fixtures fuzz prove bench torch} "
        if [ -n "$test_cuda" ] && [[ $parts == *" test "* ]]; then
            "$test_cuda" cuda-decode >"$OUT/decode-test.log" 2>&1
            record decode-test $?
            tail -n 16 "$OUT/decode-test.log"
            ACD_DEC_NO_PDL=1 "$test_cuda" cuda-decode >"$OUT/decode-test-no-pdl.log" 2>&1
            record decode-test-no-pdl $?
            tail -n 1 "$OUT/decode-test-no-pdl.log"
            "$test_cuda" cuda-decode-fp8 >"$OUT/decode-fp8-test.log" 2>&1
            record decode-fp8-test $?
            tail -n 12 "$OUT/decode-fp8-test.log"
            "$test_cuda" cuda-decode-mla >"$OUT/decode-mla-test.log" 2>&1
            record decode-mla-test $?
            tail -n 11 "$OUT/decode-mla-test.log"
        fi
        if [ -n "$test_cuda" ] && [[ $parts == *" sanitize "* ]] && command -v compute-sanitizer >/dev/null; then
            for tool in memcheck racecheck synccheck; do
                for k in cuda-decode cuda-decode-fp8 cuda-decode-mla; do
                    compute-sanitizer --tool $tool --error-exitcode 9 "$test_cuda" --small $k >"$OUT/$k-$tool.log" 2>&1
                    record "$k-$tool" $?
                    tail -n 2 "$OUT/$k-$tool.log"
                done
            done
        fi
        if [ -f "$dir/fixtures/decode.cases" ] && [[ $parts == *" fixtures "* ]]; then # outside its claims: skipped
            "$attncheck" run "$dir/fixtures/decode.cases" --kernel cuda-decode >"$OUT/decode-fixtures.log" 2>&1
            record decode-fixtures $?
            grep -E "^(FAIL|ERROR)|cases, " "$OUT/decode-fixtures.log" | head -n 10
            "$attncheck" run "$dir/fixtures/fp8.cases" --kernel cuda-decode-fp8 >"$OUT/decode-fp8-fixtures.log" 2>&1
            record decode-fp8-fixtures $?
            grep -E "^(FAIL|ERROR)|cases, " "$OUT/decode-fp8-fixtures.log" | head -n 10
            "$attncheck" run "$dir/fixtures/decode.cases" --kernel cuda-decode-mla >"$OUT/decode-mla-fixtures.log" 2>&1
            record decode-mla-fixtures $?
            grep -E "^(FAIL|ERROR)|cases, " "$OUT/decode-mla-fixtures.log" | head -n 10
        fi
        if has_cmd fuzz && [[ $parts == *" fuzz "* ]]; then
            # shellcheck disable=SC2086  # DECODE_FUZZ_ARGS is a list of options
            "$attncheck" fuzz --kernel cuda-decode --profile decode --cases "${DECODE_CASES:-3000}" --jobs 8 ${DECODE_FUZZ_ARGS:-} \
                --json "$OUT/decode-fuzz.jsonl" >"$OUT/decode-fuzz.log" 2>&1
            record decode-fuzz $?
            tail -n 5 "$OUT/decode-fuzz.log"
            # shellcheck disable=SC2086
            "$attncheck" fuzz --kernel cuda-decode-fp8 --profile decode --cases "${DECODE_FP8_CASES:-1000}" --jobs 8 \
                ${DECODE_FUZZ_ARGS:-} --json "$OUT/decode-fp8-fuzz.jsonl" >"$OUT/decode-fp8-fuzz.log" 2>&1
            record decode-fp8-fuzz $?
            tail -n 5 "$OUT/decode-fp8-fuzz.log"
            # shellcheck disable=SC2086
            "$attncheck" fuzz --kernel cuda-decode-mla --profile decode --cases "${DECODE_MLA_CASES:-1000}" --jobs 8 \
                ${DECODE_FUZZ_ARGS:-} --json "$OUT/decode-mla-fuzz.jsonl" >"$OUT/decode-mla-fuzz.log" 2>&1
            record decode-mla-fuzz $?
            tail -n 5 "$OUT/decode-mla-fuzz.log"
        fi
        if has_cmd prove && [[ $parts == *" prove "* ]]; then
            # every cuda- mutant runs (the family prefix); the base's clean cases: DECODE_PROVE_CLEAN
            "$attncheck" prove --base cuda-decode --cases "${DECODE_PROVE_CASES:-200}" --clean-cases "${DECODE_PROVE_CLEAN:-300}" \
                --markdown "$OUT/decode-prove.md" >"$OUT/decode-prove.log" 2>&1
            record decode-prove $?
            tail -n 18 "$OUT/decode-prove.log"
        fi
        if [ -n "$test_cuda" ] && [[ $parts == *" bench "* ]]; then
            # shellcheck disable=SC2086
            "$test_cuda" --bench --decode ${BENCH_ARGS:-} 2>&1 | tee "$OUT/decode-bench.log"
            record decode-bench "${PIPESTATUS[0]}"
            # shellcheck disable=SC2086
            "$test_cuda" --bench --decode --fp8 ${BENCH_ARGS:-} 2>&1 | tee "$OUT/decode-fp8-bench.log"
            record decode-fp8-bench "${PIPESTATUS[0]}"
            # shellcheck disable=SC2086
            "$test_cuda" --bench --decode --mla ${BENCH_ARGS:-} 2>&1 | tee "$OUT/decode-mla-bench.log"
            record decode-mla-bench "${PIPESTATUS[0]}"
        fi
        script="$here/ci/torch_decode_bench.py"; [ -f "$script" ] || script="$dir/ci/torch_decode_bench.py"
        if [[ $parts == *" torch "* ]]; then
            if python3 -c 'import torch' 2>/dev/null; then
                ours=; [ -f "$OUT/decode-bench.log" ] && ours="--ours $OUT/decode-bench.log"
                # shellcheck disable=SC2086
                python3 "$script" ${QUICK_TORCH:+--quick} $ours 2>&1 | tee "$OUT/decode-torch.log"
                record decode-torch "${PIPESTATUS[0]}"
                if [ -n "$ours" ]; then # the issue's two speed goals, judged from the two tables
                    python3 "$(dirname "$script")/decode_goals.py" "$OUT/decode-bench.log" "$OUT/decode-torch.log" \
                        2>&1 | tee "$OUT/decode-goals.md"
                    record decode-goals "${PIPESTATUS[0]}"
                fi
            else
                echo "no PyTorch: decode torch bench skipped"; record decode-torch-skipped 0
            fi
        fi
        audit="$here/ci/decode_split_audit.py"; [ -f "$audit" ] || audit="$dir/ci/decode_split_audit.py"
        if has_cmd bench && [[ $parts == *" audit "* ]]; then # the split rule re-measured on this device
            python3 "$audit" --attncheck "$attncheck" 2>&1 | tee "$OUT/decode-split-audit.log"
            record decode-split-audit "${PIPESTATUS[0]}"
            python3 "$audit" --attncheck "$attncheck" --fp8 2>&1 | tee "$OUT/decode-fp8-split-audit.log"
            record decode-fp8-split-audit "${PIPESTATUS[0]}"
        fi ;;
    bench)
        if has_cmd bench; then "$attncheck" bench ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log"
        else "$test_cuda" --bench ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log"; fi
        record bench "${PIPESTATUS[0]}" ;;
    torch)
        script="$here/ci/torch_sdpa_bench.py"
        [ -f "$script" ] || script="$dir/ci/torch_sdpa_bench.py"
        if python3 -c 'import torch' 2>/dev/null; then
            python3 "$script" ${QUICK_TORCH:+--quick} --ours "$OUT/bench.log" 2>&1 | tee "$OUT/torch-sdpa.log"
            record torch-sdpa "${PIPESTATUS[0]}"
        else
            echo "no PyTorch: torch step skipped"; record torch-skipped 0
        fi ;;
    *) echo "unknown step $step"; record "$step" 2 ;;
    esac
done
cat "$OUT/summary.txt"
exit $status
