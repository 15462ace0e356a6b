/* ref/backward.c — the fp64 reference backward: dQ, dK, dV and D = rowsum(dO * O).
 *
 * The standard attention backward, with P recomputed from the forward's LSE
 * (P = exp(S - LSE), no second softmax), on blocks of query rows (fp64_block.h):
 *   D_i  = sum_c dO_ic O_ic
 *   dP   = dO V^T                 (dgemm)
 *   dS   = P * (dP - D)           (masked entries: P = 0, so dS = 0; with a softcap
 *                                  times dS'/dS = 1 - tanh^2(S / c))
 *   dQ   = scale * dS K           (dgemm, written in place)
 *   dK   = scale * dS^T Q         (dgemms, beta = 1: summed over row blocks and
 *   dV   = P^T dO                  over the query heads of a GQA group)
 * A row with no visible key (LSE = -inf) contributes nothing and gets dQ = 0.
 *
 * Two parallel passes (parallel.h), so no two workers add into one output and
 * the sums' order is fixed, whatever the thread count:
 *   1. per (b, h, row block): D, then P, dS of the block and dQ;
 *   2. per (b, h_kv, tile of REF_KEY_TILE keys): for each query head of the
 *      group, then each row block that sees the tile, in that order, P and dS
 *      of the (block, tile) pair again and dK, dV += their products.
 * Pass 2 recomputes S and dP (two more dgemms over the visible pairs and an
 * exp each): the price of sums that do not depend on the threads. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fp64_block.h"
#include "parallel.h"
#include "ref.h"
#include "variants_internal.h"

#define REF_KEY_TILE 256

typedef struct {
    const double *q, *k, *v, *o, *lse, *d_o;
    double *dq, *dk, *dv, *delta;
} backward_tensors;

static void block_delta(const ref_head *hd, const backward_tensors *t, int i0, int i1)
{
    for (int i = i0; i < i1; i++) {
        const double *o_row = t->o + hd->o_base + (size_t)i * hd->ld_o;
        const double *do_row = t->d_o + hd->o_base + (size_t)i * hd->ld_o;
        double sum = 0.0;
        for (int c = 0; c < hd->d_v; c++)
            sum += do_row[c] * o_row[c];
        t->delta[ac_lse_index(hd->p, hd->b, hd->h, i)] = sum;
    }
}

/* p_blk holds P on entry; dp_blk receives dS (w.r.t. S = scale Q K^T: with a
 * softcap, dS' times slope = dS'/dS, which slope_blk holds; NULL: 1). */
static void block_grad_scores(const ref_head *hd, const backward_tensors *t, int i0, int i1, int jlo, int jhi,
                              const double *p_blk, double *dp_blk, const double *slope_blk)
{
    int rows = i1 - i0, cols = jhi - jlo;
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, hd->d_v, 1.0,
                t->d_o + hd->o_base + (size_t)i0 * hd->ld_o, (int)hd->ld_o, t->v + hd->v_base + (size_t)jlo * hd->ld_v,
                (int)hd->ld_v, 0.0, dp_blk, cols);
    for (int i = i0; i < i1; i++) {
        double delta_i = t->delta[ac_lse_index(hd->p, hd->b, hd->h, i)];
        const double *p_row = p_blk + (size_t)(i - i0) * cols;
        double *ds_row = dp_blk + (size_t)(i - i0) * cols;
        if (hd->p->dropout_p > 0.0) /* dP' = dP keep / (1 - p): O took P's dropped copy */
            for (int j = 0; j < cols; j++)
                ds_row[j] *= ac_dropout_factor(hd->p, hd->b, hd->h, i, jlo + j);
        for (int j = 0; j < cols; j++) /* a masked entry stays an exact 0, whatever dP holds */
            ds_row[j] = p_row[j] != 0.0 ? p_row[j] * (ds_row[j] - delta_i) : 0.0;
        if (slope_blk) /* through the softcap's tanh */
            for (int j = 0; j < cols; j++)
                ds_row[j] *= slope_blk[(size_t)(i - i0) * cols + j];
    }
}

