/* harness/run/test_run_variants.c — the variants end to end (suite
 * harness_variants): correct kernels stay under the budgets on every variant,
 * each variant's planted bug fails with the output it breaks, a kernel that
 * does not claim a variant is not run on it, plugins of both ABI versions,
 * and `check` on files with the variants' options. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/files/test_tmpdir.h"
#include "harness/harness.h"
#include "harness/run/test_worker_support.h"
#include "plugins/plugin_paths.h"

/* check --kernel runs it in a worker; a test's temp dirs are removed after it, even when it fails */
TestSuite(harness_variants, .init = use_attncheck_as_worker, .fini = ac_test_tmpdirs_remove);

static ac_budgets load_budgets(void)
{
    ac_budgets b;
    ac_err err = {{0}};
    cr_assert_eq(ac_budgets_load(ac_budgets_default_path(), &b, &err), AC_OK, "%s", err.msg);
    return b;
}

static ac_result run_line(const char *kernel, const char *line)
{
    const ac_kernel *k = ac_kernel_find(kernel);
    cr_assert_not_null(k, "no kernel %s", kernel);
    ac_case c;
    ac_err err = {{0}};
    cr_assert_eq(ac_case_parse(line, &c, &err), AC_OK, "%s: %s", line, err.msg);
    ac_budgets b = load_budgets();
    ac_run_opts o = {.backward = true, .cert_rows = 2};
    ac_result r;
    cr_assert_eq(ac_run_case(k, &c, &b, &o, &r, &err), AC_OK, "%s on %s: %s", kernel, line, err.msg);
    return r;
}

/* Lines that reach the variants' edges: every correct kernel passes them. */
static const char *const good_lines[] = {
    "v1 seed=1 b=2 hq=4 hkv=2 nq=70 nk=130 d=24 dtype=bf16 mask=causal-br layout=bhsd dist=normal(0,1) scale=auto "
    "softcap=30",
    "v1 seed=2 b=1 hq=2 hkv=1 nq=65 nk=65 d=16 dtype=f16 mask=none layout=bshd dist=increasing(64) scale=auto "
    "softcap=0.25",
    "v1 seed=3 b=1 hq=1 hkv=1 nq=40 nk=90 d=32 dtype=f32 mask=window-tl(10,3) layout=bhsd dist=normal(0,4) "
    "scale=auto softcap=5",
    "v1 seed=4 b=3 hq=2 hkv=2 nq=17 nk=33 d=8 dtype=f16 mask=dense(0.5) maskrows=0.25 seqlens-q=17,0,5 "
    "seqlens-k=33,10,0 layout=bhsd dist=huge(0.9) scale=auto softcap=1",
    "v1 seed=5 b=2 hq=4 hkv=1 nq=40 nk=70 d=16 dtype=bf16 mask=causal-br layout=bshd dist=normal(0,1) scale=auto "
    "sinks=normal(0,1)",
    "v1 seed=6 b=1 hq=2 hkv=2 nq=80 nk=80 d=32 dtype=f32 mask=dense(0.3) maskrows=0.1 layout=bhsd "
    "dist=uniform(0,1) scale=auto sinks=over(20)",
    "v1 seed=7 b=2 hq=3 hkv=3 nq=33 nk=65 d=8 dtype=f16 mask=window-br(5,0) seqlens-q=33,1 layout=bhsd "
    "dist=increasing(16) scale=auto softcap=5 sinks=over(0)",
    "v1 seed=8 b=1 hq=4 hkv=1 nq=70 nk=70 d=192 dtype=bf16 mask=causal-br layout=bshd dist=normal(0,1) scale=auto "
    "dv=128",
    "v1 seed=9 b=2 hq=2 hkv=2 nq=40 nk=65 d=24 dtype=f32 mask=dense(0.5) maskrows=0.1 seqlens-k=65,30 layout=bhsd "
    "dist=uniform(-1,1) scale=auto dv=40 sinks=normal(0,1)",
    "v1 seed=10 b=2 hq=8 hkv=2 nq=70 nk=130 d=32 dtype=bf16 mask=causal-br seqlens-q=70,9 layout=bshd "
    "dist=normal(0,1) scale=auto alibi=paper",
    "v1 seed=11 b=3 hq=3 hkv=1 nq=65 nk=40 d=16 dtype=f16 mask=none layout=bhsd dist=increasing(16) scale=auto "
    "softcap=5 alibi=uniform(1,16):bh",
    "v1 seed=12 b=2 hq=2 hkv=2 nq=33 nk=80 d=8 dtype=f32 mask=window-tl(20,inf) layout=bhsd dist=normal(0,2) "
    "scale=auto sinks=over(4) alibi=paper:bh",
    "v1 seed=13 b=2 hq=4 hkv=2 nq=70 nk=130 d=32 dtype=bf16 mask=causal-br layout=bhsd dist=normal(0,1) scale=auto "
    "bias=normal(0,1):1h",
    "v1 seed=14 b=2 hq=2 hkv=1 nq=65 nk=40 d=16 dtype=f16 mask=none layout=bshd dist=normal(0,1) scale=auto "
    "bias=normal(-2,1):bh:f32:inf(0.2)",
    "v1 seed=15 b=3 hq=2 hkv=2 nq=33 nk=33 d=8 dtype=f32 mask=none seqlens-q=33,5,0 layout=bhsd dist=normal(0,1) "
    "scale=auto softcap=5 bias=normal(0,1):b1:inf(0.9)",
    "v1 seed=16 b=2 hq=4 hkv=2 nq=200 nk=200 d=32 dtype=bf16 mask=window-br(40,0) layout=bhsd dist=normal(0,1) "
    "scale=auto sinktokens=4",
    "v1 seed=17 b=1 hq=2 hkv=1 nq=130 nk=300 d=16 dtype=f16 mask=window-tl(20,5) layout=bshd dist=normal(0,1) "
    "scale=auto sinktokens=64",
};

