/* plugins/example_plugin.c — a third-party kernel as an attncheck plugin.
 *
 * What a kernel author writes: one file that includes attncheck_plugin.h and
 * nothing else of attncheck, built as a shared library:
 *
 *     cc -O2 -shared -fPIC -I attncheck/kernels example_plugin.c -o libmine.so -lm
 *     attncheck fuzz --plugin ./libmine.so --kernel example-flash-cpu
 *
 * The kernel is a CPU rendition of FlashAttention-2's arithmetic, so that
 * attncheck's budgets are exercised the way a GPU kernel exercises them:
 *   forward: per query row, keys in tiles of TILE_K; S in f32, online softmax
 *     (running max m, running sum l, the accumulator rescaled by exp(m_old - m)
 *     whenever the max grows); P rounded to the input dtype before P V, as a
 *     tensor-core kernel does; l summed from the unrounded P; O = acc / l and
 *     LSE = m + log(l) in f32;
 *   backward: P recomputed from LSE, D = rowsum(dO * O) from the stored O,
 *     dS = P (dP - D); P and dS rounded to the dtype before the products;
 *     dQ, dK, dV accumulated in f32 and rounded once at the end.
 * It supports every dtype, layout, mask, GQA and varlen the ABI can state.
 * Built twice (plugins/meson.build): as an ABI 1 plugin (example-flash-cpu,
 * the path old plugins take) and, with -DEXAMPLE_PLUGIN_ABI2, as an ABI 2 one
 * (example-flash-cpu-v2) that adds a softcap, sinks and ALiBi. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attncheck_plugin.h"

#define TILE_K 64

/* ---- dtype bits <-> float --------------------------------------------- */

static float bits_to_f32(uint32_t x)
{
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

static uint32_t f32_to_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    return x;
}

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    int e = (h >> 10) & 0x1f;
    uint32_t m = h & 0x3ffu;
    if (e == 31)
        return bits_to_f32(sign | 0x7f800000u | m << 13);
    float v = e == 0 ? ldexpf((float)m, -24) : ldexpf((float)(m | 0x400u), e - 25);
    return sign ? -v : v;
}

/* Round to nearest even; overflow to Inf; subnormals kept. */
static uint16_t f32_to_f16(float f)
{
    uint32_t x = f32_to_bits(f), sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
    if (a >= 0x7f800000u) /* Inf, NaN (kept quiet) */
        return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0));
    if (a >= 0x477ff000u) /* >= 65520 rounds past 65504 */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) /* below 2^-14: a multiple of 2^-24, rounded by nearbyint (ties to even) */
        return (uint16_t)(sign | (uint32_t)nearbyint((double)bits_to_f32(a) * 16777216.0));
    uint32_t h = (((a >> 23) - 112u) << 10) | ((a & 0x7fffffu) >> 13), rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++;
    return (uint16_t)(sign | h);
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t x = f32_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static float load(int32_t t, const void *buf, size_t i)
{
    if (t == ATTNCHECK_DTYPE_F32)
        return ((const float *)buf)[i];
    uint16_t h = ((const uint16_t *)buf)[i];
    return t == ATTNCHECK_DTYPE_F16 ? f16_to_f32(h) : bits_to_f32((uint32_t)h << 16);
}

static void store(int32_t t, void *buf, size_t i, float v)
{
    if (t == ATTNCHECK_DTYPE_F32)
        ((float *)buf)[i] = v;
    else
        ((uint16_t *)buf)[i] = t == ATTNCHECK_DTYPE_F16 ? f32_to_f16(v) : f32_to_bf16(v);
}

/* What a tensor-core kernel does to P and dS before a product: round to the dtype. */
static float round_to(int32_t t, float v)
{
    if (t == ATTNCHECK_DTYPE_F32)
        return v;
    return t == ATTNCHECK_DTYPE_F16 ? f16_to_f32(f32_to_f16(v)) : bits_to_f32((uint32_t)f32_to_bf16(v) << 16);
}

/* ---- the problem's geometry -------------------------------------------- */

