/* harness/cli/check_variants.c — the variants of `attncheck check` and
 * `attncheck reference` (ref/variants.h): what the files cannot say, read
 * from the options into the problem and the descriptive case, as a fuzz
 * case with the same variants would have them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/cli/check_internal.h"

/* --softcap C: as the case line's softcap, the f32 value of c > 0. */
static int read_softcap(const ac_cli *o, ac_inputs *in, ac_err *err)
{
    if (!o->softcap)
        return AC_OK;
    char *e;
    double c = strtod(o->softcap, &e);
    if (e == o->softcap || *e || !(c > 0.0) || !isfinite((float)c))
        return ac_fail(err, AC_ERR_INPUT, "--softcap: '%s' is not a finite c > 0", o->softcap);
    in->c.softcap = in->p.softcap = (double)(float)c;
    return AC_OK;
}

/* --sinks FILE: the (Hq) f32 logits (a (1, Hq) array too), finite. */
static int read_sinks(const ac_cli *o, ac_inputs *in, ac_err *err)
{
    if (!o->sinks)
        return AC_OK;
    ac_tensor t;
    int st = ac_check_read_small(o->sinks, "sinks", &t, err);
    if (st != AC_OK)
        return st;
    int hq = in->p.heads_q;
    if (t.dtype != AC_TF_F32 || (size_t)hq != t.n_elems || t.ndim > 2)
        st = ac_fail(err, AC_ERR_INPUT, "%s: sinks must be %d f32 values (Hq), got %s with %zu elements", o->sinks, hq,
                     ac_tfile_dtype_name(t.dtype), t.n_elems);
    for (int h = 0; st == AC_OK && h < hq; h++)
        if (!isfinite(((float *)t.data)[h]))
            st = ac_fail(err, AC_ERR_INPUT, "%s: sinks[%d] is %g: the logits must be finite", o->sinks, h,
                         (double)((float *)t.data)[h]);
    if (st == AC_OK) {
        in->sinks = t.data, t.data = NULL; /* freed with the inputs */
        in->p.sinks = in->sinks;
    }
    ac_tensor_free(&t);
    return st;
}

/* --alibi FILE: f32 slopes (Hq), one per head, or (B, Hq), per batch and head. */
static int read_alibi(const ac_cli *o, ac_inputs *in, ac_err *err)
{
    if (!o->alibi)
        return AC_OK;
    ac_tensor t;
    int st = ac_check_read_small(o->alibi, "alibi", &t, err);
    if (st != AC_OK)
        return st;
    int hq = in->p.heads_q, b = in->p.batch;
    bool per_head = t.ndim == 1 && t.shape[0] == hq, per_batch = t.ndim == 2 && t.shape[0] == b && t.shape[1] == hq;
    if (t.dtype != AC_TF_F32 || !(per_head || per_batch))
        st = ac_fail(err, AC_ERR_INPUT,
                     "%s: ALiBi slopes must be f32 (Hq) = (%d) or (B, Hq) = (%d, %d), got %s with "
                     "%d dimensions",
                     o->alibi, hq, b, hq, ac_tfile_dtype_name(t.dtype), t.ndim);
    for (size_t x = 0; st == AC_OK && x < t.n_elems; x++)
        if (!isfinite(((float *)t.data)[x]))
            st = ac_fail(err, AC_ERR_INPUT, "%s: alibi[%zu] is %g: the slopes must be finite", o->alibi, x,
                         (double)((float *)t.data)[x]);
    if (st == AC_OK) {
        in->alibi = t.data, t.data = NULL; /* freed with the inputs */
        in->p.alibi_slopes = in->alibi;
        in->p.alibi_batch = per_batch ? b : 1;
        in->c.alibi = AC_ALIBI_UNIFORM, in->c.alibi_bh = per_batch; /* descriptive: slopes from a file */
    }
    ac_tensor_free(&t);
    return st;
}

/* The dtype of a bias (or dbias) file: f32, or the inputs' 16-bit dtype (bf16
 * as <u2 bit patterns in .npy); -1 for anything else. */
static int bias_dtype_of(const ac_tensor *t, ac_dtype inputs)
{
    if (t->dtype == AC_TF_F32)
        return AC_F32;
    if ((t->dtype == AC_TF_F16 && inputs == AC_F16) || (t->dtype == AC_TF_BF16 && inputs == AC_BF16))
        return inputs;
    return t->dtype == AC_TF_U16 && inputs == AC_BF16 ? AC_BF16 : -1;
}

