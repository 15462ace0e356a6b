/* harness/report/test_records.c — JSON Lines read back (record.c): a case
 * record becomes the result it was written from, field for field (specials
 * and non-finite numbers included), and the environment and campaign records
 * keep their fields; failures deduplicated by signature (failures.c).
 * Suite harness_records. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/files/test_files_support.h"
#include "harness/harness.h"
#include "harness/report/failures.h"
#include "harness/report/record.h"

/* A result with every kind of field set to a value of its own. */
static ac_result planted_result(void)
{
    ac_result r;
    memset(&r, 0, sizeof r);
    snprintf(r.line, sizeof r.line,
             "v1 seed=9 b=1 hq=2 hkv=1 nq=8 nk=5 d=16 dtype=bf16 mask=causal-br layout=bhsd "
             "dist=normal(0,1) scale=auto");
    r.index = 1234567;
    r.verdict = AC_VERDICT_FAIL;
    r.dtype = AC_BF16;
    snprintf(r.kind, sizeof r.kind, "dK:scaled");
    snprintf(r.why, sizeof r.why, "dK scaled error 77.25 > budget 4 \"quoted\"\nsecond line");
    r.cert = (ac_cert){.max_ulp_o = 0.0078125, .max_abs_lse = 3.5e-15, .rows_checked = 2, .certified = true};
    r.ref = (ac_ref_info){.tier = AC_REF_GPU,
                          .spot_checked = true,
                          .spot_agrees = false,
                          .spot_units = 0.75,
                          .spot_output = "dV",
                          .spot_rows = 2,
                          .spot_keys = 3};
    for (int k = 0; k < AC_OUT_COUNT; k++) {
        ac_metrics *m = &r.m[k];
        m->present = k != AC_OUT_DQ; /* one output absent */
        m->n_compared = 100 + (size_t)k;
        m->n_mean = 90 + (size_t)k;
        m->max_ulp = 1e30 * (k + 1);
        m->mean_ulp = 0.1 * k;
        m->at_max_ulp = (ac_where){0, k, 3, 1};
        m->max_scaled = k == AC_OUT_DK ? 77.25 : 0.5 + k;
        m->at_max_scaled = (ac_where){0, 1, 4, k == AC_OUT_LSE ? -1 : 2};
        m->max_abs = 1.0 / 3.0;
        m->mean_abs = 2.0 / 7.0;
        m->has_naive = k % 2 == 0;
        m->naive_max_abs = 5e-3;
        m->naive_mean_abs = 0;
        m->vs_naive_max = k == AC_OUT_O ? INFINITY : 1.5;
        m->vs_naive_mean = k == AC_OUT_LSE ? NAN : 0.25;
        m->mean_escale = 12.5;
        m->n_unexpected_nan = 1, m->n_overflow = 2, m->n_lost_special = 3, m->n_wrong_zero = 4, m->n_unwritten = 5;
        m->first_special = (ac_where){0, 0, 7, 0};
        m->masked_rows = 6 + (size_t)k, m->masked_rows_zero = 5, m->masked_rows_nan = 1, m->masked_rows_lse_posinf = 2;
    }
    return r;
}

/* write_json's dir is removed after a test that stops before write_json does. */
TestSuite(harness_records, .fini = remove_dir);

static char *write_json(const ac_result *r, const char *minimal)
{
    make_dir();
    ac_report *rep;
    ac_err err;
    cr_assert_eq(ac_report_open(&rep, &err), AC_OK);
    cr_assert_eq(ac_report_want(rep, "--json", path_of("r.jsonl"), &err), AC_OK);
    ac_report_field env[] = {
        {"seed", AC_FIELD_NUMBER, NULL, 7}, {"kernel", AC_FIELD_STRING, "k", 0}, {"backward", AC_FIELD_BOOL, NULL, 1}};
    ac_report_record(rep, "environment", env, 3);
    ac_report_add(rep, "cpu-flash", r, minimal);
    ac_report_field camp[] = {{"cases", AC_FIELD_NUMBER, NULL, 1}, {"seconds", AC_FIELD_NUMBER, NULL, 0.5}};
    ac_report_record(rep, "campaign", camp, 2);
    cr_assert_eq(ac_report_close(rep, &err), AC_OK, "%s", err.msg);
    char *text;
    size_t len;
    cr_assert_eq(ac_read_file(path_of("r.jsonl"), &text, &len, &err), AC_OK);
    text = realloc(text, len + 1);
    text[len] = '\0';
    remove_dir();
    return text;
}

static void assert_same_number(double got, double want, const char *what)
{
    cr_assert(got == want || (isnan(got) && isnan(want)), "%s: read back %.17g, written %.17g", what, got, want);
}

