/* ref/naive.c — the same-dtype naive baseline: what a framework computes in
 * dtype t without fusion, emulated on the CPU.  It is the denominator of the
 * vs-naive ratio (FlashAttention's own test criterion), not a reference.
 *
 * The contract, per row i of one (b, h), with round_t rounding a float to the
 * nearest dtype-t value (the identity for f32) and every sum in float:
 *   S_ij = round_t(fl32(sum_c Q_ic K_jc) * scale),   m = max_j S_ij,
 *   e_j = expf(S_ij - m),  l = sum_j e_j,  P_ij = round_t(e_j / l),
 *   O_ic = round_t(sum_j P_ij V_jc),  LSE = m + logf(l) in float.
 * Backward (P recomputed exactly as the forward made it, the P a framework
 * would have saved; D from the given, naive O):
 *   D_i = sum_c dO_ic O_ic;  dP_ij = round_t(sum_c dO_ic V_jc);
 *   dS_ij = round_t(P_ij (dP_ij - D_i));  dQ_ic = round_t(scale * sum_j dS_ij K_jc);
 *   dK_jc = round_t(scale * sum_i dS_ij Q_ic);  dV_jc = round_t(sum_i P_ij dO_ic),
 * dK and dV summed over the query heads of a GQA group.  Masked pairs are
 * skipped: a hidden pair's P is exactly 0, even in a row whose l is 0 or NaN
 * (f16 scores that overflow), so it never reaches O, dV or a key no row sees;
 * a row with no visible key gives O = 0, LSE = -inf, dQ = 0.
 *
 * How it is computed (naive_blocks.h, naive_kernels.h): on float copies of
 * the inputs, per block of NAIVE_ROWS query rows, only over the keys the
 * block can see (causal and window blocks skipped), with vectorised product
 * loops that keep the definition's float summation order exactly: every sum
 * runs in index order from 0 (over c for S, dP and D; over keys for l, O and
 * dQ; over the group's query heads, then rows, for dK and dV), each product
 * rounded before it is added.  That order is the one the scalar
 * implementation (naive_scalar.c, the tests' oracle) has always used, so the
 * two agree bit for bit.  A BLAS sgemm would be faster still but sums in its
 * own order with FMAs: tried first, its f32 baseline came out more accurate
 * than the definition's (mean error 0.78-0.97x, max 0.55-1.24x over
 * test_naive.c's fixed cases), which would move every f32 vs-naive ratio.
 * For f16/bf16 the order is invisible after the roundings.
 * Blocks run in parallel (parallel.h) over (b, h, row block); each writes
 * only its rows, so results do not depend on the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fp64_block.h"
#include "naive_blocks.h"
#include "naive_mods.h"
#include "parallel.h"
#include "ref.h"
#include "round_float.h"
#include "variants_internal.h"

/* ---- packing and the shared block pieces ---------------------------------- */

typedef struct {
    const naive_ctx *ctx;
    const double *q, *k, *v, *d_o, *o;
} pack_job;

/* rows x d of a head into dst with row stride d_pad, the padding zeroed; only
 * the first `stored` rows exist in src (THD stores no padding rows), the
 * others are zeros. */
static void pack_head(const double *src, size_t base, size_t ld, int rows, int stored, int d, int d_pad, float *dst)
{
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < d; c++)
            dst[(size_t)r * d_pad + c] = r < stored ? (float)src[base + (size_t)r * ld + c] : 0.0f;
        for (int c = d; c < d_pad; c++)
            dst[(size_t)r * d_pad + c] = 0.0f;
    }
}

/* The transpose, (d, cols_pad): dst[c * cols_pad + j], keys past `stored` zeroed. */
static void pack_head_transposed(const double *src, size_t base, size_t ld, int stored, int d, int cols_pad, float *dst)
{
    for (int c = 0; c < d; c++) {
        for (int j = 0; j < stored; j++)
            dst[(size_t)c * cols_pad + j] = (float)src[base + (size_t)j * ld + c];
        for (int j = stored; j < cols_pad; j++)
            dst[(size_t)c * cols_pad + j] = 0.0f;
    }
}

