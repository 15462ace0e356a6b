/* ref/test_forward.c — the fp64 reference forward (suite ref_forward). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "fp64_block.h"
#include "ref.h"
#include "test_support.h"

/* max_c |o - o_direct| / sum_j P_ij |V_jc|: error relative to the size of the
 * terms summed, so cancellation in O does not inflate it. */
static double max_rel_to_direct(const ts_case *c, double *max_lse_err)
{
    const ac_problem *p = &c->p;
    double *o_row = ts_alloc((size_t)p->head_dim), *p_row = ts_alloc((size_t)p->seqlen_k);
    double worst = 0.0;
    *max_lse_err = 0.0;
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < p->heads_q; h++)
            for (int i = 0; i < ac_seqlen_q_of(p, b); i++) {
                double lse = ts_direct_row(p, c->q, c->k, c->v, b, h, i, o_row, p_row);
                double got = c->lse[ac_lse_index(p, b, h, i)];
                if (lse == -INFINITY)
                    cr_assert(got == -INFINITY, "row %d: lse %g, want -inf", i, got);
                else if (fabs(got - lse) / fmax(1.0, fabs(lse)) > *max_lse_err)
                    *max_lse_err = fabs(got - lse) / fmax(1.0, fabs(lse));
                for (int cc = 0; cc < p->head_dim; cc++) {
                    double mag = 0.0;
                    for (int j = 0; j < p->seqlen_k; j++)
                        if (p_row[j] != 0.0)
                            mag += p_row[j] * fabs(c->v[ac_kv_index(p, b, ac_kv_head_of(p, h), j, cc)]);
                    double err = fabs(c->o[ac_q_index(p, b, h, i, cc)] - o_row[cc]);
                    if (mag == 0.0)
                        cr_assert(err == 0.0, "masked row %d: o %g, want 0", i, c->o[ac_q_index(p, b, h, i, cc)]);
                    else if (err / mag > worst)
                        worst = err / mag;
                }
            }
    free(o_row);
    free(p_row);
    return worst;
}

Test(ref_forward, matches_direct_double_loop_for_every_mask_kind)
{
    for (int kind = 0; kind < TS_KIND_COUNT; kind++) {
        ac_problem p = ts_problem(kind);
        ts_case c;
        ts_case_init(&c, &p, AC_F16, 100 + kind);
        ac_err err = {{0}};
        cr_assert_eq(ref_forward_fp64(&p, c.q, c.k, c.v, c.o, c.lse, &err), AC_OK, "%s: %s", ts_kind_name(kind),
                     err.msg);
        double lse_err, o_err = max_rel_to_direct(&c, &lse_err);
        cr_assert(o_err < 1e-13 && lse_err < 1e-13, "%s: O off by %g, LSE by %g (relative)", ts_kind_name(kind), o_err,
                  lse_err);
        ts_case_free(&c);
    }
}

Test(ref_forward, matches_direct_double_loop_across_row_blocks)
{
    /* Nk = 16400 makes blocks of 63 rows: 300 rows are five blocks, the last
     * partial, each with its own key range (window 3000 left, bottom-right). */
    ac_problem p = ac_problem_dense(1, 1, 1, 300, 16400, 4);
    cr_assert_eq(ref_block_rows(&p), 63); /* 2^20 / 16400 */
    p.windowed = true;
    p.window_left = 3000;
    p.window_right = 0;
    p.align = AC_ALIGN_BOTTOM_RIGHT;
    ts_case c;
    ts_case_init(&c, &p, AC_BF16, 7);
    cr_assert_eq(ref_forward_fp64(&p, c.q, c.k, c.v, c.o, c.lse, NULL), AC_OK);
    double lse_err, o_err = max_rel_to_direct(&c, &lse_err);
    cr_assert(o_err < 1e-13 && lse_err < 1e-13, "O off by %g, LSE by %g", o_err, lse_err);
    ts_case_free(&c);
}

