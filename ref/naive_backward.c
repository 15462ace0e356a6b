/* ref/naive_backward.c — the naive baseline's backward (contract and
 * summation orders in naive.c's header), in two parallel passes so that no
 * two threads ever add into the same output:
 *   1. per (b, h, row block): the forward's P again (same scores, same
 *      softmax), D, dP, dS, and dQ = dS K; it keeps each row's max m, sum l
 *      and D;
 *   2. per (b, h_kv, key tile): for every query head of the group and every
 *      row block that sees the tile, in that order (the scalar's order of
 *      rows), P and dS of the (block, tile) pair again from the kept m, l, D,
 *      then dV += P^T dO and dK += dS^T Q into float running sums.
 * Pass 2 recomputes S and dP for the pairs (two more d-deep products and an
 * expf per pair); the alternative, one pass adding every block's dK, dV into
 * shared sums, would make the order depend on the threads. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fp64_block.h"
#include "naive_blocks.h"
#include "naive_mods.h"
#include "parallel.h"
#include "ref.h"
#include "round_float.h"

typedef struct {
    const naive_ctx *ctx;
    double *dq, *dk, *dv;
    float *row_max, *row_sum, *row_delta; /* (B, Hq, Nq) as pass 1 computed them */
    bool *row_any; /* the row sees a key */
    float **s, **ds, **acc; /* per worker: (NAIVE_ROWS, nk_pad) twice, (2 NAIVE_KEYS, d_pad) */
    float **slope; /* per worker, with score modifiers: (NAIVE_ROWS, nk_pad) dS'/dS */
} grad_job;

static float *slope_of(const grad_job *job, int worker) { return job->ctx->mods ? job->slope[worker] : NULL; }

static size_t row_at(const ac_problem *p, int b, int h, int i)
{
    return ((size_t)b * p->heads_q + h) * p->seqlen_q + i;
}

static bool pair_visible(const naive_ctx *ctx, int b, int h, const uint8_t *mask, int i, int j)
{
    size_t at = (size_t)b * ctx->p->seqlen_q + i;
    int g0, g1; /* sink tokens' gap */
    ac_visible_gap(ctx->p, b, i, &g0, &g1);
    return j >= ctx->key_lo[at] && j < ctx->key_hi[at] && (j < g0 || j >= g1) && (!mask || mask[j]) &&
        !naive_bias_hides(ctx->p, b, h, i, j);
}

/* D_i = sum_c dO_ic O_ic in float, in order over c. */
static float row_delta(const naive_ctx *ctx, int b, int h, int i)
{
    const float *d_o = naive_q_row(ctx, ctx->d_o, b, h, i), *o = naive_q_row(ctx, ctx->o, b, h, i);
    float delta = 0.0f;
    for (int c = 0; c < ctx->d_v; c++)
        delta += d_o[c] * o[c];
    return delta;
}

/* dP of rows [i0, i1) and keys [j0, j1) (j0 a multiple of NK_COLS) into ds,
 * row stride naive_pad(j1 - j0), then dS = round_t(P (round_t(dP) - D)) in
 * place, 0 where masked or the row sees no key.  p: P, same shape; slope (may
 * be NULL): the score modifiers' dS'/dS, dS = round_t(dS' slope). */
static void grad_scores(const grad_job *job, const naive_block *blk, int j0, int j1, const float *p, float *ds,
                        const float *slope)
{
    const naive_ctx *ctx = job->ctx;
    int ld = naive_pad(j1 - j0);
    nk_dot_rows(naive_q_row(ctx, ctx->d_o, blk->b, blk->h, blk->i0), (size_t)ctx->d_pad, blk->i1 - blk->i0,
                naive_vt_col(ctx, ctx->vt, blk->b, blk->h_kv, j0), (size_t)ctx->nk_pad, ld, ctx->d_v, ds, (size_t)ld);
    for (int i = blk->i0; i < blk->i1; i++) {
        size_t at = row_at(ctx->p, blk->b, blk->h, i), r = (size_t)(i - blk->i0) * ld;
        const uint8_t *mask = naive_mask_row(ctx, blk->b, blk->h, i);
        float delta = job->row_delta[at];
        for (int j = j0; j < j1; j++) {
            bool live = job->row_any[at] && pair_visible(ctx, blk->b, blk->h, mask, i, j);
            float dp = live ? naive_drop(ctx->p, ctx->t, blk->b, blk->h, i, j, rf_round(ctx->t, ds[r + j - j0])) : 0.0f;
            ds[r + j - j0] = live ? rf_round(ctx->t, p[r + j - j0] * (dp - delta)) : 0.0f;
            if (live && slope)
                ds[r + j - j0] = rf_round(ctx->t, ds[r + j - j0] * slope[r + j - j0]);
        }
    }
}

