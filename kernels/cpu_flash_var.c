/* kernels/cpu_flash_var.c — cpu-flash's forward on problems with variants
 * (ref/variants.h): FlashAttention-2's tiles and online softmax (the same
 * mask, softmax step, products and roundings as cpu_flash.c, whose plain
 * path stays as it is), with the variants where FlashAttention puts them:
 *   softcap c: the scores' scale folded into the tanh's argument, as
 *     FlashAttention does (softcap' = scale / c, T = c tanh(QK^T softcap'),
 *     all f32), before the mask;
 *   ALiBi: slope x distance subtracted in f32 after the softcap (alibi);
 *   bias: added last in f32 (add_bias); a -inf entry is a masked pair;
 *   dropout: kept P times 1 / (1 - p) for PV, dropped 0, l unchanged; the
 *     keep bits written to dropout_mask (cf_dropout_keep: a counter-based hash);
 *   sink tokens: the first k keys visible past the window's left edge
 *     (cf_sink_token_ranges, cf_mask_sink_gap);
 *   sinks: the online softmax runs over the keys, and the sink joins each
 *     finished row (cf_sink_join), in the denominator and LSE, with no value in O;
 *   d_v: V's rows, the accumulator and O have d_v columns (cf_load_kind);
 *   the THD layout: rows addressed through cu_seqlens (cf_load_kind,
 *     ac_tensor_index for the stores).
 * The planted bugs of the variants (cpu_flash_mutants.c) sit here behind
 * `cp->mut == CF_MUT_X`; the mask, softmax and GQA mutants of the plain path
 * act here too, through the helpers both share. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_flash_internal.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3") /* see cpu_flash.c */
#endif

#define LOG2_E 1.4426950408889634f

/* ---- the scores: S' of a tile from Q K^T --------------------------------------- */

/* ALiBi after the softcap: S' -= slope |i + nk - nq - j| in f32, the
 * distance bottom-right aligned (0 on the last query's diagonal).  The
 * planted bug measures it top-left, |i - j|: right only when nq == nk. */
static void alibi(const cpu_flash_params *cp, const ac_problem *p, int b, int h, int i0, int rows, int j0, int cols,
                  float *s)
{
    float a = p->alibi_slopes[(size_t)(p->alibi_batch > 1 ? b : 0) * p->heads_q + h];
    int shift = cp->mut == CF_MUT_ALIBI_TOP_LEFT ? 0 : ac_seqlen_k_of(p, b) - ac_seqlen_q_of(p, b);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            int dist = i0 + r + shift - (j0 + c);
            s[(size_t)r * cols + c] -= a * (float)(dist < 0 ? -dist : dist);
        }
}

void cf_bias_rows(const cpu_flash_params *cp, const ac_problem *p, int b, int h, int *mb, int *mh)
{
    int nb = p->bias_batch > 1 ? p->bias_batch : 1, nh = p->bias_heads > 1 ? p->bias_heads : 1;
    *mb = nb > 1 ? b : 0;
    *mh = nh > 1 ? h : 0;
    if (cp->mut == CF_MUT_BIAS_WRONG_AXIS) /* the planted bug: each index on the other axis */
        *mb = h % nb, *mh = b % nh;
}

/* The bias last, widened to f32 from its dtype (exact: f32, f16 and bf16 all fit). */
static void add_bias(const cpu_flash_params *cp, const ac_problem *p, int b, int h, int i0, int rows, int j0, int cols,
                     float *s)
{
    int mb, mh;
    cf_bias_rows(cp, p, b, h, &mb, &mh);
    for (int r = 0; r < rows; r++) {
        size_t at = ac_bias_index(p, mb, mh, i0 + r, j0);
        for (int c = 0; c < cols; c++)
            s[(size_t)r * cols + c] += (float)ac_widen(p->bias_dtype, ac_bits_get(p->bias_dtype, p->bias, at + c));
    }
}

void cf_score_mods(const cpu_flash_params *cp, const ac_problem *p, int b, int h, int i0, int rows, int j0, int cols,
                   float *s, float *slope)
{
    cf_score_softcap(cp, p, rows * cols, s, slope);
    if (p->alibi_slopes)
        alibi(cp, p, b, h, i0, rows, j0, cols, s);
    if (p->bias)
        add_bias(cp, p, b, h, i0, rows, j0, cols, s);
}

