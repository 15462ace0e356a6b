/* kernels/cpu_flash_internal.h — private to kernels/: the CPU emulation of the
 * fused FlashAttention-2 kernel (cpu_flash.c), its parameters and planted bugs
 * (cpu_flash_mutants.c), and the online-softmax step the unit tests check. */
#ifndef ATTNCHECK_CPU_FLASH_INTERNAL_H
#define ATTNCHECK_CPU_FLASH_INTERNAL_H

#include "kernel.h"

/* The planted bugs.  Each one is tested with `cp->mut == CF_MUT_X` at exactly
 * the line where it lives in cpu_flash.c. */
typedef enum {
    CF_MUT_NONE = 0,
    CF_MUT_NO_RESCALE_L, /* l += rowsum(P) without l *= exp(m_old - m_new) */
    CF_MUT_NO_RESCALE_O, /* acc += P V without acc *= exp(m_old - m_new) */
    CF_MUT_NO_MAX_SUBTRACTION, /* P = exp(S): no running max (overflows) */
    CF_MUT_PER_TILE_NORMALISE, /* acc divided by l after every tile, the next rescale forgets l_old */
    CF_MUT_CAUSAL_OFF_BY_ONE, /* right (causal) edge admits key c + right + 1 */
    CF_MUT_CAUSAL_TL_FOR_BR, /* top-left alignment used where bottom-right was asked */
    CF_MUT_WINDOW_EDGE, /* left window edge excludes key c - left */
    CF_MUT_LAST_KV_UNMASKED, /* keys past nk in the last partial K/V tile not masked */
    CF_MUT_LAST_Q_UNWRITTEN, /* Q tiles counted as nq / Br: the partial last tile never runs */
    CF_MUT_GQA_HEAD_MOD, /* kv head = h % Hkv instead of h / (Hq / Hkv) */
    CF_MUT_MASKED_ROW_NAN, /* no -inf guard on the running max: fully masked rows give NaN */
    CF_MUT_O_ACCUM_IN_DTYPE, /* PV accumulated in the input dtype instead of f32 */
    CF_MUT_LSE_LOG2, /* LSE written in log2 units (backward recomputes P wrongly) */
    CF_MUT_LSE_WITHOUT_MAX, /* LSE written as log(l), the running max left out */
    CF_MUT_BWD_DELTA_WRONG_ROW, /* D_i = rowsum(dO_i * O_{i+1}) */
    CF_MUT_BWD_NO_GQA_SUM, /* dK, dV of a kv head hold only the last query head's share */
    CF_MUT_BWD_SCALE_TWICE, /* dQ, dK multiplied by the softmax scale twice */
    CF_MUT_BWD_NO_SCALE, /* dQ, dK never multiplied by the softmax scale */
    /* the variants' (cpu_flash_var.c, cpu_flash_var_bwd.c) */
    CF_MUT_SOFTCAP_BEFORE_SCALE, /* T = c tanh(QK^T / c) scale: the softcap applied before the scale */
    CF_MUT_SINK_NOT_IN_LSE, /* O normalised with the sink, LSE written without it */
    CF_MUT_DV_WITH_DQK_STRIDE, /* V's rows addressed with d_qk's stride (d_v values read from each) */
    CF_MUT_CU_SEQLENS_LATE, /* THD: K, V of sequence b read from cu_seqlens_k[b + 1] (the next sequence) */
    CF_MUT_ALIBI_TOP_LEFT, /* ALiBi's distance |i - j| (top-left) instead of |i + nk - nq - j| */
    CF_MUT_BIAS_WRONG_AXIS, /* the bias's broadcast axes swapped: batch b reads head row b, head h batch row h */
    CF_MUT_SINK_TOKENS_OFF_BY_ONE, /* sink tokens: the first k + 1 keys kept past the window, not k */
    CF_MUT_DROPOUT_NO_RESCALE, /* dropout: kept P not multiplied by 1 / (1 - p) */
    /* the split-KV decode path's (cpu_flash_decode.c) */
    CF_MUT_COMBINE_NO_RESCALE, /* the combine sums the splits' partials without rescaling them to the common max */
    CF_MUT_EMPTY_SPLIT_NAN, /* an empty split's partial normalised anyway: O_s = 0/0, LSE_s = -inf - -inf (NaN) */
    CF_MUT_SPLIT_OFF_BY_ONE, /* every split but the last runs one key past its boundary (a key counted twice) */
    CF_MUT_PAGE_SIZE_WRONG, /* the block table read as if pages held 2P keys (entry j / 2P, slot j % P) */
    CF_MUT_LAST_PAGE_SLOTS, /* whole pages loaded, the last page's unused slots (NaN) not masked */
    CF_MUT_LATER_SEQ_UNWRITTEN, /* the grid one sequence short: the last sequence's O and LSE never written */
    CF_MUT_COUNT, /* the planted bugs end here */
    /* Precision losses meant to stay inside every budget (cpu_flash_precision.c):
     * the baseline comparison (attncheck prove --baseline) must flag them. */
    CF_PREC_O_ROUNDED_TWICE = CF_MUT_COUNT, /* f16: the un-normalised O rounded before the division by l */
    CF_PREC_END
} cf_mutant;