/* The texts this project is built on: a row's softmax denominator relative to its max. */
static double lse_of_scores(const double *scores, int n)
{
    ac_problem p = ac_problem_dense(1, 1, 1, 1, n, 1);
    p.scale = 1.0;
    double q = 1.0, o, lse, v[8];
    for (int j = 0; j < n; j++)
        v[j] = 1.0;
    cr_assert_eq(ref_forward_fp64(&p, &q, scores, v, &o, &lse, NULL), AC_OK);
    cr_assert_float_eq(o, 1.0, 1e-15, "softmax weights sum to 1: P V with V = 1 gives %.17g", o);
    return lse;
}

Test(ref_forward, hand_computed_softmax_denominators)
{
    const double row_a[4] = {1, 3, 2, 5}, row_b[6] = {2, 8, 1, 9, 3, 7};
    double l_a = exp(lse_of_scores(row_a, 4) - 5.0), l_b = exp(lse_of_scores(row_b, 6) - 9.0);
    cr_assert(l_a >= 1.203 && l_a < 1.204, "[1,3,2,5]: l = %.6f relative to max 5, want 1.203...", l_a);
    cr_assert(l_b >= 1.506 && l_b < 1.507, "[2,8,1,9,3,7]: l = %.6f relative to m = 9, want 1.506...", l_b);
    cr_assert_float_eq(l_a, 1.0 + exp(-2.0) + exp(-3.0) + exp(-4.0), 1e-15);
}

Test(ref_forward, permuting_keys_leaves_output_unchanged)
{
    ac_problem p = ac_problem_dense(1, 2, 2, 9, 11, 8);
    ts_case c, perm;
    ts_case_init(&c, &p, AC_F16, 21);
    ts_case_init(&perm, &p, AC_F16, 21);
    for (int h = 0; h < 2; h++) /* key j goes to slot (5 j + 3) mod 11 */
        for (int j = 0; j < 11; j++)
            for (int cc = 0; cc < 8; cc++) {
                size_t from = ac_kv_index(&p, 0, h, j, cc), to = ac_kv_index(&p, 0, h, (5 * j + 3) % 11, cc);
                perm.k[to] = c.k[from];
                perm.v[to] = c.v[from];
            }
    cr_assert_eq(ref_forward_fp64(&p, c.q, c.k, c.v, c.o, c.lse, NULL), AC_OK);
    cr_assert_eq(ref_forward_fp64(&p, perm.q, perm.k, perm.v, perm.o, perm.lse, NULL), AC_OK);
    for (size_t e = 0; e < ac_q_elems(&p); e++)
        cr_assert(fabs(c.o[e] - perm.o[e]) <= 1e-14, "O[%zu]: %.17g vs %.17g after permuting keys", e, c.o[e],
                  perm.o[e]);
    for (size_t e = 0; e < ac_lse_elems(&p); e++)
        cr_assert(fabs(c.lse[e] - perm.lse[e]) <= 1e-14, "LSE[%zu] changed", e);
    ts_case_free(&c);
    ts_case_free(&perm);
}

/* Perturbing key j (K and V, every K/V head) leaves every row that does not
 * see j bit-for-bit unchanged; returns how many rows were checked. */
