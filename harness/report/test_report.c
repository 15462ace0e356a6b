/* harness/report/test_report.c — the JSON Lines, JUnit and Markdown writers: what they
 * write parses back and holds the metrics it was given, at the right place;
 * the JSON holds no timing, so the same campaign gives the same bytes. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness/files/test_files_support.h"
#include "harness/harness.h"

/* Each test writes its reports into a fresh dir, removed after it even when it fails. */
TestSuite(harness_report, .init = make_dir, .fini = remove_dir);

static char *slurp(const char *path, size_t *len_out)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    char *buf = malloc(1 << 20);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = '\0';
    fclose(f);
    if (len_out)
        *len_out = n;
    return buf;
}

/* A failing result with known metrics: O off by 523.5 scaled at (0, 1, 3, 7). */
static ac_result failing_result(void)
{
    ac_result r;
    memset(&r, 0, sizeof r);
    snprintf(r.line, sizeof r.line, "v1 seed=9 b=1 hq=2 hkv=2 nq=8 nk=8 d=16 dtype=f16 mask=\"x\" <&>");
    r.verdict = AC_VERDICT_FAIL;
    r.dtype = AC_F16;
    snprintf(r.kind, sizeof r.kind, "O:scaled");
    snprintf(r.why, sizeof r.why, "O max scaled error 523.5 > budget 4 at b=0 h=1 row=3 col=7");
    r.seconds = 0.125;
    ac_metrics *o = &r.m[AC_OUT_O];
    o->present = true;
    o->n_compared = 256;
    o->n_measured = 253; /* the 3 wrong zeros are measured too; every element entered the magnitudes */
    o->max_ulp = 1200;
    o->max_scaled = 523.5;
    o->at_max_scaled = (ac_where){0, 1, 3, 7};
    o->vs_naive_max = INFINITY;
    o->vs_naive_mean = 2.25;
    o->n_wrong_zero = 3;
    ac_metrics *l = &r.m[AC_OUT_LSE];
    l->present = true;
    l->n_measured = 8;
    l->max_scaled = 0.5;
    l->at_max_scaled = (ac_where){0, 0, 2, -1};
    r.cert.rows_checked = 2;
    r.cert.certified = true;
    return r;
}

static ac_result passing_result(double seconds)
{
    ac_result r;
    memset(&r, 0, sizeof r);
    snprintf(r.line, sizeof r.line, "v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=f16");
    r.verdict = AC_VERDICT_PASS;
    r.dtype = AC_F16;
    r.seconds = seconds;
    r.m[AC_OUT_O].present = true;
    r.m[AC_OUT_O].n_measured = 64;
    r.m[AC_OUT_O].max_scaled = 0.75;
    r.m[AC_OUT_O].max_ulp = 2;
    return r;
}

Test(harness_report, json_lines_parse_back_with_the_metrics)
{
    ac_report *rep;
    ac_err err;
    cr_assert_eq(ac_report_open(&rep, &err), AC_OK);
    cr_assert_eq(ac_report_want(rep, "--json", path_of("r.json"), &err), AC_OK);
    ac_result f = failing_result(), p = passing_result(0.5);
    ac_report_add(rep, "cpu-flash-mutant-x", &f, "v1 seed=1 MINIMAL");
    ac_report_add(rep, "cpu-flash-mutant-x", &p, NULL);
    cr_assert_eq(ac_report_close(rep, &err), AC_OK, "%s", err.msg);

    char *text = slurp(path_of("r.json"), NULL);
    char *nl = strchr(text, '\n');
    cr_assert_not_null(nl, "one object per line");
    *nl = '\0';
    cJSON *a = cJSON_Parse(text), *b = cJSON_Parse(nl + 1);
    cr_assert_not_null(a);
    cr_assert_not_null(b);
    cr_assert_str_eq(cJSON_GetObjectItem(a, "kernel")->valuestring, "cpu-flash-mutant-x");
    cr_assert_str_eq(cJSON_GetObjectItem(a, "case")->valuestring, f.line);
    cr_assert_str_eq(cJSON_GetObjectItem(a, "verdict")->valuestring, "fail");
    cr_assert_str_eq(cJSON_GetObjectItem(a, "kind")->valuestring, "O:scaled");
    cr_assert_str_eq(cJSON_GetObjectItem(a, "minimal")->valuestring, "v1 seed=1 MINIMAL");
    cJSON *o = cJSON_GetObjectItem(cJSON_GetObjectItem(a, "outputs"), "O");
    cr_assert_eq(cJSON_GetObjectItem(o, "max_scaled")->valuedouble, 523.5);
    cr_assert_eq(cJSON_GetObjectItem(o, "max_ulp")->valuedouble, 1200);
    cr_assert_eq(cJSON_GetObjectItem(o, "wrong_zero")->valuedouble, 3);
    cr_assert_str_eq(cJSON_GetObjectItem(o, "vs_naive_max")->valuestring, "inf");
    cJSON *at = cJSON_GetObjectItem(o, "at_max_scaled");
    int want[4] = {0, 1, 3, 7};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(cJSON_GetArrayItem(at, i)->valueint, want[i], "at_max_scaled[%d]", i);
    cr_assert_eq(
        cJSON_GetArrayItem(
            cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(a, "outputs"), "LSE"), "at_max_scaled"), 3)
            ->valueint,
        -1, "LSE has no column");
    cr_assert_null(cJSON_GetObjectItem(cJSON_GetObjectItem(a, "outputs"), "dQ"), "absent outputs are not written");
    cJSON *cert = cJSON_GetObjectItem(a, "certification");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(cert, "certified")));
    cr_assert_eq(cJSON_GetObjectItem(cert, "rows_checked")->valueint, 2);
    cr_assert_str_eq(cJSON_GetObjectItem(b, "verdict")->valuestring, "pass");
    cr_assert_null(cJSON_GetObjectItem(b, "minimal"), "only failures carry a minimal line");
    cr_assert_null(strstr(text, "second"), "no timings in JSON");
    cr_assert_null(strstr(nl + 1, "second"), "no timings in JSON");
    cJSON_Delete(a);
    cJSON_Delete(b);
    free(text);
}

