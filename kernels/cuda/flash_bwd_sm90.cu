// kernels/cuda/flash_bwd_sm90.cu — the fused backward's main kernel on
// Hopper's warpgroup tensor-core product (wgmma, sm_90a machine code only):
// f16 and bf16 at (d_qk, d_v) = (64, 64), (128, 128), (192, 128) (MLA
// prefill) and (128, 96).  Schedule and numerics are those of flash_bwd.cu's
// bwd_tc (FlashAttention-2: one block per 128-key tile of one KV head, looping
// over the query tiles of its GQA group; P recomputed from LSE; dK, dV in
// registers; dQ partial sums through shared memory into f32 atomics), which
// also supplies the D pre-pass and the dQ conversion.  Each warpgroup owns 64
// keys, the M of wgmma:
//   S^T = K Q^T, dP^T = V dO^T   both operands in shared memory (k over d_qk, d_v)
//   dV += P^T dO, dK += dS^T Q   P^T, dS^T from the registers that held S^T, dP^T
//   dQ  = dS K                   dS through shared memory (it is transposed)
// Two head dims: DQK for Q, K, dQ, dK; DV for V, dO, dV.  d_v = 96 is kept
// 128 wide in shared memory and in dV's accumulators (an MN-major B operand of
// N = 96 would end inside a 64-column swizzle block; the padding columns of dO
// are zero and their dV columns never stored).  d_qk = 192's products of N = 192 run as 128 + 64.
// d_qk = 192 runs each 64-query tile as two halves of 32 (m64n32k16 for S^T and
// dP^T): dK and dV are 160 of a thread's 255 registers there.  (256, 128)
// stays on mma.sync: dK (128 floats a thread) and dV (64) with even a half's
// S^T and dP^T (16 each) leave about 30 registers for the rest, which 192/128's
// spills (PERF.md) say is too few.
#include "backward.cuh"
#include "softmax.cuh"
#include "wgmma.cuh"

