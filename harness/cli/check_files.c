/* harness/cli/check_files.c — the tensors of `attncheck check` and `attncheck
 * reference`: read a case directory or .safetensors file, check every shape
 * and dtype against q's, read the options the files cannot carry (layout,
 * mask kind, mask file, per-sequence lengths, scale) and build an ac_inputs
 * exactly as the fuzzer's, so the same reference, comparator and gate apply.
 * Inputs with NaN/Inf are refused: the reference would be meaningless. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness/cli/check_internal.h"

const char *const ac_check_tnames[T_N] = {"q", "k", "v", "o", "lse", "do", "dq", "dk", "dv", "dsink", "dbias"};

/* ---- reading the tensors ------------------------------------------------- */

bool ac_check_ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && !strcmp(s + n - m, tail);
}

static int read_dir(const char *dir, tensor_files *f, ac_err *err)
{
    for (int i = 0; i < T_N; i++) {
        char path[AC_PATH_LEN];
        if (snprintf(path, sizeof path, "%s/%s.npy", dir, ac_check_tnames[i]) >= (int)sizeof path)
            return ac_fail(err, AC_ERR_INPUT, "%s: path too long", dir);
        if (access(path, F_OK) != 0)
            continue;
        int st = ac_npy_read(path, ac_check_tnames[i], &f->t[i], err);
        if (st != AC_OK)
            return st;
        f->have[i] = true;
    }
    return AC_OK;
}

static int read_safetensors(const char *path, tensor_files *f, ac_err *err)
{
    ac_tensor_set set;
    int st = ac_safetensors_read(path, &set, err);
    for (size_t j = 0; st == AC_OK && j < set.n; j++) {
        int i = 0;
        while (i < T_N && strcmp(set.t[j].name, ac_check_tnames[i]) != 0)
            i++;
        if (i == T_N)
            st = ac_fail(err, AC_ERR_INPUT,
                         "%s: unknown tensor '%s' (expected q, k, v, o, lse, do, dq, dk, dv, dsink, dbias)", path,
                         set.t[j].name);
        else
            f->t[i] = set.t[j], f->have[i] = true, set.t[j].data = NULL; /* moved */
    }
    ac_tensor_set_free(&set);
    return st;
}

int ac_check_read_files(const char *path, tensor_files *f, ac_err *err)
{
    memset(f, 0, sizeof *f);
    struct stat s;
    if (stat(path, &s) != 0)
        return ac_fail(err, AC_ERR_INPUT, "%s: %s", path, strerror(errno));
    int st;
    if (S_ISDIR(s.st_mode))
        st = read_dir(path, f, err);
    else if (ac_check_ends_with(path, ".npy"))
        st = ac_fail(err, AC_ERR_INPUT, "%s is one .npy file: give the directory holding q.npy, k.npy, ...", path);
    else
        st = read_safetensors(path, f, err);
    for (int i = 0; st == AC_OK && i < T_V + 1; i++)
        if (!f->have[i])
            st = ac_fail(err, AC_ERR_INPUT, "%s: no tensor %s%s", path, ac_check_tnames[i],
                         S_ISDIR(s.st_mode) ? ".npy" : "");
    return st;
}

void ac_check_files_free(tensor_files *f)
{
    for (int i = 0; i < T_N; i++)
        ac_tensor_free(&f->t[i]);
}

/* ---- shapes and dtypes --------------------------------------------------- */

int ac_check_want_shape(const ac_tensor *t, int ndim, const int64_t *want, const char *why, ac_err *err)
{
    bool ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++)
        ok = t->shape[i] == want[i];
    if (ok)
        return AC_OK;
    char got[128], exp[128];
    ac_tensor w = {.ndim = ndim};
    memcpy(w.shape, want, sizeof(int64_t) * (size_t)ndim);
    ac_tensor_shape_str(t, got, sizeof got);
    ac_tensor_shape_str(&w, exp, sizeof exp);
    return ac_fail(err, AC_ERR_INPUT, "%s: tensor %s has shape %s, expected %s (%s)", t->file, t->name, got, exp, why);
}

