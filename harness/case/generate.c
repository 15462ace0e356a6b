/* harness/case/generate.c — the case generator: a campaign seed expands to an
 * endless, reproducible stream of case lines, weighted toward edges.
 *
 * Case k is a pure function of (campaign seed, k, caps, filters): its random
 * stream is splitmix64 seeded from (seed, k), so any case can be regenerated
 * alone (ac_gen_case_at) and a campaign replays exactly.  Every choice is
 * drawn from what the kernel claims (caps) and the filters allow, so nothing
 * is rejected after the fact.
 *
 * Weights (relative, per draw; N = the length cap, ac_gen_max_seqlen):
 *   dtype     uniform over claimed & filtered
 *   mask      none 4, causal-tl 4, causal-br 4, window-tl 3, window-br 3, dense 4
 *             (over the claimed & filtered ones; windows in the causal alignments claimed);
 *             each kind's weight and the draw of its parameters (window sides,
 *             dense keep and maskrows) are its row of harness/case/masks.c
 *   lengths   nk = nq: 30, else each drawn alone: {1,2,3}: 12, 4..80: 50,
 *             tile edges 63,64,65,127,128,129: 10, primes (5..257): 12, 16/32/256: 4,
 *             129..N: 3  (all <= N); so Nq > Nk and Nq < Nk each come ~35%
 *   batch     1: 60, 2: 25, 3: 15
 *   heads     with GQA: MHA hq = hkv in 1..3: 50, GQA hkv 1..2 x group 2/4/8: 35,
 *             MQA hkv = 1, hq 2..8: 15;  without: hq = hkv, 1: 50, 2: 30, 3: 20
 *   head dim  listed dims: uniform; else (<= max_head_dim) 1..8: 15, 16/32/64: 35,
 *             9..64: 40, 80/96/128/160/256/max: 10
 *   varlen    (when claimed) 25% of cases: both 50, q only 25, k only 25;
 *             each length 0: 5, 1: 10, padded: 25, 1..padded: 60
 *   layout    uniform over claimed
 *   dist      normal(0,1) 15, normal(0,0.1) 5, normal(0,4) 5, normal(1,0.5) 5,
 *             uniform(-1,1) 5, uniform(0,1) 4, uniform(-4,4) 3, outliers(1,0.01) 5,
 *             outliers(1,0.001) 3, increasing(8|16|32|64) 10, equal() 7,
 *             dominant(2|8|20) 9, huge(0.6|0.9|1) 10, tiny() 9
 *   scale     auto 85, 1 / 0.5 / 0.3 / 0.05 / 2: 3 each
 * Lengths below min_seqlen are folded into [min_seqlen, N] (min + (len - 1) mod
 * the span), so a floor keeps the stream's shape; without one it is unchanged.
 * The long profile (generate_long.c) draws sizes its own way; the rest is shared.
 * Size (ac_gen_cap): most cases are small (lengths <= 80, d <= 64, a few heads);
 * one that breaks the cap (the work cap b * hq * nq * nk * d <= max(2^22, 16 N^2)
 * by default, or the caller's, and its memory test) drops to b = 1, one KV head,
 * then halves d (unlisted dims), then halves its longer length, until it keeps
 * it, so the rare large case stays within what the reference tier can hold. */
#include <math.h>
#include <string.h>

#include "harness/case/case_internal.h"
#include "harness/case/gen_variants.h"
#include "harness/case/generate.h"
#include "harness/case/generate_internal.h"

/* ---- the per-case stream ------------------------------------------------------ */

static case_rng case_stream(uint64_t campaign_seed, uint64_t index)
{
    uint64_t s = campaign_seed;
    uint64_t a = ac_splitmix64(&s);
    s = a ^ (index * 0xD1B54A32D192ED03ull + 0x2545F4914F6CDD1Dull);
    case_rng r = {ac_splitmix64(&s)};
    return r;
}

int case_rng_int(case_rng *r, int lo, int hi)
{
    if (hi <= lo)
        return lo;
    return lo + (int)(case_rng_u64(r) % (uint64_t)(hi - lo + 1));
}

int case_rng_pick(case_rng *r, const int *weights, int n)
{
    int total = 0;
    for (int i = 0; i < n; i++)
        total += weights[i];
    int x = (int)(case_rng_u64(r) % (uint64_t)total);
    for (int i = 0; i < n; i++) {
        if (x < weights[i])
            return i;
        x -= weights[i];
    }
    return n - 1;
}

