/* harness/report/summary.c — results aggregated per dtype x output. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "harness/report/summary.h"

void ac_summary_add(ac_summary *s, const ac_result *r)
{
    s->cases++;
    if (r->status != AC_OK || r->verdict == AC_VERDICT_ERROR) {
        int st = r->status != AC_OK ? r->status : AC_ERR_INPUT; /* a gate without budgets */
        s->errors++;
        if (st > s->worst_status)
            s->worst_status = st;
        return;
    }
    if (r->verdict == AC_VERDICT_FAIL)
        s->failed++;
    else
        s->passed++;
    if ((unsigned)r->dtype >= AC_DTYPE_COUNT)
        return;
    for (int o = 0; o < AC_OUT_COUNT; o++) {
        const ac_metrics *m = &r->m[o];
        if (!m->present)
            continue;
        ac_summary_cell *a = &s->cell[r->dtype][o];
        if (a->cases++ == 0)
            a->vs_naive_mean_gated = -1.0;
        a->budget_vs_naive_mean = m->budget_vs_naive_mean;
        if (m->n_measured > 0 && (a->measured++ == 0 || m->max_scaled > a->max_scaled)) {
            a->max_scaled = m->max_scaled;
            a->budget_scaled = m->budget_scaled;
        }
        if (m->vs_naive_applies)
            a->vs_naive_mean_gated = fmax(a->vs_naive_mean_gated, m->vs_naive_mean);
        a->max_ulp = fmax(a->max_ulp, m->max_ulp);
        a->max_rmse = fmax(a->max_rmse, m->rmse);
        a->max_naive_rmse = fmax(a->max_naive_rmse, m->naive_rmse);
        a->vs_naive_max = fmax(a->vs_naive_max, m->vs_naive_max);
        a->vs_naive_mean = fmax(a->vs_naive_mean, m->vs_naive_mean);
        for (int k = 0; k < AC_SPECIAL_COUNT; k++)
            a->special[k] += (long)ac_metrics_special(m, (ac_special)k);
        a->specials += (long)ac_metrics_specials(m);
        /* a failure is charged to the output its kind names ("O:scaled") */
        size_t len = strlen(ac_output_name((ac_output)o));
        if (r->verdict == AC_VERDICT_FAIL && strncmp(r->kind, ac_output_name((ac_output)o), len) == 0 &&
            r->kind[len] == ':')
            a->failures++;
    }
}

/* A number, or "-" when there is none (no element measured, the check never applied, a budget off). */
static void cell(FILE *f, int width, bool have, double x)
{
    if (have)
        fprintf(f, " %*.3g", width, x);
    else
        fprintf(f, " %*s", width, "-");
}

/* fp8 rows: the RMSE FP8 kernels' tests judge by (FlashAttention-3 reports 9.1e-3 for its
 * fp8 forward on N(0,1) with 0.1% outliers), beside the contract's verdict; not gated. */
static void print_fp8_rmse(FILE *f, const ac_summary *s)
{
    for (int t = 0; t < AC_DTYPE_COUNT; t++) {
        const ac_summary_cell *a = &s->cell[t][AC_OUT_O];
        if (!ac_dtype_is_fp8((ac_dtype)t) || a->measured == 0)
            continue;
        fprintf(f, "  %s O RMSE (not gated; the largest of a case): kernel %.3g, naive baseline %.3g\n",
                ac_dtype_name((ac_dtype)t), a->max_rmse, a->max_naive_rmse);
    }
}

void ac_summary_print(FILE *f, const char *kernel, const ac_summary *s)
{
    /* Three significant digits: a check of one case takes milliseconds. */
    fprintf(f, "\n%s: %ld cases, %ld passed, %ld failed, %ld errors in %.3g s (%.3g cases/s)\n", kernel, s->cases,
            s->passed, s->failed, s->errors, s->seconds, s->seconds > 0 ? (double)s->cases / s->seconds : 0.0);
    bool any = false;
    for (int t = 0; t < AC_DTYPE_COUNT; t++)
        for (int o = 0; o < AC_OUT_COUNT; o++)
            any |= s->cell[t][o].cases > 0;
    if (!any)
        return;
    fprintf(f, "%-5s %-4s %7s %11s %7s %11s %7s %9s %8s %10s %9s\n", "dtype", "out", "cases", "max-scaled*", "budget",
            "naive-mean*", "budget", "specials*", "failures", "max-ulp", "naive-max");
    for (int t = 0; t < AC_DTYPE_COUNT; t++)
        for (int o = 0; o < AC_OUT_COUNT; o++) {
            const ac_summary_cell *a = &s->cell[t][o];
            if (!a->cases)
                continue;
            fprintf(f, "%-5s %-4s %7ld", ac_dtype_name((ac_dtype)t), ac_output_name((ac_output)o), a->cases);
            cell(f, 11, a->measured > 0, a->max_scaled);
            cell(f, 7, a->measured > 0, a->budget_scaled);
            cell(f, 11, a->vs_naive_mean_gated >= 0, a->vs_naive_mean_gated);
            cell(f, 7, a->budget_vs_naive_mean > 0, a->budget_vs_naive_mean);
            fprintf(f, " %9ld %8ld", a->specials, a->failures);
            cell(f, 10, a->measured > 0, a->max_ulp);
            cell(f, 9, a->measured > 0, a->vs_naive_max);
            fputc('\n', f);
        }
    fputs("* gated: max-scaled <= its budget (the worst case's; f32 budgets grow with length), naive-mean <= its\n"
          "  budget (cases with >= 1024 elements, 32 rows, 32 keys; else -), specials (NaN/Inf/zero/unwritten) = 0.\n"
          "  max-ulp is not gated: ulps of the reference's binade, huge wherever the reference cancels to near 0.\n",
          f);
    print_fp8_rmse(f, s);
}
