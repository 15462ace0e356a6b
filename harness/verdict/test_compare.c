/* harness/verdict/test_compare.c — the comparator on hand-made tensors with planted
 * errors: each test plants a known error and asserts the metric reports
 * exactly it, at the right (b, h, row, col).  Inputs are built by hand (the
 * comparator reads only in->p and in->c.dtype), so nothing here depends on
 * the case generator. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness/harness.h"

/* One output under test: the problem, the reference x, its scale E, and the
 * kernel's output y as dtype bits, all for a Q-like (or K-like) tensor. */
typedef struct {
    ac_inputs in;
    size_t n;
    double *ref, *escale, *naive, *y;
    void *got;
    uint8_t mask[2 * 8 * 8];
} fixture;

static uint64_t rng_state = 0x5eed;
static double uniform01(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1p-53;
}

/* Fresh random references in [1, 2) (one binade: ulp 2^-10 in f16), scales
 * E in [1, 3), the kernel equal to the reference until a test plants an error. */
static void fixture_init(fixture *f, ac_dtype t, ac_problem p, bool k_like)
{
    memset(f, 0, sizeof *f);
    f->in.c.dtype = t;
    f->in.p = p;
    f->n = k_like ? ac_kv_elems(&p) : ac_q_elems(&p);
    f->ref = calloc(f->n, sizeof(double));
    f->escale = calloc(f->n, sizeof(double));
    f->naive = calloc(f->n, sizeof(double));
    f->y = calloc(f->n, sizeof(double));
    f->got = calloc(f->n, 4);
    cr_assert(f->ref && f->escale && f->naive && f->y && f->got);
    for (size_t e = 0; e < f->n; e++) {
        f->ref[e] = ac_round(t, 1.0 + uniform01());
        f->escale[e] = 1.0 + 2.0 * uniform01();
        f->y[e] = f->naive[e] = f->ref[e];
    }
}

static void fixture_free(fixture *f)
{
    free(f->ref);
    free(f->escale);
    free(f->naive);
    free(f->y);
    free(f->got);
}

static void run(fixture *f, ac_output which, ac_metrics *m)
{
    ac_store(f->in.c.dtype, f->y, f->n, f->got);
    ac_compare(&f->in, which, f->got, f->ref, f->escale, f->naive, m);
}

static void assert_where(ac_where w, int b, int h, int row, int col)
{
    cr_assert(w.b == b && w.h == h && w.row == row && w.col == col,
              "expected (b=%d h=%d row=%d col=%d), got (%d %d %d %d)", b, h, row, col, w.b, w.h, w.row, w.col);
}

static void assert_no_specials(const ac_metrics *m)
{
    cr_assert_eq(m->n_unexpected_nan + m->n_overflow + m->n_lost_special + m->n_wrong_zero + m->n_unwritten, 0,
                 "no special class expected");
}

/* ---- magnitudes ---------------------------------------------------------- */

static void check_k_ulps_at(ac_layout layout)
{
    fixture f;
    ac_problem p = ac_problem_dense(2, 2, 2, 5, 5, 4);
    p.layout = layout;
    fixture_init(&f, AC_F16, p, false);
    size_t at = ac_q_index(&p, 1, 1, 3, 2);
    f.ref[at] = 1.25;
    f.y[at] = 1.25 + 3 * 0x1p-10; /* 3 f16 ulps above, same binade */
    ac_metrics m;
    run(&f, AC_OUT_O, &m);
    cr_assert_eq(m.max_ulp, 3.0, "max_ulp %g", m.max_ulp);
    assert_where(m.at_max_ulp, 1, 1, 3, 2);
    assert_where(m.at_max_scaled, 1, 1, 3, 2);
    cr_assert_eq(m.max_abs, 3 * 0x1p-10);
    cr_assert_eq(m.n_compared, 2 * 2 * 5 * 4);
    cr_assert_float_eq(m.mean_ulp, 3.0 / 80, 1e-15);
    assert_no_specials(&m);
    fixture_free(&f);
}

