/* harness/run/dropout.h — internal to harness/run/: what attncheck checks of a
 * kernel's dropout besides its outputs (run.c calls these):
 *   the keep mask it returned (bits, LSB first at ac_dropout_index) becomes the
 *     reference's input (ac_dropout_unpack);
 *   (b) its keep fraction over the visible pairs lies within 6 sigma of the
 *     binomial's n (1 - p) (plus 1 for tiny n);
 *   (c) the same seed draws the same mask on the visible pairs, another seed
 *     another one (when 2 p (1 - p) n >= 20 pairs are expected to differ).
 * A failed check is a failed case: kind "dropout:keep-fraction",
 * "dropout:not-reproducible" or "dropout:seed-ignored". */
#ifndef ATTNCHECK_DROPOUT_H
#define ATTNCHECK_DROPOUT_H

#include "harness/run/run.h"

/* keep (ac_dropout_elems bytes) from the kernel's bits. */
void ac_dropout_unpack(const ac_problem *p, const uint8_t *bits, uint8_t *keep);

/* Reruns the kernel's forward with another seed, its keep bits into bits. */
typedef int (*ac_dropout_rerun)(void *ctx, uint64_t seed, uint8_t *bits, ac_err *err);

/* Checks (b) and (c) of the mask `keep` the case's forward drew (rerun NULL:
 * (b) alone); a failure sets r's verdict, kind and why.  AC_OK, or the rerun's error. */
int ac_dropout_checks(const ac_problem *p, const uint8_t *keep, ac_dropout_rerun rerun, void *ctx, ac_result *r,
                      ac_err *err);

#endif
