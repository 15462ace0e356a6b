/* harness/report/report_junit.c — --junit FILE: one <testsuite> per kernel,
 * one <testcase> per case, named by its case line; <failure message=why>,
 * <error>, <skipped/> (a case outside the kernel's claims). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/files/files.h"
#include "harness/report/report.h"
#include "harness/report/report_internal.h"
#include "harness/report/summary.h"

typedef struct {
    char name[AC_KERNEL_NAME_LEN]; /* first: report_kernel_slot's key */
    ac_summary s; /* passed, failed, errors */
    long skipped;
    char first_kind[AC_KIND_LEN], first_why[AC_WHY_LEN]; /* its first failure or error */
    char first_line[AC_CASE_LINE_MAX], first_minimal[AC_CASE_LINE_MAX];
    char *body; /* its <testcase> elements */
    size_t len;
    FILE *f; /* open_memstream on body */
} junit_kernel;

typedef struct {
    junit_kernel k[REPORT_MAX_KERNELS];
    int n;
} junit_state;

static void *junit_open(void) { return calloc(1, sizeof(junit_state)); }

/* XML 1.0 text: the five markup characters escaped, and what XML cannot hold
 * at all (bytes that are not UTF-8, control characters other than tab, LF and
 * CR, U+FFFE and U+FFFF) written as the characters \xHH, so a plugin's message
 * or a path never makes the file ill-formed. */
static void xml_escaped(FILE *f, const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    while (*u) {
        uint32_t cp;
        size_t n = report_utf8_char(u, &cp);
        bool allowed = n > 0 && (cp >= 0x20 || cp == '\t' || cp == '\n' || cp == '\r') && cp != 0xFFFE && cp != 0xFFFF;
        if (!allowed)
            fprintf(f, "\\x%02X", *u);
        else if (cp == '&')
            fputs("&amp;", f);
        else if (cp == '<')
            fputs("&lt;", f);
        else if (cp == '>')
            fputs("&gt;", f);
        else if (cp == '"')
            fputs("&quot;", f);
        else if (cp == '\n' || cp == '\r' || cp == '\t') /* kept in attributes, which normalise them otherwise */
            fprintf(f, "&#%u;", (unsigned)cp);
        else
            fwrite(u, 1, n, f);
        u += allowed ? n : 1;
    }
}