/* Task: one (b, h) of the Q-like tensors, then one (b, h_kv) of the K-like. */
static void pack_task(void *arg, size_t task, int worker)
{
    (void)worker;
    const pack_job *job = arg;
    const naive_ctx *ctx = job->ctx;
    const ac_problem *p = ctx->p;
    size_t q_heads = (size_t)p->batch * p->heads_q;
    ref_head hd;
    if (task < q_heads) {
        int b = (int)(task / p->heads_q), h = (int)(task % p->heads_q);
        ref_head_init(&hd, p, b, h);
        int nq = p->seqlen_q, sq = hd.stored_q;
        pack_head(job->q, hd.q_base, hd.ld_q, nq, sq, ctx->d, ctx->d_pad, naive_q_row(ctx, ctx->q, b, h, 0));
        if (ctx->d_o) { /* O-like: d_v columns */
            pack_head(job->d_o, hd.o_base, hd.ld_o, nq, sq, ctx->d_v, ctx->d_pad, naive_q_row(ctx, ctx->d_o, b, h, 0));
            pack_head(job->o, hd.o_base, hd.ld_o, nq, sq, ctx->d_v, ctx->d_pad, naive_q_row(ctx, ctx->o, b, h, 0));
        }
        return;
    }
    task -= q_heads;
    int b = (int)(task / p->heads_kv), h_kv = (int)(task % p->heads_kv);
    ref_head_init(&hd, p, b, h_kv * (p->heads_q / p->heads_kv)); /* a query head of the group */
    int nk = p->seqlen_k, sk = hd.stored_k;
    pack_head(job->k, hd.kv_base, hd.ld_kv, nk, sk, ctx->d, ctx->d_pad, naive_kv_row(ctx, ctx->k, b, h_kv, 0));
    pack_head(job->v, hd.v_base, hd.ld_v, nk, sk, ctx->d_v, ctx->d_pad, naive_kv_row(ctx, ctx->v, b, h_kv, 0));
    pack_head_transposed(job->k, hd.kv_base, hd.ld_kv, sk, ctx->d, ctx->nk_pad,
                         naive_kvt_col(ctx, ctx->kt, b, h_kv, 0));
    if (ctx->d_o) /* dP = dO V^T: the backward only */
        pack_head_transposed(job->v, hd.v_base, hd.ld_v, sk, ctx->d_v, ctx->nk_pad,
                             naive_vt_col(ctx, ctx->vt, b, h_kv, 0));
}

void naive_ctx_free(naive_ctx *ctx)
{
    free(ctx->q);
    free(ctx->k);
    free(ctx->v);
    free(ctx->d_o);
    free(ctx->o);
    free(ctx->kt);
    free(ctx->vt);
    free(ctx->key_lo);
    free(ctx->key_hi);
    memset(ctx, 0, sizeof *ctx);
}

static void fill_key_ranges(naive_ctx *ctx)
{
    const ac_problem *p = ctx->p;
    for (int b = 0; b < p->batch; b++)
        for (int i = 0; i < p->seqlen_q; i++) {
            size_t at = (size_t)b * p->seqlen_q + i;
            ac_visible_range(p, b, i, &ctx->key_lo[at], &ctx->key_hi[at]);
            if (ctx->key_hi[at] <= ctx->key_lo[at])
                ctx->key_lo[at] = ctx->key_hi[at] = 0;
        }
}

