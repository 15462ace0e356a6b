/* harness/report/report_baseline.c — the baseline comparison (verdict/baseline.h)
 * in every report format, as checks of the suite "baseline":
 *   - one per dtype x output x metric with pairs: passes, or fails with kind
 *     "regression" (an improvement passes, and says so);
 *   - one per case that was not compared, skipped, with the reason;
 *   - in the JSON Lines: {"type": "baseline", ...} per row with every figure,
 *     {"type": "baseline-case", ...} per case not compared, and one
 *     {"type": "baseline-summary", ...}. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "harness/report/report.h"
#include "harness/verdict/baseline.h"

#define SUITE "baseline"

static void add_number(cJSON *o, const char *key, double x)
{
    if (isfinite(x))
        cJSON_AddNumberToObject(o, key, x);
    else
        cJSON_AddStringToObject(o, key, isnan(x) ? "nan" : x > 0 ? "inf" : "-inf");
}

static cJSON *common(const ac_baseline *b, const char *type)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    cJSON_AddStringToObject(o, "baseline", ac_baseline_path(b));
    cJSON_AddStringToObject(o, "baseline_kernel", ac_baseline_kernel(b));
    return o;
}

static void emit(ac_report *r, cJSON *o, const char *name, const char *kind, const char *message,
                 ac_check_status status)
{
    char *json = cJSON_PrintUnformatted(o);
    ac_report_check c = {SUITE, name, kind, message, json ? json : "{}", status};
    ac_report_add_check(r, &c);
    cJSON_free(json);
    cJSON_Delete(o);
}

static void add_row(ac_report *r, const ac_baseline *b, ac_dtype t, ac_output out, ac_base_metric m,
                    const ac_base_stat *s)
{
    cJSON *o = common(b, "baseline");
    cJSON_AddStringToObject(o, "dtype", ac_dtype_name(t));
    cJSON_AddStringToObject(o, "output", ac_output_name(out));
    cJSON_AddStringToObject(o, "metric", ac_base_metric_name(m));
    add_number(o, "pairs", (double)s->pairs);
    add_number(o, "median_ratio", s->median_ratio);
    add_number(o, "threshold", ac_baseline_ratio(b));
    add_number(o, "alpha", ac_baseline_alpha(b));
    add_number(o, "above", (double)s->above);
    add_number(o, "below", (double)s->below);
    add_number(o, "p_regression", s->p_regression);
    add_number(o, "better", (double)s->better);
    add_number(o, "not_better", (double)s->not_better);
    add_number(o, "p_improvement", s->p_improvement);
    add_number(o, "wilcoxon_p_regression", s->wilcoxon_p_regression);
    add_number(o, "wilcoxon_p_improvement", s->wilcoxon_p_improvement);
    cJSON_AddStringToObject(o, "verdict", ac_base_verdict_name(s->verdict));
    char name[96], message[320];
    snprintf(name, sizeof name, "%s %s %s", ac_dtype_name(t), ac_output_name(out), ac_base_metric_name(m));
    snprintf(message, sizeof message,
             "%s: median ratio new/old %.4g over %ld cases (threshold %.4g); sign test p = %.3g (regression), "
             "%.3g (improvement); Wilcoxon p = %.3g, %.3g",
             ac_base_verdict_name(s->verdict), s->median_ratio, s->pairs, ac_baseline_ratio(b), s->p_regression,
             s->p_improvement, s->wilcoxon_p_regression, s->wilcoxon_p_improvement);
    bool bad = s->verdict == AC_BASE_REGRESSION;
    emit(r, o, name, bad ? "regression" : "", message, bad ? AC_CHECK_FAIL : AC_CHECK_PASS);
}

static void add_summary(ac_report *r, const ac_baseline *b, size_t n_listed)
{
    ac_base_counts c = ac_baseline_counts(b);
    cJSON *o = common(b, "baseline-summary");
    add_number(o, "baseline_cases", (double)c.old_cases);
    add_number(o, "cases", (double)c.new_cases);
    add_number(o, "compared", (double)c.compared);
    add_number(o, "not_compared", (double)n_listed);
    add_number(o, "beyond_cases_limit", (double)c.limited_out);
    add_number(o, "threshold", ac_baseline_ratio(b));
    add_number(o, "alpha", ac_baseline_alpha(b));
    const char *v = ac_baseline_regressed(b) ? "regression" : ac_baseline_improved(b) ? "improvement" : "same";
    cJSON_AddStringToObject(o, "verdict", v);
    char message[256];
    snprintf(message, sizeof message, "%ld cases run, %ld compared, %zu not compared: %s", c.new_cases, c.compared,
             n_listed, v);
    char *json = cJSON_PrintUnformatted(o);
    /* the summary is in the JSON only: JUnit and Markdown have the rows */
    ac_report_check chk = {NULL, "summary", "", message, json ? json : "{}", AC_CHECK_PASS};
    ac_report_add_check(r, &chk);
    cJSON_free(json);
    cJSON_Delete(o);
}

void ac_report_add_baseline(ac_report *r, const ac_baseline *b)
{
    if (!r || !b)
        return;
    for (int t = 0; t < AC_DTYPE_COUNT; t++)
        for (int o = 0; o < AC_OUT_COUNT; o++)
            for (int m = 0; m < AC_BASE_METRIC_COUNT; m++) {
                const ac_base_stat *s = ac_baseline_stat(b, (ac_dtype)t, (ac_output)o, (ac_base_metric)m);
                if (s)
                    add_row(r, b, (ac_dtype)t, (ac_output)o, (ac_base_metric)m, s);
            }
    const ac_base_listed *l;
    size_t n = ac_baseline_listed(b, &l);
    for (size_t i = 0; i < n; i++) {
        cJSON *o = common(b, "baseline-case");
        cJSON_AddStringToObject(o, "case", l[i].line);
        cJSON_AddStringToObject(o, "why", l[i].why);
        emit(r, o, l[i].line, "", l[i].why, AC_CHECK_SKIPPED);
    }
    add_summary(r, b, n);
}