static int pick_dtype(const tensor_files *f, const char *want, ac_dtype *out, ac_err *err)
{
    const ac_tensor *q = &f->t[T_Q];
    bool fp8 = false;
    int fst = ac_check_fp8_dtype(f, want, &fp8, out, err); /* check_fp8.c */
    if (fst != AC_OK || fp8)
        return fst;
    ac_dtype given = AC_F32;
    char names[64];
    ac_dtype_list(names, sizeof names);
    if (want && ac_dtype_parse(want, &given) != AC_OK)
        return ac_fail(err, AC_ERR_INPUT, "--dtype: '%s' is not one of %s", want, names);
    static const int from_file[AC_TF_COUNT] = {
        [AC_TF_F32] = AC_F32 + 1, [AC_TF_F16] = AC_F16 + 1, [AC_TF_BF16] = AC_BF16 + 1};
    if (q->dtype == AC_TF_U16 && !want)
        return ac_fail(err, AC_ERR_INPUT, "%s: q holds u16: if these are bf16 bit patterns, pass --dtype bf16",
                       q->file);
    if (q->dtype != AC_TF_U16 && !from_file[q->dtype])
        return ac_fail(err, AC_ERR_INPUT, "%s: q holds %s, not an input dtype (f32, f16, bf16; bf16 as <u2 bits)",
                       q->file, ac_tfile_dtype_name(q->dtype));
    *out = q->dtype == AC_TF_U16 ? given : (ac_dtype)(from_file[q->dtype] - 1);
    if (want && given != *out)
        return ac_fail(err, AC_ERR_INPUT, "%s: q holds %s but --dtype says %s", q->file, ac_tfile_dtype_name(q->dtype),
                       want);
    for (int i = 0; i < T_PLAIN_N; i++)
        if (i != T_LSE && f->have[i] && f->t[i].dtype != q->dtype)
            return ac_fail(err, AC_ERR_INPUT,
                           "%s: tensor %s holds %s but q holds %s: q, k, v, o, do, dq, dk, dv "
                           "must share one dtype",
                           f->t[i].file, ac_check_tnames[i], ac_tfile_dtype_name(f->t[i].dtype),
                           ac_tfile_dtype_name(q->dtype));
    if (f->have[T_LSE] && f->t[T_LSE].dtype != AC_TF_F32)
        return ac_fail(err, AC_ERR_INPUT, "%s: lse holds %s, expected f32", f->t[T_LSE].file,
                       ac_tfile_dtype_name(f->t[T_LSE].dtype));
    return AC_OK;
}

