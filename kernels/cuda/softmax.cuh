// kernels/cuda/softmax.cuh — the softmax numerics of every fused kernel,
// written once: the forward's online softmax (running max and sum per row in
// base 2, the tile update, the end that divides O by the sum and writes the
// LSE) and the backward's P and dS recomputed from the LSE.  A numerics fix here
// lands in the mma.sync, wgmma and CUDA-core kernels at once.
#pragma once
#include "common.cuh"

// 2^x with one MUFU.EX2 (max rel. error ~2^-22, results below 2^-126 flushed):
// ample for P that is rounded to f16/bf16 next; the f32 kernels use exp2f.
__device__ __forceinline__ float acd_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// LSE = m ln 2 + ln l, m the running max in log2 units: one rounding and
// logf's, where (m + log2 l) * ln 2 had three and log2f's, which left f32 LSE
// at 4x the naive baseline's mean error (found by the fuzzer).
__device__ __forceinline__ float acd_lse(float m_log2, float l) { return fmaf(m_log2, ACD_LN2, logf(l)); }

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
    if (!isfinite(hi) || !isfinite(lse))
        return expf(hi - lse);
    const float lo = fmaf(s, scale, -hi);
    const float x = __fsub_rn(hi, lse), bb = __fsub_rn(x, hi);
    const float err = __fadd_rn(__fsub_rn(hi, __fsub_rn(x, bb)), __fsub_rn(-lse, bb));
    const float corr = (lo + err) - lse_lo;
    // Scores past ~2^14, where the correction is not small: the forward's LSE came
    // from rounded scores, so P is taken as the forward saw them (one-hot there).
    if (fabsf(corr) > 0x1p-10f)
        return expf(x);
    // Else the exponent in double (s scale is exact there) and P rounded once: f32's
    // expf errs by up to 2 ulp, alike for a row's equal scores, which put f32 dV at
    // 4.6x the naive mean error where every score is 0 (dist=tiny(), window-tl(7,0):
    // the naive P = 1/n is exact for n = 1, 2, 4, 8; found on the H100).
    return (float)::exp((double)s * (double)scale - (double)lse - (double)lse_lo);
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
template <> __device__ __forceinline__ float acd_exp2_p<__nv_bfloat16>(float x)
{
    return acd_exp2(x + 64.f) * 0x1p-64f;
}

// The forward's P: its row sum l makes the LSE, held to f32, so the 2^-17 of
// acd_exp2_p's shifted form may not reach a P >= 2^-126; only the ones below,
// which MUFU.EX2 flushes and bf16 can hold, take it (an LSE at 64 u otherwise:
// found on the H100 with ALiBi and dist=tiny()).  f16's P underflows at 2^-24.
template <typename T> __device__ __forceinline__ float acd_exp2_fwd(float x) { return acd_exp2(x); }
// One MUFU.EX2 either way (a select of both forms ran two: the bf16 forward at 0.80x
// of f16's on the H100); for x >= -126 the shift is 0, and x + 0 and y * 1 are exact.
template <> __device__ __forceinline__ float acd_exp2_fwd<__nv_bfloat16>(float x)
{
    const bool tiny = x < -126.f;
    return acd_exp2(x + (tiny ? 64.f : 0.f)) * (tiny ? 0x1p-64f : 1.f);
}

// ---- the forward ----

