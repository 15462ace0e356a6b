// kernels/cuda/flash_bwd_sm90.cu — the fused backward's main kernel on
// Hopper's warpgroup tensor-core product (wgmma, sm_90a machine code only):
// f16 and bf16 at head dims 64 and 128.  Schedule and numerics are those of
// flash_bwd.cu's bwd_tc (FlashAttention-2: one block per 128-key tile of one
// KV head, looping over the query tiles of its GQA group; P recomputed from
// LSE; dK, dV in registers; dQ partial sums through shared memory into f32
// atomics), which also supplies the D pre-pass and the dQ conversion.  Each
// warpgroup owns 64 keys, the M of wgmma:
//   S^T = K Q^T, dP^T = V dO^T   both operands in shared memory
//   dV += P^T dO, dK += dS^T Q   P^T, dS^T from the registers that held S^T, dP^T
//   dQ  = dS K                   dS through shared memory (it is transposed)
#include "common.cuh"
#include "wgmma.cuh"

namespace {

constexpr int kBN = 128, kBMQ = 64, kNT = 256; // keys per block, query rows per tile, threads

template <typename T, int D>
__global__ void __launch_bounds__(kNT, 1)
bwd_wg(acd_params p, const T *__restrict__ Q, const T *__restrict__ K, const T *__restrict__ V,
       const T *__restrict__ dO, const float *__restrict__ LSE, const float *__restrict__ Dv,
       float *__restrict__ dQacc, T *__restrict__ dK, T *__restrict__ dV)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr uint32_t kKVBytes = kBN * D * 2, kQBytes = kBMQ * D * 2, kSBytes = kBMQ * kBN * 2;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    // Swizzle atoms must start 1024-byte aligned (the launch adds the slack).
    const uint32_t sK = (acd_smem_addr(smem_raw) + 1023u) & ~1023u, sV = sK + kKVBytes;
    const uint32_t sQ2 = sV + kKVBytes, sdO2 = sQ2 + 2 * kQBytes, sdS = sdO2 + 2 * kQBytes; // Q, dO: two stages
    float *sLse2 = reinterpret_cast<float *>(smem_raw + (sdS + kSBytes - acd_smem_addr(smem_raw))), *sDd2 = sLse2 + 2 * kBMQ;

    const int tid = threadIdx.x, wg = tid / 128, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int hk = blockIdx.y, b = blockIdx.z, j0 = blockIdx.x * kBN;
    const int nq = acd_nq(p, b), nk = acd_nk(p, b);
    const int key = j0 + warp * 16 + g; // this thread's keys: key, key + 8

    acd_load_tile_sw128<T, kBN, D, kNT>(sK, K + b * p.k_sb + hk * p.k_sh, p.k_ss, j0, nk, tid);
    acd_load_tile_sw128<T, kBN, D, kNT>(sV, V + b * p.k_sb + hk * p.k_sh, p.k_ss, j0, nk, tid);
    acd_cp_async_commit();

    int i_lo, i_hi; // query rows that can see this block's keys
    acd_bwd_query_rows(p, j0, kBN, nq, nk, i_lo, i_hi);
    const bool keys_full = j0 + kBN <= nk && !p.mask;
    const int win_off = p.align_br ? nk - nq : 0;

    float dk[D / 2], dv[D / 2];
#pragma unroll
    for (int x = 0; x < D / 2; ++x) dk[x] = dv[x] = 0.f;

    // The (query head, query tile) pairs of this block, one after the other.
    const int it0 = (i_lo / kBMQ) * kBMQ, tiles_per_head = i_hi > it0 ? (i_hi - it0 + kBMQ - 1) / kBMQ : 0;
    const int n_tiles = p.group * tiles_per_head;
    auto load_q_tile = [&](int x) {
        const int h = hk * p.group + x / tiles_per_head, i0 = it0 + (x % tiles_per_head) * kBMQ, stage = x & 1;
        acd_load_tile_sw128<T, kBMQ, D, kNT>(sQ2 + stage * kQBytes, Q + b * p.q_sb + h * p.q_sh, p.q_ss, i0, nq, tid);
        acd_load_tile_sw128<T, kBMQ, D, kNT>(sdO2 + stage * kQBytes, dO + b * p.q_sb + h * p.q_sh, p.q_ss, i0, nq, tid);
        acd_load_lse_d<kBMQ>(sLse2 + stage * kBMQ, sDd2 + stage * kBMQ, LSE, Dv, p, b, h, i0, nq, tid);
        acd_cp_async_commit();
    };
    if (n_tiles > 0) load_q_tile(0);

