/* harness/case/gen_variants.c — the generator's variants: each drawn only when
 * the kernel claims it, with the edge values that break kernels.
 *
 * A stream of its own per case and variant (seeded from the campaign seed,
 * the case index and the variant, apart from the plain case's stream), so
 * adding a variant never moves the plain draws nor another variant's.  Weights (per case, each variant alone):
 *   dv       12%: a (d_qk, d_v) pair the kernel lists, else MLA-like pairs 192/128,
 *            128/96, 256/128, 96/64, 64/32 (50%), d/2 (20%), 2d (20%), 1..64 (10%);
 *   softcap  15%: c = 0.25 / 1 (tanh saturates at ordinary scores) 40,
 *            5 20, 30 (Grok) 20, 50 (Gemma 2) 20;
 *   sinks    15% (none with dist huge()): normal(0,1) 35, normal(2,2) 15, over(0) 15,
 *            over(4) 20, over(20) 15 (a sink larger than every score);
 *   alibi    15%: paper 40 (the geometric slopes), paper:bh 15, uniform(0,1) 15,
 *            uniform(1,16) 15 (steep: distant keys vanish), uniform(0,0.01):bh 15;
 *   bias     15%: shape 11, 1h, b1, bh alike; normal(0,1) 40, normal(0,4) 20,
 *            normal(-2,1) with 20% -inf 25 (a mask as a bias), normal(0,1) with
 *            90% -inf 15 (rows left with nothing visible); f32 half the time;
 *   sinktokens 30% of the windows with a finite left edge: K = 1, 4, 64 (a
 *            tile), L + 1 (reaching into the window) or 1..128;
 *   dropout  10% (none with dist huge()): p = 0.1 40, 0.5 30, 0.9 15 (most of P dropped), 0.01 15;
 *   kv=paged 12% (not with THD or dropout): gen_draw_paging;
 *   splits   60% of the paged cases, 8% of the others: gen_draw_splits;
 *   maskdims half the dense masks (of any kernel claiming them): 1h, b1, bh
 *            alike, so a kernel reading batch 0's (or head 0's) mask for all fails;
 *   negative scales 5% of every kernel's cases: the drawn scale negated (the
 *            scores' order reversed, -inf masks times a negative scale);
 *   layout=thd 12% of the cases of a kernel claiming the THD layout: b = 2..4
 *            half the time when b = 1 and no lengths were drawn, and (with
 *            varlen claimed) lengths for q and k: 0 5, 1 10, the extent 25,
 *            1..extent 60, so that sequences of every size sit side by side. */
#include <math.h>

#include "harness/case/gen_variants.h"
#include "harness/case/generate_internal.h"

/* Variant v's stream for case `index`: one per variant, so whether one is
 * claimed (and how many draws its parameters take) never moves another. */
enum { STREAM_THD = 64, STREAM_MASKDIMS, STREAM_NEG_SCALE, STREAM_MLA }; /* past every variant's id */

static case_rng variant_stream(uint64_t campaign_seed, uint64_t index, uint64_t v)
{
    uint64_t s = campaign_seed ^ (0x5EEDF00DCAFEBABEull + 0x9E3779B97F4A7C15ull * v);
    uint64_t a = ac_splitmix64(&s);
    s = a ^ (index * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull);
    case_rng r = {ac_splitmix64(&s)};
    return r;
}

/* true with probability percent / 100 */
static bool chance(case_rng *r, int percent) { return (int)(case_rng_u64(r) % 100) < percent; }

static void draw_softcap(case_rng *r, ac_case *c)
{
    static const int w[] = {20, 20, 20, 20, 20};
    static const float caps[] = {0.25f, 1.0f, 5.0f, 30.0f, 50.0f};
    c->softcap = (double)caps[case_rng_pick(r, w, 5)];
}

/* normal(0,1) 35, normal(2,2) 15, over(0) 15 (ties the top score), over(4) 20,
 * over(20) 15 (the sink takes nearly all of every row: P ~ e^-20) */
static void draw_sinks(case_rng *r, ac_case *c)
{
    static const int w[] = {35, 15, 15, 20, 15};
    static const double a[] = {0, 2, 0, 4, 20}, b[] = {1, 2, 0, 0, 0};
    int k = case_rng_pick(r, w, 5);
    c->sinks = k < 2 ? AC_SINKS_NORMAL : AC_SINKS_OVER;
    c->sinks_a = a[k];
    c->sinks_b = b[k];
}