// The base of a softmax row's exponentials.  Base 2 for the tensor-core
// kernels: scores arrive times scale log2 e, P = 2^(s - m) is one MUFU.EX2.
// Base e for the CUDA-core f32 kernels (flash_f32.cu), as cpu-flash computes:
// S times the f32 scale itself, one rounding, and LSE = m + ln l.  In base 2
// an f32 score is rounded once more at its own magnitude (times scale log2 e,
// itself rounded) and m comes back through ln 2: where one large score
// dominates a row, the LSE is off by a further ulp of that score, which put
// f32 LSE at 2.68x the naive mean error on the H100 (issue 13, fixture in
// fixtures/gpu-found.cases; docs/cuda-f32-lse.md has the measurement).
// For the sink's join, once per row and so in double: units(s) a natural-log
// value in the base's units; exp_diff(a, b) = Base::exp(a - b) and
// exp_nat_diff(s, b) = Base::exp(units(s) - b), s natural, each rounded once to
// f32.  The sink rescales a whole row and is one large term of it: f32's exp2f
// (2 ulp) and the rounding of s log2 e put f16 LSE with sinks at 1.51x the naive
// mean error on the H100 (dist=tiny(), rows of 1-2 keys, where the sink's share
// is largest), and base e must not err by u |a - b| (a sink 20 above the scores).
struct acd_base2 {
    static __device__ __forceinline__ float exp(float x) { return exp2f(x); }
    static __device__ __forceinline__ float units(float s) { return s * ACD_LOG2E; }
    static __device__ __forceinline__ float exp_diff(float a, float b)
    {
        return isfinite(a) && isfinite(b) ? (float)exp2((double)a - (double)b) : exp2f(a - b);
    }
    static __device__ __forceinline__ float exp_nat_diff(float s, float b)
    {
        return isfinite(s) && isfinite(b) ? (float)exp2((double)s * 1.4426950408889634 - (double)b)
                                          : exp2f(units(s) - b);
    }
    static __device__ __forceinline__ float lse(float m, float l) { return acd_lse(m, l); }
};
struct acd_base_e {
    static __device__ __forceinline__ float exp(float x) { return expf(x); }
    static __device__ __forceinline__ float units(float s) { return s; }
    static __device__ __forceinline__ float exp_diff(float a, float b)
    {
        return isfinite(a) && isfinite(b) ? (float)::exp((double)a - (double)b) : expf(a - b);
    }
    static __device__ __forceinline__ float exp_nat_diff(float s, float b) { return exp_diff(s, b); }
    static __device__ __forceinline__ float lse(float m, float l) { return m + logf(l); }
};

// One query row's running max m, in the base's units (base 2: scores times
// scale log2 e; base e: scores times scale), and running sum l of
// Base::exp(s - m) over the keys seen so far.
//
// The start state comes from a constructor, not from default member
// initializers: in device code nvcc 13.0 runs those only for the first
// sub-array of a multi-dimensional array (`acd_softmax_row x[2][2]`: x[0][*];
// x[1][*] stayed undefined and came out m = 0), which gave fwd_tc's second
// m-tile at d = 128 a running max of 0 instead of -inf, so a row whose visible
// scores were all negative had P = 2^s instead of 1 (rounded far from 1, or to
// 0).  A user-provided constructor runs for every element (PERF.md).
template <typename Base> struct acd_softmax_row_in {
    float m, l;

    __device__ __forceinline__ acd_softmax_row_in() : m(-INFINITY), l(0.f) {}

    // Opens a tile whose scores' maximum over the row is tile_max; returns the
    // shift of this tile's exponents, the new max, or 0 while the row has seen
    // nothing visible (-inf - -inf would be NaN), and sets alpha, the factor
    // that rescales what was summed (into l and O) before.
    __device__ __forceinline__ float rescale(float tile_max, float &alpha)
    {
        const float m_new = fmaxf(m, tile_max);
        const float shift = m_new == -INFINITY ? 0.f : m_new;
        alpha = Base::exp(m - shift);
        m = m_new;
        return shift;
    }
    // Closes the tile: tile_sum is the row's sum of Base::exp(s - shift) over it.
    __device__ __forceinline__ void add(float alpha, float tile_sum) { l = l * alpha + tile_sum; }

    // A learnable sink s (a natural-log logit; Base::units puts it in the base's)
    // joins the finished row's denominator, with no value: m' = max(m, s),
    // l' = l e^(m - m') + e^(s - m')
    // (FlashAttention-3's epilogue; cpu-flash's vf_sink).  Returns the factor
    // e^(m - m') of what O summed (0 for a row that saw nothing: O = 0, LSE = s).
    __device__ __forceinline__ float join_sink(float sink_nat)
    {
        const float m_new = fmaxf(m, Base::units(sink_nat)), o_factor = m == -INFINITY ? 0.f : Base::exp_diff(m, m_new);
        l = l * o_factor + Base::exp_nat_diff(sink_nat, m_new);
        m = m_new;
        return o_factor;
    }

    // After the last tile, l summed over the whole row: the factor of O, and
    // the LSE in natural log.  A row that saw nothing gives O = 0, LSE = -inf.
    __device__ __forceinline__ float inv_l() const { return l > 0.f ? 1.f / l : 0.f; }
    __device__ __forceinline__ float lse() const { return l > 0.f ? Base::lse(m, l) : -INFINITY; }
    // The same with m converted by unit + unit_lo (acd_params::lse_unit) in place of the base's factor.
    __device__ __forceinline__ float lse_in(float unit, float unit_lo) const
    {
        return l > 0.f ? fmaf(m, unit, fmaf(m, unit_lo, logf(l))) : -INFINITY;
    }
};
using acd_softmax_row = acd_softmax_row_in<acd_base2>;

