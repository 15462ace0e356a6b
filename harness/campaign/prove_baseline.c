/* harness/campaign/prove_baseline.c — `attncheck prove --baseline`: the
 * detection power of the baseline comparison (verdict/baseline.h).
 *
 * The planted bugs of `prove` break a budget; these do not.  Each
 * <base>-precision-* kernel is the base with one within-budget loss of
 * precision; the comparison against the base's own run of the same case lines
 * must flag it, and the number of cases it needed is the figure.  The other
 * half is the false-positive rate: the unchanged base and the controls (an
 * equally accurate change) compared in windows of AC_PROVE_BASELINE_WINDOW
 * cases, a seed each, must never be flagged.  The comparison is evaluated
 * after every case (as a reviewer re-running it would), which makes "never
 * flagged" the stricter claim. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/campaign/campaign.h"
#include "harness/campaign/prove.h"
#include "harness/files/files.h"
#include "harness/verdict/baseline.h"

#define MAX_PRECISION 32

typedef struct {
    const ac_kernel *k;
    bool control;
    long cases_run, flagged_at; /* flagged_at: 1-based case at the first regression verdict, 0 none */
    long budget_failures, errors;
    char cell[96]; /* the first cell flagged: "f16 O mean-abs" */
    double median, p;
    long fp_windows_flagged; /* controls: windows flagged */
} prec_row;

/* ---- running a list of cases, observed ------------------------------------------ */

typedef struct {
    ac_result *results; /* the base's run: the old side of every comparison */
    size_t n, cap;
} base_run;

static bool keep_result(void *ctx, const ac_result *r)
{
    base_run *br = ctx;
    if (br->n == br->cap) {
        size_t cap = br->cap ? 2 * br->cap : 64;
        ac_result *bigger = realloc(br->results, cap * sizeof *bigger);
        if (!bigger)
            return false;
        br->results = bigger;
        br->cap = cap;
    }
    br->results[br->n++] = *r;
    return true;
}

typedef struct {
    ac_baseline *bl;
    double ratio, alpha;
    bool stop_when_flagged;
    long seen, flagged_at;
    char cell[96];
    double median, p;
    int status;
} watch;

static void first_regression(watch *w)
{
    for (int t = 0; t < AC_DTYPE_COUNT; t++)
        for (int o = 0; o < AC_OUT_COUNT; o++)
            for (int m = 0; m < AC_BASE_METRIC_COUNT; m++) {
                const ac_base_stat *s = ac_baseline_stat(w->bl, (ac_dtype)t, (ac_output)o, (ac_base_metric)m);
                if (s && s->verdict == AC_BASE_REGRESSION) {
                    snprintf(w->cell, sizeof w->cell, "%s %s %s", ac_dtype_name((ac_dtype)t),
                             ac_output_name((ac_output)o), ac_base_metric_name((ac_base_metric)m));
                    w->median = s->median_ratio;
                    w->p = s->p_regression;
                    return;
                }
            }
}

/* After every case: pair it, evaluate, note the first regression. */
static bool watch_result(void *ctx, const ac_result *r)
{
    watch *w = ctx;
    ac_err err = {{0}};
    w->seen++;
    if ((w->status = ac_baseline_add(w->bl, r, &err)) == AC_OK)
        w->status = ac_baseline_evaluate(w->bl, w->ratio, w->alpha, &err);
    if (w->status != AC_OK)
        return false;
    if (!w->flagged_at && ac_baseline_regressed(w->bl)) {
        w->flagged_at = w->seen;
        first_regression(w);
    }
    return !(w->flagged_at && w->stop_when_flagged);
}

static ac_campaign_opts list_opts(const ac_prove_opts *o, const ac_case *cases, size_t n,
                                  bool (*observe)(void *, const ac_result *), void *ctx)
{
    ac_campaign_opts c;
    memset(&c, 0, sizeof c);
    c.seed = o->seed;
    c.max_seqlen = o->max_seqlen;
    c.shrink_steps = 0; /* a budget failure here is counted, not shrunk */
    c.run = o->run;
    c.progress = o->progress;
    c.replay = cases, c.n_replay = n;
    c.observe = observe, c.observe_ctx = ctx;
    return c;
}