Test(harness_compare, element_off_by_k_ulps_reported_as_k_there_bhsd) { check_k_ulps_at(AC_LAYOUT_BHSD); }
Test(harness_compare, element_off_by_k_ulps_reported_as_k_there_bshd) { check_k_ulps_at(AC_LAYOUT_BSHD); }

Test(harness_compare, scaled_error_is_abs_error_over_u_times_e)
{
    fixture f;
    ac_problem p = ac_problem_dense(1, 2, 1, 4, 6, 8);
    fixture_init(&f, AC_BF16, p, false);
    size_t at = ac_q_index(&p, 0, 1, 2, 5);
    f.ref[at] = 1.5;
    f.escale[at] = 3.0;
    f.y[at] = 1.5 + 5 * 0x1p-7; /* 5 bf16 ulps */
    ac_metrics m;
    run(&f, AC_OUT_O, &m);
    cr_assert_float_eq(m.max_scaled, 5 * 0x1p-7 / (0x1p-8 * 3.0), 1e-12, "scaled %g", m.max_scaled);
    assert_where(m.at_max_scaled, 0, 1, 2, 5);
    cr_assert_eq(m.max_ulp, 5.0);
    fixture_free(&f);
}

Test(harness_compare, lse_is_measured_in_f32_ulps_with_col_minus_one)
{
    ac_problem p = ac_problem_dense(1, 3, 3, 7, 7, 16);
    size_t n = ac_lse_elems(&p);
    double ref[21], escale[21];
    float got[21];
    for (size_t e = 0; e < n; e++) {
        ref[e] = (double)(float)(2.0 + uniform01()); /* f32 ulp 2^-22 in [2, 4) */
        escale[e] = 4.0;
        got[e] = (float)ref[e];
    }
    size_t at = ac_lse_index(&p, 0, 2, 6);
    ref[at] = 3.0;
    got[at] = (float)(3.0 - 4 * 0x1p-22);
    ac_inputs in = {.p = p};
    in.c.dtype = AC_F16; /* LSE stays f32 whatever the dtype */
    ac_metrics m;
    ac_compare(&in, AC_OUT_LSE, got, ref, escale, NULL, &m);
    cr_assert_eq(m.max_ulp, 4.0, "max_ulp %g", m.max_ulp);
    assert_where(m.at_max_ulp, 0, 2, 6, -1);
    cr_assert_float_eq(m.max_scaled, 4 * 0x1p-22 / (0x1p-24 * 4.0), 1e-12);
    cr_assert_eq(m.n_compared, n);
    cr_assert(!m.has_naive);
}

Test(harness_compare, dk_is_compared_over_kv_heads_and_keys)
{
    fixture f;
    ac_problem p = ac_problem_dense(2, 4, 2, 3, 6, 4);
    p.layout = AC_LAYOUT_BSHD;
    fixture_init(&f, AC_F16, p, true);
    size_t at = ac_kv_index(&p, 1, 1, 5, 0);
    f.ref[at] = 1.0;
    f.y[at] = 1.0 + 7 * 0x1p-10;
    ac_metrics m;
    run(&f, AC_OUT_DK, &m);
    cr_assert_eq(m.n_compared, 2 * 2 * 6 * 4);
    cr_assert_eq(m.max_ulp, 7.0);
    assert_where(m.at_max_ulp, 1, 1, 5, 0);
    fixture_free(&f);
}

