/* harness/cli/check_thd.c — `attncheck check` and `attncheck reference` on the
 * packed THD layout (flash_attn_varlen_func's): q, o, do, dq (total_q, Hq, .),
 * k, v, dk, dv (total_k, Hkv, .), lse (Hq, total_q), and the row offsets
 * --cu-seqlens-q/-k (B + 1 integers, 0 first, nondecreasing, the last the
 * total).  The batch comes from the offsets; nq and nk (the grid's extent)
 * are the longest sequences, FlashAttention's max_seqlen_q/_k. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/cli/check_internal.h"

/* LIST "0,5,12" or a 1-D i32/i64 .npy/.safetensors file; *n_out values. */
static int read_values(const char *arg, const char *label, int **out, int *n_out, ac_err *err)
{
    ac_tensor t = {0};
    int st = AC_OK, n = 0;
    size_t cap = 1 + (size_t)AC_CASE_MAX_BATCH * 64;
    bool from_file = access(arg, F_OK) == 0;
    if (from_file) {
        if ((st = ac_check_read_small(arg, label, &t, err)) != AC_OK)
            return st;
        if (t.ndim != 1 || (t.dtype != AC_TF_I32 && t.dtype != AC_TF_I64))
            st = ac_fail(err, AC_ERR_INPUT, "%s: %s must be a 1-D i32 or i64 array", arg, label);
        cap = t.n_elems;
    }
    *out = st == AC_OK ? calloc(cap + 1, sizeof(int)) : NULL;
    if (st == AC_OK && !*out)
        st = ac_fail(err, AC_ERR_ENV, "%s: out of memory", label);
    for (size_t i = 0; st == AC_OK && from_file && i < t.n_elems; i++) {
        int64_t v = t.dtype == AC_TF_I32 ? ((int32_t *)t.data)[i] : ((int64_t *)t.data)[i];
        if (v < 0 || v > INT_MAX)
            st = ac_fail(err, AC_ERR_INPUT, "%s: %s[%zu] = %lld outside 0..%d", arg, label, i, (long long)v, INT_MAX);
        else
            (*out)[n++] = (int)v;
    }
    for (const char *s = arg; st == AC_OK && !from_file && *s; n++) {
        char *e;
        long v = strtol(s, &e, 10);
        if (e == s || (*e && *e != ',') || v < 0 || v > INT_MAX || (size_t)n >= cap)
            st = ac_fail(err, AC_ERR_INPUT, "%s: '%s' is not a file nor a list of row offsets", label, arg);
        else
            (*out)[n] = (int)v;
        s = *e ? e + 1 : e;
    }
    ac_tensor_free(&t);
    *n_out = n;
    return st;
}

/* Offsets 0 first, nondecreasing, ending at the tensor's row count; *longest the largest length. */
static int read_cu(const char *arg, const char *label, int64_t total, int **cu, int *batch, int *longest, ac_err *err)
{
    if (!arg)
        return ac_fail(err, AC_ERR_INPUT, "%s: --layout thd needs it (the B + 1 row offsets of the packed sequences)",
                       label);
    int n = 0, st = read_values(arg, label, cu, &n, err);
    if (st == AC_OK && (n < 2 || n - 1 > AC_CASE_MAX_BATCH))
        st = ac_fail(err, AC_ERR_INPUT, "%s: %d offsets, expected B + 1 with B in 1..%d", label, n, AC_CASE_MAX_BATCH);
    if (st == AC_OK && (*cu)[0] != 0)
        st = ac_fail(err, AC_ERR_INPUT, "%s: the first offset is %d, must be 0", label, (*cu)[0]);
    *longest = 1;
    for (int b = 0; st == AC_OK && b + 1 < n; b++) {
        if ((*cu)[b + 1] < (*cu)[b])
            st = ac_fail(err, AC_ERR_INPUT, "%s: offsets decrease at %d (%d then %d)", label, b + 1, (*cu)[b],
                         (*cu)[b + 1]);
        else if ((*cu)[b + 1] - (*cu)[b] > *longest)
            *longest = (*cu)[b + 1] - (*cu)[b];
    }
    if (st == AC_OK && (*cu)[n - 1] != total)
        st = ac_fail(err, AC_ERR_INPUT, "%s: the last offset is %d, the tensors have %lld rows", label, (*cu)[n - 1],
                     (long long)total);
    *batch = n - 1;
    return st;
}

/* The plain tensors' packed shapes: Q-like (total_q, Hq, d), K-like (total_k,
 * Hkv, d), V-like and O-like with v's head dim, lse (Hq, total_q). */
