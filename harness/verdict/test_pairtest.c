/* harness/verdict/test_pairtest.c — the sign test and the Wilcoxon
 * signed-rank test against known p-values.  The expected values come from
 * exact binomial sums (Python: sum(comb(n, j) for j in range(k, n + 1)) / 2**n)
 * and from scipy 1.10's scipy.stats.binomtest and scipy.stats.wilcoxon
 * (alternative='greater'/'less', zero_method='wilcox', correction=True), with
 * the command beside each. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>

#include "harness/verdict/pairtest.h"

#define REL_CLOSE(got, want, rel) \
    cr_assert(fabs((got) - (want)) <= (rel)*fabs(want), "got %.17g, want %.17g", (got), (want))

typedef struct {
    long above, below;
    double p;
} sign_case;

/* binomtest(k, n, 0.5, alternative='greater').pvalue */
ParameterizedTestParameters(harness_pairtest, sign_test_matches_exact_binomial_tails)
{
    static sign_case cases[] = {
        {15, 5, 0.020694732666015625}, /* 21700 / 2^20 */
        {10, 0, 0.0009765625}, /* 2^-10: ten of ten, the fewest cases that reach 1e-3 */
        {65, 35, 0.0017588208614850792},
        {550, 450, 0.0008652680424881588},
        {15, 15, 0.572232224047184}, /* k <= n/2: through the complement */
        {6200, 5800, 0.00013491473939068385},
    };
    return cr_make_param_array(sign_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(sign_case *c, harness_pairtest, sign_test_matches_exact_binomial_tails)
{
    REL_CLOSE(ac_sign_test_p(c->above, c->below), c->p, 1e-9);
}

Test(harness_pairtest, sign_test_with_nothing_above_or_no_pairs_is_one)
{
    cr_assert_eq(ac_sign_test_p(0, 0), 1.0);
    cr_assert_eq(ac_sign_test_p(0, 12), 1.0);
    cr_assert_eq(ac_sign_test_p(9, 0), ldexp(1.0, -9)); /* nine of nine: p = 2^-9, still above 1e-3 */
}

/* Hollander & Wolfe's depression example (R's ?wilcox.test): x - y of 9 pairs,
 * exact p = 0.01953125 (scipy.stats.wilcoxon(d, alternative='greater')). */
Test(harness_pairtest, wilcoxon_exact_matches_the_textbook_example)
{
    const double x[] = {1.83, 0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, 1.30};
    const double y[] = {0.878, 0.647, 0.598, 2.05, 1.06, 1.29, 1.06, 3.14, 1.29};
    double d[9];
    for (int i = 0; i < 9; i++)
        d[i] = x[i] - y[i];
    ac_wilcoxon w;
    cr_assert_eq(ac_wilcoxon_test(d, 9, &w), 0);
    cr_assert(w.exact);
    cr_assert_eq(w.n, 9);
    cr_assert_eq(w.w_plus, 40.0);
    REL_CLOSE(w.p_greater, 0.01953125, 1e-12);
}

/* d_i = (29 i mod 83) - 29.75, i < 40: no ties, exact.
 * scipy.stats.wilcoxon(d, alternative='greater', mode='exact') -> 597.0, 0.005537195808756223;
 * alternative='less' -> 0.9946859650226543. */
Test(harness_pairtest, wilcoxon_exact_at_forty_pairs_both_sides)
{
    double d[40];
    for (int i = 0; i < 40; i++)
        d[i] = (double)((i * 29) % 83) - 29.75;
    ac_wilcoxon w;
    cr_assert_eq(ac_wilcoxon_test(d, 40, &w), 0);
    cr_assert(w.exact);
    cr_assert_eq(w.w_plus, 597.0);
    REL_CLOSE(w.p_greater, 0.005537195808756223, 1e-12);
    REL_CLOSE(w.p_less, 0.9946859650226543, 1e-12);
}

/* d_i = ((37 i mod 101) - 40) / 10, i < 80: one zero (dropped), tied
 * magnitudes, so the normal approximation with the tie-corrected variance and
 * the continuity correction.  scipy.stats.wilcoxon(d, alternative='greater',
 * correction=True, mode='approx') -> 2144.5, 0.0029220573583569613; 'less' ->
 * 0.9971213156065378. */
Test(harness_pairtest, wilcoxon_normal_approximation_with_ties_and_a_zero)
{
    double d[80];
    for (int i = 0; i < 80; i++)
        d[i] = (double)((i * 37) % 101 - 40) / 10.0;
    ac_wilcoxon w;
    cr_assert_eq(ac_wilcoxon_test(d, 80, &w), 0);
    cr_assert_not(w.exact);
    cr_assert_eq(w.n, 79);
    cr_assert_eq(w.w_plus, 2144.5);
    REL_CLOSE(w.p_greater, 0.0029220573583569613, 1e-9);
    REL_CLOSE(w.p_less, 0.9971213156065378, 1e-9);
}

Test(harness_pairtest, wilcoxon_infinite_differences_take_the_top_ranks)
{
    /* log(new/old) of a new error where the old one was 0: +inf, the largest magnitude */
    double d[12] = {INFINITY, 0.3, -0.1, 0.2, 0.25, -0.05, 0.4, 0.35, 0.15, 0.45, 0.5, 0.55};
    ac_wilcoxon w;
    cr_assert_eq(ac_wilcoxon_test(d, 12, &w), 0);
    cr_assert_eq(w.w_plus, 78.0 - 1.0 - 2.0); /* all but the ranks 1 (-0.05) and 2 (-0.1) */
    cr_assert(w.p_greater < 0.01);
}

Test(harness_pairtest, median_of_odd_and_even_counts)
{
    double a[] = {3.0, 1.0, 2.0}, b[] = {4.0, 1.0, 3.0, 2.0};
    cr_assert_eq(ac_median_sorting(a, 3), 2.0);
    cr_assert_eq(ac_median_sorting(b, 4), 2.5);
    cr_assert(isnan(ac_median_sorting(b, 0)));
}