// Raw scores to log2 units, rounded once, before masking and the max.
template <int N> __device__ __forceinline__ void acd_scores_to_log2(float (&s)[N / 8][4], float scale_log2)
{
#pragma unroll
    for (int n = 0; n < N / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            s[n][e] *= scale_log2;
}

// ---- the score modifiers (ref.h's ac_score_mod: softcap, then ALiBi) ----

// ALiBi's slope of (b, h) (0 without ALiBi): slopes (Hq) or (B, Hq).
__device__ __forceinline__ float acd_alibi_slope(const acd_params &p, int b, int h)
{
    return p.alibi ? p.alibi[(p.alibi_batch > 1 ? b : 0) * p.Hq + h] : 0.f;
}

// The bias's entry of (b, h, i, j), widened exactly to f32 (0 without a bias;
// -inf hides the pair), and its index (dBias is shaped like the bias).
// Entries past the extents (padding of a tile, hidden anyway) read 0.
__device__ __forceinline__ long long acd_bias_index(const acd_params &p, int b, int h, int i, int j)
{
    const int mb = p.bias_batch > 1 ? b : 0, mh = p.bias_heads > 1 ? h : 0;
    return (((long long)mb * p.bias_heads + mh) * p.Nq + i) * p.Nk + j;
}
__device__ __forceinline__ float acd_bias_at(const acd_params &p, int b, int h, int i, int j)
{
    if (!p.bias || i >= p.Nq || j >= p.Nk)
        return 0.f;
    const long long at = acd_bias_index(p, b, h, i, j);
    if (p.bias_dtype == AC_F16)
        return __half2float(static_cast<const __half *>(p.bias)[at]);
    if (p.bias_dtype == AC_BF16)
        return __bfloat162float(static_cast<const __nv_bfloat16 *>(p.bias)[at]);
    return static_cast<const float *>(p.bias)[at];
}

// S' of a raw product acc = (Q K^T)_ij in a softmax base's units (scale_u,
// cap_u, slope_u: the scale, c and the slope, times log2 e for base 2; unit:
// log2 e or 1): softcap cap_u tanh(acc scale / c), the scale folded into the
// tanh's argument (softcap_pre) as FlashAttention and cpu-flash do, else acc
// scale_u; then minus ALiBi's slope_u |dist|, dist = i + nk - nq - j
// (bottom-right aligned); then plus the bias (last, as ref.h), one rounding.  *dt gets dT/dS = 1 - tanh^2 (1 without softcap),
// the backward's factor of dS.  tanhf, not tanh.approx: its 2^-11 relative
// error would sit in every S' above the f32 rounding the error scales allow.
__device__ __forceinline__ float acd_score_mod_abs(const acd_params &p, float acc, float scale_u, float cap_u,
                                                   float slope_u, float abs_dist, float bias, float unit, float *dt)
{
    float x;
    if (p.softcap != 0.f) {
        const float y = tanhf(acc * p.softcap_pre);
        x = cap_u * y;
        *dt = fmaf(-y, y, 1.f);
    } else {
        x = acc * scale_u;
        *dt = 1.f;
    }
    if (slope_u != 0.f)
        x = fmaf(-slope_u, abs_dist, x);
    return p.bias ? fmaf(bias, unit, x) : x;
}
__device__ __forceinline__ float acd_score_mod(const acd_params &p, float acc, float scale_u, float cap_u,
                                               float slope_u, int dist, float bias, float unit, float *dt)
{
    return acd_score_mod_abs(p, acc, scale_u, cap_u, slope_u, (float)abs(dist), bias, unit, dt);
}

// |diag - c| as f32 for a tile's compile-time offsets c: one f32 add, exact
// (so equal to (float)|diag - c|) while |diag| < 2^23 and |c| < 2^23, else the
// integer-to-float conversion, which runs at MUFU.EX2's rate on sm_90 and
// was ALiBi's costliest instruction per score (its forward: 0.36x of the plain
// wgmma one; PERF.md, "Variants").
__device__ __forceinline__ float acd_abs_dist(bool exact, float diag_f, int diag, int c)
{
    return exact ? fabsf(diag_f - (float)c) : (float)abs(diag - c);
}

// A tensor-core tile of raw scores (this thread's rows row, row + 8, keys j0 +
// 8n + 2t + {0, 1}) to S' in log2 units with the modifiers kCap (softcap),
// kAlibi (a nonzero slope) and kBias on: acd_score_mod's arithmetic, operation
// for operation, without its per-score tests (three runtime branches and
// ALiBi's integer-to-float conversion of every distance, where ALiBi's forward
// ran at 0.36x of the plain wgmma one).  The distance
// i + nk - nq - j comes as |diag_f - (8n + e)| in f32, exact (so equal to
// (float)|dist|) while |diag| < 2^23; longer rows convert each distance.
template <int N, bool kCap, bool kAlibi, bool kBias>
__device__ __forceinline__ void acd_scores_mod_log2_on(float (&s)[N / 8][4], const acd_params &p, int b, int h, int row,
                                                       int j0, int t, int nq, int nk, float slope, float cap)
{
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int i = row + 8 * r, diag = i + nk - nq - j0 - 2 * t;
        const bool diag_exact = abs(diag) < (1 << 23);
        const float diag_f = (float)diag;
#pragma unroll
        for (int n = 0; n < N / 8; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float x;
                if constexpr (kCap)
                    x = cap * tanhf(s[n][2 * r + e] * p.softcap_pre);
                else
                    x = s[n][2 * r + e] * p.scale_log2;
                if constexpr (kAlibi)
                    x = fmaf(-slope, acd_abs_dist(diag_exact, diag_f, diag, 8 * n + e), x);
                if constexpr (kBias)
                    x = fmaf(acd_bias_at(p, b, h, i, j0 + 8 * n + 2 * t + e), ACD_LOG2E, x);
                s[n][2 * r + e] = x;
            }
    }
}

