/* ref/test_variants.c — the reference tiers on the attention variants
 * (ref/variants.h), suite ref_variants.  Every variant setup below runs on
 * several mask kinds through the same checks:
 *   the fp64 forward equals a direct double loop written from the definitions;
 *   the fp64 backward equals central differences of L = sum dO * O;
 *   the MPFR path certifies the fp64 one (within 1/64 ulp);
 *   the blocked naive baseline equals its scalar oracle bit for bit;
 *   the fp64 stages, scales and naive do not depend on the thread count;
 * then each variant's own properties. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "naive_scalar.h"
#include "ref.h"
#include "ref_gpu.h"
#include "test_support.h"
#include "variants.h"

/* ---- the setups: a variant applied to one of test_support.h's small problems ---- */

typedef struct {
    const char *name;
    const char *variant; /* the name the GPU tier's refusal must give */
    double softcap;
    bool sinks;
    int head_dim_v; /* 0: d */
    int alibi; /* 0: none, 1: slopes (Hq), 2: (B, Hq) */
    int bias; /* 0: none, 1: (1, Hq) f32 with -inf entries, 2: (B, 1) bf16 */
    int sink_tokens; /* > 0: a window of left edge 1 where the kind has none */
    double dropout; /* p > 0: the keep mask tv_keep */
} tv_setup;

static const tv_setup setups[] = {
    {"softcap 2", "softcap", 2.0, false, 0, 0, 0, 0, 0.0},
    {"softcap 0.25 (saturating)", "softcap", 0.25, false, 0, 0, 0, 0, 0.0},
    {"sinks", "sinks", 0.0, true, 0, 0, 0, 0, 0.0},
    {"sinks and softcap 1", "softcap", 1.0, true, 0, 0, 0, 0, 0.0},
    {"d_v 3 < d_qk 4", "dv", 0.0, false, 3, 0, 0, 0, 0.0},
    {"d_v 6 > d_qk 4, sinks", "sinks", 0.0, true, 6, 0, 0, 0, 0.0},
    {"alibi (Hq)", "alibi", 0.0, false, 0, 1, 0, 0, 0.0},
    {"alibi (B, Hq), softcap 2, sinks", "softcap", 2.0, true, 0, 2, 0, 0, 0.0},
    {"bias (1, Hq) f32 with -inf entries", "bias", 0.0, false, 0, 0, 1, 0, 0.0},
    {"bias (B, 1) bf16, softcap 1, alibi", "softcap", 1.0, false, 0, 1, 2, 0, 0.0},
    {"sink tokens 2, sinks", "sinks", 0.0, true, 0, 0, 0, 2, 0.0},
    {"sink tokens 3", "sink-tokens", 0.0, false, 0, 0, 0, 3, 0.0},
    {"sink tokens 1, bias (1, Hq), softcap 2", "softcap", 2.0, false, 0, 0, 1, 1, 0.0},
    {"dropout 0.3", "dropout", 0.0, false, 0, 0, 0, 0, 0.3},
    {"dropout 0.9, softcap 2, sinks, bias (1, Hq)", "softcap", 2.0, true, 0, 0, 1, 0, 0.9},
};

/* Bias values for every problem below (at most 2 x 4 x 150 x 300 entries):
 * f32 in [-2, 2) with about one in eleven -inf, and their bf16 roundings
 * (finite).  Filled once from a fixed hash. */
enum { TV_BIAS_MAX = 2 * 4 * 150 * 300 };
static float tv_bias_f32[TV_BIAS_MAX];
static uint16_t tv_bias_bf16[TV_BIAS_MAX];

static void tv_bias_fill(void)
{
    static bool done;
    for (size_t x = 0; !done && x < TV_BIAS_MAX; x++) {
        uint64_t z = (x + 1) * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 29)) * 0xBF58476D1CE4E5B9ull;
        float v = (float)((double)(z >> 11) * 0x1p-53 * 4.0 - 2.0);
        tv_bias_f32[x] = z % 11 == 0 ? -INFINITY : v;
        tv_bias_bf16[x] = (uint16_t)ac_narrow(AC_BF16, v);
    }
    done = true;
}

/* A keep mask for dropout: about 1 - p kept, from the same hash (p_keep in 1/16ths). */
static uint8_t tv_keep[TV_BIAS_MAX];

static void tv_set_dropout(ac_problem *p, double drop)
{
    if (drop == 0.0)
        return;
    for (size_t x = 0; x < TV_BIAS_MAX; x++) {
        uint64_t z = (x + 7) * 0xD1B54A32D192ED03ull;
        z = (z ^ (z >> 31)) * 0x94D049BB133111EBull;
        tv_keep[x] = (double)(z >> 11) * 0x1p-53 >= drop;
    }
    p->dropout_p = drop, p->dropout_seed = 17, p->dropout_keep = tv_keep;
}

