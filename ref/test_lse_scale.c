/* ref/test_lse_scale.c — LSE's error scale, ref_lse_error_scale (suite ref_lse_scale). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref.h"
#include "test_support.h"

/* The definition as direct loops over every visible pair (ac_visible decides). */
static void direct_lse_scale(const ts_case *c, double *e_lse)
{
    const ac_problem *p = &c->p;
    memset(e_lse, 0, ac_lse_elems(p) * sizeof *e_lse);
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < p->heads_q; h++)
            for (int i = 0; i < ac_seqlen_q_of(p, b); i++) {
                double g_max = -1.0, lse = c->lse[ac_lse_index(p, b, h, i)];
                for (int j = 0; j < ac_seqlen_k_of(p, b); j++) {
                    if (!ac_visible(p, b, h, i, j))
                        continue;
                    double g = 0.0;
                    for (int cc = 0; cc < p->head_dim; cc++)
                        g += fabs(c->q[ac_q_index(p, b, h, i, cc)]) *
                            fabs(c->k[ac_kv_index(p, b, ac_kv_head_of(p, h), j, cc)]);
                    g_max = fmax(g_max, g);
                }
                if (g_max >= 0.0 && isfinite(lse))
                    e_lse[ac_lse_index(p, b, h, i)] = 1.0 + fabs(lse) + (p->head_dim + 2.0) * fabs(p->scale) * g_max;
            }
}

static void check_against_direct(const ac_problem *p, uint64_t seed)
{
    ts_case c;
    ts_case_init(&c, p, AC_BF16, seed);
    ac_err err = {{0}};
    cr_assert_eq(ref_forward_fp64(p, c.q, c.k, c.v, c.o, c.lse, &err), AC_OK, "%s", err.msg);
    size_t n = ac_lse_elems(p);
    double *got = ts_alloc(n), *want = ts_alloc(n);
    for (size_t e = 0; e < n; e++)
        got[e] = NAN; /* every element must be written, padding rows included */
    cr_assert_eq(ref_lse_error_scale(p, c.q, c.k, c.lse, got, &err), AC_OK, "%s", err.msg);
    direct_lse_scale(&c, want);
    for (size_t e = 0; e < n; e++)
        cr_assert(fabs(got[e] - want[e]) <= 1e-13 * want[e], "E_lse[%zu] = %.17g, direct loops %.17g", e, got[e],
                  want[e]);
    free(got);
    free(want);
    ts_case_free(&c);
}

Test(ref_lse_scale, matches_direct_loops_for_every_mask_kind)
{
    for (int kind = 0; kind < TS_KIND_COUNT; kind++) {
        ac_problem p = ts_problem(kind);
        check_against_direct(&p, 600 + kind);
    }
}

Test(ref_lse_scale, matches_direct_loops_across_row_blocks_with_gqa_and_a_window)
{
    ac_problem p = ac_problem_dense(2, 4, 2, 150, 170, 24); /* blocks of 64 rows: two full, one partial */
    p.windowed = true;
    p.window_left = 30;
    p.window_right = 5;
    p.align = AC_ALIGN_BOTTOM_RIGHT;
    check_against_direct(&p, 611);
}

/* Q = (1, -2), (-0.5, 0.25); K = (3, 1), (-1, 4), (100, 100); d = 2, scale
 * 0.5, causal top-left with key 2 masked for both rows by the dense mask.
 * Row 0 sees key 0: G = 1*3 + 2*1 = 5; row 1 sees keys 0, 1: max(1.5 + 0.25,
 * 0.5 + 1) = 1.75.  E = 1 + |LSE| + (d + 2) * 0.5 * G. */
static uint8_t planted_mask[6] = {1, 1, 0, 1, 1, 0};
static const double planted_q[4] = {1.0, -2.0, -0.5, 0.25}, planted_k[6] = {3.0, 1.0, -1.0, 4.0, 100.0, 100.0};
static const double planted_lse[2] = {-1.5, 2.0};

static ac_problem planted_problem(void)
{
    ac_problem p = ac_problem_dense(1, 1, 1, 2, 3, 2);
    p.dense_mask = planted_mask;
    p.windowed = true;
    p.window_right = 0;
    p.scale = 0.5;
    return p;
}