typedef struct {
    int block_q, block_k; /* Br x Bc, the tile sizes of the fused kernel */
    cf_mutant mut;
} cpu_flash_params;

/* One online-softmax step of one query row over one K/V tile: s holds the n
 * scaled scores of the tile (masked ones -inf).  Updates the running max *m
 * and denominator *l, overwrites s with P = exp(s - m_new) (f32, before any
 * rounding) and returns alpha = exp(m_old - m_new), the factor the
 * un-normalised accumulator must be rescaled by.  A running max of -inf uses 0
 * as the exponent's reference (FlashAttention's guard), so masked rows stay 0. */
float cf_online_softmax_step(const cpu_flash_params *cp, float *m, float *l, float *s, int n);

/* Round a float to the nearest value of dtype t (ties to even), as a float. */
float cf_round_to(ac_dtype t, float x);
/* x rounded to dtype t as t's bit pattern: ac_narrow(t, x), without the double path. */
uint32_t cf_narrow_bits(ac_dtype t, float x);

/* ---- shared by the forward (cpu_flash.c) and the backward (cpu_flash_bwd.c) ---- */

/* Row i of the dense boolean mask for (batch b, head h), or NULL without one. */
const uint8_t *cf_dense_row(const ac_problem *p, int b, int h, int i);

/* Element `at` of a dtype-t buffer set to x rounded to t. */
void cf_store_elem(ac_dtype t, void *buf, size_t at, float x);
/* Rows [first, first + n_rows) of head h of a Q-like (heads_q, seqlen_q) or K-like
 * (heads_kv, seqlen_k) tensor of batch b, widened to float, head_dim per row. */
void cf_load_rows(const ac_problem *p, ac_dtype t, const void *buf, int heads, int seqlen, int b, int h, int first,
                  int n_rows, float *out);
int cf_kv_head_of(const cpu_flash_params *cp, const ac_problem *p, int h);
/* Visible key range [lo[i], hi[i]) of every row i < nq_b of batch b, before the
 * dense mask; both bounds nondecreasing in i. */
void cf_row_ranges(const cpu_flash_params *cp, const ac_problem *p, int b, int *lo, int *hi);
/* Is the block rows [i0, i1) x keys [j0, j1) hidden entirely (so the GPU skips it)? */
bool cf_block_masked(const int *lo, const int *hi, int i0, int i1, int j0, int j1);
/* Scores s (rows x cols) of rows i0.. and keys j0.. set to -inf where hidden. */
void cf_mask_tile(const ac_problem *p, int b, int h, int i0, int rows, int j0, int cols, const int *lo, const int *hi,
                  float *s);
/* acc[c] += sum_t coef[t * coef_stride] * x[t * x_stride + c], c < n, each in order over t. */
void cf_combine_rows(float *restrict acc, const float *restrict coef, int coef_stride, const float *restrict x,
                     int x_stride, int n_terms, int n);
/* out (rows x cols) = a (rows x n) b_t (n x cols). */
void cf_gemm_nt(const float *restrict a, const float *restrict b_t, int rows, int cols, int n, float *restrict out);
/* acc (n_out x d) += w^T x: w (n_in x n_out, row stride w_stride), x (n_in x d). */
void cf_gemm_tn_acc(const float *restrict w, int w_stride, const float *restrict x, int n_in, int n_out, int d,
                    float *restrict acc);
/* Rows [j0, j0 + cols) of rows (. x d) transposed into out (d x cols). */
void cf_transpose_tile(const float *rows, int j0, int cols, int d, float *out);
/* The problem is valid and within self's claims: AC_OK or AC_ERR_INPUT. */
int cf_check_call(const ac_kernel *self, const ac_problem *p, ac_dtype t, bool backward, ac_err *err);

/* The entry points; self->ctx is a const cpu_flash_params *. */
int cf_forward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_fwd_args *a, ac_err *err);
int cf_backward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_bwd_args *a, ac_err *err);

