/* harness/verdict/baseline_print.c — the baseline comparison on the console:
 * one row per dtype x output x metric that has pairs, the verdict lines, and
 * the cases that were not compared. */
#include <stdio.h>

#include "harness/verdict/baseline.h"

#define LISTED_SHOWN 20

static const char *verdict_shout(ac_base_verdict v)
{
    return v == AC_BASE_REGRESSION ? "REGRESSION" : v == AC_BASE_IMPROVEMENT ? "improved" : "same";
}

static void print_rows(FILE *f, const ac_baseline *b)
{
    fprintf(f, "%-5s %-4s %-10s %6s %8s %6s %6s %10s %10s %10s %10s  %s\n", "dtype", "out", "metric", "pairs", "median",
            ">T", "<T", "p-regress", "p-improve", "wx-regress", "wx-improve", "verdict");
    for (int t = 0; t < AC_DTYPE_COUNT; t++)
        for (int o = 0; o < AC_OUT_COUNT; o++)
            for (int m = 0; m < AC_BASE_METRIC_COUNT; m++) {
                const ac_base_stat *s = ac_baseline_stat(b, (ac_dtype)t, (ac_output)o, (ac_base_metric)m);
                if (!s)
                    continue;
                fprintf(f, "%-5s %-4s %-10s %6ld %8.4g %6ld %6ld %10.3g %10.3g %10.3g %10.3g  %s\n",
                        ac_dtype_name((ac_dtype)t), ac_output_name((ac_output)o),
                        ac_base_metric_name((ac_base_metric)m), s->pairs, s->median_ratio, s->above, s->below,
                        s->p_regression, s->p_improvement, s->wilcoxon_p_regression, s->wilcoxon_p_improvement,
                        verdict_shout(s->verdict));
            }
}

static void print_verdicts(FILE *f, const ac_baseline *b)
{
    double ratio = ac_baseline_ratio(b);
    for (int t = 0; t < AC_DTYPE_COUNT; t++)
        for (int o = 0; o < AC_OUT_COUNT; o++)
            for (int m = 0; m < AC_BASE_METRIC_COUNT; m++) {
                const ac_base_stat *s = ac_baseline_stat(b, (ac_dtype)t, (ac_output)o, (ac_base_metric)m);
                if (!s || s->verdict == AC_BASE_SAME)
                    continue;
                bool worse = s->verdict == AC_BASE_REGRESSION;
                fprintf(
                    f, "%s: %s %s %s error %s %.3g%% (median ratio %.4g %s %.4g over %ld cases, sign test p = %.2g)\n",
                    worse ? "REGRESSION" : "improvement", ac_dtype_name((ac_dtype)t), ac_output_name((ac_output)o),
                    ac_base_metric_name((ac_base_metric)m), worse ? "up" : "down",
                    100.0 * (worse ? s->median_ratio - 1.0 : 1.0 - s->median_ratio), s->median_ratio, worse ? ">" : "<",
                    worse ? ratio : 1.0 / ratio, s->pairs, worse ? s->p_regression : s->p_improvement);
            }
}

static void print_listed(FILE *f, const ac_baseline *b)
{
    const ac_base_listed *l;
    size_t n = ac_baseline_listed(b, &l);
    if (!n)
        return;
    fprintf(f, "not compared (%zu):\n", n);
    for (size_t i = 0; i < n && i < LISTED_SHOWN; i++)
        fprintf(f, "  %s\n      %s\n", l[i].why, l[i].line);
    if (n > LISTED_SHOWN)
        fprintf(f, "  ... and %zu more (all of them in the --json, --junit and --markdown reports)\n",
                n - LISTED_SHOWN);
}

void ac_baseline_print(FILE *f, const ac_baseline *b)
{
    ac_base_counts c = ac_baseline_counts(b);
    const ac_base_listed *l;
    size_t listed = ac_baseline_listed(b, &l);
    fprintf(f, "\nbaseline %s (%s): %ld cases run, %ld of them compared (passed in both runs), %zu not compared",
            ac_baseline_path(b), ac_baseline_kernel(b), c.new_cases, c.compared, listed);
    if (c.limited_out)
        fprintf(f, "; %ld baseline cases beyond --cases not run", c.limited_out);
    fprintf(f,
            "\nratios new / old per case; a regression: median > %.4g with a sign test p < %.2g "
            "(an improvement: median < %.4g)\n",
            ac_baseline_ratio(b), ac_baseline_alpha(b), 1.0 / ac_baseline_ratio(b));
    print_rows(f, b);
    print_verdicts(f, b);
    print_listed(f, b);
    fprintf(f, "baseline: %s\n",
            ac_baseline_regressed(b)      ? "REGRESSION"
                : ac_baseline_improved(b) ? "no regression; improved"
                                          : "no regression");
}
