/* kernels/cpu_flash_decode.c — cpu-flash's split-KV decode path, for a paged
 * KV cache (ref.h's page_size, block_table) or a split hint (num_splits >= 2):
 * FlashAttention-2's split-KV forward (flash_fwd_splitkv_kernel and its
 * combine kernel) as it runs on a GPU, on the CPU.
 *
 * Per (batch b, kv head): K and V of the sequence's keys gathered through the
 * block table (row j % P of page block_table[b][j / P]), widened to f32.
 * Per query head of the GQA group and query row: the key tiles of Bc keys are
 * dealt to S splits, ceil(tiles / S) consecutive tiles each (trailing splits
 * may be empty: more splits than tiles); each split runs the online softmax
 * of cpu_flash.c over its tiles (S' with the variants' score modifiers in f32,
 * masks, P rounded to the dtype before PV, PV accumulated in f32) and leaves
 * its partial state (acc_s, m_s, l_s): O_s = acc_s / l_s, LSE_s = m_s + log l_s.
 * The combine rescales every partial to the common max m = max_s m_s:
 * l = sum_s l_s exp(m_s - m), O = sum_s acc_s exp(m_s - m) / l, LSE = m + log l
 * (the same numbers as FlashAttention's combine in the (O_s, LSE_s) form, with
 * the f32 rounding of LSE_s left out).  An empty split has m_s = -inf, l_s = 0
 * and weighs exp(-inf) = 0; a row with every split empty gets O = 0 and
 * LSE = -inf without computing -inf - -inf.  The sinks join after the combine
 * (cf_sink_join), as in cpu_flash_var.c.  S: num_splits, or with 0 (auto)
 * min(4, tiles of the longest sequence).
 *
 * The planted bugs of this path (cpu_flash_mutants.c) sit here behind
 * `cp->mut == CF_MUT_X`. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_flash_internal.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3") /* see cpu_flash.c */
#endif

typedef struct {
    float *k_rows, *v_rows; /* (key_alloc x d), (key_alloc x d_v) of one (b, kv head) */
    float *q_row, *s; /* (d), (Bc) */
    float *acc, *m, *l; /* per split: (S x d_v), (S), (S) */
    int *lo, *hi; /* (seqlen_q); lo is followed by the sink tokens' gap */
    int key_alloc, splits;
} dec_work;