static int check_rows_blind_to_key(const ac_problem *p, const ts_case *c, int j)
{
    ts_case changed;
    ts_case_init(&changed, p, AC_F16, 31);
    memcpy(changed.q, c->q, ac_q_elems(p) * sizeof(double));
    memcpy(changed.k, c->k, ac_kv_elems(p) * sizeof(double));
    memcpy(changed.v, c->v, ac_kv_elems(p) * sizeof(double));
    for (int b = 0; b < p->batch; b++)
        for (int hk = 0; hk < p->heads_kv; hk++)
            for (int cc = 0; cc < p->head_dim; cc++) {
                changed.k[ac_kv_index(p, b, hk, j, cc)] = 1000.0 + j;
                changed.v[ac_kv_index(p, b, hk, j, cc)] = -777.0;
            }
    cr_assert_eq(ref_forward_fp64(p, changed.q, changed.k, changed.v, changed.o, changed.lse, NULL), AC_OK);
    int rows = 0;
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < p->heads_q; h++)
            for (int i = 0; i < p->seqlen_q; i++) {
                if (ac_visible(p, b, h, i, j))
                    continue;
                rows++;
                size_t at = ac_lse_index(p, b, h, i);
                cr_assert(memcmp(&c->lse[at], &changed.lse[at], sizeof(double)) == 0, "key %d moved LSE of row %d", j,
                          i);
                for (int cc = 0; cc < p->head_dim; cc++) {
                    size_t oi = ac_q_index(p, b, h, i, cc);
                    cr_assert(memcmp(&c->o[oi], &changed.o[oi], sizeof(double)) == 0,
                              "key %d, masked for (b %d, h %d, row %d), moved its O", j, b, h, i);
                }
            }
    ts_case_free(&changed);
    return rows;
}

Test(ref_forward, masked_keys_do_not_influence_output)
{
    for (int kind = 0; kind < TS_KIND_COUNT; kind++) {
        if (kind == TS_NONE || kind == TS_BSHD)
            continue; /* nothing masked */
        ac_problem p = ts_problem(kind);
        ts_case c;
        ts_case_init(&c, &p, AC_F16, 31);
        cr_assert_eq(ref_forward_fp64(&p, c.q, c.k, c.v, c.o, c.lse, NULL), AC_OK);
        int rows = 0;
        for (int j = 0; j < p.seqlen_k; j++)
            rows += check_rows_blind_to_key(&p, &c, j);
        cr_assert(rows > 0, "%s: no masked pair checked", ts_kind_name(kind));
        ts_case_free(&c);
    }
}

Test(ref_forward, masked_pair_of_a_visible_key_does_not_influence_its_row)
{
    /* Key 3 is masked for row 0 only (dense mask): changing it moves rows that
     * see it, never row 0. */
    ac_problem p = ac_problem_dense(1, 1, 1, 2, 5, 4);
    uint8_t mask[10] = {1, 1, 1, 0, 1, 1, 1, 1, 1, 1};
    p.dense_mask = mask;
    ts_case c, changed;
    ts_case_init(&c, &p, AC_F32, 41);
    ts_case_init(&changed, &p, AC_F32, 41);
    for (int cc = 0; cc < 4; cc++)
        changed.v[ac_kv_index(&p, 0, 0, 3, cc)] += 5.0;
    cr_assert_eq(ref_forward_fp64(&p, c.q, c.k, c.v, c.o, c.lse, NULL), AC_OK);
    cr_assert_eq(ref_forward_fp64(&p, changed.q, changed.k, changed.v, changed.o, changed.lse, NULL), AC_OK);
    for (int cc = 0; cc < 4; cc++) {
        cr_assert(c.o[ac_q_index(&p, 0, 0, 0, cc)] == changed.o[ac_q_index(&p, 0, 0, 0, cc)], "row 0 moved");
        cr_assert(c.o[ac_q_index(&p, 0, 0, 1, cc)] != changed.o[ac_q_index(&p, 0, 0, 1, cc)], "row 1 did not move");
    }
    ts_case_free(&c);
    ts_case_free(&changed);
}

