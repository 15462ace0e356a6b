/* harness/cli/test_check.c — `attncheck check` and `attncheck reference`
 * (suite harness_check) on case directories and .safetensors files the tests
 * write: perfect outputs pass, a planted error fails at its place, bad files
 * and options exit 2 naming what is wrong. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness/files/test_files_support.h"
#include "harness/harness.h"

static ac_tfile_dtype file_dtype(ac_dtype t)
{
    return t == AC_F32 ? AC_TF_F32 : t == AC_F16 ? AC_TF_F16 : AC_TF_U16; /* bf16 as <u2 bits */
}

static void put_tensor(const char *name, ac_tfile_dtype t, const ac_problem *p, bool q_like, void *data)
{
    int heads = q_like ? p->heads_q : p->heads_kv, seq = q_like ? p->seqlen_q : p->seqlen_k;
    ac_tensor x = {.dtype = t, .ndim = 4, .data = data};
    int64_t bhsd[4] = {p->batch, heads, seq, p->head_dim}, bshd[4] = {p->batch, seq, heads, p->head_dim};
    memcpy(x.shape, p->layout == AC_LAYOUT_BSHD ? bshd : bhsd, sizeof bhsd);
    x.n_elems = (size_t)p->batch * heads * seq * p->head_dim;
    char file[32];
    snprintf(file, sizeof file, "case/%s.npy", name);
    ac_err err = {{0}};
    cr_assert_eq(ac_npy_write(path_of(file), &x, &err), AC_OK, "%s", err.msg);
}

/* `attncheck reference` on the case dir, then its f64 outputs rounded to the
 * dtype (lse to f32) written back as the "kernel's" outputs: a perfect kernel. */
static void perfect_outputs(const ac_inputs *in, const char *const *extra)
{
    char *argv[16] = {"reference", (char *)path_of("case"),
                      "--out",     (char *)path_of("ref"),
                      "--dtype",   (char *)ac_dtype_name(in->c.dtype),
                      "--layout",  in->p.layout == AC_LAYOUT_BSHD ? "bshd" : "bhsd"};
    int argc = access(path_of("case/problem.json"), F_OK) == 0 ? 4 : 8; /* a gen dir says dtype and layout */
    for (int i = 0; extra && extra[i] && argc < 15; i++)
        argv[argc++] = (char *)extra[i];
    cr_assert_eq(ac_cmd_reference(argc, argv), AC_OK);
    const char *names[] = {"o", "lse", "dq", "dk", "dv"};
    for (int i = 0; i < 5; i++) {
        char src[32], dst[32];
        snprintf(src, sizeof src, "ref/%s.npy", names[i]);
        snprintf(dst, sizeof dst, "case/%s.npy", names[i]);
        ac_tensor t;
        ac_err err = {{0}};
        cr_assert_eq(ac_npy_read(path_of(src), names[i], &t, &err), AC_OK, "%s", err.msg);
        cr_assert_eq(t.dtype, AC_TF_F64);
        ac_tensor r = t;
        r.dtype = i == 1 ? AC_TF_F32 : file_dtype(in->c.dtype);
        r.data = malloc(t.n_elems * 4);
        for (size_t e = 0; e < t.n_elems; e++)
            if (i == 1)
                ((float *)r.data)[e] = (float)((double *)t.data)[e];
            else
                ac_store(in->c.dtype, (double *)t.data + e, 1, (char *)r.data + e * ac_dtype_size(in->c.dtype));
        cr_assert_eq(ac_npy_write(path_of(dst), &r, &err), AC_OK, "%s", err.msg);
        free(r.data);
        ac_tensor_free(&t);
    }
}

