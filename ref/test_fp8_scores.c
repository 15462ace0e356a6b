/* ref/test_fp8_scores.c — the fp64 reference's scores on fp8 inputs
 * (ref/fp8.c, ref_fp8_block_products): two keys whose exact scores are equal
 * must get equal weights however large the descale factors make S.  The
 * inputs below are a tie found by search: q . k0 = q . k1 = -308992 over the
 * codes, and BLAS over code * factor (the reference before this test) puts
 * the two scores 7e16 apart at |S| ~ 3.6e32, a one-hot row. */
#include <criterion/criterion.h>
#include <math.h>

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
