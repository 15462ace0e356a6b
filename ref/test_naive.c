/* ref/test_naive.c — the same-dtype naive baseline (suite ref_naive). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "ref.h"
#include "test_support.h"

typedef struct {
    double *o, *lse, *dq, *dk, *dv;
} naive_out;

static naive_out run_naive(const ts_case *c, ac_dtype t)
{
    const ac_problem *p = &c->p;
    naive_out n = {ts_alloc(ac_q_elems(p)), ts_alloc(ac_lse_elems(p)), ts_alloc(ac_q_elems(p)),
                   ts_alloc(ac_kv_elems(p)), ts_alloc(ac_kv_elems(p))};
    ac_err err = {{0}};
    cr_assert_eq(ref_naive_forward(p, t, c->q, c->k, c->v, n.o, n.lse, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(ref_naive_backward(p, t, c->q, c->k, c->v, n.o, n.lse, c->d_o, n.dq, n.dk, n.dv, &err), AC_OK, "%s",
                 err.msg);
    return n;
}

static void naive_free(naive_out *n)
{
    free(n->o);
    free(n->lse);
    free(n->dq);
    free(n->dk);
    free(n->dv);
}

static void run_fp64(ts_case *c)
{
    const ac_problem *p = &c->p;
    cr_assert_eq(ref_forward_fp64(p, c->q, c->k, c->v, c->o, c->lse, NULL), AC_OK);
    cr_assert_eq(ref_backward_fp64(p, c->q, c->k, c->v, c->o, c->lse, c->d_o, c->dq, c->dk, c->dv, c->delta, NULL),
                 AC_OK);
}

static void assert_representable(ac_dtype t, const double *x, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        cr_assert(ac_round(t, x[i]) == x[i], "%s %s[%zu] = %.17g is not a %s value", ac_dtype_name(t), what, i, x[i],
                  ac_dtype_name(t));
}

Test(ref_naive, outputs_are_exact_dtype_values)
{
    for (int kind = 0; kind < TS_KIND_COUNT; kind++)
        for (int t = 0; t < AC_E4M3; t++) { /* 16- and 32-bit; fp8: test_fp8.c */
            ac_problem p = ts_problem(kind);
            ts_case c;
            ts_case_init(&c, &p, (ac_dtype)t, 500 + kind);
            naive_out n = run_naive(&c, (ac_dtype)t);
            assert_representable((ac_dtype)t, n.o, ac_q_elems(&p), "O");
            assert_representable(AC_F32, n.lse, ac_lse_elems(&p), "LSE (f32)");
            assert_representable((ac_dtype)t, n.dq, ac_q_elems(&p), "dQ");
            assert_representable((ac_dtype)t, n.dk, ac_kv_elems(&p), "dK");
            assert_representable((ac_dtype)t, n.dv, ac_kv_elems(&p), "dV");
            naive_free(&n);
            ts_case_free(&c);
        }
}

/* max |naive - fp64| / max |fp64| over one output */
static double rel_err(const double *y, const double *x, size_t n)
{
    double worst = 0.0, mag = 0.0;
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs(y[i] - x[i]));
        mag = fmax(mag, fabs(x[i]));
    }
    return worst / mag;
}

Test(ref_naive, error_against_fp64_is_small_and_grows_with_lower_precision)
{
    ac_problem p = ac_problem_dense(1, 2, 1, 24, 40, 16);
    p.windowed = true;
    p.window_right = 0;
    p.align = AC_ALIGN_BOTTOM_RIGHT;
    double err_o[AC_DTYPE_COUNT], err_dq[AC_DTYPE_COUNT];
    for (int t = 0; t < AC_E4M3; t++) { /* 16- and 32-bit; fp8: test_fp8.c */
        ts_case c;
        ts_case_init(&c, &p, AC_BF16, 511); /* bf16 inputs are exact in all three dtypes */
        run_fp64(&c);
        naive_out n = run_naive(&c, (ac_dtype)t);
        err_o[t] = rel_err(n.o, c.o, ac_q_elems(&p));
        err_dq[t] = rel_err(n.dq, c.dq, ac_q_elems(&p));
        /* LSE is f32 arithmetic, but on scores rounded to t */
        double lse_tol = t == AC_F32 ? 1e-6 : 2.0 * ac_unit_roundoff((ac_dtype)t);
        for (size_t e = 0; e < ac_lse_elems(&p); e++)
            cr_assert(fabs(n.lse[e] - c.lse[e]) <= lse_tol * fmax(1.0, fabs(c.lse[e])), "%s LSE[%zu]: %g vs %g",
                      ac_dtype_name((ac_dtype)t), e, n.lse[e], c.lse[e]);
        naive_free(&n);
        ts_case_free(&c);
    }
    cr_assert(err_o[AC_F32] > 0.0 && err_o[AC_F32] < 1e-6, "f32 O rel err %g", err_o[AC_F32]);
    cr_assert(err_dq[AC_F32] > 0.0 && err_dq[AC_F32] < 1e-5, "f32 dQ rel err %g", err_dq[AC_F32]);
    cr_assert(err_o[AC_F16] > 1e-5 && err_o[AC_F16] < 4e-3, "f16 O rel err %g", err_o[AC_F16]);
    cr_assert(err_dq[AC_F16] > 1e-5 && err_dq[AC_F16] < 2e-2, "f16 dQ rel err %g", err_dq[AC_F16]);
    cr_assert(err_o[AC_BF16] > err_o[AC_F16] && err_o[AC_BF16] < 3e-2, "bf16 O rel err %g (f16 %g)", err_o[AC_BF16],
              err_o[AC_F16]);
}

