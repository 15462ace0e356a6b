/* ref/test_scales.c — the error scales (suite ref_scales). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "ref.h"
#include "test_support.h"

typedef struct {
    double *e_o, *e_dq, *e_dk, *e_dv;
} scales;

static scales scales_alloc(const ac_problem *p)
{
    scales s = {ts_alloc(ac_q_elems(p)), ts_alloc(ac_q_elems(p)), ts_alloc(ac_kv_elems(p)), ts_alloc(ac_kv_elems(p))};
    return s;
}

static void scales_free(scales *s)
{
    free(s->e_o);
    free(s->e_dq);
    free(s->e_dk);
    free(s->e_dv);
}

static void run_reference(ts_case *c, ac_dtype t, scales *s)
{
    const ac_problem *p = &c->p;
    ac_err err = {{0}};
    cr_assert_eq(ref_forward_fp64(p, c->q, c->k, c->v, c->o, c->lse, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(ref_backward_fp64(p, c->q, c->k, c->v, c->o, c->lse, c->d_o, c->dq, c->dk, c->dv, c->delta, &err),
                 AC_OK, "%s", err.msg);
    cr_assert_eq(
        ref_error_scales(p, t, c->q, c->k, c->v, c->o, c->lse, c->d_o, s->e_o, s->e_dq, s->e_dk, s->e_dv, &err), AC_OK,
        "%s", err.msg);
}

/* G_ij = d |scale| sum_c |Q_ic||K_jc|: the bound of S_ij's f32 error, in u_f32. */
static double score_magnitude(const ts_case *c, int b, int h, int i, int j)
{
    const ac_problem *p = &c->p;
    double g = 0.0;
    for (int cc = 0; cc < p->head_dim; cc++)
        g += fabs(c->q[ac_q_index(p, b, h, i, cc)]) * fabs(c->k[ac_kv_index(p, b, ac_kv_head_of(p, h), j, cc)]);
    return p->head_dim * fabs(p->scale) * g;
}

static double abs_dot_do(const ts_case *c, const double *x, int b, int h, int i, int j)
{
    const ac_problem *p = &c->p;
    double s = 0.0;
    for (int cc = 0; cc < p->head_dim; cc++)
        s += fabs(c->d_o[ac_q_index(p, b, h, i, cc)]) *
            fabs(j < 0 ? x[ac_q_index(p, b, h, i, cc)] : x[ac_kv_index(p, b, ac_kv_head_of(p, h), j, cc)]);
    return s;
}

/* ref/scales.c's header definitions as direct loops over every visible pair:
 * a first pass per row for g_i and R_i, a second for the weights. */
static void direct_row(const ts_case *c, scales *s, double tau, double rho, int b, int h, int i, const double *p_row)
{
    const ac_problem *p = &c->p;
    int d = p->head_dim, hk = ac_kv_head_of(p, h), lo, hi;
    ac_visible_range(p, b, i, &lo, &hi); /* only to skip work: ac_visible decides */
    double lse = c->lse[ac_lse_index(p, b, h, i)], g_row = 0.0, r_row = 0.0;
    double delta_hat = abs_dot_do(c, c->o, b, h, i, -1);
    for (int j = lo; j < hi; j++)
        if (ac_visible(p, b, h, i, j))
            g_row += p_row[j] * score_magnitude(c, b, h, i, j);
    for (int j = lo; j < hi; j++)
        if (ac_visible(p, b, h, i, j))
            r_row +=
                p_row[j] * rho * (score_magnitude(c, b, h, i, j) + g_row + fabs(lse)) * abs_dot_do(c, c->v, b, h, i, j);
    for (int j = lo; j < hi; j++) {
        if (!ac_visible(p, b, h, i, j))
            continue;
        double g = score_magnitude(c, b, h, i, j), r = rho * (g + g_row + fabs(lse));
        double dp_hat = abs_dot_do(c, c->v, b, h, i, j);
        double w_o = p_row[j] * (1.0 + rho * (g + g_row)) + tau, w_v = p_row[j] * (1.0 + r) + tau;
        double w_g = p_row[j] * ((1.0 + r) * (dp_hat + delta_hat) + r_row) + tau;
        for (int cc = 0; cc < d; cc++) {
            size_t qi = ac_q_index(p, b, h, i, cc), kj = ac_kv_index(p, b, hk, j, cc);
            s->e_o[qi] += w_o * fabs(c->v[kj]);
            s->e_dv[kj] += w_v * fabs(c->d_o[qi]);
            s->e_dq[qi] += p->scale * w_g * fabs(c->k[kj]);
            s->e_dk[kj] += p->scale * w_g * fabs(c->q[qi]);
        }
    }
}

