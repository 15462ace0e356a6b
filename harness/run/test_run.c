/* harness/run/test_run.c — the runner and the campaign on a kernel double
 * defined here (the fp64 reference rounded to the dtype, with a planted bug),
 * so they are tested whatever kernels exist: verdicts, the poison, device
 * faults, unsupported cases, a real failure shrunk, a campaign's JSON. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/files/test_files_support.h"
#include "harness/harness.h"

/* The whole file, NUL-terminated (freed by the caller). */
static char *read_text(const char *path)
{
    char *data;
    size_t len;
    ac_err err = {{0}};
    cr_assert_eq(ac_read_file(path, &data, &len, &err), AC_OK, "%s", err.msg);
    cr_assert_not_null(data, "%s does not exist", path);
    char *text = realloc(data, len + 1);
    text[len] = '\0';
    return text;
}

/* ---- the runner and the shrinker on a real (double) kernel ------------------
 * A kernel double defined here: the fp64 reference rounded to the dtype, with a
 * planted bug chosen by ctx.  Lets the runner be tested whatever kernels exist. */

typedef enum {
    DBL_CORRECT,
    DBL_SKIP_LAST_ROW,
    DBL_DEVICE_FAULT,
    DBL_SCALE_BIAS,
    DBL_READS_PADDING, /* ignores the key lengths: padding keys reach its sums */
    DBL_REPORTS_CRASH, /* AC_KERNEL_FAULT "crash: ..." of its own, as a kernel running a command does */
    DBL_REPORTS_NOCLASS, /* AC_KERNEL_FAULT with a message that names no class */
    DBL_WRITES_PAST_LSE, /* a correct forward, then 3 floats past LSE */
} dbl_mode;

static int dbl_forward(const ac_kernel *self, const ac_problem *p_in, ac_dtype t, const ac_fwd_args *a, ac_err *err)
{
    dbl_mode mode = *(const dbl_mode *)self->ctx;
    if (mode == DBL_DEVICE_FAULT)
        return ac_fail(err, AC_ERR_ENV, "double: simulated device fault");
    if (mode == DBL_REPORTS_CRASH)
        return ac_fail(err, AC_KERNEL_FAULT, "crash: the command ./mine died of SIGBUS");
    if (mode == DBL_REPORTS_NOCLASS)
        return ac_fail(err, AC_KERNEL_FAULT, "Something Odd happened");
    ac_problem unmasked = *p_in;
    if (mode == DBL_READS_PADDING)
        unmasked.seqlens_k = NULL;
    const ac_problem *p = &unmasked;
    size_t nq = ac_q_elems(p), nkv = ac_kv_elems(p), nl = ac_lse_elems(p);
    double *q = malloc(nq * 8), *k = malloc(nkv * 8), *v = malloc(nkv * 8), *o = malloc(nq * 8), *l = malloc(nl * 8);
    ac_load(t, a->q, nq, q);
    ac_load(t, a->k, nkv, k);
    ac_load(t, a->v, nkv, v);
    int st = ref_forward_fp64(p, q, k, v, o, l, err);
    if (mode == DBL_SCALE_BIAS)
        for (size_t i = 0; i < nq; i++)
            o[i] *= 1.0 + 1.0 / 64; /* a bias many ulps wide everywhere */
    /* the last query row of every (b, h) is left unwritten in DBL_SKIP_LAST_ROW */
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < p->heads_q; h++)
            for (int i = 0; i < p->seqlen_q; i++) {
                if (mode == DBL_SKIP_LAST_ROW && i == p->seqlen_q - 1)
                    continue;
                for (int c = 0; c < p->head_dim; c++) {
                    size_t at = ac_q_index(p, b, h, i, c);
                    ac_store(t, &o[at], 1, (char *)a->o + at * ac_dtype_size(t));
                }
                size_t li = ac_lse_index(p, b, h, i);
                a->lse[li] = (float)l[li];
            }
    free(q), free(k), free(v), free(o), free(l);
    if (mode == DBL_WRITES_PAST_LSE)
        for (size_t i = 0; i < 3; i++)
            a->lse[nl + i] = 0.0f;
    return st;
}