/* A d_v: one of the kernel's (d_qk, d_v) pairs when it lists them; else half
 * the time a pair shipped models use (DeepSeek MLA's 192/128, 128/96,
 * 256/128, 96/64, 64/32; both within the kernel's max head dim), or a d_v for
 * the drawn d: d/2, 2d (at most 256), or 1..64. */
static void draw_dv(case_rng *r, const ac_caps *caps, ac_case *c)
{
    if (caps->n_dv_pairs > 0) {
        int i = case_rng_int(r, 0, (caps->n_dv_pairs < AC_MAX_DV_PAIRS ? caps->n_dv_pairs : AC_MAX_DV_PAIRS) - 1);
        c->head_dim = caps->dv_pairs[i][0];
        c->head_dim_v = caps->dv_pairs[i][1];
        return;
    }
    if (caps->n_head_dims > 0)
        return; /* listed dims and no pairs: no d_v to draw */
    int top = gen_head_dim_top(caps);
    static const int pairs[][2] = {{192, 128}, {128, 96}, {256, 128}, {96, 64}, {64, 32}};
    int k = case_rng_int(r, 0, 9);
    if (k < 5 && pairs[k][0] <= top) {
        c->head_dim = pairs[k][0];
        c->head_dim_v = pairs[k][1];
    } else if (k < 7) {
        c->head_dim_v = c->head_dim > 1 ? c->head_dim / 2 : 2;
    } else if (k < 9) {
        int twice = 2 * c->head_dim;
        c->head_dim_v = twice <= 256 && twice <= top ? twice : (c->head_dim > 1 ? c->head_dim - 1 : 2);
    } else {
        c->head_dim_v = case_rng_int(r, 1, top < 64 ? top : 64);
    }
    if (c->head_dim_v > top)
        c->head_dim_v = top;
    if (c->scale_auto)
        c->scale = (double)(float)(1.0 / sqrt((double)c->head_dim));
}

static void draw_alibi(case_rng *r, ac_case *c)
{
    static const int w[] = {40, 15, 15, 15, 15};
    static const double lo[] = {0, 0, 0, 1, 0}, hi[] = {0, 0, 1, 16, 0.01};
    int k = case_rng_pick(r, w, 5);
    c->alibi = k < 2 ? AC_ALIBI_PAPER : AC_ALIBI_UNIFORM;
    c->alibi_a = lo[k], c->alibi_b = hi[k];
    c->alibi_bh = k == 1 || k == 4;
}

static void draw_bias(case_rng *r, ac_case *c)
{
    static const int w[] = {40, 20, 25, 15};
    static const double m[] = {0, 0, -2, 0}, s[] = {1, 4, 1, 1}, inf[] = {0, 0, 0.2, 0.9};
    int k = case_rng_pick(r, w, 4), shape = case_rng_int(r, 0, 3);
    c->bias = AC_BIAS_NORMAL, c->bias_a = m[k], c->bias_b = s[k], c->bias_inf = inf[k];
    c->bias_per_head = shape & 1, c->bias_per_batch = shape >> 1;
    c->bias_f32 = case_rng_int(r, 0, 1) == 1;
}

static void draw_sink_tokens(case_rng *r, ac_case *c)
{
    static const int w[] = {25, 20, 20, 15, 20};
    int k = case_rng_pick(r, w, 5);
    c->sink_tokens = k == 0 ? 1 : k == 1 ? 4 : k == 2 ? 64 : k == 3 ? c->window_left + 1 : case_rng_int(r, 1, 128);
}

static void draw_dropout(case_rng *r, ac_case *c)
{
    static const int w[] = {40, 30, 15, 15};
    static const double p[] = {0.1, 0.5, 0.9, 0.01};
    c->dropout = p[case_rng_pick(r, w, 4)];
}

/* The packed layout: several sequences of different lengths back to back, so a
 * kernel that reads past one sequence's end reads the next one's rows. */
