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
#include "backward.cuh"
#include "softmax.cuh"
#include "wgmma.cuh"

namespace
{

constexpr int kBN = 128, kBMQ = 64, kNT = 256; // keys per block, query rows per tile, threads

// S^T = K_w Q^T and dP^T = V_w dO^T: this warpgroup's 64 keys (wg) x the
// tile's 64 queries, both operands in shared memory.
template <typename T, int D>
__device__ __forceinline__ void st_dpt_wg(float (&st)[kBMQ / 8][4], float (&dpt)[kBMQ / 8][4], uint32_t sK, uint32_t sV,
                                          uint32_t sQ, uint32_t sdO, int wg)
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

// dV += P^T dO and dK += dS^T Q issued, k running over the 64 queries, dO and Q
// MN-major; the caller waits (pa, sa: P^T and dS^T as register operands).
template <typename T, int D>
__device__ __forceinline__ void dv_dk_issue(float (&dv)[D / 8][4], float (&dk)[D / 8][4],
                                            const uint32_t (&pa)[kBMQ / 16][4], const uint32_t (&sa)[kBMQ / 16][4],
                                            uint32_t sQ, uint32_t sdO)
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

// dS (queries x keys) into shared memory at sdS, K-major for dQ = dS K; this
// thread's entries are keys kl, kl + 8 of the block.
template <typename T>
__device__ __forceinline__ void ds_to_smem(unsigned char *sdS, const float (&ds_t)[kBMQ / 8][4], int kl, int t)
{
#pragma unroll
    for (int n = 0; n < kBMQ / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int q = n * 8 + 2 * t + (e & 1), k = kl + (e >= 2 ? 8 : 0);
            *reinterpret_cast<T *>(sdS + acd_sw128_offset<kBMQ>(q, k / 8) + (k % 8) * 2) =
                acd_tc<T>::from_f(ds_t[n][e]);
        }
}

// dQ = dS K issued for 64 queries x 64 columns: at d = 128 warpgroup wg takes
// columns 64 wg.. over all 128 keys; at d = 64 all columns over its own 64 keys
// (both add into dQacc).  Returns the first column.
template <typename T, int D>
__device__ __forceinline__ int dq_issue(float (&dq)[8][4], uint32_t sdS, uint32_t sK, int wg)
{
    constexpr int kKeys = D == 128 ? kBN : 64;
    const int ka0 = D == 128 ? 0 : 64 * wg, c0 = D == 128 ? 64 * wg : 0;
    const uint64_t dsd = acd_wg_desc(sdS, 16, 1024), dkd = acd_wg_desc(sK + (c0 / 64) * (kBN * 128), kBN * 128, 1024);
    acd_wg_fence();
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
        const int kl = ka0 + 16 * kk;
        acd_wg_ss<T, 64, true>::run(dq, acd_wg_desc_add(dsd, (kl / 64) * (kBMQ * 128) + ((kl % 64) / 16) * 32),
                                    acd_wg_desc_add(dkd, kl * 128), kk > 0);
    }
    acd_wg_commit();
    return c0;
}

