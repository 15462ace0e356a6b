/* ref/scales.c — the error scales E, the denominators of the gating metric
 * scaled_err = |y - x| / (u * E).  DESIGN.md's definitions, with two terms it
 * leaves out made explicit.  With tau = eta / (2u) (eta the dtype's smallest
 * subnormal, u its unit roundoff), dPhat_ij = sum_c |dO_ic||V_jc|,
 * Dhat_i = sum_c |dO_ic||O_ic|:
 *   E_O_ic  = tau + sum_j (P_ij (1 + rho (G_ij + g_i)) + tau) |V_jc|
 *   E_dV_jc = tau + sum_i (P_ij (1 + r_ij) + tau) |dO_ic|          (i over the GQA group too)
 *   E_dQ_ic = tau + scale * sum_j (P_ij ((1 + r_ij)(dPhat_ij + Dhat_i) + R_i) + tau) |K_jc|
 *   E_dK_jc = tau + scale * sum_i (P_ij ((1 + r_ij)(dPhat_ij + Dhat_i) + R_i) + tau) |Q_ic|
 * The sums run over visible (i, j) pairs only: a masked pair is an exact zero
 * in any kernel, so it carries no rounding error.
 *
 * The added terms, and why:
 * - the leading tau: the output's own rounding.  Where an output lands in the
 *   subnormals (dK of a barely-attended key in f16) the correctly rounded value
 *   is off by eta/2 = u * tau, whatever E the computation had.  Added to every
 *   element whose E is not an exact zero.
 * - the S terms, rho = u_f32 / u: every fused kernel computes S = scale QK^T in
 *   f32, a dot product of d exact products, so S_ij errs by up to u_f32 G_ij,
 *   G_ij = d |scale| sum_c |Q_ic||K_jc| (Higham's gamma_d bound; reached when
 *   the products are alike, as "increasing" scores make them).  Softmax turns it into a relative error of P_ij of
 *   G_ij + g_i, g_i = sum_k P_ik G_ik (the normalisation's share).  The
 *   backward recomputes P from the stored f32 LSE, whose rounding adds |L_i|:
 *   r_ij = rho (G_ij + g_i + |L_i|).  That error reaches dS through P, and
 *   through D computed from the forward's O: R_i = sum_k P_ik r_ik dPhat_ik.
 *   Negligible for f16/bf16 at ordinary scores (rho = 2^-13, 2^-16), dominant
 *   for f32 kernels and for scores in the thousands; without it a correct f32
 *   kernel reads up to 485 on scores x16.
 * Computed like the forward, per (b, h) and per block of query rows, the
 * products as dgemms on absolute values.  P comes from the reference LSE; a
 * scale is itself a double computation of nonnegative terms, accurate to
 * ~d * 2^-53. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fp64_block.h"
#include "parallel.h"
#include "ref.h"

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
    double *abs_k, *abs_v;          /* (Nk, d) */
} scale_buffers;

static void abs_rows(const double *src, size_t ld, int rows, int d, double *dst)
{
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < d; c++)
            dst[(size_t)r * d + c] = fabs(src[(size_t)r * ld + c]);
}

/* prob <- P; weight_o, weight_v as in the header, 0 where masked; rel_err <-
 * r_ij, the backward's relative error of P in units of u. */
static void block_weights_o(const ref_head *hd, const scale_tensors *t, int i0, int i1, int jlo,
                            int jhi, scale_buffers *buf)
{
    int rows = i1 - i0, cols = jhi - jlo, d = hd->d;
    size_t n = (size_t)rows * (size_t)cols;
    ref_block_scores(hd, t->q, t->k, i0, i1, jlo, jhi, buf->prob);
    for (size_t e = 0; e < n; e++) /* ref_block_scores marks every masked pair with -inf */
        buf->weight_o[e] = buf->prob[e] == -INFINITY ? 0.0 : 1.0;
    ref_block_probs_from_lse(hd, i0, i1, jlo, jhi, t->lse, buf->prob);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, d, d * fabs(hd->p->scale),
                buf->abs_q, d, buf->abs_k + (size_t)jlo * d, d, 0.0, buf->rel_err, cols);
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
static void block_weights_grad(const ref_head *hd, int i0, int i1, int jlo, int jhi,
                               const scale_tensors *t, scale_buffers *buf)
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

static void scales_block(const ref_head *hd, const scale_tensors *t, int i0, int i1,
                         scale_buffers *buf)
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
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, cols, 1.0, buf->weight_o, cols,
                abs_v, d, 0.0, t->e_o + q_at, ld_q);
    if (!grads)
        return;
    size_t kv_at = hd->kv_base + (size_t)jlo * hd->ld_kv;
    int ld_kv = (int)hd->ld_kv;
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, d, rows, 1.0, buf->weight_v, cols,
                buf->abs_do, d, 1.0, t->e_dv + kv_at, ld_kv);
    block_weights_grad(hd, i0, i1, jlo, jhi, t, buf);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, cols, scale, buf->weight_g, cols,
                abs_k, d, 0.0, t->e_dq + q_at, ld_q);
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, d, rows, scale, buf->weight_g, cols,
                buf->abs_q, d, 1.0, t->e_dk + kv_at, ld_kv);
}

