/* ref/ref.h — the CPU reference attncheck measures kernels against.
 *
 * Everything here works on double arrays that hold the kernel's inputs widened
 * exactly (ac_load), so the only error measured is the kernel's.  See
 * docs/DESIGN.md, "The numerical contract".
 *
 * Also the vocabulary every component shares: status codes and messages,
 * dtypes, and the attention problem (shape, layout, mask, scale).
 *
 * Tensors, logical shapes (layout decides the strides, see ac_index):
 *   Q, dQ        : (B, Hq,  Nq, d)       d = head_dim (d_qk)
 *   K, dK        : (B, Hkv, Nk, d)
 *   V, dV        : (B, Hkv, Nk, d_v)     d_v = ac_head_dim_v (head_dim unless the
 *   O, dO        : (B, Hq,  Nq, d_v)      problem sets head_dim_v: MLA's 192/128)
 *   LSE, D       : (B, Hq, Nq), always contiguous in that order; LSE in natural log.
 */
#ifndef ATTNCHECK_REF_H
#define ATTNCHECK_REF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- status codes and messages ------------------------------------------
 * The values are the CLI's exit statuses, so a status can travel up to main
 * unchanged.  Functions return one and fill an ac_err; callers decide what to
 * print. */
enum {
    AC_OK = 0,
    AC_FAIL_ACCURACY = 1, /* a verdict, never returned by ref/ */
    AC_ERR_INPUT = 2, /* bad usage, bad file, impossible or too-big shape */
    AC_ERR_ENV = 3, /* environment: no GPU, device fault, allocation failed */
    /* The kernel under test misbehaved: it crashed, exited, hung, faulted the device
     * or wrote outside its buffers.  A verdict about the kernel (a failure, exit 1),
     * never an exit status itself; err->msg starts with the class and a colon
     * ("crash: SIGSEGV in forward", "timeout: forward ran past 12 s"). */
    AC_KERNEL_FAULT = 4,
};

typedef struct {
    char msg[512];
} ac_err;

