/* harness/run/test_run_thd.c — the packed THD layout end to end (suite
 * harness_thd): its inputs are the padded layouts' values row for row,
 * correct kernels pass it, the kernel that reads one sequence late fails it,
 * ABI 1 plugins may not claim it, and `check` / `reference` read and write
 * packed tensors with --cu-seqlens-q/-k. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/files/test_tmpdir.h"
#include "harness/harness.h"
#include "harness/run/test_worker_support.h"
#include "plugins/plugin_paths.h"

TestSuite(harness_thd, .init = use_attncheck_as_worker); /* check --kernel runs it in a worker */

#define THD_LINE \
    "v1 seed=4 b=3 hq=4 hkv=2 nq=40 nk=90 d=24 dtype=bf16 mask=causal-br seqlens-q=40,7,23 seqlens-k=90,1,50 " \
    "layout=thd dist=normal(0,1) scale=auto"
#define PAD_LINE \
    "v1 seed=4 b=3 hq=4 hkv=2 nq=40 nk=90 d=24 dtype=bf16 mask=causal-br seqlens-q=40,7,23 seqlens-k=90,1,50 " \
    "layout=bshd dist=normal(0,1) scale=auto"

static ac_result run_line(const char *kernel, const char *line)
{
    const ac_kernel *k = ac_kernel_find(kernel);
    cr_assert_not_null(k, "no kernel %s", kernel);
    ac_case c;
    ac_err err = {{0}};
    cr_assert_eq(ac_case_parse(line, &c, &err), AC_OK, "%s: %s", line, err.msg);
    ac_budgets b;
    cr_assert_eq(ac_budgets_load(ac_budgets_default_path(), &b, &err), AC_OK, "%s", err.msg);
    ac_run_opts o = {.backward = true, .cert_rows = 2};
    ac_result r;
    cr_assert_eq(ac_run_case(k, &c, &b, &o, &r, &err), AC_OK, "%s on %s: %s", kernel, line, err.msg);
    return r;
}

static void make(const char *line, ac_inputs *in)
{
    ac_case c;
    ac_err err = {{0}};
    cr_assert_eq(ac_case_parse(line, &c, &err), AC_OK, "%s: %s", line, err.msg);
    cr_assert_eq(ac_inputs_make(&c, in, &err), AC_OK, "%s: %s", line, err.msg);
}

/* The same case line packed and padded: every stored row holds the same
 * values, and THD stores exactly the sequences' rows. */
Test(harness_thd, packed_inputs_hold_the_padded_layouts_values_row_for_row)
{
    ac_inputs thd, pad;
    make(THD_LINE, &thd);
    make(PAD_LINE, &pad);
    cr_assert_eq(thd.p.cu_seqlens_q[3], 70);
    cr_assert_eq(thd.p.cu_seqlens_k[3], 141);
    cr_assert_eq(ac_q_elems(&thd.p), (size_t)70 * 4 * 24);
    cr_assert_eq(ac_v_elems(&thd.p), (size_t)141 * 2 * 24);
    cr_assert_null(thd.p.seqlens_q, "THD states lengths through cu_seqlens only");
    for (int b = 0; b < 3; b++)
        for (int h = 0; h < 4; h++)
            for (int i = 0; i < ac_seqlen_q_of(&pad.p, b); i++)
                for (int c = 0; c < 24; c++) {
                    cr_assert_eq(thd.qd[ac_q_index(&thd.p, b, h, i, c)], pad.qd[ac_q_index(&pad.p, b, h, i, c)]);
                    cr_assert_eq(thd.d_od[ac_o_index(&thd.p, b, h, i, c)], pad.d_od[ac_o_index(&pad.p, b, h, i, c)]);
                }
    for (int b = 0; b < 3; b++)
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < ac_seqlen_k_of(&pad.p, b); j++)
                for (int c = 0; c < 24; c++) {
                    cr_assert_eq(thd.kd[ac_kv_index(&thd.p, b, h, j, c)], pad.kd[ac_kv_index(&pad.p, b, h, j, c)]);
                    cr_assert_eq(thd.vd[ac_v_index(&thd.p, b, h, j, c)], pad.vd[ac_v_index(&pad.p, b, h, j, c)]);
                }
    ac_inputs_free(&thd);
    ac_inputs_free(&pad);
}

