/* ref/test_dtype.c — dtypes against MPFR: every f16 and bf16 bit pattern.
 *
 * Widening is checked against a value built in MPFR from the sign, exponent
 * and mantissa fields (not through ac_widen); narrowing against MPFR's own
 * rounding emulating each format (mpfr_set_d at the format's precision, then
 * mpfr_check_range and mpfr_subnormalize in its exponent range), on every
 * halfway point between neighbours and on random doubles over the whole
 * range; ulp and the format constants against values written by hand. */
#include <criterion/criterion.h>
#include <math.h>
#include <mpfr.h>
#include <string.h>

#include "ref/ref.h"

/* IEEE-style layout of each format: exponent and mantissa field widths. */
typedef struct {
    ac_dtype t;
    int exp_bits, mant_bits; /* f16: 5, 10; bf16: 8, 7; f32: 8, 23 */
} fmt;

static const fmt F16 = {AC_F16, 5, 10}, BF16 = {AC_BF16, 8, 7}, F32 = {AC_F32, 8, 23};

static int bias(const fmt *f) { return (1 << (f->exp_bits - 1)) - 1; }
static uint32_t exp_mask(const fmt *f) { return (1u << f->exp_bits) - 1; }

/* The exact value of a bit pattern, built from its fields in MPFR. Returns
 * 0 finite, 1 Inf, 2 NaN. */
static int exact_value(const fmt *f, uint32_t bits, mpfr_t x)
{
    uint32_t sign = bits >> (f->exp_bits + f->mant_bits) & 1u;
    uint32_t e = bits >> f->mant_bits & exp_mask(f);
    uint32_t m = bits & ((1u << f->mant_bits) - 1);
    if (e == exp_mask(f))
        return m ? 2 : 1;
    /* subnormal: m * 2^(1 - bias - mant_bits); normal: (2^mant_bits + m) * 2^(e - bias - mant_bits) */
    mpfr_set_ui(x, e ? (1u << f->mant_bits) + m : m, MPFR_RNDN);
    mpfr_mul_2si(x, x, (e ? (long)e : 1L) - bias(f) - f->mant_bits, MPFR_RNDN);
    if (sign)
        mpfr_neg(x, x, MPFR_RNDN);
    return 0;
}

static void check_widening(const fmt *f, uint32_t bits, mpfr_t x)
{
    double w = ac_widen(f->t, bits);
    int kind = exact_value(f, bits, x);
    uint32_t sign = bits >> (f->exp_bits + f->mant_bits) & 1u;
    if (kind == 2) {
        cr_assert(isnan(w), "%s 0x%x: NaN pattern widened to %g", ac_dtype_name(f->t), bits, w);
        return;
    }
    if (kind == 1) {
        cr_assert(isinf(w) && (signbit(w) != 0) == (sign != 0), "%s 0x%x: Inf widened to %g", ac_dtype_name(f->t), bits,
                  w);
        return;
    }
    cr_assert(mpfr_cmp_d(x, w) == 0, "%s 0x%x: widened to %a", ac_dtype_name(f->t), bits, w);
    cr_assert_eq(signbit(w) != 0, sign != 0, "%s 0x%x: sign of zero lost", ac_dtype_name(f->t), bits);
}

Test(ref_dtype, widening_of_every_f16_and_bf16_pattern_is_exact)
{
    mpfr_t x;
    mpfr_init2(x, 64);
    for (uint32_t bits = 0; bits < 65536; bits++) {
        check_widening(&F16, bits, x);
        check_widening(&BF16, bits, x);
    }
    mpfr_clear(x);
}

Test(ref_dtype, widening_of_f32_patterns_is_exact)
{
    mpfr_t x;
    mpfr_init2(x, 64);
    uint64_t s = 5;
    for (int n = 0; n < 100000; n++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        check_widening(&F32, (uint32_t)(s >> 32), x);
    }
    const uint32_t edges[] = {0, 1, 0x007fffff, 0x00800000, 0x7f7fffff, 0x7f800000, 0x7fc00000, 0x80000001, 0xff800000};
    for (size_t i = 0; i < sizeof edges / sizeof *edges; i++)
        check_widening(&F32, edges[i], x);
    mpfr_clear(x);
}

/* Every halfway point between neighbouring finite values (both signs)
 * rounds to the neighbour with the even pattern; a hair above or below
 * rounds to the nearer one; halfway past the largest finite goes to Inf. */
