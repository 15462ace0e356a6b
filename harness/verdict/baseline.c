/* harness/verdict/baseline.c — regression gating against a previous run:
 * the old run's cases, pairing by case line, the paired ratios and their
 * tests (see baseline.h; the tests are pairtest.c's, the file reading is
 * baseline_load.c's, the printing baseline_print.c's). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness/verdict/baseline.h"
#include "harness/verdict/baseline_internal.h"
#include "harness/verdict/pairtest.h"

const char *ac_base_metric_name(ac_base_metric m) { return m == AC_BASE_MEAN_ABS ? "mean-abs" : "max-scaled"; }

const char *ac_base_verdict_name(ac_base_verdict v)
{
    return v == AC_BASE_REGRESSION ? "regression" : v == AC_BASE_IMPROVEMENT ? "improvement" : "same";
}

int ac_baseline_create(const char *path, const char *kernel, ac_baseline **out, ac_err *err)
{
    ac_baseline *b = calloc(1, sizeof *b);
    if (!b)
        return ac_fail(err, AC_ERR_ENV, "out of memory");
    snprintf(b->path, sizeof b->path, "%s", path ? path : "");
    snprintf(b->kernel, sizeof b->kernel, "%s", kernel ? kernel : "");
    b->ratio = AC_DEFAULT_REGRESSION_RATIO;
    b->alpha = AC_DEFAULT_REGRESSION_ALPHA;
    *out = b;
    return AC_OK;
}

static void clear_listed(ac_baseline *b, size_t keep)
{
    for (size_t i = keep; i < b->n_listed; i++) {
        free(b->listed[i].line);
        free(b->listed[i].why);
    }
    b->n_listed = keep;
}

void ac_baseline_free(ac_baseline *b)
{
    if (!b)
        return;
    for (size_t i = 0; i < b->n_old; i++)
        free(b->old[i].line);
    free(b->old);
    free(b->index);
    clear_listed(b, 0);
    free(b->listed);
    for (int t = 0; t < AC_DTYPE_COUNT; t++)
        for (int o = 0; o < AC_OUT_COUNT; o++)
            for (int m = 0; m < AC_BASE_METRIC_COUNT; m++)
                free(b->cells[t][o][m].ratios);
    free(b);
}

/* ---- the old run --------------------------------------------------------------- */

int baseline_push_old(ac_baseline *b, const baseline_old *x, ac_err *err)
{
    if (b->n_old == b->cap_old) {
        size_t cap = b->cap_old ? 2 * b->cap_old : 64;
        baseline_old *bigger = realloc(b->old, cap * sizeof *bigger);
        if (!bigger)
            return ac_fail(err, AC_ERR_ENV, "out of memory");
        b->old = bigger;
        b->cap_old = cap;
    }
    b->old[b->n_old++] = *x;
    return AC_OK;
}

int ac_baseline_add_old(ac_baseline *b, const ac_result *old, ac_err *err)
{
    baseline_old x = {0};
    if (!(x.line = strdup(old->line)))
        return ac_fail(err, AC_ERR_ENV, "out of memory");
    x.verdict = old->verdict;
    x.status = old->status;
    x.unsupported = old->unsupported;
    snprintf(x.kind, sizeof x.kind, "%s", old->kind);
    for (int o = 0; o < AC_OUT_COUNT; o++) {
        x.present[o] = old->m[o].present;
        x.n_mean[o] = (double)old->m[o].n_mean;
        x.mean_abs[o] = old->m[o].mean_abs;
        x.max_scaled[o] = old->m[o].max_scaled;
    }
    int st = baseline_push_old(b, &x, err);
    if (st != AC_OK)
        free(x.line);
    return st;
}

size_t ac_baseline_size(const ac_baseline *b) { return b->n_old; }
const char *ac_baseline_line(const ac_baseline *b, size_t i) { return i < b->n_old ? b->old[i].line : NULL; }
const char *ac_baseline_path(const ac_baseline *b) { return b->path; }
const char *ac_baseline_kernel(const ac_baseline *b) { return b->kernel; }
double ac_baseline_ratio(const ac_baseline *b) { return b->ratio; }
double ac_baseline_alpha(const ac_baseline *b) { return b->alpha; }

void ac_baseline_limit(ac_baseline *b, size_t n)
{
    if (n >= b->n_old)
        return;
    for (size_t i = n; i < b->n_old; i++)
        free(b->old[i].line);
    b->limited_out += (long)(b->n_old - n);
    b->n_old = n;
}

/* ---- pairing: an open-addressing index of the old lines ---------------------------- */

static uint64_t line_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int build_index(ac_baseline *b, ac_err *err)
{
    if (b->index && b->indexed == b->n_old)
        return AC_OK;
    size_t cap = 16;
    while (cap < 2 * b->n_old + 1)
        cap *= 2;
    free(b->index);
    if (!(b->index = calloc(cap, sizeof *b->index)))
        return ac_fail(err, AC_ERR_ENV, "out of memory");
    b->index_cap = cap;
    for (size_t i = 0; i < b->n_old; i++) {
        size_t at = (size_t)(line_hash(b->old[i].line) & (cap - 1));
        while (b->index[at])
            at = (at + 1) & (cap - 1);
        b->index[at] = i + 1;
    }
    b->indexed = b->n_old;
    return AC_OK;
}