/* ---- pass 1: dQ per row block ------------------------------------------------- */

static void dq_block(const grad_job *job, const naive_block *blk, float *s, float *ds, float *acc, float *slope)
{
    const naive_ctx *ctx = job->ctx;
    const ac_problem *p = ctx->p;
    int rows = blk->i1 - blk->i0, cols = blk->jt1 - blk->jt0, ld = naive_pad(cols), d = ctx->d;
    bool any[NAIVE_ROWS];
    naive_scores_slope(ctx, blk, blk->jt0, blk->jt1, s, any, slope);
    for (int r = 0; r < rows; r++) {
        size_t at = row_at(p, blk->b, blk->h, blk->i0 + r);
        naive_softmax_row(ctx->t, s + (size_t)r * ld, cols, any[r], naive_sink(p, blk->h), &job->row_max[at],
                          &job->row_sum[at]);
        job->row_any[at] = any[r];
        job->row_delta[at] = any[r] ? row_delta(ctx, blk->b, blk->h, blk->i0 + r) : 0.0f;
    }
    grad_scores(job, blk, blk->jt0, blk->jt1, s, ds, slope);
    nk_acc_rows(ds, (size_t)ld, rows, cols, naive_kv_row(ctx, ctx->k, blk->b, blk->h_kv, blk->jt0), (size_t)ctx->d_pad,
                ctx->d_pad, acc, (size_t)ctx->d_pad);
    ref_head hd;
    ref_head_init(&hd, p, blk->b, blk->h);
    double *dq_rows = job->dq + hd.q_base + (size_t)blk->i0 * hd.ld_q;
    naive_store_rows(ctx->t, ctx->scale, acc, (size_t)ctx->d_pad, rows, d, dq_rows, hd.ld_q);
    for (int r = 0; r < rows; r++)
        if (!any[r])
            memset(dq_rows + (size_t)r * hd.ld_q, 0, (size_t)d * sizeof(double));
}

static void zero_dq_rows(const grad_job *job, int b, int h, int r0, int r1)
{
    ref_head hd;
    ref_head_init(&hd, job->ctx->p, b, h);
    ref_zero_q_rows(&hd, job->dq, r0, r1);
}

static void dq_task(void *arg, size_t task, int worker)
{
    const grad_job *job = arg;
    naive_block blk;
    int b, h, r0, r1;
    naive_padding_rows(job->ctx, task, &b, &h, &r0, &r1);
    zero_dq_rows(job, b, h, r0, r1);
    if (!naive_block_at(job->ctx, task, &blk))
        return;
    if (blk.jt1 > blk.jt0) {
        dq_block(job, &blk, job->s[worker], job->ds[worker], job->acc[worker], slope_of(job, worker));
        return;
    }
    zero_dq_rows(job, b, h, blk.i0, blk.i1); /* no row sees a key: nothing flows back */
    for (int i = blk.i0; i < blk.i1; i++)
        job->row_any[row_at(job->ctx->p, b, h, i)] = false;
}

/* ---- pass 2: dK, dV per key tile ------------------------------------------- */

/* P of the (block, tile) pair from the kept m and l: the softmax's own
 * arithmetic on the same scores (naive_softmax_row), masked pairs included. */
static void tile_probs(const grad_job *job, const naive_block *blk, int j0, int j1, float *s, float *slope)
{
    const naive_ctx *ctx = job->ctx;
    int ld = naive_pad(j1 - j0);
    naive_scores_slope(ctx, blk, j0, j1, s, NULL, slope);
    for (int i = blk->i0; i < blk->i1; i++) {
        size_t at = row_at(ctx->p, blk->b, blk->h, i);
        float *row = s + (size_t)(i - blk->i0) * ld, m = job->row_max[at], l = job->row_sum[at];
        for (int j = 0; j < j1 - j0; j++) {
            row[j] = job->row_any[at] ? naive_prob(ctx->t, naive_exp(row[j], m), l) : 0.0f;
        }
    }
}