void cf_score_softcap(const cpu_flash_params *cp, const ac_problem *p, int n, float *s, float *slope)
{
    float scale = (float)p->scale;
    if (p->softcap == 0.0) {
        for (int x = 0; x < n; x++)
            s[x] *= scale;
        for (int x = 0; slope && x < n; x++)
            slope[x] = 1.0f;
        return;
    }
    float cap = (float)p->softcap, pre = scale / cap;
    for (int x = 0; x < n; x++) {
        /* the planted bug: tanh of the unscaled scores, the scale after it */
        float y = cp->mut == CF_MUT_SOFTCAP_BEFORE_SCALE ? tanhf(s[x] / cap) : tanhf(s[x] * pre);
        s[x] = cp->mut == CF_MUT_SOFTCAP_BEFORE_SCALE ? cap * y * scale : cap * y;
        if (slope) /* dT/dS, the backward's factor; the bug's chain rule would carry scale, kept as written */
            slope[x] = 1.0f - y * y;
    }
}

/* ---- dropout ------------------------------------------------------------------------ */

/* A counter-based draw (as Philox is in FlashAttention): the pair's 64-bit hash
 * of (seed, b, h, i, j), kept when its top 32 bits, as a fraction, reach p. */
bool cf_dropout_keep(const ac_problem *p, int b, int h, int i, int j)
{
    uint64_t z = p->dropout_seed ^ (ac_dropout_index(p, b, h, i, j) * 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 32) * 0x1p-32 >= p->dropout_p;
}

float cf_dropout_scale(const cpu_flash_params *cp, const ac_problem *p)
{
    return cp->mut == CF_MUT_DROPOUT_NO_RESCALE ? 1.0f : (float)(1.0 / (1.0 - p->dropout_p));
}

/* The forward's tile: kept P times 1 / (1 - p) for the PV product, dropped 0
 * (l keeps every P: LSE is the softmax's); the keep bits written. */
static void vf_dropout(const cpu_flash_params *cp, const ac_problem *p, int b, int h, int i, int j0, int cols,
                       float *pr, uint8_t *bits)
{
    float f = cf_dropout_scale(cp, p);
    for (int c = 0; c < cols; c++) {
        bool keep = cf_dropout_keep(p, b, h, i, j0 + c);
        size_t x = ac_dropout_index(p, b, h, i, j0 + c);
        bits[x / 8] = (uint8_t)(keep ? bits[x / 8] | (1u << (x % 8)) : bits[x / 8] & ~(1u << (x % 8)));
        pr[c] = keep ? pr[c] * f : 0.0f;
    }
}

/* ---- sink tokens -------------------------------------------------------------------- */

/* The first k keys stay visible past the window's left edge: each row's lo
 * widens to 0 (the hull [0, hi), still nondecreasing, so whole-block skips
 * hold) and the keys between them and the window, [min(k, hi), min(lo, hi)),
 * are kept at lo + Nq and lo + 2 Nq for cf_mask_sink_gap.  The planted bug
 * keeps k + 1 keys. */
void cf_sink_token_ranges(const cpu_flash_params *cp, const ac_problem *p, int b, int *lo, const int *hi)
{
    int nq = ac_seqlen_q_of(p, b), cap = p->seqlen_q;
    int k = p->sink_tokens + (cp->mut == CF_MUT_SINK_TOKENS_OFF_BY_ONE ? 1 : 0);
    for (int i = 0; i < nq; i++) {
        int *gap_lo = lo + cap + i, *gap_hi = lo + 2 * cap + i;
        *gap_lo = *gap_hi = 0;
        if (p->sink_tokens <= 0)
            continue;
        *gap_lo = k < hi[i] ? k : hi[i];
        *gap_hi = lo[i] < hi[i] ? lo[i] : hi[i];
        lo[i] = 0;
    }
}

void cf_mask_sink_gap(const ac_problem *p, int i0, int rows, int j0, int cols, const int *lo, float *s)
{
    if (p->sink_tokens <= 0)
        return;
    int cap = p->seqlen_q;
    for (int r = 0; r < rows; r++) {
        int g0 = lo[cap + i0 + r], g1 = lo[2 * cap + i0 + r];
        for (int j = g0 > j0 ? g0 : j0; j < g1 && j < j0 + cols; j++)
            s[(size_t)r * cols + (j - j0)] = -INFINITY;
    }
}