Test(ref_forward, gqa_equals_repeating_kv_heads)
{
    ac_problem gqa = ts_problem(TS_GQA); /* Hq = 4, Hkv = 2, causal */
    ac_problem mha = gqa;
    mha.heads_kv = gqa.heads_q;
    ts_case g, m;
    ts_case_init(&g, &gqa, AC_BF16, 51);
    ts_case_init(&m, &mha, AC_BF16, 51);
    memcpy(m.q, g.q, ac_q_elems(&gqa) * sizeof(double));
    for (int h = 0; h < 4; h++)
        for (int j = 0; j < gqa.seqlen_k; j++)
            for (int cc = 0; cc < gqa.head_dim; cc++) {
                m.k[ac_kv_index(&mha, 0, h, j, cc)] = g.k[ac_kv_index(&gqa, 0, h / 2, j, cc)];
                m.v[ac_kv_index(&mha, 0, h, j, cc)] = g.v[ac_kv_index(&gqa, 0, h / 2, j, cc)];
            }
    cr_assert_eq(ref_forward_fp64(&gqa, g.q, g.k, g.v, g.o, g.lse, NULL), AC_OK);
    cr_assert_eq(ref_forward_fp64(&mha, m.q, m.k, m.v, m.o, m.lse, NULL), AC_OK);
    cr_assert(memcmp(g.o, m.o, ac_q_elems(&gqa) * sizeof(double)) == 0, "GQA O differs from repeated heads");
    cr_assert(memcmp(g.lse, m.lse, ac_lse_elems(&gqa) * sizeof(double)) == 0, "GQA LSE differs");
    ts_case_free(&g);
    ts_case_free(&m);
}

Test(ref_forward, causal_alignments_agree_when_square)
{
    ac_problem tl = ac_problem_dense(1, 2, 2, 8, 8, 4);
    tl.windowed = true;
    tl.window_right = 0;
    ac_problem br = tl;
    br.align = AC_ALIGN_BOTTOM_RIGHT;
    ts_case a, b;
    ts_case_init(&a, &tl, AC_F16, 61);
    ts_case_init(&b, &br, AC_F16, 61);
    cr_assert_eq(ref_forward_fp64(&tl, a.q, a.k, a.v, a.o, a.lse, NULL), AC_OK);
    cr_assert_eq(ref_forward_fp64(&br, b.q, b.k, b.v, b.o, b.lse, NULL), AC_OK);
    cr_assert(memcmp(a.o, b.o, ac_q_elems(&tl) * sizeof(double)) == 0, "top-left and bottom-right differ at Nq == Nk");
    cr_assert(memcmp(a.lse, b.lse, ac_lse_elems(&tl) * sizeof(double)) == 0, "LSE differs");
    ts_case_free(&a);
    ts_case_free(&b);
}

Test(ref_forward, fully_masked_rows_give_zero_and_negative_infinity)
{
    int kinds[] = {TS_DENSE, TS_CAUSAL_BR, TS_VARLEN};
    for (size_t n = 0; n < 3; n++) {
        ac_problem p = ts_problem(kinds[n]);
        ts_case c;
        ts_case_init(&c, &p, AC_F16, 71);
        for (size_t e = 0; e < ac_q_elems(&p); e++)
            c.o[e] = NAN; /* poison: every element must be written */
        cr_assert_eq(ref_forward_fp64(&p, c.q, c.k, c.v, c.o, c.lse, NULL), AC_OK);
        int masked_rows = 0;
        for (int b = 0; b < p.batch; b++)
            for (int h = 0; h < p.heads_q; h++)
                for (int i = 0; i < p.seqlen_q; i++) {
                    int lo, hi;
                    ac_visible_range(&p, b, i, &lo, &hi);
                    bool any = false;
                    for (int j = lo; j < hi; j++)
                        any = any || ac_visible(&p, b, h, i, j);
                    if (any)
                        continue;
                    masked_rows++;
                    cr_assert(c.lse[ac_lse_index(&p, b, h, i)] == -INFINITY, "%s row %d: LSE not -inf",
                              ts_kind_name(kinds[n]), i);
                    for (int cc = 0; cc < p.head_dim; cc++) {
                        double o = c.o[ac_q_index(&p, b, h, i, cc)];
                        cr_assert(o == 0.0 && !signbit(o), "%s row %d: O = %g, want +0", ts_kind_name(kinds[n]), i, o);
                    }
                }
        cr_assert(masked_rows >= 2, "%s: the case must hold fully masked rows", ts_kind_name(kinds[n]));
        for (size_t e = 0; e < ac_q_elems(&p); e++)
            cr_assert(!isnan(c.o[e]), "%s: O[%zu] never written", ts_kind_name(kinds[n]), e);
        ts_case_free(&c);
    }
}