static void draw_thd(case_rng *r, const ac_caps *caps, ac_case *c)
{
    c->layout = AC_LAYOUT_THD;
    bool has_lens = c->n_seqlens_q > 0 || c->n_seqlens_k > 0;
    int more = case_rng_int(r, 0, 5);
    if (!has_lens && c->batch == 1 && more < 3)
        c->batch = 2 + more;
    if (!caps->varlen || has_lens)
        return;
    c->n_seqlens_q = c->n_seqlens_k = c->batch;
    gen_draw_lens(r, c->batch, c->seqlen_q, c->seqlens_q);
    gen_draw_lens(r, c->batch, c->seqlen_k, c->seqlens_k);
}

/* A paged KV cache: page sizes 1, 2, 4, .., 256 alike; the table in order 10%
 * of the time.  The lengths stay the plain draw's (the decode profile draws
 * its own batches of unequal lengths). */
void gen_draw_paging(case_rng *r, ac_case *c)
{
    c->kv_page_size = 1 << case_rng_int(r, 0, 8);
    c->kv_contig = case_rng_int(r, 0, 9) == 0;
}

/* A split count: 1, 2, 3, 4, 8, or more splits than the longest sequence has
 * key tiles of 64 (empty splits), alike. */
int gen_draw_splits(case_rng *r, const ac_case *c)
{
    static const int counts[] = {1, 2, 3, 4, 8};
    int k = case_rng_int(r, 0, 5);
    if (k < 5)
        return counts[k];
    int tiles = (c->seqlen_k + 63) / 64 + case_rng_int(r, 1, 3);
    return tiles < AC_CASE_MAX_SPLITS ? tiles : AC_CASE_MAX_SPLITS;
}

/* What every kernel gets, claims or not: dense masks of every broadcast shape
 * and negative scales (the contract never excluded them). */
static void draw_mask_dims_and_sign(uint64_t campaign_seed, uint64_t index, ac_case *c)
{
    case_rng r = variant_stream(campaign_seed, index, STREAM_MASKDIMS);
    if (c->mask == AC_MASK_DENSE && chance(&r, 50)) {
        int shape = case_rng_int(&r, 1, 3);
        c->mask_per_head = shape & 1, c->mask_per_batch = shape >> 1;
    }
    r = variant_stream(campaign_seed, index, STREAM_NEG_SCALE);
    if (chance(&r, 5)) {
        double s = c->scale_auto ? 1.0 / sqrt((double)c->head_dim) : c->scale;
        c->scale_auto = false;
        c->scale = -(double)(float)s;
    }
}

void case_variants_draw(uint64_t campaign_seed, uint64_t index, const ac_caps *caps, ac_case *c)
{
    case_rng r;
    draw_mask_dims_and_sign(campaign_seed, index, c);
    if ((caps->layouts & (1u << AC_LAYOUT_THD)) && c->kv_page_size == 0) { /* the decode profile pages first */
        r = variant_stream(campaign_seed, index, STREAM_THD);
        if (chance(&r, 12))
            draw_thd(&r, caps, c);
    }
    if (caps->variants & AC_VAR_DV) { /* first: it may set d, which the others' draws do not read */
        r = variant_stream(campaign_seed, index, AC_VARIANT_DV);
        if (chance(&r, 12))
            draw_dv(&r, caps, c);
    }
    if (caps->variants & AC_VAR_SOFTCAP) {
        r = variant_stream(campaign_seed, index, AC_VARIANT_SOFTCAP);
        if (chance(&r, 15))
            draw_softcap(&r, c);
    }
    if (caps->variants & AC_VAR_ALIBI) {
        r = variant_stream(campaign_seed, index, AC_VARIANT_ALIBI);
        if (chance(&r, 15))
            draw_alibi(&r, c);
    }
    if (caps->variants & AC_VAR_BIAS) {
        r = variant_stream(campaign_seed, index, AC_VARIANT_BIAS);
        if (chance(&r, 15))
            draw_bias(&r, c);
    }
    bool window = c->mask == AC_MASK_WINDOW_TL || c->mask == AC_MASK_WINDOW_BR;
    if ((caps->variants & AC_VAR_SINK_TOKENS) && window && c->window_left != AC_WINDOW_INF) {
        r = variant_stream(campaign_seed, index, AC_VARIANT_SINK_TOKENS);
        if (chance(&r, 30))
            draw_sink_tokens(&r, c);
    }
    if (caps->variants & AC_VAR_DROPOUT) {
        r = variant_stream(campaign_seed, index, AC_VARIANT_DROPOUT);
        /* not with huge(): dP / (1 - p) up to 100 times larger, and the dS a kernel rounds to f16 overflows */
        if (chance(&r, 10) && c->dist != AC_DIST_HUGE && c->kv_page_size == 0)
            draw_dropout(&r, c);
    }
    if (caps->variants & AC_VAR_SINKS) {
        r = variant_stream(campaign_seed, index, AC_VARIANT_SINKS);
        /* not with huge(): a sink pulls O away from V, and the dS = P (dP - D) in
         * the dtype that huge values keep representable overflows f16 */
        if (chance(&r, 15) && c->dist != AC_DIST_HUGE)
            draw_sinks(&r, c);
    }
    if ((caps->variants & AC_VAR_PAGED) && c->kv_page_size == 0 && c->layout != AC_LAYOUT_THD && c->dropout == 0.0) {
        r = variant_stream(campaign_seed, index, AC_VARIANT_PAGED);
        if (chance(&r, 12))
            gen_draw_paging(&r, c);
    }
    if ((caps->variants & AC_VAR_SPLIT) && c->num_splits == 0) {
        r = variant_stream(campaign_seed, index, AC_VARIANT_SPLIT);
        if (chance(&r, c->kv_page_size ? 60 : 8))
            c->num_splits = gen_draw_splits(&r, c);
    }
}

