/* harness/run/reference.c — the reference bundle of one case: the fp64 forward
 * (and backward), the error scales of every output (LSE's from
 * ref_lse_error_scale, whose comment derives it), the same-dtype naive
 * baseline, the MPFR certification, all allocated once per case.  The cpu
 * tier is here; the gpu tier and the choice between them in reference_tier.c. */
#include <stdlib.h>
#include <string.h>

#include "harness/run/reference.h"
#include "harness/run/reference_internal.h"

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
    size_t nq = ac_q_elems(p), nkv = ac_kv_elems(p), nl = ac_lse_elems(p), no = ac_o_elems(p), nv = ac_v_elems(p);
    double **fwd[] = {&r->o, &r->lse, &r->e_o, &r->e_lse, &r->naive_o, &r->naive_lse};
    size_t fwd_n[] = {no, nl, no, nl, no, nl};
    double **bwd[] = {&r->dq,   &r->dk,   &r->dv,       &r->delta,    &r->e_dq,
                      &r->e_dk, &r->e_dv, &r->naive_dq, &r->naive_dk, &r->naive_dv};
    size_t bwd_n[] = {nq, nkv, nv, nl, nq, nkv, nv, nq, nkv, nv};
    bool ok = alloc_all(fwd, fwd_n, sizeof fwd_n / sizeof fwd_n[0]);
    if (backward)
        ok &= alloc_all(bwd, bwd_n, sizeof bwd_n / sizeof bwd_n[0]);
    if (!ok)
        return ac_fail(err, AC_ERR_ENV,
                       "reference: out of memory (%zu Q-like and %zu K-like elements, "
                       "about %zu doubles)",
                       nq, nkv, 3 * nq + 3 * nl + (backward ? 3 * nq + 6 * nkv + nl : 0));
    return AC_OK;
}

/* The variants' parameter gradients (harness-side of ref/params.c). */
static int make_dbias(const ac_inputs *in, ac_reference *r, ac_err *err)
{
    const ac_problem *p = &in->p;
    size_t n = ac_bias_elems(p);
    r->dbias = malloc((n + 1) * sizeof(double));
    r->e_dbias = malloc((n + 1) * sizeof(double));
    if (!r->dbias || !r->e_dbias)
        return ac_fail(err, AC_ERR_ENV, "reference: out of memory for dBias (%zu entries)", n);
    return ref_backward_dbias_fp64(p, in->qd, in->kd, in->vd, r->lse, in->d_od, r->delta, r->dbias, err);
}

static int make_params(const ac_inputs *in, ac_reference *r, ac_err *err)
{
    const ac_problem *p = &in->p;
    if (p->bias) {
        int st = make_dbias(in, r, err);
        if (st != AC_OK)
            return st;
    }
    if (!p->sinks)
        return AC_OK;
    size_t n = (size_t)p->heads_q;
    r->dsink = malloc(n * sizeof(double));
    r->e_dsink = malloc(n * sizeof(double));
    if (!r->dsink || !r->e_dsink)
        return ac_fail(err, AC_ERR_ENV, "reference: out of memory for dSink");
    return ref_backward_params_fp64(p, r->lse, r->delta, r->dsink, err);
}

/* Their scales, once E_O and E_lse are known. */
static int make_param_scales(const ac_inputs *in, ac_reference *r, ac_err *err)
{
    if (!r->dsink)
        return AC_OK;
    return ref_param_error_scales(&in->p, in->c.dtype, r->lse, in->d_od, r->delta, r->e_o, r->e_lse, r->e_dsink, err);
}

static int make_backward(const ac_inputs *in, ac_reference *r, ac_err *err)
{
    const ac_problem *p = &in->p;
    ac_dtype t = in->c.dtype;
    int status =
        ref_backward_fp64(p, in->qd, in->kd, in->vd, r->o, r->lse, in->d_od, r->dq, r->dk, r->dv, r->delta, err);
    if (status == AC_OK)
        status = ref_naive_backward(p, t, in->qd, in->kd, in->vd, r->naive_o, r->naive_lse, in->d_od, r->naive_dq,
                                    r->naive_dk, r->naive_dv, err);
    if (status == AC_OK)
        status = make_params(in, r, err);
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
        status = ref_error_scales_dbias(p, t, in->qd, in->kd, in->vd, r->o, r->lse, backward ? in->d_od : NULL, r->e_o,
                                        r->e_dq, r->e_dk, r->e_dv, r->e_dbias, err);
    if (status == AC_OK)
        status = ref_lse_error_scale(p, in->qd, in->kd, r->lse, r->e_lse, err);
    if (status == AC_OK && backward)
        status = make_param_scales(in, r, err);
    if (status == AC_OK)
        status = reference_certify(in, cert_rows, r, err);
    return status;
}

int reference_certify(const ac_inputs *in, int cert_rows, ac_reference *r, ac_err *err)
{
    if (cert_rows <= 0)
        return AC_OK;
    return ref_certify(&in->p, ac_inputs_out_dtype(in), in->qd, in->kd, in->vd, r->o, r->lse, (size_t)cert_rows,
                       in->c.seed, AC_DEFAULT_MPFR_PREC, &r->cert, err);
}

/* A paged case's reference reads K and V through the block table once: its
 * paged widenings gathered into the contiguous twin (ac_inputs_unpaged), on
 * which every stage below runs unchanged. */
static int make_tier(const ac_inputs *in, bool backward, int cert_rows, ac_reference *r, ac_err *err)
{
    if (backward && ac_problem_paged(&in->p))
        return ac_fail(err, AC_ERR_INPUT, "reference: a paged KV cache is forward only");
    ac_inputs view;
    int status = ac_inputs_unpaged(in, &view, err);
    if (status != AC_OK)
        return status;
    /* the gpu tier uploads the dtype bits, which stay the pages: a paged case takes the cpu tier */
    r->info.tier = ac_problem_paged(&in->p) ? AC_REF_CPU : ac_reference_tier_for(&view.p, view.c.dtype, backward);
    status = alloc_reference(&view.p, backward, r, err);
    if (status == AC_OK && r->info.tier == AC_REF_GPU)
        status = reference_make_gpu(&view, backward, cert_rows, r, err);
    else if (status == AC_OK)
        status = make_all(&view, backward, cert_rows, r, err);
    ac_inputs_unpaged_free(in, &view);
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
    int status = make_tier(in, backward, cert_rows, r, err);
    if (status != AC_OK)
        ac_reference_free(r);
    return status;
}

void ac_reference_free(ac_reference *r)
{
    double *all[] = {r->o,        r->lse,      r->dq,    r->dk,      r->dv,      r->delta,     r->e_o,
                     r->e_lse,    r->e_dq,     r->e_dk,  r->e_dv,    r->naive_o, r->naive_lse, r->naive_dq,
                     r->naive_dk, r->naive_dv, r->dsink, r->e_dsink, r->dbias,   r->e_dbias};
    for (size_t s = 0; s < sizeof all / sizeof all[0]; s++)
        free(all[s]);
    memset(r, 0, sizeof *r);
}