/* One of the values <= max (uniform), or fallback when none is. */
int gen_pick_le(case_rng *r, const int *vals, int n, int max, int fallback)
{
    int ok[32], m = 0;
    for (int i = 0; i < n && m < 32; i++)
        if (vals[i] <= max)
            ok[m++] = vals[i];
    return m ? ok[case_rng_int(r, 0, m - 1)] : fallback;
}

/* ---- sizes --------------------------------------------------------------------- */

int ac_gen_max_seqlen(const ac_gen *g)
{
    int def = g->profile == AC_PROFILE_DEFAULT ? AC_GEN_DEFAULT_MAX_SEQLEN : AC_GEN_LONG_MAX_SEQLEN;
    int m = g->max_seqlen > 0 ? g->max_seqlen : def;
    if (g->caps.max_seqlen > 0 && g->caps.max_seqlen < m)
        m = g->caps.max_seqlen;
    return m;
}

int ac_gen_min_seqlen(const ac_gen *g)
{
    int def = g->profile == AC_PROFILE_LONG ? AC_GEN_LONG_MIN_SEQLEN : 1;
    int m = g->min_seqlen > 0 ? g->min_seqlen : def, top = ac_gen_max_seqlen(g);
    return g->min_seqlen <= 0 && m > top ? top : m; /* the long profile's default floor gives way to a lower cap */
}

int gen_fold_length(const ac_gen *g, int len)
{
    int lo = ac_gen_min_seqlen(g), hi = ac_gen_max_seqlen(g);
    return len >= lo || hi <= lo ? (len < lo ? lo : len) : lo + (len - 1) % (hi - lo + 1);
}

static int draw_length(case_rng *r, int max)
{
    static const int w[] = {12, 50, 10, 12, 4, 3};
    static const int tiles[] = {63, 64, 65, 127, 128, 129};
    static const int primes[] = {5,  7,  11, 13, 17, 19, 23, 29, 31,  37,  41,  43, 47,
                                 53, 59, 61, 67, 71, 73, 79, 97, 101, 113, 131, 257};
    static const int powers[] = {16, 32, 256};
    int small_hi = max < 80 ? max : 80;
    switch (case_rng_pick(r, w, COUNT(w))) {
    case 0:
        return case_rng_int(r, 1, max < 3 ? max : 3);
    case 2:
        return gen_pick_le(r, tiles, COUNT(tiles), max, case_rng_int(r, 1, small_hi));
    case 3:
        return gen_pick_le(r, primes, COUNT(primes), max, case_rng_int(r, 1, small_hi));
    case 4:
        return gen_pick_le(r, powers, COUNT(powers), max, case_rng_int(r, 1, small_hi));
    case 5:
        return max > 129 ? case_rng_int(r, 129, max) : case_rng_int(r, 1, max);
    default:
        return case_rng_int(r, small_hi < 4 ? 1 : 4, small_hi);
    }
}

static void draw_heads(case_rng *r, bool gqa, ac_case *c)
{
    if (!gqa) {
        static const int w[] = {50, 30, 20};
        c->heads_q = c->heads_kv = 1 + case_rng_pick(r, w, COUNT(w));
        return;
    }
    static const int w[] = {50, 35, 15};
    static const int groups[] = {2, 4, 8};
    switch (case_rng_pick(r, w, COUNT(w))) {
    case 0:
        c->heads_q = c->heads_kv = case_rng_int(r, 1, 3);
        break;
    case 1:
        c->heads_kv = case_rng_int(r, 1, 2);
        c->heads_q = c->heads_kv * groups[case_rng_int(r, 0, 2)];
        break;
    default:
        c->heads_kv = 1, c->heads_q = case_rng_int(r, 2, 8);
        break;
    }
}

int gen_head_dim_top(const ac_caps *caps)
{
    return caps->max_head_dim > 0 && caps->max_head_dim < AC_GEN_HEAD_DIM_TOP ? caps->max_head_dim
                                                                              : AC_GEN_HEAD_DIM_TOP;
}

int gen_draw_head_dim(case_rng *r, const ac_caps *caps)
{
    int top = gen_head_dim_top(caps);
    if (caps->n_head_dims > 0) {
        int n = caps->n_head_dims < AC_MAX_LISTED_HEAD_DIMS ? caps->n_head_dims : AC_MAX_LISTED_HEAD_DIMS;
        return caps->head_dims[case_rng_int(r, 0, n - 1)];
    }
    static const int w[] = {15, 35, 40, 10};
    static const int pow2[] = {16, 32, 64};
    int large[] = {80, 96, 128, 160, 256, top};
    int small_top = top < 8 ? top : 8, mid_top = top < 64 ? top : 64;
    switch (case_rng_pick(r, w, COUNT(w))) {
    case 0:
        return case_rng_int(r, 1, small_top);
    case 1:
        return gen_pick_le(r, pow2, COUNT(pow2), top, case_rng_int(r, 1, top));
    case 2:
        return case_rng_int(r, mid_top < 9 ? 1 : 9, mid_top);
    default:
        return gen_pick_le(r, large, COUNT(large), top, case_rng_int(r, 1, top));
    }
}

