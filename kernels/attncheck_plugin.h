/* attncheck_plugin.h — the plugin ABI: an attention kernel in a shared library.
 *
 * A third party includes only this header (it stands alone: no attncheck
 * header, no attncheck library to link), builds a shared library exporting
 *
 *     const attncheck_plugin *attncheck_plugin_describe(void);
 *
 * and runs it with `attncheck fuzz --plugin ./libmine.so --kernel mine` (or run,
 * check, list).  attncheck dlopens the library, calls attncheck_plugin_describe
 * once, checks abi_version == ATTNCHECK_PLUGIN_ABI_VERSION, a non-NULL name and
 * forward, and sane capabilities; a library that fails any check is refused
 * with a message and never called.  The descriptor and everything it points
 * to must stay valid until the process exits (a static const object is best).
 *
 * Conventions (the same as attncheck's built-in kernels):
 *   - tensors hold raw dtype bit patterns (f32: uint32, f16/bf16: uint16 words),
 *     contiguous in the problem's layout:
 *       BHSD: Q, O, dO, dQ (B, Hq, Nq, d); K, V, dK, dV (B, Hkv, Nk, d)
 *       BSHD: Q, O, dO, dQ (B, Nq, Hq, d); K, V, dK, dV (B, Nk, Hkv, d)
 *     LSE is float, natural log, (B, Hq, Nq) contiguous, whatever the layout;
 *     (ABI 2, ATTNCHECK_VARIANT_DV: V, O, dO, dV have head_dim_v columns;
 *     ABI 2, ATTNCHECK_LAYOUT_THD: the sequences packed, FlashAttention's varlen
 *     layout: Q, O, dO, dQ (total_q, Hq, d), K, V, dK, dV (total_k, Hkv, d),
 *     sequence b's rows cu_seqlens[b] .. cu_seqlens[b + 1] - 1, LSE (Hq, total_q),
 *     total = cu_seqlens[B]; nq_b = cu_seqlens_q[b + 1] - cu_seqlens_q[b]);
 *   - key j is visible from query i of batch b, head h iff i < nq_b, j < nk_b
 *     (nq_b = seqlens_q ? seqlens_q[b] : seqlen_q; same for k), and, when
 *     windowed, c - window_left <= j <= c + window_right with c = i (top-left)
 *     or c = i + nk_b - nq_b (bottom-right), ATTNCHECK_WINDOW_INF dropping a
 *     side (causal is window (INF, 0)), and, with a dense mask,
 *     dense_mask[((mb * mask_heads + mh) * seqlen_q + i) * seqlen_k + j] != 0
 *     (mb = mask_batch == 1 ? 0 : b, mh = mask_heads == 1 ? 0 : h);
 *   - a row with no visible key: O = 0 and LSE = -inf; padding rows (i >= nq_b)
 *     and keys (j >= nk_b) are never compared;
 *   - GQA: query head h reads K/V head h / (Hq / Hkv); dK, dV sum over the group;
 *   - memory == ATTNCHECK_MEM_CUDA: q, k, v, o, lse, ... are device pointers
 *     (cudaMalloc'd by attncheck); seqlens and dense_mask are always host memory.
 *     The call may be asynchronous on the default stream: attncheck synchronises
 *     after it; a device fault the kernel caused (illegal address, trap, ...) is
 *     a kernel failure (kernel:device-fault) naming the plugin;
 *   - the kernel runs in a worker process (attncheck's README, "Kernels in a worker
 *     process"): a crash, an exit, a hang, a write outside its buffers (or past
 *     errbuf_len) or a change to an input is a failure naming the plugin;
 *   - padding (rows i >= nq_b of q and d_o, keys j >= nk_b of k and v) holds NaN;
 *   - the backward receives the plugin's own O and LSE, as a training step would;
 *   - return 0 on success; nonzero means the kernel could not run (not "wrong
 *     answer"): write a message into errbuf (errbuf_len bytes, NUL-terminated).
 * Entry points may be called from one thread at a time, any number of times. */