Test(ref_forward, layouts_give_the_same_values)
{
    ac_problem bhsd = ac_problem_dense(2, 4, 2, 5, 6, 8);
    bhsd.windowed = true;
    bhsd.window_left = 2;
    bhsd.window_right = 0;
    ac_problem bshd = bhsd;
    bshd.layout = AC_LAYOUT_BSHD;
    ts_case a, b;
    ts_case_init(&a, &bhsd, AC_F16, 81);
    ts_case_init(&b, &bshd, AC_F16, 81);
    for (int bb = 0; bb < 2; bb++)
        for (int cc = 0; cc < 8; cc++) {
            for (int h = 0; h < 4; h++)
                for (int i = 0; i < 5; i++)
                    b.q[ac_q_index(&bshd, bb, h, i, cc)] = a.q[ac_q_index(&bhsd, bb, h, i, cc)];
            for (int h = 0; h < 2; h++)
                for (int j = 0; j < 6; j++) {
                    b.k[ac_kv_index(&bshd, bb, h, j, cc)] = a.k[ac_kv_index(&bhsd, bb, h, j, cc)];
                    b.v[ac_kv_index(&bshd, bb, h, j, cc)] = a.v[ac_kv_index(&bhsd, bb, h, j, cc)];
                }
        }
    cr_assert_eq(ref_forward_fp64(&bhsd, a.q, a.k, a.v, a.o, a.lse, NULL), AC_OK);
    cr_assert_eq(ref_forward_fp64(&bshd, b.q, b.k, b.v, b.o, b.lse, NULL), AC_OK);
    for (int bb = 0; bb < 2; bb++)
        for (int h = 0; h < 4; h++)
            for (int i = 0; i < 5; i++) {
                cr_assert_eq(a.lse[ac_lse_index(&bhsd, bb, h, i)], b.lse[ac_lse_index(&bshd, bb, h, i)]);
                for (int cc = 0; cc < 8; cc++) {
                    double x = a.o[ac_q_index(&bhsd, bb, h, i, cc)], y = b.o[ac_q_index(&bshd, bb, h, i, cc)];
                    cr_assert(fabs(x - y) <= 1e-15 * fmax(1.0, fabs(x)), "(%d,%d,%d,%d): %.17g vs %.17g", bb, h, i, cc,
                              x, y);
                }
            }
    ts_case_free(&a);
    ts_case_free(&b);
}

Test(ref_forward, probability_rows_sum_to_one)
{
    ac_problem p = ac_problem_dense(1, 1, 1, 16, 64, 16);
    p.windowed = true;
    p.window_left = 40;
    p.window_right = 10;
    ts_case c;
    ts_case_init(&c, &p, AC_BF16, 91);
    for (size_t e = 0; e < ac_q_elems(&p); e++)
        c.q[e] *= 4.0; /* sharp rows too */
    cr_assert_eq(ref_forward_fp64(&p, c.q, c.k, c.v, c.o, c.lse, NULL), AC_OK);
    double *s = ts_alloc(16 * 64);
    ref_head hd;
    ref_head_init(&hd, &p, 0, 0);
    ref_block_scores(&hd, c.q, c.k, 0, 16, 0, 64, s);
    ref_block_probs_from_lse(&hd, 0, 16, 0, 64, c.lse, s);
    for (int i = 0; i < 16; i++) {
        double sum = 0.0;
        for (int j = 0; j < 64; j++) {
            sum += s[i * 64 + j];
            cr_assert(ac_visible(&p, 0, 0, i, j) || s[i * 64 + j] == 0.0, "masked P not 0");
        }
        cr_assert(fabs(sum - 1.0) <= 1e-15, "row %d: P sums to 1 %+.3g", i, sum - 1.0);
    }
    free(s);
    ts_case_free(&c);
}

