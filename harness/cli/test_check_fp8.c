/* harness/cli/test_check_fp8.c — `attncheck check` and `reference` on fp8
 * inputs (suite harness_check_fp8): a gen directory (codes as |u1, descale
 * files, problem.json) checked with a kernel, perfect outputs from
 * `reference` pass and a planted error fails at its place, a safetensors file
 * with F8_E4M3 tensors and --descale-q/-k/-v, and bad factors refused. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/files/test_files_support.h"
#include "harness/harness.h"
#include "harness/run/test_worker_support.h"

static void setup(void)
{
    use_attncheck_as_worker(); /* check --kernel runs it in a worker */
    make_dir();
}

TestSuite(harness_check_fp8, .init = setup, .fini = remove_dir);

static const char *const line = "v1 seed=4 b=2 hq=4 hkv=2 nq=40 nk=150 d=16 dtype=e4m3 out=bf16 descale=block(64) "
                                "p=e4m3 mask=causal-br dist=fa3(0.001,10)";

static void gen_dir(void)
{
    char *gen[] = {"gen", "--case", (char *)line, "--out", (char *)path_of("case"), NULL};
    cr_assert_eq(ac_cmd_gen(5, gen), AC_OK);
}

static int check_with(const char *kernel)
{
    char *argv[] = {"check", (char *)path_of("case"), "--kernel", (char *)kernel, "--quiet", NULL};
    return ac_cmd_check(5, argv);
}

Test(harness_check_fp8, a_gen_directory_is_checked_with_its_codes_and_factors)
{
    gen_dir();
    cr_assert_eq(check_with("cpu-flash-fp8"), AC_OK);
    cr_assert_eq(check_with("cpu-flash-fp8-mutant-v-descale-twice"), AC_FAIL_ACCURACY);
    cr_assert_eq(check_with("cpu-flash-fp8-mutant-p-clamp-448"), AC_FAIL_ACCURACY);
}

/* The declared accumulator: cpu-flash-fp8-acc13 is checked under its own (e8m13, from --kernel);
 * --fp8-acc naming another one is refused (the kernel is not run on it), a malformed one too. */
Test(harness_check_fp8, the_fp8_accumulator_comes_from_the_kernel_or_fp8_acc)
{
    gen_dir();
    cr_assert_eq(check_with("cpu-flash-fp8-acc13"), AC_OK);
    char *argv[] = {"check", (char *)path_of("case"), "--kernel", "cpu-flash-fp8-acc13", "--quiet", "--fp8-acc", "f32",
                    NULL};
    cr_assert_eq(ac_cmd_check(7, argv), AC_ERR_INPUT);
    argv[6] = "e8m99";
    cr_assert_eq(ac_cmd_check(7, argv), AC_ERR_INPUT);
    argv[3] = "cpu-flash-fp8", argv[6] = "f32";
    cr_assert_eq(ac_cmd_check(7, argv), AC_OK);
    argv[6] = "e8m13"; /* the f32 kernel under another declaration: refused as well */
    cr_assert_eq(ac_cmd_check(7, argv), AC_ERR_INPUT);
}

/* reference's f64 O rounded to bf16 (<u2 bits) and its LSE to f32: a perfect
 * fp8 kernel; then O at (b=1, h=3, i=30, c=5) moved by 0.5 fails there. */