static void write_case(FILE *f, const char *kernel, const ac_result *res, const char *minimal_line)
{
    fputs("    <testcase classname=\"", f);
    xml_escaped(f, kernel);
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

static void junit_write(void *state, const char *kernel, const ac_result *res, const char *minimal_line)
{
    junit_state *js = state;
    junit_kernel *k = report_kernel_slot(js->k, sizeof js->k[0], &js->n, kernel);
    if (!k || (!k->f && !(k->f = open_memstream(&k->body, &k->len))))
        return;
    write_case(k->f, kernel, res, minimal_line);
    if (res->unsupported) {
        k->skipped++;
        return;
    }
    bool first = k->s.failed + k->s.errors == 0;
    ac_summary_add(&k->s, res);
    if (first && k->s.failed + k->s.errors > 0) {
        snprintf(k->first_kind, sizeof k->first_kind, "%s", res->kind);
        snprintf(k->first_why, sizeof k->first_why, "%s", res->why);
        snprintf(k->first_line, sizeof k->first_line, "%s", res->line);
        snprintf(k->first_minimal, sizeof k->first_minimal, "%s", minimal_line ? minimal_line : "");
    }
}

/* ---- a proof: base clean, every mutant caught ------------------------------------------ */

static bool is_mutant(const junit_kernel *k) { return strstr(k->name, "mutant") != NULL; }

/* Does mutant m belong to base b's family (b's name up to and including its first '-')? */
static bool of_family(const junit_kernel *b, const junit_kernel *m)
{
    const char *dash = strchr(b->name, '-');
    size_t n = dash ? (size_t)(dash - b->name + 1) : strlen(b->name);
    return !is_mutant(b) && is_mutant(m) && strncmp(b->name, m->name, n) == 0;
}

static bool has_mutants(const junit_state *js, const junit_kernel *b)
{
    for (int i = 0; i < js->n; i++)
        if (of_family(b, &js->k[i]))
            return true;
    return false;
}

static void proof_case(FILE *f, const char *suite, const char *name, const char *tag, const char *message,
                       const char *type, const char *body)
{
    fputs("    <testcase classname=\"", f);
    xml_escaped(f, suite);
    fputs("\" name=\"", f);
    xml_escaped(f, name);
    if (!tag && !body[0]) {
        fputs("\"/>\n", f);
        return;
    }
    if (!tag) { /* a pass with something to say: the catch */
        fputs("\">\n      <system-out>", f);
        xml_escaped(f, body);
        fputs("</system-out>\n    </testcase>\n", f);
        return;
    }
    fprintf(f, "\">\n      <%s message=\"", tag);
    xml_escaped(f, message);
    fputs("\" type=\"", f);
    xml_escaped(f, type);
    fputs("\">", f);
    xml_escaped(f, body);
    fprintf(f, "</%s>\n    </testcase>\n", tag);
}

static void fill_proof(FILE *f, const junit_state *js, const junit_kernel *b)
{
    long tests = 1, failures = 0, errors = 0;
    for (int i = 0; i < js->n; i++)
        if (of_family(b, &js->k[i])) {
            const junit_kernel *m = &js->k[i];
            tests++;
            failures += m->s.failed == 0 && m->s.errors == 0;
            errors += m->s.failed == 0 && m->s.errors > 0;
        }
    bool dirty = b->s.failed + b->s.errors > 0;
    failures += b->s.failed > 0;
    errors += b->s.failed == 0 && b->s.errors > 0;
    char suite[AC_KERNEL_NAME_LEN + 8], name[AC_KERNEL_NAME_LEN + 64], msg[AC_WHY_LEN + 160];
    snprintf(suite, sizeof suite, "prove %s", b->name);
    fputs("  <testsuite name=\"", f);
    xml_escaped(f, suite);
    fprintf(f, "\" tests=\"%ld\" failures=\"%ld\" errors=\"%ld\" skipped=\"0\">\n", tests, failures, errors);
    snprintf(name, sizeof name, "base %s is clean (%ld cases)", b->name, b->s.cases);
    snprintf(msg, sizeof msg, "the correct kernel failed: %s", b->first_why);
    proof_case(f, suite, name, dirty ? (b->s.failed ? "failure" : "error") : NULL, msg, b->first_kind, b->first_line);
    for (int i = 0; i < js->n; i++) {
        const junit_kernel *m = &js->k[i];
        if (!of_family(b, m))
            continue;
        bool caught = m->s.failed > 0;
        snprintf(name, sizeof name, "mutant %s is caught", m->name);
        if (m->s.errors)
            snprintf(msg, sizeof msg, "not caught: %ld cases, %ld errors, the first: %s", m->s.cases, m->s.errors,
                     m->first_why);
        else
            snprintf(msg, sizeof msg, "not caught in %ld cases", m->s.cases);
        char catch[AC_KIND_LEN + AC_CASE_LINE_MAX + 64] = ""; /* the first failure and its minimal line */
        if (caught)
            snprintf(catch, sizeof catch, "caught after %ld cases: [%s] minimal: %s", m->s.cases, m->first_kind,
                     m->first_minimal);
        proof_case(f, suite, name, caught ? NULL : m->s.errors ? "error" : "failure", msg, "not-caught", catch);
    }
    fputs("  </testsuite>\n", f);
}

/* A check is a testcase of its own suite, counted there as a pass, a failure or skipped. */
static void junit_write_check(void *state, const ac_report_check *c)
{
    junit_state *js = state;
    if (!c->suite)
        return;
    junit_kernel *k = report_kernel_slot(js->k, sizeof js->k[0], &js->n, c->suite);
    if (!k || (!k->f && !(k->f = open_memstream(&k->body, &k->len))))
        return;
    fputs("    <testcase classname=\"", k->f);
    xml_escaped(k->f, c->suite);
    fputs("\" name=\"", k->f);
    xml_escaped(k->f, c->name);
    k->s.cases += c->status != AC_CHECK_SKIPPED;
    if (c->status == AC_CHECK_PASS) {
        k->s.passed++;
        fputs("\"/>\n", k->f);
        return;
    }
    const char *tag = c->status == AC_CHECK_FAIL ? "failure" : "skipped";
    k->s.failed += c->status == AC_CHECK_FAIL;
    k->skipped += c->status == AC_CHECK_SKIPPED;
    fprintf(k->f, "\">\n      <%s message=\"", tag);
    xml_escaped(k->f, c->message);
    fputs("\" type=\"", k->f);
    xml_escaped(k->f, c->kind);
    fprintf(k->f, "\"/>\n    </testcase>\n");
}

static void fill_junit(FILE *f, const void *ctx)
{
    const junit_state *js = ctx;
    fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"attncheck\">\n", f);
    for (int i = 0; i < js->n; i++) {
        const junit_kernel *k = &js->k[i];
        bool in_proof = false;
        for (int j = 0; j < js->n && !in_proof; j++)
            in_proof = of_family(&js->k[j], k);
        if (in_proof)
            continue; /* a mutant: its test case is in its base's proof */
        if (has_mutants(js, k)) {
            fill_proof(f, js, k);
            continue;
        }
        fputs("  <testsuite name=\"", f);
        xml_escaped(f, k->name);
        fprintf(f, "\" tests=\"%ld\" failures=\"%ld\" errors=\"%ld\" skipped=\"%ld\">\n", k->s.cases + k->skipped,
                k->s.failed, k->s.errors, k->skipped);
        if (k->body)
            fwrite(k->body, 1, k->len, f);
        fputs("  </testsuite>\n", f);
    }
    fputs("</testsuites>\n", f);
}

static int junit_close(void *state, const char *path, ac_err *err)
{
    junit_state *js = state;
    for (int i = 0; i < js->n; i++)
        if (js->k[i].f)
            fclose(js->k[i].f); /* flushes the memstream so its buffer is complete */
    int st = path ? ac_write_doc(path, fill_junit, js, err) : AC_OK;
    for (int i = 0; i < js->n; i++)
        free(js->k[i].body);
    free(js);
    return st;
}

const ac_report_format ac_report_junit = {"--junit",   "FILE  JUnit XML", junit_open, junit_write,
                                          junit_close, junit_write_check, NULL,       NULL};
