// kernels/cuda/common.cuh — what the CUDA kernels share: the problem as the
// device sees it (strides, masks), the tensor cores' accumulator tiles, and
// thin wrappers over the PTX the fused kernels use (mma.sync, ldmatrix,
// cp.async).  The stages of the fused kernels are in mask.cuh (visibility),
// softmax.cuh (online softmax, P and dS) and backward.cuh.
#pragma once
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <type_traits>

#include "acd.h"

#define ACD_LOG2E 1.4426950408889634f
#define ACD_LN2 0.6931471805599453f

// The problem, by value in each launch.  Element strides; the head dim is contiguous.
struct acd_params {
    int B, Hq, Hkv, Nq, Nk, D, group;
    long long q_sb, q_sh, q_ss, k_sb, k_sh, k_ss;
    int Dv; // d_v: V, O, dO, dV (D otherwise); the tile kernels take it as D_V
    long long o_sb, o_sh, o_ss, v_sb, v_sh, v_ss; // O-like and V-like strides (the Q and K ones when Dv == D)
    float scale, scale_log2;
    int windowed, wl, wr, align_br; // wl, wr < 0: unbounded side
    const int *seqlens_q, *seqlens_k; // device copies or null
    const unsigned char *mask; // device copy or null
    int mask_batch, mask_heads;
    int mutant;
    // Variants (ref/variants.h): score modifiers, sinks, the packed THD layout.
    int mods; // softcap, ALiBi or a bias on: acd_score_mod runs
    float softcap, softcap_pre; // c (0: off) and scale / c: T = c tanh(acc scale / c)
    // Natural-log units per unit of the base-2 kernels' scores (hi + lo), and its
    // inverse: ln 2 and log2 e, or with a softcap c / cap and cap / c for
    // cap = fl(c log2 e), the factor the capped scores were formed with (stage.cu:
    // a saturated row's LSE then comes out c, where cap ln 2 put it up to 2^-24 c off,
    // at 1.6x the naive baseline's mean LSE error in the variants fuzz).
    float lse_unit, lse_unit_lo, lse_to_log2;
    const float *alibi; // device (alibi_batch, Hq) slopes, or null
    int alibi_batch;
    const float *sinks; // device (Hq) sink logits, or null
    const void *bias; // device (bias_batch, bias_heads, Nq, Nk) additive bias, or null
    int bias_dtype, bias_batch, bias_heads; // ac_dtype of its elements; 1 or B, 1 or Hq
    float *dbias_acc; // the backward's f32 dBias sums (shaped like the bias), then their
    long long dbias_elems; // subnormal-keeping twin at dbias_acc + dbias_elems (acd_dq_add); or null
    int thd; // layout THD: rows through cu_q, cu_k; LSE (Hq, total_q)
    const int *cu_q, *cu_k; // device (B + 1) offsets, THD only
    long long total_q;
};

// dQ is summed over K/V blocks with global atomics, and PTX's atom/red.add.f32
// flush subnormal operands and results to zero: a dQ below 2^-126 (f32 and bf16
// inputs near the smallest normal) came back as 0 (found by the fuzzer; the CPU
// emulation, summing in plain f32, passed the same cases).  So a partial sum
// below 2^-90 goes, scaled by 2^64, into a second accumulator right after the
// first, where it is normal; the conversion adds the two.  Where dQ is normal this
// costs one compare.  What the first sum can still lose is a result that cancels
// below 2^-126 from terms >= 2^-90: under 2^-36 of the terms, far below f32's
// own rounding of them.  dBias's f32 sums (softmax.cuh, flash_f32.cu) go through
// the same acd_dq_add, with their twin at dbias_acc + dbias_elems.
#define ACD_DQ_TINY 0x1p-90f
#define ACD_DQ_TINY_SCALE 0x1p64f

// 0 < |v| < 2^-90 (ACD_DQ_TINY, biased exponent 37) as one unsigned compare on
// the magnitude's bits; 0, NaN and Inf stay with the plain sum.
__device__ __forceinline__ bool acd_dq_is_tiny(float v)
{
    return (__float_as_uint(v) & 0x7fffffffu) - 1u < (37u << 23) - 1u;
}

