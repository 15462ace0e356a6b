/* harness/campaign/collect.c — the collector: every finished case of a
 * campaign, from this process or from --jobs workers, in whatever order they
 * finish.  It keeps the summary, prints a failure the first time its
 * signature (kernel, kind, minimal line) is seen and saves it once, and feeds
 * the reports in case-index order: an outcome that arrives before a lower
 * index still expected waits in a heap, so the JSON Lines of any number of
 * workers are the same records in the same order. */
#include <stdlib.h>
#include <string.h>

#include "harness/campaign/campaign.h"
#include "harness/campaign/corpus.h"

struct ac_collector {
    char kernel[AC_KERNEL_NAME_LEN];
    const ac_campaign_opts *o;
    ac_report *rep;
    ac_summary s;
    ac_failure_set failures;
    ac_outcome **heap; /* min-heap on r.index: outcomes waiting for a lower index */
    size_t n_heap, cap_heap;
    long next_index, step; /* the index the reports expect next, and the shard's stride */
    long expected; /* cases in the shard's budget (0: a time budget) */
    long closed_first[64], closed_stride[64]; /* workers that ended: their indices will not come */
    int n_closed;
    int save_status;
    ac_err save_err;
    double t0, last_progress;
};

/* ---- the reorder heap ---------------------------------------------------------------- */

static void swap(ac_outcome **a, ac_outcome **b)
{
    ac_outcome *t = *a;
    *a = *b, *b = t;
}

static bool heap_push(ac_collector *c, const ac_outcome *oc)
{
    if (c->n_heap == c->cap_heap) {
        size_t cap = c->cap_heap ? 2 * c->cap_heap : 16;
        ac_outcome **h = realloc(c->heap, cap * sizeof *h);
        if (!h)
            return false;
        c->heap = h, c->cap_heap = cap;
    }
    ac_outcome *copy = malloc(sizeof *copy);
    if (!copy)
        return false;
    *copy = *oc;
    size_t i = c->n_heap++;
    c->heap[i] = copy;
    for (; i > 0 && c->heap[(i - 1) / 2]->r.index > c->heap[i]->r.index; i = (i - 1) / 2)
        swap(&c->heap[(i - 1) / 2], &c->heap[i]);
    return true;
}

static ac_outcome *heap_pop(ac_collector *c)
{
    ac_outcome *top = c->heap[0];
    c->heap[0] = c->heap[--c->n_heap];
    for (size_t i = 0;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < c->n_heap && c->heap[l]->r.index < c->heap[m]->r.index)
            m = l;
        if (r < c->n_heap && c->heap[r]->r.index < c->heap[m]->r.index)
            m = r;
        if (m == i)
            break;
        swap(&c->heap[i], &c->heap[m]);
        i = m;
    }
    return top;
}

static void report(ac_collector *c, const ac_outcome *oc)
{
    const ac_result *r = &oc->r;
    ac_report_add(c->rep, c->kernel, r, r->verdict == AC_VERDICT_FAIL ? oc->minimal : NULL);
    if (r->index >= c->next_index)
        c->next_index = r->index + c->step;
}

/* Whether index k belongs to a worker that has ended (so it will not come). */
static bool never_comes(const ac_collector *c, long k)
{
    for (int i = 0; i < c->n_closed; i++)
        if (k >= c->closed_first[i] && (k - c->closed_first[i]) % c->closed_stride[i] == 0)
            return true;
    return false;
}

/* Reports what waits in the heap as far as nothing lower can still come. */
static void drain(ac_collector *c)
{
    while (c->n_heap) {
        if (c->heap[0]->r.index <= c->next_index) {
            ac_outcome *next = heap_pop(c);
            report(c, next);
            free(next);
        } else if (never_comes(c, c->next_index)) {
            c->next_index += c->step;
        } else {
            return;
        }
    }
}

/* Reports oc now if it is the next index, else keeps it; then whatever that unblocks. */
static void report_in_order(ac_collector *c, const ac_outcome *oc)
{
    if (oc->r.index <= c->next_index || !heap_push(c, oc))
        report(c, oc);
    drain(c);
}

void ac_collector_worker_done(ac_collector *c, long first, long stride)
{
    if (c->n_closed < 64) {
        c->closed_first[c->n_closed] = first;
        c->closed_stride[c->n_closed++] = stride;
    }
    drain(c);
}

/* ---- printing and saving ------------------------------------------------------------ */

static void note_first_failure(ac_summary *s, const ac_outcome *oc)
{
    const ac_result *r = &oc->r;
    if (s->first_fail_case && r->index + 1 >= s->first_fail_case)
        return;
    s->first_fail_case = r->index + 1;
    s->first_fail_seconds = oc->found_at;
    snprintf(s->first_kind, sizeof s->first_kind, "%s", r->kind);
    snprintf(s->first_line, sizeof s->first_line, "%s", r->line);
    snprintf(s->first_minimal, sizeof s->first_minimal, "%s", oc->minimal);
    snprintf(s->first_why, sizeof s->first_why, "%s", r->why);
}

