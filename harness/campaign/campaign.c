/* harness/campaign/campaign.c — the fuzz loop shared by `attncheck fuzz` and
 * `attncheck prove`: the cases of one shard of the generator's stream, each
 * run and, when it fails, shrunk (same failure kind); every finished case goes
 * to a sink (a collector in this process, or the pipe of a --jobs worker).
 *
 * The time budget.  Before a case starts, its seconds are estimated as
 *   overhead + kappa * prior
 * prior = ac_reference_seconds_prior (the reference tier's rate on its sizes,
 * and the MPFR certification); overhead = the longest of the last 64 cases
 * whose prior is under 1 ms (the fixed cost of a case, as it varies on a
 * loaded machine); kappa = the largest (seconds - shortest case) / prior among
 * the last 64 cases whose prior is at least 1 ms and a quarter of this one's
 * (else among the 8 largest; 1 before there is one): what this kernel, tier
 * and machine really take per unit of prior, on the safe side, judged on
 * cases of about this size.  A case is not started unless 1.25 times its
 * estimate fits in the time left; the loop goes on with the next ones (a
 * smaller case may fit) until the time is up or 64 in a row did not fit, and
 * says how many it left out. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness/campaign/campaign.h"
#include "harness/campaign/shrink.h"
#include "harness/case/generate.h"
#include "harness/run/reference.h"

/* ---- shrinking ------------------------------------------------------------------ */

typedef struct {
    const ac_kernel *k;
    const ac_budgets *b;
    const ac_run_opts *o;
    const char *kind;
    volatile sig_atomic_t *stop;
} same_failure_ctx;

static bool fails_same_way(const ac_case *c, void *ctx)
{
    const same_failure_ctx *s = ctx;
    if (s->stop && *s->stop)
        return false; /* asked to stop: every further step is refused, quickly */
    ac_result r;
    ac_err err;
    int st = ac_run_case(s->k, c, s->b, s->o, &r, &err);
    return st == AC_OK && r.verdict == AC_VERDICT_FAIL && strcmp(r.kind, s->kind) == 0;
}

static int shrink(const ac_kernel *k, const ac_budgets *b, const ac_run_opts *o, const ac_case *c, const char *kind,
                  int max_steps, volatile sig_atomic_t *stop, ac_case *minimal)
{
    /* certification never changes a verdict or its kind: skip it while shrinking */
    ac_run_opts quick = *o;
    quick.cert_rows = 0;
    same_failure_ctx ctx = {.k = k, .b = b, .o = &quick, .kind = kind, .stop = stop};
    return ac_shrink(c, fails_same_way, &ctx, max_steps, minimal);
}

int ac_shrink_failure(const ac_kernel *k, const ac_budgets *b, const ac_run_opts *o, const ac_case *c, const char *kind,
                      int max_steps, ac_case *minimal)
{
    return shrink(k, b, o, c, kind, max_steps, NULL, minimal);
}

/* ---- the time model ---------------------------------------------------------------- */

#define SIGNIFICANT_PRIOR_S 1e-3
#define TIME_MARGIN 1.25 /* a case starts when 1.25 times its estimate fits: timings vary by that much */
#define MODEL_WINDOW 64
#define MODEL_LARGEST 8

typedef struct {
    double floor_s; /* the shortest case so far */
    double prior[MODEL_WINDOW]; /* the last significant cases: prior and seconds */
    double seconds[MODEL_WINDOW];
    double small_s[MODEL_WINDOW]; /* the last cases below SIGNIFICANT_PRIOR_S: their time is fixed cost */
    int n, n_sig, n_small;
} time_model;

/* kappa for a case of this prior: the largest (seconds - floor) / prior among
 * the remembered cases of at least a quarter of its prior (cases that size pay
 * their fixed costs alike), else among the MODEL_LARGEST largest ones; 1 (the
 * prior as it is) before any. */
