/* ref/test_mpfr.c — the MPFR reference and the certification of the fp64 one.
 *
 * Hand-computed rows from the project's seed texts first, then an independent
 * MPFR oracle (every product and sum done one by one at 320 bits, no slicing)
 * that the sliced fast path must match, then certification on every mask
 * kind, a planted error, and bad arguments. */
#include <criterion/criterion.h>
#include <math.h>
#include <mpfr.h>
#include <stdlib.h>
#include <string.h>

#include "ref/mpfr_exact.h"
#include "ref/ref.h"

/* ---- random inputs: splitmix64 + Box-Muller, rounded to the dtype ---- */
static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *s) { return ((mix(s) >> 11) + 0.5) * 0x1p-53; }

static double normal(uint64_t *s) { return sqrt(-2.0 * log(uniform01(s))) * cos(6.283185307179586 * uniform01(s)); }

static double *random_tensor(size_t n, ac_dtype t, double scale, uint64_t seed)
{
    double *x = malloc(n * sizeof *x);
    cr_assert(x);
    for (size_t i = 0; i < n; i++)
        x[i] = ac_round(t, scale * normal(&seed));
    return x;
}

/* ---- the independent oracle: one MPFR operation per product and sum ---- */
static void oracle_row(const ac_problem *p, const double *q, const double *k, const double *v, int b, int h, int i,
                       double *o_row, double *lse)
{
    const mpfr_prec_t prec = 320;
    int nk = p->seqlen_k, d = p->head_dim, hk = ac_kv_head_of(p, h);
    mpfr_t *s = malloc((size_t)nk * sizeof *s);
    mpfr_t prod, m, l, acc, t;
    mpfr_inits2(prec, prod, m, l, acc, t, (mpfr_ptr)0);
    bool any = false;
    for (int j = 0; j < nk; j++) {
        mpfr_init2(s[j], prec);
        mpfr_set_zero(s[j], 1);
        for (int c = 0; c < d; c++) {
            mpfr_set_d(prod, q[ac_q_index(p, b, h, i, c)], MPFR_RNDN);
            mpfr_mul_d(prod, prod, k[ac_kv_index(p, b, hk, j, c)], MPFR_RNDN);
            mpfr_add(s[j], s[j], prod, MPFR_RNDN);
        }
        mpfr_mul_d(s[j], s[j], p->scale, MPFR_RNDN);
        if (ac_visible(p, b, h, i, j) && (!any || mpfr_cmp(s[j], m) > 0)) {
            mpfr_set(m, s[j], MPFR_RNDN);
            any = true;
        }
    }
    if (!any) {
        for (int c = 0; c < d; c++)
            o_row[c] = 0.0;
        *lse = -INFINITY;
    } else {
        mpfr_set_zero(l, 1);
        for (int j = 0; j < nk; j++) {
            if (!ac_visible(p, b, h, i, j))
                continue;
            mpfr_sub(s[j], s[j], m, MPFR_RNDN);
            mpfr_exp(s[j], s[j], MPFR_RNDN);
            mpfr_add(l, l, s[j], MPFR_RNDN);
        }
        for (int c = 0; c < d; c++) {
            mpfr_set_zero(acc, 1);
            for (int j = 0; j < nk; j++) {
                if (!ac_visible(p, b, h, i, j))
                    continue;
                mpfr_mul_d(prod, s[j], v[ac_kv_index(p, b, hk, j, c)], MPFR_RNDN);
                mpfr_add(acc, acc, prod, MPFR_RNDN);
            }
            mpfr_div(acc, acc, l, MPFR_RNDN);
            o_row[c] = mpfr_get_d(acc, MPFR_RNDN);
        }
        mpfr_log(t, l, MPFR_RNDN);
        mpfr_add(t, t, m, MPFR_RNDN);
        *lse = mpfr_get_d(t, MPFR_RNDN);
    }
    for (int j = 0; j < nk; j++)
        mpfr_clear(s[j]);
    free(s);
    mpfr_clears(prod, m, l, acc, t, (mpfr_ptr)0);
}

