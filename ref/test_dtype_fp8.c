/* ref/test_dtype_fp8.c — the OCP fp8 formats e4m3 (FN) and e5m2: every one of
 * the 256 codes of each, decoded from its fields by hand (not through
 * ac_widen), the round trip, ties to even, the satfinite overflow rule, random
 * doubles against MPFR's rounding, and the ulp across the subnormal boundary. */
#include <criterion/criterion.h>
#include <math.h>
#include <mpfr.h>

#include "ref/ref.h"

typedef struct {
    ac_dtype t;
    int exp_bits, mant_bits, bias;
    bool fn; /* e4m3 FN: no Inf, only S.1111.111 is NaN */
} fp8;

static const fp8 E4M3 = {AC_E4M3, 4, 3, 7, true}, E5M2 = {AC_E5M2, 5, 2, 15, false};

/* The value the OCP spec gives code c: 0 finite (in *v), 1 Inf, 2 NaN. */
static int spec_value(const fp8 *f, uint32_t c, double *v)
{
    uint32_t e = c >> f->mant_bits & ((1u << f->exp_bits) - 1), m = c & ((1u << f->mant_bits) - 1);
    uint32_t top = (1u << f->exp_bits) - 1;
    if (f->fn && e == top && m == (1u << f->mant_bits) - 1)
        return 2;
    if (!f->fn && e == top)
        return m ? 2 : 1;
    double mag = e ? (double)((1u << f->mant_bits) + m) * pow(2.0, (double)e - f->bias - f->mant_bits)
                   : (double)m * pow(2.0, 1.0 - f->bias - f->mant_bits);
    *v = (c & 0x80u) ? -mag : mag;
    return 0;
}

static void check_every_code(const fp8 *f)
{
    int nans = 0, infs = 0;
    for (uint32_t c = 0; c < 256; c++) {
        double want = 0.0, got = ac_widen(f->t, c);
        int kind = spec_value(f, c, &want);
        if (kind == 2) {
            nans++;
            cr_assert(isnan(got), "%s 0x%02x: NaN decoded as %a", ac_dtype_name(f->t), c, got);
            cr_assert(isnan(ac_widen(f->t, ac_narrow(f->t, got))), "%s: NaN must stay NaN", ac_dtype_name(f->t));
            continue;
        }
        if (kind == 1) {
            infs++;
            cr_assert(isinf(got) && (got < 0) == ((c & 0x80u) != 0), "%s 0x%02x: Inf decoded as %a",
                      ac_dtype_name(f->t), c, got);
            continue;
        }
        cr_assert(got == want && (signbit(got) != 0) == ((c & 0x80u) != 0), "%s 0x%02x: decoded %a, spec %a",
                  ac_dtype_name(f->t), c, got, want);
        cr_assert_eq(ac_narrow(f->t, got), c, "%s 0x%02x (%a) did not round-trip: 0x%02x", ac_dtype_name(f->t), c, got,
                     ac_narrow(f->t, got));
    }
    cr_assert_eq(nans, f->fn ? 2 : 6, "%s: %d NaN codes", ac_dtype_name(f->t), nans);
    cr_assert_eq(infs, f->fn ? 0 : 2, "%s: %d Inf codes", ac_dtype_name(f->t), infs);
}

Test(ref_dtype_fp8, every_code_decodes_as_the_spec_and_round_trips)
{
    check_every_code(&E4M3);
    check_every_code(&E5M2);
    cr_assert_eq(ac_widen(AC_E4M3, 0x7e), 448.0, "e4m3 max S.1111.110");
    cr_assert_eq(ac_widen(AC_E4M3, 0x01), 0x1p-9, "e4m3 smallest subnormal");
    cr_assert_eq(ac_widen(AC_E4M3, 0x08), 0x1p-6, "e4m3 smallest normal");
    cr_assert_eq(ac_widen(AC_E5M2, 0x7b), 57344.0, "e5m2 max");
    cr_assert_eq(ac_widen(AC_E5M2, 0x01), 0x1p-16, "e5m2 smallest subnormal");
    cr_assert(isinf(ac_widen(AC_E5M2, 0x7c)) && ac_widen(AC_E5M2, 0xfc) < 0, "e5m2 +-Inf");
}

/* Halfway between neighbours ties to the even code; a hair off goes to the
 * nearer one; both signs, subnormals included. */