static const dbl_mode modes[] = {DBL_CORRECT,       DBL_SKIP_LAST_ROW, DBL_DEVICE_FAULT,    DBL_SCALE_BIAS,
                                 DBL_READS_PADDING, DBL_REPORTS_CRASH, DBL_REPORTS_NOCLASS, DBL_WRITES_PAST_LSE};

static ac_kernel double_kernel(dbl_mode mode)
{
    ac_kernel k = {.name = "double", .description = "fp64 reference rounded, with a planted bug"};
    k.caps.dtypes = (1u << AC_F32) | (1u << AC_F16) | (1u << AC_BF16);
    k.caps.max_head_dim = AC_MAX_HEAD_DIM;
    k.caps.masks = AC_MASKCAP_ALL;
    k.caps.layouts = 3;
    k.caps.gqa = k.caps.varlen = true;
    k.device = AC_DEV_CPU;
    k.memory = AC_MEM_HOST;
    k.forward = dbl_forward;
    k.ctx = &modes[mode];
    return k;
}

static ac_budgets budgets(void)
{
    ac_budgets b;
    ac_err err;
    cr_assert_eq(ac_budgets_load(ac_budgets_default_path(), &b, &err), AC_OK, "%s", err.msg);
    return b;
}

static ac_case small_case(void)
{
    ac_case c = ac_case_default();
    c.seed = 5;
    c.batch = 2;
    c.heads_q = 4;
    c.heads_kv = 2;
    c.seqlen_q = 20;
    c.seqlen_k = 33;
    return c;
}