Test(harness_check_fp8, perfect_outputs_pass_and_a_planted_error_fails_at_its_place)
{
    gen_dir();
    char *ref[] = {"reference", (char *)path_of("case"), "--out", (char *)path_of("ref"), NULL};
    cr_assert_eq(ac_cmd_reference(4, ref), AC_OK);
    ac_err err = {{0}};
    ac_tensor o, lse;
    cr_assert_eq(ac_npy_read(path_of("ref/o.npy"), "o", &o, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(ac_npy_read(path_of("ref/lse.npy"), "lse", &lse, &err), AC_OK, "%s", err.msg);
    ac_tensor ob = o, lf = lse;
    ob.dtype = AC_TF_U16, lf.dtype = AC_TF_F32;
    ob.data = malloc(o.n_elems * 2), lf.data = malloc(lse.n_elems * 4);
    for (size_t e = 0; e < o.n_elems; e++)
        ((uint16_t *)ob.data)[e] = (uint16_t)ac_narrow(AC_BF16, ((double *)o.data)[e]);
    for (size_t e = 0; e < lse.n_elems; e++)
        ((float *)lf.data)[e] = (float)((double *)lse.data)[e];
    cr_assert_eq(ac_npy_write(path_of("case/lse.npy"), &lf, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(ac_npy_write(path_of("case/o.npy"), &ob, &err), AC_OK, "%s", err.msg);
    char *chk[] = {"check", (char *)path_of("case"), "--quiet", NULL};
    cr_assert_eq(ac_cmd_check(3, chk), AC_OK);
    size_t at = ((size_t)(1 * 4 + 3) * 40 + 30) * 16 + 5; /* bhsd */
    double x = ac_widen(AC_BF16, ((uint16_t *)ob.data)[at]) + 0.5;
    ((uint16_t *)ob.data)[at] = (uint16_t)ac_narrow(AC_BF16, x);
    cr_assert_eq(ac_npy_write(path_of("case/o.npy"), &ob, &err), AC_OK, "%s", err.msg);
    char *json[] = {"check", (char *)path_of("case"), "--quiet", "--json", (char *)path_of("out.jsonl"), NULL};
    cr_assert_eq(ac_cmd_check(5, json), AC_FAIL_ACCURACY);
    char *text = NULL;
    size_t len = 0;
    cr_assert_eq(ac_read_file(path_of("out.jsonl"), &text, &len, &err), AC_OK, "%s", err.msg);
    cr_assert(strstr(text, "O:scaled") && strstr(text, "at b=1 h=3 row=30 col=5") && strstr(text, "\"rmse\""), "%s",
              text);
    free(text);
    free(ob.data), free(lf.data);
    ac_tensor_free(&o), ac_tensor_free(&lse);
}

static void put(const char *file, ac_tensor *t)
{
    ac_err err = {{0}};
    cr_assert_eq(ac_npy_write(path_of(file), t, &err), AC_OK, "%s", err.msg);
}

/* One safetensors file: q, k, v as F8_E4M3 codes of a per-head case, its
 * factors from --descale-q/-k/-v (B, Hkv) files; checked with the kernel. */
Test(harness_check_fp8, safetensors_f8_e4m3_with_descale_files)
{
    ac_case c;
    ac_inputs in;
    ac_err err = {{0}};
    cr_assert_eq(ac_case_parse("v1 seed=6 b=2 hq=2 hkv=1 nq=33 nk=70 d=8 dtype=e4m3 descale=head", &c, &err), AC_OK);
    cr_assert_eq(ac_inputs_make(&c, &in, &err), AC_OK, "%s", err.msg);
    ac_tensor t[3] = {{.dtype = AC_TF_F8_E4M3, .ndim = 4, .shape = {2, 2, 33, 8}, .data = in.q},
                      {.dtype = AC_TF_F8_E4M3, .ndim = 4, .shape = {2, 1, 70, 8}, .data = in.k},
                      {.dtype = AC_TF_F8_E4M3, .ndim = 4, .shape = {2, 1, 70, 8}, .data = in.v}};
    const char *names[3] = {"q", "k", "v"};
    const ac_tensor *all[3];
    for (int i = 0; i < 3; i++) {
        t[i].n_elems = (size_t)(t[i].shape[0] * t[i].shape[1] * t[i].shape[2] * t[i].shape[3]);
        snprintf(t[i].name, sizeof t[i].name, "%s", names[i]);
        all[i] = &t[i];
    }
    cr_assert_eq(ac_safetensors_write(path_of("case.safetensors"), all, 3, &err), AC_OK, "%s", err.msg);
    float *arr[3] = {in.descale_q, in.descale_k, in.descale_v};
    const char *files[3] = {"dq.npy", "dk.npy", "dv.npy"};
    for (int i = 0; i < 3; i++) {
        ac_tensor d = {.dtype = AC_TF_F32, .ndim = 2, .shape = {2, 1}, .n_elems = 2, .data = arr[i]};
        put(files[i], &d);
    }
    char dq[256], dk[256], dv[256];
    snprintf(dq, sizeof dq, "%s", path_of("dq.npy"));
    snprintf(dk, sizeof dk, "%s", path_of("dk.npy"));
    snprintf(dv, sizeof dv, "%s", path_of("dv.npy"));
    char *argv[] = {"check",    (char *)path_of("case.safetensors"),
                    "--kernel", "cpu-flash-fp8",
                    "--quiet",  "--descale-q",
                    dq,         "--descale-k",
                    dk,         "--descale-v",
                    dv,         NULL};
    cr_assert_eq(ac_cmd_check(11, argv), AC_OK);
    argv[3] = "cpu-flash-fp8-mutant-v-descale-twice";
    cr_assert_eq(ac_cmd_check(11, argv), AC_FAIL_ACCURACY);
    /* only two of the three factors: refused */
    argv[3] = "cpu-flash-fp8";
    cr_assert_eq(ac_cmd_check(9, argv), AC_ERR_INPUT);
    /* a factor that is not positive: refused */
    in.descale_v[1] = -1.0f;
    ac_tensor bad = {.dtype = AC_TF_F32, .ndim = 2, .shape = {2, 1}, .n_elems = 2, .data = in.descale_v};
    put("dv.npy", &bad);
    cr_assert_eq(ac_cmd_check(11, argv), AC_ERR_INPUT);
    ac_inputs_free(&in);
}