Test(harness_compare, vs_naive_ratios_are_kernel_over_naive)
{
    fixture f;
    ac_problem p = ac_problem_dense(1, 1, 1, 4, 4, 4); /* 16 elements */
    fixture_init(&f, AC_F16, p, false);
    size_t a = ac_q_index(&p, 0, 0, 0, 0), b = ac_q_index(&p, 0, 0, 3, 3);
    f.ref[a] = f.ref[b] = f.y[b] = 1.0;
    f.y[a] = 1.0 + 2 * 0x1p-10; /* kernel: one error of 2 ulps */
    f.naive[a] = 1.0 + 0x1p-10; /* naive: 1 ulp there and 3 at b */
    f.naive[b] = 1.0 - 3 * 0x1p-11; /* 1.0 - 3 half-binade ulps: |err| = 3 * 2^-11 */
    ac_metrics m;
    run(&f, AC_OUT_O, &m);
    cr_assert_eq(m.naive_max_abs, 3 * 0x1p-11);
    cr_assert_float_eq(m.naive_mean_abs, (0x1p-10 + 3 * 0x1p-11) / 16, 1e-18);
    cr_assert_float_eq(m.vs_naive_max, 2 * 0x1p-10 / (3 * 0x1p-11), 1e-12);
    cr_assert_float_eq(m.vs_naive_mean, 2 * 0x1p-10 / (0x1p-10 + 3 * 0x1p-11), 1e-12);
    cr_assert_eq(m.n_mean, 16);
    fixture_free(&f);
}

/* The peers' RMSE: one planted error of 2 ulps (2^-9) over 16 elements is
 * sqrt(2^-18 / 16) = 2^-11 exactly; the naive's 2^-10 and 3 2^-11 likewise. */
Test(harness_compare, rmse_is_the_root_mean_square_of_the_planted_errors)
{
    fixture f;
    ac_problem p = ac_problem_dense(1, 1, 1, 4, 4, 4);
    fixture_init(&f, AC_F16, p, false);
    size_t a = ac_q_index(&p, 0, 0, 1, 2), b = ac_q_index(&p, 0, 0, 3, 0);
    f.ref[a] = f.ref[b] = f.y[b] = 1.0;
    f.y[a] = 1.0 + 2 * 0x1p-10;
    f.naive[a] = 1.0 + 0x1p-10;
    f.naive[b] = 1.0 - 3 * 0x1p-11;
    ac_metrics m;
    run(&f, AC_OUT_O, &m);
    cr_assert_eq(m.n_measured, 16);
    cr_assert_eq(m.rmse, 0x1p-11, "rmse %a", m.rmse);
    cr_assert_eq(m.naive_rmse, sqrt((0x1p-20 + 9 * 0x1p-22) / 16), "naive rmse %a", m.naive_rmse);
    fixture_free(&f);
}

Test(harness_compare, means_skip_references_below_the_smallest_normal)
{
    fixture f;
    ac_problem p = ac_problem_dense(1, 1, 1, 4, 4, 4); /* 16 elements */
    fixture_init(&f, AC_F32, p, false);
    size_t a = ac_q_index(&p, 0, 0, 1, 2), z = ac_q_index(&p, 0, 0, 2, 0), b = ac_q_index(&p, 0, 0, 3, 1);
    f.ref[a] = f.naive[a] = 0x1p-130; /* subnormal: the kernel 14 eta off, the naive exact */
    f.y[a] = 0x1p-130 + 14 * 0x1p-149;
    f.ref[z] = f.naive[z] = 0.0; /* an exact zero reached by cancellation: noise */
    f.y[z] = 3 * 0x1p-149;
    f.ref[b] = 0x1p-126; /* the smallest normal is in the means */
    f.y[b] = 0x1p-126 + 0x1p-148;
    f.naive[b] = 0x1p-126 + 0x1p-149;
    ac_metrics m;
    run(&f, AC_OUT_O, &m);
    cr_assert_eq(m.n_compared, 16);
    cr_assert_eq(m.n_mean, 14, "a and z left out, b kept");
    cr_assert_float_eq(m.mean_abs, 0x1p-148 / 14, 1e-60);
    cr_assert_float_eq(m.naive_mean_abs, 0x1p-149 / 14, 1e-60);
    cr_assert_float_eq(m.vs_naive_mean, 2.0, 1e-12);
    cr_assert_eq(m.max_abs, 14 * 0x1p-149, "the max still sees every element");
    assert_no_specials(&m);
    fixture_free(&f);
}

