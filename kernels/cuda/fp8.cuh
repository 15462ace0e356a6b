// kernels/cuda/fp8.cuh — what cuda-flash-fp8's two forwards share: where each
// tensor's descale factors sit (ref/fp8.c's ac_descale_index on the device),
// and the entry of the tensor-core forward (flash_fp8_sm90.cu), which
// flash_fp8.cu's entry point calls where the shape allows it.
#pragma once
#include "common.cuh"

struct fp8_descale {
    const float *q, *k, *v; // device copies
    int rows; // AC_DESCALE_TENSOR, AC_DESCALE_HEAD or N rows per factor
    int blocks_q, blocks_k; // factors per head with rows > 0
};

__device__ __forceinline__ long long fp8_descale_at(const acd_params &p, const fp8_descale &ds, bool is_q, int b, int h,
                                                    int s)
{
    if (ds.rows == AC_DESCALE_TENSOR)
        return 0;
    if (ds.rows == AC_DESCALE_HEAD)
        return (long long)b * p.Hkv + (is_q ? h / p.group : h);
    const int heads = is_q ? p.Hq : p.Hkv, blocks = is_q ? ds.blocks_q : ds.blocks_k;
    return ((long long)b * heads + h) * blocks + s / ds.rows;
}

// The wgmma forward takes the problem (acd_fp8_wg_usable); ACD_NO_WGMMA=1 keeps
// every problem on flash_fp8.cu's CUDA-core kernel.
bool acd_fp8_wg_usable(const acd_params &p, const fp8_descale &ds, const ac_fwd_args *a);
int acd_fp8_wg_forward(const acd_params &p, const fp8_descale &ds, bool e5m2, ac_dtype out, const ac_fwd_args *a,
                       ac_err *err);
