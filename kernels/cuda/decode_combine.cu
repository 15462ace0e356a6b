// kernels/cuda/decode_combine.cu — cuda-decode's combine kernel (issue 16; the
// split kernel is decode.cu, the plan decode_host.cu): a CTA per query row
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

// A CTA per query row.  Warp w sums the O_s of splits w, w + 4, ... in split
// order.  Its first kAhead of them (all of them up to 64 splits at d_v <= 128)
// are loaded at once, before the weights are known, so they travel with the
// (m_s, l_s) loads: each warp reduces all of those to M, L and the splits'
// weights by itself (S <= 256: eight loads a lane; shuffles, no CTA barrier)
// while the partials arrive.  Later splits are loaded four at a time.  The
// row's index arithmetic runs before the wait for the split kernel: after it,
// every round of loads or barriers is a link of the decode step's chain (B = 1,
// 16k's 64 splits took five rounds of loads: PERF.md, "the combine's rounds"),
// and the first version (a warp per row walking its splits one after another)
// made that step 1.37x as long end to end.
constexpr int DEC_COMBINE_WARPS = 4;
constexpr int DEC_COMBINE_THREADS = 32 * DEC_COMBINE_WARPS;
constexpr int DEC_COMBINE_UNROLL = 4; // splits a warp has in flight past the first kAhead

// VEC consecutive floats of a partial (VEC = D_v / 32: 2, 4, 16 or 18), in
// 16-byte loads where VEC allows, else 8-byte ones.
template <int VEC> __device__ __forceinline__ void dec_load_part(const float *src, float (&v)[VEC])
{
    if constexpr (VEC % 4 == 0) {
#pragma unroll
        for (int c = 0; c < VEC; c += 4) {
            const float4 t = *reinterpret_cast<const float4 *>(src + c);
            v[c] = t.x, v[c + 1] = t.y, v[c + 2] = t.z, v[c + 3] = t.w;
        }
    } else {
        static_assert(VEC % 2 == 0, "d_v a multiple of 64");
#pragma unroll
        for (int c = 0; c < VEC; c += 2) {
            const float2 t = *reinterpret_cast<const float2 *>(src + c);
            v[c] = t.x, v[c + 1] = t.y;
        }
    }
}

// D: d_v, the partials' and O's columns.
template <typename T, int D>
__global__ void __launch_bounds__(DEC_COMBINE_THREADS)
    dec_combine_kernel(acd_dec_params d, T *__restrict__ O, float *__restrict__ LSE)
{
    constexpr int VEC = D / 32;
    __shared__ float sW[DEC_COMBINE_WARPS][ACD_DEC_MAX_SPLITS]; // each warp's copy of the weights
    __shared__ __align__(16) float sAcc[DEC_COMBINE_WARPS][D];
    const acd_params &p = d.p;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, S = d.splits;
    const long long x = blockIdx.x;
    int b, h, i;
    if (!acd_grid_row(p, x, b, h, i) || i >= acd_nq<false>(p, b))
        return; // a padding row: never compared (the whole CTA leaves, without waiting)
    const float *op = d.o_part + x * S * D + lane * VEC;
    const float2 *ml = reinterpret_cast<const float2 *>(d.lse_part) + x * S; // (m_s, l_s) per split
    T *orow = O + acd_o_offset(p, b, h, i);
    // The row's index arithmetic above (three divisions) ran while the split kernel was finishing; from
    // here on every step is a latency of the decode step's chain.
    dec_wait_for_splits();
    // The first kAhead splits' O_s of this warp, in flight before the weights: every split CTA wrote its
    // partial (an empty split's is 0, its weight 0: loaded, never added).
    constexpr int kAhead = 64 / VEC > DEC_COMBINE_UNROLL ? 64 / VEC : DEC_COMBINE_UNROLL; // 64 registers
    float ahead[kAhead][VEC];
#pragma unroll
    for (int u = 0; u < kAhead; ++u)
        if (warp + u * DEC_COMBINE_WARPS < S)
            dec_load_part<VEC>(op + (long long)(warp + u * DEC_COMBINE_WARPS) * D, ahead[u]);
    // Every warp reduces all S pairs itself, lane j holding splits j, j + 32, ...: shuffles and no CTA
    // barrier (the CTA-wide reductions' six barriers were links of the chain too).
    constexpr int kPairs = ACD_DEC_MAX_SPLITS / 32;
    float2 mine[kPairs];
    float M = -INFINITY;
#pragma unroll
    for (int k = 0; k < kPairs; ++k) {
        const int s = lane + 32 * k;
        mine[k] = s < S ? ml[s] : make_float2(-INFINITY, 0.f);
        M = fmaxf(M, mine[k].x);
    }
    M = acd_warp_max(M);
    if (M == -INFINITY) { // every split empty: no visible key (every warp sees it)
        for (int c = tid; c < D / 2; c += DEC_COMBINE_THREADS)
            acd_tc<T>::store2(orow + 2 * c, 0.f, 0.f);
        if (tid == 0)
            LSE[x] = -INFINITY;
        return;
    }
    float sum = 0.f;
    int live = 0;
#pragma unroll
    for (int k = 0; k < kPairs; ++k) {
        sum += mine[k].y * exp2f(mine[k].x - M); // an empty split: l_s = 0 (and m_s = -inf) adds 0
        live += __popc(__ballot_sync(0xffffffffu, mine[k].x > -INFINITY));
    }
    sum = acd_warp_sum(sum);
#pragma unroll
    for (int k = 0; k < kPairs; ++k) { // the no-rescale mutant: all weigh alike
        const int s = lane + 32 * k;
        if (s < S)
            sW[warp][s] = p.mutant == ACD_MUT_DEC_NO_RESCALE ? (mine[k].x > -INFINITY ? 1.f / (float)live : 0.f)
                                                             : mine[k].y * exp2f(mine[k].x - M) / sum;
    }
    __syncwarp();
    float acc[VEC] = {};
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
        const int s = warp + u * DEC_COMBINE_WARPS;
        const float w = s < S ? sW[warp][s] : 0.f;
        if (w != 0.f)
#pragma unroll
            for (int c = 0; c < VEC; ++c)
                acc[c] += w * ahead[u][c];
    }
    for (int s0 = warp + kAhead * DEC_COMBINE_WARPS; s0 < S; s0 += DEC_COMBINE_WARPS * DEC_COMBINE_UNROLL) {
        float v[DEC_COMBINE_UNROLL][VEC], ws[DEC_COMBINE_UNROLL];
#pragma unroll
        for (int u = 0; u < DEC_COMBINE_UNROLL; ++u) { // the loads first, all in flight
            const int s = s0 + u * DEC_COMBINE_WARPS;
            ws[u] = s < S ? sW[warp][s] : 0.f;
            if (ws[u] != 0.f) // an empty split (and its O_s) is not read
                dec_load_part<VEC>(op + (long long)s * D, v[u]);
        }
#pragma unroll
        for (int u = 0; u < DEC_COMBINE_UNROLL; ++u)
            if (ws[u] != 0.f)
#pragma unroll
                for (int c = 0; c < VEC; ++c)
                    acc[c] += ws[u] * v[u][c];
    }
