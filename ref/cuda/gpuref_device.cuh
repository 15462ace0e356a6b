// ref/cuda/gpuref_device.cuh — private to ref/cuda's device code: the pieces
// every kernel of the GPU reference shares, each written once.
//   - refg_geom and refg_visible_range: ref/problem.c's visibility rule
//     (lengths, causal/window in either alignment) for one batch;
//   - refg_widen: a dtype's bit pattern to its exact value;
//   - refg_round: f32 to the dtype and back, round to nearest even (the naive's
//     roundings);
//   - block-wide sum and max over the threads of a row's CTA.
#ifndef ATTNCHECK_GPUREF_DEVICE_CUH
#define ATTNCHECK_GPUREF_DEVICE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

extern "C" {
#include "../ref.h"
}

// The current (batch, KV head) group's problem as the kernels see it.
struct refg_geom {
    int nq, nk; // this batch's lengths: rows i >= nq, keys j >= nk are padding
    int head_dim;
    int windowed;
    int window_left, window_right; // >= 0 or AC_WINDOW_INF
    int bottom_right; // the window's alignment
};

// ac_visible_range for row i: keys [lo, hi) before the dense mask (hi <= lo: none).
__host__ __device__ inline void refg_visible_range(const refg_geom &g, int i, int *lo, int *hi)
{
    *lo = 0;
    *hi = i < g.nq ? g.nk : 0;
    if (!g.windowed || *hi == 0)
        return;
    // 64 bits: i + nk - nq and the window bounds may pass INT_MAX.
    long long centre = (long long)i + (g.bottom_right ? g.nk - g.nq : 0);
    if (g.window_left != AC_WINDOW_INF && centre - g.window_left > *lo)
        *lo = centre - g.window_left > g.nk ? g.nk : (int)(centre - g.window_left);
    if (g.window_right != AC_WINDOW_INF && centre + g.window_right + 1 < *hi)
        *hi = centre + g.window_right + 1 < 0 ? 0 : (int)(centre + g.window_right + 1);
}

// Row r of a block starting at query row i0 and key jlo, C keys wide: the
// columns [*c_lo, *c_hi) inside the row's visible range.
__device__ inline void refg_row_cols(const refg_geom &g, int i0, int jlo, int cols, int r, int *c_lo, int *c_hi)
{
    int lo, hi;
    refg_visible_range(g, i0 + r, &lo, &hi);
    *c_lo = lo - jlo > 0 ? lo - jlo : 0;
    *c_hi = hi - jlo < cols ? hi - jlo : cols;
}

template <int T> __device__ inline double refg_widen(const void *bits, size_t at);
template <> __device__ inline double refg_widen<AC_F32>(const void *bits, size_t at)
{
    return (double)__uint_as_float(((const uint32_t *)bits)[at]);
}
template <> __device__ inline double refg_widen<AC_F16>(const void *bits, size_t at)
{
    return (double)__half2float(__ushort_as_half(((const uint16_t *)bits)[at]));
}
template <> __device__ inline double refg_widen<AC_BF16>(const void *bits, size_t at)
{
    return (double)__uint_as_float((uint32_t)((const uint16_t *)bits)[at] << 16);
}

template <int T> __device__ inline float refg_round(float x);
template <> __device__ inline float refg_round<AC_F32>(float x) { return x; }
template <> __device__ inline float refg_round<AC_F16>(float x) { return __half2float(__float2half_rn(x)); }
template <> __device__ inline float refg_round<AC_BF16>(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// Block-wide reductions for CTAs of a multiple of 32 threads, at most 1024.
// Every thread gets the result; red holds 32 values of scratch.
template <typename V> __device__ inline V refg_warp_sum(V x)
{
    for (int off = 16; off > 0; off >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, off);
    return x;
}
template <typename V> __device__ inline V refg_warp_max(V x)
{
    for (int off = 16; off > 0; off >>= 1) {
        V y = __shfl_xor_sync(0xffffffffu, x, off);
        x = y > x ? y : x;
    }
    return x;
}
template <typename V> __device__ inline V refg_block_sum(V x, V *red)
{
    x = refg_warp_sum(x);
    __syncthreads(); // red may still be read from a previous reduction
    if (threadIdx.x % 32 == 0)
        red[threadIdx.x / 32] = x;
    __syncthreads();
    V total = 0;
    for (int w = 0; w < (int)blockDim.x / 32; w++)
        total += red[w];
    return total;
}
template <typename V> __device__ inline V refg_block_max(V x, V *red)
{
    x = refg_warp_max(x);
    __syncthreads();
    if (threadIdx.x % 32 == 0)
        red[threadIdx.x / 32] = x;
    __syncthreads();
    V best = red[0];
    for (int w = 1; w < (int)blockDim.x / 32; w++)
        best = red[w] > best ? red[w] : best;
    return best;
}

// Threads of a row CTA for C columns: a multiple of 32, at most 256.
inline int refg_row_threads(int cols)
{
    int t = (cols + 31) / 32 * 32;
    return t < 256 ? t : 256;
}

#endif
