/* ref/backward.c — the fp64 reference backward: dQ, dK, dV and D = rowsum(dO * O).
 *
 * The standard attention backward, with P recomputed from the forward's LSE
 * (P = exp(S - LSE), no second softmax), per (b, h) and per block of query rows:
 *   D_i  = sum_c dO_ic O_ic
 *   dP   = dO V^T                 (dgemm)
 *   dS   = P * (dP - D)           (masked entries: P = 0, so dS = 0)
 *   dQ   = scale * dS K           (dgemm, written in place)
 *   dK  += scale * dS^T Q         (dgemm, beta = 1: summed over row blocks and
 *   dV  += P^T dO                  over the query heads of a GQA group)
 * A row with no visible key (LSE = -inf) contributes nothing and gets dQ = 0. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fp64_block.h"
#include "ref.h"

typedef struct {
    const double *q, *k, *v, *o, *lse, *d_o;
    double *dq, *dk, *dv, *delta;
} backward_tensors;

static void block_delta(const ref_head *hd, const backward_tensors *t, int i0, int i1)
{
    for (int i = i0; i < i1; i++) {
        const double *o_row = t->o + hd->q_base + (size_t)i * hd->ld_q;
        const double *do_row = t->d_o + hd->q_base + (size_t)i * hd->ld_q;
        double sum = 0.0;
        for (int c = 0; c < hd->d; c++)
            sum += do_row[c] * o_row[c];
        t->delta[ac_lse_index(hd->p, hd->b, hd->h, i)] = sum;
    }
}

/* p_blk holds P on entry; dp_blk receives dS. */
static void block_grad_scores(const ref_head *hd, const backward_tensors *t, int i0, int i1,
                              int jlo, int jhi, const double *p_blk, double *dp_blk)
{
    int rows = i1 - i0, cols = jhi - jlo;
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, hd->d, 1.0,
                t->d_o + hd->q_base + (size_t)i0 * hd->ld_q, (int)hd->ld_q,
                t->v + hd->kv_base + (size_t)jlo * hd->ld_kv, (int)hd->ld_kv, 0.0, dp_blk, cols);
    for (int i = i0; i < i1; i++) {
        double delta_i = t->delta[ac_lse_index(hd->p, hd->b, hd->h, i)];
        const double *p_row = p_blk + (size_t)(i - i0) * cols;
        double *ds_row = dp_blk + (size_t)(i - i0) * cols;
        for (int j = 0; j < cols; j++) /* a masked entry stays an exact 0, whatever dP holds */
            ds_row[j] = p_row[j] != 0.0 ? p_row[j] * (ds_row[j] - delta_i) : 0.0;
    }
}

static void backward_block(const ref_head *hd, const backward_tensors *t, int i0, int i1,
                           double *p_blk, double *ds_blk)
{
    block_delta(hd, t, i0, i1);
    int jlo, jhi;
    ref_block_keys(hd, i0, i1, &jlo, &jhi);
    if (jhi <= jlo) {
        ref_zero_q_rows(hd, t->dq, i0, i1);
        return;
    }
    int rows = i1 - i0, cols = jhi - jlo;
    ref_block_scores(hd, t->q, t->k, i0, i1, jlo, jhi, p_blk);
    ref_block_probs_from_lse(hd, i0, i1, jlo, jhi, t->lse, p_blk);
    block_grad_scores(hd, t, i0, i1, jlo, jhi, p_blk, ds_blk);

    double scale = hd->p->scale;
    const double *q_rows = t->q + hd->q_base + (size_t)i0 * hd->ld_q;
    const double *do_rows = t->d_o + hd->q_base + (size_t)i0 * hd->ld_q;
    size_t kv_at = hd->kv_base + (size_t)jlo * hd->ld_kv;
    int ld_q = (int)hd->ld_q, ld_kv = (int)hd->ld_kv;
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd->d, cols, scale, ds_blk, cols,
                t->k + kv_at, ld_kv, 0.0, t->dq + hd->q_base + (size_t)i0 * hd->ld_q, ld_q);
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hd->d, rows, scale, ds_blk, cols,
                q_rows, ld_q, 1.0, t->dk + kv_at, ld_kv);
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hd->d, rows, 1.0, p_blk, cols,
                do_rows, ld_q, 1.0, t->dv + kv_at, ld_kv);
}

static void backward_head(const ac_problem *p, const backward_tensors *t, int b, int h,
                          int block, double *p_blk, double *ds_blk)
{
    ref_head hd;
    ref_head_init(&hd, p, b, h);
    for (int i0 = 0; i0 < hd.seqlen_q; i0 += block) {
        int i1 = i0 + block < hd.seqlen_q ? i0 + block : hd.seqlen_q;
        backward_block(&hd, t, i0, i1, p_blk, ds_blk);
    }
    ref_zero_q_rows(&hd, t->dq, hd.seqlen_q, p->seqlen_q); /* padding rows */
    for (int i = hd.seqlen_q; i < p->seqlen_q; i++)
        t->delta[ac_lse_index(p, b, h, i)] = 0.0;
}

int ref_backward_fp64(const ac_problem *p, const double *q, const double *k, const double *v,
                      const double *o, const double *lse, const double *d_o,
                      double *dq, double *dk, double *dv, double *delta, ac_err *err)
{
    int status = ac_problem_validate(p, 0, err);
    if (status != AC_OK)
        return status;
    if (!q || !k || !v || !o || !lse || !d_o || !dq || !dk || !dv || !delta)
        return ac_fail(err, AC_ERR_INPUT, "ref_backward_fp64: NULL tensor (q, k, v, o, lse, d_o, "
                       "dq, dk, dv and delta are required)");
    int block = ref_block_rows(p);
    double *p_blk = malloc((size_t)block * p->seqlen_k * sizeof *p_blk);
    double *ds_blk = malloc((size_t)block * p->seqlen_k * sizeof *ds_blk);
    if (!p_blk || !ds_blk) {
        free(p_blk);
        free(ds_blk);
        return ac_fail(err, AC_ERR_ENV, "ref_backward_fp64: out of memory for two %d x %d blocks",
                       block, p->seqlen_k);
    }
    memset(dk, 0, ac_kv_elems(p) * sizeof *dk);
    memset(dv, 0, ac_kv_elems(p) * sizeof *dv);
    backward_tensors t = {q, k, v, o, lse, d_o, dq, dk, dv, delta};
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < p->heads_q; h++)
            backward_head(p, &t, b, h, block, p_blk, ds_blk);
    free(p_blk);
    free(ds_blk);
    return AC_OK;
}