#ifndef ATTNCHECK_PLUGIN_H
#define ATTNCHECK_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any incompatible change to the structs or signatures below.
 * Version 2 (the current one) adds the attention variants: a plugin built for
 * it sets abi_version = ATTNCHECK_PLUGIN_ABI_VERSION, struct_size =
 * sizeof(attncheck_plugin), and the forward2/backward2 entry points, which
 * take an attncheck_problem2 and an argument struct (both extensible: a
 * struct_size first, fields only ever appended).  A version 1 plugin (built
 * against the old header, or setting abi_version = ATTNCHECK_PLUGIN_ABI_V1
 * with forward/backward) still loads and is run only on the problems version
 * 1 can state: no variant, no THD layout. */
#define ATTNCHECK_PLUGIN_ABI_VERSION 2
#define ATTNCHECK_PLUGIN_ABI_V1 1

/* dtypes: bit (1u << ATTNCHECK_DTYPE_*) in caps.dtypes */
#define ATTNCHECK_DTYPE_F32 0
#define ATTNCHECK_DTYPE_F16 1
#define ATTNCHECK_DTYPE_BF16 2
/* ABI 2 only: fp8 inputs (OCP e4m3 FN, e5m2; one byte each) with f32 descale factors
 * (problem2.descale_*); O is written in problem2.out_dtype (BF16 or F16), LSE in f32;
 * forward only.  A plugin claiming them sets fp8_p in its descriptor. */
#define ATTNCHECK_DTYPE_E4M3 3
#define ATTNCHECK_DTYPE_E5M2 4
#define ATTNCHECK_DESCALE_TENSOR 0
#define ATTNCHECK_DESCALE_HEAD (-1) /* one factor per (b, kv head); Q's heads of a group share it */

/* layouts: bit (1u << ATTNCHECK_LAYOUT_*) in caps.layouts */
#define ATTNCHECK_LAYOUT_BHSD 0
#define ATTNCHECK_LAYOUT_BSHD 1
#define ATTNCHECK_LAYOUT_THD 2 /* ABI 2 only: problem2.cu_seqlens_q/_k */

#define ATTNCHECK_ALIGN_TOP_LEFT 0
#define ATTNCHECK_ALIGN_BOTTOM_RIGHT 1
#define ATTNCHECK_WINDOW_INF (-1)

/* mask kinds: bits in caps.masks */
#define ATTNCHECK_MASK_NONE (1u << 0)
#define ATTNCHECK_MASK_CAUSAL_TL (1u << 1)
#define ATTNCHECK_MASK_CAUSAL_BR (1u << 2)
#define ATTNCHECK_MASK_WINDOW (1u << 3) /* sliding window, in the alignments claimed for causal */
#define ATTNCHECK_MASK_DENSE (1u << 4)

/* ABI 2: the variants (attncheck's ref/variants.h), bits in variants */
#define ATTNCHECK_VARIANT_SOFTCAP (1u << 0) /* problem2.softcap */
#define ATTNCHECK_VARIANT_SINKS (1u << 1) /* problem2.sinks; the backward writes bwd_args.dsink */
#define ATTNCHECK_VARIANT_DV (1u << 2) /* problem2.head_dim_v: V, O, dO, dV have d_v columns */
#define ATTNCHECK_VARIANT_ALIBI (1u << 3) /* problem2.alibi_slopes, alibi_batch */
#define ATTNCHECK_VARIANT_BIAS (1u << 4) /* problem2.bias, ...; the backward writes bwd_args.dbias */
#define ATTNCHECK_VARIANT_SINK_TOKENS (1u << 5) /* problem2.sink_tokens */
#define ATTNCHECK_VARIANT_DROPOUT \
    (1u << 6) /* problem2.dropout_p, dropout_seed; the forward writes fwd_args.dropout_mask */
#define ATTNCHECK_VARIANT_PAGED (1u << 7) /* problem2.page_size, num_pages, pages_per_seq, block_table: K, V in pages */
#define ATTNCHECK_VARIANT_SPLIT (1u << 8) /* problem2.num_splits >= 2: split-KV with a combine step */
#define ATTNCHECK_MAX_DV_PAIRS 8

#define ATTNCHECK_MEM_HOST 0
#define ATTNCHECK_MEM_CUDA 1

#define ATTNCHECK_MAX_LISTED_HEAD_DIMS 16

