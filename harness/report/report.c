/* harness/report/report.c — the machine-readable and PR-comment writers.
 *
 *   --json FILE      JSON Lines, one object per case: kernel, case line, verdict,
 *                    kind, why, certification, every metric of every output, and
 *                    the minimal line of a failure.  No timings: the same seed and
 *                    options give byte-identical output (cJSON prints numbers in
 *                    the shortest round-tripping form; non-finite ones as strings).
 *   --junit FILE     one <testsuite> per kernel, one <testcase> per case, named by
 *                    its case line; <failure message=why>, <error>, <skipped/>.
 *   --markdown FILE  per kernel x dtype x output the worst errors and the special
 *                    counts, then the failures with their original and minimal lines.
 *
 * Everything is collected in memory and written at close, each file through
 * ac_write_atomic (temp + fsync + rename), so a crash never leaves half a report. */
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "harness/files/files.h"
#include "harness/report/report.h"

#define REPORT_MAX_KERNELS 64
#define REPORT_MAX_FAILURES_SHOWN 50

typedef struct {
    size_t cases;                  /* cases in which this output was present */
    double max_ulp, max_scaled, vs_naive_max, vs_naive_mean;
    size_t n_nan, n_overflow, n_lost, n_wrong_zero, n_unwritten;
} out_agg;

typedef struct {
    char name[128];
    size_t n_pass, n_fail, n_error, n_skipped;
    out_agg agg[AC_DTYPE_COUNT][AC_OUT_COUNT];
    char *junit_body;              /* <testcase> elements */
    size_t junit_len;
    FILE *junit;                   /* open_memstream on junit_body */
} kernel_agg;

typedef struct {
    char *kernel, *line, *minimal, *why;
} failure_rec;

struct ac_report {
    char *json_path, *junit_path, *markdown_path;
    char *json_body;
    size_t json_len;
    FILE *json;                    /* open_memstream on json_body */
    kernel_agg kernels[REPORT_MAX_KERNELS];
    int n_kernels;
    failure_rec *failures;
    size_t n_failures, cap_failures;
};

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

int ac_report_open(ac_report **out, const char *json_path, const char *junit_path, const char *markdown_path,
                   ac_err *err)
{
    ac_report *r = calloc(1, sizeof *r);
    if (!r)
        return ac_fail(err, AC_ERR_ENV, "out of memory");
    r->json_path = dup_or_null(json_path);
    r->junit_path = dup_or_null(junit_path);
    r->markdown_path = dup_or_null(markdown_path);
    if (json_path && !(r->json = open_memstream(&r->json_body, &r->json_len))) {
        free(r->json_path);
        free(r->junit_path);
        free(r->markdown_path);
        free(r);
        return ac_fail(err, AC_ERR_ENV, "out of memory");
    }
    *out = r;
    return AC_OK;
}

/* ---- JSON ------------------------------------------------------------------ */

static void add_number(cJSON *o, const char *key, double x)
{
    if (isfinite(x))
        cJSON_AddNumberToObject(o, key, x);
    else
        cJSON_AddStringToObject(o, key, isnan(x) ? "nan" : x > 0 ? "inf" : "-inf");
}

static void add_where(cJSON *o, const char *key, ac_where w)
{
    int v[4] = {w.b, w.h, w.row, w.col};
    cJSON_AddItemToObject(o, key, cJSON_CreateIntArray(v, 4));
}