namespace
{

constexpr int kBN = 128, kBMQ = 64, kNT = 256; // keys per block, query rows per tile, threads

// Columns a head dim takes in shared memory and in the accumulators: whole
// 64-column swizzle blocks.
constexpr int acd_wg_cols(int d) { return (d + 63) / 64 * 64; }

// A ROWS x D tile into the swizzled layout (wgmma.cuh).  Where a row's chunks
// do not divide the threads (d = 192, 96), one 64-column block at a time (and
// d_v = 96's last 32 columns): each thread's addresses are then a base and
// constants, where acd_load_tile_sw128 keeps one per chunk (at 192/128 they
// were spilled, and a tenth of the query loop's instructions).
template <typename T, int ROWS, int D>
__device__ __forceinline__ void load_tile_blocks(uint32_t s, const T *g, long long ss, int row0, int limit, int tid)
{
    if constexpr (kNT % (D / 8) == 0) {
        acd_load_tile_sw128_cols<T, ROWS, D, kNT>(s, g, ss, row0, limit, tid);
    } else {
#pragma unroll
        for (int blk = 0; blk < D / 64; ++blk)
            acd_load_tile_sw128_cols<T, ROWS, 64, kNT>(s + blk * (ROWS * 128), g + blk * 64, ss, row0, limit, tid);
        if constexpr (D % 64 != 0)
            acd_load_tile_sw128_cols<T, ROWS, D % 64, kNT>(s + (D / 64) * (ROWS * 128), g + (D / 64) * 64, ss, row0,
                                                           limit, tid);
    }
}

// D(64 x N) += A B for N = 64, 128 or 192 (128 + 64: the third column block,
// blk bytes after the first, into the accumulator's last 8 registers of 4),
// A in registers, B MN-major in shared memory.
template <typename T, int N>
__device__ __forceinline__ void rs_wide(float (&acc)[N / 8][4], const uint32_t (&a)[4], uint64_t db, uint32_t blk)
{
    if constexpr (N == 192) {
        acd_wg_rs<T, 128>::run(reinterpret_cast<float(&)[16][4]>(acc[0]), a, db);
        acd_wg_rs<T, 64>::run(reinterpret_cast<float(&)[8][4]>(acc[16]), a, acd_wg_desc_add(db, 2 * blk));
    } else {
        acd_wg_rs<T, N>::run(acc, a, db);
    }
}

// S^T = K_w Q^T (k over d_qk) and dP^T = V_w dO^T (k over d_v): this
// warpgroup's 64 keys (wg) x SUB queries of the tile (rows from sQ, sdO), both
// operands in shared memory.  A k16 step is 32 bytes inside a column block,
// then the next block.
template <typename T, int DQK, int DV, int SUB>
__device__ __forceinline__ void st_dpt_wg(float (&st)[SUB / 8][4], float (&dpt)[SUB / 8][4], uint32_t sK, uint32_t sV,
                                          uint32_t sQ, uint32_t sdO, int wg)
{
    const uint64_t dkd = acd_wg_desc(sK + wg * 64 * 128, 16, 1024), dvd = acd_wg_desc(sV + wg * 64 * 128, 16, 1024);
    const uint64_t dqd = acd_wg_desc(sQ, 16, 1024), dod = acd_wg_desc(sdO, 16, 1024);
    constexpr int kSteps = (DQK > DV ? DQK : DV) / 16;
    acd_wg_fence();
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) {
        const uint32_t a_off = (kk / 4) * (kBN * 128) + (kk % 4) * 32, b_off = (kk / 4) * (kBMQ * 128) + (kk % 4) * 32;
        if (kk < DQK / 16)
            acd_wg_ss<T, SUB>::run(st, acd_wg_desc_add(dkd, a_off), acd_wg_desc_add(dqd, b_off), kk > 0);
        if (kk < DV / 16)
            acd_wg_ss<T, SUB>::run(dpt, acd_wg_desc_add(dvd, a_off), acd_wg_desc_add(dod, b_off), kk > 0);
    }
    acd_wg_commit();
    acd_wg_wait<0>();
    acd_wg_hold(st);
    acd_wg_hold(dpt);
}

// dV += P^T dO and dK += dS^T Q issued, k running over SUB queries (rows from
// sQ, sdO), dO and Q MN-major; the caller waits (pa, sa: P^T and dS^T as
// register operands).
template <typename T, int DQK, int DVP, int SUB>
__device__ __forceinline__ void dv_dk_issue(float (&dv)[DVP / 8][4], float (&dk)[DQK / 8][4],
                                            const uint32_t (&pa)[SUB / 16][4], const uint32_t (&sa)[SUB / 16][4],
                                            uint32_t sQ, uint32_t sdO)
{
    constexpr uint32_t kBlk = kBMQ * 128; // column blocks of Q and dO
    const uint64_t dod = acd_wg_desc(sdO, kBlk, 1024), dqd = acd_wg_desc(sQ, kBlk, 1024);
    acd_wg_fence();
#pragma unroll
    for (int kq = 0; kq < SUB / 16; ++kq) {
        rs_wide<T, DVP>(dv, pa[kq], acd_wg_desc_add(dod, kq * 16 * 128), kBlk);
        rs_wide<T, DQK>(dk, sa[kq], acd_wg_desc_add(dqd, kq * 16 * 128), kBlk);
    }
    acd_wg_commit();
}

// dS (queries q0.. x keys) into shared memory at sdS, K-major for dQ = dS K;
// this thread's entries are keys kl, kl + 8 of the block.
template <typename T, int SUB>
__device__ __forceinline__ void ds_to_smem(unsigned char *sdS, const float (&ds_t)[SUB / 8][4], int q0, int kl, int t)
{
#pragma unroll
    for (int n = 0; n < SUB / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int q = q0 + n * 8 + 2 * t + (e & 1), k = kl + (e >= 2 ? 8 : 0);
            *reinterpret_cast<T *>(sdS + acd_sw128_offset<kBMQ>(q, k / 8) + (k % 8) * 2) =
                acd_tc<T>::from_f(ds_t[n][e]);
        }
}

