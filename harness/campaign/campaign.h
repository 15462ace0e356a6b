/* harness/campaign/campaign.h — the fuzz loop shared by `fuzz` and `prove`:
 * draw cases from the generator, run each, shrink each failure (same kind),
 * aggregate per dtype x output, feed the reports.
 *
 * Three pieces:
 *   the loop (campaign.c): the cases of one shard of the stream (index k with
 *     k mod shard_count = shard_index, k < max_cases), each run and, when it
 *     fails, shrunk; every finished case leaves as an ac_outcome;
 *   the collector (collect.c): outcomes in, in any order: the summary, the
 *     distinct failures (printed once, saved once), the reports in case-index
 *     order, the progress line;
 *   the workers (parallel.c): `fuzz --jobs N` starts N copies of attncheck, each
 *     the loop over shard j of N (within this process's shard), streaming its
 *     outcomes back to one collector.  The results do not depend on N.
 * A case that would not finish within the time budget (estimated from its sizes
 * and the rate measured so far) is not started; the loop stops there. */
#ifndef ATTNCHECK_CAMPAIGN_H
#define ATTNCHECK_CAMPAIGN_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "harness/case/generate.h"
#include "harness/report/failures.h"
#include "harness/report/report.h"
#include "harness/report/summary.h"
#include "harness/run/run.h"

typedef struct {
    uint64_t seed;
    long max_cases; /* the case budget: indices 0 .. max_cases-1 (0 = no limit) */
    double max_seconds; /* the time budget (0 = none): no case starts that would end past it */
    double deadline; /* its end on the monotonic clock (ac_now_seconds), when a --jobs
                                       * parent set it for every worker alike; 0: max_seconds from the start */
    unsigned dtype_filter, mask_filter; /* as in ac_gen */
    int min_seqlen, max_seqlen; /* as in ac_gen */
    ac_profile profile; /* as in ac_gen */
    bool tier_cap; /* the size cap of the reference tier in use (ac_reference_gen_cap);
                                       * false: the generator's default work cap (prove) */
    int shard_index, shard_count; /* run the indices k with k mod shard_count = shard_index (count 0: all) */
    bool stop_first; /* stop at the first failure */
    int shrink_steps; /* predicate runs allowed per failure; 0 = no shrinking */
    const char *save_dir; /* --save-failures DIR, or NULL */
    ac_run_opts run;
    bool progress; /* the "\r cases, cases/s, failures, time left" line on stderr */
    FILE *out; /* failures and errors are printed here; NULL = silent */
    /* --baseline: run these cases in order instead of drawing from the generator */
    const ac_case *replay;
    size_t n_replay;
    /* called with every result (the baseline pairs them); returning false stops the campaign */
    bool (*observe)(void *ctx, const ac_result *r);
    void *observe_ctx;
    volatile sig_atomic_t *stop; /* set (by a signal handler): stop after the case in flight; may be NULL */
} ac_campaign_opts;

/* One finished case: its result (r.index its case index), the minimal line of
 * a failure ("" otherwise), the runs its shrinking took, and when it finished
 * (seconds since the campaign's start, before shrinking). */
typedef struct {
    ac_result r;
    char minimal[AC_CASE_LINE_MAX];
    int shrink_runs;
    double found_at;
} ac_outcome;

/* How a loop ended: AC_OK, or the AC_ERR_* that stopped it (a generator error,
 * a device fault: AC_ERR_ENV) with its message; why it stopped before its
 * budget ("" when it did not); the cases it finished. */
typedef struct {
    int status;
    ac_err err;
    char stopped[256];
    long cases;
    double seconds;
} ac_loop_end;

/* Where the loop sends each outcome; returns true to go on, false to stop. */
typedef struct {
    bool (*emit)(void *ctx, const ac_outcome *oc);
    void *ctx;
} ac_outcome_sink;

/* The loop over o's shard of the stream. */
void ac_campaign_loop(const ac_kernel *k, const ac_budgets *b, const ac_campaign_opts *o, ac_outcome_sink *sink,
                      ac_loop_end *end);