Test(harness_variants, correct_kernels_pass_every_variant_line_within_the_budgets)
{
    const char *kernels[] = {"cpu-flash", "cpu-flash-128x64", "ref-fp64"};
    for (size_t k = 0; k < 3; k++)
        for (size_t l = 0; l < sizeof good_lines / sizeof *good_lines; l++) {
            ac_result r = run_line(kernels[k], good_lines[l]);
            cr_assert_eq(r.verdict, AC_VERDICT_PASS, "%s on %s: %s", kernels[k], good_lines[l], r.why);
            cr_assert(r.has_backward && r.m[AC_OUT_DQ].present, "%s: the backward ran", kernels[k]);
        }
}

/* Each variant's planted bug fails the line that exposes it, with the output it breaks. */
typedef struct {
    const char *mutant, *line, *kind;
} exposed;

static const exposed exposing[] = {
    {"softcap-before-scale",
     "v1 seed=1 b=1 hq=1 hkv=1 nq=8 nk=8 d=16 dtype=f16 mask=none layout=bhsd dist=normal(0,1) scale=auto softcap=1",
     "O:scaled"},
    {"sink-not-in-lse",
     "v1 seed=1 b=1 hq=2 hkv=1 nq=8 nk=8 d=16 dtype=f16 mask=none layout=bhsd dist=normal(0,1) scale=auto "
     "sinks=normal(0,1)",
     "LSE:scaled"},
    {"alibi-top-left",
     "v1 seed=1 b=1 hq=2 hkv=1 nq=8 nk=24 d=16 dtype=f16 mask=none layout=bhsd dist=normal(0,1) scale=auto alibi=paper",
     "O:scaled"},
    {"bias-wrong-axis",
     "v1 seed=1 b=2 hq=2 hkv=1 nq=8 nk=24 d=16 dtype=f16 mask=none layout=bhsd dist=normal(0,1) scale=auto "
     "bias=normal(0,2):1h",
     "O:scaled"},
    {"sink-tokens-off-by-one",
     "v1 seed=1 b=1 hq=2 hkv=1 nq=40 nk=40 d=16 dtype=f16 mask=window-br(8,0) layout=bhsd dist=normal(0,1) scale=auto "
     "sinktokens=2",
     "O:scaled"},
    {"dv-with-dqk-stride",
     "v1 seed=1 b=1 hq=2 hkv=1 nq=8 nk=8 d=16 dtype=f16 mask=none layout=bhsd dist=normal(0,1) scale=auto dv=8",
     "O:scaled"},
};

