/* harness/campaign/shrink.h — the shrinker: a failing case line made as small
 * as it can be while it still fails the same way. */
#ifndef ATTNCHECK_SHRINK_H
#define ATTNCHECK_SHRINK_H

#include <stdbool.h>

#include "harness/case/case.h"

/* Does the case still fail the same way?  true to keep the shrink step. */
typedef bool (*ac_still_fails)(const ac_case *c, void *ctx);

/* Greedy: batch -> 1, heads -> 1, halve nq/nk, smaller d, simpler mask,
 * simpler distribution, fewer seeds..., keeping each step that still fails.
 * Returns the number of predicate calls made. */
int ac_shrink(const ac_case *failing, ac_still_fails pred, void *ctx, int max_steps, ac_case *minimal);

#endif
