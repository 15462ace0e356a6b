// kernels/cuda/backward.cuh — the fused backward's bookkeeping, shared by its
// kernels: dQ summed with atomics (and the tiny partial sums beside them), the
// (query head, query tile) pairs a block of keys visits, the LSE and D of a
// query tile, and dK, dV written out.  The softmax part (P and dS) is in
// softmax.cuh, which rows and keys are visible in mask.cuh.
#pragma once
#include "common.cuh"
#include "mask.cuh"

// dQ's sums keep their subnormals: acd_dq_add and its twin accumulator (common.cuh).
__device__ __forceinline__ long long acd_dq_elems(const acd_params &p) { return (long long)p.B * p.Hq * p.Nq * p.D; }

// Two neighbours (at even), plain: one 8-byte atomic on sm_90.
__device__ __forceinline__ void acd_dq_add2_plain(float *acc, long long at, float a, float b)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float2 *>(acc + at), make_float2(a, b));
#else
    atomicAdd(acc + at, a);
    atomicAdd(acc + at + 1, b);
#endif
}

// One thread's share of a dQ row from the tensor cores: pairs dq[n][2r], dq[n][2r+1]
// at at + 8n.  One test for the lot, then plain atomics (the common case) or the
// split.  f16 skips the test: its dS and K are multiples of 2^-24, so every
// partial sum is a multiple of 2^-48, never below 2^-126 unless 0 (the test cost
// the f16 backward 3-8%).
template <typename T, int N>
__device__ __forceinline__ void acd_dq_add_row(float *acc, long long elems, long long at, const float (*dq)[4], int r)
{
    bool tiny = false;
    if constexpr (!std::is_same<T, __half>::value) {
#pragma unroll
        for (int n = 0; n < N; ++n)
            tiny |= acd_dq_is_tiny(dq[n][2 * r]) | acd_dq_is_tiny(dq[n][2 * r + 1]);
    }
    if (!tiny) {
#pragma unroll
        for (int n = 0; n < N; ++n)
            acd_dq_add2_plain(acc, at + n * 8, dq[n][2 * r], dq[n][2 * r + 1]);
        return;
    }
    for (int n = 0; n < N; ++n) {
        acd_dq_add(acc, elems, at + n * 8, dq[n][2 * r]);
        acd_dq_add(acc, elems, at + n * 8 + 1, dq[n][2 * r + 1]);
    }
}

// The backward's LSE and D of query rows [i0, i0 + BMQ) of head h into shared
// memory (threads tid < BMQ, one row each, joining the caller's cp.async
// group); rows past the sequence end get LSE = -inf (they see nothing), D = 0.
template <int BMQ, bool kVar>
__device__ __forceinline__ void acd_load_lse_d(float *sLse, float *sDd, const float *LSE, const float *Dv,
                                               const acd_params &p, int b, int h, int i0, int nq, int tid)
{
    if (tid >= BMQ)
        return;
    const int i = i0 + tid;
    const long long row = acd_row_index<kVar>(p, b, h, i);
    if (i < nq) {
        acd_cp_async4_to(acd_smem_addr(sLse + tid), LSE + row);
        acd_cp_async4_to(acd_smem_addr(sDd + tid), Dv + row);
    } else {
        sLse[tid] = -INFINITY;
        sDd[tid] = 0.f;
    }
}

// A thread's dQ rows row and row + 8 of query head h: columns c0 + 8n + 2t +
// {0, 1} of the accumulator tile dq added into dQacc, whose rows are
// D floats; rows past the sequence end are skipped.
template <typename T, int D, bool kVar, int N>
__device__ __forceinline__ void acd_dq_add_rows(float *dQacc, const acd_params &p, int b, int h, int row, int c0, int t,
                                                int nq, const float (&dq)[N][4])
{
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int i = row + 8 * r;
        if (i >= nq)
            continue;
        acd_dq_add_row<T, N>(dQacc, acd_dq_elems(p), acd_row_index<kVar>(p, b, h, i) * D + c0 + 2 * t, dq, r);
    }
}