typedef struct {
    uint32_t dtypes; /* bit per ATTNCHECK_DTYPE_* */
    /* the listed head dims, or when n_head_dims == 0 any d in 1..max_head_dim */
    int32_t head_dims[ATTNCHECK_MAX_LISTED_HEAD_DIMS];
    int32_t n_head_dims;
    int32_t max_head_dim;
    uint32_t masks; /* ATTNCHECK_MASK_* */
    uint32_t layouts; /* bit per ATTNCHECK_LAYOUT_* */
    int32_t gqa; /* 1: heads_q may differ from heads_kv */
    int32_t varlen; /* 1: seqlens_q / seqlens_k may be set */
    int32_t backward; /* 1: backward is set */
    int32_t max_seqlen; /* 0 = no limit of its own */
} attncheck_caps;

/* The attention problem, field by field as attncheck states it. */
typedef struct {
    int32_t batch, heads_q, heads_kv; /* heads_q a multiple of heads_kv */
    int32_t seqlen_q, seqlen_k; /* padded lengths, the tensors' extent */
    int32_t head_dim;
    int32_t layout; /* ATTNCHECK_LAYOUT_* */
    double scale; /* softmax scale (default 1/sqrt(d), as f32) */
    int32_t windowed; /* 0 or 1 */
    int32_t window_left, window_right; /* >= 0 or ATTNCHECK_WINDOW_INF */
    int32_t align; /* ATTNCHECK_ALIGN_* */
    const int32_t *seqlens_q, *seqlens_k; /* (B) or NULL; host memory */
    const uint8_t *dense_mask; /* (mask_batch, mask_heads, Nq, Nk) or NULL; host memory */
    int32_t mask_batch, mask_heads; /* 1 or B, 1 or Hq */
} attncheck_problem;

/* ABI 2: the problem with its variants.  attncheck sets struct_size to the
 * size it was built with; a field at or past struct_size is absent and means
 * "off".  attncheck passes only problems whose variants the plugin claims.
 * Arrays are host memory whatever `memory` says. */