/* Pass 1: rows [i0, i1) of one head: D, and dQ = scale dS K over the block's keys. */
static void dq_block(const ref_head *hd, const backward_tensors *t, int i0, int i1, double *p_blk, double *ds_blk,
                     double *slope_blk)
{
    block_delta(hd, t, i0, i1);
    int jlo, jhi;
    ref_block_keys(hd, i0, i1, &jlo, &jhi);
    if (jhi <= jlo) {
        ref_zero_q_rows(hd, t->dq, i0, i1);
        return;
    }
    int rows = i1 - i0, cols = jhi - jlo;
    ref_mod_aux aux = {.slope = slope_blk};
    ref_block_scores_mods(hd, t->q, t->k, i0, i1, jlo, jhi, p_blk, slope_blk ? &aux : NULL);
    ref_block_probs_from_lse(hd, i0, i1, jlo, jhi, t->lse, p_blk);
    block_grad_scores(hd, t, i0, i1, jlo, jhi, p_blk, ds_blk, slope_blk);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd->d, cols, hd->p->scale, ds_blk, cols,
                t->k + hd->kv_base + (size_t)jlo * hd->ld_kv, (int)hd->ld_kv, 0.0,
                t->dq + hd->q_base + (size_t)i0 * hd->ld_q, (int)hd->ld_q);
}

/* Pass 2: the (block, tile) pair's P and dS, then dK, dV of the tile's keys += their share. */
static void dkdv_pair(const ref_head *hd, const backward_tensors *t, int i0, int i1, int j0, int j1, double *p_blk,
                      double *ds_blk, double *slope_blk)
{
    int rows = i1 - i0, cols = j1 - j0, ld_q = (int)hd->ld_q, ld_kv = (int)hd->ld_kv;
    ref_mod_aux aux = {.slope = slope_blk};
    ref_block_scores_mods(hd, t->q, t->k, i0, i1, j0, j1, p_blk, slope_blk ? &aux : NULL);
    ref_block_probs_from_lse(hd, i0, i1, j0, j1, t->lse, p_blk);
    block_grad_scores(hd, t, i0, i1, j0, j1, p_blk, ds_blk, slope_blk);
    size_t kv_at = hd->kv_base + (size_t)j0 * hd->ld_kv;
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hd->d, rows, hd->p->scale, ds_blk, cols,
                t->q + hd->q_base + (size_t)i0 * hd->ld_q, ld_q, 1.0, t->dk + kv_at, ld_kv);
    ref_block_dropout(hd, i0, i1, j0, j1, p_blk); /* dV = (P keep / (1 - p))^T dO */
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hd->d_v, rows, 1.0, p_blk, cols,
                t->d_o + hd->o_base + (size_t)i0 * hd->ld_o, (int)hd->ld_o, 1.0,
                t->dv + hd->v_base + (size_t)j0 * hd->ld_v, (int)hd->ld_v);
}

typedef struct {
    const ac_problem *p;
    backward_tensors t;
    double **p_blk, **ds_blk; /* per worker: (block, Nk) twice */
    double **slope_blk; /* per worker: (block, Nk) dS'/dS with a softcap; unused (1 element) without */
    bool slope; /* the problem has a softcap */
} backward_job;

static double *slope_of(const backward_job *job, int worker) { return job->slope ? job->slope_blk[worker] : NULL; }

static void dq_task(void *arg, size_t task, int worker)
{
    const backward_job *job = arg;
    ref_head hd;
    int i0, i1;
    ref_block_task(job->p, task, &hd, &i0, &i1);
    int live = i1 < hd.seqlen_q ? i1 : hd.seqlen_q, pad0 = i0 > hd.seqlen_q ? i0 : hd.seqlen_q;
    int pad1 = i1 < hd.stored_q ? i1 : hd.stored_q;
    if (i0 < live)
        dq_block(&hd, &job->t, i0, live, job->p_blk[worker], job->ds_blk[worker], slope_of(job, worker));
    ref_zero_q_rows(&hd, job->t.dq, pad0, pad1); /* padding rows */
    for (int i = pad0; i < pad1; i++)
        job->t.delta[ac_lse_index(job->p, hd.b, hd.h, i)] = 0.0;
}

/* Whether some row of [i0, i1) sees a key of [j0, j1) (window, causal and
 * length; a dense mask can only hide more). */
static bool rows_see_keys(const ref_head *hd, int i0, int i1, int j0, int j1)
{
    int jlo, jhi;
    ref_block_keys(hd, i0, i1, &jlo, &jhi);
    return jlo < j1 && jhi > j0 && jlo < jhi;
}

