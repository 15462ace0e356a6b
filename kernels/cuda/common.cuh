// kernels/cuda/common.cuh — what the CUDA kernels share: the problem as the
// device sees it (strides, masks), the visibility rule of ref.h, and thin
// wrappers over the PTX the fused kernels use (mma.sync, ldmatrix, cp.async).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>
#include <type_traits>

#include "acd.h"

#define ACD_LOG2E 1.4426950408889634f
#define ACD_LN2 0.6931471805599453f

// The problem, by value in each launch.  Element strides; the head dim is contiguous.
struct acd_params {
    int B, Hq, Hkv, Nq, Nk, D, group;
    long long q_sb, q_sh, q_ss, k_sb, k_sh, k_ss;
    float scale, scale_log2;
    int windowed, wl, wr, align_br; // wl, wr < 0: unbounded side
    const int *seqlens_q, *seqlens_k; // device copies or null
    const unsigned char *mask;        // device copy or null
    int mask_batch, mask_heads;
    int mutant;
};

// Host side: strides from the layout, mask and seqlens copied to the device.
struct acd_staged {
    int *seqlens_q, *seqlens_k;
    unsigned char *mask;
    size_t mask_bytes, lens_bytes;
};
int acd_stage(const ac_problem *p, int mutant, acd_params *dp, acd_staged *st, ac_err *err);
void acd_unstage(acd_staged *st);

__device__ __forceinline__ int acd_nq(const acd_params &p, int b) { return p.seqlens_q ? p.seqlens_q[b] : p.Nq; }
__device__ __forceinline__ int acd_nk(const acd_params &p, int b) { return p.seqlens_k ? p.seqlens_k[b] : p.Nk; }

// Keys visible from row i by the window/causal part: [lo, hi) (not clipped to [0, nk)).
__device__ __forceinline__ void acd_window(const acd_params &p, int i, int nq, int nk, int &lo, int &hi)
{
    lo = -(1 << 30);
    hi = 1 << 30;
    if (p.windowed) {
        int c = p.align_br ? i + nk - nq : i;
        if (p.wl >= 0) lo = c - p.wl;
        if (p.wr >= 0) hi = c + p.wr + 1;
    }
}

// Keys row i sees by the lengths and the window: [lo, hi), empty past the
// row's sequence end; the tail mutant forgets the key-length bound.
__device__ __forceinline__ void acd_row_keys(const acd_params &p, int i, int nq, int nk, int &lo, int &hi)
{
    acd_window(p, i, nq, nk, lo, hi);
    lo = max(lo, 0);
    if (p.mutant != ACD_MUT_TAIL_UNMASKED) hi = min(hi, nk);
    if (i >= nq) hi = lo;
}

// Rows that see key j by the lengths and the window, [lo, hi): acd_row_keys
// inverted (row i sees j exactly when lo <= i < hi), for kernels that walk
// the rows of a key.
__device__ __forceinline__ void acd_key_rows(const acd_params &p, int j, int nq, int nk, int &lo, int &hi)
{
    lo = 0;
    hi = nq;
    if (j < 0 || (j >= nk && p.mutant != ACD_MUT_TAIL_UNMASKED)) hi = 0;
    if (p.windowed) {
        const int off = p.align_br ? nk - nq : 0; // row i's window is centred on key i + off
        if (p.wr >= 0) lo = max(lo, j - p.wr - off);
        if (p.wl >= 0) hi = min(hi, j + p.wl - off + 1);
    }
}

// The dense mask's row i of (b, h): one byte per key, or null without a mask.
__device__ __forceinline__ const unsigned char *acd_mask_row(const acd_params &p, int b, int h, int i)
{
    if (!p.mask) return nullptr;
    const int mb = p.mask_batch == 1 ? 0 : b, mh = p.mask_heads == 1 ? 0 : h;
    return p.mask + (((long long)mb * p.mask_heads + mh) * p.Nq + i) * p.Nk;
}