int naive_ctx_init(naive_ctx *ctx, const ac_problem *p, ac_dtype t, const double *q, const double *k, const double *v,
                   const double *d_o, const double *o, ac_err *err)
{
    memset(ctx, 0, sizeof *ctx);
    int status = ref_thread_count(&ctx->workers, err);
    if (status != AC_OK)
        return status;
    ctx->p = p;
    ctx->t = t;
    ctx->d = p->head_dim;
    ctx->d_v = ac_head_dim_v(p);
    ctx->d_pad = naive_pad(ctx->d > ctx->d_v ? ctx->d : ctx->d_v); /* one width for every packed copy */
    ctx->nk_pad = naive_pad(p->seqlen_k);
    ctx->scale = (float)p->scale;
    ctx->mods = ac_problem_has_score_mods(p);
    ctx->row_blocks = (p->seqlen_q + NAIVE_ROWS - 1) / NAIVE_ROWS;
    bool grads = d_o && o;
    size_t nq = (size_t)p->batch * p->heads_q * p->seqlen_q * ctx->d_pad + 1;
    size_t nkv = (size_t)p->batch * p->heads_kv * p->seqlen_k * ctx->d_pad + 1;
    size_t nkvt = (size_t)p->batch * p->heads_kv * p->head_dim * ctx->nk_pad + 1;
    size_t nvt = (size_t)p->batch * p->heads_kv * ctx->d_v * ctx->nk_pad + 1;
    size_t rows = (size_t)p->batch * p->seqlen_q + 1;
    ctx->q = malloc(nq * sizeof(float));
    ctx->k = malloc(nkv * sizeof(float));
    ctx->v = malloc(nkv * sizeof(float));
    ctx->kt = malloc(nkvt * sizeof(float));
    ctx->vt = grads ? malloc(nvt * sizeof(float)) : NULL;
    ctx->d_o = grads ? malloc(nq * sizeof(float)) : NULL;
    ctx->o = grads ? malloc(nq * sizeof(float)) : NULL;
    ctx->key_lo = malloc(rows * sizeof(int));
    ctx->key_hi = malloc(rows * sizeof(int));
    if (!ctx->q || !ctx->k || !ctx->v || !ctx->kt || !ctx->key_lo || !ctx->key_hi ||
        (grads && (!ctx->d_o || !ctx->o || !ctx->vt))) {
        naive_ctx_free(ctx);
        return ac_fail(err, AC_ERR_ENV,
                       "naive baseline: out of memory for float copies of the inputs "
                       "(%zu Q-like, %zu K-like elements)",
                       nq, nkv);
    }
    fill_key_ranges(ctx);
    pack_job job = {ctx, q, k, v, d_o, o};
    size_t heads = (size_t)p->batch * (p->heads_q + p->heads_kv);
    ref_parallel_for(ctx->workers, heads, pack_task, &job);
    return AC_OK;
}

float *naive_q_row(const naive_ctx *ctx, float *base, int b, int h, int i)
{
    const ac_problem *p = ctx->p;
    return base + (((size_t)b * p->heads_q + h) * p->seqlen_q + i) * ctx->d_pad;
}

float *naive_kv_row(const naive_ctx *ctx, float *base, int b, int h_kv, int j)
{
    const ac_problem *p = ctx->p;
    return base + (((size_t)b * p->heads_kv + h_kv) * p->seqlen_k + j) * ctx->d_pad;
}

float *naive_kvt_col(const naive_ctx *ctx, float *base, int b, int h_kv, int j)
{
    const ac_problem *p = ctx->p;
    return base + ((size_t)b * p->heads_kv + h_kv) * p->head_dim * ctx->nk_pad + j;
}

float *naive_vt_col(const naive_ctx *ctx, float *base, int b, int h_kv, int j)
{
    const ac_problem *p = ctx->p;
    return base + ((size_t)b * p->heads_kv + h_kv) * (size_t)ctx->d_v * ctx->nk_pad + j;
}

int naive_pad(int x) { return (x + NK_COLS - 1) / NK_COLS * NK_COLS; }

const uint8_t *naive_mask_row(const naive_ctx *ctx, int b, int h, int i)
{
    const ac_problem *p = ctx->p;
    if (!p->dense_mask)
        return NULL;
    size_t mb = p->mask_batch == 1 ? 0 : (size_t)b, mh = p->mask_heads == 1 ? 0 : (size_t)h;
    return p->dense_mask + ((mb * p->mask_heads + mh) * p->seqlen_q + i) * p->seqlen_k;
}