/* ---- hand-computed rows (seed texts 000 and 003) ---- */

/* One query, d = 1, q = 1, scale = 1: S is exactly the row of scores;
 * V_j = j + 1 so O = sum_j P_j (j + 1). */
static void one_row(const double *scores, int n, double *o, double *lse, bool mpfr_path)
{
    ac_problem p = ac_problem_dense(1, 1, 1, 1, n, 1);
    p.scale = 1.0;
    double q = 1.0, v[16];
    for (int j = 0; j < n; j++)
        v[j] = j + 1;
    ac_err err = {{0}};
    int st = mpfr_path ? ref_forward_mpfr(&p, &q, scores, v, 128, NULL, 0, o, lse, &err)
                       : ref_forward_fp64(&p, &q, scores, v, o, lse, &err);
    cr_assert_eq(st, AC_OK, "%s", err.msg);
}

Test(ref_mpfr, hand_row_1_3_2_5_denominator_is_1_203)
{
    const double scores[] = {1, 3, 2, 5};
    /* l = e^-4 + e^-2 + e^-3 + 1, by hand (40 digits, Python decimal) */
    const double l_hand = 1.2034379904932108151670599;
    const double o_hand = 3.6880565891447069876075933;
    for (int path = 0; path < 2; path++) {
        double o, lse;
        one_row(scores, 4, &o, &lse, path == 0);
        double l = exp(lse - 5.0);
        cr_assert_float_eq(lse - 5.0, log(l_hand), 1e-12, "path %d: LSE - 5 = %.17g", path, lse - 5.0);
        cr_assert_eq(floor(l * 1000.0), 1203.0, "path %d: l = %.6f is not 1.203 to 3 decimals", path, l);
        cr_assert_float_eq(o, o_hand, 1e-14, "path %d: O = %.17g", path, o);
    }
}

Test(ref_mpfr, hand_row_2_8_1_9_3_7_max_9_denominator_1_506)
{
    const double scores[] = {2, 8, 1, 9, 3, 7};
    const double l_hand = 1.5069408211781783999593930;
    const double o_hand = 3.6909761380984598172352879;
    for (int path = 0; path < 2; path++) {
        double o, lse;
        one_row(scores, 6, &o, &lse, path == 0);
        double l = exp(lse - 9.0); /* m = 9: the max score */
        cr_assert_float_eq(lse - 9.0, log(l_hand), 1e-12, "path %d: LSE - 9 = %.17g", path, lse - 9.0);
        cr_assert_eq(floor(l * 1000.0), 1506.0, "path %d: l = %.6f does not truncate to 1.506", path, l);
        cr_assert_float_eq(o, o_hand, 1e-14, "path %d: O = %.17g", path, o);
    }
}

/* Rows of P sum to 1: with S exact and exp summed at 256 bits,
 * sum_j exp(S_j - lse) = exp(LSE_exact - lse), so its log is the rounding
 * error of the returned LSE, which must be at most half a double ulp (the
 * MPFR LSE is correctly rounded); and with V = 1 every O is exactly 1. */