static int check_shapes(const tensor_files *f, bool bshd, dims *d, ac_err *err)
{
    const ac_tensor *q = &f->t[T_Q], *k = &f->t[T_K];
    const char *lay = bshd ? "(B, S, H, d) for --layout bshd" : "(B, H, S, d) for --layout bhsd";
    for (int i = 0; i < T_PLAIN_N; i++)
        if (i != T_LSE && f->have[i] && f->t[i].ndim != 4)
            return ac_fail(err, AC_ERR_INPUT, "%s: tensor %s has %d dimensions, expected 4 %s", f->t[i].file,
                           ac_check_tnames[i], f->t[i].ndim, lay);
    const ac_tensor *v = &f->t[T_V];
    for (int i = 0; i < 4; i++)
        if (q->shape[i] < 1 || q->shape[i] > INT_MAX || k->shape[i] < 1 || k->shape[i] > INT_MAX)
            return ac_fail(err, AC_ERR_INPUT, "%s: q and k need every dimension in 1..%d", q->file, INT_MAX);
    if (v->shape[3] < 1 || v->shape[3] > 512)
        return ac_fail(err, AC_ERR_INPUT, "%s: v's head dim must be in 1..512, got %lld", v->file,
                       (long long)v->shape[3]);
    int hs = bshd ? 2 : 1, ss = bshd ? 1 : 2;
    *d = (dims){.dtype = d->dtype,
                .b = (int)q->shape[0],
                .hq = (int)q->shape[hs],
                .nq = (int)q->shape[ss],
                .d = (int)q->shape[3],
                .hkv = (int)k->shape[hs],
                .nk = (int)k->shape[ss],
                .d_v = (int)v->shape[3]};
    int64_t kshape[4] = {d->b, 0, 0, d->d}, vshape[4] = {d->b, 0, 0, d->d_v}, oshape[4] = {d->b, 0, 0, d->d_v};
    kshape[hs] = vshape[hs] = d->hkv, kshape[ss] = vshape[ss] = d->nk;
    oshape[hs] = d->hq, oshape[ss] = d->nq;
    int st = ac_check_want_shape(k, 4, kshape, "batch and head dim as q's", err);
    for (int i = T_V; st == AC_OK && i < T_PLAIN_N; i++) {
        if (!f->have[i])
            continue;
        /* Q-like (dq): q's shape; K-like (dk): k's; V-like (v, dv) and O-like (o, do): d_v columns */
        const int64_t *want = i == T_DK ? kshape : i == T_V || i == T_DV ? vshape : i == T_DQ ? q->shape : oshape;
        const char *why = i == T_DK ? "k's shape"
            : i == T_V || i == T_DV ? "k's with v's head dim"
            : i == T_DQ             ? "q's shape"
                                    : "q's with v's head dim";
        if (i == T_LSE) {
            int64_t ls[3] = {d->b, d->hq, d->nq};
            st = ac_check_want_shape(&f->t[i], 3, ls, "(B, Hq, Nq)", err);
        } else {
            st = ac_check_want_shape(&f->t[i], 4, want, why, err);
        }
    }
    if (st == AC_OK && d->hq % d->hkv != 0)
        st = ac_fail(err, AC_ERR_INPUT, "%s: q has %d heads, k has %d: GQA needs a multiple", q->file, d->hq, d->hkv);
    return st;
}

/* ---- the problem: masks, lengths, scale ----------------------------------- */

/* --mask KIND: the case line's spelling (causal-tl, window-br(128,0), ...; the
 * option table has checked it), the same problem a fuzz case with that mask
 * gets.  A boolean mask from a file is --mask-file: both may apply. */
static int set_mask(const ac_cli *o, ac_problem *p, ac_case *c, ac_err *err)
{
    if (!o->mask)
        return AC_OK;
    int st = ac_case_mask_parse(o->mask, c, err);
    if (st == AC_OK)
        st = ac_case_validate(c, err);
    if (st == AC_OK)
        ac_case_mask_to_problem(c, p);
    return st;
}

int ac_check_read_small(const char *path, const char *label, ac_tensor *t, ac_err *err)
{
    if (ac_check_ends_with(path, ".safetensors")) {
        ac_tensor_set set;
        int st = ac_safetensors_read(path, &set, err);
        if (st == AC_OK && set.n != 1)
            st = ac_fail(err, AC_ERR_INPUT, "%s: %s: expected one tensor, found %zu", path, label, set.n);
        if (st == AC_OK)
            *t = set.t[0], set.t[0].data = NULL;
        ac_tensor_set_free(&set);
        return st;
    }
    return ac_npy_read(path, label, t, err);
}

