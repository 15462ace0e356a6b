/* harness/verdict/test_budget.c — the budgets file and the gate: the repository's
 * budgets.txt loads, malformed files are rejected naming the line and field,
 * the f32 growth law is applied, and a failing gate names the class or the
 * budget, by how much and where, with a stable kind. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/harness.h"

static const char *const valid_tail =
    "f16 O scaled 4\nf16 LSE scaled 4 grows\nf16 dQ scaled 4\nf16 dK scaled 4\nf16 dV scaled 4\n"
    "f16 O vs-naive-mean 1.5\nf16 LSE vs-naive-mean off\nf16 dQ vs-naive-mean 1.5\n"
    "f16 dK vs-naive-mean 1.5\nf16 dV vs-naive-mean 1.5\n"
    "bf16 O scaled 5\nbf16 LSE scaled 4 grows\nbf16 dQ scaled 4\nbf16 dK scaled 4\nbf16 dV scaled 4\n"
    "bf16 O vs-naive-mean 1.5\nbf16 LSE vs-naive-mean 1.5\nbf16 dQ vs-naive-mean 1.5\n"
    "bf16 dK vs-naive-mean 1.5\nbf16 dV vs-naive-mean 1.5\n"
    "f32 O scaled 16 grows\nf32 LSE scaled 4 grows\nf32 dQ scaled 16 grows\nf32 dK scaled 16 grows\n"
    "f32 dV scaled 16 grows\nf32 O vs-naive-mean 2\nf32 LSE vs-naive-mean 2\nf32 dQ vs-naive-mean 2\n"
    "f32 dK vs-naive-mean 2\nf32 dV vs-naive-mean 2\n"
    "f16 dSink scaled 4\nf16 dSink vs-naive-mean off\nbf16 dSink scaled 4\nbf16 dSink vs-naive-mean off\n"
    "f32 dSink scaled 16 grows\nf32 dSink vs-naive-mean off\n"
    "f16 dBias scaled 4\nf16 dBias vs-naive-mean off\nbf16 dBias scaled 4\nbf16 dBias vs-naive-mean off\n"
    "f32 dBias scaled 16 grows\nf32 dBias vs-naive-mean off\n"
    "e4m3 O scaled 4\ne4m3 LSE scaled 4 grows\ne4m3 dQ scaled 4\ne4m3 dK scaled 4\ne4m3 dV scaled 4\n"
    "e4m3 O vs-naive-mean 1.5\ne4m3 LSE vs-naive-mean 1.5\ne4m3 dQ vs-naive-mean off\ne4m3 dK vs-naive-mean off\n"
    "e4m3 dV vs-naive-mean off\ne4m3 dSink scaled 4\ne4m3 dSink vs-naive-mean off\ne4m3 dBias scaled 4\n"
    "e4m3 dBias vs-naive-mean off\n"
    "e5m2 O scaled 4\ne5m2 LSE scaled 4 grows\ne5m2 dQ scaled 4\ne5m2 dK scaled 4\ne5m2 dV scaled 4\n"
    "e5m2 O vs-naive-mean 1.5\ne5m2 LSE vs-naive-mean 1.5\ne5m2 dQ vs-naive-mean off\ne5m2 dK vs-naive-mean off\n"
    "e5m2 dV vs-naive-mean off\ne5m2 dSink scaled 4\ne5m2 dSink vs-naive-mean off\ne5m2 dBias scaled 4\n"
    "e5m2 dBias vs-naive-mean off\n";

/* Writes text to a fresh temporary file; returns its path (static buffer). */
static const char *write_temp(const char *text)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/attncheck-budgets-XXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    cr_assert(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static int load_text(const char *text, ac_budgets *b, ac_err *err)
{
    const char *path = write_temp(text);
    int status = ac_budgets_load(path, b, err);
    unlink(path);
    return status;
}

static void load_valid(ac_budgets *b)
{
    char text[8192];
    snprintf(text, sizeof text, "# test budgets\nversion 1\ngrowth-length 64\n\n%s", valid_tail);
    ac_err err;
    cr_assert_eq(load_text(text, b, &err), AC_OK, "%s", err.msg);
}

/* A file whose line `bad_line` (1-based, after "version 1") is replaced by `bad`. */
static void expect_rejected(const char *bad, const char *want_in_msg)
{
    char text[8192];
    snprintf(text, sizeof text, "version 1\n%s\n%s", bad, valid_tail);
    ac_budgets b;
    ac_err err = {{0}};
    cr_assert_eq(load_text(text, &b, &err), AC_ERR_INPUT, "'%s' accepted", bad);
    cr_assert(strstr(err.msg, ":2: ") != NULL, "message should name line 2: %s", err.msg);
    cr_assert(strstr(err.msg, want_in_msg) != NULL, "message should say '%s': %s", want_in_msg, err.msg);
}

/* ---- the file -------------------------------------------------------------- */

Test(harness_budget, repository_budgets_file_loads_with_every_entry)
{
    ac_budgets b;
    ac_err err;
    unsetenv("ATTNCHECK_BUDGETS");
    const char *path = ac_budgets_default_path();
    cr_assert(strstr(path, "/budgets.txt") != NULL, "%s", path);
    cr_assert_eq(ac_budgets_load(path, &b, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(b.version, 1);
    cr_assert_eq(b.growth_length, 64.0);
    cr_assert_eq(b.max_scaled[AC_F16][AC_OUT_O], 4.0);
    cr_assert_eq(b.max_vs_naive_mean[AC_BF16][AC_OUT_DQ], 1.5);
    cr_assert(b.scaled_grows[AC_F32][AC_OUT_O] && !b.scaled_grows[AC_F16][AC_OUT_O]);
    cr_assert(b.scaled_grows[AC_F16][AC_OUT_LSE], "LSE is an f32 computation for every dtype");
    cr_assert_str_eq(b.source, path);
}

Test(harness_budget, environment_variable_names_the_budgets_file)
{
    setenv("ATTNCHECK_BUDGETS", "/somewhere/else.txt", 1);
    cr_assert_str_eq(ac_budgets_default_path(), "/somewhere/else.txt");
}

Test(harness_budget, values_and_options_parse)
{
    ac_budgets b;
    load_valid(&b);
    cr_assert_eq(b.max_scaled[AC_BF16][AC_OUT_O], 5.0);
    cr_assert_eq(b.max_vs_naive_mean[AC_F16][AC_OUT_LSE], 0.0, "off is 0");
    cr_assert_eq(b.max_vs_naive_mean[AC_F32][AC_OUT_DV], 2.0);
    cr_assert(b.scaled_grows[AC_F32][AC_OUT_DK]);
}

/* One bad line each (copied into the test's process: the strings live in the struct). */
typedef struct {
    char line[64], want[32];
} bad_entry;

ParameterizedTestParameters(harness_budget, parse_errors_name_the_line_and_field)
{
    static bad_entry bad[] = {
        {"f16 Out scaled 4", "field 2 (output)"},     {"f8 O scaled 4", "field 1 (dtype)"},
        {"f16 O tolerance 4", "field 3 (metric)"},    {"f16 O scaled -1", "field 4 (value)"},
        {"f16 O scaled four", "field 4 (value)"},     {"f16 O scaled 4 sometimes", "field 5"},
        {"f16 O vs-naive-mean 1.5 grows", "field 5"}, {"f16 O scaled", "got 3 fields"},
        {"growth-length 0", "growth-length"},
    };
    return cr_make_param_array(bad_entry, bad, sizeof bad / sizeof bad[0]);
}

ParameterizedTest(bad_entry *bad, harness_budget, parse_errors_name_the_line_and_field)
{
    expect_rejected(bad->line, bad->want);
}

Test(harness_budget, repeated_entry_names_both_lines)
{
    ac_budgets b;
    ac_err err;
    char text[8192];
    snprintf(text, sizeof text, "version 1\n%sf16 dK scaled 8\n", valid_tail);
    cr_assert_eq(load_text(text, &b, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, ":72: f16 dK scaled given twice (first on line 5)") != NULL, "%s", err.msg);
}

Test(harness_budget, missing_entry_and_missing_version_are_errors)
{
    ac_budgets b;
    ac_err err;
    const char *cut = strstr(valid_tail, "f32 dV vs-naive-mean");
    char text[8192];
    snprintf(text, sizeof text, "version 1\n%.*s", (int)(cut - valid_tail), valid_tail);
    cr_assert_eq(load_text(text, &b, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "no 'f32 dV vs-naive-mean' line") != NULL, "%s", err.msg);
    cr_assert_eq(load_text(valid_tail, &b, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, ":1: the first line must be 'version 1'") != NULL, "%s", err.msg);
    cr_assert_eq(load_text("version 2\n", &b, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, ":1: unsupported version") != NULL, "%s", err.msg);
    cr_assert_eq(ac_budgets_load("/nonexistent/budgets.txt", &b, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "cannot open /nonexistent/budgets.txt") != NULL, "%s", err.msg);
}

Test(harness_budget, f32_budget_grows_with_sqrt_of_length_over_growth_length)
{
    ac_budgets b;
    load_valid(&b);
    ac_problem small = ac_problem_dense(1, 1, 1, 16, 16, 32);
    ac_problem longer = ac_problem_dense(1, 1, 1, 16, 256, 64);
    ac_problem wide = ac_problem_dense(1, 1, 1, 8, 8, 256);
    cr_assert_eq(ac_budget_max_scaled(&b, &small, AC_F32, AC_OUT_O), 16.0, "never below the base");
    cr_assert_eq(ac_budget_max_scaled(&b, &longer, AC_F32, AC_OUT_O), 32.0, "16 * sqrt(256 / 64)");
    cr_assert_eq(ac_budget_max_scaled(&b, &wide, AC_F32, AC_OUT_DQ), 32.0, "d counts as a length");
    cr_assert_eq(ac_budget_max_scaled(&b, &longer, AC_F16, AC_OUT_O), 4.0, "f16 O does not grow");
    cr_assert_eq(ac_budget_max_scaled(&b, &longer, AC_F16, AC_OUT_LSE), 8.0, "LSE grows for every dtype");
}

/* ---- the gate ---------------------------------------------------------------- */

static ac_inputs gate_inputs(ac_dtype t, int seqlen)
{
    ac_inputs in;
    memset(&in, 0, sizeof in);
    in.c.dtype = t;
    in.p = ac_problem_dense(1, 2, 2, seqlen, seqlen, 32);
    return in;
}

/* Metrics of a clean run: every output present, small errors, naive meaningful. */
static void clean_metrics(ac_metrics m[AC_OUT_COUNT])
{
    memset(m, 0, sizeof(ac_metrics) * AC_OUT_COUNT);
    for (int o = 0; o < AC_OUT_COUNT; o++) {
        m[o].present = m[o].has_naive = true;
        m[o].n_compared = m[o].n_mean = 4096;
        m[o].max_scaled = 0.9;
        m[o].mean_abs = 1e-4;
        m[o].naive_mean_abs = 1e-4;
        m[o].vs_naive_mean = 1.0;
        m[o].mean_escale = 1.0;
    }
}

static ac_verdict gate(const ac_inputs *in, ac_metrics m[AC_OUT_COUNT], char *why, char *kind)
{
    ac_budgets b;
    load_valid(&b);
    return ac_gate(in, m, &b, why, 1024, kind, 64);
}

Test(harness_budget, clean_metrics_pass_with_empty_why_and_kind)
{
    ac_inputs in = gate_inputs(AC_F16, 64);
    ac_metrics m[AC_OUT_COUNT];
    char why[1024] = "x", kind[64] = "x";
    clean_metrics(m);
    cr_assert_eq(gate(&in, m, why, kind), AC_VERDICT_PASS, "%s", why);
    cr_assert_str_eq(why, "");
    cr_assert_str_eq(kind, "");
}

Test(harness_budget, scaled_failure_names_budget_excess_and_place)
{
    ac_inputs in = gate_inputs(AC_F16, 64);
    ac_metrics m[AC_OUT_COUNT];
    char why[1024], kind[64];
    clean_metrics(m);
    m[AC_OUT_O].max_scaled = 37.2;
    m[AC_OUT_O].at_max_scaled = (ac_where){0, 1, 5, 17};
    m[AC_OUT_O].worst_ref = -1.25, m[AC_OUT_O].worst_got = -1.5, m[AC_OUT_O].worst_escale = 3.5;
    cr_assert_eq(gate(&in, m, why, kind), AC_VERDICT_FAIL);
    cr_assert_str_eq(kind, "O:scaled");
    cr_assert_str_eq(why,
                     "O scaled error 37.2 > budget 4 (f16 O scaled; 9.3x over) at b=0 h=1 row=5 col=17 "
                     "(expected -1.25, got -1.5, error scale E 3.5)");
}

Test(harness_budget, grown_budget_is_spelled_out_and_kv_places_name_the_key)
{
    ac_inputs in = gate_inputs(AC_F32, 256);
    ac_metrics m[AC_OUT_COUNT];
    char why[1024], kind[64];
    clean_metrics(m);
    m[AC_OUT_DK].max_scaled = 31.0; /* under 16 * 2 = 32: passes */
    cr_assert_eq(gate(&in, m, why, kind), AC_VERDICT_PASS, "%s", why);
    m[AC_OUT_DK].max_scaled = 40.0;
    m[AC_OUT_DK].at_max_scaled = (ac_where){0, 1, 200, 3};
    m[AC_OUT_DK].worst_ref = 2.0, m[AC_OUT_DK].worst_got = 2.0078125, m[AC_OUT_DK].worst_escale = 0.5;
    cr_assert_eq(gate(&in, m, why, kind), AC_VERDICT_FAIL);
    cr_assert_str_eq(kind, "dK:scaled");
    cr_assert_str_eq(why,
                     "dK scaled error 40 > budget 32 (f32 dK scaled = 16 x growth 2; 1.25x over) "
                     "at b=0 hkv=1 key=200 col=3 (expected 2, got 2.00781, error scale E 0.5)");
}

Test(harness_budget, forward_outputs_come_first_and_every_failure_is_listed)
{
    ac_inputs in = gate_inputs(AC_F16, 64);
    ac_metrics m[AC_OUT_COUNT];
    char why[1024], kind[64];
    clean_metrics(m);
    m[AC_OUT_DQ].n_unexpected_nan = 7; /* the backward's NaN is a consequence ... */
    m[AC_OUT_DQ].first_special = (ac_where){0, 1, 2, 3};
    m[AC_OUT_LSE].n_unexpected_nan = 2;
    m[AC_OUT_LSE].first_special = (ac_where){1, 0, 9, -1};
    m[AC_OUT_LSE].special_ref = 1.5;
    m[AC_OUT_LSE].special_got = NAN;
    cr_assert_eq(gate(&in, m, why, kind), AC_VERDICT_FAIL);
    cr_assert_str_eq(kind, "LSE:unexpected-nan", "LSE comes before dQ");
    cr_assert(strstr(why, "LSE unexpected-nan: 2 of 4096 elements") == why, "%s", why);
    cr_assert(strstr(why, "at b=1 h=0 row=9 (expected 1.5, got nan)") != NULL, "%s", why);
    m[AC_OUT_O].max_scaled = 500.0; /* ... of this one: O is judged first, whatever the class */
    m[AC_OUT_O].at_max_scaled = (ac_where){0, 0, 4, 1};
    m[AC_OUT_O].worst_ref = 0.25, m[AC_OUT_O].worst_got = 0.5, m[AC_OUT_O].worst_escale = 0.125;
    cr_assert_eq(gate(&in, m, why, kind), AC_VERDICT_FAIL);
    cr_assert_str_eq(kind, "O:scaled");
    cr_assert(strstr(why,
                     "O scaled error 500 > budget 4 (f16 O scaled; 125x over) at b=0 h=0 row=4 col=1 "
                     "(expected 0.25, got 0.5, error scale E 0.125); also failing: LSE:unexpected-nan "
                     "(2 elements), dQ:unexpected-nan (7 elements)") == why,
              "%s", why);
    cr_assert_eq(m[AC_OUT_O].failed, AC_FAILED_SCALED);
    cr_assert_eq(m[AC_OUT_LSE].failed, 1u << AC_SPECIAL_UNEXPECTED_NAN);
    cr_assert_eq(m[AC_OUT_DK].failed, 0u);
    cr_assert_float_eq(m[AC_OUT_O].budget_scaled, 4.0, 0.0);
    m[AC_OUT_O].n_unwritten = 1; /* within an output, a special class outranks the magnitudes */
    cr_assert_eq(gate(&in, m, why, kind), AC_VERDICT_FAIL);
    cr_assert_str_eq(kind, "O:unwritten");
    cr_assert(strstr(why, "also failing: O:scaled 500 > 4, LSE:unexpected-nan") != NULL, "%s", why);
}

Test(harness_budget, nan_convention_on_masked_rows_is_explained)
{
    ac_inputs in = gate_inputs(AC_BF16, 64);
    ac_metrics m[AC_OUT_COUNT];
    char why[1024], kind[64];
    clean_metrics(m);
    m[AC_OUT_O].n_unexpected_nan = 32;
    m[AC_OUT_O].masked_rows = m[AC_OUT_O].masked_rows_nan = 1;
    cr_assert_eq(gate(&in, m, why, kind), AC_VERDICT_FAIL);
    cr_assert_str_eq(kind, "O:unexpected-nan");
    cr_assert(strstr(why, "fully masked rows give NaN") != NULL, "%s", why);
}

Test(harness_budget, mean_vs_naive_fails_only_where_the_naive_mean_means_something)
{
    ac_inputs in = gate_inputs(AC_F16, 64);
    ac_metrics m[AC_OUT_COUNT];
    char why[1024], kind[64];
    clean_metrics(m);
    m[AC_OUT_DQ].mean_abs = 2.5e-4;
    m[AC_OUT_DQ].vs_naive_mean = 2.5;
    cr_assert_eq(gate(&in, m, why, kind), AC_VERDICT_FAIL);
    cr_assert_str_eq(kind, "dQ:vs-naive-mean");
    cr_assert(strstr(why, "is 2.5x the naive baseline's 0.0001 > budget 1.5 (f16 dQ vs-naive-mean") != NULL, "%s", why);
    m[AC_OUT_DQ].n_mean = AC_VS_NAIVE_MIN_ELEMS - 1; /* too few elements in the means */
    cr_assert_eq(gate(&in, m, why, kind), AC_VERDICT_PASS, "%s", why);
    m[AC_OUT_DQ].n_mean = 4096;
    ac_inputs one_row = gate_inputs(AC_F16, 64);
    one_row.p.seqlen_q = 1; /* 2 heads x 1 row: too few query rows, however many elements */
    cr_assert_eq(gate(&one_row, m, why, kind), AC_VERDICT_PASS, "%s", why);
    ac_inputs few_keys = gate_inputs(AC_F16, 64);
    few_keys.p.seqlen_k = 15; /* 2 heads x 15 keys = 30 < 32 */
    cr_assert_eq(gate(&few_keys, m, why, kind), AC_VERDICT_PASS, "%s", why);
    few_keys.p.seqlen_k = 16; /* 32 keys: the check applies again */
    cr_assert_eq(gate(&few_keys, m, why, kind), AC_VERDICT_FAIL, "%s", why);
    m[AC_OUT_DQ].naive_mean_abs = 0x1p-11 / 128; /* below u * mean(E) / 64 */
    cr_assert_eq(gate(&in, m, why, kind), AC_VERDICT_PASS, "%s", why);
    m[AC_OUT_DQ].vs_naive_mean = 1.0;
    m[AC_OUT_LSE].vs_naive_mean = 100.0; /* f16 LSE vs-naive-mean is off in the test file */
    cr_assert_eq(gate(&in, m, why, kind), AC_VERDICT_PASS, "%s", why);
}

Test(harness_budget, uncertified_reference_is_noted_not_failed)
{
    char why[256] = "O scaled error 5 > budget 4";
    ac_cert cert = {.max_ulp_o = 0.05, .rows_checked = 4, .certified = false};
    cr_assert(ac_cert_note(&cert, why, sizeof why));
    cr_assert(strstr(why, "; reference not certified: fp64 O is 0.05 ulp from MPFR on 4 sampled rows") != NULL, "%s",
              why);
    cr_assert(strstr(why, "not a kernel failure") != NULL, "%s", why);
    char clean[64] = "";
    cert.certified = true;
    cr_assert(!ac_cert_note(&cert, clean, sizeof clean));
    cert = (ac_cert){0}; /* skipped: nothing to say */
    cr_assert(!ac_cert_note(&cert, clean, sizeof clean));
    cr_assert_str_eq(clean, "");
}