// The modifiers this tile's problem has, chosen once per tile (uniform over
// the block: the slope is per (b, h)).
template <int N>
__device__ __forceinline__ void acd_scores_mod_log2(float (&s)[N / 8][4], const acd_params &p, int b, int h, int row,
                                                    int j0, int t, int nq, int nk)
{
    const float slope = acd_alibi_slope(p, b, h) * ACD_LOG2E, cap = p.softcap * ACD_LOG2E;
    const int on = (p.softcap != 0.f ? 1 : 0) | (slope != 0.f ? 2 : 0) | (p.bias ? 4 : 0);
#define ACD_MOD_CASE(k) \
    case k: \
        acd_scores_mod_log2_on<N, (k & 1) != 0, (k & 2) != 0, (k & 4) != 0>(s, p, b, h, row, j0, t, nq, nk, slope, \
                                                                            cap); \
        break
    switch (on) {
        ACD_MOD_CASE(1);
        ACD_MOD_CASE(2);
        ACD_MOD_CASE(3);
        ACD_MOD_CASE(4);
        ACD_MOD_CASE(5);
        ACD_MOD_CASE(6);
        ACD_MOD_CASE(7);
    default:
        acd_scores_to_log2<N>(s, p.scale_log2); // p.mods set by a zero slope alone: S' = S
    }
#undef ACD_MOD_CASE
}

// The forward's scores of a tensor-core tile to log2 units, with the
// modifiers when the problem has any (the plain path is acd_scores_to_log2's).
// kVar: the kernel's variants instantiation (acd_variant_kernel); the plain
// one compiles without the modifiers' code, which cost fwd_wg 72-96 bytes of
// spill when it was only a runtime branch.
template <int N, bool kVar>
__device__ __forceinline__ void acd_scores_tile(float (&s)[N / 8][4], const acd_params &p, int b, int h, int row,
                                                int j0, int t, int nq, int nk)
{
    if (kVar && p.mods)
        acd_scores_mod_log2<N>(s, p, b, h, row, j0, t, nq, nk);
    else
        acd_scores_to_log2<N>(s, p.scale_log2);
}

// The largest score of this thread's row r (0: row, 1: row + 8) in an
// accumulator tile of N keys, over the quad that holds the row.
template <int N> __device__ __forceinline__ float acd_tile_row_max(const float (&s)[N / 8][4], int r)
{
    float mx = -INFINITY;
#pragma unroll
    for (int n = 0; n < N / 8; ++n)
        mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    return fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
}

