/* harness/verdict/test_diagnose.c — the diagnosis of a failed case (suite
 * harness_diagnose): each test plants one known mistake in otherwise exact
 * outputs (the reference rounded to the dtype) and asserts the count at the
 * right heads and rows, and the hint that names the mistake with its number;
 * an error that fits no mistake gets no hint. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness/harness.h"
#include "harness/verdict/diagnose.h"

/* The outputs of plain attention (these cases use no variant: dSink, dBias stay NULL, not present). */
#define N_PLAIN (AC_OUT_DV + 1)

typedef struct {
    ac_inputs in;
    ac_reference ref;
    ac_budgets b;
    void *out[AC_OUT_COUNT]; /* the "kernel's" outputs: O, LSE (float), dQ, dK, dV */
    ac_metrics m[AC_OUT_COUNT];
    char why[AC_WHY_LEN], kind[AC_KIND_LEN];
} judged;

static const double *ref_x(const judged *j, ac_output o)
{
    const double *x[AC_OUT_COUNT] = {j->ref.o, j->ref.lse, j->ref.dq, j->ref.dk, j->ref.dv};
    return x[o];
}

static size_t elems(const judged *j, ac_output o)
{
    const ac_problem *p = &j->in.p;
    return o == AC_OUT_LSE ? ac_lse_elems(p) : (o == AC_OUT_DK || o == AC_OUT_DV) ? ac_kv_elems(p) : ac_q_elems(p);
}

/* Stores doubles x as output o of the kernel (LSE as float, the rest in the dtype). */
static void put(judged *j, ac_output o, const double *x)
{
    for (size_t i = 0; i < elems(j, o); i++)
        if (o == AC_OUT_LSE)
            ((float *)j->out[o])[i] = (float)x[i];
        else
            ac_store(j->in.c.dtype, x + i, 1, (char *)j->out[o] + i * ac_dtype_size(j->in.c.dtype));
}