// dQ = dS K issued for 64 queries x the 64 columns of K's column block blk,
// over the keys [ka0, ka0 + KEYS) of the block.
template <typename T, int KEYS>
__device__ __forceinline__ void dq_issue(float (&dq)[8][4], uint32_t sdS, uint32_t sK, int blk, int ka0)
{
    const uint64_t dsd = acd_wg_desc(sdS, 16, 1024), dkd = acd_wg_desc(sK + blk * (kBN * 128), kBN * 128, 1024);
    acd_wg_fence();
#pragma unroll
    for (int kk = 0; kk < KEYS / 16; ++kk) {
        const int kl = ka0 + 16 * kk;
        acd_wg_ss<T, 64, true>::run(dq, acd_wg_desc_add(dsd, (kl / 64) * (kBMQ * 128) + ((kl % 64) / 16) * 32),
                                    acd_wg_desc_add(dkd, kl * 128), kk > 0);
    }
    acd_wg_commit();
}

// One 64-column piece of dQ = dS K: issued, waited for (with every product
// before it), added into dQacc (row: this thread's first query row).  hold()
// runs after the wait: the caller's operands of products still in flight.
template <typename T, int DQK, bool kVar, int KEYS, typename Hold>
__device__ __forceinline__ void dq_piece(float *dQacc, const acd_params &p, uint32_t sdS, uint32_t sK, int blk, int ka0,
                                         int b, int h, int row, int t, int nq, Hold hold)
{
    float dq[8][4];
    dq_issue<T, KEYS>(dq, sdS, sK, blk, ka0);
    acd_wg_wait<0>();
    acd_wg_hold(dq);
    hold();
    acd_dq_add_rows<T, DQK, kVar>(dQacc, p, b, h, row, 64 * blk, t, nq, dq);
}

// dQ = dS K for the tile, the two warpgroups splitting it so that every piece
// starts on a column block of K: d_qk = 64: all columns over the warpgroup's
// own 64 keys; 128: column block wg over all 128 keys; 192: block wg over all
// keys, then block 2 over the warpgroup's own 64 (all pieces add into dQacc).
template <typename T, int DQK, bool kVar, typename Hold>
__device__ __forceinline__ void dq_tile(float *dQacc, const acd_params &p, uint32_t sdS, uint32_t sK, int wg, int b,
                                        int h, int row, int t, int nq, Hold hold)
{
    if constexpr (DQK == 64) {
        dq_piece<T, DQK, kVar, 64>(dQacc, p, sdS, sK, 0, 64 * wg, b, h, row, t, nq, hold);
    } else {
        dq_piece<T, DQK, kVar, kBN>(dQacc, p, sdS, sK, wg, 0, b, h, row, t, nq, hold);
        if constexpr (DQK == 192)
            dq_piece<T, DQK, kVar, 64>(dQacc, p, sdS, sK, 2, 64 * wg, b, h, row, t, nq, [] {});
    }
}

// Zeroes the padding columns [DV, DVP) of the two dO stages (ROWS rows each):
// the copies never write them, and dV += P^T dO reads them.
template <int DV, int DVP, int ROWS> __device__ __forceinline__ void zero_pad_cols(unsigned char *s, int tid)
{
    if constexpr (DVP != DV) {
        constexpr int kPad = (DVP - DV) / 8, kChunks = 2 * ROWS * kPad; // 16-byte chunks
        for (int c = tid; c < kChunks; c += kNT) {
            const int stage = c / (ROWS * kPad), r = (c / kPad) % ROWS, chunk = DV / 8 + c % kPad;
            *reinterpret_cast<uint4 *>(s + stage * (ROWS * DVP * 2) + acd_sw128_offset<ROWS>(r, chunk)) =
                make_uint4(0, 0, 0, 0);
        }
    }
}

