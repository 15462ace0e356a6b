/* ref/test_backward.c — the fp64 reference backward (suite ref_backward). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "ref.h"
#include "test_support.h"

/* L = sum(dO * O) over the rows that are part of the problem. */
static double loss(const ts_case *c)
{
    const ac_problem *p = &c->p;
    cr_assert_eq(ref_forward_fp64(p, c->q, c->k, c->v, c->o, c->lse, NULL), AC_OK);
    double sum = 0.0;
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < p->heads_q; h++)
            for (int i = 0; i < ac_seqlen_q_of(p, b); i++)
                for (int cc = 0; cc < p->head_dim; cc++)
                    sum += c->d_o[ac_q_index(p, b, h, i, cc)] * c->o[ac_q_index(p, b, h, i, cc)];
    return sum;
}

/* Central differences of L over every entry of x against grad; returns the
 * worst |fd - grad| / (|grad| + 1e-3 max|grad|) and checks that entries the
 * loss does not depend on have an exactly zero gradient. */
static double fd_worst(ts_case *c, double *x, const double *grad, size_t n, const char *what)
{
    double gmax = 0.0, worst = 0.0;
    for (size_t e = 0; e < n; e++)
        gmax = fmax(gmax, fabs(grad[e]));
    cr_assert(gmax > 0.0, "%s: gradient all zero", what);
    for (size_t e = 0; e < n; e++) {
        double keep = x[e], step = 1e-6 * fmax(1.0, fabs(keep));
        x[e] = keep + step;
        double up = loss(c);
        x[e] = keep - step;
        double down = loss(c);
        x[e] = keep;
        double fd = (up - down) / (2.0 * step);
        if (fd == 0.0 && up == down)
            cr_assert(fabs(grad[e]) <= 1e-14 * gmax, "%s[%zu]: L does not depend on it, grad %g", what, e, grad[e]);
        double rel = fabs(fd - grad[e]) / (fabs(grad[e]) + 1e-3 * gmax);
        worst = fmax(worst, rel);
    }
    return worst;
}

static void check_finite_differences(int kind)
{
    ac_problem p = ts_problem(kind);
    ts_case c;
    ts_case_init(&c, &p, AC_F16, 200 + kind);
    for (size_t e = 0; e < ac_kv_elems(&p); e++) { /* stale values: the backward must zero dK, dV */
        c.dk[e] = 3.0;
        c.dv[e] = -3.0;
    }
    loss(&c);
    ac_err err = {{0}};
    int status = ref_backward_fp64(&p, c.q, c.k, c.v, c.o, c.lse, c.d_o, c.dq, c.dk, c.dv, c.delta, &err);
    cr_assert_eq(status, AC_OK, "%s: %s", ts_kind_name(kind), err.msg);
    double w_q = fd_worst(&c, c.q, c.dq, ac_q_elems(&p), "dQ");
    double w_k = fd_worst(&c, c.k, c.dk, ac_kv_elems(&p), "dK");
    double w_v = fd_worst(&c, c.v, c.dv, ac_kv_elems(&p), "dV");
    cr_assert(w_q < 1e-6 && w_k < 1e-6 && w_v < 1e-6, "%s: finite differences off by dQ %.2g dK %.2g dV %.2g",
              ts_kind_name(kind), w_q, w_k, w_v);
    ts_case_free(&c);
}

Test(ref_backward, finite_differences_no_mask) { check_finite_differences(TS_NONE); }
Test(ref_backward, finite_differences_causal_top_left) { check_finite_differences(TS_CAUSAL_TL); }
Test(ref_backward, finite_differences_causal_bottom_right_nq_ne_nk) { check_finite_differences(TS_CAUSAL_BR); }
Test(ref_backward, finite_differences_window_top_left) { check_finite_differences(TS_WINDOW_TL); }
Test(ref_backward, finite_differences_window_bottom_right) { check_finite_differences(TS_WINDOW_BR); }
Test(ref_backward, finite_differences_varlen) { check_finite_differences(TS_VARLEN); }
Test(ref_backward, finite_differences_dense_mask_with_masked_row) { check_finite_differences(TS_DENSE); }
Test(ref_backward, finite_differences_gqa_4_2) { check_finite_differences(TS_GQA); }
Test(ref_backward, finite_differences_bshd_mqa) { check_finite_differences(TS_BSHD); }

