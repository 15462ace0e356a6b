/* ref/naive_mods.h — internal to ref/: the variants in the same-dtype naive
 * baseline, written once for the blocked implementation (naive.c,
 * naive_backward.c) and its scalar oracle (naive_scalar.c), so the two agree
 * bit for bit by construction.
 *
 * What a framework does in dtype t, every step in float and rounded to t
 * (round_t) once:
 *   softcap c:  T = round_t(c tanhf(S / c)), S the rounded scaled score;
 *   backward:   dS = round_t(dS' (1 - (T / c)^2)), dS' = round_t(P (dP - D)).
 * The result is the score S' the softmax sees; *slope (may be NULL) gets
 * dS'/dS as the backward multiplies by it. */
#ifndef ATTNCHECK_REF_NAIVE_MODS_H
#define ATTNCHECK_REF_NAIVE_MODS_H

#include <math.h>

#include "ref.h"
#include "round_float.h"

static inline float naive_score_mod(const ac_problem *p, ac_dtype t, int b, int h, int i, int j, float s,
                                    float *slope)
{
    (void)b, (void)h, (void)i, (void)j;
    float cap_slope = 1.0f;
    if (p->softcap != 0.0) {
        float c = (float)p->softcap;
        s = rf_round(t, c * tanhf(s / c));
        float y = s / c;
        cap_slope = 1.0f - y * y;
    }
    if (slope)
        *slope = cap_slope;
    return s;
}

#endif
