/* harness/report/failures.h — failures deduplicated by signature: the kernel,
 * the failure kind and the minimal line (the shrunk one, or the original when
 * nothing was shrunk).  A campaign that fails 61 times with 16 distinct minimal
 * lines has 16 entries, each with its count, the first (lowest-index) case
 * that showed it and that case's message.  fuzz prints the list after its
 * summary, merge prints the same list from the records, and the Markdown
 * report lists the same entries: all in the order of their first case index,
 * so the list does not depend on how the cases were spread over workers. */
#ifndef ATTNCHECK_FAILURES_H
#define ATTNCHECK_FAILURES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "harness/run/run.h"

typedef struct {
    char kernel[AC_KERNEL_NAME_LEN];
    char kind[AC_KIND_LEN];
    char minimal[AC_CASE_LINE_MAX];
    char line[AC_CASE_LINE_MAX]; /* the first case's original line */
    char why[AC_WHY_LEN]; /* the first case's message */
    long first_index; /* the lowest case index with this signature */
    long count;
} ac_failure_sig;

typedef struct {
    ac_failure_sig **v; /* entries, in the order they were added */
    size_t n, cap;
    size_t *slots; /* open-addressing table of entry numbers + 1 (0: empty) */
    size_t n_slots;
    long failures; /* every failure added */
} ac_failure_set;

/* Adds a failure of kernel (r: its result, r->index its case index; minimal:
 * its shrunk line or NULL).  Returns the entry (NULL when out of memory) and
 * whether the signature is new. */
const ac_failure_sig *ac_failure_set_add(ac_failure_set *s, const char *kernel, const ac_result *r, const char *minimal,
                                         bool *is_new);
/* The entries sorted by first case index (for printing); NULL when there are
 * none or memory is short; free() it. */
const ac_failure_sig **ac_failure_set_sorted(const ac_failure_set *s);
/* "distinct failures: D of F failing cases" and one line per entry:
 * "  COUNTx [kind] minimal line"; nothing when there is no failure. */
void ac_failure_set_print(FILE *f, const ac_failure_set *s);
void ac_failure_set_free(ac_failure_set *s);

#endif
