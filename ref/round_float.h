/* ref/round_float.h — internal to ref/: a float rounded to a dtype's nearest
 * value (ties to even), the rounding the naive baseline applies between its
 * products, millions of times per case.  Same results as
 * (float)ac_round(t, x) for every float x (test_naive.c checks them against
 * each other), without the detour through double and the generic format
 * table: bit operations on the float's encoding.
 *   bf16 is the top half of an f32: round the low 16 bits away.
 *   f16 normal range (|x| >= 2^-14): round the low 13 significand bits away,
 *     then anything above 65504 is an overflow to +-inf.
 *   f16 subnormals (|x| < 2^-14, spacing 2^-24): (|x| + 1/2) - 1/2, since the
 *     floats in [1/2, 1) are spaced 2^-24 and the addition rounds to even. */
#ifndef ATTNCHECK_REF_ROUND_FLOAT_H
#define ATTNCHECK_REF_ROUND_FLOAT_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ref.h"

static inline uint32_t rf_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float rf_float(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Round away the low `drop` bits of x's encoding, to nearest, ties to even. */
static inline float rf_round_low_bits(float x, int drop)
{
    uint32_t u = rf_bits(x), half = (1u << (drop - 1)) - 1u;
    u += half + ((u >> drop) & 1u);
    return rf_float(u & ~((1u << drop) - 1u));
}

static inline float rf_round_bf16(float x) { return isnan(x) ? x : rf_round_low_bits(x, 16); }

static inline float rf_round_f16(float x)
{
    float mag = fabsf(x);
    if (isnan(x))
        return x;
    if (mag < 0x1p-14f) {
        volatile float half = 0.5f; /* keeps the compiler from folding (a + h) - h */
        return copysignf((mag + half) - half, x);
    }
    float r = rf_round_low_bits(x, 13);
    return fabsf(r) > 65504.0f ? copysignf(INFINITY, x) : r;
}

static inline float rf_round(ac_dtype t, float x)
{
    switch (t) {
    case AC_BF16:
        return rf_round_bf16(x);
    case AC_F16:
        return rf_round_f16(x);
    default:
        return x; /* f32: the identity */
    }
}

#endif
