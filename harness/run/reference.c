/* harness/run/reference.c — the reference bundle of one case: the fp64 forward
 * (and backward), the error scales of every output, the same-dtype naive
 * baseline, the MPFR certification, all allocated once per case.
 *
 * The LSE error scale is defined here (ref/ has none: LSE's error is not a
 * dtype rounding).  Whatever the input dtype, a fused kernel computes
 * S = scale * Q K^T in f32 from dtype inputs and LSE = m + log(l) in f32, so
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
 * with no visible key (LSE exactly -inf) and padding rows get E = 0. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness/run/reference.h"

#define LSE_BLOCK_ROWS 64

/* max over the visible keys of row i of g_row[j] = sum_c |Q_ic||K_jc|; -1 when none. */
static double row_visible_max(const ac_problem *p, int b, int h, int i, const double *g_row)
{
    int lo, hi;
    ac_visible_range(p, b, i, &lo, &hi);
    double best = -1.0;
    for (int j = lo; j < hi; j++)
        if ((!p->dense_mask || ac_visible(p, b, h, i, j)) && g_row[j] > best)
            best = g_row[j];
    return best;
}

static void abs_rows(const ac_problem *p, const double *src, int heads, int seqlen, int b, int h,
                     int s0, int s1, double *dst)
{
    int d = p->head_dim;
    for (int s = s0; s < s1; s++)
        for (int c = 0; c < d; c++)
            dst[(size_t)(s - s0) * d + c] = fabs(src[ac_index(p, heads, seqlen, b, h, s, c)]);
}

typedef struct {
    double *abs_q, *abs_k, *g; /* (block, d), (Nk, d), (block, Nk) */
} lse_buffers;

static void lse_scale_head(const ac_problem *p, const double *q, const double *k, const double *lse,
                           int b, int h, lse_buffers *buf, double *e_lse)
{
    int nq = ac_seqlen_q_of(p, b), nk = ac_seqlen_k_of(p, b), d = p->head_dim;
    double scale = fabs(p->scale);
    for (int i = 0; i < p->seqlen_q; i++)
        e_lse[ac_lse_index(p, b, h, i)] = 0.0;
    if (nk == 0)
        return;
    abs_rows(p, k, p->heads_kv, p->seqlen_k, b, ac_kv_head_of(p, h), 0, nk, buf->abs_k);
    for (int i0 = 0; i0 < nq; i0 += LSE_BLOCK_ROWS) {
        int i1 = i0 + LSE_BLOCK_ROWS < nq ? i0 + LSE_BLOCK_ROWS : nq;
        abs_rows(p, q, p->heads_q, p->seqlen_q, b, h, i0, i1, buf->abs_q);
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i1 - i0, nk, d, 1.0, buf->abs_q, d,
                    buf->abs_k, d, 0.0, buf->g, nk);
        for (int i = i0; i < i1; i++) {
            double g_max = row_visible_max(p, b, h, i, buf->g + (size_t)(i - i0) * nk);
            size_t at = ac_lse_index(p, b, h, i);
            if (g_max >= 0.0 && isfinite(lse[at]))
                e_lse[at] = 1.0 + fabs(lse[at]) + (d + 2.0) * scale * g_max;
        }
    }
}

int ac_lse_error_scale(const ac_problem *p, const double *q, const double *k, const double *lse,
                       double *e_lse, ac_err *err)
{
    int status = ac_problem_validate(p, 0, err);
    if (status != AC_OK)
        return status;
    int block = p->seqlen_q < LSE_BLOCK_ROWS ? p->seqlen_q : LSE_BLOCK_ROWS;
    size_t d = (size_t)p->head_dim, nk = (size_t)p->seqlen_k;
    lse_buffers buf = {malloc(block * d * sizeof(double)), malloc(nk * d * sizeof(double)),
                       malloc((size_t)block * nk * sizeof(double))};
    if (!buf.abs_q || !buf.abs_k || !buf.g)
        status = ac_fail(err, AC_ERR_ENV, "LSE error scale: out of memory for a %d x %d block",
                         block, p->seqlen_k);
    for (int b = 0; status == AC_OK && b < p->batch; b++)
        for (int h = 0; h < p->heads_q; h++)
            lse_scale_head(p, q, k, lse, b, h, &buf, e_lse);
    free(buf.abs_q);
    free(buf.abs_k);
    free(buf.g);
    return status;
}

/* ---- the bundle --------------------------------------------------------- */

