/* harness/verdict/compare.h — the comparator: one kernel output against the
 * reference, element by element, into ac_metrics.  The gate (gate.h) turns
 * the metrics of a case's outputs into a verdict. */
#ifndef ATTNCHECK_COMPARE_H
#define ATTNCHECK_COMPARE_H

#include <stdbool.h>
#include <stddef.h>

#include "harness/run/inputs.h"
#include "ref/ref.h"

/* The variants add the gradients of their own parameters (ref/variants.h),
 * present only when the problem uses them: dSink (Hq, f32); dBias (shaped like
 * the bias, in its dtype: ac_compare measures it in the bias dtype's ulp and u). */
typedef enum {
    AC_OUT_O = 0,
    AC_OUT_LSE,
    AC_OUT_DQ,
    AC_OUT_DK,
    AC_OUT_DV,
    AC_OUT_DSINK,
    AC_OUT_DBIAS,
    AC_OUT_COUNT
} ac_output;
const char *ac_output_name(ac_output o); /* "O", "LSE", "dQ", "dK", "dV", "dSink", "dBias" */

typedef struct {
    int b, h, row, col; /* col = -1 for LSE; dBias (mb, mh, i, j); dSink (-1, h, -1, -1) */
} ac_where;

#define AC_DIAG_MAX_HEADS 64 /* heads whose over-budget elements are counted one by one */
#define AC_DIAG_MAX_ROWS 32 /* rows over budget listed with their counts (the first ones) */
#define AC_HINT_LEN 384

/* What the gate found wrong with one output (ac_metrics.failed): one bit per
 * special class (1u << ac_special), and these two. */
#define AC_FAILED_SCALED (1u << 8)
#define AC_FAILED_VS_NAIVE (1u << 9)

typedef struct {
    int row; /* a query row (dK, dV: a key), over every batch and head */
    size_t n; /* its elements over budget */
} ac_row_count;

typedef struct {
    bool present;
    size_t n_compared;
    /* Elements in the magnitudes (max/mean ulp, scaled, abs); 0 when every element
     * was special, and then max_scaled says nothing (printed "-", not 0 at -1,-1,-1). */
    size_t n_measured;
    double max_ulp, mean_ulp;
    ac_where at_max_ulp;
    double max_scaled;
    ac_where at_max_scaled;
    double worst_ref, worst_got, worst_escale; /* at at_max_scaled: expected, actual, E */
    /* The means (and mean E) are over the n_mean elements whose reference is at least
     * the dtype's smallest normal: see compare.c, add_magnitudes. */
    double max_abs, mean_abs;
    /* sqrt(mean((y - x)^2)) over the elements in the magnitudes, the kernel's and the naive
     * baseline's: the RMSE FP8 kernels' own tests use (FlashAttention-3, TransformerEngine), reported
     * beside the contract's metrics so a user can hold a verdict against theirs; never gated */
    double rmse, naive_rmse;
    double naive_max_abs, naive_mean_abs;
    size_t n_mean;
    double vs_naive_max, vs_naive_mean; /* kernel / naive; 0 when both are 0, +inf when only naive is 0 */
    bool has_naive; /* naive was given; otherwise the naive fields are 0 */
    double mean_escale; /* mean E over the elements in the magnitudes (the gate's vs-naive guard) */
    /* special-value classes, checked before any magnitude */
    size_t n_unexpected_nan, n_overflow, n_lost_special, n_wrong_zero, n_unwritten;
    ac_where first_special;
    double special_ref, special_got; /* at first_special: expected, actual (NaN for unwritten) */
    /* which convention fully masked rows follow: rows seen, rows giving O = 0 (LSE -inf), rows giving NaN.
     * Counted for O, LSE and dQ (Q-like rows with no visible key), never for dK/dV.
     * masked_rows_lse_posinf: LSE rows giving +inf (FlashAttention 2's non-split kernels
     * write +inf there); accepted like -inf and also counted in masked_rows_zero. */
    size_t masked_rows, masked_rows_zero, masked_rows_nan, masked_rows_lse_posinf;

    /* Set by the gate (gate.h): the budgets this case was judged by, and what failed. */
    double budget_scaled; /* grown with length where the budget says so */
    double budget_vs_naive_mean; /* 0: off */
    bool vs_naive_applies; /* the problem was large enough for the mean check */
    unsigned failed; /* AC_FAILED_* and 1u << ac_special bits; 0: passed */

    /* Set by ac_diagnose on a failing output: where its elements over budget are
     * (an element is over when it is special or its scaled error exceeds budget_scaled). */
    size_t n_over;
    size_t over_per_head[AC_DIAG_MAX_HEADS]; /* query heads (dK, dV: KV heads) */
    int n_heads; /* heads in the output; only the first AC_DIAG_MAX_HEADS counted */
    int n_rows_over, first_row_over, last_row_over;
    ac_row_count rows_over[AC_DIAG_MAX_ROWS]; /* the first n_rows_listed rows over budget, ascending */
    int n_rows_listed;
    char hint[AC_HINT_LEN]; /* computed hints, "" when none fits */
} ac_metrics;