Test(ref_mpfr, rows_of_p_sum_to_one)
{
    ac_problem p = ac_problem_dense(1, 1, 1, 5, 37, 24);
    double *q = random_tensor(ac_q_elems(&p), AC_F16, 2.0, 11);
    double *k = random_tensor(ac_kv_elems(&p), AC_F16, 2.0, 12);
    double *v = malloc(ac_kv_elems(&p) * sizeof *v);
    for (size_t x = 0; x < ac_kv_elems(&p); x++)
        v[x] = 1.0;
    double o[5 * 24], lse[5];
    ac_err err = {{0}};
    cr_assert_eq(ref_forward_mpfr(&p, q, k, v, 256, NULL, 0, o, lse, &err), AC_OK, "%s", err.msg);
    for (int x = 0; x < 5 * 24; x++)
        cr_assert_eq(o[x], 1.0, "O[%d] = %.17g with V = 1", x, o[x]);
    mpfr_t s, prod, sum;
    mpfr_inits2(256, s, prod, sum, (mpfr_ptr)0);
    for (int i = 0; i < 5; i++) {
        mpfr_set_zero(sum, 1);
        for (int j = 0; j < 37; j++) {
            mpfr_set_zero(s, 1);
            for (int c = 0; c < 24; c++) {
                mpfr_set_d(prod, q[ac_q_index(&p, 0, 0, i, c)], MPFR_RNDN);
                mpfr_mul_d(prod, prod, k[ac_kv_index(&p, 0, 0, j, c)], MPFR_RNDN);
                mpfr_add(s, s, prod, MPFR_RNDN);
            }
            mpfr_mul_d(s, s, p.scale, MPFR_RNDN);
            mpfr_sub_d(s, s, lse[i], MPFR_RNDN);
            mpfr_exp(s, s, MPFR_RNDN);
            mpfr_add(sum, sum, s, MPFR_RNDN);
        }
        mpfr_log(sum, sum, MPFR_RNDN);
        double lse_err = mpfr_get_d(sum, MPFR_RNDN);
        double half_ulp = ldexp(1.0, ilogb(lse[i]) - 53);
        cr_assert_leq(fabs(lse_err), half_ulp, "row %d: sum_j P_j - 1 = %g, over half an ulp of LSE", i, lse_err);
        cr_assert_gt(fabs(lse_err), 0.0, "row %d: a rounded LSE cannot be exact here", i);
    }
    mpfr_clears(s, prod, sum, (mpfr_ptr)0);
    free(q);
    free(k);
    free(v);
}

/* ---- random cases of every mask kind ---- */
typedef struct {
    const char *name;
    ac_problem p;
    ac_dtype t;
    int seqlens_q[3], seqlens_k[3];
    uint8_t *mask;
} mask_case;

static mask_case make_case(int kind)
{
    mask_case mc = {.t = AC_F16};
    ac_problem *p = &mc.p;
    switch (kind) {
    case 0:
        mc.name = "none";
        *p = ac_problem_dense(1, 2, 2, 9, 23, 16);
        break;
    case 1:
        mc.name = "causal-tl";
        *p = ac_problem_dense(1, 1, 1, 13, 29, 8);
        p->windowed = true;
        p->window_left = AC_WINDOW_INF;
        p->window_right = 0;
        break;
    case 2:
        mc.name = "causal-br";
        *p = ac_problem_dense(1, 1, 1, 13, 29, 8);
        p->windowed = true;
        p->window_left = AC_WINDOW_INF;
        p->window_right = 0;
        p->align = AC_ALIGN_BOTTOM_RIGHT;
        break;
    case 3:
        mc.name = "window-tl";
        *p = ac_problem_dense(1, 1, 1, 17, 21, 12);
        p->windowed = true;
        p->window_left = 3;
        p->window_right = 2;
        break;
    case 4:
        mc.name = "window-br";
        *p = ac_problem_dense(1, 1, 1, 17, 21, 12);
        p->windowed = true;
        p->window_left = 4;
        p->window_right = 1;
        p->align = AC_ALIGN_BOTTOM_RIGHT;
        break;
    case 5:
        mc.name = "varlen";
        *p = ac_problem_dense(3, 2, 1, 11, 19, 8);
        mc.seqlens_q[0] = 11;
        mc.seqlens_q[1] = 4;
        mc.seqlens_q[2] = 0;
        mc.seqlens_k[0] = 7;
        mc.seqlens_k[1] = 19;
        mc.seqlens_k[2] = 5;
        p->layout = AC_LAYOUT_BSHD;
        break;
    case 6:
        mc.name = "dense";
        *p = ac_problem_dense(2, 2, 2, 10, 14, 16);
        mc.t = AC_BF16;
        break;
    default:
        mc.name = "gqa-f32-bshd";
        *p = ac_problem_dense(1, 6, 2, 7, 33, 20);
        p->layout = AC_LAYOUT_BSHD;
        mc.t = AC_F32;
        break;
    }
    if (kind == 6) {
        size_t n = (size_t)p->batch * p->heads_q * p->seqlen_q * p->seqlen_k;
        mc.mask = malloc(n);
        uint64_t s = 99;
        for (size_t x = 0; x < n; x++)
            mc.mask[x] = uniform01(&s) < 0.6;
        memset(mc.mask + 3 * p->seqlen_k, 0, (size_t)p->seqlen_k); /* row 3 of (0,0): fully masked */
        p->mask_batch = p->batch;
        p->mask_heads = p->heads_q;
    }
    return mc;
}

