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
    md_kernel k[REPORT_MAX_KERNELS];
    int n;
    ac_failure_set failures;
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
    fprintf(f, "### `%s`: %ld passed, %ld failed, %ld errors, %ld skipped\n\n", k->name, k->s.passed, k->s.failed,
            k->s.errors, k->skipped);
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
        fprintf(f, "- `%s` [%s], %ld case%s: %s\n  - original: `%s` (case %ld)\n  - minimal:  `%s`\n", x->kernel,
                x->kind, x->count, x->count == 1 ? "" : "s", x->why, x->line, x->first_index, x->minimal);
    }
    if (fs->n > MARKDOWN_MAX_FAILURES_SHOWN)
        fprintf(f, "- ... and %zu more (see the JSON report)\n", fs->n - MARKDOWN_MAX_FAILURES_SHOWN);
    free(v);
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
    int st = ac_write_doc(path, fill_markdown, md, err);
    ac_failure_set_free(&md->failures);
    free(md);
    return st;
}

const ac_report_format ac_report_markdown = {"--markdown", "FILE  Markdown summary (prove: the detection table)",
                                             md_open, md_write, md_close, NULL};