static void add_floor(double *e, size_t n, double tau)
{
    for (size_t i = 0; i < n; i++)
        e[i] += e[i] > 0.0 ? tau : 0.0;
}

static scales direct_scales(const ts_case *c, ac_dtype t)
{
    const ac_problem *p = &c->p;
    scales s = scales_alloc(p);
    double tau = ac_min_subnormal(t) / (2.0 * ac_unit_roundoff(t));
    double rho = ac_unit_roundoff(AC_F32) / ac_unit_roundoff(t);
    double *o_row = ts_alloc((size_t)p->head_dim), *p_row = ts_alloc((size_t)p->seqlen_k);
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < p->heads_q; h++)
            for (int i = 0; i < ac_seqlen_q_of(p, b); i++) {
                ts_direct_row(p, c->q, c->k, c->v, b, h, i, o_row, p_row);
                direct_row(c, &s, tau, rho, b, h, i, p_row);
            }
    add_floor(s.e_o, ac_q_elems(p), tau);
    add_floor(s.e_dq, ac_q_elems(p), tau);
    add_floor(s.e_dk, ac_kv_elems(p), tau);
    add_floor(s.e_dv, ac_kv_elems(p), tau);
    free(o_row);
    free(p_row);
    return s;
}

static void assert_close(const double *got, const double *want, size_t n, const char *what)
{
    for (size_t e = 0; e < n; e++)
        cr_assert(fabs(got[e] - want[e]) <= 1e-13 * fabs(want[e]), "%s[%zu] = %.17g, direct loop %.17g", what, e,
                  got[e], want[e]);
}

Test(ref_scales, match_direct_loops_for_every_mask_kind)
{
    for (int kind = 0; kind < TS_KIND_COUNT; kind++) {
        ac_problem p = ts_problem(kind);
        ts_case c;
        ts_case_init(&c, &p, AC_F16, 400 + kind);
        scales s = scales_alloc(&p);
        run_reference(&c, AC_F16, &s);
        scales want = direct_scales(&c, AC_F16);
        assert_close(s.e_o, want.e_o, ac_q_elems(&p), "E_O");
        assert_close(s.e_dq, want.e_dq, ac_q_elems(&p), "E_dQ");
        assert_close(s.e_dk, want.e_dk, ac_kv_elems(&p), "E_dK");
        assert_close(s.e_dv, want.e_dv, ac_kv_elems(&p), "E_dV");
        scales_free(&s);
        scales_free(&want);
        ts_case_free(&c);
    }
}

Test(ref_scales, match_direct_loops_across_row_blocks)
{
    ac_problem p = ac_problem_dense(1, 2, 1, 200, 16400, 4); /* blocks of 63 rows: three full, one partial */
    p.windowed = true;
    p.window_left = 1000;
    p.window_right = 0;
    p.align = AC_ALIGN_BOTTOM_RIGHT;
    ts_case c;
    ts_case_init(&c, &p, AC_F16, 403);
    scales s = scales_alloc(&p);
    run_reference(&c, AC_F16, &s);
    scales want = direct_scales(&c, AC_F16);
    assert_close(s.e_o, want.e_o, ac_q_elems(&p), "E_O");
    assert_close(s.e_dq, want.e_dq, ac_q_elems(&p), "E_dQ");
    assert_close(s.e_dk, want.e_dk, ac_kv_elems(&p), "E_dK");
    assert_close(s.e_dv, want.e_dv, ac_kv_elems(&p), "E_dV");
    scales_free(&s);
    scales_free(&want);
    ts_case_free(&c);
}