static const char *const good_lines[] = {
    THD_LINE,
    /* no lengths: every sequence the full extent; GQA, dense mask with masked rows, f16 */
    "v1 seed=5 b=2 hq=4 hkv=1 nq=33 nk=65 d=16 dtype=f16 mask=dense(0.5) maskrows=0.2 layout=thd "
    "dist=normal(0,1) scale=auto",
    /* empty sequences between long ones, with the other variants */
    "v1 seed=6 b=4 hq=2 hkv=2 nq=70 nk=70 d=32 dtype=f32 mask=window-br(9,inf) seqlens-q=0,70,1,33 "
    "seqlens-k=70,0,5,70 layout=thd dist=uniform(-1,1) scale=auto dv=16 softcap=5 sinks=normal(0,1)",
    /* no query row at all */
    "v1 seed=7 b=2 hq=2 hkv=1 nq=9 nk=20 d=8 dtype=bf16 mask=none seqlens-q=0,0 seqlens-k=20,3 layout=thd "
    "dist=normal(0,1) scale=auto",
};

Test(harness_thd, correct_kernels_pass_packed_cases_within_the_budgets)
{
    const char *kernels[] = {"cpu-flash", "cpu-flash-128x64", "ref-fp64"};
    for (size_t k = 0; k < 3; k++)
        for (size_t l = 0; l < sizeof good_lines / sizeof *good_lines; l++) {
            ac_result r = run_line(kernels[k], good_lines[l]);
            cr_assert_eq(r.verdict, AC_VERDICT_PASS, "%s on %s: %s", kernels[k], good_lines[l], r.why);
        }
}

Test(harness_thd, the_kernel_reading_one_sequence_late_fails_and_the_padded_twin_cannot_show_it)
{
    ac_result r = run_line("cpu-flash-mutant-cu-seqlens-late", THD_LINE);
    cr_assert_eq(r.verdict, AC_VERDICT_FAIL, "%s", r.why);
    cr_assert_str_eq(r.kind, "O:scaled", "%s", r.why);
    r = run_line("cpu-flash-mutant-cu-seqlens-late", PAD_LINE);
    cr_assert_eq(r.verdict, AC_VERDICT_PASS, "no cu_seqlens to misread: %s", r.why);
}

Test(harness_thd, an_abi_1_plugin_claiming_the_packed_layout_is_refused)
{
    const ac_kernel *k = NULL;
    ac_err err = {{0}};
    cr_assert_eq(ac_plugin_load(AC_BAD_PLUGIN_V1THD, &k, &err), AC_ERR_INPUT);
    cr_assert_not_null(strstr(err.msg, "unknown layout bits"), "%s", err.msg);
}

/* ---- check and reference on packed files -------------------------------------------------- */

/* q, k, v, do (packed, as the inputs hold them) and o of `kernel` into dir as .npy. */
static void write_packed(const char *dir, const ac_inputs *in, const char *kernel)
{
    const ac_problem *p = &in->p;
    size_t es = ac_dtype_size(in->c.dtype);
    void *o = malloc(ac_o_elems(p) * es + 1);
    float *lse = malloc(ac_lse_elems(p) * sizeof(float) + 1);
    const ac_kernel *k = ac_kernel_find(kernel);
    ac_err err = {{0}};
    ac_fwd_args fa = {.q = in->q, .k = in->k, .v = in->v, .o = o, .lse = lse};
    cr_assert_eq(k->forward(k, p, in->c.dtype, &fa, &err), AC_OK, "%s", err.msg);
    int64_t tq = p->cu_seqlens_q[p->batch], tk = p->cu_seqlens_k[p->batch];
    const char *names[] = {"q", "k", "v", "do", "o"};
    const void *bufs[] = {in->q, in->k, in->v, in->d_o, o};
    for (int i = 0; i < 5; i++) {
        bool q_like = i != 1 && i != 2;
        ac_tensor t = {.dtype = AC_TF_F16,
                       .ndim = 3,
                       .shape = {q_like ? tq : tk, q_like ? p->heads_q : p->heads_kv, p->head_dim},
                       .data = (void *)bufs[i]};
        t.n_elems = (size_t)t.shape[0] * t.shape[1] * t.shape[2];
        char path[128];
        snprintf(path, sizeof path, "%s/%s.npy", dir, names[i]);
        cr_assert_eq(ac_npy_write(path, &t, &err), AC_OK, "%s", err.msg);
    }
    free(o);
    free(lse);
}

