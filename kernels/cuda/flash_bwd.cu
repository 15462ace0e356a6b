// kernels/cuda/flash_bwd.cu — fused backward, FlashAttention-2 schedule:
// D = rowsum(dO * O) pre-pass; one block per 64-key tile of one KV head,
// looping over the query heads of its GQA group and their query tiles,
// recomputing P from LSE; dK and dV accumulate in registers; dQ partial sums
// go through shared memory (dS) and atomicAdd into an f32 workspace (tiny
// partial sums into a scaled second one) that a last kernel scales and converts.
// What runs where (run_bwd): f16/bf16 on Hopper at (d_qk, d_v) = 64/64, 128/128,
// 192/128, 128/96 the wgmma kernel of flash_bwd_sm90.cu (acd_wgmma_bwd_usable;
// ACD_NO_WGMMA=1 turns it off); the other tensor-core pairs, and every pair on
// other GPUs, bwd_tc here on mma.sync; f32 and the rest flash_f32.cu.
#include <algorithm>

#include "backward.cuh"
#include "softmax.cuh"

// Workspace for a backward: D and (f32) LSE's remainder, rows floats each,
// padded to 64 floats, then the dQ accumulators, plain and tiny (2 * rows * d
// floats).  The padding keeps dQacc 256-byte aligned: its float2 atomics fault
// on an odd float offset, which B * Hq * Nq odd gave (found by the fuzzer:
// nq=5, hq=3; the fixed GPU tests all had even products).
static size_t bwd_rows_padded(const acd_params &p)
{
    const size_t rows = (size_t)p.B * p.Hq * p.Nq;
    return (rows + 63) / 64 * 64;
}
static size_t bwd_delta_floats(const acd_params &p) { return 2 * bwd_rows_padded(p); }

namespace
{

// D_i = sum_c dO_ic O_ic in f32, one warp per row; padding rows get 0.
template <typename T>
__global__ void bwd_delta(acd_params p, const T *__restrict__ O, const T *__restrict__ dO, float *__restrict__ Dv)
{
    const long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    int b, h, i;
    if (row >= (long long)p.B * p.Hq * p.Nq || !acd_grid_row(p, row, b, h, i))
        return;
    float acc = 0.f;
    if (i < acd_nq(p, b)) {
        const long long at = acd_o_offset(p, b, h, i);
        for (int c = lane; c < p.Dv; c += 32)
            acc = fmaf(acd_cvt<T>::to_f(dO[at + c]), acd_cvt<T>::to_f(O[at + c]), acc);
    }
    for (int off = 16; off > 0; off >>= 1)
        acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0)
        Dv[acd_row_index(p, b, h, i)] = acc;
}

template <typename T> __global__ void bwd_dq_convert(acd_params p, const float *__restrict__ dQacc, T *__restrict__ dQ)
{
    const long long n = (long long)p.B * p.Hq * p.Nq * p.D;
    for (long long x = blockIdx.x * (long long)blockDim.x + threadIdx.x; x < n;
         x += (long long)gridDim.x * blockDim.x) {
        const int c = (int)(x % p.D);
        int b, h, i;
        if (!acd_grid_row(p, x / p.D, b, h, i))
            continue;
        const long long at = acd_row_index(p, b, h, i) * p.D + c;
        // In double, so the tiny part's unscaling and the softmax scale round once.
        const double dq = ((double)dQacc[at] + (double)dQacc[n + at] * (1.0 / ACD_DQ_TINY_SCALE)) * p.scale;
        dQ[acd_q_offset(p, b, h, i) + c] = acd_cvt<T>::from_f(__double2float_rn(dq));
    }
}

