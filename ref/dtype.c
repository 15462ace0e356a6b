/* ref/dtype.c — f32, f16, bf16 and the OCP fp8 formats e4m3 (FN) and e5m2:
 * exact widening, round-to-nearest-even narrowing with subnormals, and the ulp
 * of a value's binade.
 *
 * Narrowing goes straight from double to the target format (never through
 * float for bf16/f16: rounding twice can miss the nearest value).  A format is
 * described by its precision p (significand bits, hidden bit included) and
 * its exponent range.  fp8 narrowing is the OCP 8-bit spec's saturating mode
 * ("satfinite", CUDA's __NV_SATFINITE, what quantisers and kernels use): RNE,
 * then any magnitude past the largest finite value, Inf included, becomes
 * +-max (448 for e4m3, 57344 for e5m2); NaN stays NaN.  e4m3 has no Inf and
 * one NaN code per sign (S.1111.111): its S.1111.000-110 are finite (256..448).
 * The table also holds each format's storage width (ac_bits_get/_put are the
 * only code that reads or writes dtype storage), its poison pattern and the
 * dtype its kernels write outputs in. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ref.h"

typedef struct {
    const char *name;
    size_t size; /* bytes */
    int precision; /* p, with the hidden bit */
    int emin, emax; /* exponents of the smallest and largest normal binades */
    double max_finite;
    uint32_t poison; /* see ref.h: a NaN payload no arithmetic produces */
    ac_dtype output; /* what its kernels write O, dQ, dK, dV in */
} dtype_format;

static const dtype_format formats[AC_DTYPE_COUNT] = {
    [AC_F32] = {"f32", 4, 24, -126, 127, 0x1.fffffep127, 0x7FC0DEADu, AC_F32},
    [AC_F16] = {"f16", 2, 11, -14, 15, 65504.0, 0x7E5Au, AC_F16},
    [AC_BF16] = {"bf16", 2, 8, -126, 127, 0x1.fep127, 0x7FDAu, AC_BF16},
    /* fp8 is never an output (its kernels write bf16 or f16, whose poison the
     * outputs get); the row's poison is its negative NaN for completeness. */
    [AC_E4M3] = {"e4m3", 1, 4, -6, 8, 448.0, 0xFFu, AC_BF16},
    [AC_E5M2] = {"e5m2", 1, 3, -14, 15, 57344.0, 0xFFu, AC_BF16},
};

bool ac_dtype_is_fp8(ac_dtype t) { return t == AC_E4M3 || t == AC_E5M2; }

const char *ac_dtype_name(ac_dtype t) { return t < AC_DTYPE_COUNT ? formats[t].name : "?"; }
uint32_t ac_dtype_poison(ac_dtype t) { return formats[t].poison; }
ac_dtype ac_dtype_output(ac_dtype t) { return formats[t].output; }
size_t ac_dtype_size(ac_dtype t) { return formats[t].size; }
int ac_dtype_precision(ac_dtype t) { return formats[t].precision; }
double ac_unit_roundoff(ac_dtype t) { return ldexp(1.0, -formats[t].precision); }
double ac_max_finite(ac_dtype t) { return formats[t].max_finite; }

double ac_min_subnormal(ac_dtype t) { return ldexp(1.0, formats[t].emin - (formats[t].precision - 1)); }

int ac_dtype_parse(const char *name, ac_dtype *out)
{
    for (int t = 0; t < AC_DTYPE_COUNT; t++) {
        if (name && strcmp(name, formats[t].name) == 0) {
            *out = (ac_dtype)t;
            return AC_OK;
        }
    }
    return AC_ERR_INPUT;
}

void ac_dtype_list(char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int t = 0; t < AC_DTYPE_COUNT && at < len; t++)
        at += (size_t)snprintf(buf + at, len - at, "%s%s", t ? ", " : "", formats[t].name);
}