static void planted_scales(const ac_problem *p, double e_lse[2])
{
    ac_err err = {{0}};
    cr_assert_eq(ref_lse_error_scale(p, planted_q, planted_k, planted_lse, e_lse, &err), AC_OK, "%s", err.msg);
}

Test(ref_lse_scale, a_planted_lse_error_reads_exactly_its_size)
{
    ac_problem p = planted_problem();
    const double *lse = planted_lse;
    double e_lse[2];
    planted_scales(&p, e_lse);
    cr_assert_eq(e_lse[0], 1.0 + 1.5 + 4 * 0.5 * 5.0, "E_lse[0] = %.17g", e_lse[0]);
    cr_assert_eq(e_lse[1], 1.0 + 2.0 + 4 * 0.5 * 1.75, "E_lse[1] = %.17g", e_lse[1]);
    /* A kernel's LSE off by 3 u_f32 E in row 1 only: the metric must read 3 there, 0 in row 0. */
    const double u32 = ac_unit_roundoff(AC_F32);
    double kernel[2] = {lse[0], lse[1] + 3.0 * u32 * e_lse[1]};
    for (int i = 0; i < 2; i++) {
        double scaled = fabs(kernel[i] - lse[i]) / (u32 * e_lse[i]);
        cr_assert_eq(scaled, i == 1 ? 3.0 : 0.0, "row %d reads %.17g", i, scaled);
    }
}

/* The same problem as fp8 whose kernel declares Hopper's e8m13 accumulator:
 * d G_i becomes max_j 34 2^11 |scale| M_ij, M the step's largest magnitude
 * (d = 2: one step).  Row 0, key 0: products 3, -2, sum 1: M = 3.  Row 1:
 * key 0: -1.5, 0.25 (sum -1.25): M = 1.5; key 1: 0.5, 1 (sum 1.5): M = 1.5.
 * The online softmax's 2 G_i stays. */
Test(ref_lse_scale, a_declared_fp8_accumulator_replaces_d_g_by_its_truncations)
{
    ac_problem p = planted_problem();
    p.fp8_out = AC_BF16;
    p.fp8_p = AC_E4M3;
    p.fp8_acc_bits = AC_FP8_ACC_HOPPER;
    double e_lse[2];
    planted_scales(&p, e_lse);
    cr_assert_eq(e_lse[0], 1.0 + 1.5 + 2 * 0.5 * 5.0 + 34 * 2048 * 0.5 * 3.0, "E_lse[0] = %.17g", e_lse[0]);
    cr_assert_eq(e_lse[1], 1.0 + 2.0 + 2 * 0.5 * 1.75 + 34 * 2048 * 0.5 * 1.5, "E_lse[1] = %.17g", e_lse[1]);
}

/* Truncation toward zero to b fraction bits: 1 + 2^-13 + 2^-14 keeps 1 + 2^-13
 * at 13 bits, negatives truncate toward zero, and what fits stays exact. */
Test(ref_lse_scale, truncation_to_b_fraction_bits_drops_exactly_the_bits_below)
{
    cr_assert_eq(ac_truncate_bits(1.0 + 0x1p-13 + 0x1p-14, 13), 1.0 + 0x1p-13);
    cr_assert_eq(ac_truncate_bits(-(3.0 + 0x1p-13), 13), -3.0); /* ulp 2^-12 at 3 */
    cr_assert_eq(ac_truncate_bits(3.0 + 0x1p-12, 13), 3.0 + 0x1p-12);
    cr_assert_eq(ac_truncate_bits(0x1.fffffp+5, 13), 0x1.fff8p+5);
    cr_assert_eq(ac_truncate_bits(0.375, 13), 0.375);
    cr_assert_eq(ac_truncate_bits(0.0, 13), 0.0);
    cr_assert(isinf(ac_truncate_bits(-INFINITY, 13)));
}

/* One tensor-core step: terms aligned to the largest (here 1.5, leading bit
 * 2^0, quantum 2^-13 at 13 bits) and truncated toward zero: 2^-14 vanishes,
 * -(2^-13 + 2^-15) keeps -2^-13, 3 * 2^-13 stays; the sum 1.5 + 2^-13 fits. */