__device__ __forceinline__ void acd_dq_add(float *acc, long long elems, long long at, float v)
{
    if (acd_dq_is_tiny(v))
        atomicAdd(acc + elems + at, v * ACD_DQ_TINY_SCALE);
    else
        atomicAdd(acc + at, v);
}

// Host side: strides from the layout, mask and seqlens copied to the device.
struct acd_staged {
    int *seqlens_q, *seqlens_k;
    unsigned char *mask;
    size_t mask_bytes, lens_bytes;
    int *cu_q, *cu_k; // the variants' arrays
    float *sinks, *alibi;
    void *bias;
    size_t cu_bytes, sinks_bytes, alibi_bytes, bias_bytes;
};
int acd_stage(const ac_problem *p, int mutant, acd_params *dp, acd_staged *st, ac_err *err);
void acd_unstage(acd_staged *st);

// Sequence b's lengths: THD's from cu_seqlens, else seqlens or the extent.
// kThd = false (the tensor-core kernels' plain instantiation) compiles the
// THD branch of these helpers out.
template <bool kThd = true> __device__ __forceinline__ int acd_nq(const acd_params &p, int b)
{
    return kThd && p.thd ? p.cu_q[b + 1] - p.cu_q[b] : p.seqlens_q ? p.seqlens_q[b] : p.Nq;
}
template <bool kThd = true> __device__ __forceinline__ int acd_nk(const acd_params &p, int b)
{
    return kThd && p.thd ? p.cu_k[b + 1] - p.cu_k[b] : p.seqlens_k ? p.seqlens_k[b] : p.Nk;
}
// Where sequence b starts (elements) in Q-like and K-like tensors: THD packs
// the sequences back to back (row cu[b] onward), the others stride by batch.
template <bool kThd = true> __device__ __forceinline__ long long acd_q_base(const acd_params &p, int b)
{
    return kThd && p.thd ? p.cu_q[b] * p.q_ss : b * p.q_sb;
}
template <bool kThd = true> __device__ __forceinline__ long long acd_k_base(const acd_params &p, int b)
{
    return kThd && p.thd ? p.cu_k[b] * p.k_ss : b * p.k_sb;
}
template <bool kThd = true> __device__ __forceinline__ long long acd_o_base(const acd_params &p, int b)
{
    return kThd && p.thd ? p.cu_q[b] * p.o_ss : b * p.o_sb;
}
template <bool kThd = true> __device__ __forceinline__ long long acd_v_base(const acd_params &p, int b)
{
    return kThd && p.thd ? p.cu_k[b] * p.v_ss : b * p.v_sb;
}
// V's and O's (dO's) row strides in a tile kernel of d_v != d_qk (kSplitDv),
// else K's and Q's, the same then; read where used, as K's and Q's always were.
template <bool kSplitDv> __device__ __forceinline__ long long acd_v_ss(const acd_params &p)
{
    if constexpr (kSplitDv)
        return p.v_ss;
    else
        return p.k_ss;
}
template <bool kSplitDv> __device__ __forceinline__ long long acd_o_ss(const acd_params &p)
{
    if constexpr (kSplitDv)
        return p.o_ss;
    else
        return p.q_ss;
}
// Rows of sequence b that exist in memory, and may be written: the padded
// extent, or with THD the sequence's own (past it lies the next sequence).
template <bool kThd = true> __device__ __forceinline__ int acd_q_stored(const acd_params &p, int nq)
{
    return kThd && p.thd ? nq : p.Nq;
}
template <bool kThd = true> __device__ __forceinline__ int acd_k_stored(const acd_params &p, int nk)
{
    return kThd && p.thd ? nk : p.Nk;
}