Test(harness_report, json_is_identical_whatever_the_timings)
{
    ac_err err;
    for (int run = 0; run < 2; run++) {
        ac_report *rep;
        cr_assert_eq(ac_report_open(&rep, &err), AC_OK);
        cr_assert_eq(ac_report_want(rep, "--json", path_of(run ? "b.json" : "a.json"), &err), AC_OK);
        ac_result p = passing_result(run ? 9.75 : 0.001), f = failing_result();
        ac_report_add(rep, "k", &p, NULL);
        ac_report_add(rep, "k", &f, "MIN");
        cr_assert_eq(ac_report_close(rep, &err), AC_OK);
    }
    size_t la, lb;
    char *a = slurp(path_of("a.json"), &la), *b = slurp(path_of("b.json"), &lb);
    cr_assert_eq(la, lb);
    cr_assert_eq(memcmp(a, b, la), 0);
    free(a);
    free(b);
}

Test(harness_report, junit_has_a_suite_per_kernel_and_escaped_names)
{
    ac_report *rep;
    ac_err err;
    cr_assert_eq(ac_report_open(&rep, &err), AC_OK);
    cr_assert_eq(ac_report_want(rep, "--junit", path_of("r.xml"), &err), AC_OK);
    ac_result f = failing_result(), p = passing_result(0.5);
    ac_report_add(rep, "k1", &f, "MIN");
    ac_report_add(rep, "k1", &p, NULL);
    ac_report_add(rep, "k2", &p, NULL);
    cr_assert_eq(ac_report_close(rep, &err), AC_OK);
    char *x = slurp(path_of("r.xml"), NULL);
    cr_assert_not_null(strstr(x, "<testsuite name=\"k1\" tests=\"2\" failures=\"1\" errors=\"0\" skipped=\"0\">"), "%s",
                       x);
    cr_assert_not_null(strstr(x, "<testsuite name=\"k2\" tests=\"1\" failures=\"0\""));
    cr_assert_not_null(
        strstr(x, "name=\"v1 seed=9 b=1 hq=2 hkv=2 nq=8 nk=8 d=16 dtype=f16 mask=&quot;x&quot; &lt;&amp;&gt;\""));
    cr_assert_not_null(strstr(x, "<failure message=\"O max scaled error 523.5 &gt; budget 4"), "%s", x);
    cr_assert_not_null(strstr(x, "minimal: MIN</failure>"));
    free(x);
}

