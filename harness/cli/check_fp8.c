/* harness/cli/check_fp8.c — fp8 inputs in `check` and `reference` (issue 17):
 * q, k, v as e4m3/e5m2 codes (.npy |u1 with --dtype e4m3|e5m2, or safetensors
 * F8_E4M3/F8_E5M2), their f32 descale factors from --descale-q/-k/-v (absent:
 * 1 per tensor), O's dtype from the o file (f16, or bf16 as BF16/<u2 bits;
 * absent: bf16) and P's declared format from --kernel's caps (else e4m3). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/cli/check_internal.h"

int ac_check_fp8_dtype(const tensor_files *f, const char *want, bool *is_fp8, ac_dtype *out, ac_err *err)
{
    const ac_tensor *q = &f->t[T_Q];
    ac_dtype given = AC_F32;
    bool asked = want && ac_dtype_parse(want, &given) == AC_OK && ac_dtype_is_fp8(given);
    bool file_fp8 = q->dtype == AC_TF_F8_E4M3 || q->dtype == AC_TF_F8_E5M2;
    if (!file_fp8 && !(q->dtype == AC_TF_U8 && asked))
        return AC_OK;
    ac_dtype t = file_fp8 ? (q->dtype == AC_TF_F8_E4M3 ? AC_E4M3 : AC_E5M2) : given;
    if (want && given != t)
        return ac_fail(err, AC_ERR_INPUT, "%s: q holds %s but --dtype says %s", q->file, ac_tfile_dtype_name(q->dtype),
                       want);
    for (int i = T_K; i <= T_V; i++)
        if (f->t[i].dtype != q->dtype)
            return ac_fail(err, AC_ERR_INPUT, "%s: %s holds %s but q holds %s: q, k, v share one fp8 dtype",
                           f->t[i].file, ac_check_tnames[i], ac_tfile_dtype_name(f->t[i].dtype),
                           ac_tfile_dtype_name(q->dtype));
    for (int i = T_O; i < T_PLAIN_N; i++) {
        ac_tfile_dtype d = f->t[i].dtype;
        bool ok = i == T_LSE ? d == AC_TF_F32 : d == AC_TF_F16 || d == AC_TF_BF16 || d == AC_TF_U16;
        if (f->have[i] && !ok)
            return ac_fail(err, AC_ERR_INPUT,
                           "%s: %s holds %s: with fp8 inputs the outputs are f16 or bf16 (<u2 "
                           "bits), lse f32",
                           f->t[i].file, ac_check_tnames[i], ac_tfile_dtype_name(d));
    }
    *is_fp8 = true;
    *out = t;
    return AC_OK;
}

static int rows_of(const ac_problem *p, ac_tensor_kind kind) { return kind == AC_TENSOR_Q ? p->seqlen_q : p->seqlen_k; }

/* The granularity a descale file's shape says: (1) or a scalar, (B, Hkv), (B, H, blocks). */
static int read_factors(const ac_cli *o, const char *path, const char *label, ac_tensor_kind kind, ac_inputs *in,
                        float **out, int *rows, ac_err *err)
{
    const ac_problem *p = &in->p;
    ac_tensor t = {0};
    int st = ac_check_read_small(path, label, &t, err), heads = kind == AC_TENSOR_Q ? p->heads_q : p->heads_kv;
    if (st != AC_OK)
        return st;
    if (t.dtype != AC_TF_F32)
        st = ac_fail(err, AC_ERR_INPUT, "%s: %s must be f32, got %s", path, label, ac_tfile_dtype_name(t.dtype));
    else if (t.n_elems == 1 && t.ndim <= 1)
        *rows = AC_DESCALE_TENSOR;
    else if (t.ndim == 2 && t.shape[0] == p->batch && t.shape[1] == p->heads_kv)
        *rows = AC_DESCALE_HEAD;
    else if (t.ndim == 3 && t.shape[0] == p->batch && t.shape[1] == heads && o->descale_block &&
             t.shape[2] == (rows_of(p, kind) + atoi(o->descale_block) - 1) / atoi(o->descale_block))
        *rows = atoi(o->descale_block);
    else
        st = ac_fail(err, AC_ERR_INPUT,
                     "%s: %s has %zu elements in %d dimensions: expected (1), (B, Hkv) = (%d, %d) "
                     "or (B, H, ceil(S / N)) with --descale-block N",
                     path, label, t.n_elems, t.ndim, p->batch, p->heads_kv);
    for (size_t i = 0; st == AC_OK && i < t.n_elems; i++) {
        float x = ((const float *)t.data)[i];
        if (!(isfinite(x) && x > 0.0f))
            st = ac_fail(err, AC_ERR_INPUT, "%s: %s[%zu] is %g: descale factors are finite and positive", path, label,
                         i, (double)x);
    }
    if (st == AC_OK)
        *out = t.data, t.data = NULL;
    ac_tensor_free(&t);
    return st;
}

