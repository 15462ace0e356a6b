/* harness/run/reference.h — the reference bundle: everything one case is
 * compared with, allocated once per case:
 *   o, lse, dq, dk, dv, delta: the fp64 reference (ref_forward_fp64 / ref_backward_fp64);
 *   e_*: error scales E (ref_error_scales), scaled_err = |y - x| / (u * E);
 *   e_lse: the LSE scale (ref_lse_error_scale, ref/ref.h), in f32 units whatever
 *     the dtype, since a fused kernel computes LSE in f32;
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
    /* the variants' parameter gradients (backward, when the problem uses them; else NULL):
     * dsink (Hq) and its scale e_dsink (f32 units), ref_backward_params_fp64 / ref_param_error_scales */
    double *dsink, *e_dsink;
    /* dbias (ac_bias_elems) and e_dbias (units of the bias dtype), ref_backward_dbias_fp64 / ref_error_scales_dbias */
    double *dbias, *e_dbias;
} ac_reference;

int ac_reference_make(const ac_inputs *in, bool backward, int cert_rows, ac_reference *r, ac_err *err);
void ac_reference_free(ac_reference *r);

#endif