/* ---- the collector (collect.c) ------------------------------------------------- */
typedef struct ac_collector ac_collector;
/* rep may be NULL.  o: the campaign's options (the shard whose indices come in,
 * printing, saving, progress).  NULL when out of memory. */
ac_collector *ac_collector_open(const char *kernel, const ac_campaign_opts *o, ac_report *rep);
/* One outcome, from any worker, in any order.  False when the campaign should
 * stop (--stop-first after a failure). */
bool ac_collector_add(ac_collector *c, const ac_outcome *oc);
/* A worker that ran the indices first, first + stride, ... has ended: the
 * indices of that sequence that did not come will not (the reports go on past them). */
void ac_collector_worker_done(ac_collector *c, long first, long stride);
/* Outcomes waiting for a lower index before they can be reported. */
size_t ac_collector_waiting(const ac_collector *c);
/* The progress line now (when asked for), `final` ending it. */
void ac_collector_progress(ac_collector *c, bool final);
/* Feeds the reports every outcome still waiting for a lower index, fills s and
 * returns the first error of --save-failures (AC_OK when none). */
int ac_collector_finish(ac_collector *c, ac_summary *s, ac_err *err);
const ac_failure_set *ac_collector_failures(const ac_collector *c);
/* Moves the distinct failures out (the collector keeps an empty set). */
void ac_collector_take_failures(ac_collector *c, ac_failure_set *out);
void ac_collector_free(ac_collector *c);
/* The outcome sink of a collector. */
ac_outcome_sink ac_collector_sink(ac_collector *c);

/* ---- whole campaigns ---------------------------------------------------------- */
/* In this process (prove, tests): fuzzes k; a failure is shrunk (same kind),
 * printed and saved.  Returns AC_OK, or the AC_ERR_* that stopped it (generator
 * error, device fault: AC_ERR_ENV); other per-case errors are counted in
 * s->errors / s->worst_status.  rep may be NULL. */
int ac_campaign(const ac_kernel *k, const ac_budgets *b, const ac_campaign_opts *o, ac_report *rep, ac_summary *s,
                ac_err *err);

/* What `attncheck fuzz` prints after its summary and records last. */
typedef struct {
    ac_summary s;
    ac_failure_set failures;
    char stopped[1024]; /* why it ended before its budget (time, a signal, --stop-first), "" otherwise */
    int jobs; /* workers it ran on (1: this process) */
} ac_campaign_result;
/* The campaign on `jobs` workers (parallel.c; <= 1: in this process).  argv:
 * the command line that started this process, which the workers rerun with
 * their own shard.  res is filled even on error; free its failures after. */
int ac_fuzz_campaign(const ac_kernel *k, const ac_budgets *b, const ac_campaign_opts *o, int jobs, int argc,
                     char **argv, ac_report *rep, ac_campaign_result *res, ac_err *err);

/* CPUs this process may run on. */
int ac_cpu_count(void);
/* --jobs by default: the CPUs, but no more workers than the memory available
 * holds cases of this campaign (ac_mem_budget() each, or 512 MiB for the
 * default profile's small cases). */
int ac_default_jobs(const ac_campaign_opts *o);

/* The workers a campaign of o runs for `jobs` asked: at most one per case of
 * its shard, at most 256, at least 1. */
int ac_campaign_jobs(const ac_campaign_opts *o, int jobs);

/* The worker side of --jobs: the loop over o's shard, every outcome and the
 * end written to fd (the parent reads them).  Returns the loop's status. */
int ac_campaign_worker(const ac_kernel *k, const ac_budgets *b, const ac_campaign_opts *o, int fd);

/* Shrinks c, which fails with kind on k, keeping only steps that fail with the
 * same kind.  (The loop's own shrinking also stops early on its stop flag.) */
int ac_shrink_failure(const ac_kernel *k, const ac_budgets *b, const ac_run_opts *o, const ac_case *c, const char *kind,
                      int max_steps, ac_case *minimal);

#endif
