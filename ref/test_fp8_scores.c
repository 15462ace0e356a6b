/* ref/test_fp8_scores.c — the fp64 reference's scores on fp8 inputs
 * (ref/fp8.c, ref_fp8_block_products): two keys whose exact scores are equal
 * must get equal weights however large the descale factors make S.  The
 * inputs below are a tie found by search: q . k0 = q . k1 = -308992 over the
 * codes, and BLAS over code * factor (the reference before this test) puts
 * the two scores 7e16 apart at |S| ~ 3.6e32, a one-hot row. */
#include <criterion/criterion.h>
#include <math.h>

#include "ref/fp64_block.h"
#include "ref/ref.h"

#define D 4

static const double Q_CODES[D] = {448, -320, 416, -288};
static const double K_CODES[2][D] = {{-224, 88, -384, 72}, {-416, 192, -208, -88}};
static const double V_CODES[2][D] = {{1, -0.5, 2, 0.25}, {-0.25, 0.5, 3, 1}};

Test(ref_fp8_scores, equal_exact_scores_split_the_row_evenly_at_huge_factors)
{
    float dq = 2.4076752e13f, dk = 9.6505264e13f, dv = 3.3581195f;
    ac_problem p = ac_problem_dense(1, 1, 1, 1, 2, D);
    p.scale = 0.5;
    p.fp8_out = AC_BF16;
    p.fp8_p = AC_E4M3;
    p.descale_rows = AC_DESCALE_TENSOR;
    p.descale_q = &dq, p.descale_k = &dk, p.descale_v = &dv;
    double q[D], k[2 * D], v[2 * D], o[D], lse;
    for (int c = 0; c < D; c++) {
        q[c] = Q_CODES[c] * dq;
        for (int j = 0; j < 2; j++)
            k[j * D + c] = K_CODES[j][c] * dk, v[j * D + c] = V_CODES[j][c] * dv;
    }
    ac_err err = {0};
    cr_assert_eq(ref_forward_fp64(&p, q, k, v, o, &lse, &err), AC_OK, "%s", err.msg);
    for (int c = 0; c < D; c++) {
        double even = (V_CODES[0][c] + V_CODES[1][c]) * dv / 2;
        cr_expect_float_eq(o[c], even, 1e-15 * fabs(even), "column %d: %.17g, the even split is %.17g", c, o[c], even);
    }
    double s = -308992.0 * 0.5 * dq * dk;
    cr_expect_float_eq(lse, s + log(2.0), 1e-15 * fabs(s), "LSE %.17g, S + log 2 = %.17g", lse, s + log(2.0));
}

/* P V in Hopper's e8m13 steps (ref.h): one row, d_v = 1, 34 keys with
 * P_j = 1/32 and V_j = 1.  Step 0 (keys 0..31) sums to 1: M = 1; step 1 (keys
 * 32, 33) runs from 1 to 1.0625: M = 1.0625.  34 truncations each below
 * 2^-13 M, in units of bf16's u = 2^-8: 34 2^-5 (1 + 1.0625) = 2.19140625. */
Test(ref_fp8, the_pv_steps_add_34_truncations_of_each_steps_largest_magnitude)
{
    ac_problem p = ac_problem_dense(1, 1, 1, 1, 34, 1);
    p.fp8_out = AC_BF16;
    p.fp8_p = AC_E4M3;
    p.fp8_acc_bits = AC_FP8_ACC_HOPPER;
    ref_head hd;
    ref_head_init(&hd, &p, 0, 0);
    double v[34], prob[34], e_o[1] = {0.5};
    for (int j = 0; j < 34; j++)
        v[j] = 1.0, prob[j] = 1.0 / 32;
    ref_fp8_pv_errors(&hd, v, prob, 0, 1, 0, 34, ac_unit_roundoff(AC_BF16), e_o, 1);
    cr_assert_eq(e_o[0], 0.5 + 2.19140625, "E_O = %.17g", e_o[0]);
    /* Keys 30..33 alone: steps cut at key 32 (counted from key 0): 2/32 then 2/32 more. */
    e_o[0] = 0.0;
    ref_fp8_pv_errors(&hd, v, prob + 30, 0, 1, 30, 34, ac_unit_roundoff(AC_BF16), e_o, 1);
    cr_assert_eq(e_o[0], 34 * 0x1p-5 * (2.0 / 32 + 4.0 / 32), "E_O = %.17g", e_o[0]);
}
