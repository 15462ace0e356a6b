/* ref/variants_internal.h — internal to ref/: the variants' pieces the fp64
 * stages share (ref/variants.c, ref/variants_block.c).  Not part of the
 * public interface. */
#ifndef ATTNCHECK_REF_VARIANTS_INTERNAL_H
#define ATTNCHECK_REF_VARIANTS_INTERNAL_H

#include "fp64_block.h"
#include "ref.h"

/* The variant fields of p: AC_OK or AC_ERR_INPUT naming the field. */
int ref_variants_validate(const ac_problem *p, ac_err *err);

/* The paged fields and num_splits (ref/paged.c): AC_OK or AC_ERR_INPUT naming the field. */
int ref_paged_validate(const ac_problem *p, ac_err *err);

/* AC_ERR_INPUT naming who when the problem drops out without a keep mask. */
int ref_dropout_check(const ac_problem *p, const char *who, ac_err *err);

/* Dropout on a block of rows [i0, i1) x keys [jlo, jhi) of one head, in place:
 * x *= ac_dropout_factor (nothing without dropout). */
void ref_block_dropout(const ref_head *hd, int i0, int i1, int jlo, int jhi, double *x);

/* Head h's sink logit, -inf without sinks (exp(-inf) = 0 joins no denominator). */
double ref_sink_of(const ac_problem *p, int h);

/* What the error scales need of a score block besides S', each (rows, cols)
 * like it, or NULL when not wanted:
 *   slope  dS'/dS (softcap: t' = 1 - tanh^2(S / c); else 1);
 *   sigma  the modifiers' own f32 rounding, in units of u_f32 on S': softcap
 *          4 |T| (S / c, tanh, times c: T = c tanh(S / c)); ALiBi 2 |A| + 2 |S'|
 *          (A = slope x distance and S' = T - A each round, FlashAttention's way
 *          through the unscaled score twice);
 *   curv   |dt'/dS| / t'-free: 2 |T| t' / c^2 (softcap; else 0), how fast the
 *          kernel's t' moves with its S error. */
struct ref_mod_aux {
    double *slope, *sigma, *curv;
};

/* A block of scaled scores S (rows [i0, i1), keys [jlo, jhi), row stride
 * jhi - jlo) of one head, in place into S' = ac_score_mod; aux (may be NULL)
 * gets what it asks for. */
void ref_block_mods(const ref_head *hd, int i0, int i1, int jlo, int jhi, double *s, const ref_mod_aux *aux);

#endif