/* A proof in JUnit: the base and its mutants; a caught mutant is a pass, an uncaught one the failure. */
static char *proof_junit(bool base_clean)
{
    ac_report *rep;
    ac_err err;
    cr_assert_eq(ac_report_open(&rep, &err), AC_OK);
    cr_assert_eq(ac_report_want(rep, "--junit", path_of("p.xml"), &err), AC_OK);
    ac_result f = failing_result(), p = passing_result(0.5);
    ac_report_add(rep, "fam-base", &p, NULL);
    ac_report_add(rep, "fam-base", base_clean ? &p : &f, base_clean ? NULL : "MIN0");
    ac_report_add(rep, "fam-mutant-caught", &p, NULL);
    ac_report_add(rep, "fam-mutant-caught", &f, "MIN1");
    for (int i = 0; i < 3; i++)
        ac_report_add(rep, "fam-mutant-missed", &p, NULL);
    ac_report_add(rep, "other-kernel", &p, NULL); /* not of the family: an ordinary suite */
    cr_assert_eq(ac_report_close(rep, &err), AC_OK);
    return slurp(path_of("p.xml"), NULL);
}

Test(harness_report, junit_of_a_proof_passes_caught_mutants_and_fails_the_missed_one)
{
    char *x = proof_junit(true);
    cr_assert_not_null(strstr(x, "<testsuite name=\"prove fam-base\" tests=\"3\" failures=\"1\" errors=\"0\""), "%s",
                       x);
    cr_assert_not_null(strstr(x, "name=\"base fam-base is clean (2 cases)\"/>"), "%s", x);
    cr_assert_not_null(strstr(x,
                              "name=\"mutant fam-mutant-caught is caught\">\n      <system-out>caught after 2 "
                              "cases: [O:scaled] minimal: MIN1</system-out>"),
                       "%s", x);
    cr_assert_not_null(strstr(x,
                              "name=\"mutant fam-mutant-missed is caught\">\n      <failure message=\"not "
                              "caught in 3 cases\""),
                       "%s", x);
    cr_assert_null(strstr(x, "<testsuite name=\"fam-mutant"), "mutants appear only in the proof: %s", x);
    cr_assert_not_null(strstr(x, "<testsuite name=\"other-kernel\" tests=\"1\" failures=\"0\""), "%s", x);
    free(x);
    x = proof_junit(false);
    cr_assert_not_null(strstr(x, "tests=\"3\" failures=\"2\""), "%s", x);
    cr_assert_not_null(strstr(x,
                              "name=\"base fam-base is clean (2 cases)\">\n      <failure message=\"the correct "
                              "kernel failed: O max scaled error 523.5"),
                       "%s", x);
    free(x);
}

Test(harness_report, markdown_has_worst_errors_and_both_lines)
{
    ac_report *rep;
    ac_err err;
    cr_assert_eq(ac_report_open(&rep, &err), AC_OK);
    cr_assert_eq(ac_report_want(rep, "--markdown", path_of("r.md"), &err), AC_OK);
    ac_result f = failing_result(), p = passing_result(0.5);
    ac_report_add(rep, "k1", &p, NULL);
    ac_report_add(rep, "k1", &f, "v1 seed=1 MIN");
    cr_assert_eq(ac_report_close(rep, &err), AC_OK);
    char *md = slurp(path_of("r.md"), NULL);
    cr_assert_not_null(strstr(md, "### `k1`: 1 passed, 1 failed"), "%s", md);
    /* worst over the two cases: ulp 1200, scaled 523.5, vs-naive inf / 2.25, 3 wrong zeros */
    cr_assert_not_null(strstr(md, "| f16 | O | 2 | 1.2e+03 | 524 | inf | 2.25 | 0 | 0 | 0 | 3 | 0 |"), "%s", md);
    cr_assert_not_null(strstr(md, "  - minimal:  `v1 seed=1 MIN`"));
    cr_assert_not_null(strstr(md, "  - original: `v1 seed=9"));
    free(md);
}

/* Every row of the format table is reachable by its flag and writes its file,
 * which names the kernel; a flag no row has is refused. */
Test(harness_report, every_format_of_the_table_writes_its_file)
{
    size_t n = ac_report_format_count();
    cr_assert_geq(n, 3);
    for (size_t i = 0; i < n; i++) {
        const ac_report_format *fmt = ac_report_format_at(i);
        cr_assert_eq(ac_report_format_index(fmt->flag), (int)i, "%s", fmt->flag);
        ac_report *rep;
        ac_err err = {{0}};
        cr_assert_eq(ac_report_open(&rep, &err), AC_OK);
        cr_assert_eq(ac_report_want(rep, fmt->flag, path_of("any"), &err), AC_OK, "%s: %s", fmt->flag, err.msg);
        cr_assert_eq(ac_report_want(rep, fmt->flag, path_of("again"), &err), AC_ERR_INPUT, "%s twice", fmt->flag);
        ac_result f = failing_result();
        ac_report_add(rep, "kernel-xyz", &f, NULL);
        cr_assert_eq(ac_report_close(rep, &err), AC_OK, "%s: %s", fmt->flag, err.msg);
        char *doc = slurp(path_of("any"), NULL);
        cr_assert_not_null(strstr(doc, "kernel-xyz"), "%s wrote:\n%s", fmt->flag, doc);
        free(doc);
        unlink(path_of("any"));
    }
    ac_report *rep;
    ac_err err = {{0}};
    cr_assert_eq(ac_report_open(&rep, &err), AC_OK);
    cr_assert_eq(ac_report_want(rep, "--no-such-format", path_of("x"), &err), AC_ERR_INPUT);
    cr_assert_eq(ac_report_close(rep, &err), AC_OK, "nothing asked for, nothing written");
}

