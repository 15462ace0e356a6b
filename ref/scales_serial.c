/* ref/scales_serial.c — the error scales as ref/scales.c computed them before
 * they were threaded: one block of rows after another, dK and dV summed in
 * place.  Compiled into the tests only, the oracle the parallel version must
 * match to rounding (test_scales.c).  The definitions are in scales.c. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fp64_block.h"
#include "ref.h"
#include "scales_serial.h"

/* The block height the fp64 stages used then: >= 128 rows, taller while a
 * block stays within 2^21 elements. */
static int serial_block_rows(const ac_problem *p)
{
    size_t rows = ((size_t)1 << 21) / (size_t)p->seqlen_k;
    if (rows < 128)
        rows = 128;
    return rows < (size_t)p->seqlen_q ? (int)rows : p->seqlen_q;
}

typedef struct {
    const double *q, *k, *v, *o, *lse, *d_o;
    double *e_o, *e_dq, *e_dk, *e_dv;
    double tau; /* eta / 2u */
    double rho; /* u_f32 / u */
} scale_tensors;

/* Block buffers: probabilities, the O, dV and dQ/dK weights, the score
 * magnitudes G (then the backward's relative error r of P), and |Q|, |dO|,
 * |O| of the block's rows and |K|, |V| of the head, packed (row stride d) so
 * the dgemms read them like the originals. */
typedef struct {
    double *prob, *weight_o, *weight_v, *weight_g, *rel_err;
    double *abs_q, *abs_do, *abs_o; /* (block, d) */
    double *abs_k, *abs_v; /* (Nk, d) */
} scale_buffers;

static void abs_rows(const double *src, size_t ld, int rows, int d, double *dst)
{
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < d; c++)
            dst[(size_t)r * d + c] = fabs(src[(size_t)r * ld + c]);
}

/* prob <- P; weight_o, weight_v as in the header, 0 where masked; rel_err <-
 * r_ij, the backward's relative error of P in units of u. */
static void block_weights_o(const ref_head *hd, const scale_tensors *t, int i0, int i1, int jlo, int jhi,
                            scale_buffers *buf)
{
    int rows = i1 - i0, cols = jhi - jlo, d = hd->d;
    size_t n = (size_t)rows * (size_t)cols;
    ref_block_scores(hd, t->q, t->k, i0, i1, jlo, jhi, buf->prob);
    for (size_t e = 0; e < n; e++) /* ref_block_scores marks every masked pair with -inf */
        buf->weight_o[e] = buf->prob[e] == -INFINITY ? 0.0 : 1.0;
    ref_block_probs_from_lse(hd, i0, i1, jlo, jhi, t->lse, buf->prob);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, d, d * fabs(hd->p->scale), buf->abs_q, d,
                buf->abs_k + (size_t)jlo * d, d, 0.0, buf->rel_err, cols);
    for (int r = 0; r < rows; r++) {
        size_t at = (size_t)r * cols;
        double *vis = buf->weight_o + at, *wv = buf->weight_v + at, *g = buf->rel_err + at;
        const double *prob = buf->prob + at;
        double g_row = 0.0;
        for (int j = 0; j < cols; j++)
            g_row += vis[j] != 0.0 ? prob[j] * g[j] : 0.0;
        double lse = t->lse[ac_lse_index(hd->p, hd->b, hd->h, i0 + r)];
        double lse_mag = isfinite(lse) ? fabs(lse) : 0.0;
        for (int j = 0; j < cols; j++) {
            if (vis[j] == 0.0) {
                wv[j] = g[j] = 0.0;
                continue;
            }
            vis[j] = prob[j] * (1.0 + t->rho * (g[j] + g_row)) + t->tau;
            g[j] = t->rho * (g[j] + g_row + lse_mag);
            wv[j] = prob[j] * (1.0 + g[j]) + t->tau;
        }
    }
}