static cJSON *metrics_json(const ac_metrics *m)
{
    cJSON *o = cJSON_CreateObject();
    add_number(o, "n_compared", (double)m->n_compared);
    add_number(o, "n_mean", (double)m->n_mean);
    add_number(o, "max_ulp", m->max_ulp);
    add_number(o, "mean_ulp", m->mean_ulp);
    add_where(o, "at_max_ulp", m->at_max_ulp);
    add_number(o, "max_scaled", m->max_scaled);
    add_where(o, "at_max_scaled", m->at_max_scaled);
    add_number(o, "max_abs", m->max_abs);
    add_number(o, "mean_abs", m->mean_abs);
    cJSON_AddBoolToObject(o, "has_naive", m->has_naive);
    add_number(o, "naive_max_abs", m->naive_max_abs);
    add_number(o, "naive_mean_abs", m->naive_mean_abs);
    add_number(o, "vs_naive_max", m->vs_naive_max);
    add_number(o, "vs_naive_mean", m->vs_naive_mean);
    add_number(o, "mean_escale", m->mean_escale);
    add_number(o, "unexpected_nan", (double)m->n_unexpected_nan);
    add_number(o, "overflow", (double)m->n_overflow);
    add_number(o, "lost_special", (double)m->n_lost_special);
    add_number(o, "wrong_zero", (double)m->n_wrong_zero);
    add_number(o, "unwritten", (double)m->n_unwritten);
    add_where(o, "first_special", m->first_special);
    add_number(o, "masked_rows", (double)m->masked_rows);
    add_number(o, "masked_rows_zero", (double)m->masked_rows_zero);
    add_number(o, "masked_rows_nan", (double)m->masked_rows_nan);
    add_number(o, "masked_rows_lse_posinf", (double)m->masked_rows_lse_posinf);
    return o;
}

static const char *verdict_name(const ac_result *res)
{
    if (res->unsupported)
        return "skipped";
    switch (res->verdict) {
    case AC_VERDICT_PASS: return "pass";
    case AC_VERDICT_FAIL: return "fail";
    default: return "error";
    }
}

static void write_json(ac_report *r, const char *kernel, const ac_result *res, const char *minimal_line)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "kernel", kernel);
    cJSON_AddStringToObject(o, "case", res->line);
    cJSON_AddStringToObject(o, "verdict", verdict_name(res));
    add_number(o, "status", res->status);
    cJSON_AddStringToObject(o, "kind", res->kind);
    cJSON_AddStringToObject(o, "why", res->why);
    cJSON *cert = cJSON_AddObjectToObject(o, "certification");
    add_number(cert, "rows_checked", (double)res->cert.rows_checked);
    cJSON_AddBoolToObject(cert, "certified", res->cert.certified);
    add_number(cert, "max_ulp_o", res->cert.max_ulp_o);
    add_number(cert, "max_abs_lse", res->cert.max_abs_lse);
    cJSON *outs = cJSON_AddObjectToObject(o, "outputs");
    for (int k = 0; k < AC_OUT_COUNT; k++)
        if (res->m[k].present)
            cJSON_AddItemToObject(outs, ac_output_name((ac_output)k), metrics_json(&res->m[k]));
    if (res->verdict == AC_VERDICT_FAIL && minimal_line)
        cJSON_AddStringToObject(o, "minimal", minimal_line);
    char *text = cJSON_PrintUnformatted(o);
    if (text) {
        fputs(text, r->json);
        fputc('\n', r->json);
        cJSON_free(text);
    }
    cJSON_Delete(o);
}

/* ---- JUnit ------------------------------------------------------------------ */

static void xml_escaped(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\n': fputs("&#10;", f); break;
        default:
            if ((unsigned char)*s >= 0x20 || *s == '\t')
                fputc(*s, f);
        }
    }
}

static kernel_agg *kernel_slot(ac_report *r, const char *kernel)
{
    for (int i = 0; i < r->n_kernels; i++)
        if (strcmp(r->kernels[i].name, kernel) == 0)
            return &r->kernels[i];
    if (r->n_kernels == REPORT_MAX_KERNELS)
        return NULL;
    kernel_agg *k = &r->kernels[r->n_kernels];
    memset(k, 0, sizeof *k);
    snprintf(k->name, sizeof k->name, "%s", kernel);
    if (r->junit_path && !(k->junit = open_memstream(&k->junit_body, &k->junit_len)))
        return NULL;
    r->n_kernels++;
    return k;
}