#pragma unroll
    for (int c = 0; c < VEC; ++c)
        sAcc[warp][lane * VEC + c] = acc[c];
    __syncthreads();
    for (int c = tid; c < D / 2; c += DEC_COMBINE_THREADS) {
        float o2[2] = {0.f, 0.f};
#pragma unroll
        for (int w = 0; w < DEC_COMBINE_WARPS; ++w)
            o2[0] += sAcc[w][2 * c], o2[1] += sAcc[w][2 * c + 1];
        acd_tc<T>::store2(orow + 2 * c, o2[0], o2[1]);
    }
    if (tid == 0)
        LSE[x] = acd_lse(M, sum);
}

// The combine kernel on stream, a programmatic dependent of the split kernel when plan.pdl.
template <typename T, int D>
int dec_launch_combine(const acd_decode_plan &plan, const ac_fwd_args *a, cudaStream_t stream, ac_err *err)
{
    if (plan.d.splits > 1 && !plan.d.cluster && plan.rows_all > 0) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3((unsigned)plan.rows_all); // a CTA per query row
        cfg.blockDim = dim3(DEC_COMBINE_THREADS);
        cfg.stream = stream;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = attr;
        cfg.numAttrs = plan.pdl ? 1 : 0;
        void (*kernel)(acd_dec_params, T *, float *) = dec_combine_kernel<T, D>;
        cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, plan.d, (T *)a->o, a->lse);
        if (e != cudaSuccess && plan.pdl) { // a driver that refuses PDL here: the plain launch, the error cleared
            (void)cudaGetLastError();
            cfg.numAttrs = 0;
            e = cudaLaunchKernelEx(&cfg, kernel, plan.d, (T *)a->o, a->lse);
        }
        if (e != cudaSuccess)
            return ac_fail(err, AC_ERR_ENV, "launch of dec_combine_kernel failed: %s (%s:%d)", cudaGetErrorString(e),
                           __FILE__, __LINE__);
        ACD_CHECK_LAUNCH(err, "dec_combine_kernel");
    }
    return AC_OK;
}

// The combine of O's dtype T at the plan's d_v (64, 128; cuda-decode-mla's 512, 576).
template <typename T>
int dec_launch_combine_dv(const acd_decode_plan &plan, const ac_fwd_args *a, cudaStream_t stream, ac_err *err)
{
    switch (plan.d.p.Dv) {
    case 64:
        return dec_launch_combine<T, 64>(plan, a, stream, err);
    case 128:
        return dec_launch_combine<T, 128>(plan, a, stream, err);
    case 512:
        return dec_launch_combine<T, 512>(plan, a, stream, err);
    case 576:
        return dec_launch_combine<T, 576>(plan, a, stream, err);
    default:
        return ac_fail(err, AC_ERR_INPUT, "cuda-decode: no combine for d_v %d", plan.d.p.Dv);
    }
}
} // namespace

int acd_dec_launch_combine(const acd_decode_plan &plan, ac_dtype t, const ac_fwd_args *a, cudaStream_t stream,
                           ac_err *err)
{
    return t == AC_F16 ? dec_launch_combine_dv<__half>(plan, a, stream, err)
                       : dec_launch_combine_dv<__nv_bfloat16>(plan, a, stream, err);
}
