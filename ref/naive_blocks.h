/* ref/naive_blocks.h — internal to ref/: the pieces the blocked naive forward
 * (naive.c) and backward (naive_backward.c) share.
 *
 * Inputs are packed once into float copies, (B, H, N, d) with row stride d
 * (exact: they hold dtype values).  Work is cut into blocks of NAIVE_ROWS
 * query rows of one (b, h), and keys into tiles of NAIVE_KEYS aligned at
 * multiples of NAIVE_KEYS (the last one ends at nk_b).  Every product over d
 * (S = Q K^T, dP = dO V^T) is one cblas_sgemm per (row block, key tile) of
 * exactly that shape, wherever it is needed: the forward, the backward's dQ
 * pass and its dK/dV pass therefore see the same S and dP bit for bit, so the
 * backward's P is the one the forward made. */
#ifndef ATTNCHECK_REF_NAIVE_BLOCKS_H
#define ATTNCHECK_REF_NAIVE_BLOCKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ref.h"

#define NAIVE_ROWS 64
#define NAIVE_KEYS 128

typedef struct {
    const ac_problem *p;
    ac_dtype t;
    int d, workers;
    float scale;                  /* (float)p->scale, as the naive computation holds it */
    float *q, *k, *v, *d_o, *o;   /* packed copies; d_o, o only for the backward */
    int *key_lo, *key_hi;         /* (B, Nq): [lo, hi) of row i of batch b, the window, causal
                                     and length part of visibility; lo = hi = 0 for padding rows */
    int row_blocks;               /* blocks per (b, h): ceil(seqlen_q / NAIVE_ROWS) */
} naive_ctx;

/* Rows [i0, i1) of head h (i1 <= nq_b) and the key tiles [jt0, jt1) covering
 * their visible keys (jt0 a multiple of NAIVE_KEYS, jt1 one or nk_b). */
typedef struct {
    int b, h, h_kv, i0, i1, jt0, jt1;
} naive_block;

/* Packs q, k, v (and d_o, o when both are given) into float copies and fills
 * the key ranges, on ctx->workers threads.  AC_ERR_ENV when out of memory. */
int naive_ctx_init(naive_ctx *ctx, const ac_problem *p, ac_dtype t, const double *q, const double *k,
                   const double *v, const double *d_o, const double *o, ac_err *err);
void naive_ctx_free(naive_ctx *ctx);

/* Packed row i of head h of a Q-like (heads_q) or K-like (heads_kv) copy. */
float *naive_q_row(const naive_ctx *ctx, float *base, int b, int h, int i);
float *naive_kv_row(const naive_ctx *ctx, float *base, int b, int h_kv, int j);

/* Block `index` in [0, B * Hq * row_blocks) as (b, h, row block); false when
 * its rows are all padding (i0 >= nq_b). */
bool naive_block_at(const naive_ctx *ctx, size_t index, naive_block *blk);
/* Padding rows [max(i0, nq_b), min(i0 + NAIVE_ROWS, Nq)) of block `index`. */
void naive_padding_rows(const naive_ctx *ctx, size_t index, int *b, int *h, int *r0, int *r1);

/* Row i's dense-mask row, or NULL when there is no dense mask. */
const uint8_t *naive_mask_row(const naive_ctx *ctx, int b, int h, int i);

/* out[r * ld + (j - j_first)] = sum_c a_ic b_jc in float for rows [i0, i1)
 * and keys [j0, j1) (within one tile, j_first the column of out's column 0):
 * the one sgemm shape every pass uses for that (block, tile). */
void naive_tile_product(const naive_ctx *ctx, const float *a_row0, const float *b_row0, int rows,
                        int j0, int j1, float *out, int ld);

/* Block scores, rows x (jt1 - jt0): round_t(fl32(S * scale)) where visible,
 * -inf where not; any[r] says whether row i0 + r sees a key. */
void naive_block_scores(const naive_ctx *ctx, const naive_block *blk, float *s, bool *any);

/* Softmax of one score row in place: P = round_t(expf(s - m) / l), l summed
 * in float in key order; *m_out and *l_out as computed.  A row that sees no
 * key (any false) becomes zeros. */
void naive_softmax_row(ac_dtype t, float *row, int cols, bool any, float *m_out, float *l_out);

/* Rounded to t and written as doubles: dst[r * ld_dst + c] = round_t(alpha * acc[r * d + c]). */
void naive_store_rows(ac_dtype t, float alpha, const float *acc, int rows, int d, double *dst,
                      size_t ld_dst);

/* Per-worker scratch: for each kind, `workers` float buffers of sizes[kind]
 * elements, the array of them stored through slots[kind].  Free is safe after
 * a failed alloc. */
bool naive_scratch_alloc(float ***slots[], const size_t sizes[], int n_kinds, int workers);
void naive_scratch_free(float ***slots[], int n_kinds, int workers);

int naive_check_args(const ac_problem *p, ac_dtype t, const void *const *tensors, int n,
                     const char *who, ac_err *err);

#endif