static void tv_set_bias(ac_problem *p, int kind)
{
    tv_bias_fill();
    if (kind == 1)
        p->bias = tv_bias_f32, p->bias_dtype = AC_F32, p->bias_batch = 1, p->bias_heads = p->heads_q;
    if (kind == 2)
        p->bias = tv_bias_bf16, p->bias_dtype = AC_BF16, p->bias_batch = p->batch, p->bias_heads = 1;
}

/* ALiBi slopes: the paper's for 4 heads (2^-2, 2^-4, ...) with one large
 * (a distance-1 key loses 3), and per batch a second row. */
static const float tv_alibi[8] = {0.25f, 0.0625f, 3.0f, 0x1p-8f, 1.5f, 0.5f, 0.125f, 0.03125f};

/* One logit per head (test_support.h's problems have at most 4 heads): one
 * beating every score, one far below, two ordinary. */
static const float tv_sinks[4] = {0.75f, 12.0f, -30.0f, -1.5f};
enum { N_SETUPS = (int)(sizeof setups / sizeof setups[0]) };

static const int kinds[] = {TS_NONE, TS_CAUSAL_BR, TS_WINDOW_TL, TS_VARLEN, TS_DENSE, TS_GQA, TS_BSHD};
enum { N_KINDS = (int)(sizeof kinds / sizeof kinds[0]) };

static ac_problem tv_problem(int kind, const tv_setup *s)
{
    ac_problem p = ts_problem(kind);
    p.softcap = s->softcap;
    p.sinks = s->sinks ? tv_sinks : NULL;
    p.head_dim_v = s->head_dim_v;
    if (s->alibi) { /* (B, Hq) only with B <= 2: test_support.h's problems have at most 2 */
        p.alibi_slopes = tv_alibi;
        p.alibi_batch = s->alibi == 2 ? p.batch : 1;
    }
    tv_set_bias(&p, s->bias);
    tv_set_dropout(&p, s->dropout);
    if (s->sink_tokens) { /* sink tokens need a window with a finite left edge: give one where there is none */
        if (!p.windowed)
            p.windowed = true, p.window_right = AC_WINDOW_INF;
        if (p.window_left == AC_WINDOW_INF)
            p.window_left = 1;
        p.sink_tokens = s->sink_tokens;
    }
    return p;
}

/* ---- a direct forward, one row in double loops, from the definitions ----------- */

/* o_row (d) and the returned LSE of row i of (b, h); P_ij into p_row (Nk). */
static double tv_direct_row(const ac_problem *p, const double *q, const double *k, const double *v, int b, int h, int i,
                            double *o_row, double *p_row)
{
    int nk = p->seqlen_k, d = p->head_dim, hk = ac_kv_head_of(p, h);
    double sink = p->sinks ? p->sinks[h] : -INFINITY, m = sink; /* the sink: in the max and the sum, no value */
    for (int j = 0; j < nk; j++) {
        p_row[j] = -INFINITY;
        if (!ac_visible(p, b, h, i, j)) /* window, mask, and a -inf bias */
            continue;
        double s = 0.0;
        for (int c = 0; c < d; c++)
            s += q[ac_q_index(p, b, h, i, c)] * k[ac_kv_index(p, b, hk, j, c)];
        s *= p->scale;
        if (p->softcap != 0.0)
            s = p->softcap * tanh(s / p->softcap);
        if (p->alibi_slopes) { /* bottom-right: distance 0 where i + nk_b - nq_b = j */
            double slope = p->alibi_slopes[(p->alibi_batch > 1 ? b : 0) * p->heads_q + h];
            s -= slope * fabs((double)(i + ac_seqlen_k_of(p, b) - ac_seqlen_q_of(p, b) - j));
        }
        if (p->bias) { /* (mb, mh, i, j), broadcast where the bias has one batch or head */
            size_t mb = p->bias_batch > 1 ? (size_t)b : 0, mh = p->bias_heads > 1 ? (size_t)h : 0;
            size_t at = ((mb * (p->bias_heads > 1 ? p->bias_heads : 1) + mh) * p->seqlen_q + i) * p->seqlen_k + j;
            s += p->bias_dtype == AC_F32 ? ((const float *)p->bias)[at]
                                         : ac_widen(AC_BF16, ((const uint16_t *)p->bias)[at]);
        }
        p_row[j] = s;
        m = fmax(m, s);
    }
    for (int c = 0; c < ac_head_dim_v(p); c++)
        o_row[c] = 0.0;
    if (m == -INFINITY) {
        for (int j = 0; j < nk; j++)
            p_row[j] = 0.0;
        return -INFINITY;
    }
    double l = p->sinks ? exp(sink - m) : 0.0;
    for (int j = 0; j < nk; j++)
        l += p_row[j] = p_row[j] == -INFINITY ? 0.0 : exp(p_row[j] - m);
    for (int j = 0; j < nk; j++) {
        p_row[j] /= l;
        double keep = 1.0; /* dropout after the softmax: kept / (1 - p), dropped 0 */
        if (p->dropout_p > 0.0)
            keep = p->dropout_keep[(((size_t)b * p->heads_q + h) * p->seqlen_q + i) * p->seqlen_k + j]
                ? 1.0 / (1.0 - p->dropout_p)
                : 0.0;
        for (int c = 0; c < ac_head_dim_v(p) && p_row[j] != 0.0; c++)
            o_row[c] += p_row[j] * keep * v[ac_v_index(p, b, hk, j, c)];
    }
    return m + log(l);
}