Test(harness_run, correct_kernel_passes_with_every_forward_output_compared)
{
    ac_kernel k = double_kernel(DBL_CORRECT);
    ac_budgets b = budgets();
    ac_case c = small_case();
    ac_run_opts o = {.backward = true, .cert_rows = 1};
    ac_result r;
    ac_err err;
    cr_assert_eq(ac_run_case(&k, &c, &b, &o, &r, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(r.verdict, AC_VERDICT_PASS, "%s", r.why);
    cr_assert(r.m[AC_OUT_O].present && r.m[AC_OUT_LSE].present);
    cr_assert(!r.m[AC_OUT_DQ].present, "no backward on a forward-only kernel");
    cr_assert_eq(r.m[AC_OUT_O].n_compared, (size_t)2 * 4 * 20 * 16);
    cr_assert_eq(r.cert.rows_checked, 1);
    char line[AC_CASE_LINE_MAX];
    ac_case_format(&c, line, sizeof line);
    cr_assert_str_eq(r.line, line);
    cr_assert_gt(r.seconds, 0);
}

Test(harness_run, unwritten_rows_are_caught_through_the_poison)
{
    ac_kernel k = double_kernel(DBL_SKIP_LAST_ROW);
    ac_budgets b = budgets();
    ac_case c = small_case();
    ac_run_opts o = {.backward = false};
    ac_result r;
    ac_err err;
    cr_assert_eq(ac_run_case(&k, &c, &b, &o, &r, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(r.verdict, AC_VERDICT_FAIL);
    /* one row of d elements per (b, h) */
    cr_assert_eq(r.m[AC_OUT_O].n_unwritten, (size_t)2 * 4 * 16);
    cr_assert_eq(r.m[AC_OUT_O].first_special.row, 19);
    cr_assert_str_eq(r.kind, "O:unwritten");
}

Test(harness_run, device_fault_is_an_environment_error_not_a_verdict)
{
    ac_kernel k = double_kernel(DBL_DEVICE_FAULT);
    ac_budgets b = budgets();
    ac_case c = small_case();
    ac_run_opts o = {.backward = false};
    ac_result r;
    ac_err err;
    cr_assert_eq(ac_run_case(&k, &c, &b, &o, &r, &err), AC_ERR_ENV);
    cr_assert_eq(r.verdict, AC_VERDICT_ERROR);
    cr_assert_eq(r.status, AC_ERR_ENV);
    cr_assert_not_null(strstr(r.why, "simulated device fault"));
}

Test(harness_run, padding_that_reaches_a_sum_fails_unexpected_nan)
{
    ac_budgets b = budgets();
    ac_case c = small_case(); /* b=2, nk=33: the second sequence has 10 keys, 23 of padding (NaN) */
    c.n_seqlens_k = 2, c.seqlens_k[0] = 33, c.seqlens_k[1] = 10;
    ac_run_opts o = {.backward = false};
    ac_result r;
    ac_err err;
    ac_kernel good = double_kernel(DBL_CORRECT);
    cr_assert_eq(ac_run_case(&good, &c, &b, &o, &r, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(r.verdict, AC_VERDICT_PASS, "%s", r.why);
    ac_kernel k = double_kernel(DBL_READS_PADDING);
    cr_assert_eq(ac_run_case(&k, &c, &b, &o, &r, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(r.verdict, AC_VERDICT_FAIL);
    /* forward first: this double writes a NaN row's O as zeros (O:wrong-zero), and LSE's NaN follows */
    cr_assert_str_eq(r.kind, "O:wrong-zero", "%s", r.why);
    cr_assert_not_null(strstr(r.why, "LSE:unexpected-nan"), "%s", r.why);
    /* every row of batch 1 (4 heads x 20 rows), none of batch 0 (this double's O, the fp64
     * reference's code, writes a row whose sum is NaN as zeros: a scaled error there) */
    cr_assert_eq(r.m[AC_OUT_LSE].n_unexpected_nan, (size_t)4 * 20);
    cr_assert_eq(r.m[AC_OUT_LSE].first_special.b, 1);
}

Test(harness_run, a_fault_a_kernel_reports_is_a_failure_of_its_class_naming_it)
{
    ac_budgets b = budgets();
    ac_case c = small_case();
    ac_run_opts o = {.backward = false};
    ac_result r;
    ac_err err;
    ac_kernel k = double_kernel(DBL_REPORTS_CRASH);
    cr_assert_eq(ac_run_case(&k, &c, &b, &o, &r, &err), AC_OK, "a verdict, not an error");
    cr_assert_eq(r.verdict, AC_VERDICT_FAIL);
    cr_assert_eq(r.status, AC_OK);
    cr_assert_str_eq(r.kind, "kernel:crash");
    cr_assert_str_eq(r.why, "crash: kernel double: the command ./mine died of SIGBUS");
    k = double_kernel(DBL_REPORTS_NOCLASS);
    cr_assert_eq(ac_run_case(&k, &c, &b, &o, &r, &err), AC_OK);
    cr_assert_str_eq(r.kind, "kernel:fault");
    cr_assert_str_eq(r.why, "fault: kernel double: Something Odd happened");
    k = double_kernel(DBL_WRITES_PAST_LSE); /* in this process too, the guards catch it */
    cr_assert_eq(ac_run_case(&k, &c, &b, &o, &r, &err), AC_OK);
    cr_assert_str_eq(r.kind, "kernel:out-of-bounds-write");
    cr_assert_str_eq(r.why,
                     "out-of-bounds-write: kernel double: forward wrote past the end of LSE: elements end+0 to "
                     "end+2 (LSE holds 160 f32 elements; end+0 is the first one past it)");
}

Test(harness_run, the_default_deadline_is_generous_and_scales_with_the_flops)
{
    ac_kernel cpu = double_kernel(DBL_CORRECT), gpu = cpu;
    gpu.device = AC_DEV_CUDA;
    ac_problem tiny = ac_problem_dense(1, 1, 1, 4, 4, 8), big = ac_problem_dense(2, 8, 8, 1024, 2048, 128);
    cr_assert_eq(ac_kernel_deadline_s(&cpu, &tiny, false), 10.0);
    cr_assert_eq(ac_kernel_deadline_s(&gpu, &tiny, true), 10.0);
    double flops = 4.0 * 2 * 8 * 1024 * 2048 * 128; /* 34.4 GFLOP */
    cr_assert_float_eq(ac_kernel_deadline_s(&cpu, &big, false), flops / 1e7, 1e-9);
    cr_assert_float_eq(ac_kernel_deadline_s(&cpu, &big, true), 2.5 * flops / 1e7, 1e-9);
    cr_assert_float_eq(ac_kernel_deadline_s(&gpu, &big, false), flops / 1e9, 1e-9);
}

Test(harness_run, case_outside_caps_is_unsupported_not_run)
{
    ac_kernel k = double_kernel(DBL_CORRECT);
    k.caps.dtypes = 1u << AC_F32;
    ac_budgets b = budgets();
    ac_case c = small_case(); /* f16 */
    ac_run_opts o = {.backward = false};
    ac_result r;
    ac_err err;
    cr_assert_eq(ac_run_case(&k, &c, &b, &o, &r, &err), AC_ERR_INPUT);
    cr_assert(r.unsupported);
    cr_assert_eq(r.verdict, AC_VERDICT_ERROR);
}

Test(harness_run, a_real_failure_shrinks_to_a_small_case_of_the_same_kind)
{
    ac_kernel k = double_kernel(DBL_SCALE_BIAS);
    ac_budgets b = budgets();
    ac_case c = small_case();
    ac_case_set_mask(&c, AC_MASK_CAUSAL_BR);
    ac_run_opts o = {.backward = false};
    ac_result r;
    ac_err err;
    cr_assert_eq(ac_run_case(&k, &c, &b, &o, &r, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(r.verdict, AC_VERDICT_FAIL);
    ac_case min;
    ac_shrink_failure(&k, &b, &o, &c, r.kind, 300, &min);
    cr_assert_eq(min.batch, 1);
    cr_assert_eq(min.heads_q, 1);
    cr_assert_eq(min.mask, AC_MASK_NONE, "a bias everywhere needs no mask");
    cr_assert_leq(min.seqlen_q * min.seqlen_k, 16, "got nq=%d nk=%d", min.seqlen_q, min.seqlen_k);
    ac_result again;
    cr_assert_eq(ac_run_case(&k, &min, &b, &o, &again, &err), AC_OK);
    cr_assert_str_eq(again.kind, r.kind, "the minimal case fails the same way");
}

Test(harness_run, campaign_json_is_identical_for_the_same_seed, .init = make_dir, .fini = remove_dir)
{
    ac_kernel k = double_kernel(DBL_CORRECT);
    ac_budgets b = budgets();
    char pa[128], pb[128];
    snprintf(pa, sizeof pa, "%s", path_of("a.json"));
    snprintf(pb, sizeof pb, "%s", path_of("b.json"));
    for (int i = 0; i < 2; i++) {
        ac_report *rep;
        ac_err err;
        cr_assert_eq(ac_report_open(&rep, &err), AC_OK);
        cr_assert_eq(ac_report_want(rep, "--json", i ? pb : pa, &err), AC_OK);
        ac_campaign_opts o = {.seed = 11, .max_cases = 5, .max_seqlen = 24, .run = {.cert_rows = 1}};
        ac_summary s;
        cr_assert_eq(ac_campaign(&k, &b, &o, rep, &s, &err), AC_OK, "%s", err.msg);
        cr_assert_eq(s.cases, 5);
        cr_assert_eq(s.passed, 5);
        cr_assert_eq(ac_report_close(rep, &err), AC_OK);
    }
    char *a = read_text(pa), *bb = read_text(pb);
    cr_assert_gt(strlen(a), 100);
    cr_assert_str_eq(a, bb);
    free(a), free(bb);
}