Test(ref_scales, tau_floor_and_f32_score_terms_on_a_one_by_one_case)
{
    /* One query, one key, d = 1, Q = K = V = dO = 1, scale 1: S = L = P = 1,
     * G = g = 1, r = rho (G + g + |L|) = 3 rho, dPhat = Dhat = 1, R = 3 rho.
     *   E_O  = tau + (P (1 + rho (G + g)) + tau)      = 1 + 2 rho + 2 tau
     *   E_dV = tau + (P (1 + r) + tau)                = 1 + 3 rho + 2 tau
     *   E_dQ = tau + (P ((1 + r)(dPhat + Dhat) + R) + tau) = 2 + 9 rho + 2 tau */
    ac_problem p = ac_problem_dense(1, 1, 1, 1, 1, 1);
    double q = 1, k = 1, v = 1, o, lse, d_o = 1, e_o, e_dq, e_dk, e_dv;
    cr_assert_eq(ref_forward_fp64(&p, &q, &k, &v, &o, &lse, NULL), AC_OK);
    const double taus[3] = {0x1p-126, 0x1p-14, 0x1p-126}; /* f32, f16, bf16 */
    const double rhos[3] = {1.0, 0x1p-13, 0x1p-16};
    for (int t = 0; t < 3; t++) {
        double tau = taus[t], rho = rhos[t];
        cr_assert_eq(ref_error_scales(&p, (ac_dtype)t, &q, &k, &v, &o, &lse, &d_o, &e_o, &e_dq, &e_dk, &e_dv, NULL),
                     AC_OK);
        cr_assert_float_eq(e_o, 1.0 + 2 * rho + 2 * tau, 1e-15, "%s: E_O = %a", ac_dtype_name((ac_dtype)t), e_o);
        cr_assert_float_eq(e_dv, 1.0 + 3 * rho + 2 * tau, 1e-15, "E_dV = %a", e_dv);
        cr_assert_float_eq(e_dq, 2.0 + 9 * rho + 2 * tau, 1e-15, "E_dQ = %a", e_dq);
        cr_assert_float_eq(e_dk, 2.0 + 9 * rho + 2 * tau, 1e-15, "E_dK = %a", e_dk);
    }
}

Test(ref_scales, fully_masked_rows_have_zero_scale_and_forward_only_mode_agrees)
{
    ac_problem p = ts_problem(TS_DENSE); /* row 2 fully masked */
    ts_case c;
    ts_case_init(&c, &p, AC_BF16, 411);
    scales s = scales_alloc(&p);
    run_reference(&c, AC_BF16, &s);
    for (int h = 0; h < p.heads_q; h++)
        for (int cc = 0; cc < p.head_dim; cc++) {
            cr_assert(s.e_o[ac_q_index(&p, 0, h, 2, cc)] == 0.0, "masked row: E_O not 0");
            cr_assert(s.e_dq[ac_q_index(&p, 0, h, 2, cc)] == 0.0, "masked row: E_dQ not 0");
            cr_assert(s.e_o[ac_q_index(&p, 0, h, 3, cc)] > 0.0, "visible row: E_O = 0");
        }
    double *e_o_only = ts_alloc(ac_q_elems(&p));
    double *untouched = ts_alloc(ac_q_elems(&p));
    untouched[0] = 42.0;
    cr_assert_eq(ref_error_scales(&p, AC_BF16, c.q, c.k, c.v, c.o, c.lse, NULL, e_o_only, untouched, NULL, NULL, NULL),
                 AC_OK);
    cr_assert(untouched[0] == 42.0, "d_o = NULL: e_dq must be ignored");
    free(untouched);
    cr_assert(memcmp(e_o_only, s.e_o, ac_q_elems(&p) * sizeof(double)) == 0, "forward-only E_O differs");
    ac_err err = {{0}};
    cr_assert_eq(ref_error_scales(&p, AC_BF16, c.q, c.k, c.v, c.o, c.lse, c.d_o, e_o_only, NULL, s.e_dk, s.e_dv, &err),
                 AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "e_dq") != NULL, "message: %s", err.msg);
    free(e_o_only);
    scales_free(&s);
    ts_case_free(&c);
}

/* max over elements of |y - x| / (u E) */
static double max_scaled(const double *y, const double *x, const double *e, size_t n, double u)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++)
        if (y[i] != x[i])
            worst = fmax(worst, fabs(y[i] - x[i]) / (u * e[i]));
    return worst;
}

/* A planted kernel: P exact, rounded to f16, PV accumulated in float, O rounded to f16. */
static void planted_f16_forward(const ts_case *c, double *o_planted)
{
    const ac_problem *p = &c->p;
    double *o_row = ts_alloc((size_t)p->head_dim), *p_row = ts_alloc((size_t)p->seqlen_k);
    for (int h = 0; h < p->heads_q; h++)
        for (int i = 0; i < p->seqlen_q; i++) {
            ts_direct_row(p, c->q, c->k, c->v, 0, h, i, o_row, p_row);
            for (int cc = 0; cc < p->head_dim; cc++) {
                float acc = 0.0f;
                for (int j = 0; j < p->seqlen_k; j++)
                    acc +=
                        (float)ac_round(AC_F16, p_row[j]) * (float)c->v[ac_kv_index(p, 0, ac_kv_head_of(p, h), j, cc)];
                o_planted[ac_q_index(p, 0, h, i, cc)] = ac_round(AC_F16, acc);
            }
        }
    free(o_row);
    free(p_row);
}

