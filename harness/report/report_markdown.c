/* harness/report/report_markdown.c — --markdown FILE, for a pull-request
 * comment: per kernel x dtype x output the worst errors and the special
 * counts (an ac_summary per kernel), then the distinct failures (by kernel,
 * kind and minimal line, in the order of their first case index), each with
 * its count and its first case's message and original line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/files/files.h"
#include "harness/report/failures.h"
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
    char *suite, *name, *message;
    ac_check_status status;
} md_check;

typedef struct {
    md_kernel k[REPORT_MAX_KERNELS];
    int n;
    ac_failure_set failures;
    md_check *checks;
    size_t n_checks, cap_checks;
} md_state;

static void *md_open(void) { return calloc(1, sizeof(md_state)); }

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
    bool is_new;
    if (res->verdict == AC_VERDICT_FAIL)
        ac_failure_set_add(&md->failures, kernel, res, minimal_line, &is_new);
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
    const ac_failure_set *fs = &md->failures;
    const ac_failure_sig **v = ac_failure_set_sorted(fs);
    if (!v) {
        fputs("No accuracy failures.\n", f);
        return;
    }
    fprintf(f, "#### Failures (%ld failing cases, %zu distinct)\n\n", fs->failures, fs->n);
    for (size_t i = 0; i < fs->n && i < MARKDOWN_MAX_FAILURES_SHOWN; i++) {
        const ac_failure_sig *x = v[i];
        /* a plugin's or a path's bytes in a UTF-8 document: cleaned (invalid bytes as \xHH) */
        char *kernel = report_utf8_clean(x->kernel), *why = report_utf8_clean(x->why);
        char *line = report_utf8_clean(x->line), *minimal = report_utf8_clean(x->minimal);
        char *kind = report_utf8_clean(x->kind);
        fprintf(f, "- `%s` [%s], %ld case%s: %s\n  - original: `%s` (case %ld)\n  - minimal:  `%s`\n",
                kernel ? kernel : "", kind ? kind : "", x->count, x->count == 1 ? "" : "s", why ? why : "",
                line ? line : "", x->first_index, minimal ? minimal : "");
        free(kernel), free(why), free(line), free(minimal), free(kind);
    }
    if (fs->n > MARKDOWN_MAX_FAILURES_SHOWN)
        fprintf(f, "- ... and %zu more (see the JSON report)\n", fs->n - MARKDOWN_MAX_FAILURES_SHOWN);
    free(v);
}

static void md_write_check(void *state, const ac_report_check *c)
{
    md_state *md = state;
    if (!c->suite)
        return;
    if (md->n_checks == md->cap_checks) {
        size_t cap = md->cap_checks ? 2 * md->cap_checks : 16;
        md_check *bigger = realloc(md->checks, cap * sizeof *bigger);
        if (!bigger)
            return;
        md->checks = bigger;
        md->cap_checks = cap;
    }
    md_check *x = &md->checks[md->n_checks++];
    x->suite = strdup(c->suite);
    x->name = strdup(c->name);
    x->message = strdup(c->message);
    x->status = c->status;
}

/* The checks, one table per suite in the order they came; skipped ones (cases
 * not compared) after the rest, at most MARKDOWN_MAX_FAILURES_SHOWN of them. */
static void md_checks(FILE *f, const md_state *md)
{
    static const char *const words[] = {"pass", "**FAIL**", "not compared"};
    for (size_t i = 0; i < md->n_checks; i++) {
        bool first = true;
        for (size_t j = 0; j < i && first; j++)
            first = strcmp(md->checks[j].suite, md->checks[i].suite) != 0;
        if (!first)
            continue;
        fprintf(f, "\n#### %s\n\n| check | verdict | detail |\n| --- | --- | --- |\n", md->checks[i].suite);
        size_t skipped = 0;
        for (int pass = 0; pass < 2; pass++)
            for (size_t j = i; j < md->n_checks; j++) {
                const md_check *c = &md->checks[j];
                if (strcmp(c->suite, md->checks[i].suite) || (c->status == AC_CHECK_SKIPPED) != pass)
                    continue;
                if (pass && ++skipped > MARKDOWN_MAX_FAILURES_SHOWN)
                    continue;
                fprintf(f, "| %s | %s | %s |\n", c->name, words[c->status], c->message);
            }
        if (skipped > MARKDOWN_MAX_FAILURES_SHOWN)
            fprintf(f, "| ... | | and %zu more not compared (see the JSON report) |\n",
                    skipped - MARKDOWN_MAX_FAILURES_SHOWN);
    }
}

static void fill_markdown(FILE *f, const void *ctx)
{
    const md_state *md = ctx;
    fputs("## attncheck summary\n\n", f);
    for (int i = 0; i < md->n; i++)
        md_table(f, &md->k[i]);
    md_failures(f, md);
    md_checks(f, md);
}

static int md_close(void *state, const char *path, ac_err *err)
{
    md_state *md = state;
    int st = path ? ac_write_doc(path, fill_markdown, md, err) : AC_OK; /* NULL: discarded, write nothing */
    ac_failure_set_free(&md->failures);
    for (size_t i = 0; i < md->n_checks; i++) {
        free(md->checks[i].suite);
        free(md->checks[i].name);
        free(md->checks[i].message);
    }
    free(md->checks);
    free(md);
    return st;
}

const ac_report_format ac_report_markdown = {"--markdown", "FILE  Markdown summary (prove: the detection table)",
                                             md_open,      md_write,
                                             md_close,     md_write_check,
                                             NULL,         NULL};