// ref.h's visibility rule: the row's key range, then the dense mask (keys
// past its width are hidden).
__device__ __forceinline__ bool acd_visible(const acd_params &p, int b, int h, int i, int j, int nq, int nk)
{
    int lo, hi;
    acd_row_keys(p, i, nq, nk, lo, hi);
    if (j < lo || j >= hi) return false;
    const unsigned char *mrow = acd_mask_row(p, b, h, i);
    return !mrow || (j < p.Nk && mrow[j] != 0);
}

// Keys that rows [i_first, i_last] may see, clipped to [0, nk): [lo, hi).
__device__ __forceinline__ void acd_block_keys(const acd_params &p, int i_first, int i_last, int nq, int nk, int &lo, int &hi)
{
    int lo0, hi0, lo1, hi1;
    acd_window(p, i_first, nq, nk, lo0, hi0);
    acd_window(p, i_last, nq, nk, lo1, hi1);
    lo = max(lo0, 0);
    hi = min(hi1, nk);
}

// The forward's K/V tiles of BN keys for query rows [i0, i0 + BM): tiles
// [nb_lo, nb_hi) can hold visible keys, none at or past key_hi; a tile starting
// at j0 with lo_last <= j0 and j0 + BN <= hi_first (and inside nk) is visible
// to every row.  The causal-skip mutant stops one tile early.
struct acd_fwd_tiles {
    int nb_lo, nb_hi, key_hi, lo_last, hi_first;
};
__device__ __forceinline__ acd_fwd_tiles acd_fwd_tile_range(const acd_params &p, int i0, int bm, int bn, int nq, int nk)
{
    acd_fwd_tiles r{0, 0, 0, 0, 0};
    int key_lo = 0;
    if (i0 < nq) {
        int i_last = min(i0 + bm, nq) - 1, dummy;
        acd_block_keys(p, i0, i_last, nq, nk, key_lo, r.key_hi);
        acd_window(p, i_last, nq, nk, r.lo_last, dummy);
        acd_window(p, i0, nq, nk, dummy, r.hi_first);
    }
    r.nb_lo = key_lo / bn;
    r.nb_hi = r.key_hi > key_lo ? (r.key_hi + bn - 1) / bn : r.nb_lo;
    if (p.mutant == ACD_MUT_CAUSAL_SKIP && p.windowed && p.wr >= 0 && r.nb_hi > r.nb_lo) r.nb_hi -= 1;
    return r;
}

// The backward's query rows that can see keys [j0, j0 + bn): [i_lo, i_hi),
// the window inverted (empty past the key sequence's end).
__device__ __forceinline__ void acd_bwd_query_rows(const acd_params &p, int j0, int bn, int nq, int nk, int &i_lo, int &i_hi)
{
    i_lo = 0;
    i_hi = nq;
    if (p.windowed) {
        const int off = p.align_br ? nk - nq : 0, j_last = min(j0 + bn, nk) - 1;
        if (p.wr >= 0) i_lo = max(i_lo, j0 - p.wr - off);
        if (p.wl >= 0) i_hi = min(i_hi, j_last + p.wl - off + 1);
    }
    if (j0 >= nk) i_hi = i_lo;
}

// The backward's S^T / dP^T entries a thread holds for keys key, key + 8 and
// queries i0 + 8n + 2t + {0, 1} that the rules hide, a bit each (bit 4n + e as
// the mma/wgmma accumulator's entry 4n + e): per key a row range, then the
// dense mask (acd_visible per entry had the compiler compute mask addresses for
// every entry of every tile).
template <int BMQ>
__device__ __forceinline__ uint32_t acd_bwd_hidden(const acd_params &p, int b, int h, int i0, int key, int t, int nq, int nk)
{
    static_assert(BMQ <= 64, "one bit per entry");
    uint32_t hidden = 0;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int j = key + 8 * r;
        int lo, hi;
        acd_key_rows(p, j, nq, nk, lo, hi);
        const unsigned char *mask0 = acd_mask_row(p, b, h, 0);
#pragma unroll
        for (int n = 0; n < BMQ / 8; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int i = i0 + n * 8 + 2 * t + e;
                bool vis = i >= lo && i < hi;
                if (mask0) vis = vis && j < p.Nk && mask0[(long long)i * p.Nk + j] != 0;
                if (!vis) hidden |= 1u << (4 * n + 2 * r + e);
            }
    }
    return hidden;
}