/* The first unpaired old case of this line (a file may repeat a line), or NULL. */
static baseline_old *find_old(ac_baseline *b, const char *line)
{
    baseline_old *first = NULL;
    for (size_t at = (size_t)(line_hash(line) & (b->index_cap - 1)); b->index[at]; at = (at + 1) & (b->index_cap - 1)) {
        baseline_old *x = &b->old[b->index[at] - 1];
        if (!x->paired && strcmp(x->line, line) == 0 && (!first || x < first))
            first = x;
    }
    return first;
}

static int baseline_list(ac_baseline *b, const char *line, const char *why, ac_err *err)
{
    if (b->n_listed == b->cap_listed) {
        size_t cap = b->cap_listed ? 2 * b->cap_listed : 16;
        ac_base_listed *bigger = realloc(b->listed, cap * sizeof *bigger);
        if (!bigger)
            return ac_fail(err, AC_ERR_ENV, "out of memory");
        b->listed = bigger;
        b->cap_listed = cap;
    }
    ac_base_listed *l = &b->listed[b->n_listed];
    l->line = strdup(line);
    l->why = strdup(why);
    if (!l->line || !l->why) {
        free(l->line);
        free(l->why);
        return ac_fail(err, AC_ERR_ENV, "out of memory");
    }
    b->n_listed++;
    return AC_OK;
}

static int push_ratio(baseline_cell *c, double ratio, ac_err *err)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64;
        double *bigger = realloc(c->ratios, cap * sizeof *bigger);
        if (!bigger)
            return ac_fail(err, AC_ERR_ENV, "out of memory");
        c->ratios = bigger;
        c->cap = cap;
    }
    c->ratios[c->n++] = ratio;
    return AC_OK;
}

/* new / old; 0/0 is no change, x/0 an infinite increase. */
static double ratio_of(double new_value, double old_value)
{
    if (old_value == 0.0)
        return new_value == 0.0 ? 1.0 : INFINITY;
    return new_value / old_value;
}

static int add_ratios(ac_baseline *b, const ac_result *r, const baseline_old *x, ac_err *err)
{
    int st = AC_OK;
    for (int o = 0; o < AC_OUT_COUNT && st == AC_OK; o++) {
        const ac_metrics *m = &r->m[o];
        if (!m->present || !x->present[o])
            continue;
        baseline_cell *cell = b->cells[r->dtype][o];
        /* the means skip references below the smallest normal: none left, no mean */
        if (m->n_mean > 0 && x->n_mean[o] > 0)
            st = push_ratio(&cell[AC_BASE_MEAN_ABS], ratio_of(m->mean_abs, x->mean_abs[o]), err);
        if (st == AC_OK)
            st = push_ratio(&cell[AC_BASE_MAX_SCALED], ratio_of(m->max_scaled, x->max_scaled[o]), err);
    }
    return st;
}

const char *baseline_verdict_word(ac_verdict v, bool unsupported, int status)
{
    if (unsupported)
        return "skipped";
    if (status != AC_OK || v == AC_VERDICT_ERROR)
        return "error";
    return v == AC_VERDICT_FAIL ? "fail" : "pass";
}

static bool passed(ac_verdict v, bool unsupported, int status)
{
    return !unsupported && status == AC_OK && v == AC_VERDICT_PASS;
}

static int pair_one(ac_baseline *b, const ac_result *r, ac_err *err);

int ac_baseline_add(ac_baseline *b, const ac_result *r, ac_err *err)
{
    int st = build_index(b, err);
    if (st == AC_OK)
        st = pair_one(b, r, err);
    b->n_listed_new = b->n_listed; /* the old cases never paired are listed after these, by evaluate */
    return st;
}

static int pair_one(ac_baseline *b, const ac_result *r, ac_err *err)
{
    clear_listed(b, b->n_listed_new);
    b->new_cases++;
    baseline_old *x = find_old(b, r->line);
    if (!x)
        return baseline_list(b, r->line, "only in this run: not in the baseline", err);
    x->paired = true;
    bool now_ok = passed(r->verdict, r->unsupported, r->status),
         then_ok = passed(x->verdict, x->unsupported, x->status);
    if (!now_ok || !then_ok || (unsigned)r->dtype >= AC_DTYPE_COUNT) {
        char why[2 * AC_KIND_LEN + 64];
        snprintf(why, sizeof why, "not compared: baseline %s%s%s%s, this run %s%s%s%s",
                 baseline_verdict_word(x->verdict, x->unsupported, x->status), x->kind[0] ? " [" : "", x->kind,
                 x->kind[0] ? "]" : "", baseline_verdict_word(r->verdict, r->unsupported, r->status),
                 r->kind[0] ? " [" : "", r->kind, r->kind[0] ? "]" : "");
        return baseline_list(b, r->line, why, err);
    }
    b->compared++;
    return add_ratios(b, r, x, err);
}