Test(ref_scales, f16_rounded_probabilities_land_near_one)
{
    ac_problem p = ac_problem_dense(1, 2, 2, 96, 160, 32);
    p.windowed = true;
    p.window_right = 0;
    p.align = AC_ALIGN_BOTTOM_RIGHT;
    ts_case c;
    ts_case_init(&c, &p, AC_F16, 421);
    scales s = scales_alloc(&p);
    run_reference(&c, AC_F16, &s);
    double *o_planted = ts_alloc(ac_q_elems(&p));
    planted_f16_forward(&c, o_planted);
    double worst = max_scaled(o_planted, c.o, s.e_o, ac_q_elems(&p), ac_unit_roundoff(AC_F16));
    cr_log_info("P rounded to f16, PV in f32, O in f16: max scaled error %.3f", worst);
    cr_assert(worst > 0.2 && worst <= 2.0, "P rounded to f16: max scaled error %.3f, want in (0.2, 2]", worst);
    free(o_planted);
    scales_free(&s);
    ts_case_free(&c);
}

/* The naive same-dtype baseline's gradients against the fp64 reference, in
 * scaled units: docs/DESIGN.md's claim is that a correct kernel stays <= ~2. */
static void naive_grads_scaled(ac_dtype t, uint64_t seed, double worst[4])
{
    ac_problem p = ac_problem_dense(1, 4, 2, 64, 96, 32);
    p.windowed = true;
    p.window_right = 0;
    ts_case c;
    ts_case_init(&c, &p, t, seed);
    scales s = scales_alloc(&p);
    run_reference(&c, t, &s);
    size_t nq = ac_q_elems(&p), nkv = ac_kv_elems(&p);
    double *o = ts_alloc(nq), *lse = ts_alloc(ac_lse_elems(&p)), *dq = ts_alloc(nq), *dk = ts_alloc(nkv),
           *dv = ts_alloc(nkv);
    cr_assert_eq(ref_naive_forward(&p, t, c.q, c.k, c.v, o, lse, NULL), AC_OK);
    cr_assert_eq(ref_naive_backward(&p, t, c.q, c.k, c.v, o, lse, c.d_o, dq, dk, dv, NULL), AC_OK);
    double u = ac_unit_roundoff(t);
    worst[0] = max_scaled(o, c.o, s.e_o, nq, u);
    worst[1] = max_scaled(dq, c.dq, s.e_dq, nq, u);
    worst[2] = max_scaled(dk, c.dk, s.e_dk, nkv, u);
    worst[3] = max_scaled(dv, c.dv, s.e_dv, nkv, u);
    free(o);
    free(lse);
    free(dq);
    free(dk);
    free(dv);
    scales_free(&s);
    ts_case_free(&c);
}

Test(ref_scales, naive_f16_gradients_stay_within_two)
{
    double w[4];
    naive_grads_scaled(AC_F16, 431, w);
    cr_log_info("naive f16 scaled: O %.3f dQ %.3f dK %.3f dV %.3f", w[0], w[1], w[2], w[3]);
    cr_assert(w[1] > 0.05 && w[1] <= 2.0, "dQ %.3f", w[1]);
    cr_assert(w[2] > 0.05 && w[2] <= 2.0, "dK %.3f", w[2]);
    cr_assert(w[3] > 0.05 && w[3] <= 2.0, "dV %.3f", w[3]);
}

Test(ref_scales, naive_bf16_gradients_stay_within_two)
{
    double w[4];
    naive_grads_scaled(AC_BF16, 441, w);
    cr_log_info("naive bf16 scaled: O %.3f dQ %.3f dK %.3f dV %.3f", w[0], w[1], w[2], w[3]);
    cr_assert(w[1] > 0.05 && w[1] <= 2.0, "dQ %.3f", w[1]);
    cr_assert(w[2] > 0.05 && w[2] <= 2.0, "dK %.3f", w[2]);
    cr_assert(w[3] > 0.05 && w[3] <= 2.0, "dV %.3f", w[3]);
}

