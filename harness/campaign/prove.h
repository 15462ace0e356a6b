/* harness/campaign/prove.h — `attncheck prove`: detection power.
 * Fuzzes the base kernel for clean_cases cases (it must pass them all), then
 * every registered kernel whose name contains "mutant" and starts with the
 * base's family prefix (its name up to and including the first '-'), each with
 * the same seed, until its first failure or mutant_cases.  Prints the table to
 * out, writes it as Markdown when markdown_path is set.  Returns 0 when the base
 * passed and every mutant was caught, 1 otherwise, 2/3 on errors. */
#ifndef ATTNCHECK_PROVE_H
#define ATTNCHECK_PROVE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "harness/report/report.h"
#include "harness/report/summary.h"
#include "harness/run/run.h"

typedef struct {
    const char *base; /* default "cpu-flash" */
    uint64_t seed;
    long mutant_cases, clean_cases;
    int max_seqlen;
    int shrink_steps;
    ac_run_opts run;
    bool progress;
    const char *markdown_path;
    FILE *out;
    bool baseline; /* prove the baseline comparison instead (prove_baseline.c) */
    ac_summary *totals; /* when set: every campaign's counts and seconds added up */
} ac_prove_opts;
int ac_prove(const ac_prove_opts *o, const ac_budgets *b, ac_report *rep, ac_err *err);

/* `attncheck prove --baseline`: the baseline comparison's detection power.
 * The base runs mutant_cases cases (seed); every <base>-precision-* kernel
 * replays them, paired case by case, the comparison evaluated after each case:
 * a precision mutant must be flagged (a regression) within them and fail no
 * budget; a control (*-control-*) must never be.  Then the false positives:
 * clean_cases cases in windows of AC_PROVE_BASELINE_WINDOW, each its own seed
 * (seed + 1, + 2, ...), the unchanged base and every control compared with
 * the base's run of the window; the share of windows flagged is the
 * false-positive rate.  0 when all that holds, 1 otherwise, 2/3 on errors. */
#define AC_PROVE_BASELINE_WINDOW 200
int ac_prove_baseline(const ac_prove_opts *o, const ac_budgets *b, ac_report *rep, ac_err *err);

#endif
