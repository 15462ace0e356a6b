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
#include <cstdlib>

#include "common.cuh"
#include "wgmma.cuh"

namespace {

// S entries this thread holds that the rules hide become -inf: per row the key
// range (two compares per entry), then the dense mask where there is one.
template <int BN>
__device__ __forceinline__ void mask_tile(float (&s)[BN / 2], const acd_params &p, int b, int h, int row, int j0, int t,
                                          int nq, int nk)
{
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int i = row + 8 * r;
        int lo, hi;
        acd_row_keys(p, i, nq, nk, lo, hi);
        const unsigned char *mrow = acd_mask_row(p, b, h, i);
#pragma unroll
        for (int n = 0; n < BN / 8; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int j = j0 + n * 8 + 2 * t + e;
                bool vis = j >= lo && j < hi;
                if (mrow) vis = vis && j < p.Nk && mrow[j] != 0;
                if (!vis) s[4 * n + 2 * r + e] = -INFINITY;
            }
    }
}

// O += P V for one K/V tile: P (BN keys) from registers, V (BN x D) at sV.
template <typename T, int D, int BN>
__device__ __forceinline__ void pv_issue(float (&o)[D / 2], const uint32_t (&pf)[BN / 16][4], uint32_t sV)
{
    const uint64_t dv0 = acd_wg_desc(sV, BN * 128, 1024);
    acd_wg_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) acd_wg_rs<T, D>::run(o, pf[kk], acd_wg_desc_add(dv0, kk * 16 * 128));
    acd_wg_commit();
}

// K/V tiles in shared memory at once: the copy runs one tile ahead while the
// tile before is still read by P V.
constexpr int kStages = 3;

// A tile configuration of fwd_wg: kWarpGroups warpgroups of 64 query rows,
// kBlockN keys per K/V tile, kMinBlocks blocks per SM for the register budget.
template <int D, int BN, int NWG, int MINB>
struct fwd_wg_traits {
    static constexpr int kHeadDim = D, kBlockN = BN, kWarpGroups = NWG, kMinBlocks = MINB;
    static constexpr int kBlockM = 64 * NWG, kThreads = 128 * NWG;
    // Q, the stages of K and V, and the slack that aligns them to 1024 bytes.
    template <typename T> static constexpr size_t smem_bytes() { return sizeof(T) * (size_t)(kBlockM + kStages * 2 * BN) * D + 1024; }
};

template <typename T, typename Kt>
__global__ void __launch_bounds__(Kt::kThreads, Kt::kMinBlocks)
fwd_wg(acd_params p, const T *__restrict__ Q, const T *__restrict__ K, const T *__restrict__ V,
       T *__restrict__ O, float *__restrict__ LSE)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int D = Kt::kHeadDim, BN = Kt::kBlockN, BM = Kt::kBlockM, NT = Kt::kThreads;
    constexpr uint32_t kQBytes = BM * D * 2, kKVBytes = BN * D * 2;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    // Swizzle atoms must start 1024-byte aligned (the launch adds the slack).
    const uint32_t sQ = (acd_smem_addr(smem_raw) + 1023u) & ~1023u, sKV = sQ + kQBytes;

    const int tid = threadIdx.x, wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int h = blockIdx.y, b = blockIdx.z, hk = h / p.group;
    const int nq = acd_nq(p, b), nk = acd_nk(p, b);
    // Heaviest tiles first: under a causal mask the last query tiles see the most keys.
    const int i0 = (gridDim.x - 1 - blockIdx.x) * BM, iw = i0 + wg * 64 + warp * 16;
    const T *Qb = Q + b * p.q_sb + h * p.q_sh;
    const T *Kb = K + b * p.k_sb + hk * p.k_sh;
    const T *Vb = V + b * p.k_sb + hk * p.k_sh;

    // The K/V tiles these rows can see; tiles outside the window are skipped.
    const acd_fwd_tiles span = acd_fwd_tile_range(p, i0, BM, BN, nq, nk);
    const int nb_lo = span.nb_lo, nb_hi = span.nb_hi, lo_last = span.lo_last, hi_first = span.hi_first;
    const bool rows_full = i0 + BM <= nq && !p.mask;

    // Accumulators in wgmma's layout, per warp the m16n8 tiles of mma.sync:
    // x[4n + e] is row g + 8 (e / 2), column 8n + 2t + e % 2 of the warp's 16 rows.
    float o[D / 2];
