/* harness/report/report_junit.c — --junit FILE: one <testsuite> per kernel,
 * one <testcase> per case, named by its case line; <failure message=why>,
 * <error>, <skipped/> (a case outside the kernel's claims). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness/files/files.h"
#include "harness/report/report.h"
#include "harness/report/report_internal.h"
#include "harness/report/summary.h"

typedef struct {
    char name[AC_KERNEL_NAME_LEN]; /* first: report_kernel_slot's key */
    ac_summary s;                      /* passed, failed, errors */
    long skipped;
    char *body;                        /* its <testcase> elements */
    size_t len;
    FILE *f;                           /* open_memstream on body */
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
        bool allowed = n > 0 && (cp >= 0x20 || cp == '\t' || cp == '\n' || cp == '\r') && cp != 0xFFFE &&
                       cp != 0xFFFF;
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
    if (res->unsupported)
        k->skipped++;
    else
        ac_summary_add(&k->s, res);
}

static void fill_junit(FILE *f, const void *ctx)
{
    const junit_state *js = ctx;
    fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"attncheck\">\n", f);
    for (int i = 0; i < js->n; i++) {
        const junit_kernel *k = &js->k[i];
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

const ac_report_format ac_report_junit = {"--junit", "FILE  JUnit XML", junit_open, junit_write, junit_close};