/* ---- problems with variants (ref/variants.h): cpu_flash_var.c, cpu_flash_var_bwd.c ----
 * cf_forward and cf_backward hand a problem that uses any variant to these,
 * after cf_check_call. */
int cf_forward_variants(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_fwd_args *a, ac_err *err);
int cf_backward_variants(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_bwd_args *a, ac_err *err);
/* Rows [first, first + n_rows) of head h of a tensor of the given kind
 * (ref.h's ac_tensor_kind: its heads, length and ac_tensor_dim columns) of
 * batch b, widened to float, row after row. */
void cf_load_kind(const cpu_flash_params *cp, const ac_problem *p, ac_dtype t, const void *buf, ac_tensor_kind kind,
                  int b, int h, int first, int n_rows, float *out);
/* Raw scores s = Q K^T of a tile (rows x cols, rows from i0, keys from j0) into
 * S': the scale and the score modifiers, in f32 as the kernel computes them;
 * slope (may be NULL) gets dT/dS of every entry (the softcap's 1 - tanh^2). */
void cf_score_mods(const cpu_flash_params *cp, const ac_problem *p, int b, int h, int i0, int rows, int j0, int cols,
                   float *s, float *slope);
/* Sink tokens: rows' lo widened to 0, the gap kept after lo (lo holds 3 Nq ints); its mask. */
void cf_sink_token_ranges(const cpu_flash_params *cp, const ac_problem *p, int b, int *lo, const int *hi);
void cf_mask_sink_gap(const ac_problem *p, int i0, int rows, int j0, int cols, const int *lo, float *s);
/* Dropout: whether cpu-flash keeps pair (b, h, i, j), a hash of (seed, b, h, i, j)
 * (the same draw in the forward and the backward), and the factor it applies. */
bool cf_dropout_keep(const ac_problem *p, int b, int h, int i, int j);
float cf_dropout_scale(const cpu_flash_params *cp, const ac_problem *p);
/* The (mb, mh) a kernel reads the bias of (b, h) at (the mutant swaps the axes). */
void cf_bias_rows(const cpu_flash_params *cp, const ac_problem *p, int b, int h, int *mb, int *mh);
/* The scale and the softcap alone, on n scores (cf_score_mods' first step). */
void cf_score_softcap(const cpu_flash_params *cp, const ac_problem *p, int n, float *s, float *slope);

/* The sink joins a finished row (cpu_flash_var.c): m' = max(m, s_h), l' = l exp(m - m')
 * + exp(s_h - m'); *o_factor gets exp(m - m') (1 without sinks). */
void cf_sink_join(const ac_problem *p, int h, float *m, float *l, float *o_factor);

/* ---- the split-KV decode path (cpu_flash_decode.c) ----
 * A paged KV cache, or a split hint of 2 or more, without dropout: cf_forward
 * hands the problem to cf_forward_decode (the backward keeps its path: a
 * paged problem is forward only, and the split is the forward's). */
static inline bool cf_decode_path(const ac_problem *p)
{
    return (p->page_size > 0 || p->num_splits >= 2) && p->dropout_p == 0.0;
}
int cf_forward_decode(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_fwd_args *a, ac_err *err);

/* Problems with variants or the packed THD layout take cpu_flash_var*.c's path. */
static inline bool cf_variant_path(const ac_problem *p)
{
    return ac_problem_variants(p) != 0 || p->layout == AC_LAYOUT_THD;
}

/* What cpu-flash and every mutant claim. */
#define CF_CAPS \
    { \
        .dtypes = (1u << AC_F32) | (1u << AC_F16) | (1u << AC_BF16), .n_head_dims = 0, \
        .max_head_dim = AC_MAX_HEAD_DIM, .masks = AC_MASKCAP_ALL, .layouts = AC_LAYOUTS_ALL, .gqa = true, \
        .varlen = true, .backward = true, .max_seqlen = 0, .variants = AC_VAR_ALL, \
    }

/* cpu_flash_mutants.c: the cpu-flash-mutant-* descriptors. */
size_t cf_mutant_kernels(const ac_kernel **out, size_t max);
/* cpu_flash_precision.c: the cpu-flash-precision-* descriptors (mutants and controls). */
size_t cf_precision_kernels(const ac_kernel **out, size_t max);
/* cpu-flash-precision-o-rounded-twice's numerator: acc rounded to the dtype
 * where it fits (a partial output stored in the dtype), else acc. */
float cf_round_if_finite(ac_dtype t, float acc);

#endif