/* Formats into err (may be NULL) and returns status: `return ac_fail(err, AC_ERR_INPUT, "...")`. */
int ac_fail(ac_err *err, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- dtypes --------------------------------------------------------------
 * One table (ref/dtype.c) holds every format: name, storage width, precision,
 * exponent range, the poison pattern and the dtype its kernels write.  Storage
 * is the raw bit pattern (uint32_t for f32, uint16_t for f16/bf16), read and
 * written only through ac_bits_get / ac_bits_put (uint8_t for e4m3/e5m2).
 * fp8 inputs come with descale factors (ac_problem's fp8 fields) and their
 * kernels write bf16 or f16 (the case's out=). */
typedef enum { AC_F32 = 0, AC_F16 = 1, AC_BF16 = 2, AC_E4M3 = 3, AC_E5M2 = 4, AC_DTYPE_COUNT } ac_dtype;
/* The 16- and 32-bit dtypes, what kernels claimed before fp8 (the generator's plain draw). */
#define AC_DTYPES_WIDE ((1u << AC_F32) | (1u << AC_F16) | (1u << AC_BF16))
#define AC_DTYPES_FP8 ((1u << AC_E4M3) | (1u << AC_E5M2))
bool ac_dtype_is_fp8(ac_dtype t); /* e4m3, e5m2: inputs only, with descale factors (issue 17) */

const char *ac_dtype_name(ac_dtype t); /* "f32", "f16", "bf16" */
int ac_dtype_parse(const char *name, ac_dtype *out); /* AC_OK or AC_ERR_INPUT */
void ac_dtype_list(char *buf, size_t len); /* "f32, f16, bf16": every name, for messages */
size_t ac_dtype_size(ac_dtype t); /* bytes per element */
int ac_dtype_precision(ac_dtype t); /* significand bits incl. hidden: 24, 11, 8 */
double ac_unit_roundoff(ac_dtype t); /* u = 2^-p: 2^-24, 2^-11, 2^-8 */
double ac_min_subnormal(ac_dtype t); /* eta: 2^-149, 2^-24, 2^-133 */
double ac_max_finite(ac_dtype t); /* 65504 for f16 */

double ac_widen(ac_dtype t, uint32_t bits); /* exact */
uint32_t ac_narrow(ac_dtype t, double x); /* round to nearest even, subnormals, overflow to +-Inf, NaN stays NaN;
                                                fp8: OCP satfinite, overflow and Inf give +-max (ref/dtype.c) */
double ac_round(ac_dtype t, double x); /* ac_widen(t, ac_narrow(t, x)) */
/* The ulp of x's binade in dtype t, floored at the subnormal spacing.
 * Finite x beyond the largest finite value use the last binade's ulp; NaN/Inf give NaN. */
double ac_ulp(ac_dtype t, double x);

/* Storage: element i of buf (dtype t) as its bit pattern, and back.  Every
 * access to dtype storage goes through these two (the width comes from the
 * table), so a format of another width is one table row. */
uint32_t ac_bits_get(ac_dtype t, const void *buf, size_t i);
void ac_bits_put(ac_dtype t, void *buf, size_t i, uint32_t bits);

/* Arrays: widen n elements of buf (dtype t) into out, narrow n doubles into buf. */
void ac_load(ac_dtype t, const void *buf, size_t n, double *out);
void ac_store(ac_dtype t, const double *in, size_t n, void *buf);

/* The dtype a kernel reading inputs in t writes O, dQ, dK, dV in (LSE is
 * always f32).  t itself for f32, f16 and bf16; fp8 kernels read e4m3 and
 * write bf16, which their row will say. */
ac_dtype ac_dtype_output(ac_dtype t);

/* Poison: the pattern output buffers are filled with before a kernel runs, so
 * an element it never writes is seen.  A quiet NaN with a payload no
 * arithmetic produces (hardware and libm give the default NaN or propagate an
 * input's payload, and inputs are never NaN): f32 0x7FC0DEAD, f16 0x7E5A,
 * bf16 0x7FDA.  A format without a spare NaN payload (fp8 e4m3: one NaN code
 * per sign, no Inf) would poison with its negative NaN; an unwritten element
 * and a NaN the kernel wrote then look alike, and both fail. */
uint32_t ac_dtype_poison(ac_dtype t);

/* ---- the attention problem ----------------------------------------------- */
/* THD: the sequences packed back to back, FlashAttention's varlen layout
 * (flash_attn_varlen_func): Q-like (total_q, Hq, .), K-like (total_k, Hkv, .),
 * sequence b's rows cu_seqlens[b] .. cu_seqlens[b + 1] - 1, no padding; LSE is
 * (Hq, total_q). */
typedef enum { AC_LAYOUT_BHSD = 0, AC_LAYOUT_BSHD = 1, AC_LAYOUT_THD = 2 } ac_layout;
#define AC_LAYOUTS_ALL ((1u << AC_LAYOUT_BHSD) | (1u << AC_LAYOUT_BSHD) | (1u << AC_LAYOUT_THD)) /* caps bits */
#define AC_LAYOUT_COUNT 3
const char *ac_layout_name(ac_layout l); /* "bhsd", "bshd", "thd"; "?" out of range */
typedef enum { AC_ALIGN_TOP_LEFT = 0, AC_ALIGN_BOTTOM_RIGHT = 1 } ac_align;

#define AC_WINDOW_INF (-1) /* an unbounded side of a window */

/* Key j is visible from query i of batch b (head h) iff all of these hold:
 *   - i < nq_b and j < nk_b, where nq_b = seqlens_q ? seqlens_q[b] : seqlen_q (same for k),
 *     or with the THD layout cu_seqlens_q[b + 1] - cu_seqlens_q[b];
 *   - when windowed: c - window_left <= j <= c + window_right, with c = i (top-left)
 *     or c = i + nk_b - nq_b (bottom-right); AC_WINDOW_INF drops that side; with
 *     sink_tokens = k (StreamingLLM's attention sinks) the first k keys are exempt
 *     from the left edge: j < k also satisfies it (the right edge still applies).
 *     Causal is window (INF, 0): top-left is PyTorch's is_causal, bottom-right
 *     FlashAttention >= 2.1's;
 *   - when dense_mask is set: dense_mask[((mb * mask_heads + mh) * Nq + i) * Nk + j] != 0,
 *     mb = mask_batch == 1 ? 0 : b, mh = mask_heads == 1 ? 0 : h.
 * Rows i >= nq_b and keys j >= nk_b are padding: not part of the problem, never
 * compared, their contents unspecified (THD stores none: seqlen_q and seqlen_k
 * are then the grid's extent, at least every sequence's length).
 * A row with no visible key gives O = 0 and LSE = -inf (FlashAttention's convention).
 *
 * Variants (ref/variants.h; zero / NULL = off, so a problem that sets none is
 * plain attention).  S = scale Q K^T first; then, for every visible pair, the
 * score S'_ij the softmax sees (ac_score_mod, the one definition):
 *   softcap c > 0:  S' = c tanh(S / c)                         (Gemma 2; FlashAttention softcap)
 *   ALiBi slopes:   S' -= slope_{b,h} |i + nk_b - nq_b - j|      (FlashAttention's alibi_slopes,
 *                   bottom-right aligned; after the softcap, which it does not pass through)
 *   dropout p:      P_ij kept with probability 1 - p and scaled by 1 / (1 - p) after the
 *                   softmax (LSE is the softmax's): O = (P o M / (1 - p)) V, M the keep
 *                   mask the kernel drew (the reference is given it: dropout_keep);
 *                   backward dP o M / (1 - p) in dS = P (dP' - D), dV = (P o M / (1 - p))^T dO
 *   bias:           S' += bias[mb, mh, i, j]  (mb = bias_batch > 1 ? b : 0, mh likewise; last:
 *                   cuDNN's and SDPA's float attn_mask); a -inf entry hides the pair (ac_visible);
 *                   the backward also gives dBias = dS' summed over the broadcast dimensions
 * and P_ij = exp(S'_ij - LSE_i), LSE_i = log sum_j exp S'_ij, O = P V, except:
 *   head_dim_v:     V, O, dO and dV have d_v columns, Q and K head_dim (d_qk);
 *   sinks s (Hq):   a logit per query head that joins every row's denominator
 *                   and has no value: LSE_i = log(sum_j exp S'_ij + exp s_h) (gpt-oss);
 *                   a row with no visible key has O = 0 and LSE = s_h; the
 *                   backward also gives dSink_h = -sum_{b,i} exp(s_h - LSE_i) D_i. */
typedef struct {
    int batch, heads_q, heads_kv; /* heads_q a multiple of heads_kv (GQA/MQA) */
    int seqlen_q, seqlen_k; /* padded lengths, the tensors' extent */
    int head_dim; /* 1 .. AC_MAX_HEAD_DIM */
    ac_layout layout;
    double scale; /* softmax scale; ac_default_scale(d) = 1/sqrt(d) */
    bool windowed;
    int window_left, window_right; /* >= 0 or AC_WINDOW_INF */
    ac_align align;
    const int *seqlens_q, *seqlens_k; /* (B) per-sequence lengths, or NULL (always NULL with THD) */
    const uint8_t *dense_mask; /* (mask_batch, mask_heads, Nq, Nk) or NULL */
    int mask_batch, mask_heads; /* 1 or B, 1 or Hq */
    /* ---- variants (see above; every array host memory) ---- */
    int head_dim_v; /* d_v of V, O, dO, dV: 1 .. AC_MAX_HEAD_DIM, or 0: head_dim */
    bool v_from_k; /* V is K's first d_v channels (MLA decode's one latent cache, d_v <= d; not fp8): a
                      property of the inputs, for kernels that read V from K's buffer; the references
                      read V as given */
    const int *cu_seqlens_q, *cu_seqlens_k; /* layout THD: (B + 1) row offsets, cu[0] = 0, nondecreasing */
    double softcap; /* c > 0, or 0: off */
    const float *sinks; /* (Hq) learnable sink logits, or NULL */
    const float *alibi_slopes; /* (alibi_batch, Hq) ALiBi slopes, or NULL */
    int alibi_batch; /* 1 (or 0): one slope per head for every batch; B: (B, Hq) */
    const void *bias; /* (bias_batch, bias_heads, Nq, Nk) additive bias, bias_dtype bits, or NULL */
    ac_dtype bias_dtype; /* AC_F32, or the inputs' dtype */
    int bias_batch, bias_heads; /* 1 (or 0) or B, 1 (or 0) or Hq: the broadcast shape */
    int sink_tokens; /* k >= 0 with a window of finite left edge: keys j < k stay visible
                                         past it (StreamingLLM); 0: off */
    double dropout_p; /* in [0, 1): the probability a P_ij is dropped; 0: off */
    uint64_t dropout_seed; /* the kernel's seed for its random numbers */
    const uint8_t *dropout_keep; /* (B, Hq, Nq, Nk) 1 = kept, 0 = dropped: the mask the kernel drew, the
                                         reference tiers' input; NULL when a kernel is called */
    /* ---- paged KV cache and split-KV decode (ref/paged.c; 0 / NULL: off) ----
     * Paged: K and V a kernel reads are pages (num_pages, page_size, Hkv, d) (V: d_v),
     * vLLM's and FlashAttention's k_cache; key j of sequence b is row j % page_size
     * of page block_table[b * pages_per_seq + j / page_size] (ac_kv_index says so).
     * Needs seqlens_k (nk_b <= pages_per_seq * page_size) and layout bhsd or bshd
     * (Q, O, LSE as usual, seqlen_k the extent of the contiguous twin the
     * reference reads: ac_problem_unpaged, ac_paged_gather).  Forward only.
     * Slots past nk_b in a sequence's last page, and pages no table entry in use
     * names, are not part of the problem (attncheck fills them with NaN). */
    int page_size; /* P >= 1: paged; 0: contiguous K, V */
    int num_pages; /* pages in the cache, >= 1 when paged */
    int pages_per_seq; /* the block table's row length (max_pages_per_seq) */
    const int *block_table; /* (B, pages_per_seq) int32 page ids in 0..num_pages-1; entries past
                                         ceil(nk_b / P) are not read */
    int num_splits; /* split-KV hint, the math unchanged: S >= 1 key ranges combined;
                                         0: the kernel's own choice (auto) */
    /* ---- fp8 inputs (issue 17, ref/fp8.c): fp8_out 0 (AC_F32) = not fp8 ---- */
    ac_dtype fp8_out; /* O's dtype, AC_BF16 or AC_F16, when Q, K, V are e4m3/e5m2 */
    ac_dtype fp8_p; /* P's format before the P V product, as the kernel declares it:
                                         AC_E4M3/AC_E5M2 (row-max scaled, ac_fp8_p_round) or AC_BF16/AC_F16 */
    int fp8_acc_bits; /* the fp8 products' accumulator, as the kernel declares it: 0 = f32; b > 0: fraction bits
                                         of a running sum truncated after every AC_FP8_ACC_STEP products
                                         (Hopper's fp8 tensor cores: AC_FP8_ACC_HOPPER, e8m13) */
    int descale_rows; /* the descale factors' granularity: AC_DESCALE_TENSOR, _HEAD, or N > 0
                                         rows of a head per factor (ac_descale_index) */
    const float *descale_q, *descale_k, *descale_v; /* f32, ac_descale_count(p, Q/K/V) each: input = code * factor
                                         (the reference tiers read the products and ignore these) */
} ac_problem;

/* The largest head dim a problem states: 1024, past MLA decode's d_qk = 576
 * (a 512-dim latent and 64 rope dims, d_v = 512).  The generators draw up to
 * AC_GEN_HEAD_DIM_TOP unless a kernel lists a larger head dim. */
#define AC_MAX_HEAD_DIM 1024

double ac_default_scale(int head_dim);

/* A problem with the given sizes, no mask, BHSD, default scale. */
ac_problem ac_problem_dense(int batch, int heads_q, int heads_kv, int seqlen_q, int seqlen_k, int head_dim);

/* Checks sizes, GQA divisibility, window bounds, seqlens ranges, mask shape,
 * and that the reference's working set fits mem_budget bytes (0 = the default,
 * ac_mem_budget()).  AC_OK or AC_ERR_INPUT with a message naming the field. */
#define AC_DEFAULT_MEM_BUDGET ((size_t)8 << 30)
int ac_problem_validate(const ac_problem *p, size_t mem_budget, ac_err *err);
/* Host bytes one case of p needs at its peak: its arrays (inputs, the kernel's
 * outputs, the reference bundle) and the largest stage's own allocations
 * (fp64 blocks, error scales, naive copies, MPFR certification), per-worker
 * scratch for `workers` threads (<= 0: ref_thread_count's) as ref/parallel.c
 * bounds it.  problem.c derives every term. */
double ac_problem_working_set(const ac_problem *p, int workers);
/* The budget ac_problem_validate applies when passed 0 (process-wide; 0 restores
 * AC_DEFAULT_MEM_BUDGET). */
void ac_set_mem_budget(size_t bytes);
size_t ac_mem_budget(void);

int ac_seqlen_q_of(const ac_problem *p, int b); /* nq_b */
int ac_seqlen_k_of(const ac_problem *p, int b); /* nk_b */
bool ac_visible(const ac_problem *p, int b, int h, int i, int j);
/* The variants' score S'_ij of a visible pair from its scaled score s = S_ij,
 * and dS'/dS there (softcap: 1 - tanh^2(s / c) = 1 / cosh^2(s / c); else 1).
 * Without score modifiers S' = s (ac_problem_has_score_mods says whether). */
double ac_score_mod(const ac_problem *p, int b, int h, int i, int j, double s);
/* ALiBi's slope_{b,h} |i + nk_b - nq_b - j| (0 without ALiBi): what ac_score_mod subtracts. */
double ac_alibi_bias(const ac_problem *p, int b, int h, int i, int j);
/* The additive bias of (b, h, i, j), widened exactly (0 without a bias; -inf hides the pair);
 * its element count, and the index of entry (mb, mh, i, j) (dBias is shaped like the bias). */
double ac_bias_at(const ac_problem *p, int b, int h, int i, int j);
size_t ac_bias_elems(const ac_problem *p);
size_t ac_bias_index(const ac_problem *p, int mb, int mh, int i, int j);
/* Dropout: the keep mask's entries (B * Hq * Nq * Nk, Nq and Nk the extents) and
 * the index of (b, h, i, j); the factor P_ij is multiplied by: 1 without
 * dropout, else keep / (1 - p) (needs dropout_keep). */
size_t ac_dropout_elems(const ac_problem *p);
size_t ac_dropout_index(const ac_problem *p, int b, int h, int i, int j);
double ac_dropout_factor(const ac_problem *p, int b, int h, int i, int j);
double ac_score_mod_slope(const ac_problem *p, double s);
bool ac_problem_has_score_mods(const ac_problem *p);
/* Visible keys of row i form the range [lo, hi) intersected with the dense mask:
 * fills the bounds of the window/causal/length part (hi <= lo: none).  With
 * sink tokens the range is the hull [0, hi) of the sink keys and the window,
 * and ac_visible_gap gives the keys [g0, g1) between them that are hidden
 * (g1 <= g0: none; always none without sink tokens). */
void ac_visible_range(const ac_problem *p, int b, int i, int *lo, int *hi);
void ac_visible_gap(const ac_problem *p, int b, int i, int *g0, int *g1);
/* Whether visibility is more than ac_visible_range's range: a dense mask, a
 * bias (its -inf entries) or sink tokens' gap; then ac_visible decides per pair. */
bool ac_has_pair_mask(const ac_problem *p);

/* Element counts and the offset of element (b, h, s, c) of a Q-like (heads_q,
 * seqlen_q) or K-like (heads_kv, seqlen_k) tensor in the problem's layout. */
size_t ac_q_elems(const ac_problem *p);
size_t ac_kv_elems(const ac_problem *p);
size_t ac_lse_elems(const ac_problem *p);
size_t ac_index(const ac_problem *p, int heads, int seqlen, int b, int h, int s, int c); /* not THD: ac_tensor_index */
size_t ac_q_index(const ac_problem *p, int b, int h, int i, int c);
size_t ac_kv_index(const ac_problem *p, int b, int h_kv, int j, int c);
size_t ac_lse_index(const ac_problem *p, int b, int h, int i);
int ac_kv_head_of(const ac_problem *p, int h_q); /* h_q / (Hq / Hkv) */

/* The four tensor shapes by kind (Q: Q, dQ; K: K, dK; V: V, dV; O: O, dO):
 * their last dimension, element count and element offsets.  ac_q_* and
 * ac_kv_* above are the Q and K kinds. */
typedef enum { AC_TENSOR_Q = 0, AC_TENSOR_K, AC_TENSOR_V, AC_TENSOR_O } ac_tensor_kind;
int ac_head_dim_v(const ac_problem *p); /* head_dim_v, or head_dim when it is 0 */
/* Rows of batch b a Q-side (q_side) or K-side tensor stores: the padded
 * length, or with THD the sequence's own (no padding rows exist). */
int ac_stored_rows(const ac_problem *p, int b, bool q_side);
int ac_tensor_dim(const ac_problem *p, ac_tensor_kind kind);
size_t ac_tensor_elems(const ac_problem *p, ac_tensor_kind kind);
size_t ac_tensor_index(const ac_problem *p, ac_tensor_kind kind, int b, int h, int s, int c);
/* V's stored rows from K's channels [first, first + d_v), elements of elem_size bytes (a dtype's bits,
 * or f64 widenings): v=k's inputs (first 0), and a kernel that reads V from K (MLA's latent cache). */
void ac_copy_k_channels_to_v(const ac_problem *p, size_t elem_size, const void *k, void *v, int first);
size_t ac_o_elems(const ac_problem *p); /* O, dO */
size_t ac_v_elems(const ac_problem *p); /* V, dV */
size_t ac_o_index(const ac_problem *p, int b, int h, int i, int c);
size_t ac_v_index(const ac_problem *p, int b, int h_kv, int j, int c);

/* ---- paged KV (ref/paged.c) ----
 * Whether p is paged; the same problem with contiguous K, V (BHSD/BSHD extent
 * seqlen_k, no table: what the reference tiers read); K-like (kind AC_TENSOR_K
 * or AC_TENSOR_V) paged storage of p gathered into that twin's layout, keys
 * j >= nk_b NaN (padding); and its inverse, which writes only the slots in use
 * (sequences sharing a page write the same values there). */
bool ac_problem_paged(const ac_problem *p);
ac_problem ac_problem_unpaged(const ac_problem *p);
void ac_paged_gather(const ac_problem *p, ac_tensor_kind kind, const double *paged, double *contig);
void ac_paged_scatter(const ac_problem *p, ac_tensor_kind kind, const double *contig, double *paged);
/* The storage row (page * page_size + slot) of key j of sequence b. */
size_t ac_paged_row(const ac_problem *p, int b, int j);
/* ---- fp8 (ref/fp8.c) -------------------------------------------------------
 * Q, K, V stored in e4m3/e5m2 with f32 descale factors: the inputs are
 * x * descale, exact in double (4 or 3 significand bits times 24), and every
 * reference tier reads those products.  Granularity: one factor per tensor,
 * per (batch, kv head) (FlashAttention-3's q/k/v_descale: Q's heads of a GQA
 * group share theirs), or per block of N rows of a head (Q: of a query head). */
#define AC_DESCALE_TENSOR 0
#define AC_DESCALE_HEAD (-1)
bool ac_problem_is_fp8(const ac_problem *p);
size_t ac_descale_count(const ac_problem *p, ac_tensor_kind kind); /* Q, K or V */
size_t ac_descale_index(const ac_problem *p, ac_tensor_kind kind, int b, int h, int s); /* h: the tensor's head */
/* P's row-max recipe: a kernel that declares P in fp8 format fmt rounds
 * sigma * exp(S_ij - m_i) to fmt (satfinite), m_i its running row max and
 * sigma >= AC_FP8_P_SIGMA_MIN (FlashAttention-3: 2^8, from exp2's max offset 8;
 * 448 maps the max onto e4m3's largest value), and divides by sigma * l_i at
 * the end.  The error scale allows the rounding at that format and its
 * subnormal floor at sigma = AC_FP8_P_SIGMA_MIN; the naive baseline and
 * cpu-flash use AC_FP8_P_SIGMA. */
#define AC_FP8_P_SIGMA_MIN 256.0
#define AC_FP8_P_SIGMA 448.0
float ac_fp8_p_round(ac_dtype fmt, float p_scaled); /* p_scaled = sigma exp(S - m), in fmt, as a float */
/* The fp8 products' accumulation (ac_problem.fp8_acc_bits, QK^T and PV).  Hopper's fp8 tensor cores
 * (wgmma with e4m3/e5m2 operands) do not accumulate in f32: DeepSeek-V3's
 * report measured about 14 bits, and an H100 run of cuda-flash-fp8 put LSE up
 * to 332x over the f32 budget.  The model a kernel using them declares (13
 * bits, e8m13): each instruction aligns its 32 products and the running sum to
 * the largest of them and keeps b fraction bits of it, truncating every term
 * toward zero, then truncates the sum to b bits again (ac_fp8_acc_step, which
 * the naive baseline and cpu-flash-fp8-acc13 run).  Each of those 34
 * truncations errs by less than 2^-b of M_k, the largest magnitude among step
 * k's products, the running sum before and the one after, so S_ij errs by less
 * than |scale| 34 2^-b sum_k M_k (ref/fp8.c, ref_fp8_qk_errors, per pair from
 * the exact inputs): a worst case, which the H100 campaigns measure the
 * hardware against.  P V runs the same steps over 32 keys at a time (keys
 * counted from 0), so O_ic errs by 34 2^-b sum_k M_k more, M_k over step k's
 * P_ij V_jc and running sums (ref_fp8_pv_errors), beside P's own rounding; an
 * H100 campaign found the PV truncation's bias (toward zero) putting O at
 * 2.4x the naive baseline's mean error before the naive ran it too.
 * ac_truncate_bits: x truncated toward 0 to b fraction bits
 * (b + 1 significant). */
#define AC_FP8_ACC_STEP 32
#define AC_FP8_ACC_HOPPER 13
#define AC_FP8_ACC_MAX_BITS 22 /* declared bits 1..22; 0 is f32 (23 would be f32's own mantissa) */
double ac_truncate_bits(double x, int bits);
double ac_fp8_acc_step(double acc, const double *prod, int n, int bits);

/* ---- fp64 reference (OpenBLAS) -------------------------------------------
 * S = scale * Q K^T and O = P V through cblas_dgemm, per (b, h), in blocks of
 * query rows so memory stays O(block * Nk).  Inputs are exact widenings.
 * The fp64 stages, the error scales and the naive baseline run their blocks on
 * ATTNCHECK_THREADS worker threads (default: the CPUs this process may use;
 * a bad value is AC_ERR_INPUT), each with one BLAS thread; their results are
 * the same bit for bit for any thread count. */
int ref_forward_fp64(const ac_problem *p, const double *q, const double *k, const double *v, double *o, double *lse,
                     ac_err *err);

/* Given dO and the forward's O and LSE: dQ, dK, dV (dK, dV summed over the
 * query heads of a GQA group) and D = rowsum(dO * O), shape (B, Hq, Nq). */
int ref_backward_fp64(const ac_problem *p, const double *q, const double *k, const double *v, const double *o,
                      const double *lse, const double *d_o, double *dq, double *dk, double *dv, double *delta,
                      ac_err *err);

/* The gradients of the variants' own parameters, from the forward's LSE and
 * the backward's D: dsink (Hq) = -sum_{b,i} exp(s_h - LSE_i) D_i, summed in a
 * fixed order (NULL when the problem has no sinks: skipped). */
int ref_backward_params_fp64(const ac_problem *p, const double *lse, const double *delta, double *dsink, ac_err *err);
/* dBias (ac_bias_elems, shaped like the bias): dS'_ij = P_ij (dP_ij - D_i)
 * summed over the (b, h) the bias broadcasts over, in a fixed order; entries
 * no summed (b, h) reaches (padding of every sequence) are 0.  delta from
 * ref_backward_fp64.  Nothing when the problem has no bias. */
int ref_backward_dbias_fp64(const ac_problem *p, const double *q, const double *k, const double *v, const double *lse,
                            const double *d_o, const double *delta, double *dbias, ac_err *err);

/* ---- MPFR reference -------------------------------------------------------
 * S exact (products of dtype values are exact in double, sums with mpfr_sum),
 * softmax in MPFR at prec_bits, PV accumulated exactly enough that O is
 * correct to < 2^-60 relative before its final rounding to double.
 * rows: n_rows row ids r = (b * Hq + h) * Nq + i, or NULL for every row.
 * Only the selected rows of o (O-like: d_v columns) and lse are written. */
#define AC_DEFAULT_MPFR_PREC 128
int ref_forward_mpfr(const ac_problem *p, const double *q, const double *k, const double *v, int prec_bits,
                     const size_t *rows, size_t n_rows, double *o, double *lse, ac_err *err);

/* Certification: the fp64 path's distance from the MPFR path on n_rows rows
 * sampled with seed, in ulps of out_dtype.  Certified when max_ulp <= 1/64. */
typedef struct {
    double max_ulp_o; /* max over sampled O elements */
    double max_abs_lse; /* |lse_fp64 - lse_mpfr| max */
    size_t rows_checked;
    bool certified;
} ac_cert;
#define AC_CERT_MAX_ULP (1.0 / 64.0)
int ref_certify(const ac_problem *p, ac_dtype out_dtype, const double *q, const double *k, const double *v,
                const double *o_fp64, const double *lse_fp64, size_t n_rows, uint64_t seed, int prec_bits,
                ac_cert *cert, ac_err *err);

/* ---- error scales: the denominators of the gating metric -----------------
 * Componentwise running-error bounds, exactly as docs/DESIGN.md defines them, for a
 * kernel with inputs in dtype t.  o, lse: the reference forward; delta_hat is
 * computed inside from |dO| and |O|.  e_dq/e_dk/e_dv/d_o may be NULL to skip the
 * backward.  scaled_err = |y - x| / (u * E). */
int ref_error_scales(const ac_problem *p, ac_dtype t, const double *q, const double *k, const double *v,
                     const double *o, const double *lse, const double *d_o, double *e_o, double *e_dq, double *e_dk,
                     double *e_dv, ac_err *err);
/* The same, and with a bias and d_o E_dBias (ac_bias_elems; NULL skips it),
 * in units of u of bias_dtype (dBias is stored like the bias):
 *   E_dBias = tau_b + (u_t / u_b) sum_{(b,h) summed} (P ((1 + r + rho d_v)(dPhat + Dhat) + R
 *                                                        + sum_c |dO_ic| E_O_ic) + tau + rho tau_f32 (dPhat + Dhat)),
 * the dS' weight of E_dQ's formula before the softcap's t', with the f32 dot
 * products of dP and D (derived in scales.c). */
int ref_error_scales_dbias(const ac_problem *p, ac_dtype t, const double *q, const double *k, const double *v,
                           const double *o, const double *lse, const double *d_o, double *e_o, double *e_dq,
                           double *e_dk, double *e_dv, double *e_dbias, ac_err *err);

/* LSE's error scale (ac_lse_elems(p) doubles; the derivation is in scales.c):
 *   E_lse_i = 1 + |LSE_i| + (d + 2) |scale| max_{j visible} sum_c |Q_ic||K_jc|,
 * LSE's scaled error being |y - x| / (u_f32 * E_lse) whatever the dtype.  Rows
 * with no visible key (LSE = -inf) and padding rows get 0. */
int ref_lse_error_scale(const ac_problem *p, const double *q, const double *k, const double *lse, double *e_lse,
                        ac_err *err);

/* The error scales of the variants' parameter gradients, in f32 units (they are
 * stored in f32, like LSE; their error is mostly the dtype's, so E carries
 * u_t / u_f32), from the reference's LSE and D and the scales of O and LSE:
 *   e_dsink (Hq) = tau_f32 + sum_{b,i} Ps_i ((1/rho) sum_c |dO_ic| E_O_ic + |D_i| (E_lse_i + |s_h| + 1))
 *                  + tau_f32 |D_i|,   Ps_i = exp(s_h - LSE_i)
 * (derived in ref/params.c).  NULL outputs are skipped. */
int ref_param_error_scales(const ac_problem *p, ac_dtype t, const double *lse, const double *d_o, const double *delta,
                           const double *e_o, const double *e_lse, double *e_dsink, ac_err *err);

/* ---- naive same-dtype baseline -------------------------------------------
 * What a framework does in dtype t: S = scale * QK^T accumulated in f32 and
 * rounded to t, softmax in f32, P rounded to t, O = PV accumulated in f32 and
 * rounded to t; LSE in f32.  Backward likewise (dP, dS rounded to t, products
 * accumulated in f32, results rounded to t).  Outputs are doubles holding
 * dtype-t values; it is the denominator of the vs-naive ratio. */
int ref_naive_forward(const ac_problem *p, ac_dtype t, const double *q, const double *k, const double *v, double *o,
                      double *lse, ac_err *err);
/* fp8 problems (ref_naive_forward hands them here; no backward): S in f32 from
 * the exact inputs, softmax in f32, P rounded to the declared format with the
 * row-max scale AC_FP8_P_SIGMA (ref/naive_fp8.c), P V in f32, O rounded to fp8_out. */
int ref_naive_forward_fp8(const ac_problem *p, const double *q, const double *k, const double *v, double *o,
                          double *lse, ac_err *err);
int ref_naive_backward(const ac_problem *p, ac_dtype t, const double *q, const double *k, const double *v,
                       const double *o, const double *lse, const double *d_o, double *dq, double *dk, double *dv,
                       ac_err *err);

#endif
