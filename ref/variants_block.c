/* ref/variants_block.c — the variants on blocks of the fp64 stages: the score
 * modifiers applied to a score block (forward, backward, error scales). */
#include <math.h>

#include "variants_internal.h"

void ref_block_mods(const ref_head *hd, int i0, int i1, int jlo, int jhi, double *s, const ref_mod_aux *aux)
{
    const ac_problem *p = hd->p;
    int cols = jhi - jlo;
    double c = p->softcap;
    for (int i = i0; i < i1; i++) {
        double *row = s + (size_t)(i - i0) * cols;
        for (int j = jlo; j < jhi; j++) {
            size_t at = (size_t)(i - i0) * cols + (size_t)(j - jlo);
            double raw = row[j - jlo], slope = ac_score_mod_slope(p, raw);
            double cap = c != 0.0 ? c * tanh(raw / c) : raw; /* T */
            double alibi = ac_alibi_bias(p, hd->b, hd->h, i, j), bias = ac_bias_at(p, hd->b, hd->h, i, j);
            double mod = row[j - jlo] = ac_score_mod(p, hd->b, hd->h, i, j, raw);
            if (!aux)
                continue;
            if (aux->slope)
                aux->slope[at] = slope;
            /* softcap 4|T|; ALiBi: slope x distance rounds (|A|) and so does S - A (|S'|), twice each
             * (FlashAttention adds it to the unscaled score); a bias: the same with |bias| for |A|;
             * a -inf bias hides the pair: no error */
            if (aux->sigma)
                aux->sigma[at] = mod == -INFINITY ? 0.0
                                                  : (c != 0.0 ? 4.0 * fabs(cap) : 0.0) +
                        (alibi != 0.0 || bias != 0.0 ? 2.0 * (fabs(alibi) + fabs(bias)) + 2.0 * fabs(mod) : 0.0);
            if (aux->curv)
                aux->curv[at] = c != 0.0 ? 2.0 * fabs(cap) * slope / (c * c) : 0.0;
        }
    }
}

void ref_block_dropout(const ref_head *hd, int i0, int i1, int jlo, int jhi, double *x)
{
    const ac_problem *p = hd->p;
    if (p->dropout_p == 0.0)
        return;
    int cols = jhi - jlo;
    for (int i = i0; i < i1; i++)
        for (int j = jlo; j < jhi; j++)
            x[(size_t)(i - i0) * cols + (j - jlo)] *= ac_dropout_factor(p, hd->b, hd->h, i, j);
}
