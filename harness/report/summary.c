/* harness/report/summary.c — results aggregated per dtype x output. */
#include <math.h>
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
        a->cases++;
        a->max_ulp = fmax(a->max_ulp, m->max_ulp);
        a->max_scaled = fmax(a->max_scaled, m->max_scaled);
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

void ac_summary_print(FILE *f, const char *kernel, const ac_summary *s)
{
    /* Three significant digits: a check of one case takes milliseconds. */
    fprintf(f, "\n%s: %ld cases, %ld passed, %ld failed, %ld errors in %.3g s (%.3g cases/s)\n", kernel, s->cases,
            s->passed, s->failed, s->errors, s->seconds, s->seconds > 0 ? (double)s->cases / s->seconds : 0.0);
    fprintf(f, "%-5s %-4s %7s %10s %10s %9s %9s %8s %8s\n", "dtype", "out", "cases", "max-ulp", "max-scaled",
            "naive-max", "naive-mean", "specials", "failures");
    for (int t = 0; t < AC_DTYPE_COUNT; t++)
        for (int o = 0; o < AC_OUT_COUNT; o++) {
            const ac_summary_cell *a = &s->cell[t][o];
            if (!a->cases)
                continue;
            fprintf(f, "%-5s %-4s %7ld %10.3g %10.3g %9.3g %9.3g %8ld %8ld\n", ac_dtype_name((ac_dtype)t),
                    ac_output_name((ac_output)o), a->cases, a->max_ulp, a->max_scaled, a->vs_naive_max,
                    a->vs_naive_mean, a->specials, a->failures);
        }
}
