/* ref/cuda/test_spot_check.c — the CPU spot check of the GPU reference (suite
 * ref_gpu_spot_check).  It is fed the CPU tier's own bundle (what a correct
 * device hands over), then the same with one planted error, and must report
 * exactly that element, in the units ref_gpu.h defines. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "../ref_gpu.h"
#include "../test_support.h"

static void bundle(ts_case *c, int kind, ac_dtype t, uint64_t seed)
{
    ac_problem p = ts_problem(kind);
    ts_case_init(c, &p, t, seed);
    ac_err err = {{0}};
    cr_assert_eq(ref_forward_fp64(&c->p, c->q, c->k, c->v, c->o, c->lse, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(ref_backward_fp64(&c->p, c->q, c->k, c->v, c->o, c->lse, c->d_o, c->dq, c->dk, c->dv, c->delta, &err),
                 AC_OK, "%s", err.msg);
}

static ref_gpu_outputs outputs_of(const ts_case *c)
{
    ref_gpu_outputs out = {.o = c->o, .lse = c->lse, .dq = c->dq, .dk = c->dk, .dv = c->dv, .delta = c->delta};
    return out;
}

/* Every row and key (asks for more than there are). */
static ref_gpu_check check_all(const ts_case *c, ac_dtype t)
{
    ref_gpu_outputs out = outputs_of(c);
    ref_gpu_check chk;
    ac_err err = {{0}};
    cr_assert_eq(ref_gpu_spot_check(&c->p, t, c->q, c->k, c->v, c->d_o, &out, 1 << 20, 1 << 20, 7, &chk, &err), AC_OK,
                 "%s", err.msg);
    return chk;
}

static size_t valid_rows(const ac_problem *p, bool keys)
{
    size_t n = 0;
    for (int b = 0; b < p->batch; b++)
        n += (size_t)(keys ? p->heads_kv * ac_seqlen_k_of(p, b) : p->heads_q * ac_seqlen_q_of(p, b));
    return n;
}

Test(ref_gpu_spot_check, cpu_bundle_agrees_on_every_mask_kind)
{
    for (int kind = 0; kind < TS_KIND_COUNT; kind++) {
        ts_case c;
        bundle(&c, kind, AC_BF16, 100 + kind);
        ref_gpu_check chk = check_all(&c, AC_BF16);
        cr_assert(chk.agrees, "%s: %s disagrees by %g units", ts_kind_name(kind), ref_gpu_check_name(chk.worst_output),
                  chk.worst[chk.worst_output].units);
        cr_assert_eq(chk.rows_checked, valid_rows(&c.p, false), "%s", ts_kind_name(kind));
        cr_assert_eq(chk.keys_checked, valid_rows(&c.p, true), "%s", ts_kind_name(kind));
        for (int o = 0; o < REF_GPU_CHECK_COUNT; o++) /* two fp64 computations: ~1e-16 relative */
            cr_assert_lt(chk.worst[o].units, 1e-6, "%s %s: %g", ts_kind_name(kind), ref_gpu_check_name(o),
                         chk.worst[o].units);
        ts_case_free(&c);
    }
}

/* Plants got = x + delta at x's place and checks the report names it exactly. */
static void assert_reports(const ref_gpu_check *chk, ref_gpu_check_output o, int b, int h, int row, int col,
                           double planted, double delta)
{
    const ref_gpu_disagreement *w = &chk->worst[o];
    cr_assert_not(chk->agrees);
    cr_assert_eq(w->b, b);
    cr_assert_eq(w->h, h);
    cr_assert_eq(w->row, row);
    cr_assert_eq(w->col, col);
    cr_assert_eq(w->got, planted, "got %.17g, planted %.17g", w->got, planted);
    cr_assert_leq(fabs(w->want - (planted - delta)), 1e-12 * fabs(planted - delta) + 1e-300);
    cr_assert_eq(w->units, fabs(w->got - w->want) / w->unit);
    cr_assert_leq(fabs(w->units - fabs(delta) / w->unit), 1e-6 * w->units);
    cr_assert_gt(w->units, AC_CERT_MAX_ULP);
}

Test(ref_gpu_spot_check, planted_o_error_is_reported_at_its_element)
{
    ts_case c;
    bundle(&c, TS_GQA, AC_BF16, 3);
    size_t at = ac_q_index(&c.p, 0, 3, 4, 2);
    double delta = 0.5 * ac_ulp(AC_BF16, c.o[at]);
    c.o[at] += delta;
    ref_gpu_check chk = check_all(&c, AC_BF16);
    assert_reports(&chk, REF_GPU_CHECK_O, 0, 3, 4, 2, c.o[at], delta);
    cr_assert_eq(chk.worst_output, REF_GPU_CHECK_O);
    ts_case_free(&c);
}