static void check_forward_direct(const tv_setup *s, int kind)
{
    ac_problem p = tv_problem(kind, s);
    ts_case c;
    ts_case_init(&c, &p, AC_F16, 300 + kind);
    ac_err err = {{0}};
    cr_assert_eq(ref_forward_fp64(&p, c.q, c.k, c.v, c.o, c.lse, &err), AC_OK, "%s/%s: %s", s->name, ts_kind_name(kind),
                 err.msg);
    double *o_row = ts_alloc((size_t)ac_head_dim_v(&p)), *p_row = ts_alloc((size_t)p.seqlen_k);
    for (int b = 0; b < p.batch; b++)
        for (int h = 0; h < p.heads_q; h++)
            for (int i = 0; i < ac_seqlen_q_of(&p, b); i++) {
                double lse = tv_direct_row(&p, c.q, c.k, c.v, b, h, i, o_row, p_row);
                double got = c.lse[ac_lse_index(&p, b, h, i)];
                cr_assert(lse == got || fabs(lse - got) <= 1e-14 * fmax(1.0, fabs(lse)),
                          "%s/%s row %d: LSE %.17g, "
                          "direct %.17g",
                          s->name, ts_kind_name(kind), i, got, lse);
                for (int cc = 0; cc < ac_head_dim_v(&p); cc++) {
                    double x = c.o[ac_o_index(&p, b, h, i, cc)];
                    cr_assert(fabs(x - o_row[cc]) <= 1e-13, "%s/%s O(%d,%d,%d,%d) %.17g, direct %.17g", s->name,
                              ts_kind_name(kind), b, h, i, cc, x, o_row[cc]);
                }
            }
    free(o_row);
    free(p_row);
    ts_case_free(&c);
}

Test(ref_variants, fp64_forward_matches_a_direct_loop_from_the_definitions)
{
    for (int s = 0; s < N_SETUPS; s++)
        for (int k = 0; k < N_KINDS; k++)
            check_forward_direct(&setups[s], kinds[k]);
}

/* ---- the backward against central differences ------------------------------------ */

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

/* worst |fd - grad| / (|grad| + 1e-3 max |grad|) over x's entries */
static double fd_worst(ts_case *c, double *x, const double *grad, size_t n)
{
    double gmax = 0.0, worst = 0.0;
    for (size_t e = 0; e < n; e++)
        gmax = fmax(gmax, fabs(grad[e]));
    for (size_t e = 0; e < n && gmax > 0.0; e++) {
        double keep = x[e], step = 1e-6 * fmax(1.0, fabs(keep));
        x[e] = keep + step;
        double up = loss(c);
        x[e] = keep - step;
        double down = loss(c);
        x[e] = keep;
        worst = fmax(worst, fabs((up - down) / (2.0 * step) - grad[e]) / (fabs(grad[e]) + 1e-3 * gmax));
    }
    return worst;
}

/* dSink against central differences of L over each sink logit: the logits are
 * f32, so the step is 2^-12 (exact) and the tolerance the differences' own
 * error, h^2 L''' ~ 1e-8 relative. */
static void check_dsink(ts_case *c)
{
    ac_problem *p = &c->p;
    double dsink[4];
    ac_err err = {{0}};
    cr_assert_eq(ref_backward_params_fp64(p, c->lse, c->delta, dsink, &err), AC_OK, "%s", err.msg);
    float logits[4];
    memcpy(logits, p->sinks, sizeof logits);
    const float *keep = p->sinks;
    p->sinks = logits;
    for (int h = 0; h < p->heads_q; h++) {
        float step = 0x1p-12f, at = logits[h];
        logits[h] = at + step;
        double up = loss(c);
        logits[h] = at - step;
        double down = loss(c);
        logits[h] = at;
        double fd = (up - down) / (2.0 * step);
        cr_assert(fabs(fd - dsink[h]) <= 1e-6 * fmax(1.0, fabs(dsink[h])), "head %d: dSink %.12g, differences %.12g", h,
                  dsink[h], fd);
    }
    p->sinks = keep;
    loss(c); /* the forward of the original logits again */
}