    for (int x = 0; x < n_tiles; ++x) {
        const int h = hk * p.group + x / tiles_per_head, i0 = it0 + (x % tiles_per_head) * kBMQ, stage = x & 1;
        const uint32_t sQ = sQ2 + stage * kQBytes, sdO = sdO2 + stage * kQBytes;
        const float *sLse = sLse2 + stage * kBMQ, *sDd = sDd2 + stage * kBMQ;
        acd_cp_async_wait<0>(); // this tile (and, the first time, K and V): the only copies in flight
        // cp.async and the stores below wrote through the generic proxy; wgmma reads through the async one.
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        // Every warp sees this tile; every warpgroup is done with the previous
        // one, whose stage the next copy reuses, and with its dS.
        __syncthreads();
        if (x + 1 < n_tiles) load_q_tile(x + 1);

        // S^T = K_w Q^T and dP^T = V_w dO^T: this warpgroup's 64 keys x 64 queries.
        float st[kBMQ / 2], dpt[kBMQ / 2];
        {
            const uint64_t dkd = acd_wg_desc(sK + wg * 64 * 128, 16, 1024), dvd = acd_wg_desc(sV + wg * 64 * 128, 16, 1024);
            const uint64_t dqd = acd_wg_desc(sQ, 16, 1024), dod = acd_wg_desc(sdO, 16, 1024);
            acd_wg_fence();
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) {
                const uint32_t a_off = (kk / 4) * (kBN * 128) + (kk % 4) * 32, b_off = (kk / 4) * (kBMQ * 128) + (kk % 4) * 32;
                acd_wg_ss<T, kBMQ>::run(st, acd_wg_desc_add(dkd, a_off), acd_wg_desc_add(dqd, b_off), kk > 0);
                acd_wg_ss<T, kBMQ>::run(dpt, acd_wg_desc_add(dvd, a_off), acd_wg_desc_add(dod, b_off), kk > 0);
            }
            acd_wg_commit();
            acd_wg_wait<0>();
            acd_wg_hold(st);
            acd_wg_hold(dpt);
        }

        // P^T from LSE (masked -> 0), dS^T = P^T (dP^T - D); entry 4n + e is key
        // `key` + 8 (e / 2), query i0 + 8n + 2t + e % 2.
        bool tile_full = keys_full && i0 + kBMQ <= nq;
        if (p.windowed) {
            if (p.wl >= 0) tile_full = tile_full && j0 >= i0 + kBMQ - 1 + win_off - p.wl;
            if (p.wr >= 0) tile_full = tile_full && j0 + kBN - 1 <= i0 + win_off + p.wr;
        }
        const uint32_t hidden = tile_full ? 0u : acd_bwd_hidden<kBMQ>(p, b, h, i0, key, t, nq, nk);
#pragma unroll
        for (int n = 0; n < kBMQ / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int il = n * 8 + 2 * t + (e & 1);
                const float lse = sLse[il];
                const bool vis = lse != -INFINITY && !((hidden >> (4 * n + e)) & 1u);
                // P <= 1: see bwd_tc (a catastrophically cancelled exponent gave Inf, then NaN).
                const float pr = vis ? fminf(acd_exp2_p<T>(st[4 * n + e] * p.scale_log2 - lse * ACD_LOG2E), 1.f) : 0.f;
                st[4 * n + e] = pr;
                dpt[4 * n + e] = pr * (dpt[4 * n + e] - sDd[il]);
            }

        // dV += P^T dO, dK += dS^T Q: k runs over the 64 queries, dO and Q MN-major.
        uint32_t pa[kBMQ / 16][4], sa[kBMQ / 16][4];
#pragma unroll
        for (int kq = 0; kq < kBMQ / 16; ++kq) {
#pragma unroll
            for (int x2 = 0; x2 < 4; ++x2) {
                pa[kq][x2] = acd_tc<T>::pack(st[8 * kq + 2 * x2], st[8 * kq + 2 * x2 + 1]);
                sa[kq][x2] = acd_tc<T>::pack(dpt[8 * kq + 2 * x2], dpt[8 * kq + 2 * x2 + 1]);
            }
        }
        {
            const uint64_t dod = acd_wg_desc(sdO, kBMQ * 128, 1024), dqd = acd_wg_desc(sQ, kBMQ * 128, 1024);
            acd_wg_fence();
#pragma unroll
            for (int kq = 0; kq < kBMQ / 16; ++kq) {
                acd_wg_rs<T, D>::run(dv, pa[kq], acd_wg_desc_add(dod, kq * 16 * 128));
                acd_wg_rs<T, D>::run(dk, sa[kq], acd_wg_desc_add(dqd, kq * 16 * 128));
            }
            acd_wg_commit();
        }

