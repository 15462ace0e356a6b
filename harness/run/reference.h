/* harness/run/reference.h — the reference bundle: everything one case is
 * compared with, allocated once per case:
 *   o, lse, dq, dk, dv, delta: the fp64 reference (ref_forward_fp64 / ref_backward_fp64);
 *   e_*: error scales E (ref_error_scales), scaled_err = |y - x| / (u * E);
 *   e_lse: the LSE scale, defined here because the kernel computes LSE in f32
 *     whatever its dtype: E_lse_i = 1 + |LSE_i| + (d + 2) |scale| max_{j visible} sum_c |Q_ic||K_jc|
 *     (S_ij's f32 dot product errs by ~u_f32 * scale * sum_c |Q_ic||K_jc| and LSE is
 *     1-Lipschitz in S; log(l) >= 0 errs by ~u_f32 absolutely (the 1); the final
 *     m + log(l) rounds relative to |LSE|).  0 on a row with no visible key (exact -inf)
 *     and on padding rows.  LSE is measured with u = u_f32 and f32 ulps;
 *   naive_*: the same-dtype naive baseline (ref_naive_forward / _backward, the
 *     backward fed the naive O and LSE, as a framework would);
 *   cert: the MPFR certification of o/lse on cert_rows sampled rows (seed = the
 *     case seed); cert_rows == 0 skips it (rows_checked == 0, certified false).
 * backward needs in->d_od; r is zeroed first, so ac_reference_free is safe after a failure. */
#ifndef ATTNCHECK_REFERENCE_H
#define ATTNCHECK_REFERENCE_H

#include "harness/run/inputs.h"
#include "ref/ref.h"

typedef struct {
    bool has_backward;
    double *o, *lse, *dq, *dk, *dv, *delta;      /* fp64 reference */
    double *e_o, *e_lse, *e_dq, *e_dk, *e_dv;    /* error scales (e_lse: see above) */
    double *naive_o, *naive_lse, *naive_dq, *naive_dk, *naive_dv; /* same-dtype naive baseline */
    ac_cert cert;
} ac_reference;

int ac_reference_make(const ac_inputs *in, bool backward, int cert_rows, ac_reference *r, ac_err *err);
void ac_reference_free(ac_reference *r);
/* The LSE error scale above, on its own (e_lse: ac_lse_elems(p) doubles); used by
 * ac_reference_make, public so tests and tools can compute it for hand-made inputs. */
int ac_lse_error_scale(const ac_problem *p, const double *q, const double *k, const double *lse,
                       double *e_lse, ac_err *err);

#endif