static void check_backward_fd(int s0, int s1)
{
    for (int s = s0; s < s1; s++)
        for (int k = 0; k < N_KINDS; k++) {
            ac_problem p = tv_problem(kinds[k], &setups[s]);
            ts_case c;
            ts_case_init(&c, &p, AC_F16, 400 + kinds[k]);
            loss(&c);
            ac_err err = {{0}};
            cr_assert_eq(ref_backward_fp64(&p, c.q, c.k, c.v, c.o, c.lse, c.d_o, c.dq, c.dk, c.dv, c.delta, &err),
                         AC_OK, "%s", err.msg);
            double wq = fd_worst(&c, c.q, c.dq, ac_q_elems(&p)), wk = fd_worst(&c, c.k, c.dk, ac_kv_elems(&p));
            double wv = fd_worst(&c, c.v, c.dv, ac_v_elems(&p));
            if (p.sinks)
                check_dsink(&c);
            /* 1e-5: a saturated tanh's curvature (1/c^3) costs the differences a digit */
            cr_assert(wq < 1e-5 && wk < 1e-5 && wv < 1e-5,
                      "%s/%s: finite differences off by dQ %.2g dK %.2g "
                      "dV %.2g",
                      setups[s].name, ts_kind_name(kinds[k]), wq, wk, wv);
            ts_case_free(&c);
        }
}

/* The first seven setups (softcap, sinks, d_v, ALiBi), then the rest: each test under a second. */
enum { TV_FIRST_HALF = 7 };
Test(ref_variants, fp64_backward_matches_central_differences) { check_backward_fd(0, TV_FIRST_HALF); }
Test(ref_variants, fp64_backward_matches_central_differences_with_bias_sink_tokens_dropout)
{
    check_backward_fd(TV_FIRST_HALF, N_SETUPS);
}

/* ---- MPFR certifies the fp64 reference ----------------------------------------------- */

Test(ref_variants, mpfr_certifies_the_fp64_reference)
{
    for (int s = 0; s < N_SETUPS; s++)
        for (int k = 0; k < N_KINDS; k++) {
            ac_problem p = tv_problem(kinds[k], &setups[s]);
            ts_case c;
            ts_case_init(&c, &p, AC_BF16, 500 + kinds[k]);
            cr_assert_eq(ref_forward_fp64(&p, c.q, c.k, c.v, c.o, c.lse, NULL), AC_OK);
            ac_cert cert;
            ac_err err = {{0}};
            cr_assert_eq(ref_certify(&p, AC_F32, c.q, c.k, c.v, c.o, c.lse, 1000, 7, AC_DEFAULT_MPFR_PREC, &cert, &err),
                         AC_OK, "%s", err.msg);
            cr_assert(cert.certified && cert.rows_checked > 0 && cert.max_abs_lse < 1e-12,
                      "%s/%s: %zu rows, O %g f32 ulp, LSE %g", setups[s].name, ts_kind_name(kinds[k]),
                      cert.rows_checked, cert.max_ulp_o, cert.max_abs_lse);
            ts_case_free(&c);
        }
}

/* ---- the naive baseline: blocked equals scalar ------------------------------------- */

static void assert_same_doubles(const char *what, const char *where, const double *a, const double *b, size_t n)
{
    for (size_t e = 0; e < n; e++)
        cr_assert(memcmp(&a[e], &b[e], sizeof a[e]) == 0, "%s %s[%zu]: blocked %a, scalar %a", where, what, e, a[e],
                  b[e]);
}