static void write_junit_case(kernel_agg *k, const ac_result *res, const char *minimal_line)
{
    FILE *f = k->junit;
    fputs("    <testcase classname=\"", f);
    xml_escaped(f, k->name);
    fputs("\" name=\"", f);
    xml_escaped(f, res->line);
    fprintf(f, "\" time=\"%.3f\"", res->seconds);
    if (res->verdict == AC_VERDICT_PASS && !res->unsupported) {
        fputs("/>\n", f);
        return;
    }
    fputs(">\n      ", f);
    const char *tag = res->unsupported ? "skipped" : res->verdict == AC_VERDICT_FAIL ? "failure" : "error";
    fprintf(f, "<%s message=\"", tag);
    xml_escaped(f, res->why);
    fputs("\" type=\"", f);
    xml_escaped(f, res->kind);
    fputs("\">", f);
    if (minimal_line && res->verdict == AC_VERDICT_FAIL) {
        fputs("minimal: ", f);
        xml_escaped(f, minimal_line);
    }
    fprintf(f, "</%s>\n    </testcase>\n", tag);
}

/* ---- aggregates for the Markdown summary ------------------------------------ */

static void aggregate(kernel_agg *k, const ac_result *res)
{
    if (res->unsupported) {
        k->n_skipped++;
        return;
    }
    if (res->verdict == AC_VERDICT_PASS)
        k->n_pass++;
    else if (res->verdict == AC_VERDICT_FAIL)
        k->n_fail++;
    else
        k->n_error++;
    if ((unsigned)res->dtype >= AC_DTYPE_COUNT)
        return;
    for (int o = 0; o < AC_OUT_COUNT; o++) {
        const ac_metrics *m = &res->m[o];
        if (!m->present)
            continue;
        out_agg *a = &k->agg[res->dtype][o];
        a->cases++;
        a->max_ulp = fmax(a->max_ulp, m->max_ulp);
        a->max_scaled = fmax(a->max_scaled, m->max_scaled);
        a->vs_naive_max = fmax(a->vs_naive_max, m->vs_naive_max);
        a->vs_naive_mean = fmax(a->vs_naive_mean, m->vs_naive_mean);
        a->n_nan += m->n_unexpected_nan;
        a->n_overflow += m->n_overflow;
        a->n_lost += m->n_lost_special;
        a->n_wrong_zero += m->n_wrong_zero;
        a->n_unwritten += m->n_unwritten;
    }
}

static void remember_failure(ac_report *r, const char *kernel, const ac_result *res, const char *minimal_line)
{
    if (r->n_failures == r->cap_failures) {
        size_t cap = r->cap_failures ? 2 * r->cap_failures : 16;
        failure_rec *bigger = realloc(r->failures, cap * sizeof *bigger);
        if (!bigger)
            return;
        r->failures = bigger;
        r->cap_failures = cap;
    }
    failure_rec *f = &r->failures[r->n_failures++];
    f->kernel = strdup(kernel);
    f->line = strdup(res->line);
    f->minimal = dup_or_null(minimal_line);
    f->why = strdup(res->why);
}

void ac_report_add(ac_report *r, const char *kernel, const ac_result *res, const char *minimal_line)
{
    if (!r)
        return;
    if (r->json)
        write_json(r, kernel, res, minimal_line);
    kernel_agg *k = kernel_slot(r, kernel);
    if (!k)
        return;
    if (k->junit)
        write_junit_case(k, res, minimal_line);
    aggregate(k, res);
    if (res->verdict == AC_VERDICT_FAIL && !res->unsupported && r->markdown_path)
        remember_failure(r, kernel, res, minimal_line);
}

/* ---- writing at close ------------------------------------------------------- */

static int close_stream(FILE **f) /* flushes the memstream so its buffer is complete */
{
    if (!*f)
        return 0;
    int rc = fclose(*f);
    *f = NULL;
    return rc;
}

static int write_junit(ac_report *r, ac_err *err)
{
    char *doc = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&doc, &len);
    if (!f)
        return ac_fail(err, AC_ERR_ENV, "out of memory");
    fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"attncheck\">\n", f);
    for (int i = 0; i < r->n_kernels; i++) {
        kernel_agg *k = &r->kernels[i];
        close_stream(&k->junit);
        size_t n = k->n_pass + k->n_fail + k->n_error + k->n_skipped;
        fputs("  <testsuite name=\"", f);
        xml_escaped(f, k->name);
        fprintf(f, "\" tests=\"%zu\" failures=\"%zu\" errors=\"%zu\" skipped=\"%zu\">\n", n, k->n_fail,
                k->n_error, k->n_skipped);
        if (k->junit_body)
            fwrite(k->junit_body, 1, k->junit_len, f);
        fputs("  </testsuite>\n", f);
    }
    fputs("</testsuites>\n", f);
    fclose(f);
    int st = ac_write_atomic(r->junit_path, doc, len, err);
    free(doc);
    return st;
}