/* Whether t is (Nq, Nk) or (1|B, 1|Hq, Nq, Nk); *nb, *nh its broadcast shape. */
static bool bias_shape_of(const ac_tensor *t, const ac_problem *p, int *nb, int *nh)
{
    const int64_t *nn = t->shape + t->ndim - 2;
    *nb = t->ndim == 4 ? (int)t->shape[0] : 1, *nh = t->ndim == 4 ? (int)t->shape[1] : 1;
    return (t->ndim == 2 || t->ndim == 4) && nn[0] == p->seqlen_q && nn[1] == p->seqlen_k &&
        (*nb == 1 || *nb == p->batch) && (*nh == 1 || *nh == p->heads_q);
}

/* --bias FILE: an additive bias, f32 or the inputs' dtype, broadcast as
 * (Nq, Nk) or (1|B, 1|Hq, Nq, Nk); -inf entries hide their pairs, NaN and +inf
 * are refused (ac_problem_validate). */
static int read_bias(const ac_cli *o, ac_inputs *in, ac_err *err)
{
    if (!o->bias)
        return AC_OK;
    ac_tensor t;
    int st = ac_check_read_small(o->bias, "bias", &t, err), nb, nh;
    if (st != AC_OK)
        return st;
    int dtype = bias_dtype_of(&t, in->c.dtype);
    const ac_problem *p = &in->p;
    if (dtype < 0)
        st = ac_fail(err, AC_ERR_INPUT, "%s: the bias holds %s; expected f32 or the inputs' %s", o->bias,
                     ac_tfile_dtype_name(t.dtype), ac_dtype_name(in->c.dtype));
    else if (!bias_shape_of(&t, p, &nb, &nh))
        st = ac_fail(err, AC_ERR_INPUT, "%s: the bias must be (Nq, Nk) = (%d, %d) or (1|%d, 1|%d, %d, %d)", o->bias,
                     p->seqlen_q, p->seqlen_k, p->batch, p->heads_q, p->seqlen_q, p->seqlen_k);
    if (st == AC_OK) {
        in->bias = t.data, t.data = NULL; /* freed with the inputs */
        in->p.bias = in->bias, in->p.bias_dtype = (ac_dtype)dtype, in->p.bias_batch = nb, in->p.bias_heads = nh;
        in->c.bias = AC_BIAS_NORMAL, in->c.bias_f32 = dtype == AC_F32; /* descriptive: a bias from a file */
        in->c.bias_per_batch = nb > 1, in->c.bias_per_head = nh > 1;
    }
    ac_tensor_free(&t);
    return st;
}

/* --sink-tokens K: with --mask window-*(L,R), L finite (ac_problem_validate says so otherwise). */
static int read_sink_tokens(const ac_cli *o, ac_inputs *in, ac_err *err)
{
    if (!o->sink_tokens)
        return AC_OK;
    char *e;
    long k = strtol(o->sink_tokens, &e, 10);
    if (e == o->sink_tokens || *e || k < 1 || k > 1 << 30)
        return ac_fail(err, AC_ERR_INPUT, "--sink-tokens: '%s' is not a number of keys >= 1", o->sink_tokens);
    in->p.sink_tokens = in->c.sink_tokens = (int)k;
    return AC_OK;
}

/* --dropout-p P: with --dropout-mask FILE (bool/u8 (B, Hq, Nq, Nk), 1 = kept: the
 * mask the kernel drew), or with --kernel (check judges it against the mask it draws). */
static int read_dropout(const ac_cli *o, ac_inputs *in, ac_err *err)
{
    if (!o->dropout_p)
        return o->dropout_mask ? ac_fail(err, AC_ERR_INPUT, "--dropout-mask: needs --dropout-p P") : AC_OK;
    char *e;
    double q = strtod(o->dropout_p, &e);
    if (e == o->dropout_p || *e || !(q > 0.0 && q < 1.0))
        return ac_fail(err, AC_ERR_INPUT, "--dropout-p: '%s' is not a probability in (0,1)", o->dropout_p);
    in->p.dropout_p = in->c.dropout = q;
    if (!o->dropout_mask)
        return o->kernel ? AC_OK
                         : ac_fail(err, AC_ERR_INPUT,
                                   "--dropout-p: needs --dropout-mask FILE (the keep mask "
                                   "the kernel drew) or --kernel NAME");
    ac_tensor t;
    int st = ac_check_read_small(o->dropout_mask, "dropout mask", &t, err);
    if (st != AC_OK)
        return st;
    const ac_problem *p = &in->p;
    if ((t.dtype != AC_TF_BOOL && t.dtype != AC_TF_U8) || t.ndim != 4 || t.shape[0] != p->batch ||
        t.shape[1] != p->heads_q || t.shape[2] != p->seqlen_q || t.shape[3] != p->seqlen_k)
        st = ac_fail(err, AC_ERR_INPUT, "%s: the dropout mask must be bool or u8 (B, Hq, Nq, Nk) = (%d, %d, %d, %d)",
                     o->dropout_mask, p->batch, p->heads_q, p->seqlen_q, p->seqlen_k);
    if (st == AC_OK) {
        for (size_t x = 0; x < t.n_elems; x++)
            ((uint8_t *)t.data)[x] = ((uint8_t *)t.data)[x] != 0;
        in->dropout_keep = t.data, t.data = NULL; /* freed with the inputs */
        in->p.dropout_keep = in->dropout_keep;
    }
    ac_tensor_free(&t);
    return st;
}