static int check(const char *dir, const char *kernel, const char *cu_q, const char *cu_k)
{
    char *argv[] = {"check",          (char *)dir,    "--layout", "thd",       "--cu-seqlens-q", (char *)cu_q,
                    "--cu-seqlens-k", (char *)cu_k,   "--mask",   "causal-br", "--cert-rows",    "0",
                    "--kernel",       (char *)kernel, NULL};
    return ac_cmd_check(kernel ? 14 : 12, argv);
}

Test(harness_thd, check_and_reference_read_and_write_packed_tensors, .fini = ac_test_tmpdirs_remove)
{
    char *dir = ac_test_tmpdir("ac-thd");
    char out[64], path[128];
    ac_inputs in;
    make("v1 seed=8 b=3 hq=2 hkv=1 nq=20 nk=30 d=16 dtype=f16 mask=causal-br seqlens-q=20,4,9 seqlens-k=30,2,12 "
         "layout=thd dist=normal(0,1) scale=auto",
         &in);
    write_packed(dir, &in, "cpu-flash");
    ac_inputs_free(&in);
    cr_assert_eq(check(dir, NULL, "0,20,24,33", "0,30,32,44"), AC_OK, "cpu-flash's packed O passes");
    cr_assert_eq(check(dir, "cpu-flash-mutant-cu-seqlens-late", "0,20,24,33", "0,30,32,44"), AC_FAIL_ACCURACY,
                 "a kernel reading the next sequence's keys fails");
    cr_assert_eq(check(dir, NULL, "0,20,24,33", "0,30,32,45"), AC_ERR_INPUT, "offsets past k's rows are bad input");
    cr_assert_eq(check(dir, NULL, "0,20,19,33", "0,30,32,44"), AC_ERR_INPUT, "decreasing offsets are bad input");
    cr_assert_eq(check(dir, NULL, "0,20,24,33", "0,30,44"), AC_ERR_INPUT, "different batches are bad input");
    snprintf(out, sizeof out, "%s/ref", dir);
    char *ref[] = {"reference",
                   dir,
                   "--layout",
                   "thd",
                   "--cu-seqlens-q",
                   "0,20,24,33",
                   "--cu-seqlens-k",
                   "0,30,32,44",
                   "--mask",
                   "causal-br",
                   "--out",
                   out,
                   NULL};
    cr_assert_eq(ac_cmd_reference(12, ref), AC_OK);
    ac_tensor t;
    ac_err err = {{0}};
    snprintf(path, sizeof path, "%s/lse.npy", out);
    cr_assert_eq(ac_npy_read(path, "lse", &t, &err), AC_OK, "%s", err.msg);
    cr_assert(t.ndim == 2 && t.shape[0] == 2 && t.shape[1] == 33, "lse is (Hq, total_q)");
    ac_tensor_free(&t);
    snprintf(path, sizeof path, "%s/dk.npy", out);
    cr_assert_eq(ac_npy_read(path, "dk", &t, &err), AC_OK, "%s", err.msg);
    cr_assert(t.ndim == 3 && t.shape[0] == 44 && t.shape[1] == 1 && t.shape[2] == 16, "dk is (total_k, Hkv, d)");
    ac_tensor_free(&t);
}