typedef struct {
    uint32_t struct_size; /* sizeof(attncheck_problem2) as attncheck knows it */
    int32_t batch, heads_q, heads_kv;
    int32_t seqlen_q, seqlen_k;
    int32_t head_dim;
    int32_t layout;
    double scale;
    int32_t windowed;
    int32_t window_left, window_right;
    int32_t align;
    const int32_t *seqlens_q, *seqlens_k;
    const uint8_t *dense_mask;
    int32_t mask_batch, mask_heads;
    /* ---- the variants (0 / NULL: off) ---- */
    int32_t head_dim_v; /* ATTNCHECK_VARIANT_DV: the head dim d_v of V, O, dO, dV (head_dim is Q's
                                         and K's); 0: head_dim */
    double softcap; /* ATTNCHECK_VARIANT_SOFTCAP: S' = c tanh(S / c), S = scale Q K^T, c > 0 (an f32 value) */
    const float *sinks; /* ATTNCHECK_VARIANT_SINKS: (Hq) logits joining every row's denominator
                                         with no value: LSE = log(sum_j exp S'_ij + exp s_h); a row with no
                                         visible key has O = 0, LSE = s_h */
    const int32_t *cu_seqlens_q, *cu_seqlens_k; /* ATTNCHECK_LAYOUT_THD: (B + 1) row offsets, cu[0] = 0,
                                         nondecreasing (seqlens_q/_k are then NULL); else NULL */
    const float *alibi_slopes; /* ATTNCHECK_VARIANT_ALIBI: (alibi_batch, Hq) f32 slopes; after the softcap,
                                         S' -= slope_{b,h} |i + nk_b - nq_b - j| (bottom-right, FlashAttention's) */
    int32_t alibi_batch; /* 1: one slope per head for every batch; B: per batch and head */
    const void *bias; /* ATTNCHECK_VARIANT_BIAS: (bias_batch, bias_heads, seqlen_q, seqlen_k) added
                                         last to S' (after softcap and ALiBi); -inf hides the pair */
    int32_t bias_dtype; /* ATTNCHECK_DTYPE_*: F32, or the inputs' dtype */
    int32_t bias_batch, bias_heads; /* 1 or B, 1 or Hq: the bias broadcasts over the others */
    int32_t sink_tokens; /* ATTNCHECK_VARIANT_SINK_TOKENS: k > 0 with a window of finite left edge:
                                         keys j < k visible past that edge (the right edge still applies) */
    double dropout_p; /* ATTNCHECK_VARIANT_DROPOUT: P_ij dropped with probability p after the
                                         softmax, kept ones times 1 / (1 - p) (LSE the softmax's) */
    uint64_t dropout_seed; /* the seed of the plugin's own random numbers: the same seed must draw the
                                         same mask (the backward too), another seed another one */
    /* ATTNCHECK_VARIANT_PAGED (forward only; check ATTNCHECK_HAS_FIELD): fwd_args.k and .v are pages
       (num_pages, page_size, Hkv, d) (V: d_v); key j of sequence b is row j % page_size of page
       block_table[b * pages_per_seq + j / page_size]; seqlens_k gives nk_b; layout bhsd or bshd for Q, O.
       Slots past nk_b and pages no sequence uses hold NaN. page_size 0: contiguous K, V */
    int32_t page_size, num_pages, pages_per_seq;
    const int32_t *block_table; /* (B, pages_per_seq) page ids (host memory, like seqlens) */
    int32_t num_splits; /* ATTNCHECK_VARIANT_SPLIT: S >= 2 key ranges, combined; 0: the kernel's choice,
                                         1: no split (a hint: the result is the same attention) */
    /* ---- fp8 (fwd_args.dtype ATTNCHECK_DTYPE_E4M3/E5M2; otherwise 0 / NULL) ---- */
    int32_t out_dtype; /* O's dtype: ATTNCHECK_DTYPE_BF16 or F16 (0 when not fp8: O in dtype) */
    int32_t p_dtype; /* P's format before P V, the one the plugin declares (fp8_p) */
    int32_t descale_rows; /* ATTNCHECK_DESCALE_TENSOR, _HEAD, or N > 0: one factor per N rows of a
                                         head (Q: of a query head), index ((b H + h) ceil(S / N) + s / N) */
    const float *descale_q, *descale_k, *descale_v; /* f32 factors, host memory: input = code * factor */
    int32_t
        acc_bits; /* the fp8 products' accumulator the plugin declares (fp8_acc_bits): 0 = f32 (check ATTNCHECK_HAS_FIELD) */
    int32_t v_from_k; /* 1: V's rows are K's first d_v channels (the case's v=k: MLA decode's one latent
                                         cache, so a kernel may read V from fwd_args.k); check ATTNCHECK_HAS_FIELD */
} attncheck_problem2;

/* ABI 2: whether a struct (problem2, fwd_args, bwd_args) as attncheck passed it
 * holds a field: struct_size reaches past it.  A field it does not hold is off. */
#define ATTNCHECK_HAS_FIELD(ptr, type, field) \
    ((ptr)->struct_size >= offsetof(type, field) + sizeof(((const type *)0)->field))

/* ABI 2: a call's tensors (device pointers when memory is ATTNCHECK_MEM_CUDA). */
typedef struct {
    uint32_t struct_size; /* sizeof(attncheck_fwd_args) as attncheck knows it */
    int32_t dtype; /* ATTNCHECK_DTYPE_* of Q, K, V (and of O) */
    const void *q, *k, *v;
    void *o;
    float *lse;
    uint8_t *dropout_mask; /* with dropout: the keep mask drawn, bit ((b Hq + h) Nq + i) Nk + j (Nq, Nk the
                              extents), least significant bit first in each byte; memory as the tensors'; else NULL */
} attncheck_fwd_args;

typedef struct {
    uint32_t struct_size; /* sizeof(attncheck_bwd_args) as attncheck knows it */
    int32_t dtype;
    const void *q, *k, *v, *o, *d_o;
    const float *lse; /* the plugin's own forward's */
    void *dq, *dk, *dv;
    float *dsink; /* (Hq) f32 when the problem has sinks: -sum_{b,i} exp(s_h - LSE_i) D_i; else NULL */
    void *dbias; /* shaped like the bias, in its dtype, with a bias: dS' = P (dP - D) summed over the
                             broadcast (b, h), every entry written (0 where no pair is visible); else NULL */
} attncheck_bwd_args;

