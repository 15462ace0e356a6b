// kernels/cuda/flash_fwd_sm90.cu — the fused forward on Hopper's warpgroup
// tensor-core product (wgmma, sm_90a machine code only): f16 and bf16 at head
// dims 64 and 128, the shapes with a speed goal.  Same schedule and numerics as
// flash_fwd.cu (FlashAttention-2: one block per (Q tile, head, batch), K/V
// tiles streamed through shared memory with cp.async, here in three stages,
// online softmax in base 2 in registers, one normalisation at the end), but
// each warpgroup of 4 warps owns 64 query rows and issues S = Q K^T with both
// operands in shared memory and O += P V with P straight from the registers
// that held S.  flash_fwd.cu's mma.sync kernel, tuned, stayed at 258-261
// TFLOP/s on the H100 (d = 128, N = 8k); this one runs at 498-505 (PERF.md).
// Two head dims: D (d_qk) for Q, K and S = Q K^T, DV (d_v) for V, O and P V;
// d_v != d_qk at MLA's 192/128 and at 256/128.
#include <cstdlib>

#include "mask.cuh"
#include "softmax.cuh"
#include "wgmma.cuh"

namespace
{

// O += P V for one K/V tile: P (BN keys) from registers, V (BN x D) at sV.
template <typename T, int D, int BN>
__device__ __forceinline__ void pv_issue(float (&o)[D / 8][4], const uint32_t (&pf)[BN / 16][4], uint32_t sV)
{
    const uint64_t dv0 = acd_wg_desc(sV, BN * 128, 1024);
    acd_wg_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
        acd_wg_rs<T, D>::run(o, pf[kk], acd_wg_desc_add(dv0, kk * 16 * 128));
    acd_wg_commit();
}

// K/V tiles in shared memory at once: the copy runs one tile ahead while the
// tile before is still read by P V.
constexpr int kStages = 3;

// A tile configuration of fwd_wg: kWarpGroups warpgroups of 64 query rows,
// kBlockN keys per K/V tile, kMinBlocks blocks per SM for the register budget;
// DV: d_v (V, O), D otherwise.
template <int D, int BN, int NWG, int MINB, int DV = D> struct fwd_wg_traits {
    static constexpr int kHeadDim = D, kHeadDimV = DV, kBlockN = BN, kWarpGroups = NWG, kMinBlocks = MINB;
    static constexpr int kBlockM = 64 * kWarpGroups, kThreads = 128 * kWarpGroups;
    // Q, the stages of K and V, and the slack that aligns them to 1024 bytes.
    template <typename T> static constexpr size_t smem_bytes()
    {
        return sizeof(T) * ((size_t)(kBlockM + kStages * BN) * D + (size_t)kStages * BN * DV) + 1024;
    }
    static_assert(smem_bytes<__half>() <= 227 * 1024, "fwd_wg tile over the SM's 227 KiB of shared memory");
    // Every tile (Q, a stage's K, its V) starts 1024-byte aligned, as the swizzle atoms need.
    static_assert((BN * D * 2) % 1024 == 0 && (BN * DV * 2) % 1024 == 0, "K/V stages 1024-byte aligned");
};

// S = Q K^T issued for this warpgroup's 64 rows (Q at dq0) x BN keys (K at
// sK), k steps of 16 along d; the caller waits.
template <typename T, int D, int BN, int BM>
__device__ __forceinline__ void qk_issue(float (&s)[BN / 8][4], uint64_t dq0, uint32_t sK)
{
    acd_wg_fence();
    const uint64_t dk0 = acd_wg_desc(sK, 16, 1024);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
        acd_wg_ss<T, BN>::run(s, acd_wg_desc_add(dq0, (kk / 4) * (BM * 128) + (kk % 4) * 32),
                              acd_wg_desc_add(dk0, (kk / 4) * (BN * 128) + (kk % 4) * 32), kk > 0);
    acd_wg_commit();
}

template <typename T, typename Kt, bool kVar>
__global__ void __launch_bounds__(Kt::kThreads, Kt::kMinBlocks)
    fwd_wg(acd_params p, const T *__restrict__ Q, const T *__restrict__ K, const T *__restrict__ V, T *__restrict__ O,
           float *__restrict__ LSE)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int D = Kt::kHeadDim, DV = Kt::kHeadDimV, BN = Kt::kBlockN, BM = Kt::kBlockM, NT = Kt::kThreads;
    constexpr bool kSplitDv = DV != D; // V, O with their own strides (else K's, Q's: equal then)
    // A stage holds a K tile, then a V tile.
    constexpr uint32_t kQBytes = BM * D * 2, kKBytes = BN * D * 2, kStageBytes = kKBytes + BN * DV * 2;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    // Swizzle atoms must start 1024-byte aligned (the launch adds the slack).
    const uint32_t sQ = (acd_smem_addr(smem_raw) + 1023u) & ~1023u, sKV = sQ + kQBytes;