/* Writes q, k, v, do of a case line into DIR/case/, and perfect outputs. */
static ac_inputs dump_case(const char *line, const char *const *extra)
{
    ac_case c;
    ac_inputs in;
    ac_err err = {{0}};
    cr_assert_eq(ac_case_parse(line, &c, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(ac_inputs_make(&c, &in, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(mkdir(path_of("case"), 0755), 0);
    ac_tfile_dtype t = file_dtype(c.dtype);
    put_tensor("q", t, &in.p, true, in.q), put_tensor("k", t, &in.p, false, in.k);
    put_tensor("v", t, &in.p, false, in.v), put_tensor("do", t, &in.p, true, in.d_o);
    perfect_outputs(&in, extra);
    return in;
}

static int check(const char *a1, const char *a2, const char *a3, const char *a4)
{
    char *argv[] = {"check", (char *)path_of("case"), (char *)a1, (char *)a2, (char *)a3, (char *)a4, NULL};
    int argc = 2;
    while (argv[argc])
        argc++;
    return ac_cmd_check(argc, argv);
}

TestSuite(harness_check, .init = make_dir, .fini = remove_dir);

Test(harness_check, perfect_outputs_pass_and_a_planted_error_fails_at_its_place)
{
    ac_inputs in = dump_case(
        "v1 seed=5 b=2 hq=4 hkv=2 nq=9 nk=13 d=8 dtype=f16 mask=none layout=bhsd dist=normal(0,1) scale=auto", NULL);
    cr_assert_eq(check(NULL, NULL, NULL, NULL), AC_OK);
    /* O at (b=1, h=2, i=5, c=3) off by 0.25: far outside any f16 rounding */
    ac_tensor o;
    ac_err err = {{0}};
    cr_assert_eq(ac_npy_read(path_of("case/o.npy"), "o", &o, &err), AC_OK);
    size_t at = ac_q_index(&in.p, 1, 2, 5, 3);
    double x = ac_widen(AC_F16, ((uint16_t *)o.data)[at]) + 0.25;
    ((uint16_t *)o.data)[at] = (uint16_t)ac_narrow(AC_F16, x);
    cr_assert_eq(ac_npy_write(path_of("case/o.npy"), &o, &err), AC_OK);
    cr_assert_eq(check("--json", path_of("out.jsonl"), NULL, NULL), AC_FAIL_ACCURACY);
    FILE *f = fopen(path_of("out.jsonl"), "r");
    char buf[8192] = "";
    cr_assert_not_null(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    cr_assert_not_null(strstr(buf, "O:scaled"), "%s", buf);
    cr_assert_not_null(strstr(buf, "at b=1 h=2 row=5 col=3"), "%s", buf);
    ac_tensor_free(&o);
    ac_inputs_free(&in);
}

Test(harness_check, bf16_bits_need_dtype_and_bshd_causal_gqa_passes)
{
    ac_inputs in = dump_case("v1 seed=8 b=1 hq=4 hkv=1 nq=7 nk=11 d=16 dtype=bf16 mask=causal-br layout=bshd "
                             "dist=normal(0,1) scale=auto",
                             NULL);
    /* the reference above was made without the mask: redo it with --mask causal-br */
    char *argv[] = {"reference", (char *)path_of("case"),
                    "--out",     (char *)path_of("ref"),
                    "--dtype",   "bf16",
                    "--layout",  "bshd",
                    "--mask",    "causal-br",
                    NULL};
    cr_assert_eq(ac_cmd_reference(10, argv), AC_OK);
    cr_assert_eq(check("--layout", "bshd", "--mask", "causal-br"), AC_ERR_INPUT, "u16 without --dtype bf16");
    char *ok[] = {"check", (char *)path_of("case"), "--layout", "bshd", "--dtype", "bf16", "--mask", "causal-br", NULL};
    /* outputs were rounded from the unmasked reference: masked rows differ, so this must fail */
    cr_assert_eq(ac_cmd_check(8, ok), AC_FAIL_ACCURACY);
    ac_inputs_free(&in);
}

Test(harness_check, reference_with_lse_base_2_and_safetensors_output)
{
    ac_inputs in = dump_case(
        "v1 seed=3 b=1 hq=2 hkv=2 nq=5 nk=6 d=4 dtype=f32 mask=none layout=bhsd dist=normal(0,1) scale=auto", NULL);
    char *argv[] = {"reference", (char *)path_of("case"), "--out", (char *)path_of("r.safetensors"), "--lse-base", "2",
                    NULL};
    cr_assert_eq(ac_cmd_reference(6, argv), AC_OK);
    ac_tensor_set set;
    ac_err err = {{0}};
    cr_assert_eq(ac_safetensors_read(path_of("r.safetensors"), &set, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(set.n, 5);
    double *o = malloc(ac_q_elems(&in.p) * sizeof(double)), *lse = malloc(ac_lse_elems(&in.p) * sizeof(double));
    cr_assert_eq(ref_forward_fp64(&in.p, in.qd, in.kd, in.vd, o, lse, &err), AC_OK);
    const ac_tensor *so = ac_tensor_set_find(&set, "o"), *sl = ac_tensor_set_find(&set, "lse");
    cr_assert(so && sl && so->dtype == AC_TF_F64 && sl->ndim == 3);
    cr_assert_eq(memcmp(so->data, o, ac_q_elems(&in.p) * sizeof(double)), 0, "O is the fp64 reference, exactly");
    for (size_t i = 0; i < ac_lse_elems(&in.p); i++)
        cr_assert_float_eq(((double *)sl->data)[i], lse[i] / M_LN2, 1e-12);
    /* lse in base 2 read back with --lse-base 2 passes; read as base e it fails */
    ac_tensor l = {.name = "lse", .dtype = AC_TF_F32, .ndim = 3, .shape = {1, 2, 5}, .n_elems = 10};
    float lf[10];
    for (int i = 0; i < 10; i++)
        lf[i] = (float)(lse[i] / M_LN2);
    l.data = lf;
    cr_assert_eq(ac_npy_write(path_of("case/lse.npy"), &l, &err), AC_OK);
    cr_assert_eq(check("--lse-base", "2", NULL, NULL), AC_OK);
    cr_assert_eq(check("--json", path_of("wrong-base.jsonl"), NULL, NULL), AC_FAIL_ACCURACY);
    char *text = NULL;
    size_t len;
    cr_assert_eq(ac_read_file(path_of("wrong-base.jsonl"), &text, &len, &err), AC_OK);
    cr_assert(text && strstr(text, "\"kind\":\"LSE:scaled\""), "%s", text);
    cr_assert(strstr(text, "hint: LSE x ln 2 matches the reference (max scaled "), "the diagnosis says why: %s", text);
    free(text);
    free(o), free(lse);
    ac_tensor_set_free(&set);
    ac_inputs_free(&in);
}

static void overwrite(const char *name, ac_tfile_dtype t, int ndim, const int64_t *shape, double fill_nan_at)
{
    ac_tensor x = {.dtype = t, .ndim = ndim, .n_elems = 1};
    for (int i = 0; i < ndim; i++)
        x.shape[i] = shape[i], x.n_elems *= (size_t)shape[i];
    x.data = calloc(x.n_elems, ac_tfile_dtype_size(t));
    for (size_t i = 0; t == AC_TF_F32 && i < x.n_elems; i++)
        ((float *)x.data)[i] = fill_nan_at >= 0 && i == (size_t)fill_nan_at ? NAN : 0.5f; /* -1: none */
    ac_err err = {{0}};
    cr_assert_eq(ac_npy_write(path_of(name), &x, &err), AC_OK);
    free(x.data);
}

Test(harness_check, bad_inputs_exit_2_with_the_reason)
{
    ac_inputs in = dump_case(
        "v1 seed=4 b=1 hq=2 hkv=2 nq=4 nk=5 d=4 dtype=f32 mask=none layout=bhsd dist=normal(0,1) scale=auto", NULL);
    int64_t qs[4] = {1, 2, 4, 4}, ks[4] = {1, 2, 5, 4}, bad[4] = {1, 2, 6, 4};
    overwrite("case/v.npy", AC_TF_F32, 4, bad, -1);
    cr_assert_eq(check(NULL, NULL, NULL, NULL), AC_ERR_INPUT, "v shape differs from k");
    overwrite("case/v.npy", AC_TF_F16, 4, ks, -1);
    cr_assert_eq(check(NULL, NULL, NULL, NULL), AC_ERR_INPUT, "v dtype differs from q");
    overwrite("case/v.npy", AC_TF_F32, 4, ks, -1);
    overwrite("case/q.npy", AC_TF_F32, 4, qs, 7);
    cr_assert_eq(check(NULL, NULL, NULL, NULL), AC_ERR_INPUT, "NaN in q");
    overwrite("case/q.npy", AC_TF_F32, 3, qs, -1);
    cr_assert_eq(check(NULL, NULL, NULL, NULL), AC_ERR_INPUT, "3-D q");
    overwrite("case/q.npy", AC_TF_F32, 4, qs, -1);
    cr_assert_eq(check("--mask", "window-br(3)", NULL, NULL), AC_ERR_INPUT, "a window needs two sides");
    cr_assert_eq(check("--mask", "dense(0.5)", NULL, NULL), AC_ERR_INPUT, "a dense mask comes from --mask-file");
    cr_assert_eq(check("--layout", "hsbd", NULL, NULL), AC_ERR_INPUT);
    cr_assert_eq(check("--seqlens-k", "1,2,3", NULL, NULL), AC_ERR_INPUT, "3 lengths for a batch of 1");
    cr_assert_eq(check("--mask-file", path_of("case/k.npy"), NULL, NULL), AC_ERR_INPUT, "f32 mask");
    cr_assert_eq(check("--mask", path_of("case/k.npy"), NULL, NULL), AC_ERR_INPUT, "a file is not a mask kind");
    cr_assert_eq(check("--bogus", "1", NULL, NULL), AC_ERR_INPUT);
    unlink(path_of("case/k.npy"));
    cr_assert_eq(check(NULL, NULL, NULL, NULL), AC_ERR_INPUT, "no k.npy");
    char *none[] = {"check", (char *)path_of("nowhere"), NULL};
    cr_assert_eq(ac_cmd_check(2, none), AC_ERR_INPUT);
    ac_inputs_free(&in);
}

Test(harness_check, mask_file_and_key_lengths_pass_with_a_fully_masked_row)
{
    /* q, k, v first (outputs are remade below, once the mask exists) */
    ac_inputs in = dump_case("v1 seed=6 b=2 hq=2 hkv=1 nq=6 nk=10 d=8 dtype=f16 mask=none layout=bhsd "
                             "dist=normal(0,1) scale=auto",
                             NULL);
    uint8_t keep[6 * 10];
    for (int i = 0; i < 60; i++)
        keep[i] = (uint8_t)((i * 7 + 3) % 5 != 0);
    memset(keep + 2 * 10, 0, 10); /* row 2 sees no key: O = 0, LSE = -inf expected */
    ac_tensor m = {.dtype = AC_TF_BOOL, .ndim = 4, .shape = {1, 1, 6, 10}, .n_elems = 60, .data = keep};
    ac_err err = {{0}};
    cr_assert_eq(ac_npy_write(path_of("mask.npy"), &m, &err), AC_OK);
    const char *extra[] = {"--mask-file", path_of("mask.npy"), "--seqlens-k", "7,10", NULL};
    perfect_outputs(&in, extra);
    ac_tensor o;
    cr_assert_eq(ac_npy_read(path_of("case/o.npy"), "o", &o, &err), AC_OK);
    cr_assert_eq(((uint16_t *)o.data)[ac_q_index(&in.p, 0, 1, 2, 3)], 0, "a fully masked row's O is 0");
    ac_tensor_free(&o);
    cr_assert_eq(check("--mask-file", path_of("mask.npy"), "--seqlens-k", "7,10"), AC_OK);
    cr_assert_eq(check("--mask-file", path_of("mask.npy"), "--seqlens-k", "8,10"), AC_FAIL_ACCURACY,
                 "key 7 of batch 0 now counts: the outputs no longer match");
    ac_inputs_free(&in);
}

Test(harness_check, one_safetensors_file_holds_the_whole_case)
{
    ac_inputs in = dump_case("v1 seed=9 b=1 hq=2 hkv=2 nq=8 nk=8 d=8 dtype=bf16 mask=none layout=bhsd "
                             "dist=normal(0,1) scale=auto",
                             NULL);
    const char *names[] = {"q", "k", "v", "o", "lse", "do", "dq", "dk", "dv"};
    ac_tensor t[9];
    const ac_tensor *all[9];
    ac_err err = {{0}};
    for (int i = 0; i < 9; i++) {
        char file[32];
        snprintf(file, sizeof file, "case/%s.npy", names[i]);
        cr_assert_eq(ac_npy_read(path_of(file), names[i], &t[i], &err), AC_OK, "%s", err.msg);
        if (t[i].dtype == AC_TF_U16)
            t[i].dtype = AC_TF_BF16; /* safetensors carries bf16 natively: no --dtype needed */
        all[i] = &t[i];
    }
    cr_assert_eq(ac_safetensors_write(path_of("case.safetensors"), all, 9, &err), AC_OK, "%s", err.msg);
    char *argv[] = {"check", (char *)path_of("case.safetensors"), NULL};
    cr_assert_eq(ac_cmd_check(2, argv), AC_OK);
    for (int i = 0; i < 9; i++)
        ac_tensor_free(&t[i]);
    ac_inputs_free(&in);
}

/* ---- case directories from `attncheck gen` ---------------------------------------- */

Test(harness_check, a_gen_directory_is_checked_with_the_problem_it_carries)
{
    const char *line = "v1 seed=11 b=2 hq=4 hkv=2 nq=9 nk=13 d=8 dtype=bf16 mask=window-br(3,1) seqlens-k=13,6 "
                       "layout=bshd dist=normal(0,1) scale=0.3";
    char *gen[] = {"gen", "--case", (char *)line, "--out", (char *)path_of("case"), NULL};
    cr_assert_eq(ac_cmd_gen(5, gen), AC_OK);
    ac_case c;
    ac_inputs in;
    ac_err err = {{0}};
    cr_assert_eq(ac_case_parse(line, &c, &err), AC_OK);
    cr_assert_eq(ac_inputs_make(&c, &in, &err), AC_OK);
    perfect_outputs(&in, NULL); /* reference on the dir without a single problem option */
    cr_assert_eq(check(NULL, NULL, NULL, NULL), AC_OK, "the problem came from problem.json");
    cr_assert_eq(check("--layout", "bhsd", NULL, NULL), AC_ERR_INPUT, "an option the file already gives is refused");
    char *npz[] = {"reference", (char *)path_of("case"), "--out", (char *)path_of("ref.npz"), NULL};
    cr_assert_eq(ac_cmd_reference(4, npz), AC_ERR_INPUT);
    struct stat st;
    cr_assert_neq(stat(path_of("ref.npz"), &st), 0, "nothing written under that name");
    ac_inputs_free(&in);
}