static int packed_shapes(const tensor_files *f, const dims *d, int64_t total_q, int64_t total_k, ac_err *err)
{
    int64_t qs[3] = {total_q, d->hq, d->d}, ks[3] = {total_k, d->hkv, d->d}, vs[3] = {total_k, d->hkv, d->d_v};
    int64_t os[3] = {total_q, d->hq, d->d_v}, ls[2] = {d->hq, total_q};
    const int64_t *want[T_PLAIN_N] = {[T_Q] = qs,  [T_K] = ks,  [T_V] = vs,  [T_O] = os, [T_LSE] = ls,
                                      [T_DO] = os, [T_DQ] = qs, [T_DK] = ks, [T_DV] = vs};
    int st = AC_OK;
    for (int i = 0; st == AC_OK && i < T_PLAIN_N; i++)
        if (f->have[i])
            st = ac_check_want_shape(
                &f->t[i], i == T_LSE ? 2 : 3, want[i],
                i == T_LSE ? "(Hq, total_q) for --layout thd" : "packed (total, H, d) for --layout thd", err);
    return st;
}

int ac_check_thd_shapes(const ac_cli *o, const tensor_files *f, dims *d, ac_inputs *in, ac_err *err)
{
    const ac_tensor *q = &f->t[T_Q], *k = &f->t[T_K], *v = &f->t[T_V];
    if (o->seqlens_q || o->seqlens_k)
        return ac_fail(err, AC_ERR_INPUT, "--seqlens-q/-k: --layout thd takes --cu-seqlens-q/-k (the row offsets)");
    for (int i = 0; i < 3; i++)
        if (f->t[i].ndim != 3)
            return ac_fail(err, AC_ERR_INPUT,
                           "%s: tensor %s has %d dimensions, expected 3, packed (total, H, d) for "
                           "--layout thd",
                           f->t[i].file, ac_check_tnames[i], f->t[i].ndim);
    for (int i = 1; i < 3; i++)
        if (q->shape[i] < 1 || q->shape[i] > INT_MAX || k->shape[i] < 1 || k->shape[i] > INT_MAX || v->shape[i] < 1)
            return ac_fail(err, AC_ERR_INPUT, "%s: q, k and v need heads and head dims >= 1", q->file);
    if (v->shape[2] > 512)
        return ac_fail(err, AC_ERR_INPUT, "%s: v's head dim must be in 1..512, got %lld", v->file,
                       (long long)v->shape[2]);
    int bq = 0, bk = 0;
    int st = read_cu(o->cu_seqlens_q, "--cu-seqlens-q", q->shape[0], &in->cu_seqlens_q, &bq, &d->nq, err);
    if (st == AC_OK)
        st = read_cu(o->cu_seqlens_k, "--cu-seqlens-k", k->shape[0], &in->cu_seqlens_k, &bk, &d->nk, err);
    if (st == AC_OK && bq != bk)
        st = ac_fail(err, AC_ERR_INPUT, "--cu-seqlens-q has %d sequences, --cu-seqlens-k %d", bq, bk);
    if (st != AC_OK)
        return st;
    d->b = bq, d->hq = (int)q->shape[1], d->d = (int)q->shape[2], d->hkv = (int)k->shape[1], d->d_v = (int)v->shape[2];
    if (k->shape[2] != d->d)
        return ac_fail(err, AC_ERR_INPUT, "%s: k's head dim %lld differs from q's %d", k->file, (long long)k->shape[2],
                       d->d);
    st = packed_shapes(f, d, q->shape[0], k->shape[0], err);
    if (st == AC_OK && d->hq % d->hkv != 0)
        st = ac_fail(err, AC_ERR_INPUT, "%s: q has %d heads, k has %d: GQA needs a multiple", q->file, d->hq, d->hkv);
    return st;
}

/* The THD problem: the offsets read above, the lengths (descriptive) into the case. */
int ac_check_thd_problem(ac_inputs *in)
{
    if (!in->cu_seqlens_q)
        return AC_OK;
    ac_case *c = &in->c;
    in->p.layout = c->layout = AC_LAYOUT_THD;
    in->p.cu_seqlens_q = in->cu_seqlens_q, in->p.cu_seqlens_k = in->cu_seqlens_k;
    c->n_seqlens_q = c->n_seqlens_k = in->p.batch;
    for (int b = 0; b < in->p.batch; b++) {
        c->seqlens_q[b] = in->cu_seqlens_q[b + 1] - in->cu_seqlens_q[b];
        c->seqlens_k[b] = in->cu_seqlens_k[b + 1] - in->cu_seqlens_k[b];
    }
    return AC_OK;
}

void ac_check_out_shapes(const ac_inputs *in, const tensor_files *f, ac_tensor *o_shape, ac_tensor *lse_shape)
{
    const ac_problem *p = &in->p;
    const ac_tensor *v = &f->t[T_V];
    *o_shape = f->t[T_Q]; /* q's shape with v's head dim */
    o_shape->data = NULL;
    o_shape->shape[o_shape->ndim - 1] = v->shape[v->ndim - 1];
    memset(lse_shape, 0, sizeof *lse_shape);
    if (p->layout == AC_LAYOUT_THD) {
        lse_shape->ndim = 2;
        lse_shape->shape[0] = p->heads_q, lse_shape->shape[1] = p->cu_seqlens_q[p->batch];
        return;
    }
    lse_shape->ndim = 3;
    lse_shape->shape[0] = p->batch, lse_shape->shape[1] = p->heads_q, lse_shape->shape[2] = p->seqlen_q;
}