Test(harness_compare, vs_naive_is_zero_when_both_exact_and_inf_when_only_naive_is)
{
    fixture f;
    ac_problem p = ac_problem_dense(1, 1, 1, 2, 2, 2);
    fixture_init(&f, AC_F16, p, false);
    ac_metrics m;
    run(&f, AC_OUT_O, &m);
    cr_assert_eq(m.vs_naive_max, 0.0);
    cr_assert_eq(m.vs_naive_mean, 0.0);
    f.ref[1] = f.naive[1] = 1.5;
    f.y[1] = 1.5 + 0x1p-10;
    run(&f, AC_OUT_O, &m);
    cr_assert(isinf(m.vs_naive_max) && isinf(m.vs_naive_mean));
    fixture_free(&f);
}

Test(harness_compare, padding_rows_and_keys_are_ignored)
{
    fixture f;
    int sq[2] = {3, 5}, sk[2] = {4, 2};
    ac_problem p = ac_problem_dense(2, 2, 2, 5, 4, 4);
    p.seqlens_q = sq;
    p.seqlens_k = sk;
    fixture_init(&f, AC_F16, p, false);
    for (int h = 0; h < 2; h++)
        for (int c = 0; c < 4; c++) { /* garbage in b = 0's padding rows 3 and 4 */
            f.y[ac_q_index(&p, 0, h, 3, c)] = NAN;
            f.y[ac_q_index(&p, 0, h, 4, c)] = 1e9;
        }
    ac_metrics m;
    run(&f, AC_OUT_O, &m);
    assert_no_specials(&m);
    cr_assert_eq(m.n_compared, (3 + 5) * 2 * 4);
    cr_assert_eq(m.max_ulp, 0.0);
    fixture_free(&f);

    fixture_init(&f, AC_F16, p, true);
    for (int c = 0; c < 4; c++) /* keys 2 and 3 of b = 1 are padding */
        f.y[ac_kv_index(&p, 1, 0, 3, c)] = INFINITY;
    run(&f, AC_OUT_DV, &m);
    assert_no_specials(&m);
    cr_assert_eq(m.n_compared, (4 + 2) * 2 * 4);
    fixture_free(&f);
}

/* ---- special classes ----------------------------------------------------- */

Test(harness_compare, nan_in_one_element_is_one_unexpected_nan_there)
{
    fixture f;
    ac_problem p = ac_problem_dense(2, 2, 2, 6, 6, 4);
    fixture_init(&f, AC_F16, p, false);
    f.y[ac_q_index(&p, 1, 0, 4, 3)] = NAN;
    ac_metrics m;
    run(&f, AC_OUT_O, &m);
    cr_assert_eq(m.n_unexpected_nan, 1);
    cr_assert_eq(m.n_overflow + m.n_lost_special + m.n_wrong_zero + m.n_unwritten, 0);
    assert_where(m.first_special, 1, 0, 4, 3);
    cr_assert_eq(m.max_ulp, 0.0, "the NaN stays out of the magnitudes");
    fixture_free(&f);
}

Test(harness_compare, inf_in_one_element_is_one_overflow_there)
{
    fixture f;
    ac_problem p = ac_problem_dense(1, 2, 2, 6, 6, 4);
    fixture_init(&f, AC_BF16, p, false);
    f.y[ac_q_index(&p, 0, 1, 0, 1)] = -INFINITY;
    ac_metrics m;
    run(&f, AC_OUT_DQ, &m);
    cr_assert_eq(m.n_overflow, 1);
    cr_assert_eq(m.n_unexpected_nan, 0);
    assert_where(m.first_special, 0, 1, 0, 1);
    fixture_free(&f);
}

