/* harness/verdict/test_baseline.c — the baseline comparison: pairing by case
 * line (every case not compared is listed with its reason), planted ratios
 * found in their cell with the p-value they must have, and the JSON reader. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness/files/test_tmpdir.h"
#include "harness/verdict/baseline.h"
#include "ref/rng.h"

static uint64_t rng_state = 20261124;

static double fresh(double lo, double hi)
{
    return lo + (hi - lo) * (double)(ac_splitmix64(&rng_state) >> 11) * 0x1p-53;
}

/* A passing result of `line` with every output present and fresh errors. */
static ac_result result(const char *line, ac_dtype t)
{
    ac_result r;
    memset(&r, 0, sizeof r);
    snprintf(r.line, sizeof r.line, "%s", line);
    r.verdict = AC_VERDICT_PASS;
    r.dtype = t;
    for (int o = 0; o < AC_OUT_COUNT; o++) {
        r.m[o].present = true;
        r.m[o].n_mean = 100;
        r.m[o].mean_abs = fresh(1e-4, 1e-2);
        r.m[o].max_scaled = fresh(0.1, 2.0);
    }
    return r;
}

static ac_result failed(const char *line, ac_dtype t, const char *kind)
{
    ac_result r = result(line, t);
    r.verdict = AC_VERDICT_FAIL;
    snprintf(r.kind, sizeof r.kind, "%s", kind);
    return r;
}

static ac_baseline *make(void)
{
    ac_baseline *b;
    ac_err err = {{0}};
    cr_assert_eq(ac_baseline_create("old.jsonl", "k", &b, &err), AC_OK);
    return b;
}

static const char *why_of(const ac_baseline *b, const char *line)
{
    const ac_base_listed *l;
    size_t n = ac_baseline_listed(b, &l);
    for (size_t i = 0; i < n; i++)
        if (!strcmp(l[i].line, line))
            return l[i].why;
    return NULL;
}

Test(harness_baseline, every_case_not_compared_is_listed_with_its_reason)
{
    ac_baseline *b = make();
    ac_err err = {{0}};
    ac_result old_a = result("v1 A", AC_F16), old_b = result("v1 B", AC_F16), old_c = result("v1 C", AC_F16);
    ac_result old_d = failed("v1 D", AC_F16, "O:scaled");
    const ac_result *olds[] = {&old_a, &old_b, &old_c, &old_d};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(ac_baseline_add_old(b, olds[i], &err), AC_OK);
    ac_result new_a = result("v1 A", AC_F16), new_b = failed("v1 B", AC_F16, "dK:vs-naive-mean");
    ac_result new_d = result("v1 D", AC_F16), new_e = result("v1 E", AC_F16);
    ac_result new_skip = result("v1 A", AC_F16); /* the file's line A once more: no old twin left */
    const ac_result *news[] = {&new_a, &new_b, &new_d, &new_e, &new_skip};
    for (int i = 0; i < 5; i++)
        cr_assert_eq(ac_baseline_add(b, news[i], &err), AC_OK);
    cr_assert_eq(ac_baseline_evaluate(b, 1.05, 1e-3, &err), AC_OK);
    ac_base_counts c = ac_baseline_counts(b);
    cr_assert_eq(c.old_cases, 4);
    cr_assert_eq(c.new_cases, 5);
    cr_assert_eq(c.compared, 1);
    const ac_base_listed *l;
    cr_assert_eq(ac_baseline_listed(b, &l), 5);
    cr_assert_str_eq(why_of(b, "v1 B"), "not compared: baseline pass, this run fail [dK:vs-naive-mean]");
    cr_assert_str_eq(why_of(b, "v1 D"), "not compared: baseline fail [O:scaled], this run pass");
    cr_assert_str_eq(why_of(b, "v1 E"), "only in this run: not in the baseline");
    cr_assert_str_eq(why_of(b, "v1 C"), "only in the baseline: not run this time");
    cr_assert_str_eq(l[1].line, "v1 D"); /* the new run's in their order, the old unpaired last */
    cr_assert_str_eq(l[3].line, "v1 A");
    cr_assert_str_eq(l[4].line, "v1 C");
    /* the one compared case gave one pair per output and metric, in f16 */
    const ac_base_stat *s = ac_baseline_stat(b, AC_F16, AC_OUT_DV, AC_BASE_MEAN_ABS);
    cr_assert_not_null(s);
    cr_assert_eq(s->pairs, 1);
    cr_assert_null(ac_baseline_stat(b, AC_BF16, AC_OUT_O, AC_BASE_MEAN_ABS));
    ac_baseline_free(b);
}