/* Varlen: per-sequence lengths for q, k or both. */
void gen_draw_lens(case_rng *r, int batch, int padded, int *lens)
{
    static const int w[] = {5, 10, 25, 60};
    for (int b = 0; b < batch; b++) {
        switch (case_rng_pick(r, w, COUNT(w))) {
        case 0:
            lens[b] = 0;
            break;
        case 1:
            lens[b] = 1;
            break;
        case 2:
            lens[b] = padded;
            break;
        default:
            lens[b] = case_rng_int(r, 1, padded);
            break;
        }
    }
}

static void draw_varlen(case_rng *r, ac_case *c)
{
    if (case_rng_u64(r) % 4 != 0)
        return;
    static const int w[] = {50, 25, 25};
    int which = case_rng_pick(r, w, COUNT(w));
    if (which != 2) {
        c->n_seqlens_q = c->batch;
        gen_draw_lens(r, c->batch, c->seqlen_q, c->seqlens_q);
    }
    if (which != 1) {
        c->n_seqlens_k = c->batch;
        gen_draw_lens(r, c->batch, c->seqlen_k, c->seqlens_k);
    }
}

/* ---- masks ----------------------------------------------------------------------- */

/* Weights of the mask kinds (harness/case/masks.c) the kernel claims, with
 * what they are claimed with (a window comes in the alignments claimed for
 * causal), and the filter keeps. */
static void mask_weights(const ac_gen *g, int w[AC_MASK_KIND_COUNT])
{
    unsigned claimed = g->caps.masks ? g->caps.masks : AC_MASKCAP_NONE;
    unsigned allowed = g->mask_filter ? g->mask_filter : ~0u;
    for (int k = 0; k < AC_MASK_KIND_COUNT; k++) {
        unsigned needs = ac_mask_needs((ac_mask_kind)k);
        bool on = (claimed & needs) == needs && (allowed & (1u << k));
        w[k] = on ? case_mask_weight((ac_mask_kind)k) : 0;
    }
}

void gen_draw_mask(case_rng *r, const int w[AC_MASK_KIND_COUNT], ac_case *c)
{
    ac_case_set_mask(c, (ac_mask_kind)case_rng_pick(r, w, AC_MASK_KIND_COUNT));
    case_mask_draw(r, c);
}

/* The default profile's lengths, batch, heads, head dim and mask, in the
 * stream's order. */
static void draw_default_shape(case_rng *r, const ac_gen *g, const int mw[AC_MASK_KIND_COUNT], ac_case *c)
{
    int max_len = ac_gen_max_seqlen(g);
    c->seqlen_q = gen_fold_length(g, draw_length(r, max_len));
    c->seqlen_k = case_rng_u64(r) % 10 < 3 ? c->seqlen_q : gen_fold_length(g, draw_length(r, max_len));
    static const int wb[] = {60, 25, 15};
    c->batch = 1 + case_rng_pick(r, wb, COUNT(wb));
    draw_heads(r, g->caps.gqa, c);
    c->head_dim = gen_draw_head_dim(r, &g->caps);
    gen_draw_mask(r, mw, c);
}

/* ---- distributions and scale -------------------------------------------------- */

typedef struct {
    int weight;
    ac_dist_kind kind;
    double a, b;
} dist_choice;

static const dist_choice dists[] = {
    {15, AC_DIST_NORMAL, 0, 1},     {5, AC_DIST_NORMAL, 0, 0.1},    {5, AC_DIST_NORMAL, 0, 4},
    {5, AC_DIST_NORMAL, 1, 0.5},    {5, AC_DIST_UNIFORM, -1, 1},    {4, AC_DIST_UNIFORM, 0, 1},
    {3, AC_DIST_UNIFORM, -4, 4},    {5, AC_DIST_OUTLIERS, 1, 0.01}, {3, AC_DIST_OUTLIERS, 1, 0.001},
    {3, AC_DIST_INCREASING, 8, 0},  {3, AC_DIST_INCREASING, 16, 0}, {2, AC_DIST_INCREASING, 32, 0},
    {2, AC_DIST_INCREASING, 64, 0}, {7, AC_DIST_EQUAL, 0, 0},       {3, AC_DIST_DOMINANT, 2, 0},
    {3, AC_DIST_DOMINANT, 8, 0},    {3, AC_DIST_DOMINANT, 20, 0},   {3, AC_DIST_HUGE, 0.6, 0},
    {3, AC_DIST_HUGE, 0.9, 0},      {4, AC_DIST_HUGE, 1, 0},        {9, AC_DIST_TINY, 0, 0},
};