Test(harness_compare, inf_where_the_reference_rounds_to_inf_is_correct_rounding)
{
    /* Exact dQ = 70000 in f16 (max finite 65504): +Inf is the correctly rounded
     * output, not an overflow; -Inf there, and +Inf next to a finite 60000, are. */
    fixture f;
    ac_problem p = ac_problem_dense(1, 1, 1, 4, 4, 4);
    fixture_init(&f, AC_F16, p, false);
    size_t beyond = ac_q_index(&p, 0, 0, 2, 1), wrong_sign = ac_q_index(&p, 0, 0, 3, 0);
    size_t inside = ac_q_index(&p, 0, 0, 3, 3);
    f.ref[beyond] = f.ref[wrong_sign] = 70000.0;
    f.ref[inside] = 60000.0;
    f.escale[beyond] = f.escale[wrong_sign] = f.escale[inside] = 70000.0;
    f.y[beyond] = INFINITY;
    f.y[wrong_sign] = -INFINITY;
    f.y[inside] = INFINITY;
    ac_metrics m;
    run(&f, AC_OUT_DQ, &m);
    cr_assert_eq(m.n_overflow, 2, "-Inf for +70000 and +Inf for 60000 overflow; +Inf for 70000 does not");
    assert_where(m.first_special, 0, 0, 3, 0);
    cr_assert_eq(m.n_unexpected_nan + m.n_lost_special + m.n_wrong_zero + m.n_unwritten, 0);
    fixture_free(&f);
}

Test(harness_compare, surviving_poison_is_one_unwritten_there)
{
    fixture f;
    ac_problem p = ac_problem_dense(1, 1, 1, 8, 8, 4);
    fixture_init(&f, AC_F16, p, false);
    ac_store(AC_F16, f.y, f.n, f.got);
    ac_poison(AC_F16, (uint16_t *)f.got + ac_q_index(&p, 0, 0, 7, 2), 1);
    ac_metrics m;
    ac_compare(&f.in, AC_OUT_O, f.got, f.ref, f.escale, f.naive, &m);
    cr_assert_eq(m.n_unwritten, 1);
    cr_assert_eq(m.n_unexpected_nan, 0, "poison is its own class, not a NaN");
    assert_where(m.first_special, 0, 0, 7, 2);
    fixture_free(&f);
}

Test(harness_compare, poison_patterns_are_quiet_nans_with_our_payload)
{
    uint16_t h[3];
    uint32_t w[2];
    ac_poison(AC_F16, h, 3);
    cr_assert_eq(h[2], 0x7E5A);
    cr_assert(isnan(ac_widen(AC_F16, h[0])) && ac_is_poison(AC_F16, h, 1));
    ac_poison(AC_BF16, h, 1);
    cr_assert_eq(h[0], 0x7FDA);
    cr_assert(isnan(ac_widen(AC_BF16, h[0])));
    ac_poison_f32((float *)w, 2);
    cr_assert_eq(w[1], 0x7FC0DEADu);
    cr_assert(isnan(ac_widen(AC_F32, w[0])) && ac_is_poison(AC_F32, w, 0));
    volatile float zero = 0.0f;
    float arith = zero / zero; /* the default NaN arithmetic makes from numbers */
    cr_assert(isnan(arith) && !ac_is_poison(AC_F32, &arith, 0));
    h[0] = 0x7E00; /* f16's default quiet NaN */
    cr_assert(!ac_is_poison(AC_F16, h, 0));
}

Test(harness_compare, zero_far_from_reference_is_wrong_zero)
{
    fixture f;
    ac_problem p = ac_problem_dense(1, 1, 1, 4, 4, 4);
    fixture_init(&f, AC_F16, p, false);
    size_t far = ac_q_index(&p, 0, 0, 1, 1), near = ac_q_index(&p, 0, 0, 2, 2);
    f.ref[far] = 1.0;
    f.escale[far] = 1.0; /* |x| / (u E) = 2048 > 1000 */
    f.y[far] = 0.0;
    f.ref[near] = 0x1p-9;
    f.escale[near] = 1.0; /* |x| / (u E) = 4: a zero rounding can explain */
    f.y[near] = 0.0;
    ac_metrics m;
    run(&f, AC_OUT_O, &m);
    cr_assert_eq(m.n_wrong_zero, 1);
    assert_where(m.first_special, 0, 0, 1, 1);
    cr_assert_eq(m.max_scaled, 2048.0, "a finite wrong zero still enters the magnitudes");
    fixture_free(&f);
}

