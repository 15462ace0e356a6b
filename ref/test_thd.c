/* ref/test_thd.c — the reference tiers on the packed THD layout (suite
 * ref_thd): a THD problem and its padded twin give the same values in every
 * tier, and cu_seqlens are validated. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "naive_scalar.h"
#include "ref.h"
#include "ref_gpu.h"
#include "test_support.h"

/* ---- the packed THD layout -------------------------------------------------------------
 * A THD problem and its padded BSHD twin (the same sequences, seqlens instead of
 * cu_seqlens): every tier gives the same values at every real row and key. */

typedef struct {
    ac_problem thd, pad;
    int cu_q[4], cu_k[4], lens_q[3], lens_k[3];
} tv_twins;

/* 3 sequences of lengths (5, 0, 7) queries and (6, 4, 0) keys, grids 7 x 6, GQA 4:2, d 4, d_v 3. */
static void make_twins(tv_twins *t)
{
    static const int lq[3] = {5, 0, 7}, lk[3] = {6, 4, 0};
    memset(t, 0, sizeof *t);
    for (int b = 0; b < 3; b++) {
        t->lens_q[b] = lq[b], t->lens_k[b] = lk[b];
        t->cu_q[b + 1] = t->cu_q[b] + lq[b], t->cu_k[b + 1] = t->cu_k[b] + lk[b];
    }
    t->pad = ac_problem_dense(3, 4, 2, 7, 6, 4);
    t->pad.layout = AC_LAYOUT_BSHD;
    t->pad.head_dim_v = 3;
    t->pad.windowed = true, t->pad.window_left = 3, t->pad.window_right = 1, t->pad.align = AC_ALIGN_BOTTOM_RIGHT;
    t->thd = t->pad;
    t->pad.seqlens_q = t->lens_q, t->pad.seqlens_k = t->lens_k;
    t->thd.layout = AC_LAYOUT_THD;
    t->thd.cu_seqlens_q = t->cu_q, t->thd.cu_seqlens_k = t->cu_k;
}

/* The padded twin's tensor from the packed one: real rows copied, padding random. */
static double *pad_of(const tv_twins *t, ac_tensor_kind kind, const double *packed, ts_rng *r)
{
    const ac_problem *a = &t->thd, *p = &t->pad;
    double *out = ts_alloc(ac_tensor_elems(p, kind));
    ts_fill(r, AC_F16, 1.0, out, ac_tensor_elems(p, kind));
    bool q_side = kind == AC_TENSOR_Q || kind == AC_TENSOR_O;
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < (q_side ? p->heads_q : p->heads_kv); h++)
            for (int s = 0; s < (q_side ? ac_seqlen_q_of(p, b) : ac_seqlen_k_of(p, b)); s++)
                for (int c = 0; c < ac_tensor_dim(p, kind); c++)
                    out[ac_tensor_index(p, kind, b, h, s, c)] = packed[ac_tensor_index(a, kind, b, h, s, c)];
    return out;
}

/* Every real element of a kind (or LSE-like with kind < 0) agrees to 1e-13 relative. */
static void assert_twins_agree(const tv_twins *t, int kind, const double *thd, const double *pad, const char *what)
{
    const ac_problem *a = &t->thd, *p = &t->pad;
    bool q_side = kind < 0 || kind == AC_TENSOR_Q || kind == AC_TENSOR_O;
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < (q_side ? p->heads_q : p->heads_kv); h++)
            for (int s = 0; s < (q_side ? ac_seqlen_q_of(p, b) : ac_seqlen_k_of(p, b)); s++)
                for (int c = 0; c < (kind < 0 ? 1 : ac_tensor_dim(p, (ac_tensor_kind)kind)); c++) {
                    double x = kind < 0 ? thd[ac_lse_index(a, b, h, s)] : thd[ac_tensor_index(a, kind, b, h, s, c)];
                    double y = kind < 0 ? pad[ac_lse_index(p, b, h, s)] : pad[ac_tensor_index(p, kind, b, h, s, c)];
                    cr_assert(x == y || fabs(x - y) <= 1e-13 * fmax(1.0, fabs(y)),
                              "%s (%d,%d,%d,%d): THD %.17g, "
                              "padded %.17g",
                              what, b, h, s, c, x, y);
                }
}