static void bind_case(mask_case *mc)
{
    if (mc->mask)
        mc->p.dense_mask = mc->mask;
    if (mc->seqlens_k[1]) {
        mc->p.seqlens_q = mc->seqlens_q;
        mc->p.seqlens_k = mc->seqlens_k;
    }
}

/* The sliced fast path equals the one-operation-at-a-time oracle on every
 * row, to the double rounding of a value both know to 2^-100. */
Test(ref_mpfr, sliced_path_matches_oracle_on_every_mask_kind)
{
    for (int kind = 0; kind < 8; kind++) {
        mask_case mc = make_case(kind);
        bind_case(&mc);
        ac_problem *p = &mc.p;
        double *q = random_tensor(ac_q_elems(p), mc.t, 1.5, 100 + kind);
        double *k = random_tensor(ac_kv_elems(p), mc.t, 1.5, 200 + kind);
        double *v = random_tensor(ac_kv_elems(p), mc.t, 1.0, 300 + kind);
        size_t nq = ac_q_elems(p), nl = ac_lse_elems(p);
        double *o = malloc(nq * sizeof *o), *lse = malloc(nl * sizeof *lse), row[64];
        ac_err err = {{0}};
        cr_assert_eq(ref_forward_mpfr(p, q, k, v, 128, NULL, 0, o, lse, &err), AC_OK, "%s: %s", mc.name, err.msg);
        for (int b = 0; b < p->batch; b++)
            for (int h = 0; h < p->heads_q; h++)
                for (int i = 0; i < ac_seqlen_q_of(p, b); i++) {
                    double lse_or;
                    oracle_row(p, q, k, v, b, h, i, row, &lse_or);
                    double got = lse[ac_lse_index(p, b, h, i)];
                    cr_assert(got == lse_or, "%s (%d,%d,%d): LSE %.17g vs oracle %.17g", mc.name, b, h, i, got, lse_or);
                    for (int c = 0; c < p->head_dim; c++) {
                        double x = o[ac_q_index(p, b, h, i, c)];
                        cr_assert(x == row[c], "%s (%d,%d,%d,%d): O %a vs oracle %a", mc.name, b, h, i, c, x, row[c]);
                    }
                }
        free(q);
        free(k);
        free(v);
        free(o);
        free(lse);
        free(mc.mask);
    }
}

Test(ref_mpfr, fp64_reference_certified_on_every_mask_kind)
{
    for (int kind = 0; kind < 8; kind++) {
        mask_case mc = make_case(kind);
        bind_case(&mc);
        ac_problem *p = &mc.p;
        double *q = random_tensor(ac_q_elems(p), mc.t, 1.5, 400 + kind);
        double *k = random_tensor(ac_kv_elems(p), mc.t, 1.5, 500 + kind);
        double *v = random_tensor(ac_kv_elems(p), mc.t, 1.0, 600 + kind);
        double *o = malloc(ac_q_elems(p) * sizeof *o), *lse = malloc(ac_lse_elems(p) * sizeof *lse);
        ac_err err = {{0}};
        cr_assert_eq(ref_forward_fp64(p, q, k, v, o, lse, &err), AC_OK, "%s: %s", mc.name, err.msg);
        ac_cert cert;
        size_t real = 0;
        for (int b = 0; b < p->batch; b++)
            real += (size_t)p->heads_q * ac_seqlen_q_of(p, b);
        cr_assert_eq(ref_certify(p, AC_F32, q, k, v, o, lse, ac_lse_elems(p), 7, 128, &cert, &err), AC_OK, "%s: %s",
                     mc.name, err.msg);
        cr_assert_eq(cert.rows_checked, real, "%s: every real row checked", mc.name);
        cr_assert(cert.certified, "%s: max ulp %g", mc.name, cert.max_ulp_o);
        cr_assert_lt(cert.max_ulp_o, AC_CERT_MAX_ULP / 1024, "%s: %g f32 ulps", mc.name, cert.max_ulp_o);
        cr_assert_lt(cert.max_abs_lse, 1e-13, "%s: LSE off by %g", mc.name, cert.max_abs_lse);
        free(q);
        free(k);
        free(v);
        free(o);
        free(lse);
        free(mc.mask);
    }
}

