/* harness/run/inputs_variants.h — internal to harness/run/: the variants of a
 * case made concrete (inputs_variants.c), called by inputs.c.  The variant
 * fields of the problem come from the case; the arrays they point at (ALiBi
 * slopes, the bias, the sinks, cu_seqlens) are drawn from the case seed, each
 * from its own stream, like the tensors. */
#ifndef ATTNCHECK_INPUTS_VARIANTS_H
#define ATTNCHECK_INPUTS_VARIANTS_H

#include "harness/run/inputs.h"

/* The problem's scalar variant fields from the case. */
void inputs_variants_problem(const ac_case *c, ac_problem *p);
/* THD: in->cu_seqlens_q/_k from the case's lengths (the full extent where the
 * case gives none), p pointing at them; nothing for the padded layouts. */
int inputs_variants_layout(ac_inputs *in, ac_err *err);
/* The variants' arrays, drawn once Q, K, V are (in->p points at them after). */
int inputs_variants_draw(ac_inputs *in, ac_err *err);
/* v=k (the problem's v_from_k): V's stored rows become K's first d_v channels. */
void inputs_v_from_k(ac_inputs *in);
/* Frees what inputs_variants_draw allocated. */
void inputs_variants_free(ac_inputs *in);

#endif