#pragma unroll
    for (int x = 0; x < D / 2; ++x) o[x] = 0.f;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};

    // Tile nb_lo + x sits in stage x mod 3 (K, then V): the previous tile's,
    // this one's and the next one's rotate.
    static_assert(kStages == 3, "three stages rotate below");
    uint32_t st_prev = sKV + 4 * kKVBytes, st_cur = sKV, st_next = sKV + 2 * kKVBytes;
    if (nb_lo < nb_hi) {
        acd_load_tile_sw128<T, BM, D, NT>(sQ, Qb, p.q_ss, i0, nq, tid);
        acd_load_tile_sw128<T, BN, D, NT>(st_cur, Kb, p.k_ss, nb_lo * BN, nk, tid);
        acd_load_tile_sw128<T, BN, D, NT>(st_cur + kKVBytes, Vb, p.k_ss, nb_lo * BN, nk, tid);
        acd_cp_async_commit();
    }
    // Iteration it issues S = Q K^T of its tile and, behind it on the tensor
    // cores, O += P V of the tile before; the softmax of S runs while that
    // product does (FlashAttention-3's intra-warpgroup overlap).  P of the
    // previous tile waits in pf, already rounded to the input dtype.
    float s[BN / 2];
    uint32_t pf[BN / 16][4];
    const uint64_t dq0 = acd_wg_desc(sQ + wg * 64 * 128, 16, 1024); // this warpgroup's 64 rows of Q
    for (int nb = nb_lo; nb < nb_hi; ++nb) {
        const int it = nb - nb_lo;
        acd_cp_async_wait<0>(); // this tile, the only copy in flight
        // cp.async wrote through the generic proxy; wgmma reads through the async one.
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        // Every warp sees this tile, and every warpgroup is done with the tile
        // two back, whose stage the next copy reuses.  (The race mutant, which
        // drops such a barrier, runs flash_fwd.cu: racecheck cannot see wgmma.)
        __syncthreads();
        if (nb + 1 < nb_hi) {
            acd_load_tile_sw128<T, BN, D, NT>(st_next, Kb, p.k_ss, (nb + 1) * BN, nk, tid);
            acd_load_tile_sw128<T, BN, D, NT>(st_next + kKVBytes, Vb, p.k_ss, (nb + 1) * BN, nk, tid);
            acd_cp_async_commit();
        }

        // S = Q K^T: this warpgroup's 64 rows x BN keys, k steps of 16 along d.
        acd_wg_fence();
        const uint64_t dk0 = acd_wg_desc(st_cur, 16, 1024);
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk)
            acd_wg_ss<T, BN>::run(s, acd_wg_desc_add(dq0, (kk / 4) * (BM * 128) + (kk % 4) * 32),
                                  acd_wg_desc_add(dk0, (kk / 4) * (BN * 128) + (kk % 4) * 32), kk > 0);
        acd_wg_commit();
        if (it > 0) {
            pv_issue<T, D, BN>(o, pf, st_prev + kKVBytes);
            acd_wg_wait<1>();
        } else {
            acd_wg_wait<0>();
        }
        acd_wg_hold(s);

        const int j0 = nb * BN;