Test(harness_variants, each_variant_mutant_fails_its_line_with_the_output_it_breaks)
{
    for (size_t m = 0; m < sizeof exposing / sizeof *exposing; m++) {
        char name[96];
        snprintf(name, sizeof name, "cpu-flash-mutant-%s", exposing[m].mutant);
        ac_result r = run_line(name, exposing[m].line);
        cr_assert_eq(r.verdict, AC_VERDICT_FAIL, "%s passed %s", name, exposing[m].line);
        cr_assert_str_eq(r.kind, exposing[m].kind, "%s: %s", name, r.why);
        ac_result base = run_line("cpu-flash", exposing[m].line);
        cr_assert_eq(base.verdict, AC_VERDICT_PASS, "cpu-flash on the same line: %s", base.why);
    }
}

/* ref-fp64 with its dSink moved by 1/64: O, LSE, dQ, dK, dV exact, dSink fails
 * (in f32, where dSink's scale is u_f32 sized; a bf16 dSink's scale admits the
 * rounding of every D it sums, a few percent of a cancelling sum). */
static int dsink_off_backward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_bwd_args *a, ac_err *err)
{
    (void)self;
    const ac_kernel *ref = ac_kernel_find("ref-fp64");
    int st = ref->backward(ref, p, t, a, err);
    for (int h = 0; st == AC_OK && h < p->heads_q; h++)
        a->dsink[h] *= 1.0f + 1.0f / 64;
    return st;
}

