/* harness/verdict/gate.h — the gate: one case's metrics and the budgets give
 * a verdict.  Outputs are judged forward first, O, LSE, then dQ, dK, dV (the
 * earliest failing output is usually the cause), and each output in this order:
 *   1. special classes (unwritten, unexpected-nan, overflow, lost-special,
 *      wrong-zero): any count > 0 fails;
 *   2. max scaled error against the (grown) budget ("O:scaled");
 *   3. the mean vs-naive ratio, where the naive mean means something
 *      ("O:vs-naive-mean").
 * The first failure in that order is the case's one stable signature ("kind",
 * OUTPUT:class) the shrinker requires to persist; why names it (with the
 * expected and actual values and the error scale at its element) and then
 * lists every other failing output and class.  Each output's metrics get the
 * budgets applied and its failing classes (ac_metrics.failed). */
#ifndef ATTNCHECK_GATE_H
#define ATTNCHECK_GATE_H

#include <stdbool.h>
#include <stddef.h>

#include "harness/run/inputs.h"
#include "harness/verdict/budget.h"
#include "harness/verdict/compare.h"

/* The vs-naive-mean check applies only with at least AC_VS_NAIVE_MIN_ELEMS elements,
 * AC_VS_NAIVE_MIN_ROWS query rows and as many keys (all heads and sequences), and a
 * naive mean error >= u * mean(E) / AC_VS_NAIVE_FLOOR_DIV (else the naive is ~exact
 * and a ratio says nothing).  A mean over a handful of rows or keys is too noisy
 * for a 1.5x ratio (correct kernels read 1.67x over 100 dQ elements of 2 query
 * rows, 2.57x over the 1029 dK elements of one query row); small problems are
 * judged by the max scaled error alone.  The elements counted are those in the
 * means: references at least the smallest normal (ac_metrics.n_mean). */
#define AC_VS_NAIVE_MIN_ELEMS 1024
#define AC_VS_NAIVE_MIN_ROWS 32
#define AC_VS_NAIVE_FLOOR_DIV 64.0

/* Room for a verdict's reason (why) and its signature (kind). */
#define AC_WHY_LEN 1024
#define AC_KIND_LEN 64

typedef enum { AC_VERDICT_PASS = 0, AC_VERDICT_FAIL = 1, AC_VERDICT_ERROR = 2 } ac_verdict;

/* Fills why (which budget, by how much, where; then every other failure) on
 * failure, and kind, the first failure's signature; on a pass why and kind are "".
 * Sets the budget_*, vs_naive_applies and failed fields of every output's metrics. */
ac_verdict ac_gate(const ac_inputs *in, ac_metrics m[AC_OUT_COUNT], const ac_budgets *b, char *why, size_t why_len,
                   char *kind, size_t kind_len);
/* A reference that was checked against MPFR and missed (rows_checked > 0, not
 * certified) is not a kernel failure, but must be said: appends "; reference not
 * certified: ..." to why and returns true.  false (why untouched) otherwise. */
bool ac_cert_note(const ac_cert *cert, char *why, size_t why_len);

#endif
