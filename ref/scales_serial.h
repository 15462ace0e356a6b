/* ref/scales_serial.h — the error scales' previous, serial implementation
 * (scales_serial.c), the test oracle of ref_error_scales: same arguments. */
#ifndef ATTNCHECK_REF_SCALES_SERIAL_H
#define ATTNCHECK_REF_SCALES_SERIAL_H

#include "ref.h"

int ref_error_scales_serial(const ac_problem *p, ac_dtype t, const double *q, const double *k, const double *v,
                            const double *o, const double *lse, const double *d_o, double *e_o, double *e_dq,
                            double *e_dk, double *e_dv, ac_err *err);

#endif