Test(ref_gpu_spot_check, planted_lse_error_is_reported_at_its_row)
{
    ts_case c;
    bundle(&c, TS_CAUSAL_BR, AC_F16, 4);
    size_t at = ac_lse_index(&c.p, 0, 1, 5); /* rows 0, 1 see no key (Nq > Nk) */
    cr_assert(isfinite(c.lse[at]));
    double delta = 1e-5;
    c.lse[at] += delta;
    ref_gpu_check chk = check_all(&c, AC_F16);
    assert_reports(&chk, REF_GPU_CHECK_LSE, 0, 1, 5, -1, c.lse[at], delta);
    cr_assert_eq(chk.worst_output, REF_GPU_CHECK_LSE);
    ts_case_free(&c);
}

Test(ref_gpu_spot_check, planted_dq_error_is_reported_at_its_element)
{
    ts_case c;
    bundle(&c, TS_BSHD, AC_F32, 5);
    size_t at = ac_q_index(&c.p, 1, 2, 3, 1);
    double delta = 0.25 * ac_ulp(AC_F32, c.dq[at]) + 1e-3 * fabs(c.dq[at]);
    c.dq[at] -= delta;
    ref_gpu_check chk = check_all(&c, AC_F32);
    assert_reports(&chk, REF_GPU_CHECK_DQ, 1, 2, 3, 1, c.dq[at], -delta);
    cr_assert_eq(chk.worst_output, REF_GPU_CHECK_DQ);
    ts_case_free(&c);
}

Test(ref_gpu_spot_check, planted_dk_and_dv_errors_are_reported_at_their_keys)
{
    ts_case c;
    bundle(&c, TS_GQA, AC_BF16, 6);
    size_t at_k = ac_kv_index(&c.p, 0, 1, 2, 3), at_v = ac_kv_index(&c.p, 0, 0, 5, 0);
    double dk = 0.5 * ac_ulp(AC_BF16, c.dk[at_k]), dv = 2.0 * ac_ulp(AC_BF16, c.dv[at_v]);
    c.dk[at_k] += dk;
    c.dv[at_v] += dv;
    ref_gpu_check chk = check_all(&c, AC_BF16);
    assert_reports(&chk, REF_GPU_CHECK_DK, 0, 1, 2, 3, c.dk[at_k], dk);
    assert_reports(&chk, REF_GPU_CHECK_DV, 0, 0, 5, 0, c.dv[at_v], dv);
    ts_case_free(&c);
}

Test(ref_gpu_spot_check, planted_delta_error_is_reported_at_its_row)
{
    ts_case c;
    bundle(&c, TS_WINDOW_BR, AC_F16, 8);
    size_t at = ac_lse_index(&c.p, 0, 0, 3);
    double delta = 4.0 * ac_ulp(AC_F16, c.delta[at]);
    c.delta[at] += delta;
    ref_gpu_check chk = check_all(&c, AC_F16);
    assert_reports(&chk, REF_GPU_CHECK_DELTA, 0, 0, 3, -1, c.delta[at], delta);
    ts_case_free(&c);
}

Test(ref_gpu_spot_check, nonzero_output_of_a_fully_masked_row_is_a_disagreement)
{
    ts_case c;
    bundle(&c, TS_DENSE, AC_BF16, 9); /* row 2 of the dense mask sees no key */
    size_t at = ac_q_index(&c.p, 0, 1, 2, 0);
    cr_assert_eq(c.o[at], 0.0);
    cr_assert_eq(c.lse[ac_lse_index(&c.p, 0, 1, 2)], -INFINITY);
    c.o[at] = 1e-30;
    ref_gpu_check chk = check_all(&c, AC_BF16);
    cr_assert_not(chk.agrees);
    cr_assert_eq(chk.worst_output, REF_GPU_CHECK_O);
    cr_assert_eq(chk.worst[REF_GPU_CHECK_O].row, 2);
    cr_assert_eq(chk.worst[REF_GPU_CHECK_O].h, 1);
    cr_assert_eq(chk.worst[REF_GPU_CHECK_O].want, 0.0);
    cr_assert_gt(chk.worst[REF_GPU_CHECK_O].units, 1e6); /* 1e-30 over bf16's subnormal spacing 2^-133 */
    ts_case_free(&c);
}