Test(ref_mpfr, fully_masked_row_gives_zero_and_minus_inf)
{
    mask_case mc = make_case(6);
    bind_case(&mc);
    ac_problem *p = &mc.p;
    double *q = random_tensor(ac_q_elems(p), mc.t, 1.0, 7);
    double *k = random_tensor(ac_kv_elems(p), mc.t, 1.0, 8);
    double *v = random_tensor(ac_kv_elems(p), mc.t, 1.0, 9);
    double o[16], lse[2];
    size_t rows[2] = {3, 4}; /* (0, 0, 3) is fully masked, (0, 0, 4) is not */
    for (int c = 0; c < 16; c++)
        o[c] = NAN;
    double *o_all = malloc(ac_q_elems(p) * sizeof *o_all), *lse_all = malloc(ac_lse_elems(p) * sizeof *lse_all);
    ac_err err = {{0}};
    cr_assert_eq(ref_forward_mpfr(p, q, k, v, 128, rows, 2, o_all, lse_all, &err), AC_OK, "%s", err.msg);
    cr_assert(isinf(lse_all[3]) && lse_all[3] < 0, "LSE = %g", lse_all[3]);
    cr_assert(isfinite(lse_all[4]), "LSE = %g", lse_all[4]);
    for (int c = 0; c < 16; c++) {
        cr_assert_eq(o_all[ac_q_index(p, 0, 0, 3, c)], 0.0);
        cr_assert_neq(o_all[ac_q_index(p, 0, 0, 4, c)], 0.0);
    }
    (void)o;
    (void)lse;
    free(q);
    free(k);
    free(v);
    free(o_all);
    free(lse_all);
    free(mc.mask);
}

/* One O element moved by exactly one f32 ulp of the exact value: the
 * certificate must read 1 ulp and refuse. */
