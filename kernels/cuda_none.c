/* kernels/cuda_none.c — the CUDA kernels in a build without CUDA.
 *
 * They are still listed, from the same table as the CUDA build
 * (kernels/cuda/family.h), so `attncheck list` shows what a CUDA build offers,
 * mutants included, and `--kernel cuda-flash` fails cleanly with exit status 3
 * ("built without CUDA") instead of "no such kernel".  Nothing here can run. */
#include <stdio.h>

#include "cuda/family.h"

#define NO_CUDA "built without CUDA"

static int not_built(const ac_kernel *self, ac_err *err)
{
    (void)self;
    return ac_fail(err, AC_ERR_ENV, NO_CUDA);
}

static int no_forward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_fwd_args *a, ac_err *err)
{
    (void)p, (void)t, (void)a;
    return ac_fail(err, AC_ERR_ENV, "%s: " NO_CUDA, self->name);
}

static int no_backward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_bwd_args *a, ac_err *err)
{
    (void)p, (void)t, (void)a;
    return ac_fail(err, AC_ERR_ENV, "%s: " NO_CUDA, self->name);
}

/* The roles of family.h: a backward where the CUDA build has one. */
#define RUN_flash .forward = no_forward, .backward = no_backward
#define RUN_mutant .forward = no_forward, .backward = NULL
#define RUN_naive .forward = no_forward, .backward = NULL
#define RUN_decode .forward = no_forward, .backward = NULL
#define RUN_decode_fp8 .forward = no_forward, .backward = NULL
#define RUN_decode_mla .forward = no_forward, .backward = NULL
#define RUN_fp8 .forward = no_forward, .backward = NULL

#define DESCRIBE(id, name_, role, mutant_, description_) \
    static const ac_kernel id = {.name = name_, \
                                 .description = description_ " (" NO_CUDA ")", \
                                 .caps = ACD_CAPS_##role, \
                                 .device = AC_DEV_CUDA, \
                                 .memory = AC_MEM_CUDA, \
                                 .available = not_built, \
                                 RUN_##role, \
                                 .ctx = NULL};
ACD_FAMILY(DESCRIBE)
ACD_FP8_FAMILY(DESCRIBE)
ACD_DECODE_FAMILY(DESCRIBE)

#define ADDRESS(id, ...) &id,

size_t ac_cuda_kernels(const ac_kernel **out, size_t max)
{
    static const ac_kernel *const all[] = {ACD_FAMILY(ADDRESS) ACD_FP8_FAMILY(ADDRESS) ACD_DECODE_FAMILY(ADDRESS)};
    size_t n = 0;
    for (; n < sizeof all / sizeof all[0] && n < max; n++)
        out[n] = all[n];
    return n;
}

int ac_cuda_bench(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "attncheck bench: " NO_CUDA "\n");
    return AC_ERR_ENV;
}