Test(ref_thd, thd_gives_its_padded_twins_values_in_every_tier)
{
    tv_twins t;
    make_twins(&t);
    ac_problem *a = &t.thd, *p = &t.pad;
    cr_assert_eq(ac_problem_validate(a, 0, NULL), AC_OK);
    cr_assert_eq(ac_q_elems(a), (size_t)12 * 4 * 4, "THD stores total_q = 12 rows of 4 heads");
    cr_assert_eq(ac_lse_elems(a), (size_t)4 * 12, "LSE is (Hq, total_q)");
    ts_case c; /* the packed inputs */
    ts_case_init(&c, a, AC_F16, 1001);
    ts_rng r = {77};
    double *q = pad_of(&t, AC_TENSOR_Q, c.q, &r), *k = pad_of(&t, AC_TENSOR_K, c.k, &r);
    double *v = pad_of(&t, AC_TENSOR_V, c.v, &r), *d_o = pad_of(&t, AC_TENSOR_O, c.d_o, &r);
    enum { O, L, DQ, DK, DV, DL, EO, EQ, EK, EV, EL, NO, NL, NQ, NK, NV, N };
    const int kind[N] = {AC_TENSOR_O, -1,          AC_TENSOR_Q, AC_TENSOR_K, AC_TENSOR_V, -1,
                         AC_TENSOR_O, AC_TENSOR_Q, AC_TENSOR_K, AC_TENSOR_V, -1,          AC_TENSOR_O,
                         -1,          AC_TENSOR_Q, AC_TENSOR_K, AC_TENSOR_V};
    double *x[2][N];
    for (int w = 0; w < 2; w++) {
        const ac_problem *pp = w ? p : a;
        const double *qq = w ? q : c.q, *kk = w ? k : c.k, *vv = w ? v : c.v, *dd = w ? d_o : c.d_o;
        for (int i = 0; i < N; i++)
            x[w][i] = ts_alloc(kind[i] < 0 ? ac_lse_elems(pp) : ac_tensor_elems(pp, (ac_tensor_kind)kind[i]));
        cr_assert_eq(ref_forward_fp64(pp, qq, kk, vv, x[w][O], x[w][L], NULL), AC_OK);
        cr_assert_eq(
            ref_backward_fp64(pp, qq, kk, vv, x[w][O], x[w][L], dd, x[w][DQ], x[w][DK], x[w][DV], x[w][DL], NULL),
            AC_OK);
        cr_assert_eq(ref_error_scales(pp, AC_F16, qq, kk, vv, x[w][O], x[w][L], dd, x[w][EO], x[w][EQ], x[w][EK],
                                      x[w][EV], NULL),
                     AC_OK);
        cr_assert_eq(ref_lse_error_scale(pp, qq, kk, x[w][L], x[w][EL], NULL), AC_OK);
        cr_assert_eq(ref_naive_forward(pp, AC_F16, qq, kk, vv, x[w][NO], x[w][NL], NULL), AC_OK);
        cr_assert_eq(
            ref_naive_backward(pp, AC_F16, qq, kk, vv, x[w][NO], x[w][NL], dd, x[w][NQ], x[w][NK], x[w][NV], NULL),
            AC_OK);
    }
    const char *names[N] = {"O",    "LSE",  "dQ",    "dK",      "dV",        "D",        "E_O",      "E_dQ",
                            "E_dK", "E_dV", "E_lse", "naive O", "naive LSE", "naive dQ", "naive dK", "naive dV"};
    for (int i = 0; i < N; i++)
        assert_twins_agree(&t, kind[i], x[0][i], x[1][i], names[i]);
    ac_cert cert;
    cr_assert_eq(ref_certify(a, AC_F16, c.q, c.k, c.v, x[0][O], x[0][L], 1000, 3, AC_DEFAULT_MPFR_PREC, &cert, NULL),
                 AC_OK);
    cr_assert(cert.certified && cert.rows_checked == 4 * 12, "%zu rows (48 real), %g ulp", cert.rows_checked,
              cert.max_ulp_o);
    ac_err err = {{0}};
    cr_assert_eq(ref_gpu_supports(a, &err), AC_ERR_INPUT);
    cr_assert_not_null(strstr(err.msg, "THD"), "%s", err.msg);
    for (int w = 0; w < 2; w++)
        for (int i = 0; i < N; i++)
            free(x[w][i]);
    free(q), free(k), free(v), free(d_o);
    ts_case_free(&c);
}

Test(ref_thd, thd_cu_seqlens_are_checked)
{
    tv_twins t;
    make_twins(&t);
    ac_err err = {{0}};
    t.cu_q[0] = 1;
    cr_assert_eq(ac_problem_validate(&t.thd, 0, &err), AC_ERR_INPUT);
    cr_assert_not_null(strstr(err.msg, "cu_seqlens_q[0]"), "%s", err.msg);
    make_twins(&t);
    t.cu_k[2] = 20; /* sequence 1 of 16 keys, past the grid of 6; sequence 2 negative */
    cr_assert_eq(ac_problem_validate(&t.thd, 0, &err), AC_ERR_INPUT);
    cr_assert_not_null(strstr(err.msg, "cu_seqlens_k: sequence 1"), "%s", err.msg);
    make_twins(&t);
    t.thd.seqlens_q = t.lens_q;
    cr_assert_eq(ac_problem_validate(&t.thd, 0, &err), AC_ERR_INPUT);
    cr_assert_not_null(strstr(err.msg, "not padded lengths"), "%s", err.msg);
}