Test(ref_naive, fully_masked_rows_give_zero_and_negative_infinity)
{
    ac_problem p = ts_problem(TS_CAUSAL_BR); /* rows 0 and 1 see no key */
    ts_case c;
    ts_case_init(&c, &p, AC_F16, 521);
    naive_out n = run_naive(&c, AC_F16);
    for (int h = 0; h < p.heads_q; h++)
        for (int i = 0; i < 2; i++) {
            cr_assert(n.lse[ac_lse_index(&p, 0, h, i)] == -INFINITY, "LSE not -inf");
            for (int cc = 0; cc < p.head_dim; cc++) {
                cr_assert(n.o[ac_q_index(&p, 0, h, i, cc)] == 0.0, "O not 0");
                cr_assert(n.dq[ac_q_index(&p, 0, h, i, cc)] == 0.0, "dQ not 0");
            }
        }
    cr_assert(isfinite(n.lse[ac_lse_index(&p, 0, 0, 2)]), "row 2 sees key 0");
    naive_free(&n);
    ts_case_free(&c);
}

Test(ref_naive, a_hidden_pair_stays_zero_when_its_row_overflows)
{
    /* f16 scores that overflow make l = 0 or NaN and every visible P NaN; a
     * hidden pair's P must stay exactly 0 (masked pairs are skipped), so the
     * keys no row sees (window (1, 0): keys 3..7 for 3 rows) get dV = 0 and the
     * seen ones NaN.  Found on the H100: the GPU tier gave 0 there, the CPU NaN. */
    ac_problem p = ac_problem_dense(1, 1, 1, 3, 8, 2);
    p.windowed = true;
    p.window_left = 1;
    p.window_right = 0;
    p.scale = 1.0;
    ts_case c;
    ts_case_init(&c, &p, AC_F16, 77);
    for (size_t e = 0; e < ac_q_elems(&p); e++)
        c.q[e] = 60000.0;
    for (size_t e = 0; e < ac_kv_elems(&p); e++)
        c.k[e] = (e / 2) % 2 ? -60000.0 : 60000.0; /* S = +inf (even keys) or -inf in f16 */
    naive_out n = run_naive(&c, AC_F16);
    for (int j = 3; j < 8; j++)
        for (int cc = 0; cc < 2; cc++)
            cr_assert(n.dv[ac_kv_index(&p, 0, 0, j, cc)] == 0.0, "dV[%d][%d] = %g: key %d is seen by no row", j, cc,
                      n.dv[ac_kv_index(&p, 0, 0, j, cc)], j);
    bool some_nan = false;
    for (int j = 0; j < 3; j++)
        some_nan |= isnan(n.dv[ac_kv_index(&p, 0, 0, j, 0)]);
    cr_assert(some_nan, "the overflowing rows should make the seen keys' dV NaN (the test would test nothing)");
    naive_free(&n);
    ts_case_free(&c);
}