Test(ref_variants, naive_blocked_equals_the_scalar_oracle_bit_for_bit)
{
    for (int s = 0; s < N_SETUPS; s++)
        for (int k = 0; k < N_KINDS; k++)
            for (int t = 0; t < AC_E4M3; t++) { /* 16- and 32-bit; fp8: test_fp8.c */
                ac_problem p = tv_problem(kinds[k], &setups[s]);
                ts_case c;
                ts_case_init(&c, &p, (ac_dtype)t, 600 + kinds[k]);
                size_t nq = ac_q_elems(&p), nkv = ac_kv_elems(&p), nl = ac_lse_elems(&p);
                size_t no = ac_o_elems(&p), nv = ac_v_elems(&p);
                double *x[10];
                size_t sizes[10] = {no, nl, nq, nkv, nv, no, nl, nq, nkv, nv};
                for (int i = 0; i < 10; i++)
                    x[i] = ts_alloc(sizes[i]);
                cr_assert_eq(ref_naive_forward(&p, (ac_dtype)t, c.q, c.k, c.v, x[0], x[1], NULL), AC_OK);
                cr_assert_eq(
                    ref_naive_backward(&p, (ac_dtype)t, c.q, c.k, c.v, x[0], x[1], c.d_o, x[2], x[3], x[4], NULL),
                    AC_OK);
                cr_assert_eq(ref_naive_forward_scalar(&p, (ac_dtype)t, c.q, c.k, c.v, x[5], x[6], NULL), AC_OK);
                cr_assert_eq(ref_naive_backward_scalar(&p, (ac_dtype)t, c.q, c.k, c.v, x[5], x[6], c.d_o, x[7], x[8],
                                                       x[9], NULL),
                             AC_OK);
                char where[128];
                snprintf(where, sizeof where, "%s/%s/%s", setups[s].name, ts_kind_name(kinds[k]),
                         ac_dtype_name((ac_dtype)t));
                const char *names[5] = {"O", "LSE", "dQ", "dK", "dV"};
                for (int i = 0; i < 5; i++)
                    assert_same_doubles(names[i], where, x[i], x[5 + i], sizes[i]);
                for (int i = 0; i < 10; i++)
                    free(x[i]);
                ts_case_free(&c);
            }
}

/* ---- thread counts ---------------------------------------------------------------------- */

/* Every fp64 output, scale and naive output of a larger variant problem, at
 * ATTNCHECK_THREADS=threads, into one array (8 tensors back to back). */
static double *all_outputs(const ac_problem *p, const ts_case *c, const char *threads, size_t *n_out)
{
    setenv("ATTNCHECK_THREADS", threads, 1);
    size_t nq = ac_q_elems(p), nkv = ac_kv_elems(p), nl = ac_lse_elems(p), no = ac_o_elems(p), nv = ac_v_elems(p);
    size_t nb = ac_bias_elems(p), n = 3 * no + 3 * nq + 3 * nkv + 3 * nv + 4 * nl + 2 * nb;
    double *all = ts_alloc(n), *at = all;
    double *o = at, *lse = (at += no), *dq = (at += nl), *dk = (at += nq), *dv = (at += nkv), *delta = (at += nv);
    double *e_o = (at += nl), *e_dq = (at += no), *e_dk = (at += nq), *e_dv = (at += nkv);
    double *e_lse = (at += nv), *n_o = (at += nl), *n_lse = (at += no), *n_dq = (at += nl);
    double *n_dk = (at += nq), *n_dv = (at += nkv), *dbias = (at += nv), *e_dbias = (at += nb);
    cr_assert_eq(ref_forward_fp64(p, c->q, c->k, c->v, o, lse, NULL), AC_OK);
    cr_assert_eq(ref_backward_fp64(p, c->q, c->k, c->v, o, lse, c->d_o, dq, dk, dv, delta, NULL), AC_OK);
    cr_assert_eq(ref_error_scales_dbias(p, AC_F16, c->q, c->k, c->v, o, lse, c->d_o, e_o, e_dq, e_dk, e_dv,
                                        nb ? e_dbias : NULL, NULL),
                 AC_OK);
    cr_assert_eq(ref_backward_dbias_fp64(p, c->q, c->k, c->v, lse, c->d_o, delta, nb ? dbias : NULL, NULL), AC_OK);
    cr_assert_eq(ref_lse_error_scale(p, c->q, c->k, lse, e_lse, NULL), AC_OK);
    cr_assert_eq(ref_naive_forward(p, AC_F16, c->q, c->k, c->v, n_o, n_lse, NULL), AC_OK);
    cr_assert_eq(ref_naive_backward(p, AC_F16, c->q, c->k, c->v, n_o, n_lse, c->d_o, n_dq, n_dk, n_dv, NULL), AC_OK);
    unsetenv("ATTNCHECK_THREADS");
    *n_out = n;
    return all;
}