// Row i of query head h of batch b in the LSE-like arrays: LSE, D, dQ's rows;
// (B, Hq, Nq), or with THD (Hq, total_q) as FlashAttention's varlen LSE.
template <bool kThd = true> __device__ __forceinline__ long long acd_row_index(const acd_params &p, int b, int h, int i)
{
    return kThd && p.thd ? h * p.total_q + p.cu_q[b] + i : ((long long)b * p.Hq + h) * p.Nq + i;
}
// Its offset (elements) in Q, O, dO and dQ.
template <bool kThd = true> __device__ __forceinline__ long long acd_q_offset(const acd_params &p, int b, int h, int i)
{
    return acd_q_base<kThd>(p, b) + h * p.q_sh + (long long)i * p.q_ss;
}
// Row i of query head h of batch b in O and dO (d_v columns).
template <bool kThd = true> __device__ __forceinline__ long long acd_o_offset(const acd_params &p, int b, int h, int i)
{
    return acd_o_base<kThd>(p, b) + h * p.o_sh + (long long)i * p.o_ss;
}
// The (b, h, i) of virtual row x of the (B, Hq, Nq) grid the row-wise kernels
// walk; false where i is past sequence b's stored rows (padding of the grid).
__device__ __forceinline__ bool acd_grid_row(const acd_params &p, long long x, int &b, int &h, int &i)
{
    i = (int)(x % p.Nq);
    h = (int)((x / p.Nq) % p.Hq);
    b = (int)(x / ((long long)p.Nq * p.Hq));
    return i < acd_q_stored(p, acd_nq(p, b));
}

// Whether the tensor-core kernels run their variants instantiation (kVar =
// true: score modifiers, sinks, THD): the plain one compiles none of their
// code (the helpers above take kThd = kVar), keeping the register budget the
// kernels were tuned for; as runtime branches the variants cost fwd_wg 52-96
// bytes of spill and fwd_tc at d = 128 60.  d_v != d_qk is a tile template
// parameter of its own (kernels templated on D_QK and D_V).
inline bool acd_variant_kernel(const acd_params &p) { return p.mods || p.sinks || p.thd; }

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
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
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
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

// ---- warp- and CTA-wide reductions ----
// v over the warp by op (a sum or a max), every lane receiving the result: a
// butterfly of shuffles (lane distances 16, 8, 4, 2, 1), so every lane sums in
// the same order.  Every lane of the warp calls it.
template <typename Op> __device__ __forceinline__ float acd_warp_reduce(float v, Op op)
{
    for (int k = 16; k > 0; k /= 2)
        v = op(v, __shfl_xor_sync(0xffffffffu, v, k));
    return v;
}
__device__ __forceinline__ float acd_warp_max(float v)
{
    return acd_warp_reduce(v, [](float a, float c) { return fmaxf(a, c); });
}
__device__ __forceinline__ float acd_warp_sum(float v)
{
    return acd_warp_reduce(v, [](float a, float c) { return a + c; });
}

// v over the CTA by op (a sum or a max), every thread receiving the result: the
// warps' shuffles, then warp 0's .. the last warp's partials in order (the same
// order on every call, so a row's result does not move between runs).
// scratch: a float per warp in shared memory; every thread of the CTA calls it.
template <typename Op> __device__ __forceinline__ float acd_cta_reduce(float v, float *scratch, Op op)
{
    v = acd_warp_reduce(v, op);
    __syncthreads(); // scratch's previous use is over
    if (threadIdx.x % 32 == 0)
        scratch[threadIdx.x / 32] = v;
    __syncthreads();
    float r = scratch[0];
    for (int w = 1; w < (int)(blockDim.x / 32); ++w)
        r = op(r, scratch[w]);
    return r;
}

// ---- accumulator tiles ----
// A tensor-core product's f32 result, per warp 16 rows x N columns, is held as
// float x[N / 8][4]: lane 4g + t holds x[n][e] = row g + 8 (e / 2),
// column 8n + 2t + e % 2.  mma.sync m16n8k16 writes one x[n] per instruction;
// wgmma's m64nN accumulator is the same per warp of its warpgroup.  A row is
// spread over a quad of lanes (4g .. 4g + 3).
template <int N> __device__ __forceinline__ void acd_zero(float (&x)[N][4])
{
#pragma unroll
    for (int n = 0; n < N; ++n)
        x[n][0] = x[n][1] = x[n][2] = x[n][3] = 0.f;
}