static double model_kappa(const time_model *m, double prior)
{
    int n = m->n_sig < MODEL_WINDOW ? m->n_sig : MODEL_WINDOW;
    double kappa = -1, top[MODEL_LARGEST] = {0}, top_k[MODEL_LARGEST] = {0};
    for (int i = 0; i < n; i++) {
        double k = fmax(0, m->seconds[i] - m->floor_s) / m->prior[i];
        if (m->prior[i] >= prior / 4)
            kappa = fmax(kappa, k);
        for (int j = 0; j < MODEL_LARGEST; j++) /* keep the largest priors, for when none is that large */
            if (m->prior[i] > top[j]) {
                for (int t = MODEL_LARGEST - 1; t > j; t--)
                    top[t] = top[t - 1], top_k[t] = top_k[t - 1];
                top[j] = m->prior[i], top_k[j] = k;
                break;
            }
    }
    for (int j = 0; kappa < 0 && j < MODEL_LARGEST; j++)
        if (top[j] > 0)
            kappa = fmax(kappa, top_k[j]);
    return kappa < 0 ? 1.0 : kappa;
}

/* The fixed cost a case pays whatever its size: the longest of the recent
 * small cases (on a loaded machine they vary by milliseconds), else the floor. */
static double model_overhead(const time_model *m)
{
    double worst = m->n ? m->floor_s : 0;
    for (int i = 0; i < m->n_small && i < MODEL_WINDOW; i++)
        worst = fmax(worst, m->small_s[i]);
    return worst;
}

static double model_estimate(const time_model *m, double prior)
{
    return model_overhead(m) + model_kappa(m, prior) * prior;
}

static void model_add(time_model *m, double prior, double seconds)
{
    m->floor_s = m->n++ ? fmin(m->floor_s, seconds) : seconds;
    if (prior < SIGNIFICANT_PRIOR_S) {
        m->small_s[m->n_small++ % MODEL_WINDOW] = seconds;
        return;
    }
    int at = m->n_sig++ % MODEL_WINDOW;
    m->prior[at] = prior;
    m->seconds[at] = seconds;
}

/* ---- the loop ------------------------------------------------------------------------ */

typedef struct {
    const ac_kernel *k;
    const ac_budgets *b;
    const ac_campaign_opts *o;
    ac_gen g;
    time_model model;
    double t0, deadline;
    bool backward;
    long not_started; /* cases skipped by the time budget */
    char first_skip[96];
} loop_state;

static void loop_init(loop_state *ls, const ac_kernel *k, const ac_budgets *b, const ac_campaign_opts *o)
{
    memset(ls, 0, sizeof *ls);
    ls->k = k, ls->b = b, ls->o = o;
    ls->backward = o->run.backward && k->caps.backward && k->backward;
    ac_gen_init(&ls->g, o->seed, &k->caps);
    ls->g.dtype_filter = o->dtype_filter;
    ls->g.mask_filter = o->mask_filter;
    ls->g.min_seqlen = o->min_seqlen;
    ls->g.max_seqlen = o->max_seqlen;
    ls->g.profile = o->profile;
    if (o->tier_cap)
        ac_reference_gen_cap(ls->backward, &ls->g.cap);
    ls->t0 = ac_now_seconds();
    ls->deadline = o->deadline > 0 ? o->deadline : ls->t0 + o->max_seconds;
}

/* Whether case c would end within the time budget; the estimate in *est_s. */
static bool fits_in_time(loop_state *ls, const ac_case *c, double *prior, double *est_s)
{
    const ac_campaign_opts *o = ls->o;
    *prior = ac_reference_seconds_prior(c, ls->backward, o->run.cert_rows);
    *est_s = model_estimate(&ls->model, *prior);
    return o->max_seconds <= 0 || TIME_MARGIN * *est_s <= ls->deadline - ac_now_seconds();
}

/* A case not started: counted, the first one named in end->stopped. */
static void note_not_started(loop_state *ls, long k, double est_s, ac_loop_end *end)
{
    double left = ls->deadline - ac_now_seconds();
    if (ls->not_started++ == 0)
        snprintf(ls->first_skip, sizeof ls->first_skip, "case %ld (estimated %.3g s with %.3g s left)", k, est_s,
                 left > 0 ? left : 0);
    snprintf(end->stopped, sizeof end->stopped,
             "time: %ld case%s not started, as they would not finish within "
             "--time %g; the first: %s",
             ls->not_started, ls->not_started == 1 ? "" : "s", ls->o->max_seconds, ls->first_skip);
}

