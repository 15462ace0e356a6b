/* harness/campaign/campaign.c — the fuzz loop shared by `attncheck fuzz` and
 * `attncheck prove`: draw cases from the generator, run each, shrink each
 * failure (same failure kind), aggregate per dtype x output, feed the report. */
#include <stdio.h>
#include <string.h>

#include "harness/campaign/campaign.h"
#include "harness/campaign/corpus.h"
#include "harness/campaign/shrink.h"
#include "harness/case/generate.h"

typedef struct {
    const ac_kernel *k;
    const ac_budgets *b;
    const ac_run_opts *o;
    const char *kind;
} same_failure_ctx;

static bool fails_same_way(const ac_case *c, void *ctx)
{
    const same_failure_ctx *s = ctx;
    ac_result r;
    ac_err err;
    int st = ac_run_case(s->k, c, s->b, s->o, &r, &err);
    return st == AC_OK && r.verdict == AC_VERDICT_FAIL && strcmp(r.kind, s->kind) == 0;
}

int ac_shrink_failure(const ac_kernel *k, const ac_budgets *b, const ac_run_opts *o, const ac_case *c,
                      const char *kind, int max_steps, ac_case *minimal)
{
    /* certification never changes a verdict or its kind: skip it while shrinking */
    ac_run_opts quick = *o;
    quick.cert_rows = 0;
    same_failure_ctx ctx = {.k = k, .b = b, .o = &quick, .kind = kind};
    return ac_shrink(c, fails_same_way, &ctx, max_steps, minimal);
}

static void progress_line(const ac_campaign_opts *o, const ac_summary *s, double elapsed, bool final)
{
    if (!o->progress)
        return;
    fprintf(stderr, "\r%ld cases, %.1f cases/s, %ld failures%s", s->cases,
            elapsed > 0 ? (double)s->cases / elapsed : 0.0, s->failed, final ? "\n" : "   ");
    fflush(stderr);
}

/* Shrinks a failure, prints both lines, saves the minimal one when asked. */
static int handle_failure(const ac_kernel *k, const ac_budgets *b, const ac_campaign_opts *o, const ac_case *c,
                          const ac_result *r, char *minimal_line, size_t len, ac_err *err)
{
    ac_case minimal = *c;
    int calls = 0;
    if (o->shrink_steps > 0)
        calls = ac_shrink_failure(k, b, &o->run, c, r->kind, o->shrink_steps, &minimal);
    if (ac_case_format(&minimal, minimal_line, len) < 0)
        snprintf(minimal_line, len, "%s", r->line);
    if (o->out) {
        if (o->progress)
            fputc('\n', stderr);
        fprintf(o->out, "FAIL %s [%s] %s\n  original: %s\n  minimal:  %s   (%d shrink runs)\n", k->name, r->kind,
                r->why, r->line, minimal_line, calls);
    }
    if (!o->save_dir)
        return AC_OK;
    return ac_save_failure(o->save_dir, k->name, r->why, minimal_line, err);
}

static void note_first_failure(ac_summary *s, const ac_result *r, const char *minimal_line, double elapsed)
{
    if (s->first_fail_case)
        return;
    s->first_fail_case = s->cases;
    s->first_fail_seconds = elapsed;
    snprintf(s->first_kind, sizeof s->first_kind, "%s", r->kind);
    snprintf(s->first_line, sizeof s->first_line, "%s", r->line);
    snprintf(s->first_minimal, sizeof s->first_minimal, "%s", minimal_line);
    snprintf(s->first_why, sizeof s->first_why, "%s", r->why);
}

static bool campaign_done(const ac_campaign_opts *o, const ac_summary *s, double elapsed)
{
    if (o->max_cases > 0 && s->cases >= o->max_cases)
        return true;
    if (o->max_seconds > 0 && elapsed >= o->max_seconds)
        return true;
    return o->stop_first && s->failed > 0;
}

/* One case of the campaign: run it, count it, shrink and save a failure, report
 * it.  AC_ERR_ENV (a device fault) stops the campaign; other errors are counted. */
static int campaign_case(const ac_kernel *k, const ac_budgets *b, const ac_campaign_opts *o, const ac_case *c,
                         double t0, ac_report *rep, ac_summary *s, ac_err *err)
{
    ac_result r;
    int st = ac_run_case(k, c, b, &o->run, &r, err);
    ac_summary_add(s, &r);
    char minimal_line[AC_CASE_LINE_MAX] = "";
    int saved = AC_OK;
    if (st == AC_OK && r.verdict == AC_VERDICT_FAIL) {
        saved = handle_failure(k, b, o, c, &r, minimal_line, sizeof minimal_line, err);
        note_first_failure(s, &r, minimal_line, ac_now_seconds() - t0);
    } else if (st != AC_OK && o->out) {
        fprintf(o->out, "ERROR %s: %s\n  case: %s\n", k->name, r.why, r.line);
    }
    ac_report_add(rep, k->name, &r, r.verdict == AC_VERDICT_FAIL ? minimal_line : NULL);
    if (saved != AC_OK)
        return saved; /* --save-failures could not save it: stop, and say so (err), rather than lose it */
    return st == AC_ERR_ENV ? st : AC_OK; /* a device fault: what follows would not be about the kernel */
}

int ac_campaign(const ac_kernel *k, const ac_budgets *b, const ac_campaign_opts *o, ac_report *rep,
                ac_summary *s, ac_err *err)
{
    memset(s, 0, sizeof *s);
    ac_gen g;
    ac_gen_init(&g, o->seed, &k->caps);
    g.dtype_filter = o->dtype_filter;
    g.mask_filter = o->mask_filter;
    g.max_seqlen = o->max_seqlen;
    double t0 = ac_now_seconds(), last_progress = 0;
    int st = AC_OK;
    while (st == AC_OK && !campaign_done(o, s, ac_now_seconds() - t0)) {
        ac_case c;
        if ((st = ac_gen_next(&g, &c, err)) == AC_OK)
            st = campaign_case(k, b, o, &c, t0, rep, s, err);
        double now = ac_now_seconds() - t0;
        if (st == AC_OK && now - last_progress >= 0.25) {
            progress_line(o, s, now, false);
            last_progress = now;
        }
    }
    s->seconds = ac_now_seconds() - t0;
    progress_line(o, s, s->seconds, true);
    return st;
}
