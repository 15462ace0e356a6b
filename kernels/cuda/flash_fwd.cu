// kernels/cuda/flash_fwd.cu — fused forward, FlashAttention-2 schedule on
// tensor cores (f16, bf16): one block per (Q tile, head, batch); each warp owns
// 16 or 32 query rows; K/V tiles stream through shared memory with cp.async
// double buffering; S and P live in registers (mma.sync m16n8k16, f32
// accumulate); online softmax in base 2; one normalisation at the end.  Each
// iteration: S = Q K^T, scale and mask, the softmax update, O += P V.  Tiles
// are templated on two head dims: D (d_qk) for Q, K and S = Q K^T, DV (d_v)
// for V, O and P V; DV = D is the plain instantiation, the same code as before
// d_v had its own parameter.
#include "mask.cuh"
#include "softmax.cuh"

namespace
{

// A tile configuration of fwd_tc: kWarps warps of kMTiles m-tiles of 16 query
// rows each, kBlockN keys per K/V tile.  Two m-tiles halve the shared-memory
// reads of K and V per tensor-core product (FlashAttention-2's 32 rows per
// warp); Q's fragments then come from shared memory at each step instead of
// registers.  DV: d_v (V, O), D otherwise.
template <int D, int NW, int MR, int BN, int DV = D> struct fwd_tc_traits {
    static constexpr int kHeadDim = D, kHeadDimV = DV, kWarps = NW, kMTiles = MR, kBlockN = BN;
    static constexpr int kWarpRows = 16 * kMTiles, kBlockM = kWarpRows * kWarps, kThreads = 32 * kWarps;
    static constexpr int kPitch =
        D + 8; // shared row pitch (elements): 16 bytes of padding keep ldmatrix free of bank conflicts
    static constexpr int kPitchV = DV + 8; // V's
    static constexpr bool kQInRegs = MR == 1;
    static constexpr int kQFrags = kQInRegs ? D / 16 : 1; // Q's A fragments held in registers
    // Q, then two stages each of K and V.
    template <typename T> static constexpr size_t smem_bytes()
    {
        return sizeof(T) * ((size_t)(kBlockM + 2 * BN) * kPitch + (size_t)2 * BN * kPitchV);
    }
    static_assert(smem_bytes<__half>() <= 227 * 1024, "fwd_tc tile over the SM's 227 KiB of shared memory");
};

// S = Q K^T for a warp's m-tiles x kBlockN keys of the K stage sKs: Q's
// fragments from qf (one m-tile: loaded once) or from shared memory.
template <typename T, typename Kt>
__device__ __forceinline__ void qk_tc(float (&s)[Kt::kMTiles][Kt::kBlockN / 8][4], const uint32_t (&qf)[Kt::kQFrags][4],
                                      const T *sQ, const T *sKs, int warp, int lane)
{
    constexpr int D = Kt::kHeadDim, MR = Kt::kMTiles, BN = Kt::kBlockN, LD = Kt::kPitch;
#pragma unroll
    for (int mr = 0; mr < MR; ++mr)
        acd_zero(s[mr]);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t qa[MR][4];
#pragma unroll
        for (int mr = 0; mr < MR; ++mr) {
            if constexpr (Kt::kQInRegs) {
#pragma unroll
                for (int x = 0; x < 4; ++x)
                    qa[mr][x] = qf[kk][x];
            } else {
                acd_ldmatrix_x4(qa[mr],
                                sQ + (warp * Kt::kWarpRows + mr * 16 + lane % 16) * LD + kk * 16 + (lane / 16) * 8);
            }
        }
#pragma unroll
        for (int nn = 0; nn < BN / 16; ++nn) {
            uint32_t kf[4];
            acd_ldmatrix_x4(kf, sKs + (nn * 16 + (lane / 16) * 8 + lane % 8) * LD + kk * 16 + ((lane / 8) % 2) * 8);
#pragma unroll
            for (int mr = 0; mr < MR; ++mr) {
                acd_tc<T>::mma(s[mr][2 * nn], qa[mr], kf[0], kf[1]);
                acd_tc<T>::mma(s[mr][2 * nn + 1], qa[mr], kf[2], kf[3]);
            }
        }
    }
}

