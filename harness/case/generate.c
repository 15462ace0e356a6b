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
 *             (over the claimed & filtered ones; windows in the causal alignments claimed)
 *   window    (0,0) width 1: 15, (k,0) local causal: 25, (inf,k): 15, (k,inf): 10, (k1,k2): 35;
 *             k: 1: 20, 2: 15, 3..16: 40, N/4..N: 25
 *   dense     keep 0.05: 10, 0.3: 20, 0.5: 25, 0.9: 25, 1: 20;
 *             maskrows 0: 50, 0.1: 15, 0.25: 15, 0.5: 12, 1 (every row): 8
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
 * Size: most cases are small (lengths <= 80, d <= 64, a few heads); when
 * b * hq * nq * nk * d exceeds max(2^22, 16 N^2) the case drops to b = 1, one
 * KV head, then halves d (unlisted dims), so the rare large-N case stays cheap. */
#include <math.h>
#include <string.h>

#include "harness/case/generate.h"
#include "ref/rng.h"

/* ---- the per-case stream ------------------------------------------------------ */

typedef struct {
    uint64_t state;
} rng;

static rng case_stream(uint64_t campaign_seed, uint64_t index)
{
    uint64_t s = campaign_seed;
    uint64_t a = ac_splitmix64(&s);
    s = a ^ (index * 0xD1B54A32D192ED03ull + 0x2545F4914F6CDD1Dull);
    rng r = {ac_splitmix64(&s)};
    return r;
}

static uint64_t next_u64(rng *r) { return ac_splitmix64(&r->state); }

/* Uniform integer in lo..hi (inclusive). */
static int uniform_int(rng *r, int lo, int hi)
{
    if (hi <= lo)
        return lo;
    return lo + (int)(next_u64(r) % (uint64_t)(hi - lo + 1));
}

/* Index i with probability weights[i] / sum; weights of 0 are never drawn. */
static int pick(rng *r, const int *weights, int n)
{
    int total = 0;
    for (int i = 0; i < n; i++)
        total += weights[i];
    int x = (int)(next_u64(r) % (uint64_t)total);
    for (int i = 0; i < n; i++) {
        if (x < weights[i])
            return i;
        x -= weights[i];
    }
    return n - 1;
}

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* One of the values <= max (uniform), or fallback when none is. */
static int pick_le(rng *r, const int *vals, int n, int max, int fallback)
{
    int ok[32], m = 0;
    for (int i = 0; i < n && m < 32; i++)
        if (vals[i] <= max)
            ok[m++] = vals[i];
    return m ? ok[uniform_int(r, 0, m - 1)] : fallback;
}

/* ---- sizes --------------------------------------------------------------------- */

int ac_gen_max_seqlen(const ac_gen *g)
{
    int m = g->max_seqlen > 0 ? g->max_seqlen : AC_GEN_DEFAULT_MAX_SEQLEN;
    if (g->caps.max_seqlen > 0 && g->caps.max_seqlen < m)
        m = g->caps.max_seqlen;
    return m;
}

static int draw_length(rng *r, int max)
{
    static const int w[] = {12, 50, 10, 12, 4, 3};
    static const int tiles[] = {63, 64, 65, 127, 128, 129};
    static const int primes[] = {5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 97, 101, 113, 131, 257};
    static const int powers[] = {16, 32, 256};
    int small_hi = max < 80 ? max : 80;
    switch (pick(r, w, COUNT(w))) {
    case 0: return uniform_int(r, 1, max < 3 ? max : 3);
    case 2: return pick_le(r, tiles, COUNT(tiles), max, uniform_int(r, 1, small_hi));
    case 3: return pick_le(r, primes, COUNT(primes), max, uniform_int(r, 1, small_hi));
    case 4: return pick_le(r, powers, COUNT(powers), max, uniform_int(r, 1, small_hi));
    case 5: return max > 129 ? uniform_int(r, 129, max) : uniform_int(r, 1, max);
    default: return uniform_int(r, small_hi < 4 ? 1 : 4, small_hi);
    }
}