Test(ref_scales, rejects_bad_input)
{
    ac_problem p = ac_problem_dense(1, 1, 1, 1, 1, 1);
    double x = 1, e;
    ac_err err = {{0}};
    cr_assert_eq(ref_error_scales(&p, AC_F16, &x, &x, &x, &x, &x, NULL, NULL, NULL, NULL, NULL, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "NULL") != NULL, "message: %s", err.msg);
    cr_assert_eq(ref_error_scales(&p, (ac_dtype)7, &x, &x, &x, &x, &x, NULL, &e, NULL, NULL, NULL, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "dtype") != NULL, "message: %s", err.msg);
}

/* ---- the threaded scales against their serial predecessor ------------------ */

#include "scales_serial.h"

static void assert_rel_close(const double *got, const double *want, size_t n, double tol, const char *what, int which)
{
    for (size_t e = 0; e < n; e++)
        cr_assert(fabs(got[e] - want[e]) <= tol * fabs(want[e]), "case %d %s[%zu] = %.17g, serial %.17g", which, what,
                  e, got[e], want[e]);
}

static ac_problem serial_case(int which, ac_dtype *t)
{
    ac_problem p;
    switch (which) {
    case 0: /* causal bottom-right, GQA, several row blocks and key tiles */
        p = ac_problem_dense(1, 4, 2, 150, 600, 32);
        p.windowed = true;
        p.window_right = 0;
        p.align = AC_ALIGN_BOTTOM_RIGHT;
        *t = AC_BF16;
        break;
    case 1: /* window, BSHD, two batches */
        p = ac_problem_dense(2, 2, 1, 130, 300, 24);
        p.layout = AC_LAYOUT_BSHD;
        p.windowed = true;
        p.window_left = 70;
        p.window_right = 3;
        *t = AC_F32;
        break;
    default: /* no mask, varlen */
        p = ac_problem_dense(2, 2, 2, 100, 280, 16);
        static const int sq[2] = {100, 61}, sk[2] = {280, 257};
        p.seqlens_q = sq;
        p.seqlens_k = sk;
        *t = AC_F16;
        break;
    }
    return p;
}

Test(ref_scales, match_the_serial_implementation_to_rounding)
{
    for (int which = 0; which < 3; which++) {
        ac_dtype t;
        ac_problem p = serial_case(which, &t);
        ts_case c;
        ts_case_init(&c, &p, t, 450 + which);
        scales s = scales_alloc(&p), want = scales_alloc(&p);
        run_reference(&c, t, &s);
        ac_err err = {{0}};
        cr_assert_eq(ref_error_scales_serial(&p, t, c.q, c.k, c.v, c.o, c.lse, c.d_o, want.e_o, want.e_dq, want.e_dk,
                                             want.e_dv, &err),
                     AC_OK, "%s", err.msg);
        assert_rel_close(s.e_o, want.e_o, ac_q_elems(&p), 1e-12, "E_O", which);
        assert_rel_close(s.e_dq, want.e_dq, ac_q_elems(&p), 1e-12, "E_dQ", which);
        assert_rel_close(s.e_dk, want.e_dk, ac_kv_elems(&p), 1e-12, "E_dK", which);
        assert_rel_close(s.e_dv, want.e_dv, ac_kv_elems(&p), 1e-12, "E_dV", which);
        scales_free(&s);
        scales_free(&want);
        ts_case_free(&c);
    }
}

Test(ref_scales, results_do_not_depend_on_the_thread_count)
{
    ac_dtype t;
    ac_problem p = serial_case(0, &t);
    ts_case c;
    ts_case_init(&c, &p, t, 461);
    scales one = scales_alloc(&p), three = scales_alloc(&p);
    cr_assert_eq(setenv("ATTNCHECK_THREADS", "1", 1), 0);
    run_reference(&c, t, &one);
    cr_assert_eq(setenv("ATTNCHECK_THREADS", "3", 1), 0);
    run_reference(&c, t, &three);
    unsetenv("ATTNCHECK_THREADS");
    cr_assert(memcmp(one.e_o, three.e_o, ac_q_elems(&p) * sizeof(double)) == 0, "E_O differs");
    cr_assert(memcmp(one.e_dq, three.e_dq, ac_q_elems(&p) * sizeof(double)) == 0, "E_dQ differs");
    cr_assert(memcmp(one.e_dk, three.e_dk, ac_kv_elems(&p) * sizeof(double)) == 0, "E_dK differs");
    cr_assert(memcmp(one.e_dv, three.e_dv, ac_kv_elems(&p) * sizeof(double)) == 0, "E_dV differs");
    scales_free(&one);
    scales_free(&three);
    ts_case_free(&c);
}
