/* harness/case/case.h — the case line: one line reproduces one case exactly.
 *
 *   v1 seed=9 b=2 hq=8 hkv=2 nq=300 nk=700 d=96 dtype=bf16 mask=causal-br layout=bhsd dist=normal(0,1) scale=auto
 *
 * Fields after "v1" are key=value separated by single spaces, printed in a
 * fixed order; optional fields are printed only when not at their default.
 * Parse -> format round-trips byte for byte for every line format produces.
 * Grammar (one row per field in case.c's table): v1 seed b hq hkv nq nk d dtype mask [maskrows] [seqlens-q]
 * [seqlens-k] layout dist scale [dv] [softcap] [sinks] [alibi] [bias] [maskdims] [sinktokens] [dropout] [kv] [splits], with
 *   mask = none | causal-tl | causal-br | window-tl(L,R) | window-br(L,R) | dense(KEEP)
 *          (the kinds of ref/mask_kinds.h; L, R integers >= 0 or inf; KEEP in (0,1]);
 *   maskrows = FRAC in [0,1] (dense only)
 *   seqlens-q/-k = one length per sequence, each in 0..nq (0..nk)
 *   layout = bhsd | bshd | thd  (thd: the sequences packed, seqlens their lengths,
 *            every one nq (nk) where none are given; cu_seqlens their prefix sums)
 *   dist = normal(M,S) | uniform(LO,HI) | outliers(S,P) | increasing(SLOPE) | equal()
 *          | dominant(MARGIN) | huge(FRAC) | tiny();   scale = auto | VALUE
 *   dv = N in 1..1024, the head dim of V, O, dO, dV (d_qk = d is Q's and K's; MLA: d=192 dv=128, decode d=576 dv=512)
 *   v = k: V is K's first d_v channels (MLA decode's latent cache, read once as K and as V)
 *   softcap = C > 0 (stored as its f32 value, like scale)
 *   sinks = normal(M,S) | over(MARGIN)  (learnable sink logits, see ac_sinks_kind)
 *   alibi = paper | uniform(LO,HI), then optionally :bh  (ALiBi slopes, see ac_alibi_kind)
 *   bias = normal(M,S):11|1h|b1|bh[:f32][:inf(F)]  (an additive bias, see ac_bias_kind)
 *   sinktokens = K >= 1  (with window-tl/br(L,R), L finite: the first K keys stay visible
 *            past the window's left edge, StreamingLLM's attention sinks)
 *   dropout = P in (0,1)  (dropout on P after the softmax; the kernel's seed from the case seed)
 *   kv = paged(P) | paged(P,contig)  (a paged KV cache of P keys a page, layout bhsd/bshd, no dropout:
 *            the block table drawn from the case seed, shuffled, with shared prefix pages and spare
 *            pages; contig: pages in order, none shared or spare; lengths seqlens-k, else nk each)
 *   splits = S | auto  (split-KV hint: S >= 1 key ranges; auto, the default, is not printed)
 *   maskdims = 1h | b1 | bh  (mask=dense only: the mask's own (B, Hq) dimensions, each
 *            (b, h) slice drawn like the (1, 1) mask; absent: (1, 1, Nq, Nk))
 * The parser also takes fields in any order and extra blanks, and defaults a
 * missing mask, layout, dist or scale (none, bhsd, normal(0,1), auto); the
 * other fields are required.  c->scale always holds the f32 value the kernel
 * uses ((float)(1/sqrt(d)) for auto, when parsed); ac_inputs_make recomputes it.
 * Next stage: the generator draws these (generate.h), ac_inputs_make makes one
 * concrete (run/inputs.h). */
#ifndef ATTNCHECK_CASE_H
#define ATTNCHECK_CASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ref/mask_kinds.h"
#include "ref/ref.h"

#define AC_CASE_MAX_BATCH 64
/* Room for any canonical line: the longest valid case (b=64 with both
 * seqlens lists of 10-digit lengths, every number at its longest) formats to
 * about 1700 characters (test_case.c builds it); input lines are held to it too. */
