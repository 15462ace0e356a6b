"""ci/torch_timing.py — the timing the PyTorch comparison scripts share
(torch_sdpa_bench.py, torch_decode_bench.py, torch_fp8_probe.py): the median
of CUDA-event times of fn after one warm-up call."""
import statistics


def median_ms(torch, fn, reps, before=None):
    """Median ms of `reps` timed calls of fn; before() (an L2 flush, say) runs
    ahead of each, outside the timed span."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        if before is not None:
            before()
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)