static size_t idx(const attncheck_problem *p, int heads, int seqlen, int b, int h, int s, int c)
{
    size_t d = (size_t)p->head_dim;
    if (p->layout == ATTNCHECK_LAYOUT_BHSD)
        return (((size_t)b * heads + h) * seqlen + s) * d + c;
    return (((size_t)b * seqlen + s) * heads + h) * d + c;
}

static int len_q(const attncheck_problem *p, int b) { return p->seqlens_q ? p->seqlens_q[b] : p->seqlen_q; }

static int len_k(const attncheck_problem *p, int b) { return p->seqlens_k ? p->seqlens_k[b] : p->seqlen_k; }

static int visible(const attncheck_problem *p, int b, int h, int i, int j)
{
    if (i >= len_q(p, b) || j >= len_k(p, b))
        return 0;
    if (p->windowed) {
        long c = p->align == ATTNCHECK_ALIGN_TOP_LEFT ? i : (long)i + len_k(p, b) - len_q(p, b);
        if (p->window_left != ATTNCHECK_WINDOW_INF && j < c - p->window_left)
            return 0;
        if (p->window_right != ATTNCHECK_WINDOW_INF && j > c + p->window_right)
            return 0;
    }
    if (p->dense_mask) {
        int mb = p->mask_batch == 1 ? 0 : b, mh = p->mask_heads == 1 ? 0 : h;
        if (!p->dense_mask[(((size_t)mb * p->mask_heads + mh) * p->seqlen_q + i) * p->seqlen_k + j])
            return 0;
    }
    return 1;
}

/* ABI 2 build only (EXAMPLE_PLUGIN_ABI2): the call's softcap, 0 = off.  Set by
 * the forward2/backward2 wrappers before they run the ABI 1 code below, which
 * reads it here (entry points run one at a time). */
static float call_softcap;
static const float *call_sinks; /* (Hq) or NULL */
static const float *call_alibi; /* (call_alibi_batch, Hq) ALiBi slopes or NULL */
static int call_alibi_batch;
static float *call_dsink; /* (Hq) or NULL: the backward's dSink accumulators */

/* S' of a visible pair; *slope (may be NULL) gets dS'/dS (the softcap's 1 - tanh^2). */
static float score_slope(const attncheck_problem *p, int32_t t, const void *q, const void *k, int b, int h, int i,
                         int j, float *slope)
{
    int hk = h / (p->heads_q / p->heads_kv);
    float s = 0.0f;
    for (int c = 0; c < p->head_dim; c++)
        s += load(t, q, idx(p, p->heads_q, p->seqlen_q, b, h, i, c)) *
            load(t, k, idx(p, p->heads_kv, p->seqlen_k, b, hk, j, c));
    if (slope)
        *slope = 1.0f;
    float alibi = 0.0f; /* after the softcap: slope |i + nk_b - nq_b - j| */
    if (call_alibi)
        alibi =
            call_alibi[(call_alibi_batch > 1 ? b : 0) * p->heads_q + h] * (float)abs(i + len_k(p, b) - len_q(p, b) - j);
    if (call_softcap == 0.0f)
        return s * (float)p->scale - alibi;
    float y = tanhf(s * ((float)p->scale / call_softcap));
    if (slope)
        *slope = 1.0f - y * y;
    return call_softcap * y - alibi;
}

static float score(const attncheck_problem *p, int32_t t, const void *q, const void *k, int b, int h, int i, int j)
{
    return score_slope(p, t, q, k, b, h, i, j, NULL);
}

/* ---- forward ------------------------------------------------------------ */

typedef struct {
    float m, l;
    float *acc; /* (d) */
} row_state;