    const int tid = threadIdx.x, wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int h = blockIdx.y, b = blockIdx.z, hk = h / p.group;
    const int nq = acd_nq<kVar>(p, b), nk = acd_nk<kVar>(p, b);
    // Heaviest tiles first: under a causal mask the last query tiles see the most keys.
    const int i0 = (gridDim.x - 1 - blockIdx.x) * BM, iw = i0 + wg * 64 + warp * 16;
    const T *Qb = Q + acd_q_base<kVar>(p, b) + h * p.q_sh;
    const T *Kb = K + acd_k_base<kVar>(p, b) + hk * p.k_sh;
    const T *Vb;
    if constexpr (kSplitDv)
        Vb = V + acd_v_base<kVar>(p, b) + hk * p.v_sh;
    else
        Vb = V + acd_k_base<kVar>(p, b) + hk * p.k_sh;
    // The K/V tiles these rows can see; tiles outside the window are skipped.
    const acd_fwd_tiles span = acd_fwd_tile_range(p, i0, BM, BN, nq, nk);

    float o[DV / 8][4];
    acd_zero(o);
    acd_softmax_row rows[2];

    // Tile nb_lo + x sits in stage x mod 3 (K, then V): the previous tile's,
    // this one's and the next one's rotate.
    static_assert(kStages == 3, "three stages rotate below");
    uint32_t st_prev = sKV + 2 * kStageBytes, st_cur = sKV, st_next = sKV + kStageBytes;
    if (span.nb_lo < span.nb_hi) {
        acd_load_tile_sw128<T, BM, D, NT>(sQ, Qb, p.q_ss, i0, nq, tid);
        acd_load_tile_sw128<T, BN, D, NT>(st_cur, Kb, p.k_ss, span.nb_lo * BN, nk, tid);
        if constexpr (kSplitDv) // V's stride read where used, as K's (the same PTX as before d_v)
            acd_load_tile_sw128<T, BN, DV, NT>(st_cur + kKBytes, Vb, p.v_ss, span.nb_lo * BN, nk, tid);
        else
            acd_load_tile_sw128<T, BN, DV, NT>(st_cur + kKBytes, Vb, p.k_ss, span.nb_lo * BN, nk, tid);
        acd_cp_async_commit();
    }
    // Iteration nb issues S = Q K^T of its tile and, behind it on the tensor
    // cores, O += P V of the tile before; the softmax of S runs while that
    // product does (FlashAttention-3's intra-warpgroup overlap).  P of the
    // previous tile waits in pf, already rounded to the input dtype.
    float s[BN / 8][4];
    uint32_t pf[BN / 16][4];
    const uint64_t dq0 = acd_wg_desc(sQ + wg * 64 * 128, 16, 1024); // this warpgroup's 64 rows of Q
    for (int nb = span.nb_lo; nb < span.nb_hi; ++nb) {
        const int j0 = nb * BN;
        acd_cp_async_wait<0>(); // this tile, the only copy in flight
        // cp.async wrote through the generic proxy; wgmma reads through the async one.
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        // Every warp sees this tile, and every warpgroup is done with the tile
        // two back, whose stage the next copy reuses.  (The race mutant, which
        // drops such a barrier, runs flash_fwd.cu: racecheck cannot see wgmma.)
        __syncthreads();
        if (nb + 1 < span.nb_hi) {
            acd_load_tile_sw128<T, BN, D, NT>(st_next, Kb, p.k_ss, (nb + 1) * BN, nk, tid);
            if constexpr (kSplitDv) // V's stride read where used, as K's (the same PTX as before d_v)
                acd_load_tile_sw128<T, BN, DV, NT>(st_next + kKBytes, Vb, p.v_ss, (nb + 1) * BN, nk, tid);
            else
                acd_load_tile_sw128<T, BN, DV, NT>(st_next + kKBytes, Vb, p.k_ss, (nb + 1) * BN, nk, tid);
            acd_cp_async_commit();
        }

        qk_issue<T, D, BN, BM>(s, dq0, st_cur);
        if (nb - span.nb_lo > 0) { // the previous tile's P V behind this S
            pv_issue<T, DV, BN>(o, pf, st_prev + kKBytes);
            acd_wg_wait<1>();
        } else {
            acd_wg_wait<0>();
        }
        acd_wg_hold(s);

        acd_scores_tile<BN, kVar>(s, p, b, h, iw + g, j0, t, nq, nk);
        if (!span.full(j0, BN, nk))
            acd_mask_tile<BN>(s, p, b, h, iw + g, j0, t, nq, nk);
        float alpha[2];
        acd_softmax_tile<T, BN>(rows, s, alpha);

        // The previous P V is done: rescale O to this tile's max and keep its P.
        acd_wg_wait<0>();
        acd_wg_hold(o);
        acd_wg_hold(pf); // read by that product until the wait
        acd_rescale_rows<DV>(o, alpha);
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk)
            acd_frag_to_a<T>(pf[kk], s, kk);
        const uint32_t freed = st_prev;
        st_prev = st_cur, st_cur = st_next, st_next = freed;
    }
    if (span.nb_lo < span.nb_hi) { // the last tile's P V
        pv_issue<T, DV, BN>(o, pf, st_prev + kKBytes);
        acd_wg_wait<0>();
        acd_wg_hold(o);
        acd_wg_hold(pf);
    }
    acd_fwd_epilogue<T, DV, kVar, kSplitDv>(p, O, LSE, b, h, iw + g, t, nq, o, rows);