/* ---- the statistics ---------------------------------------------------------------- */

/* The signed-rank p of log(ratio) - shift, on the side asked for. */
static int wilcoxon_side(const double *ratios, size_t n, double shift, bool greater, double *p)
{
    double *d = malloc((n ? n : 1) * sizeof *d);
    if (!d)
        return AC_ERR_ENV;
    for (size_t i = 0; i < n; i++)
        d[i] = log(ratios[i]) - shift; /* log(inf) = inf, log(0) = -inf: the largest ranks */
    ac_wilcoxon w;
    int st = ac_wilcoxon_test(d, n, &w);
    free(d);
    *p = greater ? w.p_greater : w.p_less;
    return st;
}

static int cell_stat(const baseline_cell *c, double ratio, double alpha, ac_base_stat *s)
{
    memset(s, 0, sizeof *s);
    s->p_regression = s->p_improvement = s->wilcoxon_p_regression = s->wilcoxon_p_improvement = 1.0;
    s->pairs = (long)c->n;
    s->median_ratio = NAN;
    if (c->n == 0)
        return AC_OK;
    double *sorted = malloc(c->n * sizeof *sorted);
    if (!sorted)
        return AC_ERR_ENV;
    memcpy(sorted, c->ratios, c->n * sizeof *sorted);
    s->median_ratio = ac_median_sorting(sorted, c->n);
    free(sorted);
    for (size_t i = 0; i < c->n; i++) {
        double x = c->ratios[i];
        s->above += x > ratio;
        s->below += x < ratio;
        s->better += x < 1.0 / ratio;
        s->not_better += x > 1.0 / ratio;
    }
    s->p_regression = ac_sign_test_p(s->above, s->below);
    s->p_improvement = ac_sign_test_p(s->better, s->not_better);
    int st = wilcoxon_side(c->ratios, c->n, log(ratio), true, &s->wilcoxon_p_regression);
    if (st == AC_OK)
        st = wilcoxon_side(c->ratios, c->n, -log(ratio), false, &s->wilcoxon_p_improvement);
    if (s->median_ratio > ratio && s->p_regression < alpha)
        s->verdict = AC_BASE_REGRESSION;
    else if (s->median_ratio < 1.0 / ratio && s->p_improvement < alpha)
        s->verdict = AC_BASE_IMPROVEMENT;
    return st;
}

/* The old cases no new case was paired with, after the new run's listed ones. */
static int list_unpaired_old(ac_baseline *b, ac_err *err)
{
    clear_listed(b, b->n_listed_new);
    for (size_t i = 0; i < b->n_old; i++)
        if (!b->old[i].paired) {
            int st = baseline_list(b, b->old[i].line, "only in the baseline: not run this time", err);
            if (st != AC_OK)
                return st;
        }
    return AC_OK;
}

int ac_baseline_evaluate(ac_baseline *b, double ratio, double alpha, ac_err *err)
{
    if (!(ratio > 1.0) || !(alpha > 0.0 && alpha < 1.0))
        return ac_fail(err, AC_ERR_INPUT, "baseline: the regression ratio must be > 1 and p in (0, 1), got %g and %g",
                       ratio, alpha);
    b->ratio = ratio;
    b->alpha = alpha;
    b->evaluated = true;
    b->regressed = b->improved = false;
    for (int t = 0; t < AC_DTYPE_COUNT; t++)
        for (int o = 0; o < AC_OUT_COUNT; o++)
            for (int m = 0; m < AC_BASE_METRIC_COUNT; m++) {
                ac_base_stat *s = &b->stat[t][o][m];
                if (cell_stat(&b->cells[t][o][m], ratio, alpha, s) != AC_OK)
                    return ac_fail(err, AC_ERR_ENV, "out of memory");
                b->regressed |= s->verdict == AC_BASE_REGRESSION;
                b->improved |= s->verdict == AC_BASE_IMPROVEMENT;
            }
    return list_unpaired_old(b, err);
}

const ac_base_stat *ac_baseline_stat(const ac_baseline *b, ac_dtype t, ac_output o, ac_base_metric m)
{
    if ((unsigned)t >= AC_DTYPE_COUNT || (unsigned)o >= AC_OUT_COUNT || (unsigned)m >= AC_BASE_METRIC_COUNT ||
        !b->evaluated || b->stat[t][o][m].pairs == 0)
        return NULL;
    return &b->stat[t][o][m];
}

bool ac_baseline_regressed(const ac_baseline *b) { return b->regressed; }
bool ac_baseline_improved(const ac_baseline *b) { return b->improved; }

ac_base_counts ac_baseline_counts(const ac_baseline *b)
{
    ac_base_counts c = {(long)b->n_old, b->new_cases, b->compared, b->limited_out};
    return c;
}

size_t ac_baseline_listed(const ac_baseline *b, const ac_base_listed **out)
{
    *out = b->listed;
    return b->n_listed;
}