#pragma unroll
        for (int x = 0; x < BN / 2; ++x) s[x] *= p.scale_log2;
        const bool tile_full = rows_full && j0 >= lo_last && j0 + BN <= hi_first && j0 + BN <= nk;
        if (!tile_full) mask_tile<BN>(s, p, b, h, iw + g, j0, t, nq, nk);

        // Online softmax: rows g (r = 0) and g + 8 (r = 1) of the warp's 16.
        float alpha[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float mx = -INFINITY;
#pragma unroll
            for (int n = 0; n < BN / 8; ++n) mx = fmaxf(mx, fmaxf(s[4 * n + 2 * r], s[4 * n + 2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_new = fmaxf(m_run[r], mx);
            const float m_use = m_new == -INFINITY ? 0.f : m_new; // a row with nothing visible yet
            alpha[r] = exp2f(m_run[r] - m_use);
            float row_sum = 0.f;
#pragma unroll
            for (int n = 0; n < BN / 8; ++n) {
                s[4 * n + 2 * r] = acd_exp2(s[4 * n + 2 * r] - m_use);
                s[4 * n + 2 * r + 1] = acd_exp2(s[4 * n + 2 * r + 1] - m_use);
                row_sum += s[4 * n + 2 * r] + s[4 * n + 2 * r + 1];
            }
            l_run[r] = l_run[r] * alpha[r] + row_sum;
            m_run[r] = m_new;
        }

        // The previous P V is done: rescale O to this tile's max and keep its P.
        acd_wg_wait<0>();
        acd_wg_hold(o);
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) acd_wg_hold(pf[kk]); // read by that product until the wait
#pragma unroll
        for (int n = 0; n < D / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[4 * n + e] *= alpha[e / 2];
        // P rounded to the input dtype as the tensor cores need; the 16 keys
        // of step kk are S's n-chunks 2kk and 2kk + 1.
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            pf[kk][0] = acd_tc<T>::pack(s[8 * kk + 0], s[8 * kk + 1]);
            pf[kk][1] = acd_tc<T>::pack(s[8 * kk + 2], s[8 * kk + 3]);
            pf[kk][2] = acd_tc<T>::pack(s[8 * kk + 4], s[8 * kk + 5]);
            pf[kk][3] = acd_tc<T>::pack(s[8 * kk + 6], s[8 * kk + 7]);
        }
        const uint32_t freed = st_prev;
        st_prev = st_cur, st_cur = st_next, st_next = freed;
    }
    if (nb_lo < nb_hi) { // the last tile's P V
        pv_issue<T, D, BN>(o, pf, st_prev + kKVBytes);
        acd_wg_wait<0>();
        acd_wg_hold(o);
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) acd_wg_hold(pf[kk]);
    }

    // One normalisation; rows with nothing visible give O = 0 and LSE = -inf.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float l = l_run[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const float inv = l > 0.f ? 1.f / l : 0.f;
        const int i = iw + g + 8 * r;
        if (i >= p.Nq) continue;
        T *Orow = O + b * p.q_sb + h * p.q_sh + (long long)i * p.q_ss;
#pragma unroll
        for (int n = 0; n < D / 8; ++n) acd_tc<T>::store2(Orow + n * 8 + 2 * t, o[4 * n + 2 * r] * inv, o[4 * n + 2 * r + 1] * inv);
        if (t == 0) LSE[((long long)b * p.Hq + h) * p.Nq + i] = l > 0.f ? acd_lse(m_run[r], ACD_LN2, l) : -INFINITY;
    }
#elif defined(__CUDA_ARCH__)
    __trap(); // built without sm_90a's wgmma: never launched (acd_wgmma_usable)
#endif
}

template <typename T, typename Kt>
int launch_wg(const acd_params &p, const ac_fwd_args *a, cudaStream_t stream, ac_err *err)
{
    const size_t smem = Kt::template smem_bytes<T>();
    ACD_CHECK(err, cudaFuncSetAttribute(fwd_wg<T, Kt>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((p.Nq + Kt::kBlockM - 1) / Kt::kBlockM, p.Hq, p.B);
    fwd_wg<T, Kt><<<grid, Kt::kThreads, smem, stream>>>(p, (const T *)a->q, (const T *)a->k, (const T *)a->v, (T *)a->o, a->lse);
    ACD_CHECK_LAUNCH(err, "fwd_wg");
    return AC_OK;
}

// Tile configurations (head dim, keys per K/V tile, warpgroups, blocks per SM),
// measured on an H100 (f16, N = 8k, PERF.md): d = 128 with 128-key tiles and one
// 2-warpgroup block per SM; d = 64 with 64-key tiles, two blocks per SM.
using fwd_wg_d64 = fwd_wg_traits<64, 64, 2, 2>;
using fwd_wg_d128 = fwd_wg_traits<128, 128, 2, 1>;

} // namespace

// Hopper (compute capability 9.0, where the sm_90a code runs), head dims 64 and
// 128; ACD_NO_WGMMA=1 sends these shapes to the mma.sync kernels (flash_fwd.cu,
// flash_bwd.cu), which other GPUs run.
bool acd_wgmma_usable(int d)
{
    if (d != 64 && d != 128) return false;
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

template <typename T>
int acd_fwd_wgmma(const acd_params &p, const ac_fwd_args *a, cudaStream_t stream, ac_err *err)
{
    if (p.D == 64) return launch_wg<T, fwd_wg_d64>(p, a, stream, err);
    return launch_wg<T, fwd_wg_d128>(p, a, stream, err);
}
template int acd_fwd_wgmma<__half>(const acd_params &, const ac_fwd_args *, cudaStream_t, ac_err *);
template int acd_fwd_wgmma<__nv_bfloat16>(const acd_params &, const ac_fwd_args *, cudaStream_t, ac_err *);