// The online softmax of a tensor-core accumulator tile of N keys (common.cuh:
// this thread's rows r = 0, 1 of the quad), in place: S in log2 units, hidden
// entries -inf, becomes P = 2^(S - shift), not yet rounded; alpha[r] is the
// factor of row r's O (acd_rescale_rows).  Max and sum run over the quad.
// P through acd_exp2_fwd<T>: for bf16 a P below 2^-126 survives, as in the
// backward; MUFU.EX2's flush lost the keys such P weighs, which put one bf16 O
// of 2.3e-37 (a row whose top key has V = 0) at 8.7 scaled (a fresh-seed H100
// campaign, fixtures/gpu-found.cases).
template <typename T, int N>
__device__ __forceinline__ void acd_softmax_tile(acd_softmax_row (&rows)[2], float (&s)[N / 8][4], float (&alpha)[2])
{
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const float shift = rows[r].rescale(acd_tile_row_max<N>(s, r), alpha[r]);
        float row_sum = 0.f;
#pragma unroll
        for (int n = 0; n < N / 8; ++n) {
            s[n][2 * r] = acd_exp2_fwd<T>(s[n][2 * r] - shift);
            s[n][2 * r + 1] = acd_exp2_fwd<T>(s[n][2 * r + 1] - shift);
            row_sum += s[n][2 * r] + s[n][2 * r + 1];
        }
        rows[r].add(alpha[r], row_sum);
    }
}

// O's rows rescaled to the new running max (alpha from acd_softmax_tile).
template <int D> __device__ __forceinline__ void acd_rescale_rows(float (&o)[D / 8][4], const float (&alpha)[2])
{
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            o[n][e] *= alpha[e / 2];
}

// The forward's end for a thread's rows row and row + 8 of a tensor-core
// kernel: l summed over the quad, the sink joined (with sinks), O = acc / l
// rounded once to T, and the LSE (lane t = 0).  Rows past Nq, the padding of
// the last tile, are not written (with THD: past the sequence's nq).  D is O's
// width, d_v; kSplitDv (d_v != d_qk) takes O's own strides, else Q's (equal then).
template <typename T, int D, bool kVar, bool kSplitDv = false>
__device__ __forceinline__ void acd_fwd_epilogue(const acd_params &p, T *O, float *LSE, int b, int h, int row, int t,
                                                 int nq, const float (&o)[D / 8][4], const acd_softmax_row (&rows)[2])
{
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        acd_softmax_row fin = rows[r];
        fin.l += __shfl_xor_sync(0xffffffffu, fin.l, 1);
        fin.l += __shfl_xor_sync(0xffffffffu, fin.l, 2);
        const float o_factor = kVar && p.sinks ? fin.join_sink(p.sinks[h]) : 1.f;
        const float inv = fin.inv_l() * o_factor;
        const int i = row + 8 * r;
        if (i >= acd_q_stored<kVar>(p, nq))
            continue;
        T *Orow;
        if constexpr (kSplitDv)
            Orow = O + acd_o_offset<kVar>(p, b, h, i);
        else
            Orow = O + acd_q_offset<kVar>(p, b, h, i);
#pragma unroll
        for (int n = 0; n < D / 8; ++n)
            acd_tc<T>::store2(Orow + n * 8 + 2 * t, o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
        if (t == 0)
            LSE[acd_row_index<kVar>(p, b, h, i)] = kVar ? fin.lse_in(p.lse_unit, p.lse_unit_lo) : fin.lse();
    }
}

// ---- the backward ----

struct acd_p_ds {
    float p, ds;
};

// One entry of the backward's softmax: P from its exponent p_of() (0 where
// hidden) and dS = P (dP - D).  P <= 1: the clamp keeps a P whose exponent
// cancelled catastrophically (scores ~1e10, where S*c and LSE*log2e each round
// by more than 1) finite instead of Inf, which turned dS, dQ, dK, dV into NaN
// (found by the fuzzer).
template <typename F>
__device__ __forceinline__ acd_p_ds acd_recompute_p_ds(bool visible, F p_of, float dp, float delta)
{
    const float pr = visible ? fminf(p_of(), 1.f) : 0.f;
    return {pr, pr * (dp - delta)};
}

