/* harness/run/test_run_fp8.c — fp8 inputs end to end (suite harness_fp8): the
 * case line's fp8 fields, the quantised inputs and their descale factors, the
 * error scale's P term against its formula, a planted error reported exactly,
 * correct fp8 kernels within the budgets on every distribution and descale
 * granularity, every fp8 mutant failing, and the naive baseline's recipe. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/harness.h"
#include "harness/run/test_worker_support.h"

TestSuite(harness_fp8, .init = use_attncheck_as_worker);

static ac_case parse(const char *line)
{
    ac_case c;
    ac_err err = {{0}};
    cr_assert_eq(ac_case_parse(line, &c, &err), AC_OK, "%s: %s", line, err.msg);
    return c;
}

static ac_result run_line(const char *kernel, const char *line)
{
    const ac_kernel *k = ac_kernel_find(kernel);
    cr_assert_not_null(k, "no kernel %s", kernel);
    ac_case c = parse(line);
    ac_budgets b;
    ac_err err = {{0}};
    cr_assert_eq(ac_budgets_load(ac_budgets_default_path(), &b, &err), AC_OK, "%s", err.msg);
    ac_run_opts o = {.backward = true, .cert_rows = 2};
    ac_result r;
    cr_assert_eq(ac_run_case(k, &c, &b, &o, &r, &err), AC_OK, "%s on %s: %s", kernel, line, err.msg);
    return r;
}

/* ---- the case line ------------------------------------------------------------ */

Test(harness_fp8, fp8_lines_print_their_recipe_and_other_lines_keep_their_bytes)
{
    const char *fp8 = "v1 seed=3 b=1 hq=2 hkv=1 nq=100 nk=200 d=32 dtype=e4m3 out=f16 descale=block(128) p=bf16 "
                      "mask=none layout=bhsd dist=normal(0,1) scale=auto";
    char buf[AC_CASE_LINE_MAX];
    ac_case c = parse(fp8);
    cr_assert(c.dtype == AC_E4M3 && c.out_dtype == AC_F16 && c.descale_rows == 128 && c.p_dtype == AC_BF16);
    cr_assert_eq(ac_case_out_dtype(&c), AC_F16);
    cr_assert_gt(ac_case_format(&c, buf, sizeof buf), 0);
    cr_assert_str_eq(buf, fp8);
    /* the defaults are spelled out on an fp8 line */
    c = parse("v1 seed=3 b=1 hq=2 hkv=1 nq=10 nk=20 d=32 dtype=e5m2");
    cr_assert_gt(ac_case_format(&c, buf, sizeof buf), 0);
    cr_assert(strstr(buf, " dtype=e5m2 out=bf16 descale=tensor p=e4m3 ") != NULL, "%s", buf);
    cr_assert_eq(ac_case_out_dtype(&c), AC_BF16);
    /* and never on another */
    const char *plain = "v1 seed=3 b=1 hq=2 hkv=1 nq=10 nk=20 d=32 dtype=bf16 mask=none layout=bhsd "
                        "dist=normal(0,1) scale=auto";
    c = parse(plain);
    cr_assert_gt(ac_case_format(&c, buf, sizeof buf), 0);
    cr_assert_str_eq(buf, plain);
    c = parse("v1 seed=3 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=e4m3 descale=head");
    cr_assert_eq(c.descale_rows, AC_DESCALE_HEAD);
    /* the accumulator: printed after p= where it is not f32 (so older fp8 lines keep their bytes) */
    const char *acc = "v1 seed=3 b=1 hq=2 hkv=1 nq=10 nk=20 d=32 dtype=e4m3 out=bf16 descale=tensor p=e4m3 acc=e8m13 "
                      "mask=none layout=bhsd dist=normal(0,1) scale=auto";
    c = parse(acc);
    cr_assert_eq(c.acc_bits, AC_FP8_ACC_HOPPER);
    cr_assert_gt(ac_case_format(&c, buf, sizeof buf), 0);
    cr_assert_str_eq(buf, acc);
    c = parse("v1 seed=3 b=1 hq=2 hkv=1 nq=10 nk=20 d=32 dtype=e4m3 acc=f32");
    cr_assert_eq(c.acc_bits, 0);
    cr_assert_gt(ac_case_format(&c, buf, sizeof buf), 0);
    cr_assert(strstr(buf, "acc=") == NULL, "%s", buf);
}