static int key_tiles(const ac_problem *p) { return (p->seqlen_k + REF_KEY_TILE - 1) / REF_KEY_TILE; }

static void dkdv_task(void *arg, size_t task, int worker)
{
    const backward_job *job = arg;
    const ac_problem *p = job->p;
    int tiles = key_tiles(p), group = p->heads_q / p->heads_kv, rows = ref_block_rows(p);
    int b = (int)(task / ((size_t)p->heads_kv * tiles)), h_kv = (int)(task / tiles % p->heads_kv);
    int j0 = (int)(task % tiles) * REF_KEY_TILE;
    int j_end = j0 + REF_KEY_TILE < p->seqlen_k ? j0 + REF_KEY_TILE : p->seqlen_k;
    ref_head hd;
    ref_head_init(&hd, p, b, h_kv * group);
    j_end = j_end < hd.stored_k ? j_end : hd.stored_k; /* THD: keys past nk_b are another sequence's */
    for (int j = j0; j < j_end; j++) { /* the sums start at 0; padding keys stay 0 */
        memset(job->t.dk + hd.kv_base + (size_t)j * hd.ld_kv, 0, (size_t)hd.d * sizeof(double));
        memset(job->t.dv + hd.v_base + (size_t)j * hd.ld_v, 0, (size_t)hd.d_v * sizeof(double));
    }
    int j1 = j_end < hd.seqlen_k ? j_end : hd.seqlen_k;
    for (int h = h_kv * group; j0 < j1 && h < (h_kv + 1) * group; h++) {
        ref_head_init(&hd, p, b, h);
        for (int i0 = 0; i0 < hd.seqlen_q; i0 += rows) {
            int i1 = i0 + rows < hd.seqlen_q ? i0 + rows : hd.seqlen_q;
            if (rows_see_keys(&hd, i0, i1, j0, j1))
                dkdv_pair(&hd, &job->t, i0, i1, j0, j1, job->p_blk[worker], job->ds_blk[worker], slope_of(job, worker));
        }
    }
}

int ref_backward_fp64(const ac_problem *p, const double *q, const double *k, const double *v, const double *o,
                      const double *lse, const double *d_o, double *dq, double *dk, double *dv, double *delta,
                      ac_err *err)
{
    int status = ac_problem_validate(p, 0, err), workers = 1;
    if (status != AC_OK)
        return status;
    if ((status = ref_dropout_check(p, "ref_backward_fp64", err)) != AC_OK)
        return status;
    if (!q || !k || !v || !o || !lse || !d_o || !dq || !dk || !dv || !delta)
        return ac_fail(err, AC_ERR_INPUT,
                       "ref_backward_fp64: NULL tensor (q, k, v, o, lse, d_o, "
                       "dq, dk, dv and delta are required)");
    if ((status = ref_thread_count(&workers, err)) != AC_OK)
        return status;
    int block = ref_block_rows(p);
    size_t elems = (size_t)block * (p->seqlen_k > REF_KEY_TILE ? p->seqlen_k : REF_KEY_TILE);
    bool slope = p->softcap != 0.0;
    size_t sizes[3] = {elems, elems, slope ? elems : 1};
    workers = ref_workers_within(workers, (slope ? 3 : 2) * elems * sizeof(double));
    backward_job job = {p, {q, k, v, o, lse, d_o, dq, dk, dv, delta}, NULL, NULL, NULL, slope};
    double ***slots[3] = {&job.p_blk, &job.ds_blk, &job.slope_blk};
    if (ref_scratch_alloc(slots, sizes, 3, workers)) {
        /* pass 2 reads D, which pass 1 writes */
        ref_parallel_for(workers, (size_t)p->batch * p->heads_q * ref_block_count(p), dq_task, &job);
        ref_parallel_for(workers, (size_t)p->batch * p->heads_kv * key_tiles(p), dkdv_task, &job);
    } else {
        status = ac_fail(err, AC_ERR_ENV, "ref_backward_fp64: out of memory for %d workers' two %d x %d blocks",
                         workers, block, p->seqlen_k);
    }
    ref_scratch_free(slots, 3, workers);
    return status;
}