static double f32_from_bits(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static uint32_t f32_to_bits(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return bits;
}

static double f16_from_bits(uint32_t bits)
{
    double sign = (bits & 0x8000u) ? -1.0 : 1.0;
    int exp_field = (int)((bits >> 10) & 0x1fu);
    int mant = (int)(bits & 0x3ffu);
    if (exp_field == 0x1f)
        return mant ? NAN : sign * INFINITY;
    if (exp_field == 0)
        return sign * ldexp(mant, -24);
    return sign * ldexp(1024 + mant, exp_field - 25);
}

/* fp8: sign, exponent field of 8 - p bits, p - 1 mantissa bits, bias 1 - emin. */
static double fp8_from_bits(const dtype_format *f, uint32_t bits)
{
    int mant_bits = f->precision - 1, exp_all = (1 << (7 - mant_bits)) - 1;
    double sign = (bits & 0x80u) ? -1.0 : 1.0;
    int exp_field = (int)((bits >> mant_bits) & (uint32_t)exp_all);
    int mant = (int)(bits & ((1u << mant_bits) - 1));
    if (exp_field == exp_all && f == &formats[AC_E4M3] && mant == (1 << mant_bits) - 1)
        return NAN; /* e4m3 FN: only S.1111.111 is NaN, the rest of the top binade is finite */
    if (exp_field == exp_all && f != &formats[AC_E4M3])
        return mant ? NAN : sign * INFINITY;
    if (exp_field == 0)
        return sign * ldexp(mant, f->emin - mant_bits);
    return sign * ldexp((1 << mant_bits) + mant, exp_field + f->emin - 1 - mant_bits);
}

double ac_widen(ac_dtype t, uint32_t bits)
{
    switch (t) {
    case AC_F32:
        return f32_from_bits(bits);
    case AC_F16:
        return f16_from_bits(bits);
    case AC_BF16:
        return f32_from_bits((bits & 0xffffu) << 16);
    case AC_E4M3:
    case AC_E5M2:
        return fp8_from_bits(&formats[t], bits & 0xffu);
    default:
        return NAN;
    }
}

/* Rounds a finite |x| to the format's grid, ties to even: the quantum of x's
 * binade (floored at the subnormal spacing) divides x exactly, so rint() of
 * the quotient is the one rounding.  May return a value past max_finite. */
static double round_magnitude(const dtype_format *f, double a)
{
    if (a == 0.0)
        return 0.0;
    int e = ilogb(a);
    if (e < f->emin)
        e = f->emin;
    double quantum = ldexp(1.0, e - (f->precision - 1));
    return rint(a / quantum) * quantum;
}

static uint32_t f16_encode(double r, int negative)
{
    uint32_t sign = negative ? 0x8000u : 0;
    if (r > 65504.0)
        return sign | 0x7c00u;
    if (r < 0x1p-14)
        return sign | (uint32_t)(r * 0x1p24); /* subnormal or zero: exact */
    int e = ilogb(r);
    uint32_t mant = (uint32_t)(ldexp(r, 10 - e) - 1024.0);
    return sign | (uint32_t)(e + 15) << 10 | mant;
}

/* r: a magnitude on the format's grid, at most max_finite. */
static uint32_t fp8_encode(const dtype_format *f, double r, int negative)
{
    int mant_bits = f->precision - 1;
    uint32_t sign = negative ? 0x80u : 0;
    if (r < ldexp(1.0, f->emin)) /* subnormal or zero: exact */
        return sign | (uint32_t)ldexp(r, mant_bits - f->emin);
    int e = ilogb(r);
    uint32_t mant = (uint32_t)(ldexp(r, mant_bits - e) - ldexp(1.0, mant_bits));
    return sign | (uint32_t)(e - f->emin + 1) << mant_bits | mant;
}

uint32_t ac_narrow(ac_dtype t, double x)
{
    if (t == AC_F32)
        return f32_to_bits((float)x); /* the hardware conversion is RNE */
    int negative = signbit(x) != 0;
    if (isnan(x))
        return t == AC_F16 ? 0x7e00u : ac_dtype_is_fp8(t) ? 0x7fu : 0x7fc0u;
    const dtype_format *f = &formats[t];
    double r = isinf(x) ? INFINITY : round_magnitude(f, fabs(x));
    if (ac_dtype_is_fp8(t)) /* satfinite: overflow, Inf included, saturates */
        return fp8_encode(f, r > f->max_finite ? f->max_finite : r, negative);
    if (t == AC_F16)
        return f16_encode(r, negative);
    /* bf16: r is exact in f32 (or overflows to Inf there as here) */
    float rf = r > f->max_finite ? INFINITY : (float)r;
    return (f32_to_bits(negative ? -rf : rf) >> 16) & 0xffffu;
}

double ac_round(ac_dtype t, double x) { return ac_widen(t, ac_narrow(t, x)); }

double ac_ulp(ac_dtype t, double x)
{
    if (!isfinite(x))
        return NAN;
    const dtype_format *f = &formats[t];
    double a = fabs(x);
    int e = a == 0.0 ? f->emin : ilogb(a);
    if (e < f->emin)
        e = f->emin;
    if (e > f->emax)
        e = f->emax;
    return ldexp(1.0, e - (f->precision - 1));
}

/* ---- storage ------------------------------------------------------------- */

uint32_t ac_bits_get(ac_dtype t, const void *buf, size_t i)
{
    switch (formats[t].size) {
    case 1:
        return ((const uint8_t *)buf)[i];
    case 2:
        return ((const uint16_t *)buf)[i];
    default:
        return ((const uint32_t *)buf)[i];
    }
}

void ac_bits_put(ac_dtype t, void *buf, size_t i, uint32_t bits)
{
    switch (formats[t].size) {
    case 1:
        ((uint8_t *)buf)[i] = (uint8_t)bits;
        break;
    case 2:
        ((uint16_t *)buf)[i] = (uint16_t)bits;
        break;
    default:
        ((uint32_t *)buf)[i] = bits;
        break;
    }
}

void ac_load(ac_dtype t, const void *buf, size_t n, double *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = ac_widen(t, ac_bits_get(t, buf, i));
}

void ac_store(ac_dtype t, const double *in, size_t n, void *buf)
{
    for (size_t i = 0; i < n; i++)
        ac_bits_put(t, buf, i, ac_narrow(t, in[i]));
}