static void dec_free(dec_work *w)
{
    void *all[] = {w->k_rows, w->v_rows, w->q_row, w->s, w->acc, w->m, w->l, w->lo, w->hi};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

/* The split count: the problem's, or auto: min(4, key tiles of the longest sequence), at least 1. */
static int split_count(const cpu_flash_params *cp, const ac_problem *p)
{
    if (p->num_splits >= 1)
        return p->num_splits;
    int longest = 0;
    for (int b = 0; b < p->batch; b++)
        longest = ac_seqlen_k_of(p, b) > longest ? ac_seqlen_k_of(p, b) : longest;
    int tiles = (longest + cp->block_k - 1) / cp->block_k;
    return tiles < 1 ? 1 : tiles > 4 ? 4 : tiles;
}

static bool dec_alloc(const cpu_flash_params *cp, const ac_problem *p, dec_work *w)
{
    size_t d = (size_t)p->head_dim, d_v = (size_t)ac_head_dim_v(p), f = sizeof(float);
    memset(w, 0, sizeof *w);
    w->splits = split_count(cp, p);
    /* whole pages: the last-page mutant reads past nk into its page's unused slots */
    int extent = p->page_size > 0 ? p->pages_per_seq * p->page_size : p->seqlen_k;
    w->key_alloc = (extent > p->seqlen_k ? extent : p->seqlen_k) + 1;
    w->k_rows = malloc((size_t)w->key_alloc * d * f);
    w->v_rows = malloc((size_t)w->key_alloc * d_v * f);
    w->q_row = malloc(d * f);
    w->s = malloc((size_t)cp->block_k * f);
    w->acc = malloc((size_t)w->splits * d_v * f);
    w->m = malloc((size_t)w->splits * f);
    w->l = malloc((size_t)w->splits * f);
    w->lo = malloc(3 * (size_t)p->seqlen_q * sizeof(int));
    w->hi = malloc((size_t)p->seqlen_q * sizeof(int));
    return w->k_rows && w->v_rows && w->q_row && w->s && w->acc && w->m && w->l && w->lo && w->hi;
}

/* The element offset of key j's row (column 0) of kv head hk of sequence b:
 * through the block table when paged.  The planted bug reads the table as if
 * pages held 2P keys: entry j / 2P, slot j % P. */
static size_t key_row(const cpu_flash_params *cp, const ac_problem *p, ac_tensor_kind kind, int b, int hk, int j)
{
    if (p->page_size > 0 && cp->mut == CF_MUT_PAGE_SIZE_WRONG) {
        int page = p->block_table[(size_t)b * p->pages_per_seq + j / (2 * p->page_size)];
        size_t row = (size_t)page * p->page_size + (size_t)(j % p->page_size);
        return (row * p->heads_kv + hk) * (size_t)ac_tensor_dim(p, kind);
    }
    return ac_tensor_index(p, kind, b, hk, j, 0);
}

static void load_keys(const cpu_flash_params *cp, const ac_problem *p, ac_dtype t, const void *buf, ac_tensor_kind kind,
                      int b, int hk, int n_keys, float *out)
{
    int cols = ac_tensor_dim(p, kind);
    for (int j = 0; j < n_keys; j++) {
        size_t at = key_row(cp, p, kind, b, hk, j);
        for (int c = 0; c < cols; c++)
            out[(size_t)j * cols + c] = (float)ac_widen(t, ac_bits_get(t, buf, at + (size_t)c));
    }
}

/* Keys the kernel loads for sequence b: nk_b; the planted bug loads whole pages
 * (the last page's unused slots too) and leaves the slots past nk_b unmasked. */
static int key_end(const cpu_flash_params *cp, const ac_problem *p, int b)
{
    int nk = ac_seqlen_k_of(p, b);
    if (cp->mut != CF_MUT_LAST_PAGE_SLOTS || p->page_size <= 0)
        return nk;
    int whole = (nk + p->page_size - 1) / p->page_size * p->page_size;
    return p->bias && whole > p->seqlen_k ? p->seqlen_k : whole; /* no bias entries past the extent */
}

/* One tile [j0, j0 + cols) of split s for query row i of head h. */
static void split_tile(const cpu_flash_params *cp, const ac_problem *p, ac_dtype t, int b, int h, int i, int j0,
                       int cols, dec_work *w, int s)
{
    int d = p->head_dim, d_v = ac_head_dim_v(p);
    for (int c = 0; c < cols; c++) { /* Q K^T in f32, summed over the head dim in order */
        const float *k = w->k_rows + (size_t)(j0 + c) * d;
        float dot = 0.0f;
        for (int x = 0; x < d; x++)
            dot += w->q_row[x] * k[x];
        w->s[c] = dot;
    }
    cf_score_mods(cp, p, b, h, i, 1, j0, cols, w->s, NULL);
    cf_mask_tile(p, b, h, i, 1, j0, cols, w->lo, w->hi, w->s);
    cf_mask_sink_gap(p, i, 1, j0, cols, w->lo, w->s);
    float *acc = w->acc + (size_t)s * d_v;
    float alpha = cf_online_softmax_step(cp, &w->m[s], &w->l[s], w->s, cols);
    for (int c = 0; c < cols; c++) /* the PV product's operand is in the input dtype */
        w->s[c] = cf_round_to(t, w->s[c]);
    if (alpha != 1.0f)
        for (int c = 0; c < d_v; c++)
            acc[c] *= alpha;
    cf_combine_rows(acc, w->s, 1, w->v_rows + (size_t)j0 * d_v, d_v, cols, d_v);
}

/* Split s's keys [*k0, *k1) of a sequence whose kernel loads n_keys: ceil(tiles / S)
 * tiles each.  The planted bug lets every split but the last run one key past its
 * boundary: the first key of the next split counted twice. */
static void split_keys(const cpu_flash_params *cp, int n_keys, int splits, int s, int *k0, int *k1)
{
    int bc = cp->block_k, tiles = (n_keys + bc - 1) / bc, per = (tiles + splits - 1) / splits;
    long long lo = (long long)s * per * bc, hi = (long long)(s + 1) * per * bc;
    if (cp->mut == CF_MUT_SPLIT_OFF_BY_ONE && s < splits - 1)
        hi += 1;
    *k0 = (int)(lo < n_keys ? lo : n_keys);
    *k1 = (int)(hi < n_keys ? hi : n_keys);
}

/* The split's partial state for the combine.  The planted bug normalises an
 * empty split's partial as a non-empty one's: O_s = 0 / 0 and its LSE
 * -inf - -inf, NaN both, which the combine's weight 0 does not cancel. */
static void split_epilogue(const cpu_flash_params *cp, const ac_problem *p, dec_work *w, int s)
{
    if (cp->mut != CF_MUT_EMPTY_SPLIT_NAN || w->l[s] != 0.0f)
        return;
    int d_v = ac_head_dim_v(p);
    for (int c = 0; c < d_v; c++)
        w->acc[(size_t)s * d_v + c] = 0.0f / w->l[s];
    w->m[s] = w->m[s] - w->m[s];
}

/* The combine: every split's (acc_s, l_s) rescaled to the common max into split 0's slots. */
static void combine(const cpu_flash_params *cp, const ac_problem *p, dec_work *w)
{
    int d_v = ac_head_dim_v(p);
    float m = -INFINITY;
    for (int s = 0; s < w->splits; s++)
        m = fmaxf(m, w->m[s]);
    if (m == -INFINITY) /* every split empty: nothing to rescale (exp(-inf - -inf) would be NaN) */
        return;
    float l = 0.0f, *acc = w->acc;
    for (int s = 0; s < w->splits; s++) {
        /* the planted bug sums the partials as they are, each relative to its own max */
        float f = cp->mut == CF_MUT_COMBINE_NO_RESCALE ? 1.0f : expf(w->m[s] - m);
        l += w->l[s] * f;
        for (int c = 0; c < d_v; c++)
            acc[c] = s == 0 ? acc[c] * f : acc[c] + w->acc[(size_t)s * d_v + c] * f;
    }
    w->m[0] = m;
    w->l[0] = l;
}

static void write_row(const cpu_flash_params *cp, const ac_problem *p, ac_dtype t, int b, int h, int i, dec_work *w,
                      const ac_fwd_args *a)
{
    int d_v = ac_head_dim_v(p);
    float m = w->m[0], l = w->l[0], o_factor;
    cf_sink_join(p, h, &m, &l, &o_factor);
    size_t at = ac_o_index(p, b, h, i, 0);
    bool twice = cp->mut == CF_PREC_O_ROUNDED_TWICE && t == AC_F16; /* the f16 numerator stored first */
    for (int c = 0; c < d_v; c++) {
        float num = w->acc[c] * o_factor;
        cf_store_elem(t, a->o, at + c,
                      l == 0.0f || o_factor == 0.0f ? 0.0f : (twice ? cf_round_if_finite(t, num) : num) / l);
    }
    a->lse[ac_lse_index(p, b, h, i)] = l == 0.0f ? -INFINITY : m + logf(l);
}

static void decode_row(const cpu_flash_params *cp, const ac_problem *p, ac_dtype t, int b, int h, int i, int n_keys,
                       dec_work *w, const ac_fwd_args *a)
{
    int d_v = ac_head_dim_v(p), bc = cp->block_k;
    size_t q_at = ac_q_index(p, b, h, i, 0);
    for (int x = 0; x < p->head_dim; x++)
        w->q_row[x] = (float)ac_widen(t, ac_bits_get(t, a->q, q_at + (size_t)x));
    memset(w->acc, 0, (size_t)w->splits * d_v * sizeof(float));
    for (int s = 0; s < w->splits; s++) {
        w->m[s] = -INFINITY;
        w->l[s] = 0.0f;
        int k0, k1;
        split_keys(cp, n_keys, w->splits, s, &k0, &k1);
        /* the keys this row sees, as the GPU's per-split tile range */
        int lo = w->lo[i] > k0 ? w->lo[i] : k0, hi = w->hi[i] < k1 ? w->hi[i] : k1;
        for (int j0 = lo - (lo - k0) % bc; j0 < hi; j0 += bc)
            split_tile(cp, p, t, b, h, i, j0, hi - j0 < bc ? hi - j0 : bc, w, s);
        split_epilogue(cp, p, w, s);
    }
    combine(cp, p, w);
    write_row(cp, p, t, b, h, i, w, a);
}

static void decode_sequence(const cpu_flash_params *cp, const ac_problem *p, ac_dtype t, int b, dec_work *w,
                            const ac_fwd_args *a)
{
    int nq = ac_seqlen_q_of(p, b), n_keys = key_end(cp, p, b), nk = ac_seqlen_k_of(p, b);
    cf_row_ranges(cp, p, b, w->lo, w->hi);
    for (int i = 0; i < nq && n_keys > nk; i++) /* the last-page mutant: the unused slots are not masked */
        if (w->hi[i] == nk)
            w->hi[i] = n_keys;
    cf_sink_token_ranges(cp, p, b, w->lo, w->hi);
    for (int hk = 0; hk < p->heads_kv; hk++) {
        load_keys(cp, p, t, a->k, AC_TENSOR_K, b, hk, n_keys, w->k_rows);
        load_keys(cp, p, t, a->v, AC_TENSOR_V, b, hk, n_keys, w->v_rows);
        /* GQA packing: the group's query heads against the K/V loaded once */
        for (int h = 0; h < p->heads_q; h++) {
            if (cf_kv_head_of(cp, p, h) != hk)
                continue;
            for (int i = 0; i < nq; i++)
                decode_row(cp, p, t, b, h, i, n_keys, w, a);
        }
    }
}

int cf_forward_decode(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_fwd_args *a, ac_err *err)
{
    const cpu_flash_params *cp = self->ctx;
    dec_work w;
    if (!dec_alloc(cp, p, &w)) {
        dec_free(&w);
        return ac_fail(err, AC_ERR_ENV, "%s: out of memory", self->name);
    }
    /* the planted bug: a grid one sequence short, the last sequence's rows never written */
    int batches = cp->mut == CF_MUT_LATER_SEQ_UNWRITTEN && p->batch > 1 ? p->batch - 1 : p->batch;
    for (int b = 0; b < batches; b++)
        decode_sequence(cp, p, t, b, &w, a);
    dec_free(&w);
    return AC_OK;
}