/* ---- hostile text (issue 13) ---------------------------------------------------- */

/* A plugin writes any bytes into its message: the JSON, JUnit and Markdown
 * reports stay valid UTF-8, the JSON parses and the XML is well-formed
 * (Python's strict readers judge), bad bytes show as \xHH, good ones stay. */
Test(harness_report, any_bytes_from_a_plugin_give_well_formed_reports)
{
    ac_report *rep;
    ac_err err = {{0}};
    cr_assert_eq(ac_report_open(&rep, &err), AC_OK);
    const char *flags[3] = {"--json", "--junit", "--markdown"}, *names[3] = {"r.json", "r.xml", "r.md"};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(ac_report_want(rep, flags[i], path_of(names[i]), &err), AC_OK, "%s", err.msg);
    ac_result f = failing_result();
    /* stray and cut bytes, an overlong '/', a surrogate, past U+10FFFF, controls, U+FFFE; then
     * valid two-, three- and four-byte characters */
    snprintf(f.why, sizeof f.why,
             "bad \xff\xfe|\xc3|\xc0\xaf|\xed\xa0\x80|\xf4\x90\x80\x80|\x01\x1b|\xef\xbf\xbe|"
             "ok \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 <&>\"\t\r\n end");
    snprintf(f.kind, sizeof f.kind, "O:\x80");
    ac_report_add(rep, "plug\xffin", &f, "v1 \xfe");
    cr_assert_eq(ac_report_close(rep, &err), AC_OK, "%s", err.msg);
    char cmd[1024];
    snprintf(
        cmd, sizeof cmd,
        "cd '%s' && python3 -c 'import json, xml.dom.minidom as m\n"
        "row = json.loads(open(\"r.json\", encoding=\"utf-8\").read())\n"
        "want = \"bad \\\\xFF\\\\xFE|\\\\xC3|\\\\xC0\\\\xAF|\\\\xED\\\\xA0\\\\x80|\\\\xF4\\\\x90\\\\x80\\\\x80|\"\n"
        "assert row[\"why\"].startswith(want), row[\"why\"]\n"
        "assert \"ok \\u00e9 \\u20ac \\U0001F600 <&>\" in row[\"why\"], row[\"why\"]\n"
        "assert row[\"kernel\"] == \"plug\\\\xFFin\" and row[\"minimal\"] == \"v1 \\\\xFE\", row\n"
        "doc = m.parse(\"r.xml\")\n"
        "msg = doc.getElementsByTagName(\"failure\")[0].getAttribute(\"message\")\n"
        "assert \"\\\\x01\\\\x1B|\\\\xEF\\\\xBF\\\\xBE|ok \\u00e9\" in msg, msg\n"
        "open(\"r.md\", encoding=\"utf-8\").read()'",
        dir);
    cr_assert_eq(system(cmd), 0, "a report is not well-formed or lost text (see above)");
}

/* A report whose folder vanished during the run: exit status 2 (a path the
 * user gave), as for every unwritable report path. */
Test(harness_report, a_report_that_cannot_be_written_at_close_is_an_input_error)
{
    char sub[128];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    cr_assert_eq(mkdir(sub, 0755), 0);
    ac_report *rep;
    ac_err err = {{0}};
    cr_assert_eq(ac_report_open(&rep, &err), AC_OK);
    cr_assert_eq(ac_report_want(rep, "--json", path_of("sub/r.json"), &err), AC_OK, "%s", err.msg);
    cr_assert_eq(rmdir(sub), 0);
    ac_result p = passing_result(0.1);
    ac_report_add(rep, "k", &p, NULL);
    cr_assert_eq(ac_report_close(rep, &err), AC_ERR_INPUT, "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "sub/r.json"), "%s", err.msg);
}