typedef int (*attncheck_forward2_fn)(void *user, const attncheck_problem2 *p, const attncheck_fwd_args *a, char *errbuf,
                                     size_t errbuf_len);
typedef int (*attncheck_backward2_fn)(void *user, const attncheck_problem2 *p, const attncheck_bwd_args *a,
                                      char *errbuf, size_t errbuf_len);

/* O (and LSE) from Q, K, V. */
typedef int (*attncheck_forward_fn)(void *user, const attncheck_problem *p, int32_t dtype, const void *q, const void *k,
                                    const void *v, void *o, float *lse, char *errbuf, size_t errbuf_len);
/* dQ, dK, dV from Q, K, V, the forward's O and LSE, and dO. */
typedef int (*attncheck_backward_fn)(void *user, const attncheck_problem *p, int32_t dtype, const void *q,
                                     const void *k, const void *v, const void *o, const float *lse, const void *d_o,
                                     void *dq, void *dk, void *dv, char *errbuf, size_t errbuf_len);

typedef struct {
    uint32_t abi_version; /* ATTNCHECK_PLUGIN_ABI_VERSION (2), or ATTNCHECK_PLUGIN_ABI_V1 */
    const char *name; /* the kernel's name in `attncheck list`: [A-Za-z0-9._-], unique */
    const char *description; /* one line; may be NULL */
    attncheck_caps caps;
    int32_t memory; /* ATTNCHECK_MEM_HOST or ATTNCHECK_MEM_CUDA */
    attncheck_forward_fn forward; /* ABI 1: required; ABI 2: NULL (forward2 instead) */
    attncheck_backward_fn backward; /* ABI 1: NULL when caps.backward == 0; ABI 2: NULL */
    void *user; /* passed back to every call */
    /* ---- ABI 2: read only when abi_version >= 2, and only the struct_size
     * bytes the plugin says it has (later fields are appended after these) ---- */
    uint32_t struct_size; /* sizeof(attncheck_plugin) of the header it was built with */
    uint32_t variants; /* ATTNCHECK_VARIANT_* the kernel implements (with the backward: their gradients) */
    attncheck_forward2_fn forward2; /* required */
    attncheck_backward2_fn backward2; /* NULL when caps.backward == 0 */
    /* ATTNCHECK_VARIANT_DV: the (d_qk, d_v) pairs it takes; 0 pairs: any d_v the head-dim caps allow */
    int32_t n_dv_pairs;
    int32_t dv_pairs[ATTNCHECK_MAX_DV_PAIRS][2];
    /* fp8 dtypes claimed: the format the forward rounds P to before P V (ATTNCHECK_DTYPE_E4M3, row-max
       scaled so the running max maps to >= 256; or BF16/F16); 0 (absent): e4m3 */
    int32_t fp8_p;
    /* fp8: the fp8 products' accumulator: 0 (absent) = f32; B = fraction bits of a running sum truncated every 32
       products, as Hopper's fp8 tensor cores do (e8m13: 13).  The error scale allows for it (ref.h). */
    int32_t fp8_acc_bits;
    /* 1: the kernel reads V as K's first d_v channels (MLA decode's latent cache, as FlashMLA does): it is
       given only problems with problem2.v_from_k = 1, and every generated case is so (not with fp8 dtypes).
       0 (absent): V is read from fwd_args.v */
    int32_t v_from_k;
} attncheck_plugin;

#define ATTNCHECK_PLUGIN_DESCRIBE_SYMBOL "attncheck_plugin_describe"
typedef const attncheck_plugin *(*attncheck_plugin_describe_fn)(void);

#if defined(__GNUC__)
#define ATTNCHECK_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define ATTNCHECK_PLUGIN_EXPORT
#endif

/* What a plugin defines (declared here so its definition is checked against it). */
ATTNCHECK_PLUGIN_EXPORT const attncheck_plugin *attncheck_plugin_describe(void);

#ifdef __cplusplus
}
#endif

#endif