Test(ref_gpu_spot_check, nan_and_wrong_minus_inf_read_infinite)
{
    ts_case c;
    bundle(&c, TS_NONE, AC_F16, 10);
    size_t at_v = ac_kv_index(&c.p, 0, 1, 6, 3), at_l = ac_lse_index(&c.p, 0, 0, 1);
    c.dv[at_v] = NAN;
    c.lse[at_l] = -INFINITY; /* the row sees keys: -inf is wrong */
    ref_gpu_check chk = check_all(&c, AC_F16);
    cr_assert_not(chk.agrees);
    cr_assert_eq(chk.worst[REF_GPU_CHECK_DV].units, INFINITY);
    cr_assert_eq(chk.worst[REF_GPU_CHECK_DV].row, 6);
    cr_assert_eq(chk.worst[REF_GPU_CHECK_DV].col, 3);
    cr_assert_eq(chk.worst[REF_GPU_CHECK_LSE].units, INFINITY);
    cr_assert_eq(chk.worst[REF_GPU_CHECK_LSE].row, 1);
    ts_case_free(&c);
}

Test(ref_gpu_spot_check, padding_rows_are_not_compared)
{
    ts_case c;
    bundle(&c, TS_VARLEN, AC_BF16, 11); /* batch 0: 3 of 6 query rows, batch 1: 2 of 7 keys */
    c.o[ac_q_index(&c.p, 0, 1, 4, 0)] = 12345.0;
    c.dk[ac_kv_index(&c.p, 1, 0, 5, 2)] = NAN;
    ref_gpu_check chk = check_all(&c, AC_BF16);
    cr_assert(chk.agrees, "%s: %g", ref_gpu_check_name(chk.worst_output), chk.worst[chk.worst_output].units);
    ts_case_free(&c);
}

Test(ref_gpu_spot_check, sampling_checks_the_asked_number_reproducibly)
{
    ts_case c;
    bundle(&c, TS_BSHD, AC_BF16, 12);
    ref_gpu_outputs out = outputs_of(&c);
    size_t at = ac_q_index(&c.p, 1, 0, 2, 3);
    c.o[at] += ac_ulp(AC_BF16, c.o[at]);
    ref_gpu_check a, b;
    ac_err err = {{0}};
    cr_assert_eq(ref_gpu_spot_check(&c.p, AC_BF16, c.q, c.k, c.v, c.d_o, &out, 5, 3, 42, &a, &err), AC_OK, "%s",
                 err.msg);
    cr_assert_eq(ref_gpu_spot_check(&c.p, AC_BF16, c.q, c.k, c.v, c.d_o, &out, 5, 3, 42, &b, &err), AC_OK, "%s",
                 err.msg);
    cr_assert_eq(a.rows_checked, 5);
    cr_assert_eq(a.keys_checked, 3);
    cr_assert_eq(memcmp(a.worst, b.worst, sizeof a.worst), 0, "same seed, same rows");
    /* over every seed in a range, a sample that holds the planted row reports it, one that does not agrees */
    int caught = 0, missed = 0;
    for (uint64_t seed = 0; seed < 64; seed++) {
        ref_gpu_check s;
        cr_assert_eq(ref_gpu_spot_check(&c.p, AC_BF16, c.q, c.k, c.v, c.d_o, &out, 5, 0, seed, &s, &err), AC_OK);
        if (s.agrees) {
            missed++;
            continue;
        }
        caught++;
        cr_assert_eq(s.worst[REF_GPU_CHECK_O].row, 2);
        cr_assert_eq(s.worst[REF_GPU_CHECK_O].col, 3);
    }
    cr_assert(caught > 0 && missed > 0, "5 of 30 rows sampled: caught %d, missed %d", caught, missed);
    ts_case_free(&c);
}

Test(ref_gpu_spot_check, forward_only_checks_rows_alone)
{
    ts_case c;
    bundle(&c, TS_WINDOW_TL, AC_F32, 13);
    ref_gpu_outputs out = {.o = c.o, .lse = c.lse};
    ref_gpu_check chk;
    ac_err err = {{0}};
    cr_assert_eq(ref_gpu_spot_check(&c.p, AC_F32, c.q, c.k, c.v, NULL, &out, 100, 100, 1, &chk, &err), AC_OK, "%s",
                 err.msg);
    cr_assert(chk.agrees);
    cr_assert_eq(chk.keys_checked, 0);
    cr_assert_eq(chk.worst[REF_GPU_CHECK_DQ].b, -1, "dQ not compared");
    cr_assert_eq(ref_gpu_spot_check(&c.p, AC_F32, c.q, c.k, c.v, c.d_o, &out, 1, 1, 1, &chk, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "d_o given") != NULL, "%s", err.msg);
    ts_case_free(&c);
}