Test(harness_compare, nonzero_where_reference_is_exact_zero_is_wrong_zero)
{
    fixture f;
    ac_problem p = ac_problem_dense(1, 1, 1, 4, 4, 4);
    fixture_init(&f, AC_F16, p, false);
    size_t at = ac_q_index(&p, 0, 0, 3, 0);
    f.ref[at] = 0.0;
    f.escale[at] = 0.0; /* E == 0: an exact zero */
    f.y[at] = 0x1p-24;
    ac_metrics m;
    run(&f, AC_OUT_O, &m);
    cr_assert_eq(m.n_wrong_zero, 1);
    assert_where(m.first_special, 0, 0, 3, 0);
    cr_assert_eq(m.max_scaled, 0.0, "no finite scaled error exists for E == 0");
    fixture_free(&f);
}

/* Row 2 of (b=0, h=1) sees no key (dense mask); its reference is the exact
 * O = 0 (E = 0) and LSE = -inf. */
static ac_problem masked_problem(fixture *f, ac_dtype t, bool lse)
{
    ac_problem p = ac_problem_dense(1, 2, 2, 4, 8, 4);
    if (lse) {
        memset(f, 0, sizeof *f);
        f->in.c.dtype = t;
    } else {
        fixture_init(f, t, p, false);
        for (int c = 0; c < 4; c++) {
            size_t at = ac_q_index(&p, 0, 1, 2, c);
            f->ref[at] = f->naive[at] = f->y[at] = f->escale[at] = 0.0;
        }
    }
    memset(f->mask, 1, sizeof f->mask);
    memset(f->mask + ((size_t)1 * 4 + 2) * 8, 0, 8); /* (mh = 1, i = 2): no key */
    p.dense_mask = f->mask;
    p.mask_batch = 1;
    p.mask_heads = 2;
    f->in.p = p;
    return p;
}

Test(harness_compare, fully_masked_row_giving_zero_follows_the_flash_convention)
{
    fixture f;
    masked_problem(&f, AC_F16, false);
    ac_metrics m;
    run(&f, AC_OUT_O, &m);
    cr_assert_eq(m.masked_rows, 1);
    cr_assert_eq(m.masked_rows_zero, 1);
    cr_assert_eq(m.masked_rows_nan, 0);
    assert_no_specials(&m);
    fixture_free(&f);
}

Test(harness_compare, fully_masked_row_giving_nan_is_counted_and_flagged)
{
    fixture f;
    ac_problem p = masked_problem(&f, AC_F16, false);
    for (int c = 0; c < 4; c++)
        f.y[ac_q_index(&p, 0, 1, 2, c)] = NAN;
    ac_metrics m;
    run(&f, AC_OUT_O, &m);
    cr_assert_eq(m.masked_rows, 1);
    cr_assert_eq(m.masked_rows_nan, 1);
    cr_assert_eq(m.masked_rows_zero, 0);
    cr_assert_eq(m.n_unexpected_nan, 4);
    assert_where(m.first_special, 0, 1, 2, 0);
    fixture_free(&f);
}

Test(harness_compare, fully_masked_lse_accepts_minus_and_plus_inf_flags_nan_and_finite)
{
    fixture f;
    ac_problem p = masked_problem(&f, AC_F16, true);
    double ref[8], escale[8];
    float got[8];
    for (int e = 0; e < 8; e++) {
        ref[e] = (double)(float)(1.0 + uniform01());
        escale[e] = 2.0;
        got[e] = (float)ref[e];
    }
    size_t at = ac_lse_index(&p, 0, 1, 2);
    ref[at] = -INFINITY;
    escale[at] = 0.0;
    const float given[4] = {-INFINITY, INFINITY, NAN, 0.5f};
    const size_t want_lost[4] = {0, 0, 1, 1}, want_zero[4] = {1, 1, 0, 0}, want_nan[4] = {0, 0, 1, 0};
    for (int k = 0; k < 4; k++) {
        got[at] = given[k];
        ac_metrics m;
        ac_compare(&f.in, AC_OUT_LSE, got, ref, escale, NULL, &m);
        cr_assert_eq(m.masked_rows, 1);
        cr_assert_eq(m.n_lost_special, want_lost[k], "LSE %g", (double)given[k]);
        cr_assert_eq(m.masked_rows_zero, want_zero[k], "LSE %g", (double)given[k]);
        cr_assert_eq(m.masked_rows_nan, want_nan[k], "LSE %g", (double)given[k]);
        cr_assert_eq(m.masked_rows_lse_posinf, k == 1 ? 1u : 0u);
        cr_assert_eq(m.n_unexpected_nan, 0);
    }
}