// The 16-column k step kk of an accumulator tile as the A operand of the next
// product (mma.sync's A fragment, wgmma's A from registers), rounded to T: the
// accumulator's layout is A's, so P and dS never leave the registers.
template <typename T, int N>
__device__ __forceinline__ void acd_frag_to_a(uint32_t (&a)[4], const float (&x)[N][4], int kk)
{
    a[0] = acd_tc<T>::pack(x[2 * kk][0], x[2 * kk][1]);
    a[1] = acd_tc<T>::pack(x[2 * kk][2], x[2 * kk][3]);
    a[2] = acd_tc<T>::pack(x[2 * kk + 1][0], x[2 * kk + 1][1]);
    a[3] = acd_tc<T>::pack(x[2 * kk + 1][2], x[2 * kk + 1][3]);
}

__device__ __forceinline__ uint32_t acd_smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void acd_ldmatrix_x4(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(acd_smem_addr(p)));
}

__device__ __forceinline__ void acd_ldmatrix_x4_trans(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(acd_smem_addr(p)));
}

// 16 bytes global -> shared; ok == false fills zeros (src is then any valid address).
__device__ __forceinline__ void acd_cp_async16_to(uint32_t dst, const void *src, bool ok)
{
    int src_bytes = ok ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void acd_cp_async16(void *dst, const void *src, bool ok)
{
    acd_cp_async16_to(acd_smem_addr(dst), src, ok);
}
// 4 bytes global -> shared (LSE and D rows of the backward).
__device__ __forceinline__ void acd_cp_async4_to(uint32_t dst, const void *src)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void acd_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void acd_cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
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

// (d_qk, d_v) pairs with tensor-core tiles (f16/bf16), forward and backward on
// mma.sync: d = 32, 64, 96, 128 with d_v = d, and d_v != d_qk's 192/128 (MLA),
// 128/96 and 256/128 (flash_fwd.cu, flash_bwd.cu).  The others, up to 256 (d =
// 192 and 256 with d_v = d among them), and f32 run the CUDA-core kernels of
// flash_f32.cu.  acd_wgmma_usable and acd_wgmma_bwd_usable say which of these Hopper
// runs on wgmma.
inline bool acd_tc_head_dims(int d, int dv)
{
    if (dv == d)
        return d == 32 || d == 64 || d == 96 || d == 128;
    return (d == 192 && dv == 128) || (d == 128 && dv == 96) || (d == 256 && dv == 128);
}

// ---- launch-only entry points (no sync, no staging), for the bench ----
// The CUDA-core path: f32 arithmetic throughout on T (float, __half, __nv_bfloat16) storage.
template <typename T> int acd_fwd_f32(const acd_params &p, const ac_fwd_args *a, cudaStream_t stream, ac_err *err);
template <typename T>
int acd_bwd_f32(const acd_params &p, const ac_bwd_args *a, const float *Dv, float *lse_lo, float *dQacc,
                cudaStream_t stream, ac_err *err);
// flash_fwd_sm90.cu, flash_bwd_sm90.cu (sm_90a): the wgmma kernels for f16/bf16
// on Hopper, the forward at (d_qk, d_v) = (64, 64), (128, 128), (192, 128),
// (256, 128) (acd_wgmma_usable), the backward at (64, 64), (128, 128),
// (192, 128), (128, 96) (acd_wgmma_bwd_usable).
bool acd_wgmma_usable(int d, int dv);
bool acd_wgmma_bwd_usable(int d, int dv);
template <typename T> int acd_fwd_wgmma(const acd_params &p, const ac_fwd_args *a, cudaStream_t stream, ac_err *err);
template <typename T>
int acd_bwd_wgmma(const acd_params &p, const ac_bwd_args *a, const float *Dv, float *dQacc, cudaStream_t stream,
                  ac_err *err);
int acd_flash_forward_async(const acd_params &p, ac_dtype t, const ac_fwd_args *a, cudaStream_t stream, ac_err *err);
size_t acd_bwd_workspace_bytes(const acd_params &p);
int acd_flash_backward_async(const acd_params &p, ac_dtype t, const ac_bwd_args *a, void *workspace,
                             cudaStream_t stream, ac_err *err);