/* One tile of keys [j0, j1) folded into the row's running max, sum and accumulator. */
static void fold_tile(const attncheck_problem *p, int32_t t, const void *q, const void *k, const void *v, int b, int h,
                      int i, int j0, int j1, float *s_tile, row_state *r)
{
    int hk = h / (p->heads_q / p->heads_kv), d = p->head_dim;
    float m_tile = -INFINITY;
    for (int j = j0; j < j1; j++) {
        s_tile[j - j0] = visible(p, b, h, i, j) ? score(p, t, q, k, b, h, i, j) : -INFINITY;
        m_tile = fmaxf(m_tile, s_tile[j - j0]);
    }
    float m_new = fmaxf(r->m, m_tile);
    if (m_new == -INFINITY)
        return; /* nothing visible yet */
    float alpha = expf(r->m - m_new); /* 0 on the first visible tile */
    r->l *= alpha;
    for (int c = 0; c < d; c++)
        r->acc[c] *= alpha;
    for (int j = j0; j < j1; j++) {
        float pj = expf(s_tile[j - j0] - m_new);
        r->l += pj;
        float pr = round_to(t, pj);
        for (int c = 0; c < d; c++)
            r->acc[c] += pr * load(t, v, idx(p, p->heads_kv, p->seqlen_k, b, hk, j, c));
    }
    r->m = m_new;
}

/* exp(a - b), the difference's rounding error (an exact two-sum) carried to
 * first order: the factor that rescales a whole row for its sink must not err
 * by u_f32 |a - b| (with a sink 20 above every score, that alone makes an f32
 * O several times the naive baseline's mean error). */
static float exp_diff(float a, float b)
{
    if (!isfinite(a) || !isfinite(b))
        return expf(a - b);
    float x = a - b, bb = x - a, err = (a - (x - bb)) + (-b - bb), e = expf(x);
    return e + e * err;
}

static void forward_row(const attncheck_problem *p, int32_t t, const void *q, const void *k, const void *v, void *o,
                        float *lse, int b, int h, int i, float *s_tile, float *acc)
{
    row_state r = {-INFINITY, 0.0f, acc};
    memset(acc, 0, sizeof(float) * (size_t)p->head_dim);
    int nk = len_k(p, b);
    if (i < len_q(p, b))
        for (int j0 = 0; j0 < nk; j0 += TILE_K)
            fold_tile(p, t, q, k, v, b, h, i, j0, j0 + TILE_K < nk ? j0 + TILE_K : nk, s_tile, &r);
    float o_factor = 1.0f;
    if (call_sinks && i < len_q(p, b)) { /* the sink joins the finished row: no value, in the denominator */
        float sink = call_sinks[h], m_new = fmaxf(r.m, sink);
        o_factor = exp_diff(r.m, m_new);
        r.l = r.l * o_factor + exp_diff(sink, m_new);
        r.m = m_new;
    }
    for (int c = 0; c < p->head_dim; c++)
        store(t, o, idx(p, p->heads_q, p->seqlen_q, b, h, i, c),
              r.l > 0.0f && o_factor > 0.0f ? r.acc[c] * o_factor / r.l : 0.0f);
    lse[((size_t)b * p->heads_q + h) * p->seqlen_q + i] = r.l > 0.0f ? r.m + logf(r.l) : -INFINITY;
}

static int example_forward(void *user, const attncheck_problem *p, int32_t t, const void *q, const void *k,
                           const void *v, void *o, float *lse, char *errbuf, size_t errbuf_len)
{
    (void)user;
    if (t < ATTNCHECK_DTYPE_F32 || t > ATTNCHECK_DTYPE_BF16) {
        snprintf(errbuf, errbuf_len, "unknown dtype %d", (int)t);
        return 1;
    }
    float *s_tile = malloc(sizeof(float) * TILE_K), *acc = malloc(sizeof(float) * (size_t)p->head_dim);
    if (!s_tile || !acc) {
        free(s_tile), free(acc);
        snprintf(errbuf, errbuf_len, "out of memory");
        return 1;
    }
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < p->heads_q; h++)
            for (int i = 0; i < p->seqlen_q; i++)
                forward_row(p, t, q, k, v, o, lse, b, h, i, s_tile, acc);
    free(s_tile), free(acc);
    return 0;
}

/* ---- backward ----------------------------------------------------------- */

typedef struct {
    float *dq, *dk, *dv; /* f32 accumulators in the tensors' own layout */
} grads;