// O += P V for a warp's m-tiles, P rounded to T as the tensor cores need, V
// from the stage sVs.
template <typename T, typename Kt>
__device__ __forceinline__ void pv_tc(float (&o)[Kt::kMTiles][Kt::kHeadDimV / 8][4],
                                      const float (&pr)[Kt::kMTiles][Kt::kBlockN / 8][4], const T *sVs, int lane)
{
    constexpr int D = Kt::kHeadDimV, MR = Kt::kMTiles, BN = Kt::kBlockN, LD = Kt::kPitchV;
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
        uint32_t pf[MR][4];
#pragma unroll
        for (int mr = 0; mr < MR; ++mr)
            acd_frag_to_a<T>(pf[mr], pr[mr], kk);
#pragma unroll
        for (int dn = 0; dn < D / 16; ++dn) {
            uint32_t vf[4];
            acd_ldmatrix_x4_trans(vf,
                                  sVs + (kk * 16 + ((lane / 8) % 2) * 8 + lane % 8) * LD + dn * 16 + (lane / 16) * 8);
#pragma unroll
            for (int mr = 0; mr < MR; ++mr) {
                acd_tc<T>::mma(o[mr][2 * dn], pf[mr], vf[0], vf[1]);
                acd_tc<T>::mma(o[mr][2 * dn + 1], pf[mr], vf[2], vf[3]);
            }
        }
    }
}

template <typename T, typename Kt, bool kVar>
__global__ void __launch_bounds__(Kt::kThreads)
    fwd_tc(acd_params p, const T *__restrict__ Q, const T *__restrict__ K, const T *__restrict__ V, T *__restrict__ O,
           float *__restrict__ LSE)
{
    constexpr int D = Kt::kHeadDim, DV = Kt::kHeadDimV, MR = Kt::kMTiles, BN = Kt::kBlockN, BM = Kt::kBlockM,
                  NT = Kt::kThreads, LD = Kt::kPitch, LDV = Kt::kPitchV;
    constexpr bool kSplitDv = DV != D; // V, O with their own strides (else K's, Q's: equal then)
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *sQ = reinterpret_cast<T *>(smem_raw);
    T *sK = sQ + BM * LD; // two stages
    T *sV = sK + 2 * BN * LD;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int h = blockIdx.y, b = blockIdx.z, hk = h / p.group;
    const int nq = acd_nq<kVar>(p, b), nk = acd_nk<kVar>(p, b);
    // Heaviest tiles first: under a causal mask the last query tiles see the most keys.
    const int i0 = (gridDim.x - 1 - blockIdx.x) * BM, iw = i0 + warp * Kt::kWarpRows;
    const T *Qb = Q + acd_q_base<kVar>(p, b) + h * p.q_sh;
    const T *Kb = K + acd_k_base<kVar>(p, b) + hk * p.k_sh;
    const T *Vb;
    if constexpr (kSplitDv)
        Vb = V + acd_v_base<kVar>(p, b) + hk * p.v_sh;
    else
        Vb = V + acd_k_base<kVar>(p, b) + hk * p.k_sh;
    // The K/V tiles these rows can see; tiles outside the window are skipped.
    const acd_fwd_tiles span = acd_fwd_tile_range(p, i0, BM, BN, nq, nk);

    float o[MR][DV / 8][4];
#pragma unroll
    for (int mr = 0; mr < MR; ++mr)
        acd_zero(o[mr]);
    acd_softmax_row rows[MR][2];
    uint32_t qf[Kt::kQFrags][4];

    if (span.nb_lo < span.nb_hi) {
        acd_load_tile<T, BM, D, NT>(sQ, Qb, p.q_ss, i0, nq, tid);
        acd_load_tile<T, BN, D, NT>(sK, Kb, p.k_ss, span.nb_lo * BN, nk, tid);
        if constexpr (kSplitDv) // V's stride read where used, as K's (the same PTX as before d_v)
            acd_load_tile<T, BN, DV, NT>(sV, Vb, p.v_ss, span.nb_lo * BN, nk, tid);
        else
            acd_load_tile<T, BN, DV, NT>(sV, Vb, p.k_ss, span.nb_lo * BN, nk, tid);
        acd_cp_async_commit();
    }
    for (int nb = span.nb_lo; nb < span.nb_hi; ++nb) {
        const int stage = (nb - span.nb_lo) & 1, j0 = nb * BN;
        if (nb + 1 < span.nb_hi) {
            acd_load_tile<T, BN, D, NT>(sK + (stage ^ 1) * BN * LD, Kb, p.k_ss, (nb + 1) * BN, nk, tid);
            if constexpr (kSplitDv) // V's stride read where used, as K's (the same PTX as before d_v)
                acd_load_tile<T, BN, DV, NT>(sV + (stage ^ 1) * BN * LDV, Vb, p.v_ss, (nb + 1) * BN, nk, tid);
            else
                acd_load_tile<T, BN, DV, NT>(sV + (stage ^ 1) * BN * LDV, Vb, p.k_ss, (nb + 1) * BN, nk, tid);
            acd_cp_async_commit();
            acd_cp_async_wait<1>();
        } else {
            acd_cp_async_wait<0>();
        }
        __syncthreads();
        if constexpr (Kt::kQInRegs) {
            if (nb == span.nb_lo) {
#pragma unroll
                for (int kk = 0; kk < D / 16; ++kk)
                    acd_ldmatrix_x4(qf[kk], sQ + (warp * 16 + lane % 16) * LD + kk * 16 + (lane / 16) * 8);
            }
        }

        float s[MR][BN / 8][4];
        qk_tc<T, Kt>(s, qf, sQ, sK + stage * BN * LD, warp, lane);
        const bool tile_full = span.full(j0, BN, nk);
#pragma unroll
        for (int mr = 0; mr < MR; ++mr) {
            acd_scores_tile<BN, kVar>(s[mr], p, b, h, iw + mr * 16 + g, j0, t, nq, nk);
            if (!tile_full)
                acd_mask_tile<BN>(s[mr], p, b, h, iw + mr * 16 + g, j0, t, nq, nk);
        }
#pragma unroll
        for (int mr = 0; mr < MR; ++mr) {
            float alpha[2];
            acd_softmax_tile<T, BN>(rows[mr], s[mr], alpha);
            acd_rescale_rows<DV>(o[mr], alpha);
        }
        pv_tc<T, Kt>(o, s, sV + stage * BN * LDV, lane);
        // Every warp must be done with this stage before the next-but-one tile
        // is copied into it; the race mutant forgets.
        if (p.mutant != ACD_MUT_RACE)
            __syncthreads();
    }
    acd_cp_async_wait<0>();
#pragma unroll
    for (int mr = 0; mr < MR; ++mr)
        acd_fwd_epilogue<T, DV, kVar, kSplitDv>(p, O, LSE, b, h, iw + mr * 16 + g, t, nq, o[mr], rows[mr]);
}