static void draw_heads(rng *r, bool gqa, ac_case *c)
{
    if (!gqa) {
        static const int w[] = {50, 30, 20};
        c->heads_q = c->heads_kv = 1 + pick(r, w, COUNT(w));
        return;
    }
    static const int w[] = {50, 35, 15};
    static const int groups[] = {2, 4, 8};
    switch (pick(r, w, COUNT(w))) {
    case 0: c->heads_q = c->heads_kv = uniform_int(r, 1, 3); break;
    case 1:
        c->heads_kv = uniform_int(r, 1, 2);
        c->heads_q = c->heads_kv * groups[uniform_int(r, 0, 2)];
        break;
    default: c->heads_kv = 1, c->heads_q = uniform_int(r, 2, 8); break;
    }
}

static int draw_head_dim(rng *r, const ac_caps *caps)
{
    int top = caps->max_head_dim > 0 && caps->max_head_dim < AC_MAX_HEAD_DIM ? caps->max_head_dim : AC_MAX_HEAD_DIM;
    if (caps->n_head_dims > 0) {
        int n = caps->n_head_dims < AC_MAX_LISTED_HEAD_DIMS ? caps->n_head_dims : AC_MAX_LISTED_HEAD_DIMS;
        return caps->head_dims[uniform_int(r, 0, n - 1)];
    }
    static const int w[] = {15, 35, 40, 10};
    static const int pow2[] = {16, 32, 64};
    int large[] = {80, 96, 128, 160, 256, top};
    int small_top = top < 8 ? top : 8, mid_top = top < 64 ? top : 64;
    switch (pick(r, w, COUNT(w))) {
    case 0: return uniform_int(r, 1, small_top);
    case 1: return pick_le(r, pow2, COUNT(pow2), top, uniform_int(r, 1, top));
    case 2: return uniform_int(r, mid_top < 9 ? 1 : 9, mid_top);
    default: return pick_le(r, large, COUNT(large), top, uniform_int(r, 1, top));
    }
}

/* Varlen: per-sequence lengths for q, k or both. */
static void draw_one_lens(rng *r, int batch, int padded, int *lens)
{
    static const int w[] = {5, 10, 25, 60};
    for (int b = 0; b < batch; b++) {
        switch (pick(r, w, COUNT(w))) {
        case 0: lens[b] = 0; break;
        case 1: lens[b] = 1; break;
        case 2: lens[b] = padded; break;
        default: lens[b] = uniform_int(r, 1, padded); break;
        }
    }
}

static void draw_varlen(rng *r, ac_case *c)
{
    if (next_u64(r) % 4 != 0)
        return;
    static const int w[] = {50, 25, 25};
    int which = pick(r, w, COUNT(w));
    if (which != 2) {
        c->n_seqlens_q = c->batch;
        draw_one_lens(r, c->batch, c->seqlen_q, c->seqlens_q);
    }
    if (which != 1) {
        c->n_seqlens_k = c->batch;
        draw_one_lens(r, c->batch, c->seqlen_k, c->seqlens_k);
    }
}

/* ---- masks ----------------------------------------------------------------------- */

enum { MV_NONE, MV_CAUSAL_TL, MV_CAUSAL_BR, MV_WINDOW_TL, MV_WINDOW_BR, MV_DENSE, MV_COUNT };

/* Weights of the mask variants the kernel claims and the filter keeps. */
static void mask_weights(const ac_gen *g, int w[MV_COUNT])
{
    static const int base[MV_COUNT] = {4, 4, 4, 3, 3, 4};
    unsigned claimed = g->caps.masks ? g->caps.masks : AC_MASKCAP_NONE;
    unsigned allowed = claimed & (g->mask_filter ? g->mask_filter : AC_MASKCAP_ALL);
    bool any_causal = claimed & (AC_MASKCAP_CAUSAL_TL | AC_MASKCAP_CAUSAL_BR);
    bool window = allowed & AC_MASKCAP_WINDOW;
    bool on[MV_COUNT] = {
        [MV_NONE] = allowed & AC_MASKCAP_NONE,
        [MV_CAUSAL_TL] = allowed & AC_MASKCAP_CAUSAL_TL,
        [MV_CAUSAL_BR] = allowed & AC_MASKCAP_CAUSAL_BR,
        /* windows come in the alignments claimed for causal (top-left if none is) */
        [MV_WINDOW_TL] = window && ((claimed & AC_MASKCAP_CAUSAL_TL) || !any_causal),
        [MV_WINDOW_BR] = window && (claimed & AC_MASKCAP_CAUSAL_BR),
        [MV_DENSE] = allowed & AC_MASKCAP_DENSE,
    };
    for (int i = 0; i < MV_COUNT; i++)
        w[i] = on[i] ? base[i] : 0;
}