/* weight_g <- P ((1 + r)(dPhat + Dhat) + R) + tau where visible, 0 where masked. */
static void block_weights_grad(const ref_head *hd, int i0, int i1, int jlo, int jhi, const scale_tensors *t,
                               scale_buffers *buf)
{
    int rows = i1 - i0, cols = jhi - jlo, d = hd->d;
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, d, 1.0, buf->abs_do, d,
                buf->abs_v + (size_t)jlo * d, d, 0.0, buf->weight_g, cols);
    for (int r = 0; r < rows; r++) {
        double delta_hat = 0.0, r_row = 0.0;
        for (int c = 0; c < d; c++)
            delta_hat += buf->abs_do[(size_t)r * d + c] * buf->abs_o[(size_t)r * d + c];
        size_t at = (size_t)r * cols;
        double *w = buf->weight_g + at;
        const double *prob = buf->prob + at, *vis = buf->weight_o + at, *rel = buf->rel_err + at;
        for (int j = 0; j < cols; j++)
            r_row += vis[j] != 0.0 ? prob[j] * rel[j] * w[j] : 0.0;
        for (int j = 0; j < cols; j++)
            w[j] = vis[j] != 0.0 ? prob[j] * ((1.0 + rel[j]) * (w[j] + delta_hat) + r_row) + t->tau : 0.0;
    }
}

static void scales_block(const ref_head *hd, const scale_tensors *t, int i0, int i1, scale_buffers *buf)
{
    int jlo, jhi;
    ref_block_keys(hd, i0, i1, &jlo, &jhi);
    if (jhi <= jlo) { /* no visible pair: the outputs are exact zeros */
        ref_zero_q_rows(hd, t->e_o, i0, i1);
        if (t->e_dq)
            ref_zero_q_rows(hd, t->e_dq, i0, i1);
        return;
    }
    int rows = i1 - i0, cols = jhi - jlo, d = hd->d, ld_q = (int)hd->ld_q;
    size_t q_at = hd->q_base + (size_t)i0 * hd->ld_q;
    double scale = fabs(hd->p->scale);
    bool grads = t->e_dq != NULL;
    abs_rows(t->q + q_at, hd->ld_q, rows, d, buf->abs_q);
    block_weights_o(hd, t, i0, i1, jlo, jhi, buf);
    if (grads) {
        abs_rows(t->d_o + q_at, hd->ld_q, rows, d, buf->abs_do);
        abs_rows(t->o + q_at, hd->ld_q, rows, d, buf->abs_o);
    }
    const double *abs_k = buf->abs_k + (size_t)jlo * d, *abs_v = buf->abs_v + (size_t)jlo * d;
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, cols, 1.0, buf->weight_o, cols, abs_v, d, 0.0,
                t->e_o + q_at, ld_q);
    if (!grads)
        return;
    size_t kv_at = hd->kv_base + (size_t)jlo * hd->ld_kv;
    int ld_kv = (int)hd->ld_kv;
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, d, rows, 1.0, buf->weight_v, cols, buf->abs_do, d, 1.0,
                t->e_dv + kv_at, ld_kv);
    block_weights_grad(hd, i0, i1, jlo, jhi, t, buf);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, cols, scale, buf->weight_g, cols, abs_k, d, 0.0,
                t->e_dq + q_at, ld_q);
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, d, rows, scale, buf->weight_g, cols, buf->abs_q, d, 1.0,
                t->e_dk + kv_at, ld_kv);
}

static void scales_head(const ac_problem *p, const scale_tensors *t, int b, int h, int block, scale_buffers *buf)
{
    ref_head hd;
    ref_head_init(&hd, p, b, h);
    abs_rows(t->k + hd.kv_base, hd.ld_kv, hd.seqlen_k, hd.d, buf->abs_k);
    abs_rows(t->v + hd.kv_base, hd.ld_kv, hd.seqlen_k, hd.d, buf->abs_v);
    for (int i0 = 0; i0 < hd.seqlen_q; i0 += block) {
        int i1 = i0 + block < hd.seqlen_q ? i0 + block : hd.seqlen_q;
        scales_block(&hd, t, i0, i1, buf);
    }
    ref_zero_q_rows(&hd, t->e_o, hd.seqlen_q, p->seqlen_q); /* padding rows */
    if (t->e_dq)
        ref_zero_q_rows(&hd, t->e_dq, hd.seqlen_q, p->seqlen_q);
}

