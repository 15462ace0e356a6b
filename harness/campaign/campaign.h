/* harness/campaign/campaign.h — the fuzz loop shared by `fuzz` and `prove`:
 * draw cases from the generator, run each, shrink each failure (same kind),
 * aggregate per dtype x output, feed the reports. */
#ifndef ATTNCHECK_CAMPAIGN_H
#define ATTNCHECK_CAMPAIGN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "harness/report/report.h"
#include "harness/report/summary.h"
#include "harness/run/run.h"

typedef struct {
    uint64_t seed;
    long max_cases;                   /* stop after this many cases (0 = no limit) */
    double max_seconds;               /* stop after this long (0 = no limit) */
    unsigned dtype_filter, mask_filter; /* as in ac_gen */
    int max_seqlen;                   /* as in ac_gen */
    bool stop_first;                  /* stop at the first failure */
    int shrink_steps;                 /* predicate runs allowed per failure; 0 = no shrinking */
    const char *save_dir;             /* --save-failures DIR, or NULL */
    ac_run_opts run;
    bool progress;                    /* the "\r cases, cases/s, failures" line on stderr */
    FILE *out;                        /* failures and errors are printed here; NULL = silent */
    /* --baseline: run these cases in order instead of drawing from the generator */
    const ac_case *replay;
    size_t n_replay;
    /* called with every result (the baseline pairs them); returning false stops the campaign */
    bool (*observe)(void *ctx, const ac_result *r);
    void *observe_ctx;
} ac_campaign_opts;

/* Fuzzes k; a failure is shrunk (same kind), printed and saved.  Returns AC_OK,
 * or the AC_ERR_* that stopped it (generator error, device fault: AC_ERR_ENV);
 * other per-case errors are counted in s->errors / s->worst_status.  rep may be NULL. */
int ac_campaign(const ac_kernel *k, const ac_budgets *b, const ac_campaign_opts *o, ac_report *rep,
                ac_summary *s, ac_err *err);
/* Shrinks c, which fails with kind on k, keeping only steps that fail with the same kind. */
int ac_shrink_failure(const ac_kernel *k, const ac_budgets *b, const ac_run_opts *o, const ac_case *c,
                      const char *kind, int max_steps, ac_case *minimal);

#endif