static void check_halfways(const fmt *f)
{
    uint32_t sign_bit = 1u << (f->exp_bits + f->mant_bits);
    uint32_t inf_bits = exp_mask(f) << f->mant_bits;
    for (uint32_t lo = 0; lo + 1 < inf_bits; lo++) {
        for (int neg = 0; neg < 2; neg++) {
            uint32_t sb = neg ? sign_bit : 0, a = lo | sb, b = (lo + 1) | sb;
            double wa = ac_widen(f->t, a), wb = ac_widen(f->t, b);
            double half = 0.5 * (wa + wb); /* exact: one bit more than the format */
            uint32_t even = (lo & 1u) ? b : a;
            cr_assert_eq(ac_narrow(f->t, half), even, "%s: halfway %a between 0x%x and 0x%x", ac_dtype_name(f->t), half,
                         a, b);
            cr_assert_eq(ac_narrow(f->t, nextafter(half, wa)), a, "%s: just below halfway %a", ac_dtype_name(f->t),
                         half);
            cr_assert_eq(ac_narrow(f->t, nextafter(half, wb)), b, "%s: just above halfway %a", ac_dtype_name(f->t),
                         half);
        }
    }
    double max = ac_max_finite(f->t), past = max + 0.5 * ac_ulp(f->t, max);
    cr_assert_eq(ac_narrow(f->t, past), inf_bits, "%s: halfway past max must overflow", ac_dtype_name(f->t));
    cr_assert_eq(ac_narrow(f->t, -past), inf_bits | sign_bit);
    cr_assert_eq(ac_narrow(f->t, nextafter(past, 0.0)), inf_bits - 1, "%s: just below that is max",
                 ac_dtype_name(f->t));
}

Test(ref_dtype, every_halfway_double_rounds_to_even)
{
    check_halfways(&F16);
    check_halfways(&BF16);
}

/* MPFR's rounding to a format: precision p, exponents so that subnormals
 * come out of mpfr_subnormalize (MPFR's exponent is one more than IEEE's). */
static double mpfr_round_to(const fmt *f, double d, mpfr_t x)
{
    int p = f->mant_bits + 1, emin_ieee = 1 - bias(f), emax_ieee = bias(f);
    mpfr_exp_t old_min = mpfr_get_emin(), old_max = mpfr_get_emax();
    mpfr_set_emin(emin_ieee - p + 2);
    mpfr_set_emax(emax_ieee + 1);
    mpfr_set_prec(x, p);
    int inex = mpfr_set_d(x, d, MPFR_RNDN);
    inex = mpfr_check_range(x, inex, MPFR_RNDN);
    mpfr_subnormalize(x, inex, MPFR_RNDN);
    double r = mpfr_get_d(x, MPFR_RNDN);
    mpfr_set_emin(old_min);
    mpfr_set_emax(old_max);
    return r;
}

static void check_random_narrowing(const fmt *f, uint64_t seed)
{
    mpfr_t x;
    mpfr_init2(x, 53);
    int p = f->mant_bits + 1, lo_exp = 1 - bias(f) - p - 3, hi_exp = bias(f) + 3;
    for (int n = 0; n < 100000; n++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t r = seed;
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        int e = lo_exp + (int)((seed >> 33) % (uint64_t)(hi_exp - lo_exp + 1));
        double d = ldexp(1.0 + (double)(r >> 12) * 0x1p-52, e); /* random 53-bit significand */
        if (r & 1)
            d = -d;
        double want = mpfr_round_to(f, d, x), got = ac_round(f->t, d);
        cr_assert(got == want && signbit(got) == signbit(want), "%s: %a rounds to %a, MPFR says %a",
                  ac_dtype_name(f->t), d, got, want);
    }
    mpfr_clear(x);
}

Test(ref_dtype, narrowing_random_doubles_matches_mpfr)
{
    check_random_narrowing(&F16, 1);
    check_random_narrowing(&BF16, 2);
    check_random_narrowing(&F32, 3);
}