Test(ref_forward, vectorised_exp_matches_libm)
{
    double worst_ulps = 0.0;
    ts_rng r = {5};
    for (int n = 0; n < 20000; n++) {
        double x = -745.0 * ts_uniform(&r) * (n % 2 ? 1.0 : 0.01), y = x;
        ref_exp_shifted(&y, 1, 0.0);
        double want = exp(x);
        if (want < 0x1p-1022) /* subnormal results: absolute spacing */
            cr_assert(fabs(y - want) <= 0x1p-1074, "exp(%a) = %a, want %a", x, y, want);
        else if (fabs(y - want) / (want * 0x1p-52) > worst_ulps)
            worst_ulps = fabs(y - want) / (want * 0x1p-52);
    }
    cr_assert(worst_ulps <= 2.0, "vectorised exp off by %.2f ulp", worst_ulps);
    double special[11] = {-INFINITY, 0.0, -746.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0};
    double sum = ref_exp_shifted(special, 11, 0.0); /* 11 entries: one vector and a tail */
    cr_assert(special[0] == 0.0 && special[1] == 1.0 && special[2] == 0.0, "exp(-inf) = %g, exp(0) = %g", special[0],
              special[1]);
    cr_assert(fabs(special[10] - exp(8.0)) <= 2 * 0x1p-52 * exp(8.0), "tail element wrong");
    double want = 1.0;
    for (int e = 1; e <= 8; e++)
        want += exp((double)e);
    cr_assert(fabs(sum - want) <= 1e-15 * want, "sum %.17g want %.17g", sum, want);
}

Test(ref_forward, rejects_bad_input_with_a_message)
{
    ac_problem p = ac_problem_dense(1, 1, 1, 2, 2, 2);
    double x[4] = {1, 2, 3, 4}, o[4], lse[2];
    ac_err err = {{0}};
    cr_assert_eq(ref_forward_fp64(&p, x, NULL, x, o, lse, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "NULL") != NULL, "message: %s", err.msg);
    cr_assert_eq(ref_forward_fp64(NULL, x, x, x, o, lse, &err), AC_ERR_INPUT);
    p.heads_q = 3;
    p.heads_kv = 2;
    cr_assert_eq(ref_forward_fp64(&p, x, x, x, o, lse, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "heads_kv") != NULL, "message: %s", err.msg);
}

Test(ref_forward, results_do_not_depend_on_the_thread_count)
{
    ac_problem p = ac_problem_dense(2, 3, 1, 170, 150, 16); /* 6 heads x 3 blocks of 64 rows */
    p.windowed = true;
    p.window_right = 0;
    p.align = AC_ALIGN_BOTTOM_RIGHT;
    ts_case c;
    ts_case_init(&c, &p, AC_F16, 171);
    size_t nq = ac_q_elems(&p), nl = ac_lse_elems(&p);
    double *o1 = ts_alloc(nq), *lse1 = ts_alloc(nl);
    cr_assert_eq(setenv("ATTNCHECK_THREADS", "1", 1), 0);
    cr_assert_eq(ref_forward_fp64(&p, c.q, c.k, c.v, o1, lse1, NULL), AC_OK);
    cr_assert_eq(setenv("ATTNCHECK_THREADS", "4", 1), 0);
    cr_assert_eq(ref_forward_fp64(&p, c.q, c.k, c.v, c.o, c.lse, NULL), AC_OK);
    unsetenv("ATTNCHECK_THREADS");
    cr_assert(memcmp(o1, c.o, nq * sizeof *o1) == 0, "O differs between 1 and 4 threads");
    cr_assert(memcmp(lse1, c.lse, nl * sizeof *lse1) == 0, "LSE differs between 1 and 4 threads");
    free(o1);
    free(lse1);
    ts_case_free(&c);
}