// dSink_h = -sum_{b,i} exp(s_h - LSE_i) D_i (ref.h), one block per query head,
// in double and in a fixed order (each thread its rows, then a fixed tree), so
// it is deterministic; exp(s_h - LSE_i) is the sink's share of row i's
// denominator.  Rows that see nothing have LSE = s_h and D = 0.
constexpr int kDsinkThreads = 256;
__global__ void __launch_bounds__(kDsinkThreads)
    bwd_dsink(acd_params p, const float *__restrict__ LSE, const float *__restrict__ Dv, float *__restrict__ dsink)
{
    __shared__ double part[kDsinkThreads];
    const int h = blockIdx.x;
    const double sink = p.sinks[h];
    double acc = 0.0;
    for (int b = 0; b < p.B; ++b) {
        const int nq = acd_nq(p, b);
        for (int i = threadIdx.x; i < nq; i += kDsinkThreads) {
            const long long row = acd_row_index(p, b, h, i);
            const float lse = LSE[row];
            if (isfinite(lse))
                acc += exp(sink - (double)lse) * (double)Dv[row];
        }
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int half = kDsinkThreads / 2; half > 0; half /= 2) {
        if (threadIdx.x < half)
            part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        dsink[h] = (float)-part[0];
}

// dBias in the bias's dtype from its f32 sums and their subnormal twin (acd_dq_add),
// added in double and rounded once.
__global__ void bwd_dbias_convert(const float *__restrict__ acc, void *__restrict__ dbias, long long n, int dtype)
{
    for (long long x = blockIdx.x * (long long)blockDim.x + threadIdx.x; x < n;
         x += (long long)gridDim.x * blockDim.x) {
        const double v = (double)acc[x] + (double)acc[n + x] * (1.0 / ACD_DQ_TINY_SCALE);
        if (dtype == AC_F16)
            static_cast<__half *>(dbias)[x] = __double2half(v);
        else if (dtype == AC_BF16)
            static_cast<__nv_bfloat16 *>(dbias)[x] = __double2bfloat16(v);
        else
            static_cast<float *>(dbias)[x] = (float)v;
    }
}

// A tile configuration of bwd_tc: kWarps warps of 16 keys each (a block owns
// kBlockN = 16 kWarps keys of one KV head), query tiles of kBlockQ rows.  For
// dQ = dS K the warps split into kRowGroups of 16 query rows x kColGroups of
// kGroupCols columns.  Two head dims: D (d_qk) for Q, K, dQ, dK and S^T = K
// Q^T; DV (d_v, D otherwise) for V, dO, dV and dP^T = V dO^T.
template <int D, int BMQ, int NW, int DV = D> struct bwd_tc_traits {
    static constexpr int kHeadDim = D, kHeadDimV = DV, kBlockQ = BMQ, kWarps = NW, kBlockN = 16 * kWarps,
                         kThreads = 32 * kWarps;
    static constexpr int kPitch = D + 8, kPitchS = kBlockN + 8; // shared row pitches (elements), as in fwd_tc
    static constexpr int kPitchV = DV + 8; // V's and dO's
    static constexpr int kRowGroups = BMQ / 16, kColGroups = kWarps / kRowGroups, kGroupCols = D / kColGroups;
    static_assert(kGroupCols % 16 == 0, "dQ column group must be a multiple of 16");
    // K, V; two stages of Q, dO; dS; two stages of LSE and D.
    template <typename T> static constexpr size_t smem_bytes()
    {
        return sizeof(T) *
            ((size_t)(kBlockN + 2 * BMQ) * kPitch + (size_t)(kBlockN + 2 * BMQ) * kPitchV + (size_t)BMQ * kPitchS) +
            4 * sizeof(float) * BMQ;
    }
    static_assert(smem_bytes<__half>() <= 227 * 1024, "bwd_tc tile over the SM's 227 KiB of shared memory");
};

// S^T = K_w Q^T and dP^T = V_w dO^T: a warp's 16 keys (rows kw of sK, sV) x
// the tile's BMQ queries.
template <typename T, typename Kt>
__device__ __forceinline__ void st_dpt_tc(float (&st)[Kt::kBlockQ / 8][4], float (&dpt)[Kt::kBlockQ / 8][4],
                                          const T *sK, const T *sV, const T *sQ, const T *sdO, int kw, int lane)
{
    constexpr int D = Kt::kHeadDim, DV = Kt::kHeadDimV, BMQ = Kt::kBlockQ, LD = Kt::kPitch, LDV = Kt::kPitchV;
    acd_zero(st);
    acd_zero(dpt);
    if constexpr (DV != D) { // two k loops: d_qk for S^T, d_v for dP^T
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            uint32_t ka[4];
            acd_ldmatrix_x4(ka, sK + (kw + lane % 16) * LD + kk * 16 + (lane / 16) * 8);
#pragma unroll
            for (int nn = 0; nn < BMQ / 16; ++nn) {
                uint32_t qf[4];
                acd_ldmatrix_x4(qf, sQ + (nn * 16 + (lane / 16) * 8 + lane % 8) * LD + kk * 16 + ((lane / 8) % 2) * 8);
                acd_tc<T>::mma(st[2 * nn], ka, qf[0], qf[1]);
                acd_tc<T>::mma(st[2 * nn + 1], ka, qf[2], qf[3]);
            }
        }
#pragma unroll
        for (int kk = 0; kk < DV / 16; ++kk) {
            uint32_t va[4];
            acd_ldmatrix_x4(va, sV + (kw + lane % 16) * LDV + kk * 16 + (lane / 16) * 8);
#pragma unroll
            for (int nn = 0; nn < BMQ / 16; ++nn) {
                uint32_t df[4];
                acd_ldmatrix_x4(df,
                                sdO + (nn * 16 + (lane / 16) * 8 + lane % 8) * LDV + kk * 16 + ((lane / 8) % 2) * 8);
                acd_tc<T>::mma(dpt[2 * nn], va, df[0], df[1]);
                acd_tc<T>::mma(dpt[2 * nn + 1], va, df[2], df[3]);
            }
        }
    } else {
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            uint32_t ka[4], va[4];
            acd_ldmatrix_x4(ka, sK + (kw + lane % 16) * LD + kk * 16 + (lane / 16) * 8);
            acd_ldmatrix_x4(va, sV + (kw + lane % 16) * LD + kk * 16 + (lane / 16) * 8);
#pragma unroll
            for (int nn = 0; nn < BMQ / 16; ++nn) {
                uint32_t qf[4], df[4];
                const int roff = (nn * 16 + (lane / 16) * 8 + lane % 8) * LD + kk * 16 + ((lane / 8) % 2) * 8;
                acd_ldmatrix_x4(qf, sQ + roff);
                acd_ldmatrix_x4(df, sdO + roff);
                acd_tc<T>::mma(st[2 * nn], ka, qf[0], qf[1]);
                acd_tc<T>::mma(st[2 * nn + 1], ka, qf[2], qf[3]);
                acd_tc<T>::mma(dpt[2 * nn], va, df[0], df[1]);
                acd_tc<T>::mma(dpt[2 * nn + 1], va, df[2], df[3]);
            }
        }
    }
}

