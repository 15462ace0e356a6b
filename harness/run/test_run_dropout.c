/* harness/run/test_run_dropout.c — dropout end to end (suite harness_dropout):
 * correct kernels pass against the keep mask they drew; a kernel without the
 * 1 / (1 - p) fails its outputs; one whose mask keeps too much, one whose seed
 * changes nothing and one whose same seed draws another mask fail the checks
 * of harness/run/dropout.h; check reads --dropout-p with a mask file or a kernel. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/files/test_tmpdir.h"
#include "harness/harness.h"
#include "harness/run/test_worker_support.h"

TestSuite(harness_dropout, .init = use_attncheck_as_worker); /* check --kernel runs it in a worker */

static ac_result run_with(const ac_kernel *k, const char *line)
{
    ac_case c;
    ac_err err = {{0}};
    cr_assert_eq(ac_case_parse(line, &c, &err), AC_OK, "%s: %s", line, err.msg);
    ac_budgets b;
    cr_assert_eq(ac_budgets_load(ac_budgets_default_path(), &b, &err), AC_OK, "%s", err.msg);
    ac_run_opts o = {.backward = true, .cert_rows = 2};
    ac_result r;
    cr_assert_eq(ac_run_case(k, &c, &b, &o, &r, &err), AC_OK, "%s on %s: %s", k->name, line, err.msg);
    return r;
}

#define LINE \
    "v1 seed=2 b=2 hq=2 hkv=1 nq=40 nk=70 d=16 dtype=f16 mask=causal-br layout=bhsd dist=normal(0,1) " \
    "scale=auto dropout=0.3"

Test(harness_dropout, correct_kernels_pass_against_the_mask_they_drew)
{
    static const char *const lines[] = {
        LINE,
        "v1 seed=1 b=2 hq=4 hkv=2 nq=70 nk=130 d=32 dtype=bf16 mask=causal-br layout=bhsd dist=normal(0,1) "
        "scale=auto dropout=0.1",
        "v1 seed=3 b=2 hq=2 hkv=2 nq=40 nk=90 d=8 dtype=f32 mask=window-tl(10,3) layout=bhsd dist=normal(0,1) "
        "scale=auto sinks=normal(0,1) dropout=0.9",
        "v1 seed=4 b=3 hq=2 hkv=1 nq=33 nk=50 d=16 dtype=bf16 mask=dense(0.5) maskrows=0.2 seqlens-q=33,5,0 layout=thd "
        "dist=normal(0,1) scale=auto softcap=5 bias=normal(0,1):1h dropout=0.01",
    };
    const char *kernels[] = {"cpu-flash", "cpu-flash-128x64", "ref-fp64"};
    for (int k = 0; k < 3; k++)
        for (int l = 0; l < 4; l++) {
            ac_result r = run_with(ac_kernel_find(kernels[k]), lines[l]);
            cr_assert_eq(r.verdict, AC_VERDICT_PASS, "%s on %s: %s", kernels[k], lines[l], r.why);
        }
    ac_result r = run_with(ac_kernel_find("cpu-flash-mutant-dropout-no-rescale"), LINE);
    cr_assert_eq(r.verdict, AC_VERDICT_FAIL);
    cr_assert_str_eq(r.kind, "O:scaled", "%s", r.why);
}

/* cpu-flash with its seed replaced: fixed (every seed one mask), or moved on
 * every forward (the same seed another mask; the backward follows its forward). */
static uint64_t seed_shift;
static int seed_mode; /* 0: fixed seed, 1: a new one each forward */

static int reseeded_forward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_fwd_args *a, ac_err *err)
{
    (void)self;
    ac_problem q = *p;
    q.dropout_seed = seed_mode == 0 ? 12345 : p->dropout_seed + ++seed_shift;
    const ac_kernel *k = ac_kernel_find("cpu-flash");
    return k->forward(k, &q, t, a, err);
}

static int reseeded_backward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_bwd_args *a, ac_err *err)
{
    (void)self;
    ac_problem q = *p;
    q.dropout_seed = seed_mode == 0 ? 12345 : p->dropout_seed + seed_shift;
    const ac_kernel *k = ac_kernel_find("cpu-flash");
    return k->backward(k, &q, t, a, err);
}

Test(harness_dropout, a_seed_that_changes_nothing_or_one_that_does_not_reproduce_fails)
{
    ac_kernel k = *ac_kernel_find("cpu-flash");
    k.name = "cpu-flash-reseeded";
    k.forward = reseeded_forward, k.backward = reseeded_backward;
    seed_mode = 0;
    ac_result r = run_with(&k, LINE);
    cr_assert_eq(r.verdict, AC_VERDICT_FAIL, "a fixed seed passed");
    cr_assert_str_eq(r.kind, "dropout:seed-ignored", "%s", r.why);
    seed_mode = 1, seed_shift = 0;
    r = run_with(&k, LINE);
    cr_assert_eq(r.verdict, AC_VERDICT_FAIL, "a moving seed passed");
    cr_assert_str_eq(r.kind, "dropout:not-reproducible", "%s", r.why);
}

/* A kernel that keeps every pair, reports so, and scales by 1 / (1 - p): its
 * outputs match the reference given its mask, its keep fraction does not. */
