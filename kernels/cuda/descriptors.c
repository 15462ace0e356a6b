/* kernels/cuda/descriptors.c — the CUDA kernel descriptors: cuda-flash,
 * cuda-naive and the planted-bug mutants of cuda-flash. */
#include "acd.h"

static int cuda_available(const ac_kernel *self, ac_err *err)
{
    (void)self;
    return ac_cuda_present(err) ? AC_OK : AC_ERR_ENV;
}

static int flash_forward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_fwd_args *a, ac_err *err)
{
    int mutant = self->ctx ? *(const int *)self->ctx : ACD_MUT_NONE;
    return acd_flash_forward(p, t, a, mutant, err);
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

#define ALL_DTYPES ((1u << AC_F32) | (1u << AC_F16) | (1u << AC_BF16))
#define BOTH_LAYOUTS ((1u << AC_LAYOUT_BHSD) | (1u << AC_LAYOUT_BSHD))

/* Tensor-core tiles are instantiated for 32, 64, 96 and 128; d = 256 (and f32 at
 * every d) runs the CUDA-core kernels.  One list serves every dtype. */
#define FLASH_CAPS(bwd)                                                                \
    {                                                                                  \
        .dtypes = ALL_DTYPES, .head_dims = {32, 64, 96, 128, 256}, .n_head_dims = 5,   \
        .max_head_dim = 256, .masks = AC_MASKCAP_ALL, .layouts = BOTH_LAYOUTS,         \
        .gqa = true, .varlen = true, .backward = (bwd), .max_seqlen = 0,           \
    }

static const int mut_race = ACD_MUT_RACE, mut_skip = ACD_MUT_CAUSAL_SKIP, mut_tail = ACD_MUT_TAIL_UNMASKED;

static const ac_kernel cuda_flash = {
    .name = "cuda-flash",
    .description = "FlashAttention-2 on tensor cores (mma.sync m16n8k16, f32 accumulate; f32 on CUDA cores), fused forward and backward",
    .caps = FLASH_CAPS(true), .device = AC_DEV_CUDA, .memory = AC_MEM_CUDA,
    .available = cuda_available, .forward = flash_forward, .backward = flash_backward, .ctx = NULL,
};

static const ac_kernel cuda_naive = {
    .name = "cuda-naive",
    .description = "three kernels: S = QK^T (cuBLAS, f32), masked softmax, O = PV (cuBLAS); S and P in device memory",
    .caps = {.dtypes = ALL_DTYPES, .n_head_dims = 0, .max_head_dim = 256, .masks = AC_MASKCAP_ALL,
             .layouts = BOTH_LAYOUTS, .gqa = true, .varlen = true, .backward = false, .max_seqlen = 16384},
    .device = AC_DEV_CUDA, .memory = AC_MEM_CUDA,
    .available = cuda_available, .forward = naive_forward, .backward = NULL, .ctx = NULL,
};

static const ac_kernel cuda_race = {
    .name = "cuda-flash-mutant-race",
    .description = "mutant: no __syncthreads before the next K/V tile overwrites the stage warps still read (a race)",
    .caps = FLASH_CAPS(false), .device = AC_DEV_CUDA, .memory = AC_MEM_CUDA,
    .available = cuda_available, .forward = flash_forward, .backward = NULL, .ctx = &mut_race,
};

static const ac_kernel cuda_skip = {
    .name = "cuda-flash-mutant-causal-skip",
    .description = "mutant: the causal/window tile range stops one K/V tile early (the diagonal tile is skipped)",
    .caps = FLASH_CAPS(false), .device = AC_DEV_CUDA, .memory = AC_MEM_CUDA,
    .available = cuda_available, .forward = flash_forward, .backward = NULL, .ctx = &mut_skip,
};

static const ac_kernel cuda_tail = {
    .name = "cuda-flash-mutant-tail-unmasked",
    .description = "mutant: keys past the sequence end in the last partial K/V tile are not masked",
    .caps = FLASH_CAPS(false), .device = AC_DEV_CUDA, .memory = AC_MEM_CUDA,
    .available = cuda_available, .forward = flash_forward, .backward = NULL, .ctx = &mut_tail,
};

size_t ac_cuda_kernels(const ac_kernel **out, size_t max)
{
    const ac_kernel *all[] = {&cuda_flash, &cuda_naive, &cuda_race, &cuda_skip, &cuda_tail};
    size_t n = sizeof all / sizeof all[0];
    for (size_t i = 0; i < n && i < max; i++)
        out[i] = all[i];
    return n < max ? n : max;
}