/* LIST "5,7,3" or a .npy/.safetensors file of B integers in 0..limit. */
static int read_lengths(const char *arg, const char *label, int b, int limit, int **out, ac_err *err)
{
    *out = calloc((size_t)b, sizeof(int));
    if (!*out)
        return ac_fail(err, AC_ERR_ENV, "%s: out of memory", label);
    ac_tensor t = {0};
    int n = 0, st = AC_OK;
    if (access(arg, F_OK) == 0) {
        if ((st = ac_check_read_small(arg, label, &t, err)) != AC_OK)
            return st;
        if (t.ndim != 1 || (t.dtype != AC_TF_I32 && t.dtype != AC_TF_I64))
            st = ac_fail(err, AC_ERR_INPUT, "%s: %s must be a 1-D i32 or i64 array", arg, label);
        for (size_t i = 0; st == AC_OK && i < t.n_elems && n <= b; i++, n++) {
            int64_t v = t.dtype == AC_TF_I32 ? ((int32_t *)t.data)[i] : ((int64_t *)t.data)[i];
            if (v < 0 || v > limit)
                st = ac_fail(err, AC_ERR_INPUT, "%s: %s[%zu] = %lld outside 0..%d", arg, label, i, (long long)v, limit);
            else if (n < b)
                (*out)[n] = (int)v;
        }
        ac_tensor_free(&t);
    } else {
        for (const char *s = arg; st == AC_OK && *s; n++) { /* digits only, as a case line's seqlens */
            char tok[16];
            size_t len = strcspn(s, ",");
            unsigned long long v = 0;
            bool ok = len < sizeof tok && (memcpy(tok, s, len), tok[len] = '\0', true) &&
                ac_read_unsigned(tok, (unsigned long long)limit, &v);
            if (!ok)
                st = ac_fail(err, AC_ERR_INPUT, "%s: '%s' is not a file nor a list of lengths in 0..%d", label, arg,
                             limit);
            else if (n < b)
                (*out)[n] = (int)v;
            s += len + (s[len] == ',');
        }
    }
    if (st == AC_OK && n != b)
        st = ac_fail(err, AC_ERR_INPUT, "%s: %d lengths given, the batch is %d", label, n, b);
    return st;
}

static int read_mask(const char *path, const dims *d, ac_inputs *in, ac_err *err)
{
    ac_tensor t;
    int st = ac_check_read_small(path, "mask", &t, err);
    if (st != AC_OK)
        return st;
    int64_t mb = t.ndim == 4 ? t.shape[0] : 1, mh = t.ndim == 4 ? t.shape[1] : 1;
    const int64_t *nn = t.shape + t.ndim - 2;
    if (t.dtype != AC_TF_BOOL && t.dtype != AC_TF_U8)
        st = ac_fail(err, AC_ERR_INPUT, "%s: mask holds %s; expected bool or u8 (nonzero = attend)", path,
                     ac_tfile_dtype_name(t.dtype));
    else if ((t.ndim != 2 && t.ndim != 4) || nn[0] != d->nq || nn[1] != d->nk || (mb != 1 && mb != d->b) ||
             (mh != 1 && mh != d->hq))
        st = ac_fail(err, AC_ERR_INPUT, "%s: mask must be (Nq, Nk) = (%d, %d) or (1|%d, 1|%d, %d, %d)", path, d->nq,
                     d->nk, d->b, d->hq, d->nq, d->nk);
    if (st == AC_OK) {
        for (size_t i = 0; i < t.n_elems; i++)
            ((uint8_t *)t.data)[i] = ((uint8_t *)t.data)[i] != 0;
        in->dense_mask = t.data, t.data = NULL;
        in->p.dense_mask = in->dense_mask, in->p.mask_batch = (int)mb, in->p.mask_heads = (int)mh;
        ac_case_set_mask(&in->c, AC_MASK_DENSE), in->c.dense_keep = 1.0;
    }
    ac_tensor_free(&t);
    return st;
}

static int set_scale(const ac_cli *o, int head_dim, ac_problem *p, ac_case *c, ac_err *err)
{
    c->scale_auto = !o->scale;
    p->scale = (double)(float)ac_default_scale(head_dim); /* what a kernel's f32 scale holds */
    if (o->scale && !ac_read_decimal(o->scale, &p->scale)) /* as strictly as a case line's scale */
        return ac_fail(err, AC_ERR_INPUT, "--scale: '%s' is not a finite number", o->scale);
    c->scale = p->scale;
    return AC_OK;
}