// Shared memory of bwd_wg: K, V; two stages of Q and dO; dS; two stages of
// LSE and D; the 1024-byte alignment slack.
template <int DQK, int DV> constexpr size_t bwd_wg_smem_bytes()
{
    constexpr int DVP = acd_wg_cols(DV);
    return 2 *
        ((size_t)kBN * DQK + (size_t)kBN * DVP + 2 * (size_t)kBMQ * DQK + 2 * (size_t)kBMQ * DVP + (size_t)kBMQ * kBN) +
        4 * sizeof(float) * kBMQ + 1024;
}
static_assert(bwd_wg_smem_bytes<192, 128>() <= 227 * 1024, "bwd_wg at 192/128 over 227 KiB of shared memory");

template <typename T, int DQK, int DV, bool kVar>
__global__ void __launch_bounds__(kNT, 1)
    bwd_wg(acd_params p, const T *__restrict__ Q, const T *__restrict__ K, const T *__restrict__ V,
           const T *__restrict__ dO, const float *__restrict__ LSE, const float *__restrict__ Dv,
           float *__restrict__ dQacc, T *__restrict__ dK, T *__restrict__ dV)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int DVP = acd_wg_cols(DV);
    constexpr bool kSplitDv = DV != DQK; // V, dO, dV with their own strides (else K's, Q's: equal then)
    constexpr int kHalves = DQK + DVP > 256 ? 2 : 1, kSub = kBMQ / kHalves; // query pieces of a tile
    constexpr uint32_t kKBytes = kBN * DQK * 2, kVBytes = kBN * DVP * 2, kQBytes = kBMQ * DQK * 2,
                       kOBytes = kBMQ * DVP * 2, kSBytes = kBMQ * kBN * 2;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    // Swizzle atoms must start 1024-byte aligned (the launch adds the slack).
    const uint32_t sK = (acd_smem_addr(smem_raw) + 1023u) & ~1023u, sV = sK + kKBytes;
    const uint32_t sQ2 = sV + kVBytes, sdO2 = sQ2 + 2 * kQBytes, sdS = sdO2 + 2 * kOBytes; // Q, dO: two stages
    float *sLse2 = reinterpret_cast<float *>(smem_raw + (sdS + kSBytes - acd_smem_addr(smem_raw))),
          *sDd2 = sLse2 + 2 * kBMQ;

    const int tid = threadIdx.x, wg = tid / 128, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int hk = blockIdx.y, b = blockIdx.z, j0 = blockIdx.x * kBN;
    const int nq = acd_nq<kVar>(p, b), nk = acd_nk<kVar>(p, b);
    const int key = j0 + warp * 16 + g; // this thread's keys: key, key + 8

    const T *Vb;
    if constexpr (kSplitDv)
        Vb = V + acd_v_base<kVar>(p, b) + hk * p.v_sh;
    else
        Vb = V + acd_k_base<kVar>(p, b) + hk * p.k_sh;
    load_tile_blocks<T, kBN, DQK>(sK, K + acd_k_base<kVar>(p, b) + hk * p.k_sh, p.k_ss, j0, nk, tid);
    load_tile_blocks<T, kBN, DV>(sV, Vb, acd_v_ss<kSplitDv>(p), j0, nk, tid);
    acd_cp_async_commit();
    zero_pad_cols<DV, DVP, kBMQ>(smem_raw + (sdO2 - acd_smem_addr(smem_raw)), tid); // fenced with the first tile

    float dk[DQK / 8][4], dv[DVP / 8][4];
    acd_zero(dk);
    acd_zero(dv);
    const acd_bwd_plan<kBMQ, kBN> plan(p, hk, j0, nq, nk);
    auto load_q_tile = [&](int x) {
        const int h = plan.head(x), i0 = plan.row0(x), stage = x & 1;
        load_tile_blocks<T, kBMQ, DQK>(sQ2 + stage * kQBytes, Q + acd_q_base<kVar>(p, b) + h * p.q_sh, p.q_ss, i0, nq,
                                       tid);
        if constexpr (kSplitDv)
            load_tile_blocks<T, kBMQ, DV>(sdO2 + stage * kOBytes, dO + acd_o_base<kVar>(p, b) + h * p.o_sh,
                                          acd_o_ss<kSplitDv>(p), i0, nq, tid);
        else
            load_tile_blocks<T, kBMQ, DV>(sdO2 + stage * kOBytes, dO + acd_q_base<kVar>(p, b) + h * p.q_sh, p.q_ss, i0,
                                          nq, tid);
        acd_load_lse_d<kBMQ, kVar>(sLse2 + stage * kBMQ, sDd2 + stage * kBMQ, LSE, Dv, p, b, h, i0, nq, tid);
        acd_cp_async_commit();
    };
    if (plan.count > 0)
        load_q_tile(0);

    for (int x = 0; x < plan.count; ++x) {
        const int h = plan.head(x), i0 = plan.row0(x), stage = x & 1;
        const uint32_t sQ = sQ2 + stage * kQBytes, sdO = sdO2 + stage * kOBytes;
        acd_cp_async_wait<0>(); // this tile (and, the first time, K and V): the only copies in flight
        // cp.async and the stores below wrote through the generic proxy; wgmma reads through the async one.
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        // Every warp sees this tile; every warpgroup is done with the previous
        // one, whose stage the next copy reuses, and with its dS.
        __syncthreads();
        if (x + 1 < plan.count)
            load_q_tile(x + 1);

        // In kHalves pieces of kSub queries: at 192/128 dK and dV (160 floats a
        // thread) leave room for S^T and dP^T of 32 queries, not 64, and not for
        // a piece's P^T and dS^T (pa, sa) beside the next one's: each piece's
        // products end before the next starts.
        const uint32_t hidden = plan.hidden(p, b, h, i0, key, t, nq, nk);
        uint32_t pa[kBMQ / 16][4], sa[kBMQ / 16][4];
        auto hold_ops = [&](int hf) {
            acd_wg_hold(reinterpret_cast<uint32_t(&)[kSub / 16][4]>(pa[hf * (kSub / 16)]));
            acd_wg_hold(reinterpret_cast<uint32_t(&)[kSub / 16][4]>(sa[hf * (kSub / 16)]));
        };
#pragma unroll
        for (int hf = 0; hf < kHalves; ++hf) {
            auto &pah = reinterpret_cast<uint32_t(&)[kSub / 16][4]>(pa[hf * (kSub / 16)]);
            auto &sah = reinterpret_cast<uint32_t(&)[kSub / 16][4]>(sa[hf * (kSub / 16)]);
            const uint32_t sQh = sQ + hf * kSub * 128, sdOh = sdO + hf * kSub * 128;
            float st[kSub / 8][4], dpt[kSub / 8][4];
            st_dpt_wg<T, DQK, DV, kSub>(st, dpt, sK, sV, sQh, sdOh, wg);
            acd_bwd_p_ds<T, kSub, kVar>(st, dpt, sLse2 + stage * kBMQ + hf * kSub, sDd2 + stage * kBMQ + hf * kSub,
                                        hidden >> (16 * hf), p, b, h, i0 + hf * kSub, key, t, nq, nk); // P^T, dS^T
#pragma unroll
            for (int kq = 0; kq < kSub / 16; ++kq) {
                acd_frag_to_a<T>(pah[kq], st, kq);
                acd_frag_to_a<T>(sah[kq], dpt, kq);
            }
            dv_dk_issue<T, DQK, DVP, kSub>(dv, dk, pah, sah, sQh, sdOh);
            ds_to_smem<T, kSub>(smem_raw + (sdS - acd_smem_addr(smem_raw)), dpt, hf * kSub, key - j0, t);
            if (hf + 1 < kHalves) { // this piece's P^T and dS^T free before the next S^T, dP^T
                acd_wg_wait<0>();
                acd_wg_hold(dk);
                acd_wg_hold(dv);
                hold_ops(hf);
            }
        }
        auto hold = [&] {
            acd_wg_hold(dk);
            acd_wg_hold(dv);
            hold_ops(kHalves - 1);
        };
        // Where dK and dV leave no room for dQ's 32 accumulators (192/128),
        // their products finish before dQ starts; else dQ's overlaps them.
        if constexpr (kHalves > 1) {
            acd_wg_wait<0>();
            hold();
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
        const int row = i0 + (warp % 4) * 16 + g;
        if constexpr (kHalves > 1)
            dq_tile<T, DQK, kVar>(dQacc, p, sdS, sK, wg, b, h, row, t, nq, [] {});
        else
            dq_tile<T, DQK, kVar>(dQacc, p, sdS, sK, wg, b, h, row, t, nq, hold);
    }
    acd_cp_async_wait<0>();
    acd_store_dk_dv<T, DQK, kVar, DV>(p, dK, dV, b, hk, key, t, nk, dk,
                                      reinterpret_cast<const float(&)[DV / 8][4]>(dv));
#elif defined(__CUDA_ARCH__)
    __trap(); // built without sm_90a's wgmma: never launched (acd_wgmma_bwd_usable)
#endif
}