static bool alloc_all(double **slots[], const size_t sizes[], size_t n)
{
    bool ok = true;
    for (size_t s = 0; s < n; s++) {
        *slots[s] = malloc((sizes[s] ? sizes[s] : 1) * sizeof(double));
        ok &= *slots[s] != NULL;
    }
    return ok;
}

static int alloc_reference(const ac_problem *p, bool backward, ac_reference *r, ac_err *err)
{
    size_t nq = ac_q_elems(p), nkv = ac_kv_elems(p), nl = ac_lse_elems(p);
    double **fwd[] = {&r->o, &r->lse, &r->e_o, &r->e_lse, &r->naive_o, &r->naive_lse};
    size_t fwd_n[] = {nq, nl, nq, nl, nq, nl};
    double **bwd[] = {&r->dq, &r->dk, &r->dv, &r->delta, &r->e_dq, &r->e_dk, &r->e_dv,
                      &r->naive_dq, &r->naive_dk, &r->naive_dv};
    size_t bwd_n[] = {nq, nkv, nkv, nl, nq, nkv, nkv, nq, nkv, nkv};
    bool ok = alloc_all(fwd, fwd_n, sizeof fwd_n / sizeof fwd_n[0]);
    if (backward)
        ok &= alloc_all(bwd, bwd_n, sizeof bwd_n / sizeof bwd_n[0]);
    if (!ok)
        return ac_fail(err, AC_ERR_ENV, "reference: out of memory (%zu Q-like and %zu K-like elements, "
                       "about %zu doubles)", nq, nkv, 3 * nq + 3 * nl + (backward ? 3 * nq + 6 * nkv + nl : 0));
    return AC_OK;
}

static int make_backward(const ac_inputs *in, ac_reference *r, ac_err *err)
{
    const ac_problem *p = &in->p;
    ac_dtype t = in->c.dtype;
    int status = ref_backward_fp64(p, in->qd, in->kd, in->vd, r->o, r->lse, in->d_od, r->dq, r->dk,
                                   r->dv, r->delta, err);
    if (status == AC_OK)
        status = ref_naive_backward(p, t, in->qd, in->kd, in->vd, r->naive_o, r->naive_lse,
                                    in->d_od, r->naive_dq, r->naive_dk, r->naive_dv, err);
    return status;
}

static int make_all(const ac_inputs *in, bool backward, int cert_rows, ac_reference *r, ac_err *err)
{
    const ac_problem *p = &in->p;
    ac_dtype t = in->c.dtype;
    int status = ref_forward_fp64(p, in->qd, in->kd, in->vd, r->o, r->lse, err);
    if (status == AC_OK)
        status = ref_naive_forward(p, t, in->qd, in->kd, in->vd, r->naive_o, r->naive_lse, err);
    if (status == AC_OK && backward)
        status = make_backward(in, r, err);
    if (status == AC_OK)
        status = ref_error_scales(p, t, in->qd, in->kd, in->vd, r->o, r->lse,
                                  backward ? in->d_od : NULL, r->e_o, r->e_dq, r->e_dk, r->e_dv, err);
    if (status == AC_OK)
        status = ac_lse_error_scale(p, in->qd, in->kd, r->lse, r->e_lse, err);
    if (status == AC_OK && cert_rows > 0)
        status = ref_certify(p, ac_inputs_out_dtype(in), in->qd, in->kd, in->vd, r->o, r->lse, (size_t)cert_rows,
                             in->c.seed, AC_DEFAULT_MPFR_PREC, &r->cert, err);
    return status;
}

int ac_reference_make(const ac_inputs *in, bool backward, int cert_rows, ac_reference *r, ac_err *err)
{
    memset(r, 0, sizeof *r);
    if (backward && !in->d_od)
        return ac_fail(err, AC_ERR_INPUT, "reference: the backward needs dO (inputs made without it)");
    if (cert_rows < 0)
        return ac_fail(err, AC_ERR_INPUT, "reference: cert_rows must be >= 0, got %d", cert_rows);
    r->has_backward = backward;
    int status = alloc_reference(&in->p, backward, r, err);
    if (status == AC_OK)
        status = make_all(in, backward, cert_rows, r, err);
    if (status != AC_OK)
        ac_reference_free(r);
    return status;
}

void ac_reference_free(ac_reference *r)
{
    double *all[] = {r->o, r->lse, r->dq, r->dk, r->dv, r->delta, r->e_o, r->e_lse, r->e_dq,
                     r->e_dk, r->e_dv, r->naive_o, r->naive_lse, r->naive_dq, r->naive_dk, r->naive_dv};
    for (size_t s = 0; s < sizeof all / sizeof all[0]; s++)
        free(all[s]);
    memset(r, 0, sizeof *r);
}