static int build_problem(const ac_cli *o, const tensor_files *f, const dims *d, ac_inputs *in, ac_err *err)
{
    ac_case *c = &in->c;
    *c = ac_case_default();
    c->batch = d->b, c->heads_q = d->hq, c->heads_kv = d->hkv, c->seqlen_q = d->nq, c->seqlen_k = d->nk;
    c->head_dim = d->d, c->dtype = d->dtype;
    in->p = ac_problem_dense(d->b, d->hq, d->hkv, d->nq, d->nk, d->d);
    if (d->d_v != d->d) /* the dv variant, implied by v's shape */
        in->p.head_dim_v = c->head_dim_v = d->d_v;
    in->p.layout = c->layout = o->layout && !strcmp(o->layout, "bshd") ? AC_LAYOUT_BSHD : AC_LAYOUT_BHSD;
    int st = set_scale(o, d->d, &in->p, c, err);
    if (st == AC_OK)
        st = set_mask(o, &in->p, c, err);
    if (st == AC_OK && o->seqlens_q &&
        (st = read_lengths(o->seqlens_q, "--seqlens-q", d->b, d->nq, &in->seqlens_q, err)) == AC_OK)
        in->p.seqlens_q = in->seqlens_q;
    if (st == AC_OK && o->seqlens_k &&
        (st = read_lengths(o->seqlens_k, "--seqlens-k", d->b, d->nk, &in->seqlens_k, err)) == AC_OK)
        in->p.seqlens_k = in->seqlens_k;
    for (int i = 0; st == AC_OK && d->b <= AC_CASE_MAX_BATCH && i < d->b; i++) { /* descriptive only */
        c->n_seqlens_q = in->seqlens_q ? d->b : 0, c->n_seqlens_k = in->seqlens_k ? d->b : 0;
        c->seqlens_q[i] = in->seqlens_q ? in->seqlens_q[i] : 0, c->seqlens_k[i] = in->seqlens_k ? in->seqlens_k[i] : 0;
    }
    if (st == AC_OK && o->mask_file)
        st = read_mask(o->mask_file, d, in, err);
    if (st == AC_OK)
        st = ac_check_variants(o, in, err); /* check_variants.c */
    if (st == AC_OK && ac_dtype_is_fp8(c->dtype))
        st = ac_check_fp8_problem(o, f, in, err); /* check_fp8.c */
    if (st == AC_OK)
        ac_check_paged_problem(d, in); /* check_paged.c */
    if (st == AC_OK)
        st = ac_problem_validate(&in->p, 0, err);
    return st;
}

/* ---- inputs: widened exactly, NaN/Inf refused outside the padding ------------ */

static int widen(const ac_inputs *in, const ac_tensor *t, ac_tensor_kind kind, double **out, ac_err *err)
{
    const ac_problem *p = &in->p;
    *out = malloc(t->n_elems * sizeof(double) + 1);
    if (!*out)
        return ac_fail(err, AC_ERR_ENV, "%s: out of memory", t->name);
    ac_load(in->c.dtype, t->data, t->n_elems, *out);
    if (ac_dtype_is_fp8(in->c.dtype) && kind != AC_TENSOR_O)
        ac_check_fp8_descale(in, kind, *out); /* code * descale, exact */
    bool q_like = kind == AC_TENSOR_Q || kind == AC_TENSOR_O;
    int heads = q_like ? p->heads_q : p->heads_kv;
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < heads; h++) /* padding (past a sequence's length) may hold anything: NaN in gen's */
            for (int s = 0; s < (q_like ? ac_seqlen_q_of(p, b) : ac_seqlen_k_of(p, b)); s++)
                for (int c = 0; c < ac_tensor_dim(p, kind); c++) {
                    double x = (*out)[ac_tensor_index(p, kind, b, h, s, c)];
                    if (!isfinite(x))
                        return ac_fail(err, AC_ERR_INPUT,
                                       "%s: input %s holds %g at (b=%d, h=%d, s=%d, c=%d): an "
                                       "input NaN/Inf makes the reference meaningless",
                                       t->file, t->name, x, b, h, s, c);
                }
    return AC_OK;
}