static void assert_same_metrics(const ac_metrics *a, const ac_metrics *b, const char *out)
{
    cr_assert_eq(a->present, b->present, "%s present", out);
    if (!b->present)
        return;
    cr_assert_eq(a->n_compared, b->n_compared, "%s", out);
    cr_assert_eq(a->n_mean, b->n_mean, "%s", out);
    assert_same_number(a->max_ulp, b->max_ulp, out);
    assert_same_number(a->mean_ulp, b->mean_ulp, out);
    assert_same_number(a->max_scaled, b->max_scaled, out);
    assert_same_number(a->max_abs, b->max_abs, out);
    assert_same_number(a->mean_abs, b->mean_abs, out);
    assert_same_number(a->vs_naive_max, b->vs_naive_max, out);
    assert_same_number(a->vs_naive_mean, b->vs_naive_mean, out);
    assert_same_number(a->mean_escale, b->mean_escale, out);
    cr_assert_eq(a->has_naive, b->has_naive, "%s", out);
    cr_assert(!memcmp(&a->at_max_scaled, &b->at_max_scaled, sizeof a->at_max_scaled), "%s at_max_scaled", out);
    cr_assert(!memcmp(&a->at_max_ulp, &b->at_max_ulp, sizeof a->at_max_ulp), "%s at_max_ulp", out);
    cr_assert(!memcmp(&a->first_special, &b->first_special, sizeof a->first_special), "%s first_special", out);
    for (int s = 0; s < AC_SPECIAL_COUNT; s++)
        cr_assert_eq(ac_metrics_special(a, (ac_special)s), ac_metrics_special(b, (ac_special)s), "%s %s", out,
                     ac_special_name((ac_special)s));
    cr_assert_eq(a->masked_rows, b->masked_rows, "%s", out);
    cr_assert_eq(a->masked_rows_zero, b->masked_rows_zero, "%s", out);
    cr_assert_eq(a->masked_rows_nan, b->masked_rows_nan, "%s", out);
    cr_assert_eq(a->masked_rows_lse_posinf, b->masked_rows_lse_posinf, "%s", out);
}

Test(harness_records, a_case_record_reads_back_into_the_result_it_was_written_from)
{
    ac_result want = planted_result();
    const char *minimal = "v1 seed=1 b=1 hq=2 hkv=1 nq=1 nk=1 d=1 dtype=bf16 mask=none layout=bhsd dist=normal(0,1) "
                          "scale=auto";
    char *text = write_json(&want, minimal);
    char *line = strchr(text, '\n') + 1; /* past the environment record */
    *strchr(line, '\n') = '\0';
    ac_record rec;
    ac_err err = {{0}};
    cr_assert_eq(ac_record_parse(line, &rec, &err), AC_OK, "%s", err.msg);
    const ac_result *got = &rec.res;
    cr_assert_eq(rec.type, AC_RECORD_CASE);
    cr_assert_str_eq(rec.kernel, "cpu-flash");
    cr_assert(rec.has_index && got->index == 1234567);
    cr_assert(rec.has_minimal);
    cr_assert_str_eq(rec.minimal, minimal);
    cr_assert_str_eq(got->line, want.line);
    cr_assert_str_eq(got->why, want.why);
    cr_assert_str_eq(got->kind, want.kind);
    cr_assert_eq(got->verdict, AC_VERDICT_FAIL);
    cr_assert_eq(got->dtype, AC_BF16);
    cr_assert_eq(got->cert.rows_checked, 2);
    assert_same_number(got->cert.max_ulp_o, want.cert.max_ulp_o, "cert");
    assert_same_number(got->cert.max_abs_lse, want.cert.max_abs_lse, "cert lse");
    cr_assert_eq(got->ref.tier, AC_REF_GPU);
    cr_assert(got->ref.spot_checked && !got->ref.spot_agrees && got->ref.spot_keys == 3);
    cr_assert_str_eq(got->ref.spot_output, "dV");
    for (int k = 0; k < AC_OUT_COUNT; k++)
        assert_same_metrics(&got->m[k], &want.m[k], ac_output_name((ac_output)k));
    ac_record_free(&rec);
    free(text);
}

Test(harness_records, environment_and_campaign_records_keep_their_fields)
{
    ac_result r = planted_result();
    char *text = write_json(&r, NULL);
    char *second = strchr(text, '\n');
    *second = '\0';
    ac_record env;
    cr_assert_eq(ac_record_parse(text, &env, NULL), AC_OK);
    cr_assert_eq(env.type, AC_RECORD_ENVIRONMENT);
    char v[64];
    cr_assert_str_eq(ac_record_value(&env, "seed", v, sizeof v), "7");
    cr_assert_str_eq(ac_record_value(&env, "kernel", v, sizeof v), "\"k\"");
    cr_assert_null(ac_record_value(&env, "absent", v, sizeof v));
    ac_report_field f[8];
    cr_assert_eq(ac_record_fields(&env, f, 8), 3, "seed, kernel, backward; not type");
    cr_assert(f[2].type == AC_FIELD_BOOL && f[2].x == 1);
    ac_record_free(&env);
    char *last = strrchr(text + strlen(text) + 1, '{');
    ac_record camp;
    cr_assert_eq(ac_record_parse(last, &camp, NULL), AC_OK);
    cr_assert_eq(camp.type, AC_RECORD_CAMPAIGN);
    cr_assert_str_eq(ac_record_value(&camp, "seconds", v, sizeof v), "0.5");
    ac_record_free(&camp);
    free(text);
}