#define AC_CASE_LINE_MAX 2048

typedef enum {
    AC_DIST_NORMAL = 0, /* normal(mean, std) */
    AC_DIST_UNIFORM, /* uniform(lo, hi) */
    AC_DIST_OUTLIERS, /* normal(0, a) with a fraction b of elements times 1000 (heavy tail) */
    AC_DIST_INCREASING, /* scores grow along the keys: a rescale at every tile; a = slope */
    AC_DIST_EQUAL, /* all scores equal (K rows identical), V random */
    AC_DIST_DOMINANT, /* one key per row dominates by a margin a */
    AC_DIST_HUGE, /* magnitudes near the dtype's overflow (fraction a of its max) */
    AC_DIST_TINY, /* magnitudes near the dtype's underflow */
    AC_DIST_FA3, /* FlashAttention-3's fp8 accuracy setup: N(0,1) plus N(0,S^2) with probability P */
    AC_DIST_COUNT
} ac_dist_kind;
/* What each distribution draws exactly (run/inputs.c); dO is normal(0,1) throughout:
 *   normal, uniform: every element of Q, K, V.
 *   outliers(S,P): Q, K normal(0,S), each element times AC_OUTLIER_FACTOR with
 *     probability P (heavy-tailed scores); V normal(0,S) (a heavy tail in V as well
 *     would push dQ = scale dS K past f16's range).
 *   increasing(SLOPE): Q_i = a_i w, K_j = t_j w (w in {-1,1}^d per (b, kv head), a_i
 *     in [0.5,1] / (scale d), t_j = SLOPE (j+1) / nk), so S_ij = scale d a_i t_j grows
 *     with j from ~0 to ~SLOPE in every row; V normal(0,1).
 *   equal(): K rows identical within each (b, kv head); Q, V normal(0,1).
 *   fa3(P,S): every element of Q, K and V normal(0,1), plus normal(0,S) with probability P:
 *     FlashAttention-3's fp8 setup (N(0,1) with 0.1% large outliers, fa3(0.001,10)).
 *   dominant(MARGIN): one key j* per (b, kv head) whose score beats every other
 *     key's, in every row, by >= MARGIN (Q_i0 = sign(scale), K_j* = (beta, 0, ..)).
 *   huge(FRAC) and tiny() have two modes, picked by the case seed (ac_dist_mode):
 *     mode 0 "scores": Q, K huge (f16: up to FRAC * 65504; bf16/f32: FRAC * 2^56, so
 *       S fits the f32 a fused kernel accumulates it in), V normal(0,1) — softmax
 *       one-hot, exp overflows without the max subtraction;
 *     mode 1 "values": V huge (f16: up to FRAC * 65504; bf16/f32: FRAC * max * 2^-17, so
 *       an f32 accumulator over 2^16 keys holds it), each column V_.c = +-T (1 - 2^-9 r):
 *       O near the top, an un-normalised accumulation in the dtype overflows, while
 *       dP - D = dO.(V_j - O) stays small enough for dS in the dtype.
 *     tiny: magnitudes in [2, 128] x the dtype's smallest normal (Q, K in mode 0;
 *       V in mode 1), random signs; normal(0,1) for the rest. */
#define AC_OUTLIER_FACTOR 1000.0
const char *ac_dist_name(ac_dist_kind k); /* "normal", ... */
int ac_dist_param_count(ac_dist_kind k); /* numbers inside the parentheses: 0, 1 or 2 */

/* The learnable sinks of a case (one f32 logit per query head, drawn by run/inputs_variants.c):
 *   normal(M,S): s_h = f32(M + S g), g standard normal from the case seed;
 *   over(MARGIN): s_h = the largest visible score S'_ij of head h (every batch
 *     and row) + MARGIN, rounded up to f32: a sink larger than every score. */
typedef enum { AC_SINKS_NONE = 0, AC_SINKS_NORMAL, AC_SINKS_OVER } ac_sinks_kind;