// ---- dtype traits: packing and the tensor-core product ----
template <typename T> struct acd_tc;

template <> struct acd_tc<__half> {
    static __device__ __forceinline__ uint32_t pack(float a, float b)
    {
        __half2 h = __floats2half2_rn(a, b);
        return *reinterpret_cast<uint32_t *>(&h);
    }
    static __device__ __forceinline__ void store2(__half *dst, float a, float b)
    {
        *reinterpret_cast<__half2 *>(dst) = __floats2half2_rn(a, b);
    }
    static __device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
    static __device__ __forceinline__ __half from_f(float x) { return __float2half_rn(x); }
    static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
    {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

template <> struct acd_tc<__nv_bfloat16> {
    static __device__ __forceinline__ uint32_t pack(float a, float b)
    {
        __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
        return *reinterpret_cast<uint32_t *>(&h);
    }
    static __device__ __forceinline__ void store2(__nv_bfloat16 *dst, float a, float b)
    {
        *reinterpret_cast<__nv_bfloat162 *>(dst) = __floats2bfloat162_rn(a, b);
    }
    static __device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
    static __device__ __forceinline__ __nv_bfloat16 from_f(float x) { return __float2bfloat16_rn(x); }
    static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
    {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

// 2^x with one MUFU.EX2 (max rel. error ~2^-22, results below 2^-126 flushed):
// ample for P that is rounded to f16/bf16 next; the f32 kernels use exp2f.
__device__ __forceinline__ float acd_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// LSE = m + ln l, with the running max m in units that m_to_nat turns into
// natural ones (ln 2 for log2 units, the softmax scale for raw scores): one
// rounding and logf's, where (m + log2 l) * ln 2 had three and log2f's, which
// left f32 LSE at 4x the naive baseline's mean error (found by the fuzzer).
__device__ __forceinline__ float acd_lse(float m, float m_to_nat, float l) { return fmaf(m, m_to_nat, logf(l)); }

// The f32 backward's P = exp(s * scale - (lse + lse_lo)), with the exponent
// carried to about u: the product's and the difference's rounding errors (an
// exact two-product and two-sum; __f*_rn so nothing is contracted) and lse_lo,
// the stored LSE's own rounding (bwd_f32_refine_lse), enter as a first-order
// correction.  Each P of a row inherited the exponent's rounding, |lse| u, the
// same for every key, which put f32 dV at 2-4x the naive baseline's mean error,
// whose P is rounded once per element (found by the fuzzer).
__device__ __forceinline__ float acd_exp_shifted(float s, float scale, float lse, float lse_lo)
{
    const float hi = __fmul_rn(s, scale);
    if (!isfinite(hi) || !isfinite(lse)) return expf(hi - lse);
    const float lo = fmaf(s, scale, -hi);
    const float x = __fsub_rn(hi, lse), bb = __fsub_rn(x, hi);
    const float err = __fadd_rn(__fsub_rn(hi, __fsub_rn(x, bb)), __fsub_rn(-lse, bb));
    const float corr = (lo + err) - lse_lo, e = expf(x);
    // Scores past ~2^14, where the correction is not small: the forward's LSE came
    // from rounded scores, so P is taken as the forward saw them (one-hot there).
    return fabsf(corr) <= 0x1p-10f ? fmaf(e, corr, e) : e;
}

// The backward's P: exact to the subnormals for bf16, whose range is f32's, so a
// key attended with P < 2^-126 still gets its (tiny) gradient; ex2.approx.ftz
// flushed it to 0 and cost bf16 dK/dV up to 90 scaled on large scores (found by
// the fuzzer; the CPU emulation, using expf, passed the same cases).  f16's P
// underflows at 2^-24 anyway, so f16 keeps the one-instruction form.
template <typename T> __device__ __forceinline__ float acd_exp2_p(float x) { return acd_exp2(x); }
// bf16: 2^(x+64) 2^-64, one add and one multiply more than MUFU.EX2 (the non-ftz
// ex2 and exp2f cost the bf16 backward ~15%); P down to 2^-190 survives, far
// below bf16's smallest subnormal, and the add costs P at most 2^-17 relative.
template <> __device__ __forceinline__ float acd_exp2_p<__nv_bfloat16>(float x) { return acd_exp2(x + 64.f) * 0x1p-64f; }

// dQ is summed over K/V blocks with global atomics, and PTX's atom/red.add.f32
// flush subnormal operands and results to zero: a dQ below 2^-126 (f32 and bf16
// inputs near the smallest normal) came back as 0 (found by the fuzzer; the CPU
// emulation, summing in plain f32, passed the same cases).  So a partial sum
// below 2^-90 goes, scaled by 2^64, into a second accumulator right after the
// first, where it is normal; the conversion adds the two.  Where dQ is normal this
// costs one compare.  What the first sum can still lose is a result that cancels
// below 2^-126 from terms >= 2^-90: under 2^-36 of the terms, far below f32's
// own rounding of them.
#define ACD_DQ_TINY 0x1p-90f
#define ACD_DQ_TINY_SCALE 0x1p64f

__device__ __forceinline__ long long acd_dq_elems(const acd_params &p) { return (long long)p.B * p.Hq * p.Nq * p.D; }

// 0 < |v| < 2^-90 (ACD_DQ_TINY, biased exponent 37) as one unsigned compare on
// the magnitude's bits; 0, NaN and Inf stay with the plain sum.
__device__ __forceinline__ bool acd_dq_is_tiny(float v) { return (__float_as_uint(v) & 0x7fffffffu) - 1u < (37u << 23) - 1u; }

__device__ __forceinline__ void acd_dq_add(float *acc, long long elems, long long at, float v)
{
    if (acd_dq_is_tiny(v))
        atomicAdd(acc + elems + at, v * ACD_DQ_TINY_SCALE);
    else
        atomicAdd(acc + at, v);
}

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
        for (int n = 0; n < N; ++n) tiny |= acd_dq_is_tiny(dq[n][2 * r]) | acd_dq_is_tiny(dq[n][2 * r + 1]);
    }
    if (!tiny) {
#pragma unroll
        for (int n = 0; n < N; ++n) acd_dq_add2_plain(acc, at + n * 8, dq[n][2 * r], dq[n][2 * r + 1]);
        return;
    }
    for (int n = 0; n < N; ++n) {
        acd_dq_add(acc, elems, at + n * 8, dq[n][2 * r]);
        acd_dq_add(acc, elems, at + n * 8 + 1, dq[n][2 * r + 1]);
    }
}

__device__ __forceinline__ uint32_t acd_smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void acd_ldmatrix_x4(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(acd_smem_addr(p)));
}

__device__ __forceinline__ void acd_ldmatrix_x4_trans(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(acd_smem_addr(p)));
}