static void scales_head(const ac_problem *p, const scale_tensors *t, int b, int h, int block,
                        scale_buffers *buf)
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

int ref_error_scales(const ac_problem *p, ac_dtype t, const double *q, const double *k,
                     const double *v, const double *o, const double *lse, const double *d_o,
                     double *e_o, double *e_dq, double *e_dk, double *e_dv, ac_err *err)
{
    int status = ac_problem_validate(p, 0, err);
    if (status != AC_OK)
        return status;
    if ((unsigned)t >= AC_DTYPE_COUNT)
        return ac_fail(err, AC_ERR_INPUT, "ref_error_scales: unknown dtype %d", (int)t);
    if (!q || !k || !v || !o || !lse || !e_o)
        return ac_fail(err, AC_ERR_INPUT, "ref_error_scales: NULL tensor (q, k, v, o, lse and e_o are required)");
    /* d_o decides: NULL skips the backward scales (e_dq, e_dk, e_dv are then
     * ignored); given, all three outputs are needed. */
    bool grads = d_o != NULL;
    if (grads && !(e_dq && e_dk && e_dv))
        return ac_fail(err, AC_ERR_INPUT, "ref_error_scales: d_o given but e_dq, e_dk or e_dv is NULL "
                       "(pass d_o = NULL to skip the backward scales)");
    if (!grads)
        e_dq = e_dk = e_dv = NULL;
    int block = ref_block_rows(p);
    scale_buffers buf;
    if (!alloc_buffers(p, block, &buf)) {
        free_buffers(&buf);
        return ac_fail(err, AC_ERR_ENV, "ref_error_scales: out of memory for %d x %d blocks",
                       block, p->seqlen_k);
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

/* ---- the LSE error scale -----------------------------------------------------
 * LSE's error is not a dtype rounding: whatever the input dtype, a fused
 * kernel computes S = scale * Q K^T in f32 from dtype inputs and
 * LSE = m + log(l) in f32, so
 *   E_lse_i = 1 + |LSE_i| + (d + 2) G_i,  G_i = |scale| max_{j visible} sum_c |Q_ic||K_jc|
 * with LSE's scaled error |y - x| / (u_f32 * E_lse):
 *   - each S_ij is an f32 dot product of d exact products: it errs by up to
 *     d u_f32 |scale| sum_c |Q_ic||K_jc| (Higham's gamma_d; reached when the
 *     products are alike, as "increasing" scores make them), and LSE is
 *     1-Lipschitz in the max norm of S: the d G_i;
 *   - the online softmax rescales l by exp(m_old - m_new), an exp of an f32
 *     argument of size |m_old - m_new|; the changes of m sum to at most 2 G_i:
 *     the 2 G_i;
 *   - l >= 1 (the maximum's own term), so log(l) errs by about u_f32 absolutely
 *     (times the accumulation factor over the Nk terms of l): the 1;
 *   - the final m + log(l) rounds relative to |LSE|: the |LSE_i|.
 * The accumulation factor over Nk is what the budgets' growth law allows for.  Rows
 * with no visible key (LSE exactly -inf) and padding rows get E = 0.
 *
 * Computed per (b, h, block of LSE_BLOCK_ROWS rows) in parallel: G of the
 * block's visible key range as one dgemm of |Q| and |K| (|K| packed once per
 * (b, h_kv)), then the row maxima over the visible keys. */

#define LSE_BLOCK_ROWS 64

typedef struct {
    const ac_problem *p;
    const double *q, *k, *lse;
    double *e_lse, *abs_k; /* abs_k: (B, Hkv, Nk, d) */
    double **abs_q, **g;   /* per worker: (LSE_BLOCK_ROWS, d), (LSE_BLOCK_ROWS, Nk) */
    int row_blocks;
} lse_job;

static void lse_pack_abs_k(void *arg, size_t task, int worker)
{
    (void)worker;
    const lse_job *job = arg;
    const ac_problem *p = job->p;
    int b = (int)(task / p->heads_kv), h_kv = (int)(task % p->heads_kv);
    ref_head hd;
    ref_head_init(&hd, p, b, h_kv * (p->heads_q / p->heads_kv));
    abs_rows(job->k + hd.kv_base, hd.ld_kv, p->seqlen_k, p->head_dim,
             job->abs_k + task * (size_t)p->seqlen_k * p->head_dim);
}

/* The largest g_row[j - jlo] over the visible keys j of row i; -1 when none. */
static double row_visible_max(const ref_head *hd, int i, int jlo, const double *g_row)
{
    const ac_problem *p = hd->p;
    int lo, hi;
    ac_visible_range(p, hd->b, i, &lo, &hi);
    double best = -1.0;
    for (int j = lo; j < hi; j++)
        if ((!p->dense_mask || ac_visible(p, hd->b, hd->h, i, j)) && g_row[j - jlo] > best)
            best = g_row[j - jlo];
    return best;
}

static void lse_block(void *arg, size_t task, int worker)
{
    const lse_job *job = arg;
    const ac_problem *p = job->p;
    ref_head hd;
    ref_head_init(&hd, p, (int)(task / job->row_blocks / p->heads_q), (int)(task / job->row_blocks % p->heads_q));
    int i0 = (int)(task % job->row_blocks) * LSE_BLOCK_ROWS, d = p->head_dim;
    int i_end = i0 + LSE_BLOCK_ROWS < p->seqlen_q ? i0 + LSE_BLOCK_ROWS : p->seqlen_q;
    int i1 = i_end < hd.seqlen_q ? i_end : hd.seqlen_q, jlo, jhi;
    for (int i = i0; i < i_end; i++)
        job->e_lse[ac_lse_index(p, hd.b, hd.h, i)] = 0.0;
    if (i1 <= i0)
        return;
    ref_block_keys(&hd, i0, i1, &jlo, &jhi);
    if (jhi <= jlo)
        return;
    int cols = jhi - jlo;
    double *abs_q = job->abs_q[worker], *g = job->g[worker], scale = fabs(p->scale);
    const double *abs_k = job->abs_k + ((size_t)hd.b * p->heads_kv + hd.h_kv) * p->seqlen_k * d;
    abs_rows(job->q + hd.q_base + (size_t)i0 * hd.ld_q, hd.ld_q, i1 - i0, d, abs_q);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i1 - i0, cols, d, 1.0, abs_q, d,
                abs_k + (size_t)jlo * d, d, 0.0, g, cols);
    for (int i = i0; i < i1; i++) {
        double g_max = row_visible_max(&hd, i, jlo, g + (size_t)(i - i0) * cols);
        size_t at = ac_lse_index(p, hd.b, hd.h, i);
        if (g_max >= 0.0 && isfinite(job->lse[at]))
            job->e_lse[at] = 1.0 + fabs(job->lse[at]) + (d + 2.0) * scale * g_max;
    }
}

static void lse_free(lse_job *job, int workers)
{
    for (int w = 0; w < workers; w++) {
        free(job->abs_q ? job->abs_q[w] : NULL);
        free(job->g ? job->g[w] : NULL);
    }
    free(job->abs_q);
    free(job->g);
    free(job->abs_k);
}

static bool lse_alloc(lse_job *job, int workers)
{
    const ac_problem *p = job->p;
    size_t d = (size_t)p->head_dim, nk = (size_t)p->seqlen_k;
    job->abs_k = malloc(((size_t)p->batch * p->heads_kv * nk * d + 1) * sizeof(double));
    job->abs_q = calloc((size_t)workers, sizeof(double *));
    job->g = calloc((size_t)workers, sizeof(double *));
    bool ok = job->abs_k && job->abs_q && job->g;
    for (int w = 0; ok && w < workers; w++) {
        job->abs_q[w] = malloc(LSE_BLOCK_ROWS * d * sizeof(double));
        job->g[w] = malloc((LSE_BLOCK_ROWS * nk + 1) * sizeof(double));
        ok = job->abs_q[w] && job->g[w];
    }
    return ok;
}

int ref_lse_error_scale(const ac_problem *p, const double *q, const double *k, const double *lse,
                        double *e_lse, ac_err *err)
{
    int status = ac_problem_validate(p, 0, err), workers = 1;
    if (status != AC_OK)
        return status;
    if (!q || !k || !lse || !e_lse)
        return ac_fail(err, AC_ERR_INPUT, "ref_lse_error_scale: NULL tensor (q, k, lse and e_lse are required)");
    if ((status = ref_thread_count(&workers, err)) != AC_OK)
        return status;
    workers = ref_workers_within(workers, (size_t)LSE_BLOCK_ROWS * p->seqlen_k * sizeof(double));
    lse_job job = {p, q, k, lse, e_lse, NULL, NULL, NULL, (p->seqlen_q + LSE_BLOCK_ROWS - 1) / LSE_BLOCK_ROWS};
    if (lse_alloc(&job, workers)) {
        ref_parallel_for(workers, (size_t)p->batch * p->heads_kv, lse_pack_abs_k, &job);
        ref_parallel_for(workers, (size_t)p->batch * p->heads_q * job.row_blocks, lse_block, &job);
    } else {
        status = ac_fail(err, AC_ERR_ENV, "ref_lse_error_scale: out of memory for %d x %d blocks",
                         LSE_BLOCK_ROWS, p->seqlen_k);
    }
    lse_free(&job, workers);
    return status;
}
