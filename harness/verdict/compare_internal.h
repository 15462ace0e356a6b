/* harness/verdict/compare_internal.h — internal to harness/verdict: the
 * comparator with its thread count and task size given, for the tests. */
#ifndef ATTNCHECK_COMPARE_INTERNAL_H
#define ATTNCHECK_COMPARE_INTERNAL_H

#include "harness/verdict/compare.h"

/* ac_compare on `workers` threads (ac_compare takes ref_thread_count's, fewer
 * for small outputs), with rows_per_task rows of one (b, h) a task (0: the
 * default, about 32768 elements).  The metrics depend on rows_per_task only
 * through the last bits of the means, never on workers. */
void compare_with(const ac_inputs *in, ac_output which, const void *got, const double *ref, const double *escale,
                  const double *naive, int workers, int rows_per_task, ac_metrics *m);

#endif
