// kernels/cuda/decode_combine.cu — cuda-decode's combine kernel (issue 16; the
// split kernel is decode.cu, the plan decode_host.cu): a warp per query row
// merges the splits' partials (O_s f32 normalised, and each split's running max
// m_s and sum l_s in log2 units):
//   M = max_s m_s, L = sum_s l_s 2^(m_s - M), O = sum_s (l_s 2^(m_s - M) / L) O_s,
//   LSE = M ln 2 + ln L (acd_lse: one rounding, as the unsplit kernels; storing
//   m_s + log2 l_s instead rounded twice per split and left bf16 LSE at 1.7x the
//   naive baseline's mean error on the H100).
// An empty split (m_s = -inf, l_s = 0) weighs 0 and its O_s is not read; a row whose
// splits are all empty gets O = 0, LSE = -inf without computing -inf - -inf.
// The no-rescale mutant weighs the non-empty splits alike.
#include "decode.cuh"
#include "softmax.cuh"

namespace
{

// Programmatic dependent launch: wait for the split kernel's completion and
// memory before reading a partial (a no-op when launched without the attribute).
__device__ __forceinline__ void dec_wait_for_splits()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

constexpr int DEC_COMBINE_WARPS = 4; // query rows (a warp each) per block

template <typename T, int D>
__global__ void __launch_bounds__(32 * DEC_COMBINE_WARPS)
    dec_combine_kernel(acd_dec_params d, T *__restrict__ O, float *__restrict__ LSE)
{
    __shared__ float sW[DEC_COMBINE_WARPS][ACD_DEC_MAX_SPLITS];
    dec_wait_for_splits();
    const acd_params &p = d.p;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, S = d.splits;
    const long long x = (long long)blockIdx.x * DEC_COMBINE_WARPS + warp;
    int b, h, i;
    if (x >= (long long)p.B * p.Hq * p.Nq || !acd_grid_row(p, x, b, h, i) || i >= acd_nq<false>(p, b))
        return; // padding rows: never compared (the whole warp leaves)
    const float2 *ml = reinterpret_cast<const float2 *>(d.lse_part) + x * S; // (m_s, l_s) per split
    float M = -INFINITY, sum = 0.f, live = 0.f;
    for (int s = lane; s < S; s += 32)
        M = fmaxf(M, ml[s].x);
    for (int k = 16; k > 0; k /= 2)
        M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, k));
    constexpr int COLS = D / 32;
    T *orow = O + acd_o_offset(p, b, h, i) + lane * COLS;
    if (M == -INFINITY) { // every split empty: no visible key
#pragma unroll
        for (int c = 0; c < COLS; c += 2)
            acd_tc<T>::store2(orow + c, 0.f, 0.f);
        if (lane == 0)
            LSE[x] = -INFINITY;
        return;
    }
    for (int s = lane; s < S; s += 32) {
        sum += ml[s].y * exp2f(ml[s].x - M); // an empty split: l_s = 0 (and m_s = -inf) adds 0
        live += ml[s].x > -INFINITY ? 1.f : 0.f;
    }
    for (int k = 16; k > 0; k /= 2) {
        sum += __shfl_xor_sync(0xffffffffu, sum, k);
        live += __shfl_xor_sync(0xffffffffu, live, k);
    }
    float *w = sW[warp];
    for (int s = lane; s < S; s += 32) // the no-rescale mutant: every non-empty split weighs the same
        w[s] = p.mutant == ACD_MUT_DEC_NO_RESCALE ? (ml[s].x > -INFINITY ? 1.f / live : 0.f)
                                                  : ml[s].y * exp2f(ml[s].x - M) / sum;
    __syncwarp();
    float acc[COLS] = {};
    for (int s = 0; s < S; ++s) {
        const float ws = w[s];
        if (ws == 0.f) // an empty split (and its O_s) is not read
            continue;
        const float *op = d.o_part + (x * S + s) * D + lane * COLS;
#pragma unroll
        for (int c = 0; c < COLS; ++c)
            acc[c] += ws * op[c];
    }
#pragma unroll
    for (int c = 0; c < COLS; c += 2)
        acd_tc<T>::store2(orow + c, acc[c], acc[c + 1]);
    if (lane == 0)
        LSE[x] = acd_lse(M, sum);
}

// The combine kernel on stream, a programmatic dependent of the split kernel when plan.pdl.
template <typename T, int D>
int dec_launch_combine(const acd_decode_plan &plan, const ac_fwd_args *a, cudaStream_t stream, ac_err *err)
{
    if (plan.d.splits > 1 && plan.rows_all > 0) {
        const long long blocks = (plan.rows_all + DEC_COMBINE_WARPS - 1) / DEC_COMBINE_WARPS;
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3((unsigned)blocks);
        cfg.blockDim = dim3(32 * DEC_COMBINE_WARPS);
        cfg.stream = stream;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = attr;
        cfg.numAttrs = plan.pdl ? 1 : 0;
        cudaError_t e = cudaLaunchKernelEx(&cfg, dec_combine_kernel<T, D>, plan.d, (T *)a->o, a->lse);
        if (e != cudaSuccess && plan.pdl) { // a driver that refuses PDL here: the plain launch, the error cleared
            (void)cudaGetLastError();
            cfg.numAttrs = 0;
            e = cudaLaunchKernelEx(&cfg, dec_combine_kernel<T, D>, plan.d, (T *)a->o, a->lse);
        }
        if (e != cudaSuccess)
            return ac_fail(err, AC_ERR_ENV, "launch of dec_combine_kernel failed: %s (%s:%d)", cudaGetErrorString(e),
                           __FILE__, __LINE__);
        ACD_CHECK_LAUNCH(err, "dec_combine_kernel");
    }
    return AC_OK;
}

} // namespace

int acd_dec_launch_combine(const acd_decode_plan &plan, ac_dtype t, const ac_fwd_args *a, cudaStream_t stream,
                           ac_err *err)
{
    const bool d64 = plan.d.p.D == 64;
    if (t == AC_F16)
        return d64 ? dec_launch_combine<__half, 64>(plan, a, stream, err)
                   : dec_launch_combine<__half, 128>(plan, a, stream, err);
    return d64 ? dec_launch_combine<__nv_bfloat16, 64>(plan, a, stream, err)
               : dec_launch_combine<__nv_bfloat16, 128>(plan, a, stream, err);
}