Test(ref_naive, f16_scores_are_rounded_before_the_softmax)
{
    /* One query, two keys, d = 1, scale 1: S = (1 + 2^-11 * 1.5 ... ) cases where
     * rounding S to f16 changes P.  q = 1, k = {1.00048828125 (1 + 2^-11), 0}:
     * 1 + 2^-11 is a tie in f16 and rounds to 1, so P = softmax(1, 0) exactly
     * as f32 would see softmax(1, 0), while f32 keeps 1 + 2^-11. */
    ac_problem p = ac_problem_dense(1, 1, 1, 1, 2, 1);
    p.scale = 1.0;
    double q = 1.0, k[2] = {1.0 + 0x1p-11, 0.0}, v[2] = {1.0, 0.0}, o16, o32, lse16, lse32;
    cr_assert_eq(ref_naive_forward(&p, AC_F16, &q, k, v, &o16, &lse16, NULL), AC_OK);
    cr_assert_eq(ref_naive_forward(&p, AC_F32, &q, k, v, &o32, &lse32, NULL), AC_OK);
    float e = expf(-1.0f), p0 = 1.0f / (1.0f + e);
    cr_assert_eq(o16, ac_round(AC_F16, ac_round(AC_F16, p0)), "f16: O = round(P_0) with S rounded to 1");
    cr_assert_eq(lse16, (double)(1.0f + logf(1.0f + e)));
    float s32 = 1.0f + 0x1p-11f, e32 = expf(0.0f - s32), p32 = 1.0f / (1.0f + e32);
    cr_assert_eq(o32, (double)p32, "f32: O = P_0 with S = 1 + 2^-11 kept");
}

Test(ref_naive, rejects_bad_input)
{
    ac_problem p = ac_problem_dense(1, 1, 1, 1, 1, 1);
    double x = 1;
    ac_err err = {{0}};
    cr_assert_eq(ref_naive_forward(&p, AC_F16, &x, &x, NULL, &x, &x, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "NULL") != NULL, "message: %s", err.msg);
    cr_assert_eq(ref_naive_forward(&p, (ac_dtype)9, &x, &x, &x, &x, &x, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "dtype") != NULL, "message: %s", err.msg);
    p.seqlen_k = -1;
    cr_assert_eq(ref_naive_backward(&p, AC_F16, &x, &x, &x, &x, &x, &x, &x, &x, &x, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "seqlen_k") != NULL, "message: %s", err.msg);
}

/* ---- the blocked baseline against the scalar oracle ------------------------- */

#include "naive_scalar.h"
#include "round_float.h"

Test(ref_naive, float_rounding_matches_ac_round_on_every_float_class)
{
    /* A stride through all 2^32 encodings (odd, so every low-bit pattern
     * class is hit) plus the edges: f16's overflow threshold and its ties,
     * the normal/subnormal boundaries of f16 and bf16, NaN and infinities. */
    const float edges[] = {65504.0f,  65519.99f,       65520.0f,       65536.0f,        0x1p-14f,  0x1.ffcp-15f,
                           0x1p-24f,  0x1p-25f,        0x1.8p-24f,     0x1.000002p-25f, 0x1p-126f, 0x1p-133f,
                           0x1p-134f, 0x1.8p-133f,     3.4028235e38f,  0x1.fefp127f,    0.0f,      INFINITY,
                           NAN,       1.0f + 0x1p-11f, 1.0f + 0x1p-8f, 1.0f + 0x1.8p-8f};
    for (int t = 0; t < AC_E4M3; t++) { /* 16- and 32-bit; fp8: test_fp8.c */
        for (size_t e = 0; e < sizeof edges / sizeof edges[0]; e++)
            for (int sign = -1; sign <= 1; sign += 2) {
                float x = sign * edges[e], want = (float)ac_round((ac_dtype)t, x), got = rf_round((ac_dtype)t, x);
                cr_assert(memcmp(&want, &got, sizeof want) == 0 || (isnan(want) && isnan(got)),
                          "%s: rf_round(%a) = %a, ac_round gives %a", ac_dtype_name((ac_dtype)t), x, got, want);
            }
        for (uint64_t u = 0; u < ((uint64_t)1 << 32); u += 4099) {
            float x = rf_float((uint32_t)u), want = (float)ac_round((ac_dtype)t, x), got = rf_round((ac_dtype)t, x);
            cr_assert(rf_bits(want) == rf_bits(got) || (isnan(want) && isnan(got)),
                      "%s: rf_round(%a) = %a, ac_round gives %a (bits %08x)", ac_dtype_name((ac_dtype)t), x, got, want,
                      (unsigned)u);
        }
    }
}

/* Mean and max |y - x| of an output over its n elements. */
typedef struct {
    double mean, max;
} err_stats;