Test(harness_variants, a_planted_dsink_error_fails_dsink_alone)
{
    ac_kernel k = *ac_kernel_find("ref-fp64");
    k.name = "ref-fp64-dsink-off";
    k.backward = dsink_off_backward;
    ac_case c;
    cr_assert_eq(ac_case_parse(good_lines[5], &c, NULL), AC_OK);
    cr_assert_eq(c.dtype, AC_F32);
    ac_budgets b = load_budgets();
    ac_run_opts o = {.backward = true};
    ac_result r;
    ac_err err = {{0}};
    cr_assert_eq(ac_run_case(&k, &c, &b, &o, &r, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(r.verdict, AC_VERDICT_FAIL);
    cr_assert_str_eq(r.kind, "dSink:scaled", "%s", r.why);
    for (int out = AC_OUT_O; out <= AC_OUT_DV; out++)
        cr_assert(r.m[out].max_scaled < 1.0, "%s: %g", ac_output_name((ac_output)out), r.m[out].max_scaled);
}

/* d_v: a kernel listing (d_qk, d_v) pairs runs only those. */
Test(harness_variants, a_kernel_listing_dv_pairs_is_run_only_on_them)
{
    ac_kernel k = *ac_kernel_find("cpu-flash");
    k.name = "cpu-flash-mla-only";
    k.caps.n_dv_pairs = 1;
    k.caps.dv_pairs[0][0] = 192, k.caps.dv_pairs[0][1] = 128;
    ac_problem p = ac_problem_dense(1, 1, 1, 8, 8, 192);
    p.head_dim_v = 128;
    ac_err err = {{0}};
    cr_assert_eq(ac_kernel_supports(&k, &p, AC_BF16, true, &err), AC_OK, "%s", err.msg);
    p.head_dim_v = 96;
    cr_assert_eq(ac_kernel_supports(&k, &p, AC_BF16, true, &err), AC_ERR_INPUT);
    cr_assert_not_null(strstr(err.msg, "d_v=96"), "%s", err.msg);
}

Test(harness_variants, a_kernel_that_does_not_claim_a_variant_is_not_run_on_it)
{
    ac_kernel k = *ac_kernel_find("cpu-flash");
    k.name = "cpu-flash-no-softcap";
    k.caps.variants &= ~(unsigned)AC_VAR_SOFTCAP;
    ac_case c;
    cr_assert_eq(ac_case_parse(good_lines[0], &c, NULL), AC_OK);
    ac_budgets b = load_budgets();
    ac_run_opts o = {.backward = true};
    ac_result r;
    ac_err err = {{0}};
    cr_assert_eq(ac_run_case(&k, &c, &b, &o, &r, &err), AC_ERR_INPUT);
    cr_assert(r.unsupported, "outside its claims: skipped, not failed");
    cr_assert_not_null(strstr(r.why, "softcap"), "%s", r.why);
}

/* ---- plugins: ABI 1 runs only plain problems, ABI 2 its claimed variants ----------------- */

Test(harness_variants, an_abi_1_plugin_loads_and_is_not_run_on_variants)
{
    const ac_kernel *k;
    ac_err err = {{0}};
    cr_assert_eq(ac_plugin_load(AC_EXAMPLE_PLUGIN, &k, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(k->caps.variants, 0u);
    ac_case c;
    cr_assert_eq(ac_case_parse(good_lines[0], &c, NULL), AC_OK);
    ac_budgets b = load_budgets();
    ac_run_opts o = {.backward = true};
    ac_result r;
    cr_assert_eq(ac_run_case(k, &c, &b, &o, &r, &err), AC_ERR_INPUT);
    cr_assert(r.unsupported);
}

Test(harness_variants, an_abi_2_plugin_runs_the_variants_it_claims)
{
    const ac_kernel *k;
    ac_err err = {{0}};
    cr_assert_eq(ac_plugin_load(AC_EXAMPLE_PLUGIN_V2, &k, &err), AC_OK, "%s", err.msg);
    cr_assert_str_eq(k->name, "example-flash-cpu-v2");
    cr_assert_eq(k->caps.variants, (unsigned)(AC_VAR_SOFTCAP | AC_VAR_SINKS | AC_VAR_ALIBI));
    for (size_t l = 0; l < sizeof good_lines / sizeof *good_lines; l++) {
        ac_case c;
        cr_assert_eq(ac_case_parse(good_lines[l], &c, NULL), AC_OK);
        if (c.head_dim_v != 0 || c.bias != AC_BIAS_NONE || c.sink_tokens) /* the example claims none of these */
            continue;
        ac_result r = run_line("example-flash-cpu-v2", good_lines[l]);
        cr_assert_eq(r.verdict, AC_VERDICT_PASS, "%s: %s", good_lines[l], r.why);
    }
}

static void refused(const char *path, const char *text)
{
    const ac_kernel *k = NULL;
    ac_err err = {{0}};
    cr_assert_eq(ac_plugin_load(path, &k, &err), AC_ERR_INPUT, "%s loaded", path);
    cr_assert_not_null(strstr(err.msg, text), "message '%s' lacks '%s'", err.msg, text);
    cr_assert_null(ac_kernel_find("bad-plugin"));
}

Test(harness_variants, abi_2_descriptors_broken_in_their_own_fields_are_refused)
{
    refused(AC_BAD_PLUGIN_V2SIZE, "struct_size");
    refused(AC_BAD_PLUGIN_V2NOFWD, "forward2 entry point is NULL");
    refused(AC_BAD_PLUGIN_V2VARIANT, "unknown variant bits");
    refused(AC_BAD_PLUGIN_V2VKFP8, "v_from_k with fp8 dtypes");
}

/* ---- check on files --------------------------------------------------------------------------- */

/* q, k, v, do of a case line (and o of `kernel` on the problem with `softcap`) as .npy in dir. */
static void write_case(const char *dir, const char *line, const char *kernel, double softcap)
{
    ac_case c;
    ac_inputs in;
    ac_err err = {{0}};
    cr_assert_eq(ac_case_parse(line, &c, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(ac_inputs_make(&c, &in, &err), AC_OK, "%s", err.msg);
    size_t no = ac_o_elems(&in.p), nl = ac_lse_elems(&in.p), es = ac_dtype_size(c.dtype);
    void *o = malloc(no * es);
    float *lse = malloc(nl * sizeof(float));
    in.p.softcap = softcap;
    const ac_kernel *k = ac_kernel_find(kernel);
    ac_fwd_args fa = {.q = in.q, .k = in.k, .v = in.v, .o = o, .lse = lse};
    cr_assert_eq(k->forward(k, &in.p, c.dtype, &fa, &err), AC_OK, "%s", err.msg);
    const char *names[] = {"q", "k", "v", "do", "o"};
    void *bufs[] = {in.q, in.k, in.v, in.d_o, o};
    for (int i = 0; i < 5; i++) {
        bool q_like = i != 1 && i != 2, d_v_cols = i >= 2; /* v, do, o have d_v columns */
        ac_tensor t = {.dtype = AC_TF_F16,
                       .ndim = 4,
                       .shape = {c.batch, q_like ? c.heads_q : c.heads_kv, q_like ? c.seqlen_q : c.seqlen_k,
                                 d_v_cols ? ac_head_dim_v(&in.p) : c.head_dim},
                       .data = bufs[i]};
        t.n_elems = (size_t)t.shape[0] * t.shape[1] * t.shape[2] * t.shape[3];
        char path[128];
        snprintf(path, sizeof path, "%s/%s.npy", dir, names[i]);
        cr_assert_eq(ac_npy_write(path, &t, &err), AC_OK, "%s", err.msg);
    }
    free(o);
    free(lse);
    ac_inputs_free(&in);
}

static int check_dir(const char *dir, const char *opt, const char *value)
{
    char *argv[] = {"check", (char *)dir, (char *)opt, (char *)value, "--cert-rows", "0", NULL};
    return ac_cmd_check(6, argv);
}

/* check with --sinks FILE: the kernel's O, LSE and dSink judged against the sinks given. */
Test(harness_variants, check_runs_a_kernel_with_the_sinks_it_is_given)
{
    char *dir = ac_test_tmpdir("ac-var");
    write_case(dir,
               "v1 seed=8 b=1 hq=2 hkv=1 nq=20 nk=30 d=16 dtype=f16 mask=none layout=bhsd dist=normal(0,1) "
               "scale=auto",
               "cpu-flash", 0.0);
    float logits[2] = {1.5f, -0.5f};
    char path[128];
    snprintf(path, sizeof path, "%s/sinks.npy", dir);
    ac_tensor t = {.dtype = AC_TF_F32, .ndim = 1, .shape = {2}, .n_elems = 2, .data = logits};
    ac_err err = {{0}};
    cr_assert_eq(ac_npy_write(path, &t, &err), AC_OK, "%s", err.msg);
    char *argv[] = {"check", dir, "--kernel", "cpu-flash", "--sinks", path, "--cert-rows", "0", NULL};
    cr_assert_eq(ac_cmd_check(8, argv), AC_OK, "cpu-flash computes with the sinks it is given and passes");
    char *bad[] = {"check", dir, "--kernel", "cpu-flash-mutant-sink-not-in-lse", "--sinks", path, NULL};
    cr_assert_eq(ac_cmd_check(6, bad), AC_FAIL_ACCURACY, "the sink left out of LSE fails");
    float wrong[3] = {0, 0, 0};
    ac_tensor t3 = {.dtype = AC_TF_F32, .ndim = 1, .shape = {3}, .n_elems = 3, .data = wrong};
    cr_assert_eq(ac_npy_write(path, &t3, &err), AC_OK);
    cr_assert_eq(ac_cmd_check(8, argv), AC_ERR_INPUT, "3 logits for 2 heads is bad input");
}

/* d_v comes from v's shape: o and do follow it, and reference writes o and dv so. */
Test(harness_variants, check_takes_d_v_from_the_shape_of_v)
{
    char *dir = ac_test_tmpdir("ac-var");
    char out[64];
    write_case(dir,
               "v1 seed=9 b=1 hq=2 hkv=1 nq=20 nk=30 d=24 dtype=f16 mask=none layout=bhsd dist=normal(0,1) "
               "scale=auto dv=16",
               "cpu-flash", 0.0);
    char *argv[] = {"check", dir, "--cert-rows", "0", NULL};
    cr_assert_eq(ac_cmd_check(4, argv), AC_OK, "cpu-flash's O of d_v = 16 passes");
    snprintf(out, sizeof out, "%s/ref", dir);
    char *ref[] = {"reference", dir, "--out", out, NULL};
    cr_assert_eq(ac_cmd_reference(4, ref), AC_OK);
    char path[128];
    snprintf(path, sizeof path, "%s/o.npy", out);
    ac_tensor t;
    ac_err err = {{0}};
    cr_assert_eq(ac_npy_read(path, "o", &t, &err), AC_OK, "%s", err.msg);
    cr_assert(t.ndim == 4 && t.shape[3] == 16 && t.shape[2] == 20, "reference o: (%lld, %lld, %lld, %lld)",
              (long long)t.shape[0], (long long)t.shape[1], (long long)t.shape[2], (long long)t.shape[3]);
    ac_tensor_free(&t);
}

Test(harness_variants, check_judges_a_softcap_kernel_by_the_softcap_it_is_told)
{
    char *dir = ac_test_tmpdir("ac-var");
    write_case(dir,
               "v1 seed=5 b=1 hq=2 hkv=1 nq=20 nk=30 d=16 dtype=f16 mask=none layout=bhsd dist=normal(0,2) "
               "scale=auto",
               "cpu-flash", 30.0);
    cr_assert_eq(check_dir(dir, "--softcap", "30"), AC_OK, "the softcap the outputs were made with passes");
    cr_assert_eq(check_dir(dir, "--softcap", "5"), AC_FAIL_ACCURACY, "softcap 30 checked as 5 fails");
    cr_assert_eq(check_dir(dir, "--softcap", "-1"), AC_ERR_INPUT, "a bad softcap is bad input");
}

/* check with --alibi FILE: (Hq) and (B, Hq) slopes; a kernel's O made with
 * other slopes (here none) fails, one made with them passes. */
Test(harness_variants, check_judges_alibi_by_the_slopes_it_is_given)
{
    char *dir = ac_test_tmpdir("ac-var");
    char path[128];
    write_case(dir,
               "v1 seed=6 b=2 hq=2 hkv=1 nq=20 nk=30 d=16 dtype=f16 mask=none layout=bhsd dist=normal(0,1) "
               "scale=auto",
               "cpu-flash", 0.0);
    float slopes[4] = {0.5f, 0.125f, 0.25f, 1.0f};
    ac_err err = {{0}};
    snprintf(path, sizeof path, "%s/alibi.npy", dir);
    ac_tensor t = {.dtype = AC_TF_F32, .ndim = 2, .shape = {2, 2}, .n_elems = 4, .data = slopes};
    cr_assert_eq(ac_npy_write(path, &t, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(check_dir(dir, "--alibi", path), AC_FAIL_ACCURACY, "O without ALiBi checked with slopes fails");
    char *run[] = {"check", dir, "--kernel", "cpu-flash", "--alibi", path, "--cert-rows", "0", NULL};
    cr_assert_eq(ac_cmd_check(8, run), AC_OK, "cpu-flash given the (B, Hq) slopes passes");
    char *late[] = {"check", dir, "--kernel", "cpu-flash-mutant-alibi-top-left", "--alibi", path, NULL};
    cr_assert_eq(ac_cmd_check(6, late), AC_FAIL_ACCURACY, "top-left ALiBi fails (nq = 20 != nk = 30)");
    ac_tensor t3 = {.dtype = AC_TF_F32, .ndim = 1, .shape = {3}, .n_elems = 3, .data = slopes};
    cr_assert_eq(ac_npy_write(path, &t3, &err), AC_OK);
    cr_assert_eq(ac_cmd_check(8, run), AC_ERR_INPUT, "3 slopes for 2 heads is bad input");
}

/* alibi=paper: the ALiBi paper's geometric slopes, exactly; :bh halves them per batch. */
Test(harness_variants, alibi_paper_slopes_are_the_papers_geometric_sequence)
{
    static const struct {
        int hq;
        float want[8];
    } rows[] = {
        {8, {0.5f, 0.25f, 0.125f, 0.0625f, 0x1p-5f, 0x1p-6f, 0x1p-7f, 0x1p-8f}},
        {4, {0.25f, 0x1p-4f, 0x1p-6f, 0x1p-8f}},
        /* 6 heads: 4's slopes, then 8's odd-numbered ones (2^-1, 2^-3), as get_slopes interleaves */
        {6, {0.25f, 0x1p-4f, 0x1p-6f, 0x1p-8f, 0.5f, 0.125f}},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        char line[256];
        snprintf(line, sizeof line,
                 "v1 seed=1 b=2 hq=%d hkv=1 nq=4 nk=4 d=4 dtype=f32 mask=none layout=bhsd "
                 "dist=normal(0,1) scale=auto alibi=paper:bh",
                 rows[r].hq);
        ac_case c;
        ac_inputs in;
        ac_err err = {{0}};
        cr_assert_eq(ac_case_parse(line, &c, &err), AC_OK, "%s", err.msg);
        cr_assert_eq(ac_inputs_make(&c, &in, &err), AC_OK, "%s", err.msg);
        cr_assert_eq(in.p.alibi_batch, 2);
        for (int h = 0; h < rows[r].hq; h++) {
            cr_assert_eq(in.p.alibi_slopes[h], rows[r].want[h], "hq=%d head %d: %a", rows[r].hq, h,
                         (double)in.p.alibi_slopes[h]);
            cr_assert_eq(in.p.alibi_slopes[rows[r].hq + h], rows[r].want[h] / 2, "batch 1 halves them");
        }
        ac_inputs_free(&in);
    }
}

/* ref-fp64 with its dBias moved by 1/64: every other output exact, dBias fails
 * at the entry it moved most (an f32 bias on an f16 case: dBias in f32 units). */
static int dbias_off_backward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_bwd_args *a, ac_err *err)
{
    (void)self;
    const ac_kernel *ref = ac_kernel_find("ref-fp64");
    int st = ref->backward(ref, p, t, a, err);
    for (size_t x = 0; st == AC_OK && x < ac_bias_elems(p); x++)
        ((float *)a->dbias)[x] *= 1.0f + 1.0f / 64;
    return st;
}

Test(harness_variants, a_planted_dbias_error_fails_dbias_alone)
{
    ac_kernel k = *ac_kernel_find("ref-fp64");
    k.name = "ref-fp64-dbias-off";
    k.backward = dbias_off_backward;
    ac_case c;
    cr_assert_eq(ac_case_parse(good_lines[13], &c, NULL), AC_OK);
    cr_assert(c.bias_f32 && c.dtype == AC_F16, "%s", good_lines[13]);
    ac_budgets b = load_budgets();
    ac_run_opts o = {.backward = true};
    ac_result r;
    ac_err err = {{0}};
    cr_assert_eq(ac_run_case(&k, &c, &b, &o, &r, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(r.verdict, AC_VERDICT_FAIL, "%s", r.why);
    cr_assert_str_eq(r.kind, "dBias:scaled", "%s", r.why);
    for (int out = AC_OUT_O; out <= AC_OUT_DV; out++)
        cr_assert_lt(r.m[out].max_scaled, 1.0, "%s is the reference's own: %g", ac_output_name((ac_output)out),
                     r.m[out].max_scaled);
    cr_assert_gt(r.m[AC_OUT_DBIAS].max_scaled, 8.0, "1/64 of dBias in f32 units, twice the budget at least: %g",
                 r.m[AC_OUT_DBIAS].max_scaled);
}

/* check with --bias FILE (f32 (1, Hq, Nq, Nk)) and a dbias tensor in the files. */
Test(harness_variants, check_judges_a_bias_and_its_gradient)
{
    char *dir = ac_test_tmpdir("ac-var");
    char path[128], out[64];
    write_case(dir,
               "v1 seed=7 b=2 hq=2 hkv=1 nq=12 nk=20 d=16 dtype=f16 mask=none layout=bhsd dist=normal(0,1) "
               "scale=auto",
               "cpu-flash", 0.0);
    float bias[2 * 12 * 20];
    for (int x = 0; x < 2 * 12 * 20; x++)
        bias[x] = x % 9 == 4 ? -INFINITY : (float)((x * 37 % 23) - 11) / 8.0f;
    ac_err err = {{0}};
    snprintf(path, sizeof path, "%s/bias.npy", dir);
    ac_tensor t = {.dtype = AC_TF_F32, .ndim = 4, .shape = {1, 2, 12, 20}, .n_elems = 480, .data = bias};
    cr_assert_eq(ac_npy_write(path, &t, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(check_dir(dir, "--bias", path), AC_FAIL_ACCURACY, "O made without the bias fails");
    char *run[] = {"check", dir, "--kernel", "cpu-flash", "--bias", path, "--cert-rows", "0", NULL};
    cr_assert_eq(ac_cmd_check(8, run), AC_OK, "cpu-flash given the bias passes, dBias included");
    char *axis[] = {"check", dir, "--kernel", "cpu-flash-mutant-bias-wrong-axis", "--bias", path, NULL};
    cr_assert_eq(ac_cmd_check(6, axis), AC_FAIL_ACCURACY, "the bias read on the wrong axis fails");
    snprintf(out, sizeof out, "%s/ref", dir);
    char *ref[] = {"reference", dir, "--bias", path, "--out", out, NULL};
    cr_assert_eq(ac_cmd_reference(6, ref), AC_OK);
    snprintf(path, sizeof path, "%s/dbias.npy", out);
    ac_tensor d;
    cr_assert_eq(ac_npy_read(path, "dbias", &d, &err), AC_OK, "%s", err.msg);
    cr_assert(d.ndim == 4 && d.shape[0] == 1 && d.shape[1] == 2 && d.shape[2] == 12 && d.shape[3] == 20,
              "reference dbias has the bias's shape");
    for (size_t x = 0; x < d.n_elems; x++)
        if (bias[x] == -INFINITY)
            cr_assert_eq(((double *)d.data)[x], 0.0, "a hidden pair's dBias is 0");
    ac_tensor_free(&d);
}

/* check with --sink-tokens K: the outputs of a kernel that kept K sink keys pass
 * with K, fail with K + 1 and without; a causal mask cannot take them. */
Test(harness_variants, check_judges_sink_tokens_by_the_count_it_is_given)
{
    char *dir = ac_test_tmpdir("ac-var");
    write_case(dir,
               "v1 seed=3 b=1 hq=2 hkv=1 nq=40 nk=60 d=16 dtype=f16 mask=window-br(8,0) layout=bhsd "
               "dist=normal(0,1) scale=auto sinktokens=3",
               "cpu-flash", 0.0);
    char *ok[] = {"check", dir, "--mask", "window-br(8,0)", "--sink-tokens", "3", "--cert-rows", "0", NULL};
    cr_assert_eq(ac_cmd_check(8, ok), AC_OK, "3 sink tokens checked as 3 pass");
    char *more[] = {"check", dir, "--mask", "window-br(8,0)", "--sink-tokens", "4", NULL};
    cr_assert_eq(ac_cmd_check(6, more), AC_FAIL_ACCURACY, "checked as 4 fails");
    char *none[] = {"check", dir, "--mask", "window-br(8,0)", NULL};
    cr_assert_eq(ac_cmd_check(4, none), AC_FAIL_ACCURACY, "checked without fails");
    char *causal[] = {"check", dir, "--mask", "causal-br", "--sink-tokens", "3", NULL};
    cr_assert_eq(ac_cmd_check(6, causal), AC_ERR_INPUT, "a mask with no left edge takes no sink tokens");
}