static void check_threads(int s0, int s1)
{
    for (int s = s0; s < s1; s++) {
        ac_problem p = ac_problem_dense(2, 4, 2, 140, 257, 16); /* two row blocks (128 rows), two key tiles (256) */
        p.windowed = true, p.window_left = 90, p.window_right = 5, p.align = AC_ALIGN_BOTTOM_RIGHT;
        p.softcap = setups[s].softcap;
        p.sinks = setups[s].sinks ? tv_sinks : NULL;
        p.head_dim_v = setups[s].head_dim_v ? 24 : 0; /* d = 16 here */
        p.alibi_slopes = setups[s].alibi ? tv_alibi : NULL, p.alibi_batch = setups[s].alibi == 2 ? 2 : 1;
        tv_set_bias(&p, setups[s].bias);
        tv_set_dropout(&p, setups[s].dropout);
        p.sink_tokens = setups[s].sink_tokens ? 3 * setups[s].sink_tokens : 0; /* the window above has left 90 */
        ts_case c;
        ts_case_init(&c, &p, AC_F16, 700 + s);
        size_t n1, n3;
        double *one = all_outputs(&p, &c, "1", &n1), *three = all_outputs(&p, &c, "3", &n3);
        cr_assert_eq(n1, n3);
        assert_same_doubles("every output", setups[s].name, one, three, n1);
        free(one);
        free(three);
        ts_case_free(&c);
    }
}

Test(ref_variants, results_do_not_depend_on_the_thread_count) { check_threads(0, TV_FIRST_HALF); }
Test(ref_variants, results_do_not_depend_on_the_thread_count_with_bias_sink_tokens_dropout)
{
    check_threads(TV_FIRST_HALF, N_SETUPS);
}

/* ---- softcap -------------------------------------------------------------------------- */

Test(ref_variants, softcap_is_c_tanh_of_s_over_c_with_its_derivative)
{
    ac_problem p = ac_problem_dense(1, 1, 1, 1, 1, 1);
    p.softcap = 2.0;
    cr_assert_eq(ac_score_mod(&p, 0, 0, 0, 0, 1.0), 2.0 * tanh(0.5));
    cr_assert(fabs(ac_score_mod_slope(&p, 1.0) - (1.0 - tanh(0.5) * tanh(0.5))) < 1e-15);
    cr_assert_eq(ac_score_mod(&p, 0, 0, 0, 0, 1e6), 2.0, "saturates at c");
    cr_assert_eq(ac_score_mod_slope(&p, 1e6), 0.0, "the derivative of a saturated tanh is 0, not a cancelled 1 - 1");
    double x = 40.0; /* 1 - tanh^2(20) = 4.2e-17: in double, 1 - tanh^2 would give 0 */
    cr_assert(fabs(ac_score_mod_slope(&p, x) / (1.0 / (cosh(20.0) * cosh(20.0))) - 1.0) < 1e-14);
    cr_assert_eq(ac_problem_variants(&p), (unsigned)AC_VAR_SOFTCAP);
    p.softcap = 0.0;
    cr_assert_eq(ac_score_mod(&p, 0, 0, 0, 0, 123.5), 123.5, "no softcap: S' = S");
    cr_assert_eq(ac_problem_variants(&p), 0u);
}

Test(ref_variants, softcap_must_be_finite_and_positive)
{
    ac_problem p = ac_problem_dense(1, 1, 1, 4, 4, 4);
    ac_err err = {{0}};
    const double bad[] = {-1.0, INFINITY, NAN};
    for (int i = 0; i < 3; i++) {
        p.softcap = bad[i];
        cr_assert_eq(ac_problem_validate(&p, 0, &err), AC_ERR_INPUT, "softcap %g accepted", bad[i]);
        cr_assert_not_null(strstr(err.msg, "softcap"), "%s", err.msg);
    }
}

/* As c grows the softcap fades: the scales approach the plain ones, within
 * the tanh's own rounding, rho 4 |S| relative (rho = 2^-13 for f16, |S| < 5
 * here: 2.4e-3). */
Test(ref_variants, softcap_scales_approach_the_plain_ones_as_c_grows)
{
    ac_problem plain = ts_problem(TS_CAUSAL_BR), capped = plain;
    capped.softcap = 1e9;
    ts_case c;
    ts_case_init(&c, &plain, AC_F16, 811);
    size_t nq = ac_q_elems(&plain), nkv = ac_kv_elems(&plain), nl = ac_lse_elems(&plain);
    double *e[2][5];
    for (int v = 0; v < 2; v++) {
        const ac_problem *p = v ? &capped : &plain;
        for (int i = 0; i < 5; i++)
            e[v][i] = ts_alloc(i == 0 || i == 1 ? nq : i == 4 ? nl : nkv);
        cr_assert_eq(ref_forward_fp64(p, c.q, c.k, c.v, c.o, c.lse, NULL), AC_OK);
        cr_assert_eq(
            ref_error_scales(p, AC_F16, c.q, c.k, c.v, c.o, c.lse, c.d_o, e[v][0], e[v][1], e[v][2], e[v][3], NULL),
            AC_OK);
        cr_assert_eq(ref_lse_error_scale(p, c.q, c.k, c.lse, e[v][4], NULL), AC_OK);
    }
    size_t n[5] = {nq, nq, nkv, nkv, nl};
    /* LSE, in u_f32 units: max_j (G_ij + 4|S_ij|) + 2 max_j |S_ij| against (d + 2) G_i, G_i >= |S_ij|:
     * the tanh's 4|S| is whole ulps there, so within a factor 2 (d = 4: up to 10 G_i against 6 G_i) */
    const double tol[5] = {3e-3, 3e-3, 3e-3, 3e-3, 1.0};
    for (int i = 0; i < 5; i++)
        for (size_t x = 0; x < n[i]; x++) {
            cr_assert((e[0][i][x] == 0.0) == (e[1][i][x] == 0.0), "output %d [%zu]: zero pattern", i, x);
            if (e[0][i][x] > 0.0)
                cr_assert(fabs(e[1][i][x] / e[0][i][x] - 1.0) <= tol[i], "output %d [%zu]: %g vs plain %g", i, x,
                          e[1][i][x], e[0][i][x]);
        }
    for (int v = 0; v < 2; v++)
        for (int i = 0; i < 5; i++)
            free(e[v][i]);
    ts_case_free(&c);
}