static int window_side(rng *r, int n)
{
    static const int w[] = {20, 15, 40, 25};
    switch (pick(r, w, COUNT(w))) {
    case 0: return 1;
    case 1: return 2;
    case 2: return uniform_int(r, 3, 16);
    default: return uniform_int(r, n / 4 > 0 ? n / 4 : 1, n);
    }
}

static void draw_window(rng *r, ac_case *c)
{
    static const int w[] = {15, 25, 15, 10, 35};
    int n = c->seqlen_q > c->seqlen_k ? c->seqlen_q : c->seqlen_k;
    int left = 0, right = 0;
    switch (pick(r, w, COUNT(w))) {
    case 0: break;                                                      /* width 1: the diagonal */
    case 1: left = window_side(r, n); break;                            /* local causal */
    case 2: left = AC_WINDOW_INF, right = window_side(r, n); break;     /* causal + look-ahead */
    case 3: left = window_side(r, n), right = AC_WINDOW_INF; break;
    default: left = window_side(r, n), right = window_side(r, n); break;
    }
    c->window_left = left;
    c->window_right = right;
}

static void draw_dense(rng *r, ac_case *c)
{
    static const int wk[] = {10, 20, 25, 25, 20};
    static const double keeps[] = {0.05, 0.3, 0.5, 0.9, 1.0};
    static const int wr[] = {50, 15, 15, 12, 8};
    static const double rows[] = {0.0, 0.1, 0.25, 0.5, 1.0};
    c->dense_keep = keeps[pick(r, wk, COUNT(wk))];
    c->masked_rows = rows[pick(r, wr, COUNT(wr))];
}

static void draw_mask(rng *r, const int w[MV_COUNT], ac_case *c)
{
    int v = pick(r, w, MV_COUNT);
    c->align = (v == MV_CAUSAL_BR || v == MV_WINDOW_BR) ? AC_ALIGN_BOTTOM_RIGHT : AC_ALIGN_TOP_LEFT;
    switch (v) {
    case MV_CAUSAL_TL: case MV_CAUSAL_BR:
        c->mask = AC_CMASK_CAUSAL;
        c->window_left = AC_WINDOW_INF;
        c->window_right = 0;
        break;
    case MV_WINDOW_TL: case MV_WINDOW_BR:
        c->mask = AC_CMASK_WINDOW;
        draw_window(r, c);
        break;
    case MV_DENSE:
        c->mask = AC_CMASK_DENSE;
        draw_dense(r, c);
        break;
    default: c->mask = AC_CMASK_NONE; break;
    }
}

/* ---- distributions and scale -------------------------------------------------- */

typedef struct {
    int weight;
    ac_dist_kind kind;
    double a, b;
} dist_choice;

static const dist_choice dists[] = {
    {15, AC_DIST_NORMAL, 0, 1}, {5, AC_DIST_NORMAL, 0, 0.1}, {5, AC_DIST_NORMAL, 0, 4}, {5, AC_DIST_NORMAL, 1, 0.5},
    {5, AC_DIST_UNIFORM, -1, 1}, {4, AC_DIST_UNIFORM, 0, 1}, {3, AC_DIST_UNIFORM, -4, 4},
    {5, AC_DIST_OUTLIERS, 1, 0.01}, {3, AC_DIST_OUTLIERS, 1, 0.001},
    {3, AC_DIST_INCREASING, 8, 0}, {3, AC_DIST_INCREASING, 16, 0}, {2, AC_DIST_INCREASING, 32, 0},
    {2, AC_DIST_INCREASING, 64, 0},
    {7, AC_DIST_EQUAL, 0, 0},
    {3, AC_DIST_DOMINANT, 2, 0}, {3, AC_DIST_DOMINANT, 8, 0}, {3, AC_DIST_DOMINANT, 20, 0},
    {3, AC_DIST_HUGE, 0.6, 0}, {3, AC_DIST_HUGE, 0.9, 0}, {4, AC_DIST_HUGE, 1, 0},
    {9, AC_DIST_TINY, 0, 0},
};

static void draw_dist(rng *r, ac_case *c)
{
    int w[COUNT(dists)];
    for (int i = 0; i < COUNT(dists); i++)
        w[i] = dists[i].weight;
    const dist_choice *d = &dists[pick(r, w, COUNT(dists))];
    c->dist = d->kind;
    c->dist_a = d->a;
    c->dist_b = d->b;
}

