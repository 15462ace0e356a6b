/* ref/naive_scalar.h — the scalar naive baseline (naive_scalar.c), the test
 * oracle of ref_naive_forward/backward: same contract and arguments. */
#ifndef ATTNCHECK_REF_NAIVE_SCALAR_H
#define ATTNCHECK_REF_NAIVE_SCALAR_H

#include "ref.h"

int ref_naive_forward_scalar(const ac_problem *p, ac_dtype t, const double *q, const double *k, const double *v,
                             double *o, double *lse, ac_err *err);
int ref_naive_backward_scalar(const ac_problem *p, ac_dtype t, const double *q, const double *k, const double *v,
                              const double *o, const double *lse, const double *d_o, double *dq, double *dk, double *dv,
                              ac_err *err);

#endif