template <typename T, int D, bool kVar>
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
    float *sLse2 = reinterpret_cast<float *>(smem_raw + (sdS + kSBytes - acd_smem_addr(smem_raw))),
          *sDd2 = sLse2 + 2 * kBMQ;

    const int tid = threadIdx.x, wg = tid / 128, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int hk = blockIdx.y, b = blockIdx.z, j0 = blockIdx.x * kBN;
    const int nq = acd_nq<kVar>(p, b), nk = acd_nk<kVar>(p, b);
    const int key = j0 + warp * 16 + g; // this thread's keys: key, key + 8

    // V, dO and dV like K and Q: d_v = d on the tensor cores
    acd_load_tile_sw128<T, kBN, D, kNT>(sK, K + acd_k_base<kVar>(p, b) + hk * p.k_sh, p.k_ss, j0, nk, tid);
    acd_load_tile_sw128<T, kBN, D, kNT>(sV, V + acd_k_base<kVar>(p, b) + hk * p.k_sh, p.k_ss, j0, nk, tid);
    acd_cp_async_commit();

    float dk[D / 8][4], dv[D / 8][4];
    acd_zero(dk);
    acd_zero(dv);
    const acd_bwd_plan<kBMQ, kBN> plan(p, hk, j0, nq, nk);
    auto load_q_tile = [&](int x) {
        const int h = plan.head(x), i0 = plan.row0(x), stage = x & 1;
        acd_load_tile_sw128<T, kBMQ, D, kNT>(sQ2 + stage * kQBytes, Q + acd_q_base<kVar>(p, b) + h * p.q_sh, p.q_ss, i0,
                                             nq, tid);
        acd_load_tile_sw128<T, kBMQ, D, kNT>(sdO2 + stage * kQBytes, dO + acd_q_base<kVar>(p, b) + h * p.q_sh, p.q_ss,
                                             i0, nq, tid);
        acd_load_lse_d<kBMQ, kVar>(sLse2 + stage * kBMQ, sDd2 + stage * kBMQ, LSE, Dv, p, b, h, i0, nq, tid);
        acd_cp_async_commit();
    };
    if (plan.count > 0)
        load_q_tile(0);

    for (int x = 0; x < plan.count; ++x) {
        const int h = plan.head(x), i0 = plan.row0(x), stage = x & 1;
        const uint32_t sQ = sQ2 + stage * kQBytes, sdO = sdO2 + stage * kQBytes;
        acd_cp_async_wait<0>(); // this tile (and, the first time, K and V): the only copies in flight
        // cp.async and the stores below wrote through the generic proxy; wgmma reads through the async one.
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        // Every warp sees this tile; every warpgroup is done with the previous
        // one, whose stage the next copy reuses, and with its dS.
        __syncthreads();
        if (x + 1 < plan.count)
            load_q_tile(x + 1);

        float st[kBMQ / 8][4], dpt[kBMQ / 8][4];
        st_dpt_wg<T, D>(st, dpt, sK, sV, sQ, sdO, wg);
        const uint32_t hidden = plan.hidden(p, b, h, i0, key, t, nq, nk);
        acd_bwd_p_ds<T, kBMQ, kVar>(st, dpt, sLse2 + stage * kBMQ, sDd2 + stage * kBMQ, hidden, p, b, h, i0, key, t, nq,
                                    nk); // P^T, dS^T
        uint32_t pa[kBMQ / 16][4], sa[kBMQ / 16][4];
#pragma unroll
        for (int kq = 0; kq < kBMQ / 16; ++kq) {
            acd_frag_to_a<T>(pa[kq], st, kq);
            acd_frag_to_a<T>(sa[kq], dpt, kq);
        }
        dv_dk_issue<T, D>(dv, dk, pa, sa, sQ, sdO);
        ds_to_smem<T>(smem_raw + (sdS - acd_smem_addr(smem_raw)), dpt, key - j0, t);
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();

        float dq[8][4];
        const int c0 = dq_issue<T, D>(dq, sdS, sK, wg);
        acd_wg_wait<0>(); // dV, dK and dQ
        acd_wg_hold(dq);
        acd_wg_hold(dk);
        acd_wg_hold(dv);
        acd_wg_hold(pa);
        acd_wg_hold(sa);
        acd_dq_add_rows<T, D, kVar>(dQacc, p, b, h, i0 + (warp % 4) * 16 + g, c0, t, nq, dq);
    }
    acd_cp_async_wait<0>();
    acd_store_dk_dv<T, D, kVar>(p, dK, dV, b, hk, key, t, nk, dk, dv);
#elif defined(__CUDA_ARCH__)
    __trap(); // built without sm_90a's wgmma: never launched (acd_wgmma_usable)
#endif
}

template <typename T, int D, bool kVar>
int launch_bwd_wg_var(const acd_params &p, const ac_bwd_args *a, const float *Dv, float *dQacc, cudaStream_t stream,
                      ac_err *err)
{
    // K, V; two stages of Q and dO; dS; two stages of LSE and D; alignment slack.
    const size_t smem =
        sizeof(T) * ((size_t)(2 * kBN + 4 * kBMQ) * D + (size_t)kBMQ * kBN) + 4 * sizeof(float) * kBMQ + 1024;
    ACD_CHECK(err, cudaFuncSetAttribute(bwd_wg<T, D, kVar>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((p.Nk + kBN - 1) / kBN, p.Hkv, p.B);
    bwd_wg<T, D, kVar><<<grid, kNT, smem, stream>>>(p, (const T *)a->q, (const T *)a->k, (const T *)a->v,
                                                    (const T *)a->d_o, a->lse, Dv, dQacc, (T *)a->dk, (T *)a->dv);
    ACD_CHECK_LAUNCH(err, "bwd_wg");
    return AC_OK;
}

template <typename T, int D>
int launch_bwd_wg(const acd_params &p, const ac_bwd_args *a, const float *Dv, float *dQacc, cudaStream_t stream,
                  ac_err *err)
{
    return acd_variant_kernel(p) ? launch_bwd_wg_var<T, D, true>(p, a, Dv, dQacc, stream, err)
                                 : launch_bwd_wg_var<T, D, false>(p, a, Dv, dQacc, stream, err);
}

} // namespace

template <typename T>
int acd_bwd_wgmma(const acd_params &p, const ac_bwd_args *a, const float *Dv, float *dQacc, cudaStream_t stream,
                  ac_err *err)
{
    if (p.D == 64)
        return launch_bwd_wg<T, 64>(p, a, Dv, dQacc, stream, err);
    return launch_bwd_wg<T, 128>(p, a, Dv, dQacc, stream, err);
}
template int acd_bwd_wgmma<__half>(const acd_params &, const ac_bwd_args *, const float *, float *, cudaStream_t,
                                   ac_err *);
template int acd_bwd_wgmma<__nv_bfloat16>(const acd_params &, const ac_bwd_args *, const float *, float *, cudaStream_t,
                                          ac_err *);