/* A saturated softcap (c = 2^-6 against scores of ~1) flattens the scores:
 * dS = dS' t' with t' ~ 0, so E_dQ is the derivative's own error only, far
 * below the plain problem's. */
Test(ref_variants, a_saturated_softcap_shrinks_the_gradient_scales)
{
    ac_problem plain = ts_problem(TS_NONE), capped = plain;
    capped.softcap = 0x1p-6;
    ts_case c;
    ts_case_init(&c, &plain, AC_F16, 812);
    size_t nq = ac_q_elems(&plain), nkv = ac_kv_elems(&plain);
    double sum[2] = {0, 0};
    for (int v = 0; v < 2; v++) {
        const ac_problem *p = v ? &capped : &plain;
        double *e_o = ts_alloc(nq), *e_dq = ts_alloc(nq), *e_dk = ts_alloc(nkv), *e_dv = ts_alloc(nkv);
        cr_assert_eq(ref_forward_fp64(p, c.q, c.k, c.v, c.o, c.lse, NULL), AC_OK);
        cr_assert_eq(ref_error_scales(p, AC_F16, c.q, c.k, c.v, c.o, c.lse, c.d_o, e_o, e_dq, e_dk, e_dv, NULL), AC_OK);
        for (size_t x = 0; x < nq; x++)
            sum[v] += e_dq[x];
        free(e_o), free(e_dq), free(e_dk), free(e_dv);
    }
    cr_assert(sum[1] < 0.05 * sum[0], "E_dQ summed: saturated softcap %g, plain %g", sum[1], sum[0]);
    ts_case_free(&c);
}

/* ---- the GPU tier refuses what it does not implement ------------------------------------ */

Test(ref_variants, the_gpu_tier_refuses_each_variant_naming_it)
{
    for (int s = 0; s < N_SETUPS; s++) {
        ac_problem p = tv_problem(TS_NONE, &setups[s]);
        ac_err err = {{0}};
        cr_assert_eq(ref_gpu_supports(&p, &err), AC_ERR_INPUT, "%s accepted", setups[s].name);
        cr_assert_not_null(strstr(err.msg, setups[s].variant), "%s: '%s'", setups[s].name, err.msg);
        ref_gpu_check chk;
        cr_assert_eq(ref_gpu_spot_check(&p, AC_F16, NULL, NULL, NULL, NULL, NULL, 1, 1, 1, &chk, &err), AC_ERR_INPUT,
                     "%s: the spot check refuses it too", setups[s].name);
        cr_assert_not_null(strstr(err.msg, setups[s].variant), "%s: '%s'", setups[s].name, err.msg);
        ref_gpu_plan_t plan;
        cr_assert_eq(ref_gpu_plan(&p, AC_F16, true, true, true, 0, 0, &plan, &err), AC_ERR_INPUT, "%s: the plan too",
                     setups[s].name);
    }
    ac_problem plain = ts_problem(TS_NONE);
    cr_assert_eq(ref_gpu_supports(&plain, NULL), AC_OK);
}

/* ---- sinks ------------------------------------------------------------------------------ */

/* A row that sees no key has O = 0 and LSE = s_h (its denominator is the sink's
 * alone); in every tier. */