#elif defined(__CUDA_ARCH__)
    __trap(); // built without sm_90a's wgmma: never launched (acd_wgmma_usable)
#endif
}

template <typename T, typename Kt, bool kVar>
int launch_wg_var(const acd_params &p, const ac_fwd_args *a, cudaStream_t stream, ac_err *err)
{
    const size_t smem = Kt::template smem_bytes<T>();
    ACD_CHECK(err, cudaFuncSetAttribute(fwd_wg<T, Kt, kVar>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((p.Nq + Kt::kBlockM - 1) / Kt::kBlockM, p.Hq, p.B);
    fwd_wg<T, Kt, kVar>
        <<<grid, Kt::kThreads, smem, stream>>>(p, (const T *)a->q, (const T *)a->k, (const T *)a->v, (T *)a->o, a->lse);
    ACD_CHECK_LAUNCH(err, "fwd_wg");
    return AC_OK;
}

template <typename T, typename Kt>
int launch_wg(const acd_params &p, const ac_fwd_args *a, cudaStream_t stream, ac_err *err)
{
    return acd_variant_kernel(p) ? launch_wg_var<T, Kt, true>(p, a, stream, err)
                                 : launch_wg_var<T, Kt, false>(p, a, stream, err);
}

// Tile configurations (head dim, keys per K/V tile, warpgroups, blocks per SM),
// measured on an H100 (f16, N = 8k, PERF.md): d = 128 with 128-key tiles and one
// 2-warpgroup block per SM; d = 64 with 64-key tiles, two blocks per SM.
using fwd_wg_d64 = fwd_wg_traits<64, 64, 2, 2>;
using fwd_wg_d128 = fwd_wg_traits<128, 128, 2, 1>;
// d_v != d_qk (d_qk, keys, warpgroups, blocks per SM, d_v): 64-key tiles keep
// three stages of K (d_qk wide) and V in shared memory (169 KiB at 192/128,
// 209 KiB at 256/128).  128/96 has no wgmma tile (96 columns are a swizzle
// block and a half): mma.sync runs it.  Not yet measured.
using fwd_wg_d192_v128 = fwd_wg_traits<192, 64, 2, 1, 128>;
using fwd_wg_d256_v128 = fwd_wg_traits<256, 64, 2, 1, 128>;

} // namespace

// Hopper (compute capability 9.0, where the sm_90a code runs), unless
// ACD_NO_WGMMA=1 sends every shape to the mma.sync kernels (flash_fwd.cu,
// flash_bwd.cu), which other GPUs run.
static bool wgmma_device()
{
    static int usable = -1;
    if (usable < 0) {
        int dev = 0, major = 0, minor = 0;
        const char *off = getenv("ACD_NO_WGMMA");
        usable = (!off || !*off || *off == '0') && cudaGetDevice(&dev) == cudaSuccess &&
            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess && major == 9 &&
            minor == 0;
    }
    return usable == 1;
}

// The forward's wgmma tiles: (d_qk, d_v) = (64, 64), (128, 128), (192, 128),
// (256, 128).
bool acd_wgmma_usable(int d, int dv)
{
    const bool tile = dv == d ? d == 64 || d == 128 : dv == 128 && (d == 192 || d == 256);
    return tile && wgmma_device();
}

// The backward's (flash_bwd_sm90.cu): (64, 64), (128, 128), (192, 128),
// (128, 96); 256/128's accumulators do not fit its registers.
bool acd_wgmma_bwd_usable(int d, int dv)
{
    const bool tile = dv == d ? d == 64 || d == 128 : (d == 192 && dv == 128) || (d == 128 && dv == 96);
    return tile && wgmma_device();
}

template <typename T> int acd_fwd_wgmma(const acd_params &p, const ac_fwd_args *a, cudaStream_t stream, ac_err *err)
{
    if (p.D == 64)
        return launch_wg<T, fwd_wg_d64>(p, a, stream, err);
    if (p.D == 192)
        return launch_wg<T, fwd_wg_d192_v128>(p, a, stream, err);
    if (p.D == 256)
        return launch_wg<T, fwd_wg_d256_v128>(p, a, stream, err);
    return launch_wg<T, fwd_wg_d128>(p, a, stream, err);
}
template int acd_fwd_wgmma<__half>(const acd_params &, const ac_fwd_args *, cudaStream_t, ac_err *);
template int acd_fwd_wgmma<__nv_bfloat16>(const acd_params &, const ac_fwd_args *, cudaStream_t, ac_err *);