Test(ref_backward, delta_is_rowsum_of_do_times_o_and_masked_rows_get_zero_dq)
{
    ac_problem p = ts_problem(TS_DENSE); /* row 2 fully masked */
    ts_case c;
    ts_case_init(&c, &p, AC_BF16, 301);
    for (size_t e = 0; e < ac_q_elems(&p); e++)
        c.dq[e] = NAN;
    cr_assert_eq(ref_forward_fp64(&p, c.q, c.k, c.v, c.o, c.lse, NULL), AC_OK);
    cr_assert_eq(ref_backward_fp64(&p, c.q, c.k, c.v, c.o, c.lse, c.d_o, c.dq, c.dk, c.dv, c.delta, NULL), AC_OK);
    for (int h = 0; h < p.heads_q; h++)
        for (int i = 0; i < p.seqlen_q; i++) {
            double want = 0.0;
            for (int cc = 0; cc < p.head_dim; cc++)
                want += c.d_o[ac_q_index(&p, 0, h, i, cc)] * c.o[ac_q_index(&p, 0, h, i, cc)];
            cr_assert(fabs(c.delta[ac_lse_index(&p, 0, h, i)] - want) <= 1e-15 * fmax(1.0, fabs(want)),
                      "D[%d,%d] = %g, want %g", h, i, c.delta[ac_lse_index(&p, 0, h, i)], want);
            for (int cc = 0; cc < p.head_dim; cc++) {
                double dq = c.dq[ac_q_index(&p, 0, h, i, cc)];
                cr_assert(!isnan(dq), "dQ[%d,%d,%d] never written", h, i, cc);
                if (i == 2)
                    cr_assert(dq == 0.0, "fully masked row: dQ = %g, want 0", dq);
            }
        }
    ts_case_free(&c);
}

Test(ref_backward, gqa_dk_dv_are_sums_over_the_group)
{
    ac_problem gqa = ts_problem(TS_GQA); /* Hq = 4, Hkv = 2 */
    ac_problem mha = gqa;
    mha.heads_kv = 4;
    ts_case g, m;
    ts_case_init(&g, &gqa, AC_F16, 311);
    ts_case_init(&m, &mha, AC_F16, 311);
    memcpy(m.q, g.q, ac_q_elems(&gqa) * sizeof(double));
    memcpy(m.d_o, g.d_o, ac_q_elems(&gqa) * sizeof(double));
    for (int h = 0; h < 4; h++)
        for (int j = 0; j < gqa.seqlen_k; j++)
            for (int cc = 0; cc < gqa.head_dim; cc++) {
                m.k[ac_kv_index(&mha, 0, h, j, cc)] = g.k[ac_kv_index(&gqa, 0, h / 2, j, cc)];
                m.v[ac_kv_index(&mha, 0, h, j, cc)] = g.v[ac_kv_index(&gqa, 0, h / 2, j, cc)];
            }
    ts_case *both[2] = {&g, &m};
    for (int n = 0; n < 2; n++) {
        ts_case *c = both[n];
        cr_assert_eq(ref_forward_fp64(&c->p, c->q, c->k, c->v, c->o, c->lse, NULL), AC_OK);
        cr_assert_eq(
            ref_backward_fp64(&c->p, c->q, c->k, c->v, c->o, c->lse, c->d_o, c->dq, c->dk, c->dv, c->delta, NULL),
            AC_OK);
    }
    cr_assert(memcmp(g.dq, m.dq, ac_q_elems(&gqa) * sizeof(double)) == 0, "dQ differs");
    for (int hk = 0; hk < 2; hk++)
        for (int j = 0; j < gqa.seqlen_k; j++)
            for (int cc = 0; cc < gqa.head_dim; cc++) {
                double dk = m.dk[ac_kv_index(&mha, 0, 2 * hk, j, cc)] + m.dk[ac_kv_index(&mha, 0, 2 * hk + 1, j, cc)];
                double dv = m.dv[ac_kv_index(&mha, 0, 2 * hk, j, cc)] + m.dv[ac_kv_index(&mha, 0, 2 * hk + 1, j, cc)];
                cr_assert(fabs(g.dk[ac_kv_index(&gqa, 0, hk, j, cc)] - dk) <= 1e-14 * fmax(1.0, fabs(dk)),
                          "dK not the group sum");
                cr_assert(fabs(g.dv[ac_kv_index(&gqa, 0, hk, j, cc)] - dv) <= 1e-14 * fmax(1.0, fabs(dv)),
                          "dV not the group sum");
            }
    ts_case_free(&g);
    ts_case_free(&m);
}