static void kv_tile_pair(const grad_job *job, const naive_block *blk, int j0, int j1, float *s, float *ds,
                         float *dk_acc, float *dv_acc, float *slope)
{
    const naive_ctx *ctx = job->ctx;
    int rows = blk->i1 - blk->i0, tw = j1 - j0, ld = naive_pad(tw), d_pad = ctx->d_pad;
    tile_probs(job, blk, j0, j1, s, slope);
    grad_scores(job, blk, j0, j1, s, ds, slope);
    for (int i = blk->i0; ctx->p->dropout_p > 0.0 && i < blk->i1; i++) /* dV = P'^T dO: P dropped */
        for (int j = j0; j < j1; j++)
            s[(size_t)(i - blk->i0) * ld + (j - j0)] =
                naive_drop(ctx->p, ctx->t, blk->b, blk->h, i, j, s[(size_t)(i - blk->i0) * ld + (j - j0)]);
    nk_acc_cols(s, (size_t)ld, rows, tw, naive_q_row(ctx, ctx->d_o, blk->b, blk->h, blk->i0), (size_t)d_pad, d_pad,
                dv_acc, (size_t)d_pad);
    nk_acc_cols(ds, (size_t)ld, rows, tw, naive_q_row(ctx, ctx->q, blk->b, blk->h, blk->i0), (size_t)d_pad, d_pad,
                dk_acc, (size_t)d_pad);
}

static bool block_sees_tile(const naive_ctx *ctx, const naive_block *blk, int j0, int j1)
{
    if (blk->jt1 <= j0 || blk->jt0 >= j1)
        return false;
    for (int i = blk->i0; i < blk->i1; i++) {
        size_t at = (size_t)blk->b * ctx->p->seqlen_q + i;
        if (ctx->key_lo[at] < j1 && ctx->key_hi[at] > j0)
            return true;
    }
    return false;
}

static void kv_tile(const grad_job *job, int b, int h_kv, int j0, int j1, float *s, float *ds, float *acc, float *slope)
{
    const naive_ctx *ctx = job->ctx;
    const ac_problem *p = ctx->p;
    int d = ctx->d, d_pad = ctx->d_pad, group = p->heads_q / p->heads_kv, tw = j1 - j0;
    float *dk_acc = acc, *dv_acc = acc + (size_t)NAIVE_KEYS * d_pad;
    memset(acc, 0, 2 * (size_t)NAIVE_KEYS * d_pad * sizeof *acc);
    for (int h = h_kv * group; h < (h_kv + 1) * group; h++)
        for (int rb = 0; rb < ctx->row_blocks; rb++) {
            naive_block blk;
            if (!naive_block_at(ctx, ((size_t)b * p->heads_q + h) * ctx->row_blocks + rb, &blk))
                break;
            if (block_sees_tile(ctx, &blk, j0, j1))
                kv_tile_pair(job, &blk, j0, j1, s, ds, dk_acc, dv_acc, slope);
        }
    ref_head hd;
    ref_head_init(&hd, p, b, h_kv * group);
    size_t at = hd.kv_base + (size_t)j0 * hd.ld_kv;
    naive_store_rows(ctx->t, ctx->scale, dk_acc, (size_t)d_pad, tw, d, job->dk + at, hd.ld_kv);
    naive_store_rows(ctx->t, 1.0f, dv_acc, (size_t)d_pad, tw, ctx->d_v, job->dv + hd.v_base + (size_t)j0 * hd.ld_v,
                     hd.ld_v);
}