Test(ref_dtype, narrowing_special_values)
{
    cr_assert_eq(ac_narrow(AC_F16, INFINITY), 0x7c00u);
    cr_assert_eq(ac_narrow(AC_F16, -INFINITY), 0xfc00u);
    cr_assert_eq(ac_narrow(AC_BF16, INFINITY), 0x7f80u);
    cr_assert_eq(ac_narrow(AC_BF16, -INFINITY), 0xff80u);
    cr_assert_eq(ac_narrow(AC_F16, -0.0), 0x8000u);
    cr_assert_eq(ac_narrow(AC_BF16, -0.0), 0x8000u);
    cr_assert_eq(ac_narrow(AC_F16, 1e-300), 0x0000u, "far below half the smallest subnormal: +0");
    cr_assert_eq(ac_narrow(AC_F16, 1e300), 0x7c00u);
    for (int t = 0; t < AC_DTYPE_COUNT; t++)
        cr_assert(isnan(ac_round((ac_dtype)t, NAN)), "%s: NaN must stay NaN", ac_dtype_name((ac_dtype)t));
    cr_assert_eq(ac_narrow(AC_F16, 0x1p-25), 0x0000u, "half the smallest subnormal ties to even zero");
    cr_assert_eq(ac_narrow(AC_F16, 0x1.8p-24), 0x0002u, "1.5 subnormal ulps ties to even 2");
}

Test(ref_dtype, ulp_at_hand_picked_points)
{
    /* f16: p = 11, normal binades 2^-14 .. 2^15 */
    cr_assert_eq(ac_ulp(AC_F16, 1.0), 0x1p-10);
    cr_assert_eq(ac_ulp(AC_F16, -1.5), 0x1p-10);
    cr_assert_eq(ac_ulp(AC_F16, 65504.0), 32.0);
    cr_assert_eq(ac_ulp(AC_F16, 1e6), 32.0, "beyond max: the last binade's ulp");
    cr_assert_eq(ac_ulp(AC_F16, 0x1p-14), 0x1p-24);
    cr_assert_eq(ac_ulp(AC_F16, 3e-7), 0x1p-24, "subnormal floor");
    cr_assert_eq(ac_ulp(AC_F16, 0.0), 0x1p-24);
    /* bf16: p = 8, normal binades 2^-126 .. 2^127 */
    cr_assert_eq(ac_ulp(AC_BF16, 1.0), 0x1p-7);
    cr_assert_eq(ac_ulp(AC_BF16, 0x1.fep127), 0x1p120);
    cr_assert_eq(ac_ulp(AC_BF16, 0x1p-126), 0x1p-133);
    cr_assert_eq(ac_ulp(AC_BF16, 0x1p-130), 0x1p-133);
    /* f32: p = 24 */
    cr_assert_eq(ac_ulp(AC_F32, 1.0), 0x1p-23);
    cr_assert_eq(ac_ulp(AC_F32, 0x1.fffffep127), 0x1p104);
    cr_assert_eq(ac_ulp(AC_F32, 0x1p-126), 0x1p-149);
    cr_assert_eq(ac_ulp(AC_F32, 0x1p-140), 0x1p-149);
    cr_assert_eq(ac_ulp(AC_F32, 3.0), 0x1p-22);
    cr_assert(isnan(ac_ulp(AC_F32, INFINITY)) && isnan(ac_ulp(AC_F16, NAN)));
}

Test(ref_dtype, format_constants_are_exact)
{
    cr_assert_eq(ac_unit_roundoff(AC_F32), 0x1p-24);
    cr_assert_eq(ac_unit_roundoff(AC_F16), 0x1p-11);
    cr_assert_eq(ac_unit_roundoff(AC_BF16), 0x1p-8);
    cr_assert_eq(ac_min_subnormal(AC_F32), 0x1p-149);
    cr_assert_eq(ac_min_subnormal(AC_F16), 0x1p-24);
    cr_assert_eq(ac_min_subnormal(AC_BF16), 0x1p-133);
    cr_assert_eq(ac_max_finite(AC_F32), 0x1.fffffep127);
    cr_assert_eq(ac_max_finite(AC_F16), 65504.0);
    cr_assert_eq(ac_max_finite(AC_BF16), 0x1.fep127);
    cr_assert_eq(ac_dtype_precision(AC_F32), 24);
    cr_assert_eq(ac_dtype_precision(AC_F16), 11);
    cr_assert_eq(ac_dtype_precision(AC_BF16), 8);
    cr_assert_eq(ac_dtype_size(AC_F32), 4);
    cr_assert_eq(ac_dtype_size(AC_F16), 2);
    cr_assert_eq(ac_dtype_size(AC_BF16), 2);
}