/* ---- loading rows of any tensor kind ---------------------------------------------- */

/* The planted bug of d_v: V's rows addressed with d_qk (K's row stride),
 * d_v values read from each; offsets wrap inside V so the bug reads wrong
 * values, never outside the buffer. */
static void load_v_with_dqk_stride(const ac_problem *p, ac_dtype t, const void *buf, int b, int h, int first,
                                   int n_rows, float *out)
{
    size_t total = ac_v_elems(p);
    int d_v = ac_head_dim_v(p);
    for (int r = 0; r < n_rows; r++)
        for (int c = 0; c < d_v; c++) {
            size_t at = (ac_kv_index(p, b, h, first + r, 0) + (size_t)c) % total;
            out[(size_t)r * d_v + c] = (float)ac_widen(t, ac_bits_get(t, buf, at));
        }
}

/* THD: row s of sequence b is packed row cu[b] + s (ac_tensor_index).  The
 * planted bug reads K and V one sequence late, from cu_seqlens_k[b + 1],
 * wrapping inside the tensor (it reads the wrong sequence's keys, never
 * outside the buffer). */
static void load_thd_rows(const cpu_flash_params *cp, const ac_problem *p, ac_dtype t, const void *buf,
                          ac_tensor_kind kind, int b, int h, int first, int n_rows, float *out)
{
    size_t cols = (size_t)ac_tensor_dim(p, kind), total = ac_tensor_elems(p, kind), late = 0;
    bool k_side = kind == AC_TENSOR_K || kind == AC_TENSOR_V;
    if (k_side && cp->mut == CF_MUT_CU_SEQLENS_LATE && b + 1 <= p->batch)
        late = (size_t)(p->cu_seqlens_k[b + 1] - p->cu_seqlens_k[b]) * (size_t)p->heads_kv * cols;
    for (int r = 0; r < n_rows; r++) {
        size_t base = ac_tensor_index(p, kind, b, h, first + r, 0) + late;
        for (size_t c = 0; c < cols; c++)
            out[(size_t)r * cols + c] = (float)ac_widen(t, ac_bits_get(t, buf, (base + c) % total));
    }
}

void cf_load_kind(const cpu_flash_params *cp, const ac_problem *p, ac_dtype t, const void *buf, ac_tensor_kind kind,
                  int b, int h, int first, int n_rows, float *out)
{
    if (p->layout == AC_LAYOUT_THD) {
        load_thd_rows(cp, p, t, buf, kind, b, h, first, n_rows, out);
        return;
    }
    bool q_side = kind == AC_TENSOR_Q || kind == AC_TENSOR_O;
    int heads = q_side ? p->heads_q : p->heads_kv, seqlen = q_side ? p->seqlen_q : p->seqlen_k;
    int cols = ac_tensor_dim(p, kind);
    if (kind == AC_TENSOR_V && cp->mut == CF_MUT_DV_WITH_DQK_STRIDE && cols != p->head_dim) {
        load_v_with_dqk_stride(p, t, buf, b, h, first, n_rows, out);
        return;
    }
    ac_problem shaped = *p; /* cf_load_rows reads rows of head_dim columns: this tensor's */
    shaped.head_dim = cols;
    cf_load_rows(&shaped, t, buf, heads, seqlen, b, h, first, n_rows, out);
}

/* ---- the forward ------------------------------------------------------------------ */

typedef struct {
    float *k_rows, *v_rows; /* (keys_alloc x d), (keys_alloc x d_v) of one kv head, zero past seqlen_k */
    float *q_tile, *k_t, *s, *acc, *m, *l; /* acc: (Br x d_v) */
    int *lo, *hi; /* (seqlen_q); lo is followed by the sink tokens' gap (cf_sink_token_ranges) */
    int keys_alloc;
} vf_work;

