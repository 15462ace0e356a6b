/* harness/verdict/pairtest.h — one-sided paired tests over per-case
 * differences, for the baseline comparison (baseline.h): is the new run's
 * error larger than the old one's by more than a threshold, case by case?
 *
 * Both tests take the differences d_i (for the baseline: log(new/old) minus
 * log(threshold)) and ask whether their centre is above 0:
 *   - the sign test: the median.  P(X >= n_above), X ~ Binomial(n, 1/2),
 *     n = n_above + n_below (zeros are ties, dropped).  Exact at every n
 *     (sums of binomial terms in logs).  No assumption on the distribution:
 *     this is the test the regression verdict uses.
 *   - the Wilcoxon signed-rank test: the pseudo-median, assuming a symmetric
 *     distribution; more power, shown beside it.  Zeros dropped (Wilcoxon's
 *     convention), tied |d| get mid-ranks.  Exact (the null distribution of
 *     W+ counted by dynamic programming) for n <= AC_WILCOXON_EXACT_MAX
 *     without ties, else the normal approximation with the tie correction of
 *     the variance and a continuity correction of 1/2 (what scipy.stats.wilcoxon
 *     and R's wilcox.test do). */
#ifndef ATTNCHECK_PAIRTEST_H
#define ATTNCHECK_PAIRTEST_H

#include <stdbool.h>
#include <stddef.h>

#define AC_WILCOXON_EXACT_MAX 50

/* One-sided sign test p-value: P(X >= n_above), X ~ Bin(n_above + n_below, 1/2); 1 when both are 0. */
double ac_sign_test_p(long n_above, long n_below);

typedef struct {
    size_t n; /* nonzero differences ranked */
    double w_plus; /* sum of the ranks of the positive differences */
    double p_greater; /* one-sided p: P(W+ >= w_plus) under H0 */
    double p_less; /* the other side: P(W+ <= w_plus) */
    bool exact;
} ac_wilcoxon;

/* The signed-rank test over d[0..n) (NaN entries are skipped).  AC_OK, or
 * AC_ERR_ENV when out of memory. */
int ac_wilcoxon_test(const double *d, size_t n, ac_wilcoxon *out);

/* The median of x[0..n) (sorts x in place; NaN when n == 0). */
double ac_median_sorting(double *x, size_t n);

#endif