bool naive_block_at(const naive_ctx *ctx, size_t index, naive_block *blk)
{
    const ac_problem *p = ctx->p;
    int rb = (int)(index % ctx->row_blocks);
    size_t head = index / ctx->row_blocks;
    blk->b = (int)(head / p->heads_q);
    blk->h = (int)(head % p->heads_q);
    blk->h_kv = ac_kv_head_of(p, blk->h);
    int nq = ac_seqlen_q_of(p, blk->b), nk = ac_seqlen_k_of(p, blk->b);
    blk->i0 = rb * NAIVE_ROWS;
    blk->i1 = blk->i0 + NAIVE_ROWS < nq ? blk->i0 + NAIVE_ROWS : nq;
    if (blk->i0 >= nq)
        return false;
    int lo = nk, hi = 0;
    for (int i = blk->i0; i < blk->i1; i++) {
        size_t at = (size_t)blk->b * p->seqlen_q + i;
        if (ctx->key_hi[at] <= ctx->key_lo[at])
            continue;
        lo = ctx->key_lo[at] < lo ? ctx->key_lo[at] : lo;
        hi = ctx->key_hi[at] > hi ? ctx->key_hi[at] : hi;
    }
    if (hi <= lo) {
        blk->jt0 = blk->jt1 = 0;
        return true;
    }
    blk->jt0 = lo / NK_COLS * NK_COLS;
    blk->jt1 = hi;
    return true;
}

void naive_padding_rows(const naive_ctx *ctx, size_t index, int *b, int *h, int *r0, int *r1)
{
    const ac_problem *p = ctx->p;
    int rb = (int)(index % ctx->row_blocks);
    size_t head = index / ctx->row_blocks;
    *b = (int)(head / p->heads_q);
    *h = (int)(head % p->heads_q);
    int nq = ac_seqlen_q_of(p, *b), i0 = rb * NAIVE_ROWS, stored = ac_stored_rows(p, *b, true);
    *r1 = i0 + NAIVE_ROWS < stored ? i0 + NAIVE_ROWS : stored; /* THD stores no padding rows */
    *r0 = i0 > nq ? i0 : nq;
    if (*r0 > *r1)
        *r0 = *r1;
}

void naive_scores(const naive_ctx *ctx, const naive_block *blk, int j0, int j1, float *s, bool *any)
{
    naive_scores_slope(ctx, blk, j0, j1, s, any, NULL);
}

void naive_scores_slope(const naive_ctx *ctx, const naive_block *blk, int j0, int j1, float *s, bool *any, float *slope)
{
    const ac_problem *p = ctx->p;
    int rows = blk->i1 - blk->i0, ld = naive_pad(j1 - j0);
    nk_dot_rows(naive_q_row(ctx, ctx->q, blk->b, blk->h, blk->i0), (size_t)ctx->d_pad, rows,
                naive_kvt_col(ctx, ctx->kt, blk->b, blk->h_kv, j0), (size_t)ctx->nk_pad, ld, ctx->d, s, (size_t)ld);
    for (int r = 0; r < rows; r++) {
        int i = blk->i0 + r;
        size_t at = (size_t)blk->b * p->seqlen_q + i;
        int lo = ctx->key_lo[at], hi = ctx->key_hi[at];
        const uint8_t *mask = naive_mask_row(ctx, blk->b, blk->h, i);
        float *row = s + (size_t)r * ld;
        bool seen = false;
        int g0, g1; /* sink tokens' gap */
        ac_visible_gap(p, blk->b, i, &g0, &g1);
        for (int j = j0; j < j1; j++) {
            bool visible = j >= lo && j < hi && (j < g0 || j >= g1) && (!mask || mask[j]) &&
                !naive_bias_hides(p, blk->b, blk->h, i, j);
            /* NaN marks a hidden pair (a score never is: finite inputs, float sums) */
            row[j - j0] = visible ? rf_round(ctx->t, row[j - j0] * ctx->scale) : NAN;
            seen |= visible;
            if (visible && ctx->mods)
                row[j - j0] = naive_score_mod(p, ctx->t, blk->b, blk->h, i, j, row[j - j0],
                                              slope ? slope + (size_t)r * ld + (j - j0) : NULL);
        }
        if (any)
            any[r] = seen;
    }
}

float naive_exp(float s, float m) { return isnan(s) ? -0.0f : s == -INFINITY ? 0.0f : expf(s - m); }

