/* harness/verdict/baseline_internal.h — shared by baseline.c (pairing and
 * statistics), baseline_load.c (the JSON Lines reader) and baseline_print.c. */
#ifndef ATTNCHECK_BASELINE_INTERNAL_H
#define ATTNCHECK_BASELINE_INTERNAL_H

#include "harness/files/files.h"
#include "harness/verdict/baseline.h"

/* One case of the old run: what pairing and the ratios need. */
typedef struct {
    char *line;
    ac_verdict verdict;
    int status;
    bool unsupported;
    char kind[AC_KIND_LEN];
    bool present[AC_OUT_COUNT];
    double n_mean[AC_OUT_COUNT], mean_abs[AC_OUT_COUNT], max_scaled[AC_OUT_COUNT];
    bool paired;
} baseline_old;

/* The paired ratios new / old of one dtype x output x metric. */
typedef struct {
    double *ratios;
    size_t n, cap;
} baseline_cell;

struct ac_baseline {
    char path[AC_PATH_LEN], kernel[AC_KERNEL_NAME_LEN];
    baseline_old *old;
    size_t n_old, cap_old;
    long limited_out;
    size_t *index, index_cap, indexed; /* open addressing: old index + 1, 0 empty */
    baseline_cell cells[AC_DTYPE_COUNT][AC_OUT_COUNT][AC_BASE_METRIC_COUNT];
    ac_base_stat stat[AC_DTYPE_COUNT][AC_OUT_COUNT][AC_BASE_METRIC_COUNT];
    ac_base_listed *listed;
    size_t n_listed, cap_listed, n_listed_new; /* the new run's first, then the old unpaired */
    long new_cases, compared;
    double ratio, alpha;
    bool evaluated, regressed, improved;
};

int baseline_push_old(ac_baseline *b, const baseline_old *x, ac_err *err);
/* "pass", "fail", "error" or "skipped". */
const char *baseline_verdict_word(ac_verdict v, bool unsupported, int status);

#endif