Test(harness_records, what_is_not_a_record_is_refused_naming_the_key)
{
    ac_record rec;
    ac_err err = {{0}};
    cr_assert_eq(ac_record_parse("[1, 2]", &rec, &err), AC_ERR_INPUT);
    ac_record_free(&rec);
    cr_assert_eq(ac_record_parse("{\"kernel\":\"k\",\"case\":\"x\",\"verdict\":\"maybe\"}", &rec, &err), AC_ERR_INPUT);
    cr_assert_not_null(strstr(err.msg, "verdict"), "%s", err.msg);
    ac_record_free(&rec);
    cr_assert_eq(ac_record_parse("{\"type\":\"note\",\"x\":1}", &rec, &err), AC_OK, "an unknown type is skipped");
    cr_assert_eq(rec.type, AC_RECORD_OTHER);
    cr_assert_str_eq(rec.type_name, "note");
    ac_record_free(&rec);
}

/* ---- failures by signature ------------------------------------------------------ */

static ac_result failure_at(long index, const char *kind, const char *why)
{
    ac_result r;
    memset(&r, 0, sizeof r);
    r.index = index;
    r.verdict = AC_VERDICT_FAIL;
    snprintf(r.kind, sizeof r.kind, "%s", kind);
    snprintf(r.why, sizeof r.why, "%s", why);
    snprintf(r.line, sizeof r.line, "original of case %ld", index);
    return r;
}

Test(harness_records, failures_are_counted_once_per_signature_with_their_lowest_case)
{
    ac_failure_set s = {0};
    bool is_new;
    ac_result a7 = failure_at(7, "O:scaled", "why 7"), a3 = failure_at(3, "O:scaled", "why 3");
    ac_result b5 = failure_at(5, "O:scaled", "why 5"), c9 = failure_at(9, "dK:scaled", "why 9");
    cr_assert_not_null(ac_failure_set_add(&s, "k", &a7, "minimal A", &is_new));
    cr_assert(is_new);
    const ac_failure_sig *e = ac_failure_set_add(&s, "k", &a3, "minimal A", &is_new);
    cr_assert(!is_new, "same kernel, kind and minimal line");
    cr_assert_eq(e->count, 2);
    cr_assert_eq(e->first_index, 3, "the lowest index, whatever the arrival order");
    cr_assert_str_eq(e->why, "why 3");
    cr_assert_str_eq(e->line, "original of case 3");
    ac_failure_set_add(&s, "k", &b5, "minimal B", &is_new);
    cr_assert(is_new);
    ac_failure_set_add(&s, "k", &c9, "minimal A", &is_new);
    cr_assert(is_new, "another kind is another failure");
    ac_failure_set_add(&s, "k2", &a7, "minimal A", &is_new);
    cr_assert(is_new, "another kernel too");
    for (long i = 100; i < 1100; i++) { /* a thousand distinct lines: the table grows */
        char line[32];
        ac_result r = failure_at(i, "O:scaled", "many");
        snprintf(line, sizeof line, "minimal %ld", i);
        ac_failure_set_add(&s, "k", &r, line, &is_new);
        cr_assert(is_new);
    }
    ac_failure_set_add(&s, "k", &b5, "minimal B", &is_new);
    cr_assert(!is_new, "still found after the table grew");
    cr_assert_eq(s.n, 1004);
    cr_assert_eq(s.failures, 1006);
    const ac_failure_sig **v = ac_failure_set_sorted(&s);
    cr_assert_eq(v[0]->first_index, 3);
    cr_assert_eq(v[1]->first_index, 5);
    cr_assert_eq(v[1]->count, 2);
    cr_assert_str_eq(v[2]->kernel, "k2", "index 7: k's own case 7 counts under its first, case 3");
    cr_assert_str_eq(v[3]->kind, "dK:scaled");
    free(v);
    char *text;
    size_t len;
    FILE *f = open_memstream(&text, &len);
    ac_failure_set_print(f, &s);
    fclose(f);
    const char *head = "distinct failures: 1004 of 1006 failing cases\n  2x k [O:scaled] minimal A\n"
                       "  2x k [O:scaled] minimal B\n  1x k2 [O:scaled] minimal A\n  1x k [dK:scaled] minimal A\n";
    cr_assert(!strncmp(text, head, strlen(head)), "%.300s", text);
    free(text);
    ac_failure_set_free(&s);
}

Test(harness_records, no_failure_prints_nothing)
{
    ac_failure_set s = {0};
    char *text;
    size_t len;
    FILE *f = open_memstream(&text, &len);
    ac_failure_set_print(f, &s);
    fclose(f);
    cr_assert_eq(len, 0);
    free(text);
}