template <typename T, typename Kt, bool kVar>
int launch_tc_var(const acd_params &p, const ac_fwd_args *a, cudaStream_t stream, ac_err *err)
{
    const size_t smem = Kt::template smem_bytes<T>();
    ACD_CHECK(err, cudaFuncSetAttribute(fwd_tc<T, Kt, kVar>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((p.Nq + Kt::kBlockM - 1) / Kt::kBlockM, p.Hq, p.B);
    fwd_tc<T, Kt, kVar>
        <<<grid, Kt::kThreads, smem, stream>>>(p, (const T *)a->q, (const T *)a->k, (const T *)a->v, (T *)a->o, a->lse);
    ACD_CHECK_LAUNCH(err, "fwd_tc");
    return AC_OK;
}

template <typename T, typename Kt>
int launch_tc(const acd_params &p, const ac_fwd_args *a, cudaStream_t stream, ac_err *err)
{
    acd_note_path(ACD_DISPATCH_FWD, ACD_PATH_MMA_SYNC);
    return acd_variant_kernel(p) ? launch_tc_var<T, Kt, true>(p, a, stream, err)
                                 : launch_tc_var<T, Kt, false>(p, a, stream, err);
}

// Tile configurations per head dim (head dim, warps, m-tiles per warp, keys
// per K/V tile).  d = 128, measured on an H100 (f16, N = 8k): 4 x 2 x 32: 264
// TFLOP/s; 8 x 1 x 64: 235; 8 x 2 x 32: 247.
using fwd_tc_d32 = fwd_tc_traits<32, 4, 1, 64>;
using fwd_tc_d64 = fwd_tc_traits<64, 4, 1, 64>;
using fwd_tc_d96 = fwd_tc_traits<96, 8, 1, 64>;
using fwd_tc_d128 = fwd_tc_traits<128, 4, 2, 32>;
// d_v != d_qk (d_qk, warps, m-tiles, keys, d_v): MLA's 192/128 and 256/128 with
// Q's fragments in registers (48, 64 of them) beside O's 64 accumulators;
// 128/96 as d = 128.  Not yet measured.
using fwd_tc_d192_v128 = fwd_tc_traits<192, 4, 1, 64, 128>;
using fwd_tc_d128_v96 = fwd_tc_traits<128, 4, 2, 32, 96>;
using fwd_tc_d256_v128 = fwd_tc_traits<256, 4, 1, 64, 128>;

// The CUDA-core forward (flash_f32.cu): f32, and the head dims without tensor-core tiles.
template <typename T> int launch_cuda_cores(const acd_params &p, const ac_fwd_args *a, cudaStream_t stream, ac_err *err)
{
    acd_note_path(ACD_DISPATCH_FWD, ACD_PATH_CUDA_CORES);
    return acd_fwd_f32<T>(p, a, stream, err);
}

template <typename T> int dispatch_tc(const acd_params &p, const ac_fwd_args *a, cudaStream_t stream, ac_err *err)
{
    // The race mutant stays on mma.sync: compute-sanitizer's racecheck does not see
    // wgmma's shared-memory reads (async proxy), so with the barrier gone there it
    // reported 0 hazards; ldmatrix's reads it does see.
    if (p.mutant != ACD_MUT_RACE && acd_wgmma_usable(p.D, p.Dv)) {
        acd_note_path(ACD_DISPATCH_FWD, ACD_PATH_WGMMA);
        return acd_fwd_wgmma<T>(p, a, stream, err);
    }
    if (p.Dv != p.D) {
        if (p.D == 192 && p.Dv == 128)
            return launch_tc<T, fwd_tc_d192_v128>(p, a, stream, err);
        if (p.D == 128 && p.Dv == 96)
            return launch_tc<T, fwd_tc_d128_v96>(p, a, stream, err);
        if (p.D == 256 && p.Dv == 128)
            return launch_tc<T, fwd_tc_d256_v128>(p, a, stream, err);
        return launch_cuda_cores<T>(p, a, stream, err); // other pairs
    }
    switch (p.D) {
    case 32:
        return launch_tc<T, fwd_tc_d32>(p, a, stream, err);
    case 64:
        return launch_tc<T, fwd_tc_d64>(p, a, stream, err);
    case 96:
        return launch_tc<T, fwd_tc_d96>(p, a, stream, err);
    case 128:
        return launch_tc<T, fwd_tc_d128>(p, a, stream, err);
    default:
        return launch_cuda_cores<T>(p, a, stream, err); // no tensor-core tiles (d <= 256)
    }
}

} // namespace

// Launch only (no sync): the bench times this.
int acd_flash_forward_async(const acd_params &p, ac_dtype t, const ac_fwd_args *a, cudaStream_t stream, ac_err *err)
{
    switch (t) {
    case AC_F16:
        return dispatch_tc<__half>(p, a, stream, err);
    case AC_BF16:
        return dispatch_tc<__nv_bfloat16>(p, a, stream, err);
    case AC_F32:
        return launch_cuda_cores<float>(p, a, stream, err);
    default:
        return ac_fail(err, AC_ERR_INPUT, "cuda-flash: unsupported dtype %d", (int)t);
    }
}

extern "C" int acd_flash_forward(const ac_problem *prob, ac_dtype t, const ac_fwd_args *a, int mutant, ac_err *err)
{
    acd_params p;
    acd_staged st;
    int status = acd_stage(prob, mutant, &p, &st, err);
    if (status != AC_OK)
        return status;
    status = acd_flash_forward_async(p, t, a, 0, err);
    if (status == AC_OK)
        status = ac_dev_sync(err);
    acd_unstage(&st);
    return status;
}