/* The special-value classes, each counted on its own before any magnitude, in
 * the gate's order; the name is the class half of a failure kind ("O:overflow"). */
typedef enum {
    AC_SPECIAL_UNWRITTEN = 0,
    AC_SPECIAL_UNEXPECTED_NAN,
    AC_SPECIAL_OVERFLOW,
    AC_SPECIAL_LOST,
    AC_SPECIAL_WRONG_ZERO,
    AC_SPECIAL_COUNT
} ac_special;
const char *ac_special_name(ac_special s); /* "unwritten", "unexpected-nan", ... */
size_t ac_metrics_special(const ac_metrics *m, ac_special s); /* the count of one class */
size_t ac_metrics_specials(const ac_metrics *m); /* of all of them */

/* Poison: fills n elements with ac_dtype_poison(t) (the dtype table's NaN
 * pattern, see ref.h), so a surviving one means "never written". */
void ac_poison(ac_dtype t, void *buf, size_t n);
void ac_poison_f32(float *buf, size_t n);
bool ac_is_poison(ac_dtype t, const void *buf, size_t i);

/* Compare one output of a kernel with the reference over the non-padding
 * elements (rows i < nq_b; for dK/dV keys j < nk_b; dBias's entries some
 * sequence has; dSink's Hq values).  got: dtype bits (float
 * for LSE), ref/escale/naive: doubles, Q-like / K-like / LSE-shaped as the
 * output is; naive may be NULL.  Per element, in this order (SLEEF-style, a
 * special class is counted instead of a magnitude):
 *   unwritten      got is the poison pattern;
 *   lost-special   ref is NaN/+-Inf and got differs (LSE -inf of a row with no
 *                  visible key: +-inf accepted, see masked_rows_lse_posinf);
 *   unexpected-nan got NaN, ref finite;   overflow: got +-Inf, ref finite;
 *   wrong-zero     E == 0 (ref is an exact zero) and got != 0, or got == 0 and
 *                  |ref| > AC_WRONG_ZERO_SCALED * u * E (a zero no rounding explains);
 *                  the latter still enters the magnitudes.
 * Magnitudes: ulp = |y - x| / ac_ulp(dtype, x), scaled = |y - x| / (u * E),
 * abs = |y - x|; LSE uses f32's ulp and u whatever the dtype.  Means are over
 * the elements in the magnitudes; the first maximum wins ties. */
#define AC_WRONG_ZERO_SCALED 1000.0
void ac_compare(const ac_inputs *in, ac_output which, const void *got, const double *ref, const double *escale,
                const double *naive, ac_metrics *m);
/* Counts the elements of one output over limit (scaled error above it, or
 * special), per head and per row, into m's n_over .. rows_over (the other
 * fields untouched).  Same arguments as ac_compare.  AC_ERR_ENV when the row
 * counts cannot be allocated.  Rows are query rows (dK, dV: keys; dBias: its
 * rows i); dSink counts per head only. */
int ac_compare_count_over(const ac_inputs *in, ac_output which, const void *got, const double *ref,
                          const double *escale, double limit, ac_metrics *m, ac_err *err);
/* The dtype whose ulp and unit roundoff output `which` is measured in: t, or
 * f32 for LSE and dSink (stored in f32; dSink's E is in f32 units). */
ac_dtype ac_output_dtype(ac_dtype t, ac_output which);

#endif