/* Whether (d, dv) is one of the kernel's listed (d_qk, d_v) pairs. */
static bool pair_listed(const ac_caps *caps, int d, int dv)
{
    for (int i = 0; i < caps->n_dv_pairs && i < AC_MAX_DV_PAIRS; i++)
        if (caps->dv_pairs[i][0] == d && caps->dv_pairs[i][1] == dv)
            return true;
    return false;
}

void case_variants_after_cap(const ac_caps *caps, ac_case *c)
{
    if (c->head_dim_v != 0 && caps->n_dv_pairs > 0 && !pair_listed(caps, c->head_dim, c->head_dim_v))
        c->head_dim_v = 0;
}

/* ---- MLA decode (the decode profile) and v=k ---- */

static bool head_dim_claimed(const ac_caps *caps, int d)
{
    for (int i = 0; i < caps->n_head_dims && i < AC_MAX_LISTED_HEAD_DIMS; i++)
        if (caps->head_dims[i] == d)
            return true;
    return caps->n_head_dims == 0 && caps->max_head_dim >= d;
}

/* Whether the kernel takes MLA decode's shape: GQA, d_qk = 576 with d_v = 512. */
static bool mla_fits(const ac_caps *caps)
{
    return (caps->variants & AC_VAR_DV) && caps->gqa && head_dim_claimed(caps, 576) &&
        (caps->n_dv_pairs == 0 || pair_listed(caps, 576, 512));
}

void case_mla_draw(uint64_t campaign_seed, uint64_t index, const ac_caps *caps, ac_case *c)
{
    if (!mla_fits(caps))
        return;
    case_rng r = variant_stream(campaign_seed, index, STREAM_MLA);
    if (!chance(&r, 15))
        return;
    static const int heads[] = {16, 32, 64, 128}; /* DeepSeek-V3's 128 query heads, and tensor-parallel shares */
    c->heads_kv = 1;
    c->heads_q = heads[case_rng_int(&r, 0, 3)];
    c->head_dim = 576, c->head_dim_v = 512;
    c->v_from_k = !ac_dtype_is_fp8(c->dtype) && chance(&r, 50); /* a kernel reading V from K: always (case_vk_apply) */
}

void case_vk_apply(const ac_caps *caps, ac_case *c)
{
    if (!caps->v_from_k || ac_dtype_is_fp8(c->dtype))
        return;
    c->v_from_k = true; /* its (d, d_v) already one of its pairs, if it lists them (case_variants_after_cap) */
    if (c->head_dim_v > c->head_dim)
        c->head_dim_v = 0; /* V is then the whole of K */
}

bool case_variants_any(const ac_case *c)
{
    return c->layout == AC_LAYOUT_THD || (c->head_dim_v > 0 && c->head_dim_v != c->head_dim) || c->softcap > 0.0 ||
        c->sinks != AC_SINKS_NONE || c->alibi != AC_ALIBI_NONE || c->bias != AC_BIAS_NONE || c->sink_tokens > 0 ||
        c->dropout > 0.0 || c->kv_page_size > 0 || c->num_splits >= 2;
}