/* --fp8-acc f32|e8mB: the case line's acc= values. */
static int fp8_acc_bits_of(const char *text, int *bits, ac_err *err)
{
    if (!ac_fp8_acc_parse(text, bits))
        return ac_fail(err, AC_ERR_INPUT, "--fp8-acc: '%s' is not f32 or e8mB with B in 1..22", text);
    return AC_OK;
}

static int check_block(const ac_cli *o, ac_err *err)
{
    unsigned long long n = 0;
    if (o->descale_block && (!ac_read_unsigned(o->descale_block, 65536, &n) || n < 16 || n % 16 != 0))
        return ac_fail(err, AC_ERR_INPUT, "--descale-block: '%s' is not a multiple of 16 in 16..65536",
                       o->descale_block);
    return AC_OK;
}

int ac_check_fp8_problem(const ac_cli *o, const tensor_files *f, ac_inputs *in, ac_err *err)
{
    ac_problem *p = &in->p;
    const ac_tensor *out = &f->t[T_O];
    p->fp8_out = f->have[T_O] && out->dtype == AC_TF_F16 ? AC_F16 : AC_BF16;
    const ac_kernel *k = o->kernel ? ac_kernel_find(o->kernel) : NULL;
    p->fp8_p = k && k->caps.fp8_p != AC_F32 ? k->caps.fp8_p : AC_E4M3;
    p->fp8_acc_bits = k ? k->caps.fp8_acc_bits : 0;
    if (o->fp8_acc) {
        int st_qk = fp8_acc_bits_of(o->fp8_acc, &p->fp8_acc_bits, err);
        if (st_qk != AC_OK)
            return st_qk;
    }
    in->c.out_dtype = p->fp8_out, in->c.p_dtype = p->fp8_p, in->c.acc_bits = p->fp8_acc_bits;
    const char *files[3] = {o->descale_q, o->descale_k, o->descale_v},
               *labels[3] = {"descale_q", "descale_k", "descale_v"};
    float **arr[3] = {&in->descale_q, &in->descale_k, &in->descale_v};
    const ac_tensor_kind kinds[3] = {AC_TENSOR_Q, AC_TENSOR_K, AC_TENSOR_V};
    int rows[3] = {0, 0, 0}, st = check_block(o, err);
    for (int i = 0; st == AC_OK && i < 3; i++) {
        if (files[i]) {
            st = read_factors(o, files[i], labels[i], kinds[i], in, arr[i], &rows[i], err);
        } else if ((*arr[i] = malloc(sizeof(float))) != NULL) {
            **arr[i] = 1.0f;
        } else {
            st = ac_fail(err, AC_ERR_ENV, "%s: out of memory", labels[i]);
        }
    }
    bool given = files[0] || files[1] || files[2];
    if (st == AC_OK && given && !(files[0] && files[1] && files[2] && rows[0] == rows[1] && rows[1] == rows[2]))
        st = ac_fail(err, AC_ERR_INPUT, "--descale-q, -k and -v: all three, at one granularity");
    p->descale_rows = in->c.descale_rows = rows[0];
    p->descale_q = in->descale_q, p->descale_k = in->descale_k, p->descale_v = in->descale_v;
    return st;
}

void ac_check_fp8_descale(const ac_inputs *in, ac_tensor_kind kind, double *wide)
{
    const ac_problem *p = &in->p;
    const float *f = kind == AC_TENSOR_Q ? p->descale_q : kind == AC_TENSOR_K ? p->descale_k : p->descale_v;
    int heads = kind == AC_TENSOR_Q ? p->heads_q : p->heads_kv;
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < heads; h++)
            for (int s = 0; s < ac_stored_rows(p, b, kind == AC_TENSOR_Q); s++)
                for (int c = 0; c < ac_tensor_dim(p, kind); c++)
                    wide[ac_tensor_index(p, kind, b, h, s, c)] *= f[ac_descale_index(p, kind, b, h, s)];
}