template <typename T, int DQK, int DV, bool kVar>
int launch_bwd_wg_var(const acd_params &p, const ac_bwd_args *a, const float *Dv, float *dQacc, cudaStream_t stream,
                      ac_err *err)
{
    const size_t smem = bwd_wg_smem_bytes<DQK, DV>();
    ACD_CHECK(err,
              cudaFuncSetAttribute(bwd_wg<T, DQK, DV, kVar>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((p.Nk + kBN - 1) / kBN, p.Hkv, p.B);
    bwd_wg<T, DQK, DV, kVar><<<grid, kNT, smem, stream>>>(p, (const T *)a->q, (const T *)a->k, (const T *)a->v,
                                                          (const T *)a->d_o, a->lse, Dv, dQacc, (T *)a->dk, (T *)a->dv);
    ACD_CHECK_LAUNCH(err, "bwd_wg");
    return AC_OK;
}

template <typename T, int DQK, int DV>
int launch_bwd_wg(const acd_params &p, const ac_bwd_args *a, const float *Dv, float *dQacc, cudaStream_t stream,
                  ac_err *err)
{
    return acd_variant_kernel(p) ? launch_bwd_wg_var<T, DQK, DV, true>(p, a, Dv, dQacc, stream, err)
                                 : launch_bwd_wg_var<T, DQK, DV, false>(p, a, Dv, dQacc, stream, err);
}

} // namespace

template <typename T>
int acd_bwd_wgmma(const acd_params &p, const ac_bwd_args *a, const float *Dv, float *dQacc, cudaStream_t stream,
                  ac_err *err)
{
    if (p.D == 192 && p.Dv == 128)
        return launch_bwd_wg<T, 192, 128>(p, a, Dv, dQacc, stream, err);
    if (p.D == 128 && p.Dv == 96)
        return launch_bwd_wg<T, 128, 96>(p, a, Dv, dQacc, stream, err);
    if (p.D == 64 && p.Dv == 64)
        return launch_bwd_wg<T, 64, 64>(p, a, Dv, dQacc, stream, err);
    if (p.D == 128 && p.Dv == 128)
        return launch_bwd_wg<T, 128, 128>(p, a, Dv, dQacc, stream, err);
    return ac_fail(err, AC_ERR_INPUT, "cuda-flash wgmma backward: (d_qk, d_v) = (%d, %d) not built", p.D, p.Dv);
}
template int acd_bwd_wgmma<__half>(const acd_params &, const ac_bwd_args *, const float *, float *, cudaStream_t,
                                   ac_err *);
template int acd_bwd_wgmma<__nv_bfloat16>(const acd_params &, const ac_bwd_args *, const float *, float *, cudaStream_t,
                                          ac_err *);
