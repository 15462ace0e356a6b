/* harness/verdict/diagnose.h — verdicts that diagnose: after the gate failed a
 * case, where the bad elements are and which usual mistake the numbers fit.
 *
 * For every failing output: its elements over budget (special, or scaled error
 * above the budget) counted per head and per row (ac_metrics.n_over ..).
 * Then hints, each computed by re-checking the kernel's output under the
 * alternative, never guessed; a hint is given only when the output passes
 * its budget there:
 *   layout     O, dQ (dK, dV) read in the other layout (bshd for bhsd);
 *   LSE base   LSE x ln 2 (the kernel wrote log2), or LSE / ln 2;
 *   scale      O of the reference with another softmax scale: 1, the default
 *              1/sqrt(d), scale^2, scale x log2(e), scale x ln 2, 1/d;
 *   alignment  O of the reference with the window aligned the other way
 *              (causal-tl for causal-br), where some sequence has Nq != Nk;
 *   gradients  dQ, dK equal to the reference x scale or x 1/scale (the scale
 *              applied twice, or not at all, in the backward).
 * Each output's hints go to ac_metrics.hint, and with the counts to why
 * ("; O over budget: ...; hint: ..."). */
#ifndef ATTNCHECK_DIAGNOSE_H
#define ATTNCHECK_DIAGNOSE_H

#include <stddef.h>

#include "harness/run/inputs.h"
#include "harness/run/reference.h"
#include "harness/verdict/compare.h"

/* got: the kernel's outputs (dtype bits; LSE float), NULL where not compared.
 * m: the metrics after ac_gate (its failed and budget fields).  AC_OK, or
 * AC_ERR_ENV when memory runs out (the verdict stands; only the diagnosis is lost). */
int ac_diagnose(const ac_inputs *in, const ac_reference *ref, const void *const got[AC_OUT_COUNT],
                ac_metrics m[AC_OUT_COUNT], char *why, size_t why_len, ac_err *err);

#endif