static void markdown_table(FILE *f, const kernel_agg *k)
{
    fprintf(f, "### `%s`: %zu passed, %zu failed, %zu errors, %zu skipped\n\n", k->name, k->n_pass, k->n_fail,
            k->n_error, k->n_skipped);
    fputs("| dtype | output | cases | max ulp | max scaled | vs-naive max | vs-naive mean "
          "| NaN | overflow | lost special | wrong zero | unwritten |\n"
          "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
          f);
    for (int t = 0; t < AC_DTYPE_COUNT; t++)
        for (int o = 0; o < AC_OUT_COUNT; o++) {
            const out_agg *a = &k->agg[t][o];
            if (!a->cases)
                continue;
            fprintf(f, "| %s | %s | %zu | %.3g | %.3g | %.3g | %.3g | %zu | %zu | %zu | %zu | %zu |\n",
                    ac_dtype_name((ac_dtype)t), ac_output_name((ac_output)o), a->cases, a->max_ulp, a->max_scaled,
                    a->vs_naive_max, a->vs_naive_mean, a->n_nan, a->n_overflow, a->n_lost, a->n_wrong_zero,
                    a->n_unwritten);
        }
    fputc('\n', f);
}

static void markdown_failures(FILE *f, const ac_report *r)
{
    if (!r->n_failures) {
        fputs("No accuracy failures.\n", f);
        return;
    }
    fprintf(f, "#### Failures (%zu)\n\n", r->n_failures);
    for (size_t i = 0; i < r->n_failures && i < REPORT_MAX_FAILURES_SHOWN; i++) {
        const failure_rec *x = &r->failures[i];
        fprintf(f, "- `%s`: %s\n  - original: `%s`\n", x->kernel, x->why, x->line);
        if (x->minimal)
            fprintf(f, "  - minimal:  `%s`\n", x->minimal);
    }
    if (r->n_failures > REPORT_MAX_FAILURES_SHOWN)
        fprintf(f, "- ... and %zu more (see the JSON report)\n", r->n_failures - REPORT_MAX_FAILURES_SHOWN);
}

static int write_markdown(ac_report *r, ac_err *err)
{
    char *doc = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&doc, &len);
    if (!f)
        return ac_fail(err, AC_ERR_ENV, "out of memory");
    fputs("## attncheck summary\n\n", f);
    for (int i = 0; i < r->n_kernels; i++)
        markdown_table(f, &r->kernels[i]);
    markdown_failures(f, r);
    fclose(f);
    int st = ac_write_atomic(r->markdown_path, doc, len, err);
    free(doc);
    return st;
}

static void report_free(ac_report *r)
{
    close_stream(&r->json);
    free(r->json_body);
    for (int i = 0; i < r->n_kernels; i++) {
        close_stream(&r->kernels[i].junit);
        free(r->kernels[i].junit_body);
    }
    for (size_t i = 0; i < r->n_failures; i++) {
        free(r->failures[i].kernel);
        free(r->failures[i].line);
        free(r->failures[i].minimal);
        free(r->failures[i].why);
    }
    free(r->failures);
    free(r->json_path);
    free(r->junit_path);
    free(r->markdown_path);
    free(r);
}

int ac_report_close(ac_report *r, ac_err *err)
{
    if (!r)
        return AC_OK;
    int st = AC_OK;
    if (r->json_path) {
        close_stream(&r->json);
        st = ac_write_atomic(r->json_path, r->json_body ? r->json_body : "", r->json_len, err);
    }
    if (st == AC_OK && r->junit_path)
        st = write_junit(r, err);
    if (st == AC_OK && r->markdown_path)
        st = write_markdown(r, err);
    report_free(r);
    return st;
}
