/* harness/verdict/pairtest.c — the sign test and the Wilcoxon signed-rank
 * test, one-sided, for the baseline comparison (see pairtest.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness/verdict/pairtest.h"
#include "ref/ref.h"

/* P(X >= k0), X ~ Bin(n, 1/2), for k0 > n/2: the terms decrease from k0 on, so
 * the sum is t_k0 (1 + r_1 + r_1 r_2 + ...) with r the ratio of neighbours,
 * and t_k0 comes from lgamma: no overflow, relative error ~1e-12 at n = 10^5. */
static double upper_tail(long n, long k0)
{
    double log_t = lgamma((double)n + 1) - lgamma((double)k0 + 1) - lgamma((double)(n - k0) + 1) - (double)n * log(2.0);
    double sum = 1.0, r = 1.0;
    for (long k = k0; k < n; k++) {
        r *= (double)(n - k) / (double)(k + 1);
        sum += r;
        if (r < 1e-18 * sum)
            break;
    }
    return exp(log_t + log(sum));
}

double ac_sign_test_p(long n_above, long n_below)
{
    long n = n_above + n_below;
    if (n_above <= 0 || n <= 0)
        return 1.0;
    if (2 * n_above > n)
        return fmin(1.0, upper_tail(n, n_above));
    /* P(X >= a) = 1 - P(X <= a - 1) = 1 - P(X >= n - a + 1), whose k0 is above n/2 */
    return fmax(0.0, 1.0 - upper_tail(n, n - n_above + 1));
}

/* ---- Wilcoxon signed-rank ------------------------------------------------------ */

static int by_magnitude(const void *a, const void *b)
{
    double x = fabs(*(const double *)a), y = fabs(*(const double *)b);
    return (x > y) - (x < y);
}

/* Mid-ranks of the sorted |d|: W+ and the variance's tie term sum(t^3 - t). */
static void rank_sum(const double *d, size_t n, double *w_plus, double *tie_term)
{
    *w_plus = *tie_term = 0.0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j + 1 < n && fabs(d[j + 1]) == fabs(d[i]))
            j++;
        double t = (double)(j - i + 1), rank = (double)(i + j) / 2.0 + 1.0; /* ranks i+1 .. j+1 */
        for (size_t k = i; k <= j; k++)
            if (d[k] > 0)
                *w_plus += rank;
        *tie_term += t * t * t - t;
        i = j + 1;
    }
}

/* The exact null distribution of W+ for n untied ranks: the number of subsets
 * of {1..n} with each sum (exact in double: at most 2^50), then both tails. */
static int exact_tails(size_t n, double w_plus, double *p_greater, double *p_less)
{
    size_t top = n * (n + 1) / 2;
    double *count = calloc(top + 1, sizeof *count);
    if (!count)
        return AC_ERR_ENV;
    count[0] = 1.0;
    for (size_t r = 1; r <= n; r++)
        for (size_t w = r * (r + 1) / 2; w >= r; w--)
            count[w] += count[w - r];
    double total = ldexp(1.0, (int)n), ge = 0.0, le = 0.0;
    size_t w_obs = (size_t)w_plus;
    for (size_t w = 0; w <= top; w++) {
        if (w >= w_obs)
            ge += count[w];
        if (w <= w_obs)
            le += count[w];
    }
    free(count);
    *p_greater = ge / total;
    *p_less = le / total;
    return AC_OK;
}

int ac_wilcoxon_test(const double *d, size_t n, ac_wilcoxon *out)
{
    memset(out, 0, sizeof *out);
    out->p_greater = out->p_less = 1.0;
    double *nz = malloc((n ? n : 1) * sizeof *nz);
    if (!nz)
        return AC_ERR_ENV;
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (d[i] != 0.0 && !isnan(d[i]))
            nz[m++] = d[i];
    qsort(nz, m, sizeof *nz, by_magnitude);
    double tie_term;
    rank_sum(nz, m, &out->w_plus, &tie_term);
    free(nz);
    out->n = m;
    if (m == 0)
        return AC_OK;
    if (m <= AC_WILCOXON_EXACT_MAX && tie_term == 0.0) {
        out->exact = true;
        return exact_tails(m, out->w_plus, &out->p_greater, &out->p_less);
    }
    double nn = (double)m, mean = nn * (nn + 1) / 4.0;
    double sd = sqrt(nn * (nn + 1) * (2 * nn + 1) / 24.0 - tie_term / 48.0);
    if (!(sd > 0)) /* not reached for m >= 1 (the tie term is below the variance); no division by 0 */
        return AC_OK;
    out->p_greater = 0.5 * erfc((out->w_plus - mean - 0.5) / sd / sqrt(2.0));
    out->p_less = 0.5 * erfc(-(out->w_plus - mean + 0.5) / sd / sqrt(2.0));
    return AC_OK;
}

static int ascending(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double ac_median_sorting(double *x, size_t n)
{
    if (n == 0)
        return NAN;
    qsort(x, n, sizeof *x, ascending);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}