static void backward_row(const attncheck_problem *p, int32_t t, const void *q, const void *k, const void *v,
                         const void *o, const float *lse, const void *d_o, int b, int h, int i, grads *g)
{
    int hk = h / (p->heads_q / p->heads_kv), d = p->head_dim;
    float lse_i = lse[((size_t)b * p->heads_q + h) * p->seqlen_q + i];
    if (i >= len_q(p, b) || lse_i == -INFINITY)
        return; /* padding, or no visible key: P = 0, every gradient term 0 */
    float delta = 0.0f;
    for (int c = 0; c < d; c++) {
        size_t at = idx(p, p->heads_q, p->seqlen_q, b, h, i, c);
        delta += load(t, d_o, at) * load(t, o, at);
    }
    float scale = (float)p->scale;
    if (call_dsink)
        call_dsink[h] -= expf(call_sinks[h] - lse_i) * delta;
    for (int j = 0; j < len_k(p, b); j++) {
        if (!visible(p, b, h, i, j))
            continue;
        float slope, pj = expf(score_slope(p, t, q, k, b, h, i, j, &slope) - lse_i), dp = 0.0f;
        for (int c = 0; c < d; c++)
            dp += load(t, d_o, idx(p, p->heads_q, p->seqlen_q, b, h, i, c)) *
                load(t, v, idx(p, p->heads_kv, p->seqlen_k, b, hk, j, c));
        float p_r = round_to(t, pj), ds_r = round_to(t, pj * (dp - delta) * slope);
        for (int c = 0; c < d; c++) {
            size_t qi = idx(p, p->heads_q, p->seqlen_q, b, h, i, c);
            size_t kj = idx(p, p->heads_kv, p->seqlen_k, b, hk, j, c);
            g->dq[qi] += scale * ds_r * load(t, k, kj);
            g->dk[kj] += scale * ds_r * load(t, q, qi);
            g->dv[kj] += p_r * load(t, d_o, qi);
        }
    }
}

static int example_backward(void *user, const attncheck_problem *p, int32_t t, const void *q, const void *k,
                            const void *v, const void *o, const float *lse, const void *d_o, void *dq, void *dk,
                            void *dv, char *errbuf, size_t errbuf_len)
{
    (void)user;
    size_t nq = (size_t)p->batch * p->heads_q * p->seqlen_q * p->head_dim;
    size_t nkv = (size_t)p->batch * p->heads_kv * p->seqlen_k * p->head_dim;
    grads g = {calloc(nq ? nq : 1, sizeof(float)), calloc(nkv ? nkv : 1, sizeof(float)),
               calloc(nkv ? nkv : 1, sizeof(float))};
    if (!g.dq || !g.dk || !g.dv) {
        free(g.dq), free(g.dk), free(g.dv);
        snprintf(errbuf, errbuf_len, "out of memory for the f32 gradient accumulators");
        return 1;
    }
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < p->heads_q; h++)
            for (int i = 0; i < p->seqlen_q; i++)
                backward_row(p, t, q, k, v, o, lse, d_o, b, h, i, &g);
    for (size_t e = 0; e < nq; e++)
        store(t, dq, e, g.dq[e]);
    for (size_t e = 0; e < nkv; e++)
        store(t, dk, e, g.dk[e]), store(t, dv, e, g.dv[e]);
    free(g.dq), free(g.dk), free(g.dv);
    return 0;
}

/* ---- the descriptor ----------------------------------------------------- */

#define EXAMPLE_CAPS \
    { \
        .dtypes = 1u << ATTNCHECK_DTYPE_F32 | 1u << ATTNCHECK_DTYPE_F16 | 1u << ATTNCHECK_DTYPE_BF16, \
        .n_head_dims = 0, .max_head_dim = 256, \
        .masks = ATTNCHECK_MASK_NONE | ATTNCHECK_MASK_CAUSAL_TL | ATTNCHECK_MASK_CAUSAL_BR | ATTNCHECK_MASK_WINDOW | \
            ATTNCHECK_MASK_DENSE, \
        .layouts = 1u << ATTNCHECK_LAYOUT_BHSD | 1u << ATTNCHECK_LAYOUT_BSHD, .gqa = 1, .varlen = 1, .backward = 1, \
        .max_seqlen = 0, \
    }