/* --v-from-k: every key row of v (inside the lengths, through the pages) is
 * k's first d_v channels, bit for bit, as a kernel reading V from K sees it;
 * else exit 2 naming the first element that differs. */
static int check_v_from_k(const ac_cli *o, ac_inputs *in, ac_err *err)
{
    const ac_problem *p = &in->p;
    const ac_dtype t = in->c.dtype;
    if (ac_head_dim_v(p) > p->head_dim || ac_problem_is_fp8(p))
        return ac_fail(err, AC_ERR_INPUT, "%s: --v-from-k: v has %d channels to k's %d%s", o->path, ac_head_dim_v(p),
                       p->head_dim, ac_problem_is_fp8(p) ? " (and fp8 inputs are not supported)" : "");
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < p->heads_kv; h++)
            for (int j = 0; j < ac_seqlen_k_of(p, b); j++)
                for (int c = 0; c < ac_head_dim_v(p); c++)
                    if (ac_bits_get(t, in->v, ac_tensor_index(p, AC_TENSOR_V, b, h, j, c)) !=
                        ac_bits_get(t, in->k, ac_tensor_index(p, AC_TENSOR_K, b, h, j, c)))
                        return ac_fail(err, AC_ERR_INPUT,
                                       "%s: --v-from-k, but v is not k's first %d channels: b=%d h=%d key=%d "
                                       "channel %d differs",
                                       o->path, ac_head_dim_v(p), b, h, j, c);
    in->p.v_from_k = in->c.v_from_k = true;
    return AC_OK;
}

int ac_check_make_inputs(const ac_cli *o, tensor_files *f, ac_inputs *in, ac_err *err)
{
    memset(in, 0, sizeof *in);
    dims d;
    bool bshd = o->layout && !strcmp(o->layout, "bshd"), thd = o->layout && !strcmp(o->layout, "thd");
    bool paged = o->block_table || o->page_size;
    if (o->layout && !bshd && !thd && strcmp(o->layout, "bhsd"))
        return ac_fail(err, AC_ERR_INPUT, "--layout: '%s' is not bhsd, bshd or thd", o->layout);
    int st = pick_dtype(f, o->dtype, &d.dtype, err);
    d.page_size = 0;
    if (st == AC_OK && paged) /* a paged cache: k, v in pages and the block table (check_paged.c) */
        st = ac_check_paged_shapes(o, f, &d, in, err);
    else if (st == AC_OK) /* THD: packed (total, H, d) tensors and cu_seqlens (check_thd.c) */
        st = thd ? ac_check_thd_shapes(o, f, &d, in, err) : check_shapes(f, bshd, &d, err);
    if (st == AC_OK)
        st = build_problem(o, f, &d, in, err);
    if (st == AC_OK && (f->have[T_DQ] || f->have[T_DK] || f->have[T_DV]) && !f->have[T_DO])
        st = ac_fail(err, AC_ERR_INPUT, "%s: dq/dk/dv given without do (the gradient they answer)", o->path);
    if (st == AC_OK)
        st = ac_check_variant_files(f, in, err); /* check_variants.c */
    void **raw[] = {&in->q, &in->k, &in->v, &in->d_o};
    double **wide[] = {&in->qd, &in->kd, &in->vd, &in->d_od};
    const int which[] = {T_Q, T_K, T_V, T_DO};
    const ac_tensor_kind kinds[] = {AC_TENSOR_Q, AC_TENSOR_K, AC_TENSOR_V, AC_TENSOR_O};
    for (int i = 0; st == AC_OK && i < 4; i++)
        if (f->have[which[i]]) {
            st = widen(in, &f->t[which[i]], kinds[i], wide[i], err);
            *raw[i] = f->t[which[i]].data, f->t[which[i]].data = NULL; /* moved into in */
        }
    return st == AC_OK && o->v_from_k ? check_v_from_k(o, in, err) : st;
}