Test(ref_backward, rejects_null_tensors)
{
    ac_problem p = ac_problem_dense(1, 1, 1, 2, 2, 2);
    double x[4] = {1, 2, 3, 4}, y[4], z[4], lse[2] = {0, 0}, delta[2];
    ac_err err = {{0}};
    cr_assert_eq(ref_backward_fp64(&p, x, x, x, x, lse, x, y, z, NULL, delta, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "NULL") != NULL, "message: %s", err.msg);
    p.head_dim = 0;
    cr_assert_eq(ref_backward_fp64(&p, x, x, x, x, lse, x, y, z, y, delta, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "head_dim") != NULL, "message: %s", err.msg);
}

/* Direct loops for dQ, dK, dV of every row, compared against the blocked
 * dgemm path relative to the error scale of each element (the size of the
 * terms it sums). */
static void direct_backward(const ts_case *c, double *dq, double *dk, double *dv)
{
    const ac_problem *p = &c->p;
    int d = p->head_dim;
    double *o_row = ts_alloc((size_t)d), *p_row = ts_alloc((size_t)p->seqlen_k);
    memset(dk, 0, ac_kv_elems(p) * sizeof *dk);
    memset(dv, 0, ac_kv_elems(p) * sizeof *dv);
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < p->heads_q; h++)
            for (int i = 0; i < ac_seqlen_q_of(p, b); i++) {
                int hk = ac_kv_head_of(p, h);
                ts_direct_row(p, c->q, c->k, c->v, b, h, i, o_row, p_row);
                double delta = 0.0;
                for (int cc = 0; cc < d; cc++)
                    delta += c->d_o[ac_q_index(p, b, h, i, cc)] * o_row[cc];
                for (int cc = 0; cc < d; cc++)
                    dq[ac_q_index(p, b, h, i, cc)] = 0.0;
                for (int j = 0; j < p->seqlen_k; j++) {
                    if (p_row[j] == 0.0)
                        continue;
                    double dp = 0.0;
                    for (int cc = 0; cc < d; cc++)
                        dp += c->d_o[ac_q_index(p, b, h, i, cc)] * c->v[ac_kv_index(p, b, hk, j, cc)];
                    double ds = p_row[j] * (dp - delta);
                    for (int cc = 0; cc < d; cc++) {
                        size_t qi = ac_q_index(p, b, h, i, cc), kj = ac_kv_index(p, b, hk, j, cc);
                        dq[qi] += p->scale * ds * c->k[kj];
                        dk[kj] += p->scale * ds * c->q[qi];
                        dv[kj] += p_row[j] * c->d_o[qi];
                    }
                }
            }
    free(o_row);
    free(p_row);
}

static void assert_close_in_scale(const double *got, const double *want, const double *e, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        cr_assert(fabs(got[i] - want[i]) <= 1e-12 * e[i], "%s[%zu]: %.17g, direct %.17g (scale %g)", what, i, got[i],
                  want[i], e[i]);
}

