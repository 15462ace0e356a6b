/* harness/verdict/compare_internal.h — internal to harness/verdict: the
 * comparator's parts shared by compare.c (one element, one row, partials)
 * and compare_walk.c (the walk in tasks), and the comparator with its thread
 * count and task size given, for the tests. */
#ifndef ATTNCHECK_COMPARE_INTERNAL_H
#define ATTNCHECK_COMPARE_INTERNAL_H

#include "harness/verdict/compare.h"

/* What every element of one comparison is judged with. */
typedef struct {
    ac_dtype t; /* the dtype of the stored output (f32 for LSE and dSink, the bias's for dBias) */
    double u; /* its unit roundoff */
    bool is_lse;
    ac_tensor_kind kind; /* the output's shape: Q (dQ), K (dK), V (dV, d_v columns), O (O, d_v columns) */
    double min_normal; /* of the stored dtype: the means below skip elements under it */
    /* counting mode (ac_compare_count_over): elements over limit go to `over` */
    ac_metrics *over;
    double limit;
    size_t *row_counts; /* per query row (key for dK/dV) */
} cmp_judge;

/* What one task of the walk finds; tasks are merged in walk order (cmp_merge). */
typedef struct {
    double max_ulp, max_scaled, max_abs, naive_max_abs;
    ac_where at_max_ulp, at_max_scaled;
    double worst_ref, worst_got, worst_escale; /* at at_max_scaled */
    size_t n_unwritten, n_unexpected_nan, n_overflow, n_lost_special, n_wrong_zero;
    ac_where first_special;
    double special_ref, special_got;
    size_t masked_rows, masked_rows_zero, masked_rows_nan, masked_rows_lse_posinf;
    double sum_ulp, sum_abs, sum_naive_abs, sum_escale;
    double sum_sq, sum_naive_sq; /* squared errors over every magnitude (the RMSE's) */
    size_t n_mag; /* elements in the magnitudes */
    size_t n_mean; /* ...of which in the means: |reference| >= min_normal */
} cmp_partial;

/* An output under comparison: the kernel's bits, the reference, its scale, the naive values. */
typedef struct {
    const void *got;
    const double *ref, *escale, *naive;
} cmp_tensors;

/* ---- compare.c ---- */
void cmp_partial_init(cmp_partial *pt);
/* into += from, from being the next task in walk order (first place kept on ties). */
void cmp_merge(cmp_partial *into, const cmp_partial *from);
void cmp_finish(const cmp_partial *pt, ac_metrics *m);
ac_tensor_kind cmp_output_kind(ac_output which); /* O: O (d_v columns), dK: K, dV: V, else Q */
cmp_judge cmp_judge_for(const ac_inputs *in, ac_output which);
/* One row of the walk into pt: query row i of (b, h) of a Q-like output or LSE,
 * key j of (b, h_kv) of dK/dV, row i of dBias slice (mb, mh), query head h of dSink. */
void cmp_q_row(const cmp_judge *a, cmp_partial *pt, const ac_problem *p, const cmp_tensors *tn, int b, int h, int i);
void cmp_k_row(const cmp_judge *a, cmp_partial *pt, const ac_problem *p, const cmp_tensors *tn, int b, int h_kv, int j);
void cmp_bias_row(const cmp_judge *a, cmp_partial *pt, const ac_problem *p, const cmp_tensors *tn, int mb, int mh,
                  int i);
void cmp_head(const cmp_judge *a, cmp_partial *pt, const cmp_tensors *tn, int h);
/* dBias row i of slice mb: the keys some sequence it covers has (0: padding of every one). */
int cmp_bias_row_keys(const ac_problem *p, int mb, int i);

/* ---- compare_walk.c ----
 * ac_compare on `workers` threads (ac_compare takes ref_thread_count's, fewer
 * for small outputs), with rows_per_task rows of one (b, h) a task (0: the
 * default, about 32768 elements).  The metrics depend on rows_per_task only
 * through the last bits of the means, never on workers. */
void compare_with(const ac_inputs *in, ac_output which, const void *got, const double *ref, const double *escale,
                  const double *naive, int workers, int rows_per_task, ac_metrics *m);

#endif