/* The base over `cases` generated cases of `seed`: its results and their cases. */
static int run_base(const ac_prove_opts *o, const ac_kernel *base, const ac_budgets *b, uint64_t seed, long cases,
                    base_run *br, ac_case **list, ac_summary *s, ac_err *err)
{
    ac_campaign_opts c = list_opts(o, NULL, 0, keep_result, br);
    c.seed = seed;
    c.max_cases = cases;
    br->n = 0;
    int st = ac_campaign(base, b, &c, NULL, s, err);
    if (st != AC_OK)
        return st;
    if (br->n != (size_t)s->cases)
        return ac_fail(err, AC_ERR_ENV, "out of memory keeping the base's results");
    ac_case *l = realloc(*list, (br->n ? br->n : 1) * sizeof *l);
    if (!l)
        return ac_fail(err, AC_ERR_ENV, "out of memory");
    *list = l;
    for (size_t i = 0; i < br->n && st == AC_OK; i++)
        st = ac_case_parse(br->results[i].line, &l[i], err);
    return st;
}

/* k over the base's cases, compared after each; *w says when it was flagged. */
static int compare_run(const ac_prove_opts *o, const ac_kernel *k, const ac_budgets *b, const base_run *br,
                       const ac_case *list, bool stop_when_flagged, watch *w, ac_summary *s, ac_err *err)
{
    memset(w, 0, sizeof *w);
    w->ratio = b->regression_ratio, w->alpha = b->regression_p, w->stop_when_flagged = stop_when_flagged;
    int st = ac_baseline_create("(the base's run)", o->base, &w->bl, err);
    for (size_t i = 0; i < br->n && st == AC_OK; i++)
        st = ac_baseline_add_old(w->bl, &br->results[i], err);
    ac_campaign_opts c = list_opts(o, list, br->n, watch_result, w);
    if (st == AC_OK)
        st = ac_campaign(k, b, &c, NULL, s, err);
    if (st == AC_OK && w->status != AC_OK)
        st = ac_fail(err, w->status, "the baseline comparison failed (out of memory)");
    ac_baseline_free(w->bl);
    w->bl = NULL;
    return st;
}

/* ---- the proof ---------------------------------------------------------------- */

static size_t find_precision(const char *base, prec_row *rows, size_t max)
{
    char prefix[AC_KERNEL_NAME_LEN + 16];
    snprintf(prefix, sizeof prefix, "%s-precision-", base);
    size_t n = 0;
    for (size_t i = 0; i < ac_kernel_count() && n < max; i++) {
        const ac_kernel *k = ac_kernel_at(i);
        if (strncmp(k->name, prefix, strlen(prefix)) == 0) {
            memset(&rows[n], 0, sizeof rows[n]);
            rows[n].k = k;
            rows[n++].control = strstr(k->name + strlen(prefix), "control") != NULL;
        }
    }
    return n;
}

/* Every precision kernel against the base's run of mutant_cases cases. */
static int detect(const ac_prove_opts *o, const ac_budgets *b, const base_run *br, const ac_case *list, prec_row *rows,
                  size_t n, ac_err *err)
{
    for (size_t i = 0; i < n; i++) {
        prec_row *r = &rows[i];
        watch w;
        ac_summary s;
        int st = compare_run(o, r->k, b, br, list, !r->control, &w, &s, err);
        if (st != AC_OK)
            return st;
        r->cases_run = s.cases, r->flagged_at = w.flagged_at, r->budget_failures = s.failed, r->errors = s.errors;
        snprintf(r->cell, sizeof r->cell, "%s", w.flagged_at ? w.cell : "-");
        r->median = w.median, r->p = w.p;
        if (o->out)
            fprintf(o->out, "  %-44s %s\n", r->k->name,
                    r->control ? (r->flagged_at ? "control FLAGGED" : "control not flagged")
                               : (r->flagged_at ? "flagged" : "NOT flagged"));
    }
    return AC_OK;
}