static int keep_all_forward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_fwd_args *a, ac_err *err)
{
    (void)self;
    size_t n = ac_dropout_elems(p), nq = ac_q_elems(p), nkv = ac_kv_elems(p), no = ac_o_elems(p), nv = ac_v_elems(p);
    uint8_t *keep = malloc(n);
    double *q = malloc(nq * 8), *k = malloc(nkv * 8), *v = malloc(nv * 8), *o = malloc(no * 8),
           *lse = malloc(ac_lse_elems(p) * 8);
    cr_assert(keep && q && k && v && o && lse);
    memset(keep, 1, n);
    memset(a->dropout_mask, 0xFF, (n + 7) / 8);
    ac_problem pk = *p;
    pk.dropout_keep = keep;
    ac_load(t, a->q, nq, q), ac_load(t, a->k, nkv, k), ac_load(t, a->v, nv, v);
    int st = ref_forward_fp64(&pk, q, k, v, o, lse, err);
    ac_store(t, o, no, a->o);
    for (size_t x = 0; x < ac_lse_elems(p); x++)
        a->lse[x] = (float)lse[x];
    free(keep), free(q), free(k), free(v), free(o), free(lse);
    return st;
}

Test(harness_dropout, a_mask_that_keeps_too_much_fails_the_keep_fraction)
{
    ac_kernel k = *ac_kernel_find("ref-fp64");
    k.name = "keep-all";
    k.forward = keep_all_forward;
    k.caps.backward = false, k.backward = NULL;
    ac_result r = run_with(&k, LINE);
    cr_assert_eq(r.verdict, AC_VERDICT_FAIL, "keeping every pair passed");
    cr_assert_str_eq(r.kind, "dropout:keep-fraction", "%s", r.why);
    cr_assert_lt(r.m[AC_OUT_O].max_scaled, 1.0, "its O is the reference's given its mask: %g",
                 r.m[AC_OUT_O].max_scaled);
}

/* check: the outputs and the keep mask from files (u8 (B, Hq, Nq, Nk)), or --kernel. */
Test(harness_dropout, check_reads_the_keep_mask_from_a_file_or_the_kernel, .fini = ac_test_tmpdirs_remove)
{
    char *dir = ac_test_tmpdir("ac-drop");
    char path[128];
    ac_case c;
    ac_inputs in;
    ac_err err = {{0}};
    cr_assert_eq(ac_case_parse(LINE, &c, &err), AC_OK);
    cr_assert_eq(ac_inputs_make(&c, &in, &err), AC_OK, "%s", err.msg);
    size_t no = ac_o_elems(&in.p), n = ac_dropout_elems(&in.p);
    uint16_t *o = malloc(no * 2);
    float *lse = malloc(ac_lse_elems(&in.p) * 4);
    uint8_t *bits = calloc((n + 7) / 8, 1), *keep = malloc(n);
    const ac_kernel *k = ac_kernel_find("cpu-flash");
    ac_fwd_args fa = {.q = in.q, .k = in.k, .v = in.v, .o = o, .lse = lse, .dropout_mask = bits};
    cr_assert_eq(k->forward(k, &in.p, c.dtype, &fa, &err), AC_OK, "%s", err.msg);
    for (size_t x = 0; x < n; x++)
        keep[x] = (bits[x / 8] >> (x % 8)) & 1u;
    const char *names[] = {"q", "k", "v", "o"};
    const void *data[] = {in.q, in.k, in.v, o};
    for (int i = 0; i < 4; i++) {
        bool q_like = i == 0 || i == 3;
        ac_tensor t = {
            .dtype = AC_TF_F16, .ndim = 4, .shape = {2, q_like ? 2 : 1, q_like ? 40 : 70, 16}, .data = (void *)data[i]};
        t.n_elems = (size_t)t.shape[0] * t.shape[1] * t.shape[2] * t.shape[3];
        snprintf(path, sizeof path, "%s/%s.npy", dir, names[i]);
        cr_assert_eq(ac_npy_write(path, &t, &err), AC_OK, "%s", err.msg);
    }
    char mask[128];
    snprintf(mask, sizeof mask, "%s/keep.npy", dir);
    ac_tensor t = {.dtype = AC_TF_U8, .ndim = 4, .shape = {2, 2, 40, 70}, .n_elems = n, .data = keep};
    cr_assert_eq(ac_npy_write(mask, &t, &err), AC_OK, "%s", err.msg);
    char *ok[] = {"check",          dir,  "--mask",      "causal-br", "--dropout-p", "0.3",
                  "--dropout-mask", mask, "--cert-rows", "0",         NULL};
    cr_assert_eq(ac_cmd_check(10, ok), AC_OK, "cpu-flash's O with the mask it drew passes");
    char *p5[] = {"check", dir, "--mask", "causal-br", "--dropout-p", "0.5", "--dropout-mask", mask, NULL};
    cr_assert_eq(ac_cmd_check(8, p5), AC_FAIL_ACCURACY, "p = 0.3 checked as 0.5 fails");
    for (size_t x = 0; x < n; x++)
        keep[x] = !keep[x];
    cr_assert_eq(ac_npy_write(mask, &t, &err), AC_OK);
    cr_assert_eq(ac_cmd_check(10, ok), AC_FAIL_ACCURACY, "the complementary mask fails");
    char *kern[] = {"check", dir, "--mask", "causal-br", "--dropout-p", "0.3", "--kernel", "cpu-flash", NULL};
    cr_assert_eq(ac_cmd_check(8, kern), AC_OK, "--kernel: judged against the mask it draws");
    char *none[] = {"check", dir, "--mask", "causal-br", "--dropout-p", "0.3", NULL};
    cr_assert_eq(ac_cmd_check(6, none), AC_ERR_INPUT, "no mask and no kernel is bad input");
    free(o), free(lse), free(bits), free(keep);
    ac_inputs_free(&in);
}