/* ---- the reference bundle's LSE scale ------------------------------------ */

Test(harness_compare, lse_scale_is_one_plus_abs_lse_plus_d_plus_2_times_scaled_max_visible_dot)
{
    /* B = H = 1, Nq = 2, Nk = 3, d = 2, causal top-left: row 0 sees key 0, row 1 keys 0, 1. */
    ac_problem p = ac_problem_dense(1, 1, 1, 2, 3, 2);
    p.windowed = true;
    p.window_left = AC_WINDOW_INF;
    p.window_right = 0;
    p.scale = 0.5;
    const double q[4] = {1.0, -2.0, -0.5, 0.25};
    const double k[6] = {3.0, 1.0, -1.0, 4.0, 100.0, 100.0}; /* key 2 is masked for both rows */
    const double lse[2] = {-1.5, 2.0};
    double e_lse[2];
    ac_err err;
    cr_assert_eq(ref_lse_error_scale(&p, q, k, lse, e_lse, &err), AC_OK, "%s", err.msg);
    /* row 0: key 0: 1*3 + 2*1 = 5;  row 1: key 0: 1.5 + 0.25 = 1.75, key 1: 0.5 + 1 = 1.5 */
    /* (d + 2) = 4 */
    cr_assert_eq(e_lse[0], 1.0 + 1.5 + 4 * 0.5 * 5.0);
    cr_assert_eq(e_lse[1], 1.0 + 2.0 + 4 * 0.5 * 1.75);
}

