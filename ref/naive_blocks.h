/* ref/naive_blocks.h — internal to ref/: the pieces the blocked naive forward
 * (naive.c) and backward (naive_backward.c) share.
 *
 * Inputs are packed once into float copies (exact: they hold dtype values):
 * Q-like (B, Hq, Nq, d_pad) and K-like (B, Hkv, Nk, d_pad) with the head
 * dimension zero-padded to a multiple of NK_COLS, and K, V also transposed,
 * (B, Hkv, d, nk_pad), for the products over d.  Work is cut into blocks of
 * NAIVE_ROWS query rows of one (b, h); the backward's dK/dV pass into tiles of
 * NAIVE_KEYS keys.  The products are naive_kernels.h's, which keep the scalar
 * summation order, so an element comes out the same in every pass and every
 * block shape: the backward's P is the one the forward made. */
#ifndef ATTNCHECK_REF_NAIVE_BLOCKS_H
#define ATTNCHECK_REF_NAIVE_BLOCKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "naive_kernels.h"
#include "ref.h"

#define NAIVE_ROWS 64 /* query rows per task (forward, dQ pass) */
#define NAIVE_KEYS 128 /* keys per task of the dK/dV pass, a multiple of NK_COLS */

typedef struct {
    const ac_problem *p;
    ac_dtype t;
    int d, d_v, d_pad, nk_pad, workers; /* d_pad: the packed width, d and d_v rounded up */
    float scale; /* (float)p->scale, as the naive computation holds it */
    bool mods; /* score modifiers (naive_mods.h) */
    float *q, *k, *v, *d_o, *o; /* packed copies, row stride d_pad; d_o, o only for the backward */
    float *kt, *vt; /* K^T, V^T per (b, h_kv): (d, nk_pad) */
    int *key_lo, *key_hi; /* (B, Nq): [lo, hi) of row i of batch b, the window, causal
                                     and length part of visibility; lo = hi = 0 for padding rows */
    int row_blocks; /* blocks per (b, h): ceil(seqlen_q / NAIVE_ROWS) */
} naive_ctx;

/* Rows [i0, i1) of head h (i1 <= nq_b) and the keys [jt0, jt1) covering their
 * visible keys, jt0 a multiple of NK_COLS (empty: jt0 = jt1). */
typedef struct {
    int b, h, h_kv, i0, i1, jt0, jt1;
} naive_block;

/* Packs q, k, v (and d_o, o when both are given) into float copies and fills
 * the key ranges, on ctx->workers threads.  AC_ERR_ENV when out of memory. */
int naive_ctx_init(naive_ctx *ctx, const ac_problem *p, ac_dtype t, const double *q, const double *k, const double *v,
                   const double *d_o, const double *o, ac_err *err);
void naive_ctx_free(naive_ctx *ctx);

/* Packed row i of head h of a Q-like (heads_q) or K-like (heads_kv) copy;
 * column j of a transposed (K^T, V^T) one. */
float *naive_q_row(const naive_ctx *ctx, float *base, int b, int h, int i);
float *naive_kv_row(const naive_ctx *ctx, float *base, int b, int h_kv, int j);
float *naive_kvt_col(const naive_ctx *ctx, float *base, int b, int h_kv, int j);
float *naive_vt_col(const naive_ctx *ctx, float *base, int b, int h_kv, int j); /* V^T: (d_v, nk_pad) */

/* x rounded up to a multiple of NK_COLS: the row stride of a score block of x keys. */
int naive_pad(int x);

/* Block `index` in [0, B * Hq * row_blocks) as (b, h, row block); false when
 * its rows are all padding (i0 >= nq_b). */
bool naive_block_at(const naive_ctx *ctx, size_t index, naive_block *blk);
/* Padding rows [max(i0, nq_b), min(i0 + NAIVE_ROWS, Nq)) of block `index`. */
void naive_padding_rows(const naive_ctx *ctx, size_t index, int *b, int *h, int *r0, int *r1);

/* Row i's dense-mask row, or NULL when there is no dense mask. */
const uint8_t *naive_mask_row(const naive_ctx *ctx, int b, int h, int i);

/* Scores of rows [i0, i1) of blk's head and keys [j0, j1) (j0 a multiple of
 * NK_COLS), row stride naive_pad(j1 - j0): round_t(fl32(S * scale)), then the
 * variants' S' (naive_mods.h), where visible, -inf where not; any[r] (may be NULL) says whether row i0 + r sees
 * one of these keys. */
void naive_scores(const naive_ctx *ctx, const naive_block *blk, int j0, int j1, float *s, bool *any);
/* The same with the variants' score modifiers' slope dS'/dS (naive_mods.h)
 * of every visible pair written to slope (same shape), when not NULL. */
void naive_scores_slope(const naive_ctx *ctx, const naive_block *blk, int j0, int j1, float *s, bool *any,
                        float *slope);

/* Softmax of one score row in place: P = round_t(expf(s - m) / l), l summed
 * in float in key order, then the sink's expf(sink - m) (naive_mods.h; sink
 * -inf: none); *m_out and *l_out as computed.  A row that sees no key (any
 * false) becomes zeros, with l = 1 at m = sink when there is one, else 0. */
void naive_softmax_row(ac_dtype t, float *row, int cols, bool any, float sink, float *m_out, float *l_out);
/* e = expf(s - m) of one score: 0 for s = -inf, -0 for a hidden pair (s = NaN),
 * which naive_prob turns into P = 0 whatever l is (a sum of e's ignores -0). */
float naive_exp(float s, float m);
float naive_prob(ac_dtype t, float e, float l);

/* Rounded to t and written as doubles: dst[r * ld_dst + c] = round_t(alpha * acc[r * ld_acc + c])
 * for c < d. */
void naive_store_rows(ac_dtype t, float alpha, const float *acc, size_t ld_acc, int rows, int d, double *dst,
                      size_t ld_dst);

/* Per-worker scratch: for each kind, `workers` float buffers of sizes[kind]
 * elements, the array of them stored through slots[kind].  Free is safe after
 * a failed alloc. */
bool naive_scratch_alloc(float ***slots[], const size_t sizes[], int n_kinds, int workers);
void naive_scratch_free(float ***slots[], int n_kinds, int workers);

int naive_check_args(const ac_problem *p, ac_dtype t, const void *const *tensors, int n, const char *who, ac_err *err);

#endif
