/* harness/report/summary.h — results aggregated per dtype x output: the
 * table fuzz, run and check print, and what the Markdown report tabulates. */
#ifndef ATTNCHECK_SUMMARY_H
#define ATTNCHECK_SUMMARY_H

#include <stdio.h>

#include "harness/run/run.h"

/* Per dtype x output aggregates over a campaign (or a replay). */
typedef struct {
    long cases; /* cases in which this output was compared */
    long measured; /* ...with elements in the magnitudes (not all special) */
    double max_ulp, max_scaled, vs_naive_max, vs_naive_mean;
    double budget_scaled; /* the budget of the case with the largest max_scaled (f32: grown) */
    double vs_naive_mean_gated; /* max vs_naive_mean over the cases where the gate applied it; -1: none */
    double budget_vs_naive_mean; /* 0: off */
    long specials; /* NaN/Inf/zero/unwritten elements, all classes */
    long special[AC_SPECIAL_COUNT]; /* the same, per class */
    long failures; /* failures whose kind names this output */
    double max_rmse, max_naive_rmse; /* the largest RMSE of a case, the kernel's and the naive's (not gated) */
} ac_summary_cell;

typedef struct {
    long cases, passed, failed, errors;
    int worst_status; /* highest AC_ERR_* among the errors, else AC_OK */
    double seconds;
    ac_summary_cell cell[AC_DTYPE_COUNT][AC_OUT_COUNT];
    long first_fail_case; /* 1-based index of the first failure; 0 = none */
    double first_fail_seconds; /* campaign time when it was found (before shrinking) */
    char first_kind[AC_KIND_LEN], first_why[AC_WHY_LEN];
    char first_line[AC_CASE_LINE_MAX], first_minimal[AC_CASE_LINE_MAX];
} ac_summary;

/* Adds one result (a pass, a failure or an error; not an unsupported case) to s. */
void ac_summary_add(ac_summary *s, const ac_result *r);
/* "K: N cases, P passed, ..." and one row per dtype x output that has cases:
 * the gated columns first, each with its budget, marked '*' and explained
 * under the table; then max-ulp and naive-max, which are not gated.  An output
 * whose elements were all special prints "-" for its magnitudes. */
void ac_summary_print(FILE *f, const char *kernel, const ac_summary *s);

#endif
