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
    const char *base;                 /* default "cpu-flash" */
    uint64_t seed;
    long mutant_cases, clean_cases;
    int max_seqlen;
    int shrink_steps;
    ac_run_opts run;
    bool progress;
    const char *markdown_path;
    FILE *out;
    ac_summary *totals;               /* when set: every campaign's counts and seconds added up */
} ac_prove_opts;
int ac_prove(const ac_prove_opts *o, const ac_budgets *b, ac_report *rep, ac_err *err);

#endif