float naive_prob(ac_dtype t, float e, float l) { return e == 0.0f && signbit(e) ? 0.0f : rf_round(t, e / l); }

void naive_softmax_row(ac_dtype t, float *row, int cols, bool any, float sink, float *m_out, float *l_out)
{
    if (!any) { /* nothing visible: l = 0, or the sink's own 1 at m = s_h */
        memset(row, 0, (size_t)cols * sizeof *row);
        *m_out = sink;
        *l_out = sink == -INFINITY ? 0.0f : 1.0f;
        return;
    }
    float m = sink, l = 0.0f;
    for (int j = 0; j < cols; j++)
        m = row[j] > m ? row[j] : m;
    for (int j = 0; j < cols; j++) {
        row[j] = naive_exp(row[j], m);
        l += row[j];
    }
    l += naive_sink_term(sink, m);
    for (int j = 0; j < cols; j++)
        row[j] = naive_prob(t, row[j], l);
    *m_out = m;
    *l_out = l;
}

void naive_store_rows(ac_dtype t, float alpha, const float *acc, size_t ld_acc, int rows, int d, double *dst,
                      size_t ld_dst)
{
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < d; c++)
            dst[(size_t)r * ld_dst + c] = rf_round(t, alpha * acc[(size_t)r * ld_acc + c]);
}

int naive_check_args(const ac_problem *p, ac_dtype t, const void *const *tensors, int n, const char *who, ac_err *err)
{
    int status = ac_problem_validate(p, 0, err);
    if (status != AC_OK)
        return status;
    if ((status = ref_dropout_check(p, who, err)) != AC_OK)
        return status;
    if ((unsigned)t >= AC_DTYPE_COUNT)
        return ac_fail(err, AC_ERR_INPUT, "%s: unknown dtype %d", who, (int)t);
    for (int a = 0; a < n; a++)
        if (!tensors[a])
            return ac_fail(err, AC_ERR_INPUT, "%s: NULL tensor (argument %d of the tensors)", who, a + 1);
    return AC_OK;
}

/* ---- the forward -------------------------------------------------------------- */

typedef struct {
    const naive_ctx *ctx;
    double *o, *lse;
    float **s, **acc; /* per worker: (NAIVE_ROWS, nk_pad) scores, (NAIVE_ROWS, d_pad) sums */
} forward_job;

/* O = 0 and LSE = lse_value (-inf; a row with no visible key and a sink: s_h) on rows [r0, r1). */
static void zero_rows(const ac_problem *p, double *x, double *lse, double lse_value, int b, int h, int r0, int r1)
{
    ref_head hd;
    ref_head_init(&hd, p, b, h);
    ref_zero_o_rows(&hd, x, r0, r1);
    for (int i = r0; lse && i < r1; i++)
        lse[ac_lse_index(p, b, h, i)] = lse_value;
}

static void forward_block(const forward_job *job, const naive_block *blk, float *s, float *acc)
{
    const naive_ctx *ctx = job->ctx;
    const ac_problem *p = ctx->p;
    int rows = blk->i1 - blk->i0, cols = blk->jt1 - blk->jt0, ld = naive_pad(cols), d = ctx->d_v;
    bool any[NAIVE_ROWS];
    naive_scores(ctx, blk, blk->jt0, blk->jt1, s, any);
    for (int r = 0; r < rows; r++) {
        float m, l;
        naive_softmax_row(ctx->t, s + (size_t)r * ld, cols, any[r], naive_sink(p, blk->h), &m, &l);
        job->lse[ac_lse_index(p, blk->b, blk->h, blk->i0 + r)] = l > 0.0f ? m + logf(l) : -INFINITY;
        for (int j = 0; p->dropout_p > 0.0 && j < cols; j++) /* after the softmax: O takes P dropped */
            s[(size_t)r * ld + j] =
                naive_drop(p, ctx->t, blk->b, blk->h, blk->i0 + r, blk->jt0 + j, s[(size_t)r * ld + j]);
    }
    nk_acc_rows(s, (size_t)ld, rows, cols, naive_kv_row(ctx, ctx->v, blk->b, blk->h_kv, blk->jt0), (size_t)ctx->d_pad,
                ctx->d_pad, acc, (size_t)ctx->d_pad);
    ref_head hd;
    ref_head_init(&hd, p, blk->b, blk->h);
    double *o_rows = job->o + hd.o_base + (size_t)blk->i0 * hd.ld_o;
    naive_store_rows(ctx->t, 1.0f, acc, (size_t)ctx->d_pad, rows, d, o_rows, hd.ld_o);
    for (int r = 0; r < rows; r++) /* exact zeros, whatever V holds */
        if (!any[r])
            memset(o_rows + (size_t)r * hd.ld_o, 0, (size_t)d * sizeof(double));
}