// dV += P^T dO and dK += dS^T Q, k running over the tile's queries; P^T and
// dS^T from the registers, rounded to T.
template <typename T, typename Kt>
__device__ __forceinline__ void dv_dk_tc(float (&dv)[Kt::kHeadDimV / 8][4], float (&dk)[Kt::kHeadDim / 8][4],
                                         const float (&pt)[Kt::kBlockQ / 8][4], const float (&dst)[Kt::kBlockQ / 8][4],
                                         const T *sQ, const T *sdO, int lane)
{
    constexpr int D = Kt::kHeadDim, DV = Kt::kHeadDimV, BMQ = Kt::kBlockQ, LD = Kt::kPitch, LDV = Kt::kPitchV;
#pragma unroll
    for (int kq = 0; kq < BMQ / 16; ++kq) {
        uint32_t pa[4], sa[4];
        acd_frag_to_a<T>(pa, pt, kq);
        acd_frag_to_a<T>(sa, dst, kq);
        if constexpr (DV != D) { // dV over d_v's columns, dK over d_qk's
#pragma unroll
            for (int dn = 0; dn < DV / 16; ++dn) {
                uint32_t of[4];
                acd_ldmatrix_x4_trans(
                    of, sdO + (kq * 16 + ((lane / 8) % 2) * 8 + lane % 8) * LDV + dn * 16 + (lane / 16) * 8);
                acd_tc<T>::mma(dv[2 * dn], pa, of[0], of[1]);
                acd_tc<T>::mma(dv[2 * dn + 1], pa, of[2], of[3]);
            }
#pragma unroll
            for (int dn = 0; dn < D / 16; ++dn) {
                uint32_t qf[4];
                acd_ldmatrix_x4_trans(
                    qf, sQ + (kq * 16 + ((lane / 8) % 2) * 8 + lane % 8) * LD + dn * 16 + (lane / 16) * 8);
                acd_tc<T>::mma(dk[2 * dn], sa, qf[0], qf[1]);
                acd_tc<T>::mma(dk[2 * dn + 1], sa, qf[2], qf[3]);
            }
        } else {
#pragma unroll
            for (int dn = 0; dn < D / 16; ++dn) {
                uint32_t of[4], qf[4];
                const int roff = (kq * 16 + ((lane / 8) % 2) * 8 + lane % 8) * LD + dn * 16 + (lane / 16) * 8;
                acd_ldmatrix_x4_trans(of, sdO + roff);
                acd_ldmatrix_x4_trans(qf, sQ + roff);
                acd_tc<T>::mma(dv[2 * dn], pa, of[0], of[1]);
                acd_tc<T>::mma(dv[2 * dn + 1], pa, of[2], of[3]);
                acd_tc<T>::mma(dk[2 * dn], sa, qf[0], qf[1]);
                acd_tc<T>::mma(dk[2 * dn + 1], sa, qf[2], qf[3]);
            }
        }
    }
}