#ifndef EXAMPLE_PLUGIN_ABI2
/* ABI 1: the problem struct as it was, no variants. */
static const attncheck_plugin example = {
    .abi_version = ATTNCHECK_PLUGIN_ABI_V1,
    .name = "example-flash-cpu",
    .description = "example plugin: CPU FlashAttention-2 arithmetic (f32 online softmax, P/dS rounded to dtype)",
    .caps = EXAMPLE_CAPS,
    .memory = ATTNCHECK_MEM_HOST,
    .forward = example_forward,
    .backward = example_backward,
    .user = NULL,
};
#else
/* ABI 2: the same kernel with a softcap (FlashAttention's: tanh of the scaled
 * scores, scale / c folded into its argument) and sinks (joined to each
 * finished row), entered through forward2 and backward2; the ABI 1 code above
 * runs with the problem's v1 fields and the call_* variables. */
static attncheck_problem v1_of(const attncheck_problem2 *p)
{
    call_softcap = (float)p->softcap;
    call_sinks = p->sinks;
    call_dsink = NULL;
    int has_alibi = ATTNCHECK_HAS_FIELD(p, attncheck_problem2, alibi_batch); /* an older attncheck: off */
    call_alibi = has_alibi ? p->alibi_slopes : NULL;
    call_alibi_batch = has_alibi ? p->alibi_batch : 0;
    return (attncheck_problem){
        .batch = p->batch,
        .heads_q = p->heads_q,
        .heads_kv = p->heads_kv,
        .seqlen_q = p->seqlen_q,
        .seqlen_k = p->seqlen_k,
        .head_dim = p->head_dim,
        .layout = p->layout,
        .scale = p->scale,
        .windowed = p->windowed,
        .window_left = p->window_left,
        .window_right = p->window_right,
        .align = p->align,
        .seqlens_q = p->seqlens_q,
        .seqlens_k = p->seqlens_k,
        .dense_mask = p->dense_mask,
        .mask_batch = p->mask_batch,
        .mask_heads = p->mask_heads,
    };
}

static int example_forward2(void *user, const attncheck_problem2 *p, const attncheck_fwd_args *a, char *errbuf,
                            size_t errbuf_len)
{
    attncheck_problem v1 = v1_of(p);
    return example_forward(user, &v1, a->dtype, a->q, a->k, a->v, a->o, a->lse, errbuf, errbuf_len);
}

static int example_backward2(void *user, const attncheck_problem2 *p, const attncheck_bwd_args *a, char *errbuf,
                             size_t errbuf_len)
{
    attncheck_problem v1 = v1_of(p);
    if (p->sinks) {
        call_dsink = a->dsink;
        for (int h = 0; h < p->heads_q; h++)
            call_dsink[h] = 0.0f;
    }
    int rc = example_backward(user, &v1, a->dtype, a->q, a->k, a->v, a->o, a->lse, a->d_o, a->dq, a->dk, a->dv, errbuf,
                              errbuf_len);
    call_dsink = NULL;
    return rc;
}

static const attncheck_plugin example = {
    .abi_version = ATTNCHECK_PLUGIN_ABI_VERSION,
    .name = "example-flash-cpu-v2",
    .description = "example plugin on ABI 2: the example's arithmetic with a softcap, sinks and ALiBi",
    .caps = EXAMPLE_CAPS,
    .memory = ATTNCHECK_MEM_HOST,
    .user = NULL,
    .struct_size = sizeof(attncheck_plugin),
    .variants = ATTNCHECK_VARIANT_SOFTCAP | ATTNCHECK_VARIANT_SINKS | ATTNCHECK_VARIANT_ALIBI,
    .forward2 = example_forward2,
    .backward2 = example_backward2,
};
#endif

const attncheck_plugin *attncheck_plugin_describe(void) { return &example; }
