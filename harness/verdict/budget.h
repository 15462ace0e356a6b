/* harness/verdict/budget.h — the budgets file: how large an error the gate
 * allows, per dtype and output, in one versioned, reviewed file.
 *
 * budgets.txt at the repository root, line-oriented, '#' comments:
 *   version 1
 *   growth-length 64
 *   DTYPE OUTPUT scaled VALUE [grows]       e.g. "f16 O scaled 4", "f32 dQ scaled 8 grows"
 *   DTYPE OUTPUT vs-naive-mean VALUE|off    e.g. "f16 O vs-naive-mean 1.5"
 *   regression-ratio R                      the baseline comparison's threshold (default 1.05)
 *   regression-p P                          and its test's level (default 1e-3), see baseline.h
 * Every (dtype, output) pair needs both lines.  A "grows" budget is multiplied by
 * max(1, sqrt(L / growth-length)), L = max(seqlen_q, seqlen_k, head_dim): f32
 * accumulations over N and d terms err like a random walk (see budgets.txt). */
#ifndef ATTNCHECK_BUDGET_H
#define ATTNCHECK_BUDGET_H

#include <stdbool.h>
#include <stddef.h>

#include "harness/files/files.h"
#include "harness/verdict/compare.h"
#include "ref/ref.h"

typedef struct {
    double max_scaled[AC_DTYPE_COUNT][AC_OUT_COUNT]; /* before growth */
    double max_vs_naive_mean[AC_DTYPE_COUNT][AC_OUT_COUNT]; /* 0 = off */
    bool scaled_grows[AC_DTYPE_COUNT][AC_OUT_COUNT];
    double growth_length;
    double regression_ratio, regression_p; /* --baseline: median ratio above R at p < P is a regression */
    int version;
    char source[AC_PATH_LEN]; /* file it came from */
} ac_budgets;

/* Reads path (a regular file of at most AC_BUDGETS_FILE_MAX bytes: /dev/zero
 * or a FIFO is refused, not read forever) and parses it. */
#define AC_BUDGETS_FILE_MAX ((size_t)1 << 20)
#define AC_BUDGETS_LINE_MAX 1024
int ac_budgets_load(const char *path, ac_budgets *b, ac_err *err);
/* The budgets in text (len bytes; path names it in messages): a NUL byte or a
 * line of AC_BUDGETS_LINE_MAX characters is AC_ERR_INPUT naming PATH:LINE. */
int ac_budgets_parse(const char *text, size_t len, const char *path, ac_budgets *b, ac_err *err);
/* Where the budgets file is: --budgets (the CLI's job), else $ATTNCHECK_BUDGETS, else the source tree's budgets.txt. */
const char *ac_budgets_default_path(void);
/* The growth factor for problem p (1 when the budget does not grow) and the budget it gives. */
double ac_budget_growth(const ac_budgets *b, const ac_problem *p, ac_dtype t, ac_output o);
double ac_budget_max_scaled(const ac_budgets *b, const ac_problem *p, ac_dtype t, ac_output o);

#endif