// dQ = dS K for the tile, added into dQacc: dS (queries x keys, through shared
// memory, since a warp holds dS^T) by the warps' row and column groups.
template <typename T, typename Kt, bool kVar>
__device__ __forceinline__ void dq_tc(float *dQacc, const acd_params &p, const T *sdS, const T *sK, int b, int h,
                                      int i0, int nq, int warp, int lane)
{
    constexpr int D = Kt::kHeadDim, BN = Kt::kBlockN, LD = Kt::kPitch, LDS = Kt::kPitchS, RG = Kt::kRowGroups,
                  DC = Kt::kGroupCols;
    const int rg = warp % RG, c0 = (warp / RG) * DC;
    float dq[DC / 8][4];
    acd_zero(dq);
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
        uint32_t sa[4];
        acd_ldmatrix_x4(sa, sdS + (rg * 16 + lane % 16) * LDS + kk * 16 + (lane / 16) * 8);
#pragma unroll
        for (int dn = 0; dn < DC / 16; ++dn) {
            uint32_t kf[4];
            acd_ldmatrix_x4_trans(
                kf, sK + (kk * 16 + ((lane / 8) % 2) * 8 + lane % 8) * LD + c0 + dn * 16 + (lane / 16) * 8);
            acd_tc<T>::mma(dq[2 * dn], sa, kf[0], kf[1]);
            acd_tc<T>::mma(dq[2 * dn + 1], sa, kf[2], kf[3]);
        }
    }
    acd_dq_add_rows<T, D, kVar>(dQacc, p, b, h, i0 + rg * 16 + lane / 4, c0, lane % 4, nq, dq);
}