Test(ref_lse_scale, an_fp8_tensor_core_step_truncates_each_term_at_the_largest)
{
    const double prod[3] = {0x1p-14, -(0x1p-13 + 0x1p-15), 3 * 0x1p-13};
    cr_assert_eq(ac_fp8_acc_step(1.5, prod, 3, 13), 1.5 + 2 * 0x1p-13);
    cr_assert_eq(ac_fp8_acc_step(0.0, prod, 3, 13), 0x1p-14 - 0x1p-13 - 0x1p-15 + 3 * 0x1p-13); /* exact: small terms */
    const double zero[2] = {0.0, 0.0};
    cr_assert_eq(ac_fp8_acc_step(0.0, zero, 2, 13), 0.0);
}

Test(ref_lse_scale, rows_without_keys_and_padding_rows_get_zero)
{
    ac_problem p = ts_problem(TS_CAUSAL_BR); /* rows 0 and 1 see no key */
    ts_case c;
    ts_case_init(&c, &p, AC_F16, 621);
    cr_assert_eq(ref_forward_fp64(&p, c.q, c.k, c.v, c.o, c.lse, NULL), AC_OK);
    double *e_lse = ts_alloc(ac_lse_elems(&p));
    cr_assert_eq(ref_lse_error_scale(&p, c.q, c.k, c.lse, e_lse, NULL), AC_OK);
    for (int h = 0; h < p.heads_q; h++)
        for (int i = 0; i < p.seqlen_q; i++)
            cr_assert((e_lse[ac_lse_index(&p, 0, h, i)] == 0.0) == (i < 2), "head %d row %d: E_lse = %g", h, i,
                      e_lse[ac_lse_index(&p, 0, h, i)]);
    free(e_lse);
    ts_case_free(&c);

    p = ts_problem(TS_VARLEN); /* batch 1 has 6 rows but seqlens_k 2; batch 0 rows 3..5 are padding */
    ts_case_init(&c, &p, AC_F16, 622);
    cr_assert_eq(ref_forward_fp64(&p, c.q, c.k, c.v, c.o, c.lse, NULL), AC_OK);
    e_lse = ts_alloc(ac_lse_elems(&p));
    for (size_t e = 0; e < ac_lse_elems(&p); e++)
        e_lse[e] = 7.0;
    cr_assert_eq(ref_lse_error_scale(&p, c.q, c.k, c.lse, e_lse, NULL), AC_OK);
    for (int i = 3; i < p.seqlen_q; i++)
        cr_assert_eq(e_lse[ac_lse_index(&p, 0, 1, i)], 0.0, "padding row %d", i);
    cr_assert(e_lse[ac_lse_index(&p, 1, 0, 5)] > 1.0, "batch 1 row 5 sees its 2 keys");
    free(e_lse);
    ts_case_free(&c);
}

Test(ref_lse_scale, results_do_not_depend_on_the_thread_count)
{
    ac_problem p = ac_problem_dense(1, 4, 2, 200, 190, 16);
    ts_case c;
    ts_case_init(&c, &p, AC_F16, 631);
    cr_assert_eq(ref_forward_fp64(&p, c.q, c.k, c.v, c.o, c.lse, NULL), AC_OK);
    size_t n = ac_lse_elems(&p);
    double *one = ts_alloc(n), *three = ts_alloc(n);
    cr_assert_eq(setenv("ATTNCHECK_THREADS", "1", 1), 0);
    cr_assert_eq(ref_lse_error_scale(&p, c.q, c.k, c.lse, one, NULL), AC_OK);
    cr_assert_eq(setenv("ATTNCHECK_THREADS", "3", 1), 0);
    cr_assert_eq(ref_lse_error_scale(&p, c.q, c.k, c.lse, three, NULL), AC_OK);
    unsetenv("ATTNCHECK_THREADS");
    cr_assert(memcmp(one, three, n * sizeof *one) == 0, "1 and 3 threads differ");
    free(one);
    free(three);
    ts_case_free(&c);
}

Test(ref_lse_scale, rejects_null_tensors)
{
    ac_problem p = ac_problem_dense(1, 1, 1, 1, 1, 1);
    double x = 1.0;
    ac_err err = {{0}};
    cr_assert_eq(ref_lse_error_scale(&p, &x, &x, NULL, &x, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "NULL") != NULL, "message: %s", err.msg);
}