static void check_ties(const fp8 *f)
{
    for (uint32_t lo = 0; lo < 0x7f; lo++) {
        double wa = ac_widen(f->t, lo), wb = ac_widen(f->t, lo + 1);
        if (!isfinite(wa) || !isfinite(wb))
            continue;
        for (int neg = 0; neg < 2; neg++) {
            double s = neg ? -1.0 : 1.0, half = s * 0.5 * (wa + wb);
            uint32_t sb = neg ? 0x80u : 0, even = ((lo & 1u) ? lo + 1 : lo) | sb;
            cr_assert_eq(ac_narrow(f->t, half), even, "%s: halfway %a -> 0x%02x, want 0x%02x", ac_dtype_name(f->t),
                         half, ac_narrow(f->t, half), even);
            cr_assert_eq(ac_narrow(f->t, nextafter(half, s * wa)), lo | sb, "%s: below halfway %a", ac_dtype_name(f->t),
                         half);
            cr_assert_eq(ac_narrow(f->t, nextafter(half, s * wb)), (lo + 1) | sb, "%s: above halfway %a",
                         ac_dtype_name(f->t), half);
        }
    }
}

Test(ref_dtype_fp8, halfway_points_tie_to_even)
{
    check_ties(&E4M3);
    check_ties(&E5M2);
    cr_assert_eq(ac_narrow(AC_E4M3, 0x1p-10), 0x00u, "half the smallest subnormal ties to zero");
    cr_assert_eq(ac_narrow(AC_E4M3, 0x1.8p-9), 0x02u, "1.5 subnormal steps tie to 2");
    cr_assert_eq(ac_narrow(AC_E4M3, 0x1.1p0), 0x38u, "1.0625 (halfway 1 .. 1.125) ties to 1");
    cr_assert_eq(ac_narrow(AC_E4M3, 0x1.3p0), 0x3au, "1.1875 ties to 1.25 (even)");
}

/* OCP satfinite: past the largest finite value, Inf included, gives +-max. */
Test(ref_dtype_fp8, overflow_saturates_to_max)
{
    cr_assert_eq(ac_narrow(AC_E4M3, 448.0), 0x7eu);
    cr_assert_eq(ac_narrow(AC_E4M3, 464.0), 0x7eu, "halfway past max saturates");
    cr_assert_eq(ac_narrow(AC_E4M3, 4096.0), 0x7eu, "FlashAttention's P of 4096 clamps at 448");
    cr_assert_eq(ac_narrow(AC_E4M3, -1e300), 0xfeu);
    cr_assert_eq(ac_narrow(AC_E4M3, INFINITY), 0x7eu, "no Inf in e4m3: +max");
    cr_assert_eq(ac_narrow(AC_E4M3, -INFINITY), 0xfeu);
    cr_assert_eq(ac_narrow(AC_E5M2, 61440.0), 0x7bu, "e5m2 halfway past max saturates too");
    cr_assert_eq(ac_narrow(AC_E5M2, INFINITY), 0x7bu, "satfinite: Inf becomes max");
    cr_assert_eq(ac_narrow(AC_E5M2, -INFINITY), 0xfbu);
    cr_assert_eq(ac_narrow(AC_E4M3, NAN), 0x7fu);
    cr_assert(isnan(ac_widen(AC_E5M2, ac_narrow(AC_E5M2, NAN))));
    cr_assert_eq(ac_narrow(AC_E4M3, -0.0), 0x80u, "the sign of zero is kept");
    cr_assert_eq(ac_narrow(AC_E4M3, 1e-300), 0x00u);
}

/* MPFR's rounding to precision p with the format's exponent range, then the
 * saturation: every finite double's rounding. */
static double mpfr_round_fp8(const fp8 *f, double d, mpfr_t x)
{
    int p = f->mant_bits + 1, emin_ieee = 1 - f->bias;
    mpfr_exp_t old_min = mpfr_get_emin(), old_max = mpfr_get_emax();
    mpfr_set_emin(emin_ieee - p + 2);
    mpfr_set_emax(64);
    mpfr_set_prec(x, p);
    int inex = mpfr_set_d(x, d, MPFR_RNDN);
    inex = mpfr_check_range(x, inex, MPFR_RNDN);
    mpfr_subnormalize(x, inex, MPFR_RNDN);
    double r = mpfr_get_d(x, MPFR_RNDN), max = ac_max_finite(f->t);
    mpfr_set_emin(old_min);
    mpfr_set_emax(old_max);
    return fabs(r) > max ? copysign(max, r) : r;
}