/* ---- dBias: dS' summed over the bias's broadcast dimensions -------------------------
 * One task per (mb, mh, block of rows) of the bias: its entries start at 0, then
 * each summed (b, h) in order adds dS'_ij = P_ij (dP_ij - D_i) of its visible
 * pairs (the gradient of S', before any softcap's t': the bias is added after
 * it).  No two tasks write one entry, and the order is fixed. */
static int bias_dim(int n) { return n > 1 ? n : 1; }

static void dbias_task(void *arg, size_t task, int worker)
{
    const backward_job *job = arg;
    const ac_problem *p = job->p;
    double *dbias = job->t.dq; /* the dBias pass carries its output there */
    int rows = ref_block_rows(p), n_blocks = ref_block_count(p), heads = bias_dim(p->bias_heads);
    int mb = (int)(task / ((size_t)heads * n_blocks)), mh = (int)(task / n_blocks % heads);
    int i0 = (int)(task % n_blocks) * rows, i_end = i0 + rows < p->seqlen_q ? i0 + rows : p->seqlen_q;
    memset(dbias + ac_bias_index(p, mb, mh, i0, 0), 0, (size_t)(i_end - i0) * p->seqlen_k * sizeof(double));
    for (int b = p->bias_batch > 1 ? mb : 0; b < (p->bias_batch > 1 ? mb + 1 : p->batch); b++)
        for (int h = p->bias_heads > 1 ? mh : 0; h < (p->bias_heads > 1 ? mh + 1 : p->heads_q); h++) {
            ref_head hd;
            ref_head_init(&hd, p, b, h);
            int i1 = i_end < hd.seqlen_q ? i_end : hd.seqlen_q, jlo, jhi;
            if (i1 <= i0)
                continue;
            ref_block_keys(&hd, i0, i1, &jlo, &jhi);
            if (jhi <= jlo)
                continue;
            double *p_blk = job->p_blk[worker], *ds_blk = job->ds_blk[worker];
            int cols = jhi - jlo;
            ref_block_scores(&hd, job->t.q, job->t.k, i0, i1, jlo, jhi, p_blk);
            ref_block_probs_from_lse(&hd, i0, i1, jlo, jhi, job->t.lse, p_blk);
            block_grad_scores(&hd, &job->t, i0, i1, jlo, jhi, p_blk, ds_blk, NULL);
            for (int i = i0; i < i1; i++)
                for (int j = jlo; j < jhi; j++)
                    dbias[ac_bias_index(p, mb, mh, i, j)] += ds_blk[(size_t)(i - i0) * cols + (j - jlo)];
        }
}

int ref_backward_dbias_fp64(const ac_problem *p, const double *q, const double *k, const double *v, const double *lse,
                            const double *d_o, const double *delta, double *dbias, ac_err *err)
{
    int status = ac_problem_validate(p, 0, err), workers = 1;
    if (status != AC_OK || !p->bias)
        return status;
    if ((status = ref_dropout_check(p, "ref_backward_dbias_fp64", err)) != AC_OK)
        return status;
    if (!q || !k || !v || !lse || !d_o || !delta || !dbias)
        return ac_fail(err, AC_ERR_INPUT,
                       "ref_backward_dbias_fp64: NULL tensor (q, k, v, lse, d_o, delta and "
                       "dbias are required)");
    if ((status = ref_thread_count(&workers, err)) != AC_OK)
        return status;
    size_t elems = (size_t)ref_block_rows(p) * p->seqlen_k;
    size_t sizes[2] = {elems, elems};
    workers = ref_workers_within(workers, 2 * elems * sizeof(double));
    backward_job job = {p, {q, k, v, NULL, lse, d_o, dbias, NULL, NULL, (double *)delta}, NULL, NULL, NULL, false};
    double ***slots[2] = {&job.p_blk, &job.ds_blk};
    if (ref_scratch_alloc(slots, sizes, 2, workers))
        ref_parallel_for(workers, (size_t)bias_dim(p->bias_batch) * bias_dim(p->bias_heads) * ref_block_count(p),
                         dbias_task, &job);
    else
        status = ac_fail(err, AC_ERR_ENV, "ref_backward_dbias_fp64: out of memory for %d workers' blocks", workers);
    ref_scratch_free(slots, 2, workers);
    return status;
}