static err_stats abs_err(const double *y, const double *x, size_t n)
{
    err_stats s = {0.0, 0.0};
    size_t counted = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) /* -inf LSE of a masked row: both give it (asserted elsewhere) */
            continue;
        double e = fabs(y[i] - x[i]);
        s.mean += e;
        s.max = fmax(s.max, e);
        counted++;
    }
    s.mean /= counted ? (double)counted : 1.0;
    return s;
}

static naive_out run_naive_scalar(const ts_case *c, ac_dtype t)
{
    const ac_problem *p = &c->p;
    naive_out n = {ts_alloc(ac_q_elems(p)), ts_alloc(ac_lse_elems(p)), ts_alloc(ac_q_elems(p)),
                   ts_alloc(ac_kv_elems(p)), ts_alloc(ac_kv_elems(p))};
    ac_err err = {{0}};
    cr_assert_eq(ref_naive_forward_scalar(p, t, c->q, c->k, c->v, n.o, n.lse, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(ref_naive_backward_scalar(p, t, c->q, c->k, c->v, n.o, n.lse, c->d_o, n.dq, n.dk, n.dv, &err), AC_OK,
                 "%s", err.msg);
    return n;
}

static const int stat_seqlens_q[2] = {100, 37}, stat_seqlens_k[2] = {140, 260};
static uint8_t stat_mask[2 * 90 * 170];

/* The fixed cases: every mask kind, GQA, varlen, both layouts, all dtypes,
 * sizes that cross the 64-row blocks and 128-key tiles unevenly. */
#define STAT_CASES 6
static ac_problem stat_problem(int which, ac_dtype *t)
{
    ac_problem p;
    switch (which) {
    case 0: /* causal bottom-right, GQA, Nq < Nk */
        p = ac_problem_dense(1, 4, 2, 130, 200, 32);
        p.windowed = true;
        p.window_right = 0;
        p.align = AC_ALIGN_BOTTOM_RIGHT;
        *t = AC_BF16;
        break;
    case 1: /* sliding window, BSHD, MQA, two batches */
        p = ac_problem_dense(2, 2, 1, 150, 150, 48);
        p.layout = AC_LAYOUT_BSHD;
        p.windowed = true;
        p.window_left = 40;
        p.window_right = 7;
        *t = AC_F16;
        break;
    case 2: /* varlen, no mask */
        p = ac_problem_dense(2, 2, 2, 130, 260, 16);
        p.seqlens_q = stat_seqlens_q;
        p.seqlens_k = stat_seqlens_k;
        *t = AC_F32;
        break;
    case 3: { /* dense mask per head, some rows fully masked */
        p = ac_problem_dense(1, 2, 2, 90, 170, 40);
        ts_rng r = {77};
        for (size_t e = 0; e < sizeof stat_mask; e++)
            stat_mask[e] = (e / 170) % 11 == 3 ? 0 : ts_uniform(&r) < 0.6;
        p.dense_mask = stat_mask;
        p.mask_heads = 2;
        *t = AC_BF16;
        break;
    }
    case 4: /* causal top-left with Nq > Nk (rows past the keys), custom scale */
        p = ac_problem_dense(1, 2, 2, 300, 70, 64);
        p.windowed = true;
        p.window_right = 0;
        p.scale = 0.3;
        *t = AC_F16;
        break;
    default: /* f32, causal bottom-right with Nq > Nk: rows that see no key */
        p = ac_problem_dense(1, 3, 3, 200, 140, 24);
        p.windowed = true;
        p.window_right = 0;
        p.align = AC_ALIGN_BOTTOM_RIGHT;
        *t = AC_F32;
        break;
    }
    return p;
}

/* Same doubles bit for bit (NaN payloads included), naming the first that differs. */
static void assert_same_bits(const char *what, int which, const double *y, const double *x, size_t n)
{
    for (size_t e = 0; e < n; e++)
        cr_assert(memcmp(&y[e], &x[e], sizeof y[e]) == 0, "case %d %s[%zu]: %a here, %a before", which, what, e, y[e],
                  x[e]);
}

static void assert_stats_close(const char *what, int which, err_stats fast, err_stats scalar)
{
    cr_assert(fabs(fast.mean - scalar.mean) <= 0.1 * scalar.mean, "case %d %s: mean error %g, scalar %g", which, what,
              fast.mean, scalar.mean);
    cr_assert(fabs(fast.max - scalar.max) <= 0.1 * scalar.max, "case %d %s: max error %g, scalar %g", which, what,
              fast.max, scalar.max);
}

/* The criterion (mean and max error within 10% of the scalar's), and
 * then what the blocked loops promise: the scalar's summation order, so the
 * same values bit for bit, f32 included. */
Test(ref_naive, blocked_matches_the_scalar_oracle_on_fixed_cases)
{
    for (int which = 0; which < STAT_CASES; which++) {
        ac_dtype t;
        ac_problem p = stat_problem(which, &t);
        ts_case c;
        ts_case_init(&c, &p, t, 900 + which);
        run_fp64(&c);
        naive_out fast = run_naive(&c, t), scalar = run_naive_scalar(&c, t);
        size_t nq = ac_q_elems(&p), nkv = ac_kv_elems(&p), nl = ac_lse_elems(&p);
        for (size_t e = 0; e < nl; e++)
            cr_assert((fast.lse[e] == -INFINITY) == (scalar.lse[e] == -INFINITY), "case %d: LSE[%zu] %g vs %g", which,
                      e, fast.lse[e], scalar.lse[e]);
        assert_stats_close("O", which, abs_err(fast.o, c.o, nq), abs_err(scalar.o, c.o, nq));
        assert_stats_close("LSE", which, abs_err(fast.lse, c.lse, nl), abs_err(scalar.lse, c.lse, nl));
        assert_stats_close("dQ", which, abs_err(fast.dq, c.dq, nq), abs_err(scalar.dq, c.dq, nq));
        assert_stats_close("dK", which, abs_err(fast.dk, c.dk, nkv), abs_err(scalar.dk, c.dk, nkv));
        assert_stats_close("dV", which, abs_err(fast.dv, c.dv, nkv), abs_err(scalar.dv, c.dv, nkv));
        assert_same_bits("O", which, fast.o, scalar.o, nq);
        assert_same_bits("LSE", which, fast.lse, scalar.lse, nl);
        assert_same_bits("dQ", which, fast.dq, scalar.dq, nq);
        assert_same_bits("dK", which, fast.dk, scalar.dk, nkv);
        assert_same_bits("dV", which, fast.dv, scalar.dv, nkv);
        naive_free(&fast);
        naive_free(&scalar);
        ts_case_free(&c);
    }
}

/* Three thread counts, one result: blocks are fixed, not the threads' share. */
Test(ref_naive, results_do_not_depend_on_the_thread_count)
{
    ac_dtype t;
    ac_problem p = stat_problem(0, &t); /* 4 heads x 3 row blocks, 2 x 2 key tiles */
    ts_case c;
    ts_case_init(&c, &p, t, 931);
    naive_out runs[3];
    const char *threads[3] = {"1", "3", "8"};
    for (int r = 0; r < 3; r++) {
        cr_assert_eq(setenv("ATTNCHECK_THREADS", threads[r], 1), 0);
        runs[r] = run_naive(&c, t);
    }
    unsetenv("ATTNCHECK_THREADS");
    for (int r = 1; r < 3; r++) {
        assert_same_bits("O", r, runs[r].o, runs[0].o, ac_q_elems(&p));
        assert_same_bits("LSE", r, runs[r].lse, runs[0].lse, ac_lse_elems(&p));
        assert_same_bits("dQ", r, runs[r].dq, runs[0].dq, ac_q_elems(&p));
        assert_same_bits("dK", r, runs[r].dk, runs[0].dk, ac_kv_elems(&p));
        assert_same_bits("dV", r, runs[r].dv, runs[0].dv, ac_kv_elems(&p));
    }
    for (int r = 0; r < 3; r++)
        naive_free(&runs[r]);
    ts_case_free(&c);
}

Test(ref_naive, a_bad_thread_count_is_an_input_error_naming_the_variable)
{
    ac_problem p = ac_problem_dense(1, 1, 1, 4, 4, 8);
    ts_case c;
    ts_case_init(&c, &p, AC_F16, 941);
    const char *bad[] = {"0", "-2", "two", "4x", "100000"};
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        ac_err err = {{0}};
        cr_assert_eq(setenv("ATTNCHECK_THREADS", bad[b], 1), 0);
        cr_assert_eq(ref_naive_forward(&p, AC_F16, c.q, c.k, c.v, c.o, c.lse, &err), AC_ERR_INPUT, "'%s' accepted",
                     bad[b]);
        cr_assert(strstr(err.msg, "ATTNCHECK_THREADS") != NULL, "message: %s", err.msg);
    }
    unsetenv("ATTNCHECK_THREADS");
    ts_case_free(&c);
}