// A tensor-core backward tile in place: S^T becomes P^T and dP^T becomes dS^T.
// Entry [n][e] of these accumulator tiles is key key + 8 (e / 2),
// query 8n + 2t + e % 2 of the tile, whose LSE and D are in sLse and sDd;
// hidden: acd_bwd_plan::hidden's bits.
template <typename T, int BMQ>
__device__ __forceinline__ void acd_bwd_p_ds_tile(float (&st)[BMQ / 8][4], float (&dpt)[BMQ / 8][4], const float *sLse,
                                                  const float *sDd, uint32_t hidden, float scale_log2, int t)
{
#pragma unroll
    for (int n = 0; n < BMQ / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int il = n * 8 + 2 * t + (e & 1);
            const float lse = sLse[il];
            const bool vis = lse != -INFINITY && !((hidden >> (4 * n + e)) & 1u);
            const acd_p_ds x = acd_recompute_p_ds(
                vis, [&] { return acd_exp2_p<T>(st[n][e] * scale_log2 - lse * ACD_LOG2E); }, dpt[n][e], sDd[il]);
            st[n][e] = x.p;
            dpt[n][e] = x.ds;
        }
}

// acd_bwd_p_ds_tile with the score modifiers (p.mods): S'^T recomputed from
// the raw S^T (entry [n][e]: query i0 + 8n + 2t + e % 2, key key + 8 (e / 2))
// as the forward computed it, and dS = P (dP - D) (1 - tanh^2) for a softcap;
// with a bias, dS' = P (dP - D) (before the softcap's factor) is added into
// dBias's f32 sums (atomics: broadcast entries gather several (b, h)).
template <typename T, int BMQ>
__device__ __forceinline__ void acd_bwd_p_ds_tile_mod(float (&st)[BMQ / 8][4], float (&dpt)[BMQ / 8][4],
                                                      const float *sLse, const float *sDd, uint32_t hidden,
                                                      const acd_params &p, int b, int h, int i0, int key, int t, int nq,
                                                      int nk)
{
    const float slope = acd_alibi_slope(p, b, h) * ACD_LOG2E, cap = p.softcap * ACD_LOG2E;
    const int diag = i0 + 2 * t + nk - nq - key;
    const bool diag_exact = abs(diag) < (1 << 23);
    const float diag_f = (float)diag;
#pragma unroll
    for (int n = 0; n < BMQ / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int il = n * 8 + 2 * t + (e & 1);
            const float lse = sLse[il];
            const bool vis = lse != -INFINITY && !((hidden >> (4 * n + e)) & 1u);
            float dt;
            const int i = i0 + il, j = key + 8 * (e >> 1);
            const float bias = acd_bias_at(p, b, h, i, j);
            const float x = acd_score_mod_abs(p, st[n][e], p.scale_log2, cap, slope,
                                              acd_abs_dist(diag_exact, diag_f, diag, 8 * (e >> 1) - 8 * n - (e & 1)),
                                              bias, ACD_LOG2E, &dt);
            const acd_p_ds r = acd_recompute_p_ds(
                vis, [&] { return acd_exp2_p<T>(x - lse * p.lse_to_log2); }, dpt[n][e], sDd[il]);
            if (p.dbias_acc && vis && r.ds != 0.f)
                acd_dq_add(p.dbias_acc, p.dbias_elems, acd_bias_index(p, b, h, i, j), r.ds);
            st[n][e] = r.p;
            dpt[n][e] = r.ds * dt;
        }
}

// The backward's P^T and dS^T of a tensor-core tile, with the modifiers when
// the problem has any (kVar: as acd_scores_tile's).
template <typename T, int BMQ, bool kVar>
__device__ __forceinline__ void acd_bwd_p_ds(float (&st)[BMQ / 8][4], float (&dpt)[BMQ / 8][4], const float *sLse,
                                             const float *sDd, uint32_t hidden, const acd_params &p, int b, int h,
                                             int i0, int key, int t, int nq, int nk)
{
    if (kVar && p.mods)
        acd_bwd_p_ds_tile_mod<T, BMQ>(st, dpt, sLse, sDd, hidden, p, b, h, i0, key, t, nq, nk);
    else
        acd_bwd_p_ds_tile<T, BMQ>(st, dpt, sLse, sDd, hidden, p.scale_log2, t);
}