Test(harness_fp8, bad_fp8_fields_are_refused_naming_the_field)
{
    static const struct {
        const char *tail, *want;
    } bad[] = {
        {"dtype=f16 out=f16", "out: only with an fp8 dtype"},
        {"dtype=bf16 descale=head", "descale: only with an fp8 dtype"},
        {"dtype=f32 p=bf16", "p: only with an fp8 dtype"},
        {"dtype=e4m3 out=f32", "out: expected bf16 or f16"},
        {"dtype=e4m3 out=e4m3", "out: expected bf16 or f16"},
        {"dtype=e4m3 descale=block(100)", "descale: expected tensor, head or block(N)"},
        {"dtype=e4m3 descale=block(0)", "descale: expected"},
        {"dtype=e4m3 descale=rows", "descale: expected"},
        {"dtype=e4m3 p=f32", "p: expected e4m3, e5m2, bf16 or f16"},
        {"dtype=f16 acc=e8m13", "acc: only with an fp8 dtype"},
        {"dtype=e4m3 acc=e8m0", "acc: expected f32 or e8mB"},
        {"dtype=e4m3 acc=e8m23", "acc: expected f32 or e8mB"},
        {"dtype=e4m3 acc=e8m+13", "acc: expected f32 or e8mB"},
        {"dtype=e4m3 acc=bf16", "acc: expected f32 or e8mB"},
        {"dtype=e4m3 dist=dominant(8)", "dominant() plants its key in the dtype"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char line[256];
        snprintf(line, sizeof line, "v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 %s", bad[i].tail);
        ac_case c;
        ac_err err = {{0}};
        cr_assert_eq(ac_case_parse(line, &c, &err), AC_ERR_INPUT, "%s accepted", line);
        cr_assert(strstr(err.msg, bad[i].want) != NULL, "%s: '%s' lacks '%s'", line, err.msg, bad[i].want);
    }
}

/* ---- inputs -------------------------------------------------------------------- */

/* Every widening is exactly code * its group's factor, and over a few seeds the
 * codes reach the format's largest value (satfinite clamps included) and its
 * subnormals; the factor count follows the granularity. */
Test(harness_fp8, inputs_are_codes_times_descale_over_the_whole_range)
{
    static const char *const grains[] = {"tensor", "head", "block(64)"};
    const size_t want_k[] = {1, 2 * 2, 2 * 2 * 3}; /* b=2, hkv=2, nk=130: 3 blocks of 64 */
    bool saw_max = false, saw_sub = false;
    for (int gi = 0; gi < 3; gi++)
        for (int seed = 1; seed <= 6; seed++) {
            char line[256];
            snprintf(
                line, sizeof line,
                "v1 seed=%d b=2 hq=4 hkv=2 nq=70 nk=130 d=32 dtype=e4m3 out=bf16 descale=%s p=e4m3 dist=normal(0,1)",
                seed, grains[gi]);
            ac_case c = parse(line);
            ac_inputs in;
            ac_err err = {{0}};
            cr_assert_eq(ac_inputs_make(&c, &in, &err), AC_OK, "%s", err.msg);
            cr_assert_eq(ac_descale_count(&in.p, AC_TENSOR_K), want_k[gi], "%s", grains[gi]);
            cr_assert(in.p.descale_k == in.descale_k && in.p.fp8_out == AC_BF16 && in.p.fp8_p == AC_E4M3);
            const ac_problem *p = &in.p;
            for (int b = 0; b < 2; b++)
                for (int h = 0; h < 2; h++)
                    for (int j = 0; j < 130; j++)
                        for (int ch = 0; ch < 32; ch++) {
                            size_t at = ac_kv_index(p, b, h, j, ch);
                            uint32_t code = ac_bits_get(AC_E4M3, in.k, at);
                            double want =
                                ac_widen(AC_E4M3, code) * p->descale_k[ac_descale_index(p, AC_TENSOR_K, b, h, j)];
                            cr_assert_eq(in.kd[at], want, "%s: K[%zu] = %a, code 0x%02x times its factor is %a", line,
                                         at, in.kd[at], code, want);
                            saw_max |= (code & 0x7f) == 0x7e;
                            saw_sub |= (code & 0x78) == 0 && (code & 0x7) != 0;
                        }
            ac_inputs_free(&in);
        }
    cr_assert(saw_max && saw_sub, "the codes reach 448 (%d) and the subnormals (%d)", saw_max, saw_sub);
}

/* ---- the error scale ------------------------------------------------------------ */

/* E_O of an fp8 problem against its formula, written out here:
 *   E_O_ic = tau + sum_j (P_ij (u_p/u + 2 rho + rho (G_ij + g_i)) + tau_p max_k P_ik) |V_jc|
 * with p = e4m3 (u_p/u = 16 against bf16, tau_p = 2^-9 / (2 * 256 * 2^-8)) and
 * p = bf16 (u_p/u = 1, tau_p = tau). */
static void check_e_o(const char *line, double p_rel, double tau_p_per_max, bool per_max)
{
    ac_case c = parse(line);
    ac_inputs in;
    ac_reference r;
    ac_err err = {{0}};
    cr_assert_eq(ac_inputs_make(&c, &in, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(ac_reference_make(&in, false, 0, &r, &err), AC_OK, "%s", err.msg);
    const ac_problem *p = &in.p;
    double u = 0x1p-8, rho = 0x1p-24 / u, tau = 0x1p-133 / (2 * u);
    int nk = p->seqlen_k, d = p->head_dim;
    for (int h = 0; h < p->heads_q; h++)
        for (int i = 0; i < p->seqlen_q; i++) {
            double lse = r.lse[ac_lse_index(p, 0, h, i)], prob[64], g[64], g_row = 0.0, p_max = 0.0;
            for (int j = 0; j < nk; j++) {
                double s = 0.0, a = 0.0;
                for (int ch = 0; ch < d; ch++) {
                    s += in.qd[ac_q_index(p, 0, h, i, ch)] * in.kd[ac_kv_index(p, 0, ac_kv_head_of(p, h), j, ch)];
                    a += fabs(in.qd[ac_q_index(p, 0, h, i, ch)] * in.kd[ac_kv_index(p, 0, ac_kv_head_of(p, h), j, ch)]);
                }
                prob[j] = exp(p->scale * s - lse);
                g[j] = d * fabs(p->scale) * a;
                g_row += prob[j] * g[j];
                p_max = fmax(p_max, prob[j]);
            }
            for (int ch = 0; ch < d; ch++) {
                double want = tau;
                for (int j = 0; j < nk; j++)
                    want +=
                        (prob[j] * (p_rel + 2 * rho + rho * (g[j] + g_row)) + tau_p_per_max * (per_max ? p_max : 1.0)) *
                        fabs(in.vd[ac_v_index(p, 0, ac_kv_head_of(p, h), j, ch)]);
                double got = r.e_o[ac_o_index(p, 0, h, i, ch)];
                cr_assert(fabs(got - want) <= 1e-12 * want, "%s: E_O(h=%d i=%d c=%d) = %.17g, formula %.17g", line, h,
                          i, ch, got, want);
            }
        }
    ac_reference_free(&r);
    ac_inputs_free(&in);
}

Test(harness_fp8, error_scale_carries_p_rounding_at_the_declared_format)
{
    check_e_o("v1 seed=5 b=1 hq=2 hkv=1 nq=6 nk=40 d=16 dtype=e4m3 out=bf16 descale=head p=e4m3 dist=normal(0,2)", 16.0,
              0x1p-9 / (2 * 256 * 0x1p-8), true);
    check_e_o("v1 seed=6 b=1 hq=1 hkv=1 nq=5 nk=33 d=8 dtype=e5m2 out=bf16 descale=tensor p=bf16 dist=normal(0,1)", 1.0,
              0x1p-133 / (2 * 0x1p-8), false);
    /* P in f16 (u_p / u = 1/8 of bf16's): O's own rounding to bf16, 1, is the term's floor */
    check_e_o("v1 seed=8 b=1 hq=2 hkv=2 nq=4 nk=21 d=8 dtype=e4m3 out=bf16 descale=head p=f16 dist=normal(0,1)", 1.0,
              0x1p-24 / (2 * 0x1p-8), false);
}

/* The reference rounded to bf16 everywhere, one element moved by 3 u E: the
 * comparator reports exactly that error, scaled, at that element. */
Test(harness_fp8, a_planted_error_is_reported_exactly_at_its_place)
{
    ac_case c = parse("v1 seed=7 b=2 hq=2 hkv=1 nq=40 nk=70 d=32 dtype=e4m3 out=bf16 descale=block(16) p=e4m3 "
                      "mask=causal-br dist=outliers(1,0.001)");
    ac_inputs in;
    ac_reference r;
    ac_err err = {{0}};
    cr_assert_eq(ac_inputs_make(&c, &in, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(ac_reference_make(&in, false, 0, &r, &err), AC_OK, "%s", err.msg);
    size_t n = ac_o_elems(&in.p), at = ac_o_index(&in.p, 1, 1, 33, 17);
    uint16_t *got = malloc(n * sizeof *got);
    cr_assert_not_null(got);
    for (size_t e = 0; e < n; e++)
        got[e] = (uint16_t)ac_narrow(AC_BF16, r.o[e]);
    double u = 0x1p-8, moved = ac_round(AC_BF16, r.o[at] + 3.0 * u * r.e_o[at]);
    got[at] = (uint16_t)ac_narrow(AC_BF16, moved);
    ac_metrics m;
    ac_compare(&in, AC_OUT_O, got, r.o, r.e_o, NULL, &m);
    double want = fabs(moved - r.o[at]) / (u * r.e_o[at]);
    cr_assert_eq(m.max_scaled, want, "max scaled %.17g, planted %.17g", m.max_scaled, want);
    cr_assert(want > 2.5 && want < 3.5, "%g", want);
    cr_assert(
        m.at_max_scaled.b == 1 && m.at_max_scaled.h == 1 && m.at_max_scaled.row == 33 && m.at_max_scaled.col == 17,
        "at b=%d h=%d row=%d col=%d", m.at_max_scaled.b, m.at_max_scaled.h, m.at_max_scaled.row, m.at_max_scaled.col);
    free(got);
    ac_reference_free(&r);
    ac_inputs_free(&in);
}

/* ---- kernels ---------------------------------------------------------------------- */

/* fp8 lines over the distributions (FlashAttention-3's outliers among them),
 * the granularities, GQA, masks, lengths, both formats and both outputs. */
static const char *const good_lines[] = {
    "v1 seed=1 b=2 hq=4 hkv=2 nq=70 nk=130 d=64 dtype=e4m3 out=bf16 descale=head p=%s mask=causal-br layout=bhsd "
    "dist=normal(0,1) scale=auto",
    "v1 seed=2 b=1 hq=2 hkv=2 nq=128 nk=256 d=64 dtype=e4m3 out=bf16 descale=tensor p=%s mask=none layout=bshd "
    "dist=outliers(1,0.001) scale=auto",
    "v1 seed=3 b=2 hq=2 hkv=1 nq=100 nk=200 d=32 dtype=e4m3 out=f16 descale=block(64) p=%s mask=window-br(50,0) "
    "seqlens-q=100,37 seqlens-k=200,80 layout=bhsd dist=normal(0,4) scale=auto",
    "v1 seed=4 b=1 hq=3 hkv=3 nq=65 nk=129 d=16 dtype=e5m2 out=bf16 descale=block(16) p=%s mask=dense(0.5) "
    "maskrows=0.1 layout=bhsd dist=increasing(16) scale=auto",
    "v1 seed=5 b=1 hq=2 hkv=1 nq=64 nk=300 d=32 dtype=e4m3 out=bf16 descale=block(128) p=%s mask=none layout=bhsd "
    "dist=huge(0.9) scale=auto",
    "v1 seed=6 b=2 hq=2 hkv=2 nq=33 nk=70 d=8 dtype=e5m2 out=f16 descale=head p=%s mask=causal-tl layout=bshd "
    "dist=tiny() scale=auto",
    "v1 seed=7 b=1 hq=4 hkv=1 nq=50 nk=90 d=128 dtype=e4m3 out=bf16 descale=tensor p=%s mask=none layout=bhsd "
    "dist=equal() scale=auto",
};

Test(harness_fp8, correct_fp8_kernels_pass_every_line_within_the_budgets)
{
    static const char *const kernels[] = {"cpu-flash-fp8", "cpu-flash-fp8-pbf16", "cpu-flash-fp8-pf16",
                                          "cpu-flash-fp8-acc13"},
                             *const p_fmt[] = {"e4m3", "bf16", "f16", "e4m3 acc=e8m13"};
    for (int k = 0; k < 4; k++)
        for (size_t i = 0; i < sizeof good_lines / sizeof good_lines[0]; i++) {
            char line[512];
            snprintf(line, sizeof line, good_lines[i], p_fmt[k]);
            ac_result r = run_line(kernels[k], line);
            cr_assert_eq(r.verdict, AC_VERDICT_PASS, "%s on %s: %s", kernels[k], line, r.why);
            cr_assert(!r.has_backward && r.m[AC_OUT_O].present && r.m[AC_OUT_O].max_scaled <= 4.0);
        }
}

Test(harness_fp8, a_kernel_is_run_only_on_the_p_format_it_declares)
{
    static const struct {
        const char *kernel, *line, *want;
    } refused[] = {
        {"cpu-flash-fp8-pbf16", "dtype=e4m3 p=e4m3", "rounds P to bf16, the case says p=e4m3"},
        {"cpu-flash-fp8", "dtype=e5m2 p=f16", "rounds P to e4m3, the case says p=f16"},
        {"cpu-flash", "dtype=e4m3", "does not support dtype e4m3"},
        {"cpu-flash-fp8", "dtype=bf16", "does not support dtype bf16"},
        {"cpu-flash-fp8", "dtype=e4m3 acc=e8m13",
         "accumulates its fp8 products (QK^T, PV) in f32, the case says acc=e8m13"},
        {"cpu-flash-fp8-acc13", "dtype=e4m3",
         "accumulates its fp8 products (QK^T, PV) in e8m13, the case says acc=f32"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        char line[128];
        snprintf(line, sizeof line, "v1 seed=1 b=1 hq=1 hkv=1 nq=8 nk=8 d=8 %s", refused[i].line);
        ac_case c = parse(line);
        ac_inputs in;
        ac_err err = {{0}};
        cr_assert_eq(ac_inputs_make(&c, &in, &err), AC_OK, "%s", err.msg);
        cr_assert_eq(ac_kernel_supports(ac_kernel_find(refused[i].kernel), &in.p, c.dtype, false, &err), AC_ERR_INPUT);
        cr_assert(strstr(err.msg, refused[i].want) != NULL, "%s: '%s'", line, err.msg);
        ac_inputs_free(&in);
    }
    cr_assert(!ac_kernel_find("cpu-flash-fp8")->caps.backward, "fp8 is forward only");
}

/* Each planted bug fails on a line that shows it, with O the output. */
Test(harness_fp8, every_fp8_mutant_fails_on_a_line_that_shows_its_bug)
{
    static const struct {
        const char *kernel, *line, *kind;
    } cases[] = {
        {"cpu-flash-fp8-mutant-p-clamp-448", "v1 seed=1 b=1 hq=2 hkv=1 nq=40 nk=64 d=32 dtype=e4m3 dist=normal(0,1)",
         "O:scaled"},
        {"cpu-flash-fp8-mutant-v-descale-twice", "v1 seed=2 b=1 hq=2 hkv=1 nq=40 nk=64 d=32 dtype=e4m3 descale=head",
         "O:scaled"},
        {"cpu-flash-fp8-mutant-e4m3-truncate",
         "v1 seed=3 b=1 hq=2 hkv=2 nq=64 nk=256 d=64 dtype=e4m3 descale=tensor dist=normal(0,1)", "O:vs-naive-mean"},
        {"cpu-flash-fp8-mutant-p-e5m2", "v1 seed=4 b=1 hq=2 hkv=2 nq=64 nk=256 d=64 dtype=e4m3 dist=normal(0,1)",
         "O:vs-naive-mean"},
        {"cpu-flash-fp8-mutant-acc-e8m13", "v1 seed=1 b=1 hq=2 hkv=1 nq=40 nk=64 d=128 dtype=e4m3 dist=normal(0,4)",
         "LSE:scaled"}, /* Hopper's fp8 accumulator behind a declared f32 */
        {"cpu-flash-fp8-mutant-p-unscaled", /* found by fuzz --seed 1, shrunk */
         "v1 seed=771733131 b=1 hq=1 hkv=1 nq=10 nk=5 d=23 dtype=e5m2 out=f16 descale=head p=e4m3 dist=normal(0,4)",
         "O:scaled"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ac_result r = run_line(cases[i].kernel, cases[i].line);
        cr_assert_eq(r.verdict, AC_VERDICT_FAIL, "%s passed %s", cases[i].kernel, cases[i].line);
        cr_assert(strncmp(r.kind, cases[i].kind, strlen(cases[i].kind)) == 0, "%s: kind %s, want %s (%s)",
                  cases[i].kernel, r.kind, cases[i].kind, r.why);
        ac_result base = run_line("cpu-flash-fp8", cases[i].line);
        cr_assert_eq(base.verdict, AC_VERDICT_PASS, "the correct kernel on %s: %s", cases[i].line, base.why);
    }
}

/* The naive baseline is itself a correct fp8 kernel of the declared recipe:
 * within the contract, and at least as far from the reference as cpu-flash-fp8
 * on average (the gate's vs-naive ratio near 1). */
Test(harness_fp8, naive_baseline_follows_the_declared_recipe)
{
    ac_result r = run_line("cpu-flash-fp8",
                           "v1 seed=8 b=1 hq=4 hkv=2 nq=64 nk=512 d=64 dtype=e4m3 out=bf16 "
                           "descale=head p=e4m3 dist=normal(0,1)");
    cr_assert_eq(r.verdict, AC_VERDICT_PASS, "%s", r.why);
    const ac_metrics *m = &r.m[AC_OUT_O];
    cr_assert(m->has_naive && m->vs_naive_mean > 0.8 && m->vs_naive_mean < 1.25, "vs-naive mean %g", m->vs_naive_mean);
    ac_case c = parse("v1 seed=8 b=1 hq=4 hkv=2 nq=64 nk=512 d=64 dtype=e4m3 out=bf16 descale=head p=e4m3 "
                      "dist=normal(0,1)");
    ac_inputs in;
    ac_reference ref;
    ac_err err = {{0}};
    cr_assert_eq(ac_inputs_make(&c, &in, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(ac_reference_make(&in, false, 0, &ref, &err), AC_OK, "%s", err.msg);
    double worst = 0.0;
    for (size_t e = 0; e < ac_o_elems(&in.p); e++) {
        cr_assert_eq(ref.naive_o[e], ac_round(AC_BF16, ref.naive_o[e]), "naive O[%zu] is not a bf16 value", e);
        worst = fmax(worst, fabs(ref.naive_o[e] - ref.o[e]) / (0x1p-8 * ref.e_o[e]));
    }
    cr_assert(worst > 0.05 && worst <= 4.0, "the naive baseline's max scaled error %g", worst);
    ac_reference_free(&ref);
    ac_inputs_free(&in);
}

/* FlashAttention-3's setup, fa3(0.001,10), per-tensor and per-head: the RMSE
 * the peers use comes with every fp8 record and in the summary, the kernel's
 * and the naive baseline's (the latter the same recipe: alike). */
Test(harness_fp8, rmse_is_reported_beside_the_verdict_on_fa3_outliers)
{
    ac_summary s;
    memset(&s, 0, sizeof s);
    static const char *const grains[] = {"tensor", "head"};
    for (int g = 0; g < 2; g++) {
        char line[256];
        snprintf(line, sizeof line,
                 "v1 seed=9 b=1 hq=2 hkv=2 nq=64 nk=256 d=64 dtype=e4m3 out=bf16 descale=%s "
                 "p=e4m3 dist=fa3(0.001,10)",
                 grains[g]);
        ac_result r = run_line("cpu-flash-fp8", line);
        cr_assert_eq(r.verdict, AC_VERDICT_PASS, "%s: %s", line, r.why);
        const ac_metrics *m = &r.m[AC_OUT_O];
        cr_assert(m->rmse > 0.0 && m->rmse <= m->max_abs && m->rmse >= m->mean_abs * 0.5, "rmse %g", m->rmse);
        cr_assert(m->naive_rmse > 0.5 * m->rmse && m->naive_rmse < 2.0 * m->rmse, "naive %g, kernel %g", m->naive_rmse,
                  m->rmse);
        ac_summary_add(&s, &r);
    }
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert_not_null(f);
    ac_summary_print(f, "cpu-flash-fp8", &s);
    fclose(f);
    cr_assert(strstr(text, "e4m3 O RMSE (not gated; the largest of a case): kernel ") != NULL, "%s", text);
    free(text);
    ac_case c = parse("v1 seed=1 b=1 hq=1 hkv=1 nq=4 nk=4 d=8 dtype=e4m3 dist=fa3(0.001,10)");
    cr_assert(c.dist == AC_DIST_FA3 && c.dist_a == 0.001 && c.dist_b == 10.0);
}

/* The descale factors sit in the kernel's arena as inputs: a kernel that
 * changes one fails input-modified, naming the buffer and the factor. */
static int descale_writing_forward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_fwd_args *a,
                                   ac_err *err)
{
    const ac_kernel *base = ac_kernel_find("cpu-flash-fp8");
    int st = base->forward(base, p, t, a, err);
    ((float *)p->descale_v)[1] *= 2.0f; /* after the fact: the outputs are right, the input is not */
    (void)self;
    return st;
}

Test(harness_fp8, a_kernel_that_changes_a_descale_factor_fails_input_modified)
{
    ac_kernel k = *ac_kernel_find("cpu-flash-fp8");
    k.name = "cpu-flash-fp8-descale-writer";
    k.forward = descale_writing_forward;
    ac_case c = parse("v1 seed=3 b=1 hq=2 hkv=2 nq=16 nk=40 d=8 dtype=e4m3 descale=head");
    ac_budgets b;
    ac_err err = {{0}};
    cr_assert_eq(ac_budgets_load(ac_budgets_default_path(), &b, &err), AC_OK, "%s", err.msg);
    ac_run_opts o = {.backward = false, .cert_rows = 0};
    ac_result r;
    cr_assert_eq(ac_run_case(&k, &c, &b, &o, &r, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(r.verdict, AC_VERDICT_FAIL);
    cr_assert_str_eq(r.kind, "kernel:input-modified", "%s", r.why);
    cr_assert(strstr(r.why, "descale_v") != NULL && strstr(r.why, "factor 1") != NULL, "%s", r.why);
}