static void draw_dist(case_rng *r, ac_case *c)
{
    int w[COUNT(dists)];
    for (int i = 0; i < COUNT(dists); i++)
        w[i] = dists[i].weight;
    const dist_choice *d = &dists[case_rng_pick(r, w, COUNT(dists))];
    c->dist = d->kind;
    c->dist_a = d->a;
    c->dist_b = d->b;
}

static void draw_scale(case_rng *r, ac_case *c)
{
    static const int w[] = {85, 3, 3, 3, 3, 3};
    static const double vals[] = {0, 1, 0.5, 0.3, 0.05, 2};
    int i = case_rng_pick(r, w, COUNT(w));
    c->scale_auto = i == 0;
    c->scale = (double)(float)(i == 0 ? 1.0 / sqrt((double)c->head_dim) : vals[i]);
}

/* ---- the size cap ---------------------------------------------------------------- */

static double work_of(const ac_case *c)
{
    return (double)c->batch * c->heads_q * c->seqlen_q * c->seqlen_k * c->head_dim;
}

/* The cpu tier's: N^2 16 for the length cap N, at least 2^22. */
static double cpu_work_cap(const ac_gen *g)
{
    double n = ac_gen_max_seqlen(g);
    return n * n * 16 > 0x1p22 ? n * n * 16 : 0x1p22;
}

double ac_gen_max_work(const ac_gen *g)
{
    if (g->cap.max_work < 0)
        return INFINITY;
    return g->cap.max_work > 0 ? g->cap.max_work : cpu_work_cap(g);
}

bool gen_keeps_cap(const ac_gen *g, const ac_case *c)
{
    /* the gpu tier computes no variant (ref_gpu_supports): a case using one keeps the cpu tier's cap */
    double cap = g->cap.max_work < 0 && case_variants_any(c) ? cpu_work_cap(g) : ac_gen_max_work(g);
    return work_of(c) <= cap && (!g->cap.fits || g->cap.fits(c, g->cap.ctx));
}

static void one_sequence(ac_case *c)
{
    c->batch = 1;
    c->n_seqlens_q = c->n_seqlens_q ? 1 : 0;
    c->n_seqlens_k = c->n_seqlens_k ? 1 : 0;
}

/* Halves the longer length (the per-sequence lengths with it), keeping causal
 * windows and the floor min_len where it can. */
static bool halve_longer(ac_case *c, int min_len)
{
    int *len = c->seqlen_k >= c->seqlen_q ? &c->seqlen_k : &c->seqlen_q;
    int *lens = len == &c->seqlen_k ? c->seqlens_k : c->seqlens_q;
    int n = len == &c->seqlen_k ? c->n_seqlens_k : c->n_seqlens_q;
    if (*len <= 1)
        return false;
    int half = *len / 2 > min_len ? *len / 2 : (*len > min_len ? min_len : *len / 2);
    for (int b = 0; b < n; b++)
        lens[b] = lens[b] > half ? half : lens[b];
    *len = half;
    return true;
}

void gen_apply_cap(const ac_gen *g, ac_case *c)
{
    if (gen_keeps_cap(g, c))
        return;
    one_sequence(c);
    if (!gen_keeps_cap(g, c)) {
        c->heads_q /= c->heads_kv;
        c->heads_kv = 1;
    }
    while (!gen_keeps_cap(g, c) && g->caps.n_head_dims == 0 && c->head_dim > 1 && !c->v_from_k) /* v=k: d >= d_v */
        c->head_dim /= 2;
    while (!gen_keeps_cap(g, c) && halve_longer(c, ac_gen_min_seqlen(g)))
        ;
    if (c->scale_auto)
        c->scale = (double)(float)(1.0 / sqrt((double)c->head_dim));
}

/* ---- the stream ------------------------------------------------------------------- */

static const char *const profile_names[] = {
    [AC_PROFILE_DEFAULT] = "default", [AC_PROFILE_LONG] = "long", [AC_PROFILE_DECODE] = "decode"};