static void forward_task(void *arg, size_t task, int worker)
{
    const forward_job *job = arg;
    naive_block blk;
    int b, h, r0, r1;
    naive_padding_rows(job->ctx, task, &b, &h, &r0, &r1);
    zero_rows(job->ctx->p, job->o, job->lse, -INFINITY, b, h, r0, r1); /* padding: O = 0, LSE = -inf */
    if (!naive_block_at(job->ctx, task, &blk))
        return;
    if (blk.jt1 <= blk.jt0) { /* no row of the block sees a key: LSE = -inf, or the sink */
        zero_rows(job->ctx->p, job->o, job->lse, naive_sink(job->ctx->p, h), b, h, blk.i0, blk.i1);
        return;
    }
    forward_block(job, &blk, job->s[worker], job->acc[worker]);
}

/* Per-worker scratch: n_bufs buffers of each size in sizes[], in slots. */
void naive_scratch_free(float ***slots[], int n_kinds, int workers)
{
    for (int kind = 0; kind < n_kinds; kind++) {
        if (!slots[kind])
            continue;
        for (int w = 0; *slots[kind] && w < workers; w++)
            free((*slots[kind])[w]);
        free(*slots[kind]);
        *slots[kind] = NULL;
    }
}

bool naive_scratch_alloc(float ***slots[], const size_t sizes[], int n_kinds, int workers)
{
    bool ok = true;
    for (int kind = 0; kind < n_kinds; kind++) {
        *slots[kind] = calloc((size_t)workers, sizeof(float *));
        ok &= *slots[kind] != NULL;
        for (int w = 0; *slots[kind] && w < workers; w++) {
            (*slots[kind])[w] = malloc((sizes[kind] ? sizes[kind] : 1) * sizeof(float));
            ok &= (*slots[kind])[w] != NULL;
        }
    }
    return ok;
}

int ref_naive_forward(const ac_problem *p, ac_dtype t, const double *q, const double *k, const double *v, double *o,
                      double *lse, ac_err *err)
{
    if (ac_problem_is_fp8(p) || ac_dtype_is_fp8(t)) /* its own recipe (naive_fp8.c) */
        return ref_naive_forward_fp8(p, q, k, v, o, lse, err);
    const void *tensors[] = {q, k, v, o, lse};
    int status = naive_check_args(p, t, tensors, 5, "ref_naive_forward", err);
    naive_ctx ctx;
    if (status == AC_OK)
        status = naive_ctx_init(&ctx, p, t, q, k, v, NULL, NULL, err);
    if (status != AC_OK)
        return status;
    forward_job job = {&ctx, o, lse, NULL, NULL};
    float ***slots[] = {&job.s, &job.acc};
    size_t sizes[] = {(size_t)NAIVE_ROWS * ctx.nk_pad, (size_t)NAIVE_ROWS * ctx.d_pad};
    ctx.workers = ref_workers_within(ctx.workers, (sizes[0] + sizes[1]) * sizeof(float));
    if (naive_scratch_alloc(slots, sizes, 2, ctx.workers))
        ref_parallel_for(ctx.workers, (size_t)p->batch * p->heads_q * ctx.row_blocks, forward_task, &job);
    else
        status = ac_fail(err, AC_ERR_ENV, "ref_naive_forward: out of memory for %d workers' %d x %d blocks",
                         ctx.workers, NAIVE_ROWS, p->seqlen_k);
    naive_scratch_free(slots, 2, ctx.workers);
    naive_ctx_free(&ctx);
    return status;
}