static void new_failure(ac_collector *c, const ac_outcome *oc)
{
    const ac_campaign_opts *o = c->o;
    const ac_result *r = &oc->r;
    if (o->out) {
        if (o->progress)
            fputc('\n', stderr);
        fprintf(o->out, "FAIL %s [%s] %s\n  original: %s   (case %ld)\n  minimal:  %s   (%d shrink runs)\n", c->kernel,
                r->kind, r->why, r->line, r->index, oc->minimal, oc->shrink_runs);
        fflush(o->out);
    }
    if (o->save_dir && c->save_status == AC_OK)
        c->save_status = ac_save_failure(o->save_dir, c->kernel, r->why, oc->minimal, &c->save_err);
}

static void print_error(ac_collector *c, const ac_result *r)
{
    if (!c->o->out)
        return;
    if (c->o->progress)
        fputc('\n', stderr);
    fprintf(c->o->out, "ERROR %s: %s\n  case: %s   (case %ld)\n", c->kernel, r->why, r->line, r->index);
    fflush(c->o->out);
}

/* ---- the collector ---------------------------------------------------------------------- */

ac_collector *ac_collector_open(const char *kernel, const ac_campaign_opts *o, ac_report *rep)
{
    ac_collector *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    snprintf(c->kernel, sizeof c->kernel, "%s", kernel);
    c->o = o;
    c->rep = rep;
    c->step = o->shard_count > 1 ? o->shard_count : 1;
    c->next_index = o->shard_count > 1 ? o->shard_index : 0;
    if (o->max_cases > c->next_index)
        c->expected = (o->max_cases - c->next_index + c->step - 1) / c->step;
    c->t0 = ac_now_seconds();
    return c;
}

bool ac_collector_add(ac_collector *c, const ac_outcome *oc)
{
    const ac_result *r = &oc->r;
    bool failed = r->status == AC_OK && r->verdict == AC_VERDICT_FAIL, is_new = false;
    ac_summary_add(&c->s, r);
    if (failed) {
        note_first_failure(&c->s, oc);
        ac_failure_set_add(&c->failures, c->kernel, r, oc->minimal, &is_new);
        if (is_new)
            new_failure(c, oc);
    } else if (r->status != AC_OK) {
        print_error(c, r);
    }
    report_in_order(c, oc);
    bool observed = !c->o->observe || c->o->observe(c->o->observe_ctx, r); /* --baseline pairs it */
    double now = ac_now_seconds();
    if (now - c->last_progress >= 0.25) {
        ac_collector_progress(c, false);
        c->last_progress = now;
    }
    return observed && !(failed && c->o->stop_first);
}

static bool emit(void *ctx, const ac_outcome *oc) { return ac_collector_add(ctx, oc); }

ac_outcome_sink ac_collector_sink(ac_collector *c)
{
    ac_outcome_sink sink = {emit, c};
    return sink;
}

/* "42 s", "17 min", "3.2 h" */
static void format_seconds(char *buf, size_t len, double s)
{
    if (s < 120)
        snprintf(buf, len, "%.0f s", s);
    else if (s < 7200)
        snprintf(buf, len, "%.0f min", s / 60);
    else
        snprintf(buf, len, "%.1f h", s / 3600);
}

void ac_collector_progress(ac_collector *c, bool final)
{
    const ac_campaign_opts *o = c->o;
    if (!o->progress)
        return;
    double elapsed = ac_now_seconds() - c->t0, rate = elapsed > 0 ? (double)c->s.cases / elapsed : 0.0;
    double left = o->max_seconds > 0 ? o->max_seconds - elapsed
        : c->expected && rate > 0    ? (double)(c->expected - c->s.cases) / rate
                                     : -1;
    char total[32] = "", eta[48] = "", t[24];
    if (c->expected)
        snprintf(total, sizeof total, "/%ld", c->expected);
    if (!final && left >= 0) {
        format_seconds(t, sizeof t, left);
        snprintf(eta, sizeof eta, ", ~%s left", t);
    }
    fprintf(stderr, "\r%ld%s cases, %.1f cases/s, %ld failures%s%s", c->s.cases, total, rate, c->s.failed, eta,
            final ? "\n" : "      ");
    fflush(stderr);
}

int ac_collector_finish(ac_collector *c, ac_summary *s, ac_err *err)
{
    while (c->n_heap) { /* indices that never came (a stopped campaign): the rest in order */
        ac_outcome *next = heap_pop(c);
        report(c, next);
        free(next);
    }
    *s = c->s;
    if (c->save_status != AC_OK)
        return ac_fail(err, c->save_status, "%s", c->save_err.msg);
    return AC_OK;
}

const ac_failure_set *ac_collector_failures(const ac_collector *c) { return &c->failures; }
size_t ac_collector_waiting(const ac_collector *c) { return c->n_heap; }

void ac_collector_take_failures(ac_collector *c, ac_failure_set *out)
{
    *out = c->failures;
    memset(&c->failures, 0, sizeof c->failures);
}

void ac_collector_free(ac_collector *c)
{
    if (!c)
        return;
    while (c->n_heap)
        free(heap_pop(c));
    free(c->heap);
    ac_failure_set_free(&c->failures);
    free(c);
}