Test(ref_mpfr, planted_one_ulp_error_is_reported_exactly)
{
    ac_problem p = ac_problem_dense(1, 2, 1, 6, 40, 16);
    double *q = random_tensor(ac_q_elems(&p), AC_F16, 1.0, 21);
    double *k = random_tensor(ac_kv_elems(&p), AC_F16, 1.0, 22);
    double *v = random_tensor(ac_kv_elems(&p), AC_F16, 1.0, 23);
    size_t nq = ac_q_elems(&p), nl = ac_lse_elems(&p);
    double *o = malloc(nq * sizeof *o), *lse = malloc(nl * sizeof *lse);
    double *om = malloc(nq * sizeof *om), *lsem = malloc(nl * sizeof *lsem);
    ac_err err = {{0}};
    cr_assert_eq(ref_forward_fp64(&p, q, k, v, o, lse, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(ref_forward_mpfr(&p, q, k, v, 128, NULL, 0, om, lsem, &err), AC_OK, "%s", err.msg);
    size_t at = ac_q_index(&p, 0, 1, 4, 9);
    o[at] = om[at] + ac_ulp(AC_F32, om[at]);
    ac_cert cert;
    cr_assert_eq(ref_certify(&p, AC_F32, q, k, v, o, lse, nl, 3, 128, &cert, &err), AC_OK, "%s", err.msg);
    cr_assert_float_eq(cert.max_ulp_o, 1.0, 1e-9, "max ulp %.12g", cert.max_ulp_o);
    cr_assert(!cert.certified);
    cr_assert_eq(cert.rows_checked, nl);
    free(q);
    free(k);
    free(v);
    free(o);
    free(lse);
    free(om);
    free(lsem);
}

Test(ref_mpfr, certify_samples_distinct_real_rows_deterministically)
{
    mask_case mc = make_case(5); /* varlen: batch 2 has no query rows at all */
    bind_case(&mc);
    ac_problem *p = &mc.p;
    double *q = random_tensor(ac_q_elems(p), mc.t, 1.0, 31);
    double *k = random_tensor(ac_kv_elems(p), mc.t, 1.0, 32);
    double *v = random_tensor(ac_kv_elems(p), mc.t, 1.0, 33);
    double *o = malloc(ac_q_elems(p) * sizeof *o), *lse = malloc(ac_lse_elems(p) * sizeof *lse);
    ac_err err = {{0}};
    cr_assert_eq(ref_forward_fp64(p, q, k, v, o, lse, &err), AC_OK, "%s", err.msg);
    ac_cert a, b;
    cr_assert_eq(ref_certify(p, AC_BF16, q, k, v, o, lse, 8, 42, 96, &a, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(ref_certify(p, AC_BF16, q, k, v, o, lse, 8, 42, 96, &b, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(a.rows_checked, 8);
    cr_assert(a.certified && a.max_ulp_o == b.max_ulp_o && a.max_abs_lse == b.max_abs_lse);
    free(q);
    free(k);
    free(v);
    free(o);
    free(lse);
}

Test(ref_mpfr, bad_arguments_are_rejected_with_a_message)
{
    ac_problem p = ac_problem_dense(1, 2, 1, 4, 5, 8);
    double *q = random_tensor(ac_q_elems(&p), AC_F16, 1.0, 1);
    double *k = random_tensor(ac_kv_elems(&p), AC_F16, 1.0, 2);
    double *v = random_tensor(ac_kv_elems(&p), AC_F16, 1.0, 3);
    double o[64], lse[8];
    ac_cert cert;
    ac_err err = {{0}};
    size_t bad_row = 8;
    cr_assert_eq(ref_forward_mpfr(NULL, q, k, v, 128, NULL, 0, o, lse, &err), AC_ERR_INPUT);
    cr_assert_eq(ref_forward_mpfr(&p, q, NULL, v, 128, NULL, 0, o, lse, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "k"), "%s", err.msg);
    cr_assert_eq(ref_forward_mpfr(&p, q, k, v, 128, NULL, 0, NULL, lse, &err), AC_ERR_INPUT);
    cr_assert_eq(ref_forward_mpfr(&p, q, k, v, 20, NULL, 0, o, lse, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "prec_bits"), "%s", err.msg);
    cr_assert_eq(ref_forward_mpfr(&p, q, k, v, 128, &bad_row, 1, o, lse, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "rows[0]"), "%s", err.msg);
    ac_problem gqa = p;
    gqa.heads_kv = 3;
    cr_assert_eq(ref_forward_mpfr(&gqa, q, k, v, 128, NULL, 0, o, lse, &err), AC_ERR_INPUT);
    k[3] = NAN;
    cr_assert_eq(ref_forward_mpfr(&p, q, k, v, 128, NULL, 0, o, lse, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "not finite"), "%s", err.msg);
    k[3] = 1.0;
    cr_assert_eq(ref_certify(&p, AC_F16, q, k, v, o, lse, 4, 1, 128, NULL, &err), AC_ERR_INPUT);
    cr_assert_eq(ref_certify(&p, (ac_dtype)7, q, k, v, o, lse, 4, 1, 128, &cert, &err), AC_ERR_INPUT);
    cr_assert_eq(ref_certify(&p, AC_F16, q, k, v, NULL, lse, 4, 1, 128, &cert, &err), AC_ERR_INPUT);
    cr_assert_eq(ref_certify(&p, AC_F16, q, k, v, o, lse, 4, 1, 4096, &cert, &err), AC_ERR_INPUT);
    free(q);
    free(k);
    free(v);
}

/* The table-driven exp against mpfr_exp at 64 more bits, on full-precision
 * arguments over [-70, 0] (past -64 it hands over to mpfr_exp): within
 * 1.1 * 2^-prec relative at 64, 128 and 256 bits. */
Test(ref_mpfr, table_exp_within_its_bound)
{
    const int precs[] = {64, 128, 256};
    uint64_t seed = 41;
    for (int k = 0; k < 3; k++) {
        int prec = precs[k];
        mx_exp_table tab;
        mx_exp_scratch scr;
        mx_exp_table_init(&tab, prec);
        mx_exp_scratch_init(&scr, &tab);
        mpfr_t x, got, want;
        mpfr_inits2(prec, x, got, (mpfr_ptr)0);
        mpfr_init2(want, prec + 64);
        for (int n = 0; n < 3000; n++) {
            /* a prec-bit argument: a double plus a tail far below it */
            mpfr_set_d(x, -70.0 * uniform01(&seed), MPFR_RNDN);
            mpfr_sub_d(x, x, 0x1p-60 * uniform01(&seed), MPFR_RNDN);
            if (n == 0)
                mpfr_set_zero(x, 1);
            mx_exp(got, x, &tab, &scr);
            mpfr_exp(want, x, MPFR_RNDN);
            mpfr_sub(want, got, want, MPFR_RNDN);
            mpfr_div(want, want, got, MPFR_RNDN);
            double rel = fabs(mpfr_get_d(want, MPFR_RNDN));
            cr_assert_leq(rel, 1.1 * ldexp(1.0, -prec), "prec %d, x = %g: relative error %g", prec,
                          mpfr_get_d(x, MPFR_RNDN), rel);
            if (n == 0)
                cr_assert(mpfr_cmp_ui(got, 1) == 0, "exp(0) must be exactly 1");
        }
        mpfr_clears(x, got, want, (mpfr_ptr)0);
        mx_exp_scratch_clear(&scr, &tab);
        mx_exp_table_clear(&tab);
    }
}

/* Past one key block (1024 keys) and with blocks big enough to be sliced on
 * two threads, where the two halves need different numbers of slices (keys
 * and V columns of widely different magnitudes): still the oracle's values. */
Test(ref_mpfr, sliced_path_matches_oracle_across_key_blocks_and_threads)
{
    ac_problem p = ac_problem_dense(1, 1, 1, 2, 1500, 64);
    p.layout = AC_LAYOUT_BSHD;
    double *q = random_tensor(ac_q_elems(&p), AC_F32, 1.0, 71);
    double *k = random_tensor(ac_kv_elems(&p), AC_BF16, 1.0, 72);
    double *v = random_tensor(ac_kv_elems(&p), AC_F32, 1.0, 73);
    for (int j = 0; j < 1500; j++)
        for (int c = 0; c < 64; c++) {
            if (j >= 750) /* second half of the keys: tiny and huge parts mixed */
                k[ac_kv_index(&p, 0, 0, j, c)] *= (c % 2) ? 0x1p-60 : 0x1p-3;
            if (c >= 32)
                v[ac_kv_index(&p, 0, 0, j, c)] *= (j % 3) ? 0x1p-40 : 1.0;
        }
    double o[2 * 64], lse[2], row[64], lse_or;
    ac_err err = {{0}};
    cr_assert_eq(ref_forward_mpfr(&p, q, k, v, 128, NULL, 0, o, lse, &err), AC_OK, "%s", err.msg);
    for (int i = 0; i < 2; i++) {
        oracle_row(&p, q, k, v, 0, 0, i, row, &lse_or);
        cr_assert(lse[i] == lse_or, "row %d: LSE %.17g vs oracle %.17g", i, lse[i], lse_or);
        for (int c = 0; c < 64; c++)
            cr_assert(o[ac_q_index(&p, 0, 0, i, c)] == row[c], "row %d col %d: %a vs oracle %a", i, c,
                      o[ac_q_index(&p, 0, 0, i, c)], row[c]);
    }
    free(q);
    free(k);
    free(v);
}