static void draw_scale(rng *r, ac_case *c)
{
    static const int w[] = {85, 3, 3, 3, 3, 3};
    static const double vals[] = {0, 1, 0.5, 0.3, 0.05, 2};
    int i = pick(r, w, COUNT(w));
    c->scale_auto = i == 0;
    c->scale = (double)(float)(i == 0 ? 1.0 / sqrt((double)c->head_dim) : vals[i]);
}

/* ---- the work cap ---------------------------------------------------------------- */

static double work_of(const ac_case *c)
{
    return (double)c->batch * c->heads_q * c->seqlen_q * c->seqlen_k * c->head_dim;
}

static void cap_work(const ac_gen *g, ac_case *c)
{
    double n = ac_gen_max_seqlen(g), cap = n * n * 16 > 0x1p22 ? n * n * 16 : 0x1p22;
    if (work_of(c) <= cap)
        return;
    c->batch = 1;
    c->n_seqlens_q = c->n_seqlens_q ? 1 : 0;
    c->n_seqlens_k = c->n_seqlens_k ? 1 : 0;
    if (work_of(c) > cap) {
        c->heads_q /= c->heads_kv;
        c->heads_kv = 1;
    }
    while (work_of(c) > cap && g->caps.n_head_dims == 0 && c->head_dim > 1)
        c->head_dim /= 2;
    if (c->scale_auto)
        c->scale = (double)(float)(1.0 / sqrt((double)c->head_dim));
}

/* ---- the stream ------------------------------------------------------------------- */

void ac_gen_init(ac_gen *g, uint64_t campaign_seed, const ac_caps *caps)
{
    memset(g, 0, sizeof *g);
    g->campaign_seed = campaign_seed;
    if (caps)
        g->caps = *caps;
}

static int uniform_bit(rng *r, unsigned bits)
{
    int set[32], n = 0;
    for (int i = 0; i < 32; i++)
        if (bits & (1u << i))
            set[n++] = i;
    return set[uniform_int(r, 0, n - 1)];
}

static int check_choices(const ac_gen *g, unsigned dtypes, const int mw[MV_COUNT], ac_err *err)
{
    if (!dtypes)
        return ac_fail(err, AC_ERR_INPUT, "generator: no dtype left (kernel claims 0x%x, filter 0x%x)",
                       g->caps.dtypes, g->dtype_filter);
    int total = 0;
    for (int i = 0; i < MV_COUNT; i++)
        total += mw[i];
    if (!total)
        return ac_fail(err, AC_ERR_INPUT, "generator: no mask kind left (kernel claims 0x%x, filter 0x%x)",
                       g->caps.masks, g->mask_filter);
    return AC_OK;
}

int ac_gen_case_at(const ac_gen *g, uint64_t index, ac_case *out, ac_err *err)
{
    unsigned dtypes = g->caps.dtypes & (g->dtype_filter ? g->dtype_filter : ~0u) & ((1u << AC_DTYPE_COUNT) - 1);
    unsigned layouts = g->caps.layouts & ((1u << AC_LAYOUT_BHSD) | (1u << AC_LAYOUT_BSHD));
    int mw[MV_COUNT];
    mask_weights(g, mw);
    int st = check_choices(g, dtypes, mw, err);
    if (st != AC_OK)
        return st;
    rng r = case_stream(g->campaign_seed, index);
    ac_case c = ac_case_default();
    int max_len = ac_gen_max_seqlen(g);
    c.dtype = (ac_dtype)uniform_bit(&r, dtypes);
    c.layout = layouts ? (ac_layout)uniform_bit(&r, layouts) : AC_LAYOUT_BHSD;
    c.seqlen_q = draw_length(&r, max_len);
    c.seqlen_k = next_u64(&r) % 10 < 3 ? c.seqlen_q : draw_length(&r, max_len);
    static const int wb[] = {60, 25, 15};
    c.batch = 1 + pick(&r, wb, COUNT(wb));
    draw_heads(&r, g->caps.gqa, &c);
    c.head_dim = draw_head_dim(&r, &g->caps);
    draw_mask(&r, mw, &c);
    if (g->caps.varlen)
        draw_varlen(&r, &c);
    draw_dist(&r, &c);
    draw_scale(&r, &c);
    c.seed = next_u64(&r) >> 34; /* 30 bits: short lines */
    cap_work(g, &c);
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
