/* ref/test_bias.c — the additive bias's own properties (suite ref_bias): dBias
 * against central differences, dBias of a broadcast bias as the sum of the
 * full (B, Hq) bias's dBias over the broadcast dimensions, and its error
 * scale (zero exactly where no pair is visible, the dS' weights summed).
 * (The bias through the common checks — direct loop, FD of dQ, dK, dV, MPFR,
 * naive, threads — is in test_variants.c's setups.) */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref.h"
#include "test_support.h"

enum { TB_MAX = 2 * 4 * 7 * 7 };

/* f32 values in [-1.5, 1.5), every seventh -inf when with_inf, for n entries. */
static void tb_fill(float *bias, size_t n, uint64_t seed, bool with_inf)
{
    ts_rng r = {seed};
    double x[TB_MAX];
    ts_fill(&r, AC_F32, 0.75, x, n);
    for (size_t e = 0; e < n; e++)
        bias[e] = with_inf && e % 7 == 3 ? -INFINITY : (float)x[e];
}

static double loss(ts_case *c)
{
    const ac_problem *p = &c->p;
    cr_assert_eq(ref_forward_fp64(p, c->q, c->k, c->v, c->o, c->lse, NULL), AC_OK);
    double sum = 0.0;
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < p->heads_q; h++)
            for (int i = 0; i < ac_seqlen_q_of(p, b); i++)
                for (int cc = 0; cc < ac_head_dim_v(p); cc++)
                    sum += c->d_o[ac_o_index(p, b, h, i, cc)] * c->o[ac_o_index(p, b, h, i, cc)];
    return sum;
}

static double *dbias_of(ts_case *c)
{
    ac_problem *p = &c->p;
    double *dbias = ts_alloc(ac_bias_elems(p));
    ac_err err = {{0}};
    loss(c);
    cr_assert_eq(ref_backward_fp64(p, c->q, c->k, c->v, c->o, c->lse, c->d_o, c->dq, c->dk, c->dv, c->delta, &err),
                 AC_OK, "%s", err.msg);
    cr_assert_eq(ref_backward_dbias_fp64(p, c->q, c->k, c->v, c->lse, c->d_o, c->delta, dbias, &err), AC_OK, "%s",
                 err.msg);
    return dbias;
}

/* Every broadcast shape on masked and varlen problems: dBias_e against
 * (L(bias_e + h) - L(bias_e - h)) / 2h, h = 2^-12 (as f32 reaches it). */
Test(ref_bias, dbias_matches_central_differences_in_every_broadcast_shape)
{
    static const int kinds[] = {TS_NONE, TS_CAUSAL_BR, TS_VARLEN, TS_DENSE, TS_GQA, TS_BSHD};
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
        for (int shape = 0; shape < 4; shape++) {
            ac_problem p = ts_problem(kinds[k]);
            float bias[TB_MAX];
            p.bias = bias, p.bias_dtype = AC_F32;
            p.bias_batch = shape & 1 ? p.batch : 1, p.bias_heads = shape & 2 ? p.heads_q : 1;
            p.softcap = shape == 3 ? 2.0 : 0.0; /* dBias is the gradient after the softcap: no t' */
            tb_fill(bias, ac_bias_elems(&p), 40 + shape, true);
            ts_case c;
            ts_case_init(&c, &p, AC_F16, 800 + kinds[k]);
            double *dbias = dbias_of(&c);
            for (size_t e = 0; e < ac_bias_elems(&p); e++) {
                float at = bias[e], step = 0x1p-12f;
                if (at == -INFINITY) {
                    cr_assert_eq(dbias[e], 0.0, "%s shape %d: a hidden pair's dBias is 0", ts_kind_name(kinds[k]),
                                 shape);
                    continue;
                }
                float hi = bias[e] = at + step; /* the f32 values reached (a binade edge rounds them) */
                double up = loss(&c);
                float lo = bias[e] = at - step;
                double down = loss(&c);
                bias[e] = at;
                double fd = (up - down) / ((double)hi - (double)lo);
                cr_assert(fabs(fd - dbias[e]) <= 1e-6 * fmax(1.0, fabs(dbias[e])),
                          "%s shape %d entry %zu: dBias "
                          "%.12g, differences %.12g",
                          ts_kind_name(kinds[k]), shape, e, dbias[e], fd);
            }
            free(dbias);
            ts_case_free(&c);
        }
}

/* A (1, Hq) bias's dBias is the (B, Hq) bias's dBias (the same values in each
 * batch) summed over the batches: the broadcast sums exactly what it copies. */
