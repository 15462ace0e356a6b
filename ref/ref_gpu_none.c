/* ref/ref_gpu_none.c — the GPU reference tier in a build without CUDA: there
 * is no device, so asking for one is an environment error (exit status 3),
 * never a crash.  The memory plan and the CPU spot check (ref/cuda/plan.c,
 * spot_check.c) are built either way. */
#include "ref_gpu.h"

#define NO_CUDA "built without CUDA"

int ref_gpu_available(ac_err *why) { return ac_fail(why, AC_ERR_ENV, NO_CUDA); }

int ref_gpu_warm_up(ac_err *err) { return ac_fail(err, AC_ERR_ENV, NO_CUDA); }

int ref_gpu_reference(const ac_problem *p, ac_dtype t, const void *q, const void *k, const void *v, const void *d_o,
                      const ref_gpu_opts *opts, const ref_gpu_outputs *out, ref_gpu_stats *stats, ac_err *err)
{
    (void)t, (void)q, (void)k, (void)v, (void)d_o, (void)opts, (void)out;
    if (stats)
        *stats = (ref_gpu_stats){0};
    if (p && ref_gpu_supports(p, err) != AC_OK) /* what a CUDA build would say too */
        return AC_ERR_INPUT;
    return ac_fail(err, AC_ERR_ENV, "GPU reference: " NO_CUDA);
}
