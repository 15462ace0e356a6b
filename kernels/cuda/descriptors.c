/* kernels/cuda/descriptors.c — the CUDA kernel descriptors: the rows of
 * family.h (cuda-flash, cuda-naive and the planted-bug mutants of cuda-flash)
 * with their CUDA entry points. */
#include "acd.h"

static int cuda_available(const ac_kernel *self, ac_err *err)
{
    (void)self;
    return ac_cuda_present(err) ? AC_OK : AC_ERR_ENV;
}

static int flash_forward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_fwd_args *a, ac_err *err)
{
    return acd_flash_forward(p, t, a, *(const int *)self->ctx, err);
}

static int flash_backward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_bwd_args *a, ac_err *err)
{
    (void)self;
    return acd_flash_backward(p, t, a, err);
}

static int naive_forward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_fwd_args *a, ac_err *err)
{
    (void)self;
    return acd_naive_forward(p, t, a, err);
}

static int fp8_forward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_fwd_args *a, ac_err *err)
{
    return acd_flash_fp8_forward(p, t, a, *(const int *)self->ctx, err);
}

static int decode_forward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_fwd_args *a, ac_err *err)
{
    return acd_decode_forward(p, t, a, *(const int *)self->ctx, err);
}

static int decode_fp8_forward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_fwd_args *a, ac_err *err)
{
    return acd_decode_fp8_forward(p, t, a, *(const int *)self->ctx, err);
}

static int decode_mla_forward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_fwd_args *a, ac_err *err)
{
    return acd_decode_mla_forward(p, t, a, *(const int *)self->ctx, err);
}

/* The entry points of each role of family.h. */
#define RUN_flash .forward = flash_forward, .backward = flash_backward
#define RUN_mutant .forward = flash_forward, .backward = NULL
#define RUN_naive .forward = naive_forward, .backward = NULL
#define RUN_decode .forward = decode_forward, .backward = NULL
#define RUN_decode_fp8 .forward = decode_fp8_forward, .backward = NULL
#define RUN_decode_mla .forward = decode_mla_forward, .backward = NULL
#define RUN_fp8 .forward = fp8_forward, .backward = NULL

/* ctx: the row's ACD_MUT_* id. */
#define DESCRIBE(id, name_, role, mutant_, description_) \
    static const int id##_mutant = mutant_; \
    static const ac_kernel id = {.name = name_, \
                                 .description = description_, \
                                 .caps = ACD_CAPS_##role, \
                                 .device = AC_DEV_CUDA, \
                                 .memory = AC_MEM_CUDA, \
                                 .available = cuda_available, \
                                 RUN_##role, \
                                 .ctx = &id##_mutant};
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