Test(harness_compare, lse_scale_is_zero_on_rows_without_visible_keys)
{
    ac_problem p = ac_problem_dense(1, 1, 1, 2, 2, 1);
    uint8_t mask[4] = {0, 0, 1, 1};
    p.dense_mask = mask;
    p.mask_batch = p.mask_heads = 1;
    const double q[2] = {1.0, 2.0}, k[2] = {3.0, -1.0}, lse[2] = {-INFINITY, 0.7};
    double e_lse[2];
    ac_err err;
    cr_assert_eq(ref_lse_error_scale(&p, q, k, lse, e_lse, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(e_lse[0], 0.0);
    cr_assert_float_eq(e_lse[1], 1.0 + 0.7 + 3 * 6.0, 1e-15); /* d + 2 = 3 */
}

/* ---- the whole bundle: the reference rounded to the dtype, compared as a kernel ---- */

typedef struct {
    ac_inputs in;
    uint8_t mask[1 * 2 * 24 * 40];
} bundle_case;

/* Random f16 inputs (exact dtype values), causal bottom-right plus a dense mask
 * that hides every key of row 3 of head 1. */
static void bundle_inputs(bundle_case *bc)
{
    ac_inputs *in = &bc->in;
    memset(bc, 0, sizeof *bc);
    in->c.dtype = AC_F16;
    in->c.seed = 77;
    in->p = ac_problem_dense(1, 2, 1, 24, 40, 16);
    in->p.windowed = true;
    in->p.window_left = AC_WINDOW_INF;
    in->p.window_right = 0;
    in->p.align = AC_ALIGN_BOTTOM_RIGHT;
    memset(bc->mask, 1, sizeof bc->mask);
    memset(bc->mask + (size_t)(1 * 24 + 3) * 40, 0, 40);
    in->p.dense_mask = bc->mask;
    in->p.mask_batch = 1;
    in->p.mask_heads = 2;
    size_t nq = ac_q_elems(&in->p), nkv = ac_kv_elems(&in->p);
    double **all[] = {&in->qd, &in->kd, &in->vd, &in->d_od};
    size_t sizes[] = {nq, nkv, nkv, nq};
    for (int t = 0; t < 4; t++) {
        *all[t] = malloc(sizes[t] * sizeof(double));
        cr_assert(*all[t]);
        for (size_t e = 0; e < sizes[t]; e++)
            (*all[t])[e] = ac_round(AC_F16, 4.0 * uniform01() - 2.0);
    }
}

static void compare_rounded(const ac_inputs *in, ac_output which, const double *ref, const double *e,
                            const double *naive, size_t n, ac_metrics *m)
{
    ac_dtype t = ac_output_dtype(in->c.dtype, which);
    void *got = malloc(n * 4);
    cr_assert(got);
    ac_store(t, ref, n, got);
    ac_compare(in, which, got, ref, e, naive, m);
    free(got);
}

/* Rounding x to the dtype errs by at most half an ulp <= u |x| <= u E: scaled <= 1. */
Test(harness_compare, reference_rounded_to_dtype_is_within_one_scaled_unit)
{
    bundle_case bc;
    bundle_inputs(&bc);
    ac_inputs *in = &bc.in;
    ac_reference r;
    ac_err err;
    cr_assert_eq(ac_reference_make(in, true, 2, &r, &err), AC_OK, "%s", err.msg);
    cr_assert(r.has_backward && r.naive_dq && r.e_dv);
    cr_assert_eq(r.cert.rows_checked, 2);
    cr_assert(r.cert.certified, "fp64 is %g ulp from MPFR", r.cert.max_ulp_o);
    size_t masked = ac_lse_index(&in->p, 0, 1, 3);
    cr_assert(r.lse[masked] == -INFINITY && r.e_lse[masked] == 0.0);
    size_t nq = ac_q_elems(&in->p), nkv = ac_kv_elems(&in->p), nl = ac_lse_elems(&in->p);
    const double *refs[] = {r.o, r.lse, r.dq, r.dk, r.dv}, *es[] = {r.e_o, r.e_lse, r.e_dq, r.e_dk, r.e_dv};
    const double *naives[] = {r.naive_o, r.naive_lse, r.naive_dq, r.naive_dk, r.naive_dv};
    const size_t ns[] = {nq, nl, nq, nkv, nkv};
    for (int o = 0; o <= AC_OUT_DV; o++) { /* the plain outputs: this problem uses no variant */
        ac_metrics m;
        compare_rounded(in, (ac_output)o, refs[o], es[o], naives[o], ns[o], &m);
        assert_no_specials(&m);
        cr_assert(m.max_scaled <= 1.0, "%s: rounding alone reads %g", ac_output_name((ac_output)o), m.max_scaled);
        cr_assert(m.max_ulp <= 0.5, "%s: %g ulp", ac_output_name((ac_output)o), m.max_ulp);
        cr_assert(m.has_naive && m.naive_mean_abs > 0.0);
        if (o != AC_OUT_DK && o != AC_OUT_DV)
            cr_assert(m.masked_rows == 1 && m.masked_rows_zero == 1, "%s", ac_output_name((ac_output)o));
    }
    ac_reference_free(&r);
    cr_assert_null(r.o);
}

Test(harness_compare, reference_backward_without_do_is_an_input_error)
{
    bundle_case bc;
    bundle_inputs(&bc);
    free(bc.in.d_od);
    bc.in.d_od = NULL;
    ac_reference r;
    ac_err err;
    cr_assert_eq(ac_reference_make(&bc.in, true, 0, &r, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "dO") != NULL, "%s", err.msg);
    cr_assert_eq(ac_reference_make(&bc.in, false, 0, &r, &err), AC_OK, "%s", err.msg);
    cr_assert(!r.has_backward && r.dq == NULL && r.cert.rows_checked == 0);
    ac_reference_free(&r);
}