Test(ref_dtype_fp8, random_doubles_round_as_mpfr_then_saturate)
{
    mpfr_t x;
    mpfr_init2(x, 53);
    const fp8 *fs[] = {&E4M3, &E5M2};
    uint64_t seed = 17;
    for (int k = 0; k < 2; k++) {
        const fp8 *f = fs[k];
        int lo_exp = 1 - f->bias - f->mant_bits - 3, hi_exp = f->bias + 4;
        for (int n = 0; n < 20000; n++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            uint64_t r = seed;
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            int e = lo_exp + (int)((seed >> 33) % (uint64_t)(hi_exp - lo_exp + 1));
            double d = ldexp(1.0 + (double)(r >> 12) * 0x1p-52, e);
            if (r & 1)
                d = -d;
            double want = mpfr_round_fp8(f, d, x), got = ac_round(f->t, d);
            cr_assert(got == want && signbit(got) == signbit(want), "%s: %a rounds to %a, MPFR says %a",
                      ac_dtype_name(f->t), d, got, want);
        }
    }
    mpfr_clear(x);
}

/* The ulp across the subnormal boundary: the largest subnormal and the
 * smallest normal are one ulp (2^-9 in e4m3) apart, and both binades' ulps
 * are the subnormal spacing. */
Test(ref_dtype_fp8, ulp_across_the_subnormal_boundary)
{
    double sub_max = ac_widen(AC_E4M3, 0x07), norm_min = ac_widen(AC_E4M3, 0x08);
    cr_assert_eq(sub_max, 0x1.cp-7);
    cr_assert_eq(ac_ulp(AC_E4M3, sub_max), 0x1p-9);
    cr_assert_eq(ac_ulp(AC_E4M3, norm_min), 0x1p-9);
    cr_assert_eq((norm_min - sub_max) / ac_ulp(AC_E4M3, norm_min), 1.0, "one ulp apart");
    cr_assert_eq(ac_ulp(AC_E4M3, ac_widen(AC_E4M3, 0x10)), 0x1p-8, "the next binade's ulp doubles");
    cr_assert_eq((ac_widen(AC_E4M3, 0x10) - ac_widen(AC_E4M3, 0x06)) / ac_ulp(AC_E4M3, 0x1p-6), 10.0,
                 "0x06 .. 0x10: 2 subnormal steps and 8 normal ones of 2^-9");
    cr_assert_eq(ac_ulp(AC_E4M3, 448.0), 32.0);
    cr_assert_eq(ac_ulp(AC_E4M3, 1e6), 32.0, "past max: the last binade's ulp");
    cr_assert_eq(ac_ulp(AC_E5M2, ac_widen(AC_E5M2, 0x03)), 0x1p-16);
    cr_assert_eq(ac_ulp(AC_E5M2, ac_widen(AC_E5M2, 0x04)), 0x1p-16);
    cr_assert_eq(ac_ulp(AC_E5M2, 57344.0), 8192.0);
}

Test(ref_dtype_fp8, format_constants_and_outputs)
{
    cr_assert_eq(ac_unit_roundoff(AC_E4M3), 0x1p-4);
    cr_assert_eq(ac_unit_roundoff(AC_E5M2), 0x1p-3);
    cr_assert_eq(ac_min_subnormal(AC_E4M3), 0x1p-9);
    cr_assert_eq(ac_min_subnormal(AC_E5M2), 0x1p-16);
    cr_assert_eq(ac_max_finite(AC_E4M3), 448.0);
    cr_assert_eq(ac_max_finite(AC_E5M2), 57344.0);
    cr_assert_eq(ac_dtype_size(AC_E4M3), 1);
    cr_assert_eq(ac_dtype_output(AC_E4M3), AC_BF16, "fp8 kernels write bf16 unless the case says out=f16");
    cr_assert(ac_dtype_is_fp8(AC_E5M2) && !ac_dtype_is_fp8(AC_BF16));
    /* outputs are never fp8: they are poisoned with the output dtype's NaN payload */
    cr_assert_eq(ac_dtype_poison(ac_dtype_output(AC_E4M3)), 0x7FDAu);
    ac_dtype t;
    cr_assert(ac_dtype_parse("e4m3", &t) == AC_OK && t == AC_E4M3);
    cr_assert(ac_dtype_parse("e5m2", &t) == AC_OK && t == AC_E5M2);
}