Test(ref_bias, a_broadcast_bias_gets_the_sum_of_the_full_biass_gradient)
{
    ac_problem p = ts_problem(TS_VARLEN); /* B = 2, lengths differ: one batch has fewer rows */
    float one[TB_MAX], full[TB_MAX];
    size_t per = (size_t)p.heads_q * p.seqlen_q * p.seqlen_k;
    tb_fill(one, per, 9, false);
    memcpy(full, one, per * sizeof(float));
    memcpy(full + per, one, per * sizeof(float));
    ts_case c;
    p.bias = one, p.bias_dtype = AC_F32, p.bias_batch = 1, p.bias_heads = p.heads_q;
    ts_case_init(&c, &p, AC_BF16, 77);
    double *summed = dbias_of(&c);
    c.p.bias = full, c.p.bias_batch = p.batch;
    double *each = dbias_of(&c);
    for (size_t e = 0; e < per; e++)
        cr_assert(fabs(summed[e] - (each[e] + each[per + e])) <= 1e-15 * (fabs(each[e]) + fabs(each[per + e])),
                  "entry %zu: broadcast %.17g, batches %.17g + %.17g", e, summed[e], each[e], each[per + e]);
    free(summed);
    free(each);
    ts_case_free(&c);
}

/* E_dBias: 0 exactly where no summed pair is visible (the -inf entries, the
 * masked and padding ones), positive where one is, in the bias dtype's units:
 * an f32 bias's scale is u_t / u_f32 times a t-dtype bias's (less their floors). */
Test(ref_bias, the_dbias_scale_is_zero_where_nothing_is_visible_and_in_the_bias_dtypes_units)
{
    ac_problem p = ts_problem(TS_CAUSAL_BR); /* rows 0, 1 see no key */
    float bias[TB_MAX];
    uint16_t bias_t[TB_MAX];
    p.bias = bias, p.bias_dtype = AC_F32, p.bias_batch = 1, p.bias_heads = p.heads_q;
    size_t n = ac_bias_elems(&p);
    tb_fill(bias, n, 3, true);
    for (size_t x = 0; x < n; x++) /* values both dtypes hold exactly: the same problem in either */
        bias_t[x] = (uint16_t)ac_narrow(AC_F16, bias[x]), bias[x] = (float)ac_widen(AC_F16, bias_t[x]);
    ts_case c;
    ts_case_init(&c, &p, AC_F16, 5);
    loss(&c);
    size_t no = ac_o_elems(&p), nq = ac_q_elems(&p), nkv = ac_kv_elems(&p);
    double *e[4] = {ts_alloc(no), ts_alloc(nq), ts_alloc(nkv), ts_alloc(nkv)};
    double *e_f32 = ts_alloc(n), *e_f16 = ts_alloc(n);
    ac_err err = {{0}};
    cr_assert_eq(
        ref_error_scales_dbias(&p, AC_F16, c.q, c.k, c.v, c.o, c.lse, c.d_o, e[0], e[1], e[2], e[3], e_f32, &err),
        AC_OK, "%s", err.msg);
    c.p.bias = bias_t, c.p.bias_dtype = AC_F16;
    p = c.p;
    loss(&c);
    cr_assert_eq(
        ref_error_scales_dbias(&p, AC_F16, c.q, c.k, c.v, c.o, c.lse, c.d_o, e[0], e[1], e[2], e[3], e_f16, &err),
        AC_OK, "%s", err.msg);
    double ratio = ac_unit_roundoff(AC_F16) / ac_unit_roundoff(AC_F32);
    double tau32 = ac_min_subnormal(AC_F32) / (2 * ac_unit_roundoff(AC_F32));
    double tau16 = ac_min_subnormal(AC_F16) / (2 * ac_unit_roundoff(AC_F16));
    for (int h = 0; h < p.heads_q; h++)
        for (int i = 0; i < p.seqlen_q; i++)
            for (int j = 0; j < p.seqlen_k; j++) {
                size_t x = ac_bias_index(&p, 0, h, i, j);
                bool vis = ac_visible(&p, 0, h, i, j);
                cr_assert_eq(e_f32[x] > 0.0, vis, "(%d,%d,%d): E %g, visible %d", h, i, j, e_f32[x], vis);
                if (vis)
                    cr_assert(fabs((e_f32[x] - tau32) - ratio * (e_f16[x] - tau16)) <= 1e-12 * e_f32[x],
                              "(%d,%d,%d): f32 units %.17g, f16 units %.17g", h, i, j, e_f32[x], e_f16[x]);
            }
    for (int i = 0; i < 4; i++)
        free(e[i]);
    free(e_f32), free(e_f16);
    ts_case_free(&c);
}