/* n cases of dtype t; output `which` of the new run is `factor` times the old
 * one's mean error, everything else identical. */
static ac_baseline *planted(int n, ac_dtype t, ac_output which, double factor, double ratio)
{
    ac_baseline *b = make();
    ac_err err = {{0}};
    for (int i = 0; i < n; i++) {
        char line[64];
        snprintf(line, sizeof line, "v1 seed=%d", i);
        ac_result old = result(line, t), now = old;
        now.m[which].mean_abs *= factor;
        cr_assert_eq(ac_baseline_add_old(b, &old, &err), AC_OK);
        cr_assert_eq(ac_baseline_add(b, &now, &err), AC_OK);
    }
    cr_assert_eq(ac_baseline_evaluate(b, ratio, 1e-3, &err), AC_OK);
    return b;
}

Test(harness_baseline, a_planted_increase_is_a_regression_in_its_cell_only)
{
    ac_baseline *b = planted(40, AC_BF16, AC_OUT_DQ, 1.3, 1.05);
    const ac_base_stat *s = ac_baseline_stat(b, AC_BF16, AC_OUT_DQ, AC_BASE_MEAN_ABS);
    cr_assert_float_eq(s->median_ratio, 1.3, 1e-12);
    cr_assert_eq(s->above, 40);
    cr_assert_eq(s->below, 0);
    cr_assert_float_eq(s->p_regression, ldexp(1.0, -40), 1e-20); /* 40 of 40 above */
    cr_assert_eq(s->verdict, AC_BASE_REGRESSION);
    cr_assert(ac_baseline_regressed(b));
    for (int o = 0; o < AC_OUT_COUNT; o++)
        for (int m = 0; m < AC_BASE_METRIC_COUNT; m++) {
            const ac_base_stat *x = ac_baseline_stat(b, AC_BF16, (ac_output)o, (ac_base_metric)m);
            if (o == AC_OUT_DQ && m == AC_BASE_MEAN_ABS)
                continue;
            cr_assert_eq(x->median_ratio, 1.0);
            cr_assert_eq(x->verdict, AC_BASE_SAME, "%s %s", ac_output_name((ac_output)o),
                         ac_base_metric_name((ac_base_metric)m));
            cr_assert_eq(x->p_regression, 1.0);
        }
    ac_baseline_free(b);
}

Test(harness_baseline, a_planted_decrease_is_an_improvement_not_a_regression)
{
    ac_baseline *b = planted(30, AC_F16, AC_OUT_O, 0.7, 1.05);
    const ac_base_stat *s = ac_baseline_stat(b, AC_F16, AC_OUT_O, AC_BASE_MEAN_ABS);
    cr_assert_eq(s->verdict, AC_BASE_IMPROVEMENT);
    cr_assert_float_eq(s->p_improvement, ldexp(1.0, -30), 1e-20);
    cr_assert_not(ac_baseline_regressed(b));
    cr_assert(ac_baseline_improved(b));
    ac_baseline_free(b);
}

Test(harness_baseline, an_increase_below_the_threshold_or_too_few_cases_is_not_flagged)
{
    ac_baseline *b = planted(200, AC_F32, AC_OUT_DV, 1.04, 1.05); /* certain, but below 1.05 */
    cr_assert_eq(ac_baseline_stat(b, AC_F32, AC_OUT_DV, AC_BASE_MEAN_ABS)->verdict, AC_BASE_SAME);
    cr_assert_eq(ac_baseline_stat(b, AC_F32, AC_OUT_DV, AC_BASE_MEAN_ABS)->above, 0);
    ac_baseline_free(b);
    b = planted(9, AC_F32, AC_OUT_DV, 2.0, 1.05); /* nine of nine: p = 2^-9 > 1e-3 */
    cr_assert_float_eq(ac_baseline_stat(b, AC_F32, AC_OUT_DV, AC_BASE_MEAN_ABS)->p_regression, ldexp(1.0, -9), 1e-15);
    cr_assert_not(ac_baseline_regressed(b));
    ac_baseline_free(b);
}

