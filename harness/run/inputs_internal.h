/* harness/run/inputs_internal.h — internal to harness/run: the inputs'
 * random streams, shared by inputs.c and inputs_dominant.c, and
 * ac_inputs_make with the worker count given, for the tests. */
#ifndef ATTNCHECK_INPUTS_INTERNAL_H
#define ATTNCHECK_INPUTS_INTERNAL_H

#include <stdint.h>

#include "harness/run/inputs.h"

/* One splitmix64 stream per tensor and per other random choice of a case. */
enum {
    INPUTS_STREAM_Q = 1,
    INPUTS_STREAM_K,
    INPUTS_STREAM_V,
    INPUTS_STREAM_DO,
    INPUTS_STREAM_MASK,
    INPUTS_STREAM_MODE,
    INPUTS_STREAM_SIGNS,
    INPUTS_STREAM_DOMINANT,
    INPUTS_STREAM_PAGES,
    INPUTS_STREAM_FP8
};
/* The state stream `id` of a case seed starts from (its first draw is ac_splitmix64 of it). */
uint64_t inputs_stream(uint64_t seed, uint64_t id);

/* dist=dominant: plants one key per (b, kv head) after K is drawn (inputs_dominant.c).
 * AC_ERR_INPUT when the key it needs is beyond the dtype's range. */
int inputs_plant_dominant(ac_inputs *in, int workers, ac_err *err);

/* fp8 (inputs_fp8.c): the problem's fp8 fields from the case; after the
 * draws, the descale factors and Q, K, V quantised (their widenings become
 * code * descale).  Nothing for other dtypes. */
void inputs_fp8_problem(const ac_case *c, ac_problem *p);
int inputs_fp8_quantise(ac_inputs *in, ac_err *err);

/* ac_inputs_make on `workers` threads (ac_inputs_make takes ref_thread_count's,
 * fewer for small tensors).  workers = 0 is the definition of the streams
 * itself, one running stream per tensor drawn slice after slice on this
 * thread: the oracle the parallel path must match byte for byte. */
int inputs_make_workers(const ac_case *c, ac_inputs *in, int workers, ac_err *err);

#endif