static void kv_task(void *arg, size_t task, int worker)
{
    const grad_job *job = arg;
    const ac_problem *p = job->ctx->p;
    int tiles = (p->seqlen_k + NAIVE_KEYS - 1) / NAIVE_KEYS;
    int b = (int)(task / ((size_t)p->heads_kv * tiles)), h_kv = (int)(task / tiles % p->heads_kv);
    int j0 = (int)(task % tiles) * NAIVE_KEYS, nk = ac_seqlen_k_of(p, b);
    int stored = ac_stored_rows(p, b, false); /* THD: keys past nk_b are another sequence's */
    int j_end = j0 + NAIVE_KEYS < stored ? j0 + NAIVE_KEYS : stored;
    int j1 = j_end < nk ? j_end : nk;
    ref_head hd;
    ref_head_init(&hd, p, b, h_kv * (p->heads_q / p->heads_kv));
    for (int j = j0 > nk ? j0 : nk; j < j_end; j++) { /* padding keys */
        memset(job->dk + hd.kv_base + (size_t)j * hd.ld_kv, 0, (size_t)p->head_dim * sizeof(double));
        memset(job->dv + hd.v_base + (size_t)j * hd.ld_v, 0, (size_t)hd.d_v * sizeof(double));
    }
    if (j0 < j1)
        kv_tile(job, b, h_kv, j0, j1, job->s[worker], job->ds[worker], job->acc[worker], slope_of(job, worker));
}

/* ---- entry point ------------------------------------------------------------ */

static int run_passes(naive_ctx *ctx, grad_job *job, ac_err *err)
{
    const ac_problem *p = ctx->p;
    size_t rows = (size_t)p->batch * p->heads_q * p->seqlen_q; /* row_at ids, padded (THD has fewer LSE rows) */
    job->row_max = malloc((rows ? rows : 1) * sizeof(float));
    job->row_sum = malloc((rows ? rows : 1) * sizeof(float));
    job->row_delta = malloc((rows ? rows : 1) * sizeof(float));
    job->row_any = calloc(rows ? rows : 1, sizeof(bool));
    float ***slots[] = {&job->s, &job->ds, &job->acc, &job->slope};
    size_t block = (size_t)NAIVE_ROWS * (ctx->nk_pad > NAIVE_KEYS ? ctx->nk_pad : NAIVE_KEYS);
    size_t sizes[] = {block, block, 2 * (size_t)NAIVE_KEYS * ctx->d_pad, ctx->mods ? block : 1};
    int status = AC_OK;
    ctx->workers = ref_workers_within(ctx->workers, (sizes[0] + sizes[1] + sizes[2] + sizes[3]) * sizeof(float));
    if (job->row_max && job->row_sum && job->row_delta && job->row_any &&
        naive_scratch_alloc(slots, sizes, 4, ctx->workers)) {
        int tiles = (p->seqlen_k + NAIVE_KEYS - 1) / NAIVE_KEYS;
        ref_parallel_for(ctx->workers, (size_t)p->batch * p->heads_q * ctx->row_blocks, dq_task, job);
        ref_parallel_for(ctx->workers, (size_t)p->batch * p->heads_kv * tiles, kv_task, job);
    } else {
        status = ac_fail(err, AC_ERR_ENV, "ref_naive_backward: out of memory for %d workers' %d x %d blocks",
                         ctx->workers, NAIVE_ROWS, p->seqlen_k);
    }
    naive_scratch_free(slots, 4, ctx->workers);
    free(job->row_max);
    free(job->row_sum);
    free(job->row_delta);
    free(job->row_any);
    return status;
}

int ref_naive_backward(const ac_problem *p, ac_dtype t, const double *q, const double *k, const double *v,
                       const double *o, const double *lse, const double *d_o, double *dq, double *dk, double *dv,
                       ac_err *err)
{
    /* lse is part of the interface for symmetry with the fp64 backward; the
     * naive backward recomputes P exactly as its forward rounded it instead. */
    const void *tensors[] = {q, k, v, o, lse, d_o, dq, dk, dv};
    int status = naive_check_args(p, t, tensors, 9, "ref_naive_backward", err);
    naive_ctx ctx;
    if (status == AC_OK)
        status = naive_ctx_init(&ctx, p, t, q, k, v, d_o, o, err);
    if (status != AC_OK)
        return status;
    grad_job job = {&ctx, dq, dk, dv, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    status = run_passes(&ctx, &job, err);
    naive_ctx_free(&ctx);
    return status;
}
