/* harness/cli/check_paged.c — `attncheck check` and `attncheck reference` on a
 * paged KV cache (vLLM's and FlashAttention's flash_attn_with_kvcache layout):
 * --page-size P and --block-table FILE, the (B, max_pages) page ids as a 1-row-
 * per-sequence i32 or i64 array; k and v are the pages (num_pages, P, Hkv, d)
 * (v: d_v), whatever --layout says (it is q's, o's and do's); --seqlens-k the
 * keys of each sequence.  The grid's nk is max_pages * P.  Forward only: dq,
 * dk, dv are refused.  The table's entries are checked where a sequence uses
 * them (ac_problem_validate: a page id out of range, a table too short). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "harness/cli/check_internal.h"

static int read_table(const char *path, int batch, int **table, int *per_seq, ac_err *err)
{
    ac_tensor t = {0};
    int st = ac_check_read_small(path, "--block-table", &t, err);
    if (st != AC_OK)
        return st;
    if (t.ndim != 2 || (t.dtype != AC_TF_I32 && t.dtype != AC_TF_I64))
        st = ac_fail(err, AC_ERR_INPUT, "%s: --block-table must be a 2-D i32 or i64 array (B, max_pages)", path);
    else if (t.shape[0] != batch || t.shape[1] < 1 || t.shape[1] > INT_MAX / 2)
        st = ac_fail(err, AC_ERR_INPUT,
                     "%s: --block-table has shape (%lld, %lld), expected (%d, max_pages >= 1): "
                     "one row per sequence of q",
                     path, (long long)t.shape[0], (long long)t.shape[1], batch);
    if (st == AC_OK && !(*table = malloc(t.n_elems * sizeof(int) + 1)))
        st = ac_fail(err, AC_ERR_ENV, "--block-table: out of memory");
    for (size_t i = 0; st == AC_OK && i < t.n_elems; i++) {
        int64_t v = t.dtype == AC_TF_I32 ? ((int32_t *)t.data)[i] : ((int64_t *)t.data)[i];
        (*table)[i] = v < INT_MIN ? INT_MIN : v > INT_MAX ? INT_MAX : (int)v; /* range: ac_problem_validate */
    }
    if (st == AC_OK)
        *per_seq = (int)t.shape[1];
    ac_tensor_free(&t);
    return st;
}

/* q, o, do in --layout's (B, H, S, d) or (B, S, H, d); k, v the pages; lse (B, Hq, Nq). */
static int paged_shapes(const ac_cli *o, const tensor_files *f, dims *d, ac_err *err)
{
    const ac_tensor *q = &f->t[T_Q], *k = &f->t[T_K], *v = &f->t[T_V];
    bool bshd = o->layout && !strcmp(o->layout, "bshd");
    for (int i = 0; i < 3; i++)
        if (f->t[i].ndim != 4)
            return ac_fail(err, AC_ERR_INPUT, "%s: tensor %s has %d dimensions, expected 4 (%s)", f->t[i].file,
                           ac_check_tnames[i], f->t[i].ndim, i == T_Q ? "the layout's" : "num_pages, P, Hkv, d");
    for (int i = 0; i < 4; i++)
        if (q->shape[i] < 1 || q->shape[i] > INT_MAX || k->shape[i] < 1 || k->shape[i] > INT_MAX)
            return ac_fail(err, AC_ERR_INPUT, "%s: q and k need every dimension in 1..%d", q->file, INT_MAX);
    if (k->shape[1] != o->page_size)
        return ac_fail(err, AC_ERR_INPUT, "%s: k holds pages of %lld keys, --page-size says %d", k->file,
                       (long long)k->shape[1], o->page_size);
    int hs = bshd ? 2 : 1, ss = bshd ? 1 : 2;
    d->b = (int)q->shape[0], d->hq = (int)q->shape[hs], d->nq = (int)q->shape[ss], d->d = (int)q->shape[3];
    d->num_pages = (int)k->shape[0], d->page_size = o->page_size, d->hkv = (int)k->shape[2];
    d->d_v = (int)v->shape[3];
    int64_t ks[4] = {d->num_pages, d->page_size, d->hkv, d->d}, vs[4] = {d->num_pages, d->page_size, d->hkv, d->d_v};
    int64_t os[4] = {d->b, 0, 0, d->d_v}, ls[3] = {d->b, d->hq, d->nq};
    os[hs] = d->hq, os[ss] = d->nq;
    int st = ac_check_want_shape(k, 4, ks, "(num_pages, P, Hkv, d) with q's head dim", err);
    if (st == AC_OK && (d->d_v < 1 || d->d_v > 512))
        st = ac_fail(err, AC_ERR_INPUT, "%s: v's head dim must be in 1..512, got %d", v->file, d->d_v);
    if (st == AC_OK)
        st = ac_check_want_shape(v, 4, vs, "k's pages with v's head dim", err);
    if (st == AC_OK && f->have[T_O])
        st = ac_check_want_shape(&f->t[T_O], 4, os, "q's with v's head dim", err);
    if (st == AC_OK && f->have[T_LSE])
        st = ac_check_want_shape(&f->t[T_LSE], 3, ls, "(B, Hq, Nq)", err);
    for (int i = T_DO; st == AC_OK && i < T_N; i++)
        if (f->have[i])
            st = ac_fail(err, AC_ERR_INPUT, "%s: tensor %s: a paged KV cache is checked forward only (o, lse)",
                         f->t[i].file, ac_check_tnames[i]);
    if (st == AC_OK && d->hq % d->hkv != 0)
        st = ac_fail(err, AC_ERR_INPUT, "%s: q has %d heads, k has %d: GQA needs a multiple", q->file, d->hq, d->hkv);
    return st;
}

int ac_check_paged_shapes(const ac_cli *o, const tensor_files *f, dims *d, ac_inputs *in, ac_err *err)
{
    if (!o->block_table || o->page_size < 1)
        return ac_fail(err, AC_ERR_INPUT,
                       "--block-table and --page-size: a paged KV cache needs both (page size >= 1)");
    if (o->layout && !strcmp(o->layout, "thd"))
        return ac_fail(err, AC_ERR_INPUT, "--block-table: a paged KV cache takes --layout bhsd or bshd, not thd");
    if (!o->seqlens_k)
        return ac_fail(err, AC_ERR_INPUT, "--seqlens-k: a paged KV cache needs each sequence's key count");
    int st = paged_shapes(o, f, d, err);
    if (st == AC_OK)
        st = read_table(o->block_table, d->b, &in->block_table, &d->pages_per_seq, err);
    if (st == AC_OK && (long long)d->pages_per_seq * d->page_size > INT_MAX)
        st = ac_fail(err, AC_ERR_INPUT, "--block-table: %d pages of %d keys exceed %d keys", d->pages_per_seq,
                     d->page_size, INT_MAX);
    d->nk = st == AC_OK ? d->pages_per_seq * d->page_size : 0;
    return st;
}

void ac_check_paged_problem(const dims *d, ac_inputs *in)
{
    if (d->page_size <= 0)
        return;
    in->p.page_size = in->c.kv_page_size = d->page_size;
    in->p.num_pages = d->num_pages;
    in->p.pages_per_seq = d->pages_per_seq;
    in->p.block_table = in->block_table;
}