static void vf_free(vf_work *w)
{
    void *all[] = {w->k_rows, w->v_rows, w->q_tile, w->k_t, w->s, w->acc, w->m, w->l, w->lo, w->hi};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

static bool vf_alloc(const cpu_flash_params *cp, const ac_problem *p, vf_work *w)
{
    size_t d = (size_t)p->head_dim, d_v = (size_t)ac_head_dim_v(p), br = (size_t)cp->block_q;
    size_t bc = (size_t)cp->block_k, f = sizeof(float);
    memset(w, 0, sizeof *w);
    w->keys_alloc = (p->seqlen_k + cp->block_k - 1) / cp->block_k * cp->block_k;
    w->k_rows = calloc((size_t)w->keys_alloc * d, f);
    w->v_rows = calloc((size_t)w->keys_alloc * d_v, f);
    w->q_tile = malloc(br * d * f);
    w->k_t = malloc(d * bc * f);
    w->s = malloc(br * bc * f);
    w->acc = malloc(br * d_v * f);
    w->m = malloc(br * f);
    w->l = malloc(br * f);
    w->lo = malloc(3 * (size_t)p->seqlen_q * sizeof(int));
    w->hi = malloc((size_t)p->seqlen_q * sizeof(int));
    return w->k_rows && w->v_rows && w->q_tile && w->k_t && w->s && w->acc && w->m && w->l && w->lo && w->hi;
}

/* One K/V tile [j0, j0 + cols) against the resident Q tile of rows [i0, i0 + rows). */
static void vf_kv_tile(const cpu_flash_params *cp, const ac_problem *p, ac_dtype t, int b, int h, int i0, int rows,
                       int j0, int cols, vf_work *w, uint8_t *dropout_bits)
{
    int d = p->head_dim, d_v = ac_head_dim_v(p);
    cf_transpose_tile(w->k_rows, j0, cols, d, w->k_t);
    cf_gemm_nt(w->q_tile, w->k_t, rows, cols, d, w->s);
    cf_score_mods(cp, p, b, h, i0, rows, j0, cols, w->s, NULL);
    cf_mask_tile(p, b, h, i0, rows, j0, cols, w->lo, w->hi, w->s);
    cf_mask_sink_gap(p, i0, rows, j0, cols, w->lo, w->s);
    for (int r = 0; r < rows; r++) {
        float *pr = w->s + (size_t)r * cols, *acc = w->acc + (size_t)r * d_v;
        float alpha = cf_online_softmax_step(cp, &w->m[r], &w->l[r], pr, cols);
        if (p->dropout_p > 0.0)
            vf_dropout(cp, p, b, h, i0 + r, j0, cols, pr, dropout_bits);
        for (int c = 0; c < cols; c++) /* the PV product's operand is in the input dtype */
            pr[c] = cf_round_to(t, pr[c]);
        if (alpha != 1.0f)
            for (int c = 0; c < d_v; c++)
                acc[c] *= alpha;
        cf_combine_rows(acc, pr, 1, w->v_rows + (size_t)j0 * d_v, d_v, cols, d_v);
    }
}

/* exp(a - b) with the difference's rounding error (an exact two-sum) carried to
 * first order: the one factor that rescales a whole row must not err by
 * u_f32 |a - b| (a sink 20 above the scores made that f32 O 2.8x the naive
 * baseline's mean error, every element of a row off alike). */
static float exp_diff(float a, float b)
{
    if (!isfinite(a) || !isfinite(b))
        return expf(a - b);
    float x = a - b, bb = x - a, err = (a - (x - bb)) + (-b - bb), e = expf(x);
    return fmaf(e, err, e);
}

/* The sink joins a finished row (as FlashAttention-3's learnable sinks do, in
 * the epilogue): m' = max(m, s_h), l' = l exp(m - m') + exp(s_h - m'), and O
 * is acc exp(m - m') / l'.  *o_factor gets exp(m - m') (1 without a sink). */
void cf_sink_join(const ac_problem *p, int h, float *m, float *l, float *o_factor)
{
    *o_factor = 1.0f;
    if (!p->sinks)
        return;
    float sink = p->sinks[h], m_new = fmaxf(*m, sink);
    *o_factor = exp_diff(*m, m_new); /* 0 for a row with nothing visible (m = -inf) */
    *l = *l * *o_factor + exp_diff(sink, m_new);
    *m = m_new;
}

/* O = acc / l (0 for a row with nothing in its denominator), LSE = m + log l. */
static void vf_write_rows(const cpu_flash_params *cp, const ac_problem *p, ac_dtype t, int b, int h, int i0, int rows,
                          const vf_work *w, const ac_fwd_args *a)
{
    int d = ac_head_dim_v(p); /* O rows */
    for (int r = 0; r < rows; r++) {
        float l_keys = w->l[r], m_keys = w->m[r], l = l_keys, m = m_keys, o_factor;
        cf_sink_join(p, h, &m, &l, &o_factor);
        const float *acc = w->acc + (size_t)r * d;
        size_t at = ac_o_index(p, b, h, i0 + r, 0);
        bool twice = cp->mut == CF_PREC_O_ROUNDED_TWICE && t == AC_F16; /* the f16 numerator stored first */
        for (int c = 0; c < d; c++) {
            float num = acc[c] * o_factor;
            cf_store_elem(t, a->o, at + c,
                          l == 0.0f || o_factor == 0.0f ? 0.0f : (twice ? cf_round_if_finite(t, num) : num) / l);
        }
        float lse = l == 0.0f ? -INFINITY : m + logf(l);
        if (cp->mut == CF_MUT_SINK_NOT_IN_LSE && p->sinks) /* O normalised with the sink, LSE without it */
            lse = l_keys == 0.0f ? -INFINITY : m_keys + logf(l_keys);
        if (cp->mut == CF_MUT_LSE_LOG2)
            lse = m * LOG2_E + log2f(l);
        if (cp->mut == CF_MUT_LSE_WITHOUT_MAX)
            lse = logf(l);
        a->lse[ac_lse_index(p, b, h, i0 + r)] = lse;
    }
}

static void vf_q_tile(const cpu_flash_params *cp, const ac_problem *p, ac_dtype t, int b, int h, int i0, int rows,
                      vf_work *w, const ac_fwd_args *a)
{
    int d_v = ac_head_dim_v(p), bc = cp->block_k;
    cf_load_kind(cp, p, t, a->q, AC_TENSOR_Q, b, h, i0, rows, w->q_tile);
    for (int r = 0; r < rows; r++) {
        w->m[r] = -INFINITY;
        w->l[r] = 0.0f;
    }
    memset(w->acc, 0, (size_t)rows * d_v * sizeof(float));
    int jt_lo = w->lo[i0] / bc, jt_hi = (w->hi[i0 + rows - 1] + bc - 1) / bc, hi_last = w->hi[i0 + rows - 1];
    for (int jt = jt_lo; jt < jt_hi; jt++)
        if (!cf_block_masked(w->lo, w->hi, i0, i0 + rows, jt * bc, (jt + 1) * bc))
            vf_kv_tile(cp, p, t, b, h, i0, rows, jt * bc, hi_last - jt * bc < bc ? hi_last - jt * bc : bc, w,
                       a->dropout_mask);
    vf_write_rows(cp, p, t, b, h, i0, rows, w, a);
}

int cf_forward_variants(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_fwd_args *a, ac_err *err)
{
    const cpu_flash_params *cp = self->ctx;
    if (p->dropout_p > 0.0 && !a->dropout_mask)
        return ac_fail(err, AC_ERR_INPUT, "%s: a problem with dropout needs the dropout_mask output", self->name);
    if (p->dropout_p > 0.0) /* pairs no tile reaches read as dropped (never visible, never read) */
        memset(a->dropout_mask, 0, (ac_dropout_elems(p) + 7) / 8);
    vf_work w;
    if (!vf_alloc(cp, p, &w)) {
        vf_free(&w);
        return ac_fail(err, AC_ERR_ENV, "%s: out of memory", self->name);
    }
    for (int b = 0; b < p->batch; b++) {
        int nq = ac_seqlen_q_of(p, b);
        cf_row_ranges(cp, p, b, w.lo, w.hi);
        cf_sink_token_ranges(cp, p, b, w.lo, w.hi);
        for (int h = 0; h < p->heads_q; h++) {
            int hk = cf_kv_head_of(cp, p, h);
            int n_keys = ac_stored_rows(p, b, false); /* THD stores only the sequence's keys */
            cf_load_kind(cp, p, t, a->k, AC_TENSOR_K, b, hk, 0, n_keys, w.k_rows);
            cf_load_kind(cp, p, t, a->v, AC_TENSOR_V, b, hk, 0, n_keys, w.v_rows);
            for (int i0 = 0; i0 < nq; i0 += cp->block_q)
                vf_q_tile(cp, p, t, b, h, i0, nq - i0 < cp->block_q ? nq - i0 : cp->block_q, &w, a);
        }
    }
    vf_free(&w);
    return AC_OK;
}