/* The ALiBi slopes of a case (f32, drawn by run/inputs_variants.c):
 *   paper: the ALiBi paper's geometric sequence for Hq heads (2^(-8 (h+1) / Hq)
 *     for a power of two, interleaved as the paper's code does otherwise);
 *     with :bh, batch b's are those divided by 2^b;
 *   uniform(LO,HI): each slope uniform in [LO, HI] from the case seed.
 * :bh gives slopes (B, Hq), one row per batch; without it (Hq). */
typedef enum { AC_ALIBI_NONE = 0, AC_ALIBI_PAPER, AC_ALIBI_UNIFORM } ac_alibi_kind;

/* The additive bias of a case (drawn by run/inputs_variants.c from the case seed):
 *   normal(M,S): each entry f(M + S g), g standard normal, then -inf with
 *     probability F (inf(F)), stored in the inputs' dtype, or f32 (:f32);
 *   its broadcast shape: 11 (1, 1, Nq, Nk), 1h (1, Hq, ...), b1 (B, 1, ...), bh (B, Hq, ...). */
typedef enum { AC_BIAS_NONE = 0, AC_BIAS_NORMAL } ac_bias_kind;

typedef struct {
    int version; /* 1 */
    uint64_t seed;
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
    ac_dtype dtype; /* of the inputs; the outputs': ac_case_out_dtype */
    ac_layout layout;
    ac_mask_kind mask; /* a row of ref/mask_kinds.h; its alignment is the row's */
    int window_left, window_right; /* window kinds; causal holds (inf, 0); AC_WINDOW_INF allowed on one side */
    double dense_keep; /* AC_MASK_DENSE: keep probability of each (query, key) pair */
    double masked_rows; /* fraction of query rows fully masked (needs a dense mask) */
    int n_seqlens_q, n_seqlens_k; /* 0, or batch: per-sequence lengths */
    int seqlens_q[AC_CASE_MAX_BATCH], seqlens_k[AC_CASE_MAX_BATCH];
    bool scale_auto; /* scale = 1/sqrt(d) */
    double scale;
    ac_dist_kind dist;
    double dist_a, dist_b;
    /* ---- variants (ref/variants.h), optional fields after scale; 0 = off ---- */
    int head_dim_v; /* dv=N: V, O, dO, dV have N columns (1..1024); 0: d */
    bool v_from_k; /* v=k: V is K's first d_v channels, as MLA decode's one latent cache (d_v <= d; not fp8) */
    double softcap; /* softcap=C: the f32 value of c > 0 */
    ac_sinks_kind sinks; /* sinks=normal(M,S) | over(MARGIN): how the sink logits are drawn */
    double sinks_a, sinks_b; /* M, S; or MARGIN */
    ac_alibi_kind alibi; /* alibi=paper | uniform(LO,HI), :bh suffix for (B, Hq) slopes */
    double alibi_a, alibi_b; /* LO, HI */
    bool alibi_bh;
    ac_bias_kind bias; /* bias=normal(M,S):SHAPE[:f32][:inf(F)] */
    double bias_a, bias_b, bias_inf; /* M, S, F */
    bool bias_per_batch, bias_per_head, bias_f32;
    bool mask_per_batch, mask_per_head; /* maskdims=1h|b1|bh: a dense mask (1|B, 1|Hq, Nq, Nk) */
    int sink_tokens; /* sinktokens=K: with window-*(L,R), L finite, the first K keys stay visible */
    double dropout; /* dropout=P: P in (0, 1), the kernel's seed drawn from the case seed */
    /* ---- paged KV cache and split-KV (case_paged.c), optional; 0 = off ---- */
    int kv_page_size; /* kv=paged(P): K, V in pages of P keys, 1..AC_CASE_MAX_PAGE_SIZE; 0: contiguous */
    bool kv_contig; /* kv=paged(P,contig): the table in order, no shared or spare pages */
    int num_splits; /* splits=S: S >= 1 split-KV key ranges; 0 (absent, or splits=auto): the kernel's */
    /* ---- fp8 (dtype e4m3/e5m2 only; case_fp8.c): printed with every fp8 line, never with another ---- */
    ac_dtype out_dtype; /* out=bf16|f16: O's dtype (default bf16) */
    int descale_rows; /* descale=tensor|head|block(N): AC_DESCALE_TENSOR, _HEAD or N rows */
    ac_dtype p_dtype; /* p=e4m3|e5m2|bf16|f16: P's format before P V, as the kernel declares (e4m3) */
    int acc_bits; /* acc=f32|e8mB: the fp8 products' accumulator as the kernel declares (ref.h fp8_acc_bits; 0 = f32,
                    the default, not printed) */
} ac_case;
#define AC_CASE_MAX_PAGE_SIZE 4096
#define AC_CASE_MAX_SPLITS 1024