static void free_buffers(scale_buffers *buf)
{
    free(buf->prob);
    free(buf->weight_o);
    free(buf->weight_g);
    free(buf->weight_v);
    free(buf->rel_err);
    free(buf->abs_q);
    free(buf->abs_do);
    free(buf->abs_o);
    free(buf->abs_k);
    free(buf->abs_v);
}

static bool alloc_buffers(const ac_problem *p, int block, scale_buffers *buf)
{
    size_t blk = (size_t)block * p->seqlen_k, rows = (size_t)block * p->head_dim;
    size_t keys = (size_t)p->seqlen_k * p->head_dim;
    buf->prob = malloc(blk * sizeof(double));
    buf->weight_o = malloc(blk * sizeof(double));
    buf->weight_g = malloc(blk * sizeof(double));
    buf->weight_v = malloc(blk * sizeof(double));
    buf->rel_err = malloc(blk * sizeof(double));
    buf->abs_q = malloc(rows * sizeof(double));
    buf->abs_do = malloc(rows * sizeof(double));
    buf->abs_o = malloc(rows * sizeof(double));
    buf->abs_k = malloc(keys * sizeof(double));
    buf->abs_v = malloc(keys * sizeof(double));
    return buf->prob && buf->weight_o && buf->weight_g && buf->weight_v && buf->rel_err && buf->abs_q && buf->abs_do &&
        buf->abs_o && buf->abs_k && buf->abs_v;
}

/* The output's own rounding, eta/2 = u * tau, on every element that is not an
 * exact zero of the computation (E = 0: a padding row, a fully masked row). */
static void add_rounding_floor(double *e, size_t n, double tau)
{
    for (size_t i = 0; i < n; i++)
        if (e[i] > 0.0)
            e[i] += tau;
}

int ref_error_scales_serial(const ac_problem *p, ac_dtype t, const double *q, const double *k, const double *v,
                            const double *o, const double *lse, const double *d_o, double *e_o, double *e_dq,
                            double *e_dk, double *e_dv, ac_err *err)
{
    int status = ac_problem_validate(p, 0, err);
    if (status != AC_OK)
        return status;
    if ((unsigned)t >= AC_DTYPE_COUNT)
        return ac_fail(err, AC_ERR_INPUT, "ref_error_scales_serial: unknown dtype %d", (int)t);
    if (!q || !k || !v || !o || !lse || !e_o)
        return ac_fail(err, AC_ERR_INPUT,
                       "ref_error_scales_serial: NULL tensor (q, k, v, o, lse and e_o are required)");
    /* d_o decides: NULL skips the backward scales (e_dq, e_dk, e_dv are then
     * ignored); given, all three outputs are needed. */
    bool grads = d_o != NULL;
    if (grads && !(e_dq && e_dk && e_dv))
        return ac_fail(err, AC_ERR_INPUT,
                       "ref_error_scales_serial: d_o given but e_dq, e_dk or e_dv is NULL "
                       "(pass d_o = NULL to skip the backward scales)");
    if (!grads)
        e_dq = e_dk = e_dv = NULL;
    int block = serial_block_rows(p);
    scale_buffers buf;
    if (!alloc_buffers(p, block, &buf)) {
        free_buffers(&buf);
        return ac_fail(err, AC_ERR_ENV, "ref_error_scales_serial: out of memory for %d x %d blocks", block,
                       p->seqlen_k);
    }
    if (grads) {
        memset(e_dk, 0, ac_kv_elems(p) * sizeof *e_dk);
        memset(e_dv, 0, ac_kv_elems(p) * sizeof *e_dv);
    }
    double tau = ac_min_subnormal(t) / (2.0 * ac_unit_roundoff(t));
    double rho = ac_unit_roundoff(AC_F32) / ac_unit_roundoff(t);
    scale_tensors ts = {q, k, v, o, lse, d_o, e_o, e_dq, e_dk, e_dv, tau, rho};
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < p->heads_q; h++)
            scales_head(p, &ts, b, h, block, &buf);
    free_buffers(&buf);
    add_rounding_floor(e_o, ac_q_elems(p), tau);
    if (grads) {
        add_rounding_floor(e_dq, ac_q_elems(p), tau);
        add_rounding_floor(e_dk, ac_kv_elems(p), tau);
        add_rounding_floor(e_dv, ac_kv_elems(p), tau);
    }
    return AC_OK;
}
