/* harness/verdict/baseline.h — regression gating against a previous run.
 *
 * A budget asks "is every error small enough?"; a change that makes a kernel
 * measurably less accurate but still inside every budget (an extra rounding
 * of P, a reduced-precision exp) passes it.  The baseline comparison asks
 * instead "is this run less accurate than that one, case by case?":
 *
 *   - the old run is a JSON Lines file of `fuzz|run|check --json`; the new
 *     run replays the same case lines, and each new case is paired with the
 *     old record of the same line;
 *   - per dtype x output and metric (mean absolute error, max scaled error),
 *     the paired ratio new / old over the cases that passed in both runs;
 *   - a regression: the median ratio above the threshold T (budgets.txt,
 *     `regression-ratio`, default 1.05) by a one-sided sign test at
 *     p < alpha (`regression-p`, default 1e-3); an improvement: below 1/T the
 *     same way.  The Wilcoxon signed-rank p-values are shown beside them.
 *   - every case that could not be compared is listed with the reason: only
 *     in one run, or failed, errored or skipped in either.
 *
 * The old run's records are plain data (ac_baseline_add_old), so `prove
 * --baseline` feeds them from memory and the CLI from a file. */
#ifndef ATTNCHECK_BASELINE_H
#define ATTNCHECK_BASELINE_H

#include <stdbool.h>
#include <stdio.h>

#include "harness/run/run.h"

#define AC_DEFAULT_REGRESSION_RATIO 1.05
#define AC_DEFAULT_REGRESSION_ALPHA 1e-3

typedef enum { AC_BASE_MEAN_ABS = 0, AC_BASE_MAX_SCALED, AC_BASE_METRIC_COUNT } ac_base_metric;
const char *ac_base_metric_name(ac_base_metric m); /* "mean-abs", "max-scaled" */

typedef enum { AC_BASE_SAME = 0, AC_BASE_REGRESSION, AC_BASE_IMPROVEMENT } ac_base_verdict;
const char *ac_base_verdict_name(ac_base_verdict v); /* "same", "regression", "improvement" */

/* One dtype x output x metric over the paired cases. */
typedef struct {
    long pairs; /* cases with a ratio (0: nothing to say) */
    double median_ratio; /* new / old */
    long above, below; /* ratio > T, ratio < T (equal: a tie) */
    long better, not_better; /* ratio < 1/T, ratio > 1/T */
    double p_regression, p_improvement; /* sign tests */
    double wilcoxon_p_regression, wilcoxon_p_improvement; /* signed-rank, on log ratios */
    ac_base_verdict verdict;
} ac_base_stat;

/* A case that was not compared, and why. */
typedef struct {
    char *line;
    char *why;
} ac_base_listed;

typedef struct ac_baseline ac_baseline;

/* An empty comparison: path names the old run in messages, kernel its kernel. */
int ac_baseline_create(const char *path, const char *kernel, ac_baseline **out, ac_err *err);
/* One old case, in the old run's order.  Only line, verdict, kind, dtype and the
 * outputs' present, n_mean, mean_abs and max_scaled are read. */
int ac_baseline_add_old(ac_baseline *b, const ac_result *old, ac_err *err);
/* Reads a JSON Lines file of case records ({"type": ...} records skipped).  A
 * file with several kernels: the records of `kernel` when it is one of them,
 * else AC_ERR_INPUT naming them.  A bad line: AC_ERR_INPUT naming FILE:LINE. */
int ac_baseline_load(const char *path, const char *kernel, ac_baseline **out, ac_err *err);
void ac_baseline_free(ac_baseline *b);

size_t ac_baseline_size(const ac_baseline *b);
const char *ac_baseline_line(const ac_baseline *b, size_t i);
const char *ac_baseline_path(const ac_baseline *b);
const char *ac_baseline_kernel(const ac_baseline *b);
/* Keeps the first n old cases (fuzz --baseline --cases N); the rest are counted, not listed. */
void ac_baseline_limit(ac_baseline *b, size_t n);

/* Pairs one new result with the first unpaired old case of its line. */
int ac_baseline_add(ac_baseline *b, const ac_result *r, ac_err *err);
/* Computes every statistic from the pairs so far (callable after every case)
 * with threshold ratio T > 1 and the test's level alpha. */
int ac_baseline_evaluate(ac_baseline *b, double ratio, double alpha, ac_err *err);

/* After ac_baseline_evaluate: */
const ac_base_stat *ac_baseline_stat(const ac_baseline *b, ac_dtype t, ac_output o, ac_base_metric m);
bool ac_baseline_regressed(const ac_baseline *b);
bool ac_baseline_improved(const ac_baseline *b);
double ac_baseline_ratio(const ac_baseline *b);
double ac_baseline_alpha(const ac_baseline *b);
typedef struct {
    long old_cases, new_cases, compared, limited_out; /* limited_out: old cases beyond ac_baseline_limit */
} ac_base_counts;
ac_base_counts ac_baseline_counts(const ac_baseline *b);
/* The cases not compared: the new run's that failed, errored, were skipped or
 * have no old twin, as they came, then the old cases never paired. */
size_t ac_baseline_listed(const ac_baseline *b, const ac_base_listed **out);

/* The console table and the verdict lines. */
void ac_baseline_print(FILE *f, const ac_baseline *b);

#endif