Test(ref_variants, a_fully_masked_row_with_a_sink_has_zero_output_and_the_sink_as_lse)
{
    ac_problem p = ts_problem(TS_DENSE); /* row 2 fully masked */
    p.sinks = tv_sinks;
    ts_case c;
    ts_case_init(&c, &p, AC_F16, 901);
    size_t nq = ac_q_elems(&p), nl = ac_lse_elems(&p);
    double *n_o = ts_alloc(nq), *n_lse = ts_alloc(nl), *m_o = ts_alloc(nq), *m_lse = ts_alloc(nl);
    cr_assert_eq(ref_forward_fp64(&p, c.q, c.k, c.v, c.o, c.lse, NULL), AC_OK);
    cr_assert_eq(ref_naive_forward(&p, AC_F16, c.q, c.k, c.v, n_o, n_lse, NULL), AC_OK);
    cr_assert_eq(ref_forward_mpfr(&p, c.q, c.k, c.v, AC_DEFAULT_MPFR_PREC, NULL, 0, m_o, m_lse, NULL), AC_OK);
    for (int h = 0; h < p.heads_q; h++) {
        size_t at = ac_lse_index(&p, 0, h, 2);
        cr_assert(c.lse[at] == tv_sinks[h] && n_lse[at] == tv_sinks[h] && m_lse[at] == tv_sinks[h],
                  "head %d: LSE fp64 %g naive %g MPFR %g, sink %g", h, c.lse[at], n_lse[at], m_lse[at],
                  (double)tv_sinks[h]);
        for (int cc = 0; cc < p.head_dim; cc++) {
            size_t o_at = ac_q_index(&p, 0, h, 2, cc);
            cr_assert(c.o[o_at] == 0.0 && n_o[o_at] == 0.0 && m_o[o_at] == 0.0, "head %d: O is not 0", h);
        }
    }
    free(n_o), free(n_lse), free(m_o), free(m_lse);
    ts_case_free(&c);
}

Test(ref_variants, sinks_must_be_finite)
{
    ac_problem p = ac_problem_dense(1, 2, 2, 4, 4, 4);
    const float bad[2] = {0.5f, NAN};
    p.sinks = bad;
    ac_err err = {{0}};
    cr_assert_eq(ac_problem_validate(&p, 0, &err), AC_ERR_INPUT);
    cr_assert_not_null(strstr(err.msg, "sinks[1]"), "%s", err.msg);
}

/* dSink's scale: in f32 units, so 1/rho times the dtype's (f16: 2^13) where
 * D's error dominates, and a head whose sink takes nothing of any row (Ps ~ 0)
 * has a scale of the f32 output's own rounding floor only. */
Test(ref_variants, the_dsink_scale_is_in_f32_units_and_follows_the_sinks_share)
{
    ac_problem p = ts_problem(TS_NONE);
    p.heads_q = p.heads_kv = 4;
    p.sinks = tv_sinks;
    ts_case c;
    ts_case_init(&c, &p, AC_F16, 902);
    size_t nq = ac_q_elems(&p), nkv = ac_kv_elems(&p), nl = ac_lse_elems(&p);
    double *e_o = ts_alloc(nq), *e_dq = ts_alloc(nq), *e_dk = ts_alloc(nkv), *e_dv = ts_alloc(nkv),
           *e_lse = ts_alloc(nl);
    double e_f16[4], e_f32[4];
    cr_assert_eq(ref_forward_fp64(&p, c.q, c.k, c.v, c.o, c.lse, NULL), AC_OK);
    cr_assert_eq(ref_backward_fp64(&p, c.q, c.k, c.v, c.o, c.lse, c.d_o, c.dq, c.dk, c.dv, c.delta, NULL), AC_OK);
    cr_assert_eq(ref_lse_error_scale(&p, c.q, c.k, c.lse, e_lse, NULL), AC_OK);
    for (int t = 0; t < 2; t++) {
        ac_dtype dt = t ? AC_F32 : AC_F16;
        cr_assert_eq(ref_error_scales(&p, dt, c.q, c.k, c.v, c.o, c.lse, c.d_o, e_o, e_dq, e_dk, e_dv, NULL), AC_OK);
        cr_assert_eq(ref_param_error_scales(&p, dt, c.lse, c.d_o, c.delta, e_o, e_lse, t ? e_f32 : e_f16, NULL), AC_OK);
    }
    /* head 1's sink (12) beats every score: Ps ~ 1, D's error dominates f16's (2^13 u_f32 a unit of u),
     * while f32's has Ps's own error beside it (|D| (E_lse + |s| + 1)) */
    cr_assert(e_f16[1] / e_f32[1] > 100.0, "head 1: f16 %g, f32 %g", e_f16[1], e_f32[1]);
    /* head 2's (-30) takes nothing: e^-30 Dhat, then the f32 floor */
    cr_assert(e_f16[2] < 1e-6 * e_f16[1], "head 2: %g against head 1's %g", e_f16[2], e_f16[1]);
    free(e_o), free(e_dq), free(e_dk), free(e_dv), free(e_lse);
    ts_case_free(&c);
}