/* ---- the mask of a case (masks.c: one row per kind of ref/mask_kinds.h) ----
 * A value "window-br(8,0)": the kind's spelling, then its parameters if it
 * takes any.  Parsed into c (kind and parameters; other fields untouched):
 * the case line's mask= and check's --mask read the same spelling. */
int ac_case_mask_parse(const char *value, ac_case *c, ac_err *err);
/* Sets the kind, with the parameters the kind fixes (causal: window (inf, 0)). */
void ac_case_set_mask(ac_case *c, ac_mask_kind k);
/* The problem's window and alignment for c's mask (a dense mask is drawn by run/inputs.c). */
void ac_case_mask_to_problem(const ac_case *c, ac_problem *p);
/* The shrinker's steps: the kind one rank down (window -> causal in the same
 * alignment; none below that) and the kind aligned top-left (itself if it has no alignment). */
ac_mask_kind ac_case_mask_simpler(ac_mask_kind k);
ac_mask_kind ac_case_mask_top_left(ac_mask_kind k);
/* A --mask filter list, "causal-br,window,dense": kind spellings, or a
 * spelling's stem before "-tl"/"-br" for both alignments.  *kinds gets a bit
 * (1u << ac_mask_kind) per kind; AC_ERR_INPUT naming the bad entry otherwise. */
int ac_mask_filter_parse(const char *list, unsigned *kinds, ac_err *err);

/* The dtype of the outputs (O, dQ, dK, dV) a kernel writes for case c: its
 * dtype's ac_dtype_output (c->dtype is the inputs' dtype), or out= for fp8. */
ac_dtype ac_case_out_dtype(const ac_case *c);

/* The number grammar of case lines, also read by the CLI's options and the
 * budgets file, strictly: the whole string or nothing.
 * ac_read_decimal: [-]DIGITS[.DIGITS][e[+|-]DIGITS] (or .DIGITS), finite, not
 * out of range (strtod's ERANGE); no blanks, '+', hex, inf or nan.
 * ac_read_unsigned: decimal digits only (no sign, no blank), at most max. */
bool ac_read_decimal(const char *s, double *out);
bool ac_read_unsigned(const char *s, unsigned long long max, unsigned long long *out);
/* An fp8 kernel's accumulator as the case line's acc= and --fp8-acc spell it: "f32" -> 0,
 * "e8mB" -> B in 1..AC_FP8_ACC_MAX_BITS (B as ac_read_unsigned reads it). */
bool ac_fp8_acc_parse(const char *text, int *bits);

/* AC_OK, or AC_ERR_INPUT with a message naming the bad field. */
int ac_case_parse(const char *line, ac_case *c, ac_err *err);
/* Writes the canonical line (no newline); returns its length, or -1 if len is too small. */
int ac_case_format(const ac_case *c, char *buf, size_t len);
/* Semantic checks (sizes, window, seqlens, GQA) beyond syntax. */
int ac_case_validate(const ac_case *c, ac_err *err);
/* A valid default case (seed 1, b=1, h=1, nq=nk=16, d=16, f16, no mask, normal(0,1)). */
ac_case ac_case_default(void);

#endif