/* Runs case c (index k), shrinks a failure, sends the outcome.  False to stop. */
static bool one_case(loop_state *ls, const ac_case *c, long k, double prior, ac_outcome_sink *sink, ac_loop_end *end)
{
    const ac_campaign_opts *o = ls->o;
    static ac_outcome oc; /* large: kept off the stack */
    memset(&oc, 0, sizeof oc);
    ac_err err = {{0}};
    int st = ac_run_case(ls->k, c, ls->b, &o->run, &oc.r, &err);
    oc.r.index = k;
    oc.found_at = ac_now_seconds() - ls->t0;
    model_add(&ls->model, prior, oc.r.seconds);
    if (st == AC_OK && oc.r.verdict == AC_VERDICT_FAIL) {
        ac_case minimal = *c;
        if (o->shrink_steps > 0)
            oc.shrink_runs = shrink(ls->k, ls->b, &o->run, c, oc.r.kind, o->shrink_steps, o->stop, &minimal);
        if (ac_case_format(&minimal, oc.minimal, sizeof oc.minimal) < 0)
            snprintf(oc.minimal, sizeof oc.minimal, "%s", oc.r.line);
    }
    end->cases++;
    bool go_on = sink->emit(sink->ctx, &oc);
    if (st == AC_ERR_ENV) { /* a device fault: what follows would not be about the kernel */
        end->status = st;
        end->err = err;
        return false;
    }
    return go_on;
}

/* The time budget ends the loop after this many cases in a row did not fit. */
#define MAX_SKIPPED_IN_A_ROW 64

static long first_index(const ac_campaign_opts *o) { return o->shard_count > 1 ? o->shard_index : 0; }
static long index_step(const ac_campaign_opts *o) { return o->shard_count > 1 ? o->shard_count : 1; }

void ac_campaign_loop(const ac_kernel *k, const ac_budgets *b, const ac_campaign_opts *o, ac_outcome_sink *sink,
                      ac_loop_end *end)
{
    memset(end, 0, sizeof *end);
    loop_state ls;
    loop_init(&ls, k, b, o);
    int skipped_in_a_row = 0;
    for (long idx = first_index(o); o->max_cases <= 0 || idx < o->max_cases; idx += index_step(o)) {
        if (o->replay && (size_t)idx >= o->n_replay) /* --baseline: its lines, then the end */
            break;
        if (o->stop && *o->stop) {
            snprintf(end->stopped, sizeof end->stopped, "signal: stopped after %ld cases", end->cases);
            break;
        }
        if (o->max_seconds > 0 && ac_now_seconds() >= ls.deadline)
            break;
        ac_case c;
        if (o->replay)
            c = o->replay[idx];
        else if ((end->status = ac_gen_case_at(&ls.g, (uint64_t)idx, &c, &end->err)) != AC_OK)
            break;
        double prior, est_s;
        if (!fits_in_time(&ls, &c, &prior, &est_s)) { /* too big for the time left: smaller ones may fit */
            note_not_started(&ls, idx, est_s, end);
            if (++skipped_in_a_row == MAX_SKIPPED_IN_A_ROW)
                break;
            continue;
        }
        skipped_in_a_row = 0;
        if (!one_case(&ls, &c, idx, prior, sink, end))
            break;
    }
    end->seconds = ac_now_seconds() - ls.t0;
}

/* ---- in this process ---------------------------------------------------------------- */

int ac_campaign(const ac_kernel *k, const ac_budgets *b, const ac_campaign_opts *o, ac_report *rep, ac_summary *s,
                ac_err *err)
{
    memset(s, 0, sizeof *s);
    ac_collector *c = ac_collector_open(k->name, o, rep);
    if (!c)
        return ac_fail(err, AC_ERR_ENV, "out of memory");
    ac_outcome_sink sink = ac_collector_sink(c);
    static ac_loop_end end;
    ac_campaign_loop(k, b, o, &sink, &end);
    ac_collector_progress(c, true);
    int st = ac_collector_finish(c, s, err);
    s->seconds = end.seconds;
    ac_collector_free(c);
    if (end.status != AC_OK)
        return ac_fail(err, end.status, "%s", end.err.msg);
    return st;
}