typedef struct {
    long windows, unchanged_flagged, cases;
} fp_result;

/* Windows of AC_PROVE_BASELINE_WINDOW cases, seeds seed+1.., the unchanged base and every control. */
static int false_positives(const ac_prove_opts *o, const ac_kernel *base, const ac_budgets *b, prec_row *rows, size_t n,
                           fp_result *fp, ac_err *err)
{
    memset(fp, 0, sizeof *fp);
    base_run br = {0};
    ac_case *list = NULL;
    long windows = o->clean_cases / AC_PROVE_BASELINE_WINDOW;
    int st = AC_OK;
    for (long w = 0; w < windows && st == AC_OK; w++) {
        ac_summary s;
        watch wt;
        st = run_base(o, base, b, o->seed + 1 + (uint64_t)w, AC_PROVE_BASELINE_WINDOW, &br, &list, &s, err);
        if (st == AC_OK)
            st = compare_run(o, base, b, &br, list, false, &wt, &s, err);
        fp->unchanged_flagged += st == AC_OK && wt.flagged_at;
        for (size_t i = 0; i < n && st == AC_OK; i++)
            if (rows[i].control && (st = compare_run(o, rows[i].k, b, &br, list, false, &wt, &s, err)) == AC_OK)
                rows[i].fp_windows_flagged += wt.flagged_at != 0;
        fp->windows += st == AC_OK;
        fp->cases += st == AC_OK ? (long)br.n : 0;
    }
    free(br.results);
    free(list);
    return st;
}

static bool row_ok(const prec_row *r)
{
    if (r->control)
        return !r->flagged_at && !r->fp_windows_flagged && !r->errors;
    return r->flagged_at && !r->budget_failures && !r->errors;
}

static void print_rows(FILE *f, bool markdown, const prec_row *rows, size_t n, long max_cases)
{
    if (markdown)
        fputs("| kernel | role | flagged | cases to flag | budget failures | first cell flagged | median ratio "
              "| sign test p |\n| --- | --- | --- | ---: | ---: | --- | ---: | ---: |\n",
              f);
    else
        fprintf(f, "%-40s %-8s %-7s %6s %7s  %-22s %8s %9s\n", "precision kernel", "role", "flagged", "cases", "budget",
                "first cell flagged", "median", "sign p");
    for (size_t i = 0; i < n; i++) {
        const prec_row *r = &rows[i];
        const char *role = r->control ? "control" : "mutant";
        const char *flagged = r->flagged_at ? "yes" : "no";
        long cases = r->flagged_at ? r->flagged_at : r->cases_run;
        char cases_text[32];
        snprintf(cases_text, sizeof cases_text, "%s%ld", r->flagged_at || r->control ? "" : "> ", cases);
        if (!r->flagged_at && !r->control && r->cases_run < max_cases) /* stopped early: an error */
            snprintf(cases_text, sizeof cases_text, "error");
        if (markdown)
            fprintf(f, "| `%s` | %s | %s | %s | %ld | %s | %.3g | %.2g |\n", r->k->name, role, flagged, cases_text,
                    r->budget_failures, r->cell, r->flagged_at ? r->median : 0.0, r->flagged_at ? r->p : 1.0);
        else
            fprintf(f, "%-40s %-8s %-7s %6s %7ld  %-22s %8.3g %9.2g\n", r->k->name, role, flagged, cases_text,
                    r->budget_failures, r->cell, r->flagged_at ? r->median : 0.0, r->flagged_at ? r->p : 1.0);
    }
}

