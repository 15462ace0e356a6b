/* kernels/cuda_none.c — the CUDA kernels in a build without CUDA.
 *
 * They are still listed, so `attncheck list` shows what a CUDA build offers and
 * `--kernel cuda-flash` fails cleanly with exit status 3 ("built without CUDA")
 * instead of "no such kernel".  Their capabilities are those of the CUDA build
 * (kernels/cuda/descriptors.c); nothing here can run. */
#include <stdio.h>

#include "kernel.h"

#define NO_CUDA "built without CUDA"
#define ALL_DTYPES ((1u << AC_F32) | (1u << AC_F16) | (1u << AC_BF16))
#define BOTH_LAYOUTS ((1u << AC_LAYOUT_BHSD) | (1u << AC_LAYOUT_BSHD))

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

static const ac_kernel cuda_flash = {
    .name = "cuda-flash",
    .description = "FlashAttention-2 on tensor cores, fused forward and backward (" NO_CUDA ")",
    .caps = {.dtypes = ALL_DTYPES, .head_dims = {32, 64, 96, 128}, .n_head_dims = 4, .max_head_dim = 128,
             .masks = AC_MASKCAP_ALL, .layouts = BOTH_LAYOUTS, .gqa = true, .varlen = true, .backward = true,
             .max_seqlen = 0},
    .device = AC_DEV_CUDA, .memory = AC_MEM_CUDA,
    .available = not_built, .forward = no_forward, .backward = no_backward, .ctx = NULL,
};

static const ac_kernel cuda_naive = {
    .name = "cuda-naive",
    .description = "three kernels: S = QK^T, masked softmax, O = PV; S and P in device memory (" NO_CUDA ")",
    .caps = {.dtypes = ALL_DTYPES, .n_head_dims = 0, .max_head_dim = 256, .masks = AC_MASKCAP_ALL,
             .layouts = BOTH_LAYOUTS, .gqa = true, .varlen = true, .backward = false, .max_seqlen = 16384},
    .device = AC_DEV_CUDA, .memory = AC_MEM_CUDA,
    .available = not_built, .forward = no_forward, .backward = NULL, .ctx = NULL,
};

size_t ac_cuda_kernels(const ac_kernel **out, size_t max)
{
    const ac_kernel *all[] = {&cuda_flash, &cuda_naive};
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