Test(ref_backward, matches_direct_loops_across_row_blocks)
{
    ac_problem p = ac_problem_dense(1, 2, 1, 200, 16400, 4); /* blocks of 63 rows: three full, one partial */
    p.windowed = true;
    p.window_left = 1000;
    p.window_right = 0;
    p.align = AC_ALIGN_BOTTOM_RIGHT;
    ts_case c;
    ts_case_init(&c, &p, AC_F16, 321);
    cr_assert_eq(ref_forward_fp64(&p, c.q, c.k, c.v, c.o, c.lse, NULL), AC_OK);
    cr_assert_eq(ref_backward_fp64(&p, c.q, c.k, c.v, c.o, c.lse, c.d_o, c.dq, c.dk, c.dv, c.delta, NULL), AC_OK);
    size_t nq = ac_q_elems(&p), nkv = ac_kv_elems(&p);
    double *e_o = ts_alloc(nq), *e_dq = ts_alloc(nq), *e_dk = ts_alloc(nkv), *e_dv = ts_alloc(nkv);
    cr_assert_eq(ref_error_scales(&p, AC_F32, c.q, c.k, c.v, c.o, c.lse, c.d_o, e_o, e_dq, e_dk, e_dv, NULL), AC_OK);
    double *dq = ts_alloc(nq), *dk = ts_alloc(nkv), *dv = ts_alloc(nkv);
    direct_backward(&c, dq, dk, dv);
    assert_close_in_scale(c.dq, dq, e_dq, nq, "dQ");
    assert_close_in_scale(c.dk, dk, e_dk, nkv, "dK");
    assert_close_in_scale(c.dv, dv, e_dv, nkv, "dV");
    free(e_o);
    free(e_dq);
    free(e_dk);
    free(e_dv);
    free(dq);
    free(dk);
    free(dv);
    ts_case_free(&c);
}

Test(ref_backward, results_do_not_depend_on_the_thread_count)
{
    ac_problem p = ac_problem_dense(1, 4, 2, 200, 600, 16); /* 4 blocks of rows, 3 tiles of 256 keys */
    p.windowed = true;
    p.window_left = 300;
    p.window_right = 20;
    p.align = AC_ALIGN_BOTTOM_RIGHT;
    ts_case c;
    ts_case_init(&c, &p, AC_BF16, 181);
    cr_assert_eq(ref_forward_fp64(&p, c.q, c.k, c.v, c.o, c.lse, NULL), AC_OK);
    size_t nq = ac_q_elems(&p), nkv = ac_kv_elems(&p), nl = ac_lse_elems(&p);
    double *dq = ts_alloc(nq), *dk = ts_alloc(nkv), *dv = ts_alloc(nkv), *delta = ts_alloc(nl);
    cr_assert_eq(setenv("ATTNCHECK_THREADS", "1", 1), 0);
    cr_assert_eq(ref_backward_fp64(&p, c.q, c.k, c.v, c.o, c.lse, c.d_o, dq, dk, dv, delta, NULL), AC_OK);
    cr_assert_eq(setenv("ATTNCHECK_THREADS", "3", 1), 0);
    cr_assert_eq(ref_backward_fp64(&p, c.q, c.k, c.v, c.o, c.lse, c.d_o, c.dq, c.dk, c.dv, c.delta, NULL), AC_OK);
    unsetenv("ATTNCHECK_THREADS");
    cr_assert(memcmp(dq, c.dq, nq * sizeof *dq) == 0, "dQ differs between 1 and 3 threads");
    cr_assert(memcmp(dk, c.dk, nkv * sizeof *dk) == 0, "dK differs between 1 and 3 threads");
    cr_assert(memcmp(dv, c.dv, nkv * sizeof *dv) == 0, "dV differs between 1 and 3 threads");
    cr_assert(memcmp(delta, c.delta, nl * sizeof *delta) == 0, "D differs between 1 and 3 threads");
    free(dq);
    free(dk);
    free(dv);
    free(delta);
    ts_case_free(&c);
}