template <typename T, typename Kt, bool kVar>
__global__ void __launch_bounds__(Kt::kThreads)
    bwd_tc(acd_params p, const T *__restrict__ Q, const T *__restrict__ K, const T *__restrict__ V,
           const T *__restrict__ dO, const float *__restrict__ LSE, const float *__restrict__ Dv,
           float *__restrict__ dQacc, T *__restrict__ dK, T *__restrict__ dV)
{
    constexpr int D = Kt::kHeadDim, DV = Kt::kHeadDimV, BMQ = Kt::kBlockQ, BN = Kt::kBlockN, NT = Kt::kThreads,
                  LD = Kt::kPitch, LDV = Kt::kPitchV, LDS = Kt::kPitchS;
    constexpr bool kSplitDv = DV != D; // V, dO, dV with their own strides (else K's, Q's: equal then)
    extern __shared__ __align__(16) unsigned char smem_raw[];
    // Q, dO, LSE and D come in two stages: the next query tile's copy runs
    // while this one is computed (its latency was exposed on every tile).
    T *sK = reinterpret_cast<T *>(smem_raw), *sV = sK + BN * LD, *sQ2 = sV + BN * LDV, *sdO2 = sQ2 + 2 * BMQ * LD;
    T *sdS = sdO2 + 2 * BMQ * LDV;
    float *sLse2 = reinterpret_cast<float *>(sdS + BMQ * LDS), *sDd2 = sLse2 + 2 * BMQ;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4, kw = warp * 16;
    const int hk = blockIdx.y, b = blockIdx.z, j0 = blockIdx.x * BN;
    const int nq = acd_nq<kVar>(p, b), nk = acd_nk<kVar>(p, b);
    const T *Kb = K + acd_k_base<kVar>(p, b) + hk * p.k_sh;
    const T *Vb;
    if constexpr (kSplitDv)
        Vb = V + acd_v_base<kVar>(p, b) + hk * p.v_sh;
    else
        Vb = V + acd_k_base<kVar>(p, b) + hk * p.k_sh;

    acd_load_tile<T, BN, D, NT>(sK, Kb, p.k_ss, j0, nk, tid);
    acd_load_tile<T, BN, DV, NT>(sV, Vb, acd_v_ss<kSplitDv>(p), j0, nk, tid);
    acd_cp_async_commit();

    float dk[D / 8][4], dv[DV / 8][4];
    acd_zero(dk);
    acd_zero(dv);
    const acd_bwd_plan<BMQ, BN> plan(p, hk, j0, nq, nk);
    auto load_q_tile = [&](int x) {
        const int h = plan.head(x), i0 = plan.row0(x), stage = x & 1;
        acd_load_tile<T, BMQ, D, NT>(sQ2 + stage * BMQ * LD, Q + acd_q_base<kVar>(p, b) + h * p.q_sh, p.q_ss, i0, nq,
                                     tid);
        if constexpr (kSplitDv)
            acd_load_tile<T, BMQ, DV, NT>(sdO2 + stage * BMQ * LDV, dO + acd_o_base<kVar>(p, b) + h * p.o_sh,
                                          acd_o_ss<kSplitDv>(p), i0, nq, tid);
        else
            acd_load_tile<T, BMQ, D, NT>(sdO2 + stage * BMQ * LD, dO + acd_q_base<kVar>(p, b) + h * p.q_sh, p.q_ss, i0,
                                         nq, tid);
        acd_load_lse_d<BMQ, kVar>(sLse2 + stage * BMQ, sDd2 + stage * BMQ, LSE, Dv, p, b, h, i0, nq, tid);
        acd_cp_async_commit();
    };
    if (plan.count > 0)
        load_q_tile(0);

    for (int x = 0; x < plan.count; ++x) {
        const int h = plan.head(x), i0 = plan.row0(x), stage = x & 1;
        const T *sQ = sQ2 + stage * BMQ * LD, *sdO = sdO2 + stage * BMQ * LDV;
        if (x + 1 < plan.count) {
            load_q_tile(x + 1); // into the stage the previous tile freed
            acd_cp_async_wait<1>();
        } else {
            acd_cp_async_wait<0>();
        }
        __syncthreads();

        float st[BMQ / 8][4], dpt[BMQ / 8][4];
        st_dpt_tc<T, Kt>(st, dpt, sK, sV, sQ, sdO, kw, lane);
        const uint32_t hidden = plan.hidden(p, b, h, i0, j0 + kw + g, t, nq, nk);
        acd_bwd_p_ds<T, BMQ, kVar>(st, dpt, sLse2 + stage * BMQ, sDd2 + stage * BMQ, hidden, p, b, h, i0, j0 + kw + g,
                                   t, nq, nk); // P^T, dS^T
        dv_dk_tc<T, Kt>(dv, dk, st, dpt, sQ, sdO, lane);
        // dS (queries x keys) to shared memory for dQ = dS K.
#pragma unroll
        for (int n = 0; n < BMQ / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                sdS[(n * 8 + 2 * t + (e & 1)) * LDS + kw + g + (e >= 2 ? 8 : 0)] = acd_tc<T>::from_f(dpt[n][e]);
        __syncthreads();
        dq_tc<T, Kt, kVar>(dQacc, p, sdS, sK, b, h, i0, nq, warp, lane);
        __syncthreads(); // this stage and sdS are rewritten by the next tiles
    }
    acd_cp_async_wait<0>();
    acd_store_dk_dv<T, D, kVar, DV>(p, dK, dV, b, hk, j0 + kw + g, t, nk, dk, dv);
}

template <typename T, typename Kt, bool kVar>
int launch_bwd_tc_var(const acd_params &p, const ac_bwd_args *a, const float *Dv, float *dQacc, cudaStream_t stream,
                      ac_err *err)
{
    const size_t smem = Kt::template smem_bytes<T>();
    ACD_CHECK(err, cudaFuncSetAttribute(bwd_tc<T, Kt, kVar>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((p.Nk + Kt::kBlockN - 1) / Kt::kBlockN, p.Hkv, p.B);
    bwd_tc<T, Kt, kVar><<<grid, Kt::kThreads, smem, stream>>>(p, (const T *)a->q, (const T *)a->k, (const T *)a->v,
                                                              (const T *)a->d_o, a->lse, Dv, dQacc, (T *)a->dk,
                                                              (T *)a->dv);
    ACD_CHECK_LAUNCH(err, "bwd_tc");
    return AC_OK;
}

template <typename T, typename Kt>
int launch_bwd_tc(const acd_params &p, const ac_bwd_args *a, const float *Dv, float *dQacc, cudaStream_t stream,
                  ac_err *err)
{
    acd_note_path(ACD_DISPATCH_BWD, ACD_PATH_MMA_SYNC);
    return acd_variant_kernel(p) ? launch_bwd_tc_var<T, Kt, true>(p, a, Dv, dQacc, stream, err)
                                 : launch_bwd_tc_var<T, Kt, false>(p, a, Dv, dQacc, stream, err);
}

// Tile configurations per head dim (head dim, query rows per tile, warps).
// d = 128, measured on an H100 (f16, N = 8k): 64 x 8: 224.7-234.9 TFLOP/s;
// 32 x 8: 196; 32 x 4: 185 (PERF.md).
using bwd_tc_d32 = bwd_tc_traits<32, 64, 4>;
using bwd_tc_d64 = bwd_tc_traits<64, 64, 8>;
using bwd_tc_d96 = bwd_tc_traits<96, 32, 4>;
using bwd_tc_d128 = bwd_tc_traits<128, 64, 8>;
// d_v != d_qk (d_qk, query rows, warps, d_v): dK and dV's accumulators
// (d_qk + d_v floats a thread) leave room for fewer query rows: 192/128 takes
// 32 (dK + dV + S^T + dP^T = 192 floats, as d = 128's), 256/128 16; 128/96 as
// d = 128.  Not yet measured.  On Hopper 192/128 and 128/96 run bwd_wg instead.
using bwd_tc_d192_v128 = bwd_tc_traits<192, 32, 8, 128>;
using bwd_tc_d128_v96 = bwd_tc_traits<128, 64, 8, 96>;
using bwd_tc_d256_v128 = bwd_tc_traits<256, 16, 8, 128>;

template <typename T>
int dispatch_bwd_tc(const acd_params &p, const ac_bwd_args *a, const float *Dv, float *dQacc, cudaStream_t stream,
                    ac_err *err)
{
    if (p.Dv != p.D) {
        if (p.D == 192 && p.Dv == 128)
            return launch_bwd_tc<T, bwd_tc_d192_v128>(p, a, Dv, dQacc, stream, err);
        if (p.D == 128 && p.Dv == 96)
            return launch_bwd_tc<T, bwd_tc_d128_v96>(p, a, Dv, dQacc, stream, err);
        if (p.D == 256 && p.Dv == 128)
            return launch_bwd_tc<T, bwd_tc_d256_v128>(p, a, Dv, dQacc, stream, err);
        return ac_fail(err, AC_ERR_INPUT, "cuda-flash backward: (d_qk, d_v) = (%d, %d) not built", p.D, p.Dv);
    }
    switch (p.D) {
    case 32:
        return launch_bwd_tc<T, bwd_tc_d32>(p, a, Dv, dQacc, stream, err);
    case 64:
        return launch_bwd_tc<T, bwd_tc_d64>(p, a, Dv, dQacc, stream, err);
    case 96:
        return launch_bwd_tc<T, bwd_tc_d96>(p, a, Dv, dQacc, stream, err);
    case 128:
        return launch_bwd_tc<T, bwd_tc_d128>(p, a, Dv, dQacc, stream, err);
    default:
        return ac_fail(err, AC_ERR_INPUT, "cuda-flash backward: head_dim %d not built (32, 64, 96, 128)", p.D);
    }
}

// The CUDA-core backward (flash_f32.cu): f32, and the pairs without tensor-core tiles.
template <typename T>
int bwd_cuda_cores(const acd_params &p, const ac_bwd_args *a, float *Dv, float *dQacc, cudaStream_t stream, ac_err *err)
{
    acd_note_path(ACD_DISPATCH_BWD, ACD_PATH_CUDA_CORES);
    return acd_bwd_f32<T>(p, a, Dv, Dv + bwd_rows_padded(p), dQacc, stream, err);
}

template <typename T>
int run_bwd(const acd_params &p, const ac_bwd_args *a, float *Dv, float *dQacc, cudaStream_t stream, ac_err *err)
{
    const long long rows = (long long)p.B * p.Hq * p.Nq;
    ACD_CHECK(err, cudaMemsetAsync(dQacc, 0, 2 * sizeof(float) * rows * p.D, stream)); // plain and tiny sums
    bwd_delta<T><<<(unsigned)((rows + 7) / 8), 256, 0, stream>>>(p, (const T *)a->o, (const T *)a->d_o, Dv);
    ACD_CHECK_LAUNCH(err, "bwd_delta");
    int status;
    if constexpr (sizeof(T) == 4)
        status = bwd_cuda_cores<T>(p, a, Dv, dQacc, stream, err);
    else if (!acd_tc_head_dims(p.D, p.Dv)) // no tensor-core tiles (d, d_v <= 256)
        status = bwd_cuda_cores<T>(p, a, Dv, dQacc, stream, err);
    else if (acd_wgmma_bwd_usable(p.D, p.Dv)) { // Hopper, 64/64, 128/128, 192/128, 128/96: flash_bwd_sm90.cu
        acd_note_path(ACD_DISPATCH_BWD, ACD_PATH_WGMMA);
        status = acd_bwd_wgmma<T>(p, a, Dv, dQacc, stream, err);
    } else
        status = dispatch_bwd_tc<T>(p, a, Dv, dQacc, stream, err);
    if (status != AC_OK)
        return status;
    if (p.sinks && a->dsink) {
        bwd_dsink<<<p.Hq, kDsinkThreads, 0, stream>>>(p, a->lse, Dv, a->dsink);
        ACD_CHECK_LAUNCH(err, "bwd_dsink");
    }
    const long long n = rows * p.D;
    const unsigned blocks = (unsigned)std::min<long long>((n + 255) / 256, 65535LL * 16);
    bwd_dq_convert<T><<<blocks, 256, 0, stream>>>(p, dQacc, (T *)a->dq);
    ACD_CHECK_LAUNCH(err, "bwd_dq_convert");
    return AC_OK;
}

} // namespace

size_t acd_bwd_workspace_bytes(const acd_params &p)
{
    const size_t rows = (size_t)p.B * p.Hq * p.Nq;
    return sizeof(float) * (bwd_delta_floats(p) + 2 * rows * (size_t)p.D);
}

int acd_flash_backward_async(const acd_params &p, ac_dtype t, const ac_bwd_args *a, void *workspace,
                             cudaStream_t stream, ac_err *err)
{
    float *Dv = (float *)workspace, *dQacc = Dv + bwd_delta_floats(p);
    switch (t) {
    case AC_F16:
        return run_bwd<__half>(p, a, Dv, dQacc, stream, err);
    case AC_BF16:
        return run_bwd<__nv_bfloat16>(p, a, Dv, dQacc, stream, err);
    case AC_F32:
        return run_bwd<float>(p, a, Dv, dQacc, stream, err);
    default:
        return ac_fail(err, AC_ERR_INPUT, "cuda-flash backward: unsupported dtype %d", (int)t);
    }
}

extern "C" int acd_flash_backward(const ac_problem *prob, ac_dtype t, const ac_bwd_args *a, ac_err *err)
{
    acd_params p;
    acd_staged st;
    int status = acd_stage(prob, ACD_MUT_NONE, &p, &st, err);
    if (status != AC_OK)
        return status;
    if ((p.sinks && !a->dsink) || (p.bias && !a->dbias)) {
        acd_unstage(&st);
        return ac_fail(err, AC_ERR_INPUT, "cuda-flash backward: a problem with %s needs the %s output",
                       p.sinks && !a->dsink ? "sinks" : "a bias", p.sinks && !a->dsink ? "dsink" : "dbias");
    }
    void *ws = NULL, *dbias_acc = NULL;
    const size_t ws_bytes = acd_bwd_workspace_bytes(p), n_bias = ac_bias_elems(prob);
    status = acd_ws_alloc(&ws, ws_bytes, err);
    if (status == AC_OK && p.bias) { // dBias's f32 sums and their subnormal twin, zeroed
        status = acd_ws_alloc(&dbias_acc, 2 * sizeof(float) * n_bias, err);
        if (status == AC_OK && cudaMemset(dbias_acc, 0, 2 * sizeof(float) * n_bias) != cudaSuccess)
            status = ac_fail(err, AC_ERR_ENV, "cudaMemset of dBias's sums failed");
        p.dbias_acc = (float *)dbias_acc;
        p.dbias_elems = (long long)n_bias;
    }
    if (status == AC_OK)
        status = acd_flash_backward_async(p, t, a, ws, 0, err);
    if (status == AC_OK && p.bias) {
        const unsigned blocks = (unsigned)std::min<size_t>((n_bias + 255) / 256, 65535);
        bwd_dbias_convert<<<blocks, 256>>>(p.dbias_acc, a->dbias, (long long)n_bias, p.bias_dtype);
        const cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess)
            status = ac_fail(err, AC_ERR_ENV, "launch of bwd_dbias_convert failed: %s", cudaGetErrorString(e));
    }
    if (status == AC_OK)
        status = ac_dev_sync(err);
    acd_ws_free(dbias_acc, 2 * sizeof(float) * n_bias);
    acd_ws_free(ws, ws_bytes);
    acd_unstage(&st);
    return status;
}
