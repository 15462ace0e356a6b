/* harness/report/report_markdown.c — --markdown FILE, for a pull-request
 * comment: per kernel x dtype x output the worst errors and the special
 * counts (an ac_summary per kernel), then the failures with their original
 * and minimal lines. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/files/files.h"
#include "harness/report/report.h"
#include "harness/report/report_internal.h"
#include "harness/report/summary.h"

#define MARKDOWN_MAX_FAILURES_SHOWN 50

typedef struct {
    char name[AC_KERNEL_NAME_LEN]; /* first: report_kernel_slot's key */
    ac_summary s;
    long skipped;
} md_kernel;

typedef struct {
    char *kernel, *line, *minimal, *why;
} md_failure;

typedef struct {
    md_kernel k[REPORT_MAX_KERNELS];
    int n;
    md_failure *failures;
    size_t n_failures, cap_failures;
} md_state;

static void *md_open(void) { return calloc(1, sizeof(md_state)); }

static void remember_failure(md_state *md, const char *kernel, const ac_result *res, const char *minimal_line)
{
    if (md->n_failures == md->cap_failures) {
        size_t cap = md->cap_failures ? 2 * md->cap_failures : 16;
        md_failure *bigger = realloc(md->failures, cap * sizeof *bigger);
        if (!bigger)
            return;
        md->failures = bigger;
        md->cap_failures = cap;
    }
    md_failure *f = &md->failures[md->n_failures++];
    f->kernel = report_utf8_clean(kernel); /* a plugin's text in a UTF-8 document */
    f->line = report_utf8_clean(res->line);
    f->minimal = minimal_line ? report_utf8_clean(minimal_line) : NULL;
    f->why = report_utf8_clean(res->why);
}

static void md_write(void *state, const char *kernel, const ac_result *res, const char *minimal_line)
{
    md_state *md = state;
    md_kernel *k = report_kernel_slot(md->k, sizeof md->k[0], &md->n, kernel);
    if (!k)
        return;
    if (res->unsupported) {
        k->skipped++;
        return;
    }
    ac_summary_add(&k->s, res);
    if (res->verdict == AC_VERDICT_FAIL)
        remember_failure(md, kernel, res, minimal_line);
}

static void md_table(FILE *f, const md_kernel *k)
{
    char *name = report_utf8_clean(k->name); /* check's label holds a path */
    fprintf(f, "### `%s`: %ld passed, %ld failed, %ld errors, %ld skipped\n\n", name ? name : "?", k->s.passed,
            k->s.failed, k->s.errors, k->skipped);
    free(name);
    fputs("| dtype | output | cases | max ulp | max scaled | vs-naive max | vs-naive mean "
          "| NaN | overflow | lost special | wrong zero | unwritten |\n"
          "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
          f);
    for (int t = 0; t < AC_DTYPE_COUNT; t++)
        for (int o = 0; o < AC_OUT_COUNT; o++) {
            const ac_summary_cell *a = &k->s.cell[t][o];
            if (!a->cases)
                continue;
            fprintf(f, "| %s | %s | %ld | %.3g | %.3g | %.3g | %.3g | %ld | %ld | %ld | %ld | %ld |\n",
                    ac_dtype_name((ac_dtype)t), ac_output_name((ac_output)o), a->cases, a->max_ulp, a->max_scaled,
                    a->vs_naive_max, a->vs_naive_mean, a->special[AC_SPECIAL_UNEXPECTED_NAN],
                    a->special[AC_SPECIAL_OVERFLOW], a->special[AC_SPECIAL_LOST], a->special[AC_SPECIAL_WRONG_ZERO],
                    a->special[AC_SPECIAL_UNWRITTEN]);
        }
    fputc('\n', f);
}

static void md_failures(FILE *f, const md_state *md)
{
    if (!md->n_failures) {
        fputs("No accuracy failures.\n", f);
        return;
    }
    fprintf(f, "#### Failures (%zu)\n\n", md->n_failures);
    for (size_t i = 0; i < md->n_failures && i < MARKDOWN_MAX_FAILURES_SHOWN; i++) {
        const md_failure *x = &md->failures[i];
        fprintf(f, "- `%s`: %s\n  - original: `%s`\n", x->kernel, x->why, x->line);
        if (x->minimal)
            fprintf(f, "  - minimal:  `%s`\n", x->minimal);
    }
    if (md->n_failures > MARKDOWN_MAX_FAILURES_SHOWN)
        fprintf(f, "- ... and %zu more (see the JSON report)\n", md->n_failures - MARKDOWN_MAX_FAILURES_SHOWN);
}

static void fill_markdown(FILE *f, const void *ctx)
{
    const md_state *md = ctx;
    fputs("## attncheck summary\n\n", f);
    for (int i = 0; i < md->n; i++)
        md_table(f, &md->k[i]);
    md_failures(f, md);
}

static int md_close(void *state, const char *path, ac_err *err)
{
    md_state *md = state;
    int st = path ? ac_write_doc(path, fill_markdown, md, err) : AC_OK;
    for (size_t i = 0; i < md->n_failures; i++) {
        free(md->failures[i].kernel);
        free(md->failures[i].line);
        free(md->failures[i].minimal);
        free(md->failures[i].why);
    }
    free(md->failures);
    free(md);
    return st;
}

const ac_report_format ac_report_markdown = {"--markdown", "FILE  Markdown summary (prove: the detection table)",
                                             md_open, md_write, md_close};
