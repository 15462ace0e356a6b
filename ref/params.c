/* ref/params.c — the gradients of the variants' own parameters and their
 * error scales (ref.h: ref_backward_params_fp64, ref_param_error_scales).
 *
 * Sinks: dSink_h = -sum_{b,i} Ps_i D_i, Ps_i = exp(s_h - LSE_i), the share of
 * row i's denominator the sink holds.  One head's sum runs over (b, i) in
 * order, one head after another on this thread: Hq sums of B Nq terms, far
 * below the cost of anything else, and the same bits whatever
 * ATTNCHECK_THREADS says. */
#include <math.h>

#include "ref.h"
#include "variants_internal.h"

static int check(const ac_problem *p, const void *const *need, int n, const char *who, ac_err *err)
{
    int status = ac_problem_validate(p, 0, err);
    if (status != AC_OK)
        return status;
    for (int i = 0; i < n; i++)
        if (!need[i])
            return ac_fail(err, AC_ERR_INPUT, "%s: NULL tensor (argument %d of the tensors)", who, i + 1);
    return AC_OK;
}

int ref_backward_params_fp64(const ac_problem *p, const double *lse, const double *delta, double *dsink, ac_err *err)
{
    const void *need[] = {lse, delta};
    int status = check(p, need, 2, "ref_backward_params_fp64", err);
    if (status != AC_OK || !p->sinks || !dsink)
        return status;
    for (int h = 0; h < p->heads_q; h++) {
        double sink = p->sinks[h], sum = 0.0;
        for (int b = 0; b < p->batch; b++)
            for (int i = 0; i < ac_seqlen_q_of(p, b); i++) {
                size_t at = ac_lse_index(p, b, h, i);
                sum += exp(sink - lse[at]) * delta[at];
            }
        dsink[h] = -sum;
    }
    return AC_OK;
}

/* sum_c |dO_ic| E_O_ic of row i of (b, h), E_O the forward's error scale: what
 * the kernel's D_i = sum_c dO_ic O_ic errs by, in units of u, through the
 * error of its O (the stored O's rounding is part of E_O). */
static double delta_error(const ac_problem *p, const double *e_o, const double *d_o, int b, int h, int i)
{
    double sum = 0.0;
    for (int c = 0; c < ac_head_dim_v(p); c++) { /* O-like rows: d_v columns */
        size_t at = ac_o_index(p, b, h, i, c);
        sum += fabs(d_o[at]) * e_o[at];
    }
    return sum;
}

/* e_dsink_h in f32 units.  dSink_h = -sum_i Ps_i D_i errs through
 *   D_i: by u sum_c |dO_ic| E_O_ic (delta_error), u / u_f32 = 1 / rho of it in f32 units;
 *   Ps_i = exp(s_h - L_i): the kernel's stored LSE errs by u_f32 E_lse_i, the
 *     f32 exp's argument s_h - L_i rounds, and exp rounds: Ps_i u_f32 (E_lse_i + |s_h| + 1);
 *   the f32 result and every term's underflow: tau_f32 = eta_f32 / 2u_f32 a term
 *     (Ps_i < 2^-149 reads 0 in f32) and once for the sum;
 * the f32 sum over B Nq terms is the budgets' growth. */
int ref_param_error_scales(const ac_problem *p, ac_dtype t, const double *lse, const double *d_o, const double *delta,
                           const double *e_o, const double *e_lse, double *e_dsink, ac_err *err)
{
    const void *need[] = {lse, d_o, delta, e_o, e_lse};
    int status = check(p, need, 5, "ref_param_error_scales", err);
    if (status != AC_OK || !p->sinks || !e_dsink)
        return status;
    double inv_rho = ac_unit_roundoff(t) / ac_unit_roundoff(AC_F32);
    double tau32 = ac_min_subnormal(AC_F32) / (2.0 * ac_unit_roundoff(AC_F32));
    for (int h = 0; h < p->heads_q; h++) {
        double sink = p->sinks[h], sum = tau32;
        for (int b = 0; b < p->batch; b++)
            for (int i = 0; i < ac_seqlen_q_of(p, b); i++) {
                size_t at = ac_lse_index(p, b, h, i);
                double ps = exp(sink - lse[at]), d_abs = fabs(delta[at]);
                sum += ps * (inv_rho * delta_error(p, e_o, d_o, b, h, i) + d_abs * (e_lse[at] + fabs(sink) + 1.0)) +
                    tau32 * d_abs;
            }
        e_dsink[h] = sum;
    }
    return AC_OK;
}