Test(ref_dtype, names_parse_and_print)
{
    const char *names[] = {"f32", "f16", "bf16", "e4m3", "e5m2"};
    for (int t = 0; t < AC_DTYPE_COUNT; t++) {
        ac_dtype got;
        cr_assert_eq(ac_dtype_parse(names[t], &got), AC_OK);
        cr_assert_eq(got, (ac_dtype)t);
        cr_assert_str_eq(ac_dtype_name((ac_dtype)t), names[t]);
    }
    ac_dtype got;
    cr_assert_eq(ac_dtype_parse("fp16", &got), AC_ERR_INPUT);
    cr_assert_eq(ac_dtype_parse("", &got), AC_ERR_INPUT);
    cr_assert_eq(ac_dtype_parse(NULL, &got), AC_ERR_INPUT);
}

/* Every f16/bf16 pattern survives load then store (NaNs stay NaNs). */
Test(ref_dtype, load_store_round_trip)
{
    static uint16_t bits[65536], back[65536];
    static double wide[65536];
    for (uint32_t i = 0; i < 65536; i++)
        bits[i] = (uint16_t)i;
    const ac_dtype ts[] = {AC_F16, AC_BF16};
    for (int k = 0; k < 2; k++) {
        ac_load(ts[k], bits, 65536, wide);
        ac_store(ts[k], wide, 65536, back);
        for (uint32_t i = 0; i < 65536; i++) {
            if (isnan(wide[i]))
                cr_assert(isnan(ac_widen(ts[k], back[i])), "%s 0x%x: NaN lost", ac_dtype_name(ts[k]), i);
            else
                cr_assert_eq(back[i], bits[i], "%s 0x%x came back as 0x%x", ac_dtype_name(ts[k]), i, back[i]);
        }
    }
    uint32_t f[1000], fb[1000];
    double fw[1000];
    uint64_t s = 77;
    for (int i = 0; i < 1000; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        f[i] = (uint32_t)(s >> 32) & 0x7f7fffffu; /* sign and lowest exponent bit cleared: finite */
    }
    ac_load(AC_F32, f, 1000, fw);
    ac_store(AC_F32, fw, 1000, fb);
    cr_assert(memcmp(f, fb, sizeof f) == 0, "f32 patterns must come back unchanged");
}

/* ac_bits_put writes exactly the table's width at element i: the neighbours'
 * bytes stay as they were, and ac_bits_get reads the pattern back. */
Test(ref_dtype, bits_put_writes_one_element_of_the_table_width)
{
    uint64_t s = 2024;
    for (int t = 0; t < AC_DTYPE_COUNT; t++) {
        size_t w = ac_dtype_size((ac_dtype)t);
        for (int trial = 0; trial < 100; trial++) {
            unsigned char buf[16];
            memset(buf, 0xA5, sizeof buf);
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t bits = (uint32_t)(s >> 32) & (uint32_t)(w == 4 ? 0xffffffffu : (1u << (8 * w)) - 1);
            ac_bits_put((ac_dtype)t, buf, 1, bits);
            cr_assert_eq(ac_bits_get((ac_dtype)t, buf, 1), bits, "%s 0x%x", ac_dtype_name((ac_dtype)t), bits);
            for (size_t b = 0; b < sizeof buf; b++)
                if (b < w || b >= 2 * w)
                    cr_assert_eq(buf[b], 0xA5, "%s: byte %zu outside element 1 was written", ac_dtype_name((ac_dtype)t),
                                 b);
        }
    }
}

/* The poison is a NaN, and not the NaN that arithmetic or narrowing gives. */
Test(ref_dtype, poison_is_a_nan_no_arithmetic_produces)
{
    /* fp8's row: its negative NaN (never an output: fp8 kernels write bf16/f16) */
    const uint32_t want[AC_DTYPE_COUNT] = {
        [AC_F32] = 0x7FC0DEADu, [AC_F16] = 0x7E5Au, [AC_BF16] = 0x7FDAu, [AC_E4M3] = 0xFFu, [AC_E5M2] = 0xFFu};
    volatile double zero = 0.0;
    for (int t = 0; t < AC_DTYPE_COUNT; t++) {
        uint32_t p = ac_dtype_poison((ac_dtype)t);
        cr_assert_eq(p, want[t], "%s poison 0x%x", ac_dtype_name((ac_dtype)t), p);
        cr_assert(isnan(ac_widen((ac_dtype)t, p)));
        cr_assert_neq(p, ac_narrow((ac_dtype)t, zero / zero), "%s: 0/0 narrows to the poison",
                      ac_dtype_name((ac_dtype)t));
        cr_assert_neq(p, ac_narrow((ac_dtype)t, NAN));
    }
}
