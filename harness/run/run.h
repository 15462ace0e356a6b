/* harness/run/run.h — the runner: one case end to end,
 *   inputs -> poisoned outputs -> kernel forward (and backward) -> reference
 *   -> comparator per output -> gate,
 * into an ac_result the campaign, the shrinker and the reports consume. */
#ifndef ATTNCHECK_RUN_H
#define ATTNCHECK_RUN_H

#include <stdbool.h>

#include "harness/case/case.h"
#include "harness/run/reference.h"
#include "harness/verdict/budget.h"
#include "harness/verdict/compare.h"
#include "harness/verdict/gate.h"
#include "kernels/kernel.h"

typedef struct {
    bool backward;     /* run the backward when the kernel has one */
    int cert_rows;     /* MPFR certification rows per case (0 = none) */
} ac_run_opts;

typedef struct {
    char line[AC_CASE_LINE_MAX];
    ac_verdict verdict;
    int status;                    /* AC_OK, or the AC_ERR_* that stopped it */
    ac_metrics m[AC_OUT_COUNT];
    ac_cert cert;
    ac_ref_info ref;               /* the reference tier that ran, its GPU spot check */
    long index;                    /* the case's index in its campaign stream (run: its place in the corpus) */
    char why[AC_WHY_LEN];
    char kind[AC_KIND_LEN];
    double seconds;
    ac_dtype dtype;                /* the case's dtype (for per-dtype summaries) */
    bool has_backward;             /* dQ, dK, dV were run and compared */
    bool unsupported;              /* outside the kernel's claimed caps: not run (AC_ERR_INPUT, kind "error:input") */
} ac_result;

/* Runs one case end to end: inputs, poisoned outputs, kernel forward (and
 * backward), reference, compare, gate.  Returns AC_OK when a verdict was
 * reached (pass or fail, in r->verdict), or the AC_ERR_* that prevented it. */
int ac_run_case(const ac_kernel *k, const ac_case *c, const ac_budgets *b, const ac_run_opts *o,
                ac_result *r, ac_err *err);

/* Seconds on the monotonic clock, for the time lines of run, fuzz and check. */
double ac_now_seconds(void);

#endif