int ac_check_variants(const ac_cli *o, ac_inputs *in, ac_err *err)
{
    int st = ac_check_thd_problem(in); /* check_thd.c */
    if (st == AC_OK)
        st = read_softcap(o, in, err);
    if (st == AC_OK)
        st = read_sinks(o, in, err);
    if (st == AC_OK)
        st = read_alibi(o, in, err);
    if (st == AC_OK)
        st = read_bias(o, in, err);
    if (st == AC_OK)
        st = read_sink_tokens(o, in, err);
    if (st == AC_OK)
        st = read_dropout(o, in, err);
    return st;
}

/* dbias: the bias's shape and dtype, with do. */
static int check_dbias_file(const tensor_files *f, const ac_inputs *in, ac_err *err)
{
    const ac_tensor *t = &f->t[T_DBIAS];
    const ac_problem *p = &in->p;
    int nb, nh;
    if (!p->bias)
        return ac_fail(err, AC_ERR_INPUT, "%s: dbias given but no --bias: the problem has no bias", t->file);
    if (!f->have[T_DO])
        return ac_fail(err, AC_ERR_INPUT, "%s: dbias given without do (the gradient it answers)", t->file);
    if (bias_dtype_of(t, in->c.dtype) != (int)p->bias_dtype || !bias_shape_of(t, p, &nb, &nh) ||
        nb != (p->bias_batch > 1 ? p->bias_batch : 1) || nh != (p->bias_heads > 1 ? p->bias_heads : 1))
        return ac_fail(err, AC_ERR_INPUT, "%s: dbias must have the bias's shape and dtype (%s)", t->file,
                       ac_dtype_name(p->bias_dtype));
    return AC_OK;
}

int ac_check_variant_files(const tensor_files *f, const ac_inputs *in, ac_err *err)
{
    if (f->have[T_DBIAS]) {
        int st = check_dbias_file(f, in, err);
        if (st != AC_OK)
            return st;
    }
    if (!f->have[T_DSINK])
        return AC_OK;
    const ac_tensor *t = &f->t[T_DSINK];
    if (!in->p.sinks)
        return ac_fail(err, AC_ERR_INPUT, "%s: dsink given but no --sinks: the problem has no sinks", t->file);
    if (!f->have[T_DO])
        return ac_fail(err, AC_ERR_INPUT, "%s: dsink given without do (the gradient it answers)", t->file);
    if (t->dtype != AC_TF_F32 || t->n_elems != (size_t)in->p.heads_q)
        return ac_fail(err, AC_ERR_INPUT, "%s: dsink must be %d f32 values (Hq), got %s with %zu elements", t->file,
                       in->p.heads_q, ac_tfile_dtype_name(t->dtype), t->n_elems);
    return AC_OK;
}

void ac_check_variants_describe(const ac_inputs *in, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    if (in->p.head_dim_v && in->p.head_dim_v != in->p.head_dim && at < len)
        at += (size_t)snprintf(buf + at, len - at, " dv=%d", in->p.head_dim_v);
    if (in->p.softcap != 0.0 && at < len)
        at += (size_t)snprintf(buf + at, len - at, " softcap=%.9g", in->p.softcap);
    if (in->p.sinks && at < len)
        at += (size_t)snprintf(buf + at, len - at, " sinks");
    if (in->p.bias && at < len)
        at += (size_t)snprintf(buf + at, len - at, " bias(%s,%s,Nq,Nk %s)", in->p.bias_batch > 1 ? "B" : "1",
                               in->p.bias_heads > 1 ? "Hq" : "1", ac_dtype_name(in->p.bias_dtype));
    if (in->p.dropout_p > 0.0 && at < len)
        at += (size_t)snprintf(buf + at, len - at, " dropout=%g", in->p.dropout_p);
    if (in->p.sink_tokens && at < len)
        at += (size_t)snprintf(buf + at, len - at, " sinktokens=%d", in->p.sink_tokens);
    if (in->p.alibi_slopes && at < len)
        at += (size_t)snprintf(buf + at, len - at, " alibi%s", in->p.alibi_batch > 1 ? "(B,Hq)" : "(Hq)");
}