static void print_fp(FILE *f, const ac_prove_opts *o, const fp_result *fp, const prec_row *rows, size_t n)
{
    if (!fp->windows) {
        fprintf(f, "false positives: not measured (--clean-cases %ld is below one window of %d cases)\n",
                o->clean_cases, AC_PROVE_BASELINE_WINDOW);
        return;
    }
    fprintf(f,
            "false positives: %ld windows of %d cases (seeds %llu..%llu, %ld cases), each compared after every "
            "case: unchanged %s flagged in %ld (rate %.3g)",
            fp->windows, AC_PROVE_BASELINE_WINDOW, (unsigned long long)o->seed + 1,
            (unsigned long long)o->seed + (unsigned long long)fp->windows, fp->cases, o->base, fp->unchanged_flagged,
            (double)fp->unchanged_flagged / (double)fp->windows);
    for (size_t i = 0; i < n; i++)
        if (rows[i].control)
            fprintf(f, "; %s flagged in %ld (rate %.3g)", rows[i].k->name, rows[i].fp_windows_flagged,
                    (double)rows[i].fp_windows_flagged / (double)fp->windows);
    fputs("\n", f);
}

typedef struct {
    const ac_prove_opts *o;
    const ac_budgets *b;
    const prec_row *rows;
    size_t n;
    const fp_result *fp;
    const ac_summary *base;
} markdown_ctx;

static void fill_markdown(FILE *f, const void *ctx)
{
    const markdown_ctx *m = ctx;
    fprintf(f,
            "Base `%s`: %ld cases, %ld failures (seed %llu). Each precision kernel replays them, compared case "
            "by case after every case; a regression: median ratio > %.3g at sign test p < %.2g.\n\n",
            m->o->base, m->base->cases, m->base->failed + m->base->errors, (unsigned long long)m->o->seed,
            m->b->regression_ratio, m->b->regression_p);
    print_rows(f, true, m->rows, m->n, m->o->mutant_cases);
    fputc('\n', f);
    print_fp(f, m->o, m->fp, m->rows, m->n);
}

int ac_prove_baseline(const ac_prove_opts *o, const ac_budgets *b, ac_report *rep, ac_err *err)
{
    (void)rep; /* the comparisons are the proof's; the table is its report */
    const ac_kernel *base = ac_kernel_find(o->base);
    if (!base)
        return ac_fail(err, AC_ERR_INPUT, "--base: no kernel named '%s' (see attncheck list)", o->base);
    if (!ac_kernel_is_available(base, err))
        return AC_ERR_ENV;
    static prec_row rows[MAX_PRECISION];
    size_t n = find_precision(o->base, rows, MAX_PRECISION);
    if (n == 0)
        return ac_fail(err, AC_ERR_INPUT, "no %s-precision-* kernels are registered", o->base);
    base_run br = {0};
    ac_case *list = NULL;
    ac_summary base_s;
    fp_result fp = {0};
    int st = run_base(o, base, b, o->seed, o->mutant_cases, &br, &list, &base_s, err);
    bool base_clean = st == AC_OK && base_s.failed == 0 && base_s.errors == 0;
    if (st == AC_OK && o->out)
        fprintf(o->out, "base %s: %ld cases, %ld failures, %ld errors: %s\nprecision kernels (%zu):\n", o->base,
                base_s.cases, base_s.failed, base_s.errors, base_clean ? "clean" : "NOT CLEAN", n);
    if (st == AC_OK)
        st = detect(o, b, &br, list, rows, n, err);
    free(br.results);
    free(list);
    if (st == AC_OK)
        st = false_positives(o, base, b, rows, n, &fp, err);
    if (st != AC_OK)
        return st;
    bool all_ok = base_clean && fp.unchanged_flagged == 0;
    for (size_t i = 0; i < n; i++)
        all_ok &= row_ok(&rows[i]);
    if (o->out) {
        fputc('\n', o->out);
        print_rows(o->out, false, rows, n, o->mutant_cases);
        print_fp(o->out, o, &fp, rows, n);
        fprintf(o->out, "\n%s\n",
                all_ok ? "PROVED: every precision mutant flagged inside every budget, no "
                         "false positive"
                       : "NOT PROVED: see the rows above");
    }
    markdown_ctx m = {o, b, rows, n, &fp, &base_s};
    if (o->markdown_path && (st = ac_write_doc(o->markdown_path, fill_markdown, &m, err)) != AC_OK)
        return st;
    return all_ok ? AC_OK : AC_FAIL_ACCURACY;
}