Test(harness_baseline, a_zero_old_error_gives_an_infinite_ratio_and_zero_over_zero_none)
{
    ac_baseline *b = make();
    ac_err err = {{0}};
    ac_result old = result("v1 Z", AC_F16), now = old;
    old.m[AC_OUT_O].mean_abs = 0.0, now.m[AC_OUT_O].mean_abs = 1e-3;
    old.m[AC_OUT_LSE].mean_abs = now.m[AC_OUT_LSE].mean_abs = 0.0;
    ac_baseline_add_old(b, &old, &err);
    ac_baseline_add(b, &now, &err);
    cr_assert_eq(ac_baseline_evaluate(b, 1.05, 1e-3, &err), AC_OK);
    cr_assert_eq(ac_baseline_stat(b, AC_F16, AC_OUT_O, AC_BASE_MEAN_ABS)->median_ratio, INFINITY);
    cr_assert_eq(ac_baseline_stat(b, AC_F16, AC_OUT_LSE, AC_BASE_MEAN_ABS)->median_ratio, 1.0);
    cr_assert_eq(ac_baseline_evaluate(b, 1.0, 1e-3, &err), AC_ERR_INPUT); /* a threshold must be above 1 */
    ac_baseline_free(b);
}

/* ---- the JSON Lines reader ------------------------------------------------------ */

/* Writes text to old.jsonl in a fresh temp dir, removed after the test; returns its path. */
static char *write_tmp(const char *text)
{
    static char path[128];
    snprintf(path, sizeof path, "%s/old.jsonl", ac_test_tmpdir("ac-baseline"));
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

#define REC(kernel, line, verdict, mean) \
    "{\"kernel\":\"" kernel "\",\"case\":\"" line "\",\"verdict\":\"" verdict "\",\"kind\":\"\",\"outputs\":" \
    "{\"O\":{\"n_mean\":64,\"max_scaled\":0.5,\"mean_abs\":" mean "}}}\n"

Test(harness_baseline, the_reader_keeps_the_kernel_asked_for_and_skips_typed_records, .fini = ac_test_tmpdirs_remove)
{
    char *path = write_tmp("{\"type\":\"environment\",\"gpu\":\"none\"}\n" REC("a", "v1 seed=1", "pass", "0.25")
                               REC("b", "v1 seed=1", "pass", "\"inf\"") "\n" REC("a", "v1 seed=2", "fail", "0.5"));
    ac_baseline *b;
    ac_err err = {{0}};
    cr_assert_eq(ac_baseline_load(path, "a", &b, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(ac_baseline_size(b), 2);
    cr_assert_str_eq(ac_baseline_line(b, 1), "v1 seed=2");
    cr_assert_str_eq(ac_baseline_kernel(b), "a");
    ac_result now = result("v1 seed=1", AC_F32);
    for (int o = 0; o < AC_OUT_COUNT; o++)
        now.m[o].present = o == AC_OUT_O;
    now.m[AC_OUT_O].mean_abs = 0.75;
    cr_assert_eq(ac_baseline_add(b, &now, &err), AC_OK);
    cr_assert_eq(ac_baseline_evaluate(b, 1.05, 1e-3, &err), AC_OK);
    cr_assert_float_eq(ac_baseline_stat(b, AC_F32, AC_OUT_O, AC_BASE_MEAN_ABS)->median_ratio, 3.0, 1e-15);
    ac_baseline_free(b);
    cr_assert_eq(ac_baseline_load(path, "c", &b, &err), AC_ERR_INPUT);
    cr_assert_not_null(strstr(err.msg, "records of several kernels (a, b) and none is c"), "%s", err.msg);
}

Test(harness_baseline, the_reader_names_the_file_and_line_of_a_bad_record, .fini = ac_test_tmpdirs_remove)
{
    char *path = write_tmp(REC("a", "v1 seed=1", "pass", "0.25") "{\"kernel\":\"a\",\"case\":\n");
    ac_baseline *b;
    ac_err err = {{0}};
    cr_assert_eq(ac_baseline_load(path, "a", &b, &err), AC_ERR_INPUT);
    char want[128];
    snprintf(want, sizeof want, "--baseline %s:2: not valid JSON", path);
    cr_assert_not_null(strstr(err.msg, want), "%s", err.msg);
    path = write_tmp(REC("a", "v1 seed=1", "maybe", "0.25"));
    cr_assert_eq(ac_baseline_load(path, "a", &b, &err), AC_ERR_INPUT);
    cr_assert_not_null(strstr(err.msg, ":1: verdict is not pass, fail, error or skipped: maybe"), "%s", err.msg);
    cr_assert_eq(ac_baseline_load("/nonexistent/old.jsonl", "a", &b, &err), AC_ERR_INPUT);
    cr_assert_str_eq(err.msg, "--baseline /nonexistent/old.jsonl: No such file or directory");
}
