/* ref/naive_mods.h — internal to ref/: the variants in the same-dtype naive
 * baseline, written once for the blocked implementation (naive.c,
 * naive_backward.c) and its scalar oracle (naive_scalar.c), so the two agree
 * bit for bit by construction.
 *
 * What a framework does in dtype t, every step in float and rounded to t
 * (round_t) once:
 *   softcap c:  T = round_t(c tanhf(S / c)), S the rounded scaled score;
 *   ALiBi:      S' = round_t(T - round_t(slope |i + nk - nq - j|)), the bias
 *               materialised in the dtype as frameworks build it;
 *   bias:       S' = round_t(S' + round_t(bias)) (a -inf entry is a hidden pair);
 *   dropout:    P' = round_t(P f) where kept, f = (float)(1 / (1 - p)), 0 where dropped,
 *               for O and dV; dP' likewise in dS = round_t(P (dP' - D));
 *   backward:   dS = round_t(dS' (1 - (T / c)^2)), dS' = round_t(P (dP - D));
 *   sinks:      m = max(max_j S'_ij, s_h), l = sum_j expf(S' - m) + expf(s_h - m).
 * The result is the score S' the softmax sees; *slope (may be NULL) gets
 * dS'/dS as the backward multiplies by it. */
#ifndef ATTNCHECK_REF_NAIVE_MODS_H
#define ATTNCHECK_REF_NAIVE_MODS_H

#include <math.h>

#include "ref.h"
#include "round_float.h"

static inline float naive_score_mod(const ac_problem *p, ac_dtype t, int b, int h, int i, int j, float s, float *slope)
{
    float cap_slope = 1.0f;
    if (p->softcap != 0.0) {
        float c = (float)p->softcap;
        s = rf_round(t, c * tanhf(s / c));
        float y = s / c;
        cap_slope = 1.0f - y * y;
    }
    if (p->alibi_slopes) /* slope x distance is exact in double; one rounding to float, one to t */
        s = rf_round(t, s - rf_round(t, (float)ac_alibi_bias(p, b, h, i, j)));
    if (p->bias) /* the bias as the framework holds it: rounded to t (it is exact when stored in t) */
        s = rf_round(t, s + rf_round(t, (float)ac_bias_at(p, b, h, i, j)));
    if (slope)
        *slope = cap_slope;
    return s;
}

/* Dropout as a framework applies it to a dtype tensor x (P, or dP in the
 * backward): kept entries round_t(x f), f = (float)(1 / (1 - p)); dropped 0. */
static inline float naive_drop(const ac_problem *p, ac_dtype t, int b, int h, int i, int j, float x)
{
    if (p->dropout_p == 0.0)
        return x;
    if (!p->dropout_keep[ac_dropout_index(p, b, h, i, j)])
        return 0.0f;
    return rf_round(t, x * (float)(1.0 / (1.0 - p->dropout_p)));
}

/* A -inf bias entry hides its pair, as a mask would (ac_visible). */
static inline bool naive_bias_hides(const ac_problem *p, int b, int h, int i, int j)
{
    return p->bias && ac_bias_at(p, b, h, i, j) == -INFINITY;
}

/* Sinks: head h's logit as a float (exact: the sinks are f32), -inf without;
 * it joins the row's max, and its term expf(sink - m) is added to l after the
 * keys' (0 without). */
static inline float naive_sink(const ac_problem *p, int h) { return p->sinks ? p->sinks[h] : -INFINITY; }
static inline float naive_sink_term(float sink, float m) { return sink == -INFINITY ? 0.0f : expf(sink - m); }

#endif