// What a block of keys [j0, j0 + BN) of KV head hk visits: the (query head,
// query tile) pairs, one after the other, each head of the GQA group over the
// tiles of BMQ rows from it0 that can see those keys; and, per tile, which of
// its (query, key) entries the rules hide.  Computed once per block.
template <int BMQ, int BN> struct acd_bwd_plan {
    int h0, it0, per_head, count, j0, win_off;
    bool keys_full; // the block's keys inside the sequence, no dense mask

    __device__ __forceinline__ acd_bwd_plan(const acd_params &p, int hk, int j0_, int nq, int nk) : j0(j0_)
    {
        int i_lo, i_hi;
        acd_bwd_query_rows(p, j0, BN, nq, nk, i_lo, i_hi);
        h0 = hk * p.group;
        it0 = (i_lo / BMQ) * BMQ;
        per_head = i_hi > it0 ? (i_hi - it0 + BMQ - 1) / BMQ : 0;
        count = p.group * per_head;
        keys_full = j0 + BN <= nk && !p.mask;
        win_off = p.align_br ? nk - nq : 0;
    }
    __device__ __forceinline__ int head(int x) const { return h0 + x / per_head; }
    __device__ __forceinline__ int row0(int x) const { return it0 + (x % per_head) * BMQ; }

    // The hidden bits (acd_bwd_hidden) of the tile of rows [i0, i0 + BMQ) for
    // this thread's keys key, key + 8; 0 without computing them where every row
    // sees every key of the block.
    __device__ __forceinline__ uint32_t hidden(const acd_params &p, int b, int h, int i0, int key, int t, int nq,
                                               int nk) const
    {
        bool full = keys_full && i0 + BMQ <= nq;
        if (p.windowed) {
            if (p.wl >= 0)
                full = full && j0 >= i0 + BMQ - 1 + win_off - p.wl;
            if (p.wr >= 0)
                full = full && j0 + BN - 1 <= i0 + win_off + p.wr;
        }
        return full ? 0u : acd_bwd_hidden<BMQ>(p, b, h, i0, key, t, nq, nk);
    }
};

// The backward's end for a thread's keys key and key + 8 of KV head hk: dK
// times the softmax scale and dV, each rounded once to T.  Keys past Nk, the
// padding of the last block, are not written (with THD: past the sequence's nk).
// DV: d_v, dV's width; where it differs from D (d_qk), dV takes V's own strides.
template <typename T, int D, bool kVar, int DV = D>
__device__ __forceinline__ void acd_store_dk_dv(const acd_params &p, T *dK, T *dV, int b, int hk, int key, int t,
                                                int nk, const float (&dk)[D / 8][4], const float (&dv)[DV / 8][4])
{
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int j = key + 8 * r;
        if (j >= acd_k_stored<kVar>(p, nk))
            continue;
        const long long at = acd_k_base<kVar>(p, b) + hk * p.k_sh + (long long)j * p.k_ss + 2 * t;
        if constexpr (DV == D) { // dV's strides are K's
#pragma unroll
            for (int n = 0; n < D / 8; ++n) {
                acd_tc<T>::store2(dK + at + n * 8, dk[n][2 * r] * p.scale, dk[n][2 * r + 1] * p.scale);
                acd_tc<T>::store2(dV + at + n * 8, dv[n][2 * r], dv[n][2 * r + 1]);
            }
        } else {
            const long long at_v = acd_v_base<kVar>(p, b) + hk * p.v_sh + (long long)j * p.v_ss + 2 * t;
#pragma unroll
            for (int n = 0; n < D / 8; ++n)
                acd_tc<T>::store2(dK + at + n * 8, dk[n][2 * r] * p.scale, dk[n][2 * r + 1] * p.scale);
#pragma unroll
            for (int n = 0; n < DV / 8; ++n)
                acd_tc<T>::store2(dV + at_v + n * 8, dv[n][2 * r], dv[n][2 * r + 1]);
        }
    }
}