/* The inputs of line, the reference, and outputs equal to it rounded: a perfect kernel. */
static void setup(judged *j, const char *line)
{
    memset(j, 0, sizeof *j);
    ac_case c;
    ac_err err = {{0}};
    cr_assert_eq(ac_case_parse(line, &c, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(ac_inputs_make(&c, &j->in, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(ac_reference_make(&j->in, true, 0, &j->ref, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(ac_budgets_load(ac_budgets_default_path(), &j->b, &err), AC_OK, "%s", err.msg);
    for (int o = 0; o < N_PLAIN; o++) {
        j->out[o] = calloc(elems(j, (ac_output)o) + 1, 4);
        put(j, (ac_output)o, ref_x(j, (ac_output)o));
    }
}

static void teardown(judged *j)
{
    for (int o = 0; o < AC_OUT_COUNT; o++)
        free(j->out[o]);
    ac_reference_free(&j->ref);
    ac_inputs_free(&j->in);
}

/* Compare, gate and diagnose, as the runner does. */
static ac_verdict judge(judged *j)
{
    const double *e[AC_OUT_COUNT] = {j->ref.e_o, j->ref.e_lse, j->ref.e_dq, j->ref.e_dk, j->ref.e_dv};
    const double *nv[AC_OUT_COUNT] = {j->ref.naive_o, j->ref.naive_lse, j->ref.naive_dq, j->ref.naive_dk,
                                      j->ref.naive_dv};
    memset(j->m, 0, sizeof j->m);
    for (int o = 0; o < N_PLAIN; o++)
        ac_compare(&j->in, (ac_output)o, j->out[o], ref_x(j, (ac_output)o), e[o], nv[o], &j->m[o]);
    ac_verdict v = ac_gate(&j->in, j->m, &j->b, j->why, sizeof j->why, j->kind, sizeof j->kind);
    ac_err err = {{0}};
    if (v == AC_VERDICT_FAIL)
        cr_assert_eq(ac_diagnose(&j->in, &j->ref, (const void *const *)j->out, j->m, j->why, sizeof j->why, &err),
                     AC_OK, "%s", err.msg);
    return v;
}

static void assert_contains(const char *text, const char *part)
{
    cr_assert(strstr(text, part) != NULL, "'%s'\n  does not contain '%s'", text, part);
}

Test(harness_diagnose, perfect_outputs_pass_and_need_no_diagnosis)
{
    judged j;
    setup(&j, "v1 seed=2 b=1 hq=2 hkv=2 nq=7 nk=9 d=8 dtype=f16 mask=none layout=bhsd dist=normal(0,1) scale=auto");
    cr_assert_eq(judge(&j), AC_VERDICT_PASS, "%s", j.why);
    cr_assert_eq(j.m[AC_OUT_O].n_over, 0);
    teardown(&j);
}

Test(harness_diagnose, o_written_in_the_other_layout_is_named_with_its_error)
{
    judged j;
    setup(&j, "v1 seed=3 b=2 hq=4 hkv=2 nq=9 nk=11 d=8 dtype=f32 mask=none layout=bhsd dist=normal(0,1) scale=auto");
    ac_problem bshd = j.in.p;
    bshd.layout = AC_LAYOUT_BSHD;
    double *moved = calloc(ac_q_elems(&j.in.p), sizeof(double));
    for (int b = 0; b < 2; b++)
        for (int h = 0; h < 4; h++)
            for (int i = 0; i < 9; i++)
                for (int c = 0; c < 8; c++)
                    moved[ac_q_index(&bshd, b, h, i, c)] = j.ref.o[ac_q_index(&j.in.p, b, h, i, c)];
    put(&j, AC_OUT_O, moved);
    cr_assert_eq(judge(&j), AC_VERDICT_FAIL);
    cr_assert_str_eq(j.kind, "O:scaled");
    assert_contains(j.m[AC_OUT_O].hint, "O matches the reference with --layout bshd (max scaled 0");
    assert_contains(j.m[AC_OUT_O].hint, "the kernel writes (B, S, H, d) where bhsd was asked");
    assert_contains(j.why, "; hint: O matches the reference with --layout bshd");
    cr_assert_str_eq(j.m[AC_OUT_LSE].hint, "", "LSE was right: nothing to say");
    free(moved);
    teardown(&j);
}

Test(harness_diagnose, lse_in_base_2_is_named)
{
    judged j;
    setup(&j,
          "v1 seed=4 b=1 hq=2 hkv=1 nq=6 nk=5 d=16 dtype=bf16 mask=causal-br layout=bhsd dist=normal(0,1) scale=auto");
    double *log2_lse = calloc(ac_lse_elems(&j.in.p), sizeof(double));
    for (size_t i = 0; i < ac_lse_elems(&j.in.p); i++)
        log2_lse[i] = j.ref.lse[i] / M_LN2; /* -inf stays -inf on the row with no key */
    put(&j, AC_OUT_LSE, log2_lse);
    cr_assert_eq(judge(&j), AC_VERDICT_FAIL);
    cr_assert_str_eq(j.kind, "LSE:scaled");
    assert_contains(j.m[AC_OUT_LSE].hint, "LSE x ln 2 matches the reference (max scaled ");
    assert_contains(j.m[AC_OUT_LSE].hint, "--lse-base 2");
    free(log2_lse);
    teardown(&j);
}

/* O and LSE of the same inputs under problem alt, stored as the kernel's. */
static void forward_under(judged *j, const ac_problem *alt)
{
    double *o = calloc(ac_q_elems(alt), sizeof(double)), *lse = calloc(ac_lse_elems(alt), sizeof(double));
    ac_err err = {{0}};
    cr_assert_eq(ref_forward_fp64(alt, j->in.qd, j->in.kd, j->in.vd, o, lse, &err), AC_OK, "%s", err.msg);
    put(j, AC_OUT_O, o);
    put(j, AC_OUT_LSE, lse);
    free(o), free(lse);
}

Test(harness_diagnose, a_kernel_without_the_softmax_scale_is_named)
{
    judged j;
    setup(&j, "v1 seed=5 b=1 hq=2 hkv=2 nq=8 nk=12 d=16 dtype=f16 mask=none layout=bhsd dist=normal(0,1) scale=auto");
    ac_problem unscaled = j.in.p;
    unscaled.scale = 1.0;
    forward_under(&j, &unscaled);
    cr_assert_eq(judge(&j), AC_VERDICT_FAIL);
    cr_assert_str_eq(j.kind, "O:scaled");
    assert_contains(j.m[AC_OUT_O].hint, "O matches the reference with scale 1 instead of 0.25 (max scaled ");
    assert_contains(j.m[AC_OUT_O].hint, "no softmax scale at all");
    teardown(&j);
}

Test(harness_diagnose, causal_aligned_top_left_where_bottom_right_was_asked_is_named_with_its_rows)
{
    judged j;
    setup(&j,
          "v1 seed=6 b=1 hq=1 hkv=1 nq=12 nk=12 d=8 dtype=f32 mask=causal-br seqlens-q=5 seqlens-k=9 "
          "layout=bhsd dist=normal(0,1) scale=auto");
    ac_problem tl = j.in.p;
    tl.align = AC_ALIGN_TOP_LEFT;
    forward_under(&j, &tl);
    cr_assert_eq(judge(&j), AC_VERDICT_FAIL);
    cr_assert_str_eq(j.kind, "O:scaled");
    /* nq_b = 5 < nk_b = 9: bottom-right row i sees keys 0..i+4, top-left 0..i: every row differs */
    assert_contains(j.m[AC_OUT_O].hint,
                    "O matches the reference with mask=causal-tl instead of causal-br (max scaled ");
    assert_contains(j.m[AC_OUT_O].hint, "aligns the mask top-left (PyTorch's is_causal)");
    assert_contains(j.m[AC_OUT_O].hint, "rows 0..4");
    cr_assert_eq(j.m[AC_OUT_O].n_rows_over, 5);
    teardown(&j);
}

Test(harness_diagnose, gqa_heads_left_right_are_counted_head_by_head_and_row_by_row)
{
    judged j;
    setup(&j, "v1 seed=7 b=1 hq=8 hkv=2 nq=6 nk=10 d=4 dtype=f32 mask=none layout=bhsd dist=normal(0,1) scale=auto");
    double *o = malloc(ac_q_elems(&j.in.p) * sizeof(double));
    memcpy(o, j.ref.o, ac_q_elems(&j.in.p) * sizeof(double));
    for (int h = 0; h < 8; h++) /* heads 0 and 5 right; the others read the wrong KV head's V: far off */
        for (int i = 0; i < 6 && h != 0 && h != 5; i++)
            for (int c = 0; c < 4; c++)
                o[ac_q_index(&j.in.p, 0, h, i, c)] += 0.5;
    put(&j, AC_OUT_O, o);
    cr_assert_eq(judge(&j), AC_VERDICT_FAIL);
    const ac_metrics *m = &j.m[AC_OUT_O];
    cr_assert_eq(m->n_over, 6u * 6 * 4);
    size_t want[8] = {0, 24, 24, 24, 24, 0, 24, 24};
    cr_assert_arr_eq(m->over_per_head, want, sizeof want);
    cr_assert_eq(m->n_heads, 8);
    cr_assert_eq(m->n_rows_over, 6);
    cr_assert_eq(m->n_rows_listed, 6);
    cr_assert(m->rows_over[0].row == 0 && m->rows_over[0].n == 24 && m->rows_over[5].row == 5);
    assert_contains(j.why, "O over budget: 144 of 192 elements, in heads 1-4,6-7 of 8, rows 0..5 (6 rows)");
    cr_assert_str_eq(m->hint, "", "an error that fits no usual mistake gets no hint");
    free(o);
    teardown(&j);
}

Test(harness_diagnose, gradients_off_by_the_scale_are_named_and_o_first_is_the_kind)
{
    judged j;
    setup(&j, "v1 seed=8 b=1 hq=2 hkv=1 nq=5 nk=7 d=16 dtype=f32 mask=none layout=bhsd dist=normal(0,1) scale=auto");
    double *dq = malloc(ac_q_elems(&j.in.p) * sizeof(double));
    for (size_t i = 0; i < ac_q_elems(&j.in.p); i++)
        dq[i] = j.ref.dq[i] * j.in.p.scale; /* the scale applied twice */
    put(&j, AC_OUT_DQ, dq);
    cr_assert_eq(judge(&j), AC_VERDICT_FAIL);
    cr_assert_str_eq(j.kind, "dQ:scaled");
    assert_contains(j.m[AC_OUT_DQ].hint, "dQ matches the reference x 0.25 (the scale; max scaled ");
    assert_contains(j.m[AC_OUT_DQ].hint, "the softmax scale applied twice in the backward");
    free(dq);
    teardown(&j);
}

Test(harness_diagnose, an_all_nan_output_reports_no_magnitude)
{
    judged j;
    setup(&j, "v1 seed=9 b=1 hq=1 hkv=1 nq=4 nk=4 d=4 dtype=bf16 mask=none layout=bhsd dist=normal(0,1) scale=auto");
    double *nan_o = malloc(16 * sizeof(double));
    for (int i = 0; i < 16; i++)
        nan_o[i] = NAN;
    put(&j, AC_OUT_O, nan_o);
    cr_assert_eq(judge(&j), AC_VERDICT_FAIL);
    cr_assert_str_eq(j.kind, "O:unexpected-nan");
    cr_assert_eq(j.m[AC_OUT_O].n_measured, 0u, "nothing entered the magnitudes");
    cr_assert_eq(j.m[AC_OUT_O].n_over, 16u);
    assert_contains(j.why, "first special value at b=0 h=0 row=0 col=0 (expected ");
    assert_contains(j.why, ", got nan)");
    free(nan_o);
    teardown(&j);
}

/* A failure of the mean alone (every element within its budget, the mean error past the naive
 * baseline's): no "over budget" places to give, and no alternative explanation, since any
 * alternative would pass the element-wise check as the output itself does. */
Test(harness_diagnose, a_failure_of_the_mean_alone_names_no_places_and_no_mistake)
{
    judged j;
    /* small inputs: scores near 0, so O under another softmax scale is within budget too */
    setup(&j,
          "v1 seed=9 b=1 hq=2 hkv=2 nq=64 nk=64 d=8 dtype=f32 mask=none layout=bhsd dist=normal(0,0.0001) scale=0.5");
    size_t n = ac_q_elems(&j.in.p);
    double *o = calloc(n, sizeof(double));
    for (size_t i = 0; i < n; i++) /* every element 3.5 units (E 2^-24 for f32) over: under 4, yet biased */
        o[i] = j.ref.o[i] + 3.5 * ldexp(j.ref.e_o[i], -24);
    put(&j, AC_OUT_O, o);
    free(o);
    cr_assert_eq(judge(&j), AC_VERDICT_FAIL, "%s", j.why);
    cr_assert_str_eq(j.kind, "O:vs-naive-mean", "%s", j.why);
    cr_assert_eq(j.m[AC_OUT_O].n_over, 0);
    cr_assert_str_eq(j.m[AC_OUT_O].hint, "", "%s", j.why);
    assert_contains(j.why, "O: no element over budget (1024 compared)");
    cr_assert(strstr(j.why, "rows -1") == NULL && strstr(j.why, "hint") == NULL, "%s", j.why);
    teardown(&j);
}
