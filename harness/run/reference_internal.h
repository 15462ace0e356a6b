/* harness/run/reference_internal.h — shared by reference.c (the bundle, the
 * cpu tier) and reference_tier.c (the gpu tier, the choice) only. */
#ifndef ATTNCHECK_REFERENCE_INTERNAL_H
#define ATTNCHECK_REFERENCE_INTERNAL_H

#include "harness/run/reference.h"

/* The MPFR certification of r->o, r->lse on cert_rows rows (none when <= 0), either tier. */
int reference_certify(const ac_inputs *in, int cert_rows, ac_reference *r, ac_err *err);
/* The gpu tier into r's arrays (allocated), then certification and the spot check. */
int reference_make_gpu(const ac_inputs *in, bool backward, int cert_rows, ac_reference *r, ac_err *err);

#endif