const char *ac_profile_name(ac_profile p) { return (unsigned)p < COUNT(profile_names) ? profile_names[p] : "?"; }

int ac_profile_parse(const char *name, ac_profile *out, ac_err *err)
{
    for (int i = 0; i < COUNT(profile_names); i++)
        if (name && strcmp(name, profile_names[i]) == 0) {
            *out = (ac_profile)i;
            return AC_OK;
        }
    return ac_fail(err, AC_ERR_INPUT, "--profile: unknown profile '%s' (default, long, decode)", name ? name : "");
}

void ac_gen_init(ac_gen *g, uint64_t campaign_seed, const ac_caps *caps)
{
    memset(g, 0, sizeof *g);
    g->campaign_seed = campaign_seed;
    if (caps)
        g->caps = *caps;
}

static int uniform_bit(case_rng *r, unsigned bits)
{
    int set[32], n = 0;
    for (int i = 0; i < 32; i++)
        if (bits & (1u << i))
            set[n++] = i;
    return set[case_rng_int(r, 0, n - 1)];
}

static int check_choices(const ac_gen *g, unsigned dtypes, const int mw[AC_MASK_KIND_COUNT], ac_err *err)
{
    if (!dtypes)
        return ac_fail(err, AC_ERR_INPUT, "generator: no dtype left (kernel claims 0x%x, filter 0x%x)", g->caps.dtypes,
                       g->dtype_filter);
    int total = 0;
    for (int i = 0; i < AC_MASK_KIND_COUNT; i++)
        total += mw[i];
    if (!total)
        return ac_fail(err, AC_ERR_INPUT, "generator: no mask kind left (kernel claims 0x%x, filter 0x%x)",
                       g->caps.masks, g->mask_filter);
    if (ac_gen_min_seqlen(g) > ac_gen_max_seqlen(g))
        return ac_fail(err, AC_ERR_INPUT, "generator: --min-seqlen %d is above the length cap %d%s",
                       ac_gen_min_seqlen(g), ac_gen_max_seqlen(g),
                       g->caps.max_seqlen ? " (the kernel's max-seqlen or --max-seqlen)" : " (--max-seqlen)");
    return AC_OK;
}

int ac_gen_case_at(const ac_gen *g, uint64_t index, ac_case *out, ac_err *err)
{
    unsigned dtypes = g->caps.dtypes & (g->dtype_filter ? g->dtype_filter : ~0u) & ((1u << AC_DTYPE_COUNT) - 1);
    unsigned layouts = g->caps.layouts & ((1u << AC_LAYOUT_BHSD) | (1u << AC_LAYOUT_BSHD));
    int mw[AC_MASK_KIND_COUNT];
    mask_weights(g, mw);
    int st = check_choices(g, dtypes, mw, err);
    if (st != AC_OK)
        return st;
    case_rng r = case_stream(g->campaign_seed, index);
    ac_case c = ac_case_default();
    c.dtype = (ac_dtype)uniform_bit(&r, dtypes);
    c.layout = layouts ? (ac_layout)uniform_bit(&r, layouts) : AC_LAYOUT_BHSD;
    if (g->profile == AC_PROFILE_LONG)
        gen_long_shape(&r, g, mw, &c);
    else if (g->profile == AC_PROFILE_DECODE)
        gen_decode_shape(&r, g, mw, &c);
    else
        draw_default_shape(&r, g, mw, &c);
    if (g->caps.varlen)
        draw_varlen(&r, &c);
    draw_dist(&r, &c);
    draw_scale(&r, &c);
    c.seed = case_rng_u64(&r) >> 34; /* 30 bits: short lines */
    case_variants_draw(g->campaign_seed, index, &g->caps, &c); /* gen_variants.c */
    if (g->profile == AC_PROFILE_DECODE)
        case_mla_draw(g->campaign_seed, index, &g->caps, &c);
    case_fp8_draw(g->campaign_seed, index, &g->caps, &c); /* gen_fp8.c */
    gen_apply_cap(g, &c);
    case_variants_after_cap(&g->caps, &c);
    case_vk_apply(&g->caps, &c);
    st = ac_case_validate(&c, err);
    if (st != AC_OK)
        return st;
    *out = c;
    return AC_OK;
}

int ac_gen_next(ac_gen *g, ac_case *c, ac_err *err)
{
    int st = ac_gen_case_at(g, g->index, c, err);
    if (st == AC_OK)
        g->index++;
    return st;
}