// 16 bytes global -> shared; ok == false fills zeros (src is then any valid address).
__device__ __forceinline__ void acd_cp_async16_to(uint32_t dst, const void *src, bool ok)
{
    int src_bytes = ok ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void acd_cp_async16(void *dst, const void *src, bool ok) { acd_cp_async16_to(acd_smem_addr(dst), src, ok); }
// 4 bytes global -> shared (LSE and D rows of the backward).
__device__ __forceinline__ void acd_cp_async4_to(uint32_t dst, const void *src)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void acd_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void acd_cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// The backward's LSE and D of query rows [i0, i0 + BMQ) of head h into shared
// memory (threads tid < BMQ, one row each, joining the caller's cp.async
// group); rows past the sequence end get LSE = -inf (they see nothing), D = 0.
template <int BMQ>
__device__ __forceinline__ void acd_load_lse_d(float *sLse, float *sDd, const float *LSE, const float *Dv, const acd_params &p,
                                               int b, int h, int i0, int nq, int tid)
{
    if (tid >= BMQ) return;
    const int i = i0 + tid;
    const long long row = ((long long)b * p.Hq + h) * p.Nq + i;
    if (i < nq) {
        acd_cp_async4_to(acd_smem_addr(sLse + tid), LSE + row);
        acd_cp_async4_to(acd_smem_addr(sDd + tid), Dv + row);
    } else {
        sLse[tid] = -INFINITY;
        sDd[tid] = 0.f;
    }
}

// ROWS x D tile of a sequence (row stride ss elements) into shared memory with
// row pitch D + 8 (16 bytes of padding keep ldmatrix free of bank conflicts).
// Rows >= limit are zero-filled, so padding and tails never reach the math.
template <typename T, int ROWS, int D, int NT>
__device__ __forceinline__ void acd_load_tile(T *s, const T *g, long long ss, int row0, int limit, int tid)
{
    constexpr int CPR = D / 8;
#pragma unroll
    for (int c = tid; c < ROWS * CPR; c += NT) {
        int r = c / CPR, col = (c % CPR) * 8;
        int gr = row0 + r;
        bool ok = gr < limit;
        const T *src = ok ? g + (long long)gr * ss + col : g;
        acd_cp_async16(s + r * (D + 8) + col, src, ok);
    }
}

// Storage type <-> f32, for kernels templated on it (f32 included).
template <typename T> struct acd_cvt {
    static __device__ __forceinline__ float to_f(T x) { return acd_tc<T>::to_f(x); }
    static __device__ __forceinline__ T from_f(float x) { return acd_tc<T>::from_f(x); }
};
template <> struct acd_cvt<float> {
    static __device__ __forceinline__ float to_f(float x) { return x; }
    static __device__ __forceinline__ float from_f(float x) { return x; }
};

// Head dims with tensor-core tiles (f16/bf16); the others, up to 256, and f32
// run the CUDA-core kernels of flash_f32.cu.
inline bool acd_tc_head_dim(int d) { return d == 32 || d == 64 || d == 96 || d == 128; }

// ---- launch-only entry points (no sync, no staging), for the bench ----
// The CUDA-core path: f32 arithmetic throughout on T (float, __half, __nv_bfloat16) storage.
template <typename T> int acd_fwd_f32(const acd_params &p, const ac_fwd_args *a, cudaStream_t stream, ac_err *err);
template <typename T>
int acd_bwd_f32(const acd_params &p, const ac_bwd_args *a, const float *Dv, float *lse_lo, float *dQacc, cudaStream_t stream, ac_err *err);
// flash_fwd_sm90.cu, flash_bwd_sm90.cu (sm_90a): the wgmma kernels for f16/bf16
// at d = 64, 128 on Hopper.
bool acd_wgmma_usable(int d);
template <typename T> int acd_fwd_wgmma(const acd_params &p, const ac_fwd_args *a, cudaStream_t stream, ac_err *err);
template <typename T>
int acd_bwd_wgmma(const acd_params &p, const ac_bwd_args *a, const float *Dv, float *dQacc, cudaStream_t stream, ac_err *err);
int acd_flash_forward_async(const acd_params &p, ac_dtype t, const ac_fwd_args *a, cudaStream_t stream, ac_err *err);
size_t acd_bwd_workspace_bytes(const acd_params &p);
int acd_flash_backward_async(const acd_params &p, ac_dtype t, const ac_bwd_args *a, void *workspace, cudaStream_t stream, ac_err *err);