        // dS (queries x keys) to shared memory, K-major for dQ = dS K.
        {
            unsigned char *sdS_ptr = smem_raw + (sdS - acd_smem_addr(smem_raw));
#pragma unroll
            for (int n = 0; n < kBMQ / 8; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int q = n * 8 + 2 * t + (e & 1), kl = key - j0 + (e >= 2 ? 8 : 0); // kl: key within the block
                    *reinterpret_cast<T *>(sdS_ptr + acd_sw128_offset<kBMQ>(q, kl / 8) + (kl % 8) * 2) = acd_tc<T>::from_f(dpt[4 * n + e]);
                }
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();

        // dQ = dS K for 64 queries x 64 columns: at d = 128 warpgroup w takes columns
        // 64w.. over all 128 keys; at d = 64 it takes all columns over its own 64
        // keys (both add into dQacc).
        constexpr int kKeys = D == 128 ? kBN : 64;
        const int ka0 = D == 128 ? 0 : 64 * wg, c0 = D == 128 ? 64 * wg : 0;
        float dq[32];
        {
            const uint64_t dsd = acd_wg_desc(sdS, 16, 1024), dkd = acd_wg_desc(sK + (c0 / 64) * (kBN * 128), kBN * 128, 1024);
            acd_wg_fence();
#pragma unroll
            for (int kk = 0; kk < kKeys / 16; ++kk) {
                const int kl = ka0 + 16 * kk;
                acd_wg_ss<T, 64, true>::run(dq, acd_wg_desc_add(dsd, (kl / 64) * (kBMQ * 128) + ((kl % 64) / 16) * 32),
                                            acd_wg_desc_add(dkd, kl * 128), kk > 0);
            }
            acd_wg_commit();
            acd_wg_wait<0>(); // dV, dK and dQ
            acd_wg_hold(dq);
            acd_wg_hold(dk);
            acd_wg_hold(dv);
#pragma unroll
            for (int kq = 0; kq < kBMQ / 16; ++kq) acd_wg_hold(pa[kq]), acd_wg_hold(sa[kq]);
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int i = i0 + (warp % 4) * 16 + g + 8 * r;
            if (i >= nq) continue;
            const long long at = (((long long)b * p.Hq + h) * p.Nq + i) * D + c0 + 2 * t;
            acd_dq_add_row<T, 8>(dQacc, acd_dq_elems(p), at, reinterpret_cast<const float(*)[4]>(dq), r);
        }
    }
    acd_cp_async_wait<0>();
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int j = key + 8 * r;
        if (j >= p.Nk) continue;
        const long long at = b * p.k_sb + hk * p.k_sh + (long long)j * p.k_ss + 2 * t;
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
            acd_tc<T>::store2(dK + at + n * 8, dk[4 * n + 2 * r] * p.scale, dk[4 * n + 2 * r + 1] * p.scale);
            acd_tc<T>::store2(dV + at + n * 8, dv[4 * n + 2 * r], dv[4 * n + 2 * r + 1]);
        }
    }
#elif defined(__CUDA_ARCH__)
    __trap(); // built without sm_90a's wgmma: never launched (acd_wgmma_usable)
#endif
}

template <typename T, int D>
int launch_bwd_wg(const acd_params &p, const ac_bwd_args *a, const float *Dv, float *dQacc, cudaStream_t stream, ac_err *err)
{
    // K, V; two stages of Q and dO; dS; two stages of LSE and D; alignment slack.
    const size_t smem = sizeof(T) * ((size_t)(2 * kBN + 4 * kBMQ) * D + (size_t)kBMQ * kBN) + 4 * sizeof(float) * kBMQ + 1024;
    ACD_CHECK(err, cudaFuncSetAttribute(bwd_wg<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((p.Nk + kBN - 1) / kBN, p.Hkv, p.B);
    bwd_wg<T, D><<<grid, kNT, smem, stream>>>(p, (const T *)a->q, (const T *)a->k, (const T *)a->v, (const T *)a->d_o, a->lse, Dv,
                                             dQacc, (T *)a->dk, (T *)a->dv);
    ACD_CHECK_LAUNCH(err, "bwd_wg");
    return AC_OK;
}

} // namespace

template <typename T>
int acd_bwd_wgmma(const acd_params &p, const ac_bwd_args *a, const float *Dv, float *dQacc, cudaStream_t stream, ac_err *err)
{
    if (p.D == 64) return launch_bwd_wg<T, 64>(p, a, Dv, dQacc, stream, err);
    return launch_bwd_wg<T, 128>(p, a, Dv, dQacc, stream, err);
}
template int acd_bwd_wgmma<__half>(const acd_params &, const ac_bwd_args *, const float *, float *, cudaStream_t, ac_err *);
template int acd_bwd_wgmma<__nv_bfloat16>(const acd_params &, const ac_bwd_args *, const float *, float *, cudaStream_t, ac_err *);
