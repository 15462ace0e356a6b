/* harness/case/generate_long.c — the long-context profile (--profile long):
 * where long-context attention bugs live.  Lengths lo..hi (lo = min_seqlen,
 * default 2048; hi = max_seqlen, default 131072), every weight relative:
 *   shape     nq = nk: 40;  decode-like (Nq << Nk): 20;  nq, nk drawn apart: 30;
 *             a K/V tensor of >= 2^31 elements (int32 offsets overflow): 10, only
 *             when it keeps the size cap (the reference tier's memory), else nq = nk
 *   length    a power of two in lo..hi: 30;  a power of two +-1: 25;  a tile-edge
 *             remainder m*T + r, T in {64, 128}, r in {1, T/2, T-1}: 25;  uniform: 20
 *   decode nq 1: 20, 2..16: 30, 64: 10, 127/128/129: 20, 1..512: 20 (<= nk; below
 *             the floor on purpose), with causal-br 60% when claimed
 *   batch     1: 80, 2: 15, 4: 5
 *   heads     with GQA: MHA hq = hkv in 1..4: 25, GQA hkv 1..4 x group 2/4/8: 60,
 *             MQA hkv = 1, hq 4/8/16: 15;  without: hq = hkv in 1..4
 *   head dim  listed dims: uniform; else 128: 35, 64: 25, 256: 10, 80/96/160: 10,
 *             32: 10, 1..63: 10 (<= max_head_dim)
 *   mask      the kind weights of masks.c (claimed and filtered)
 * The 2^31 shape: b = 1, d the largest claimed dim <= 256 (128 when any is
 * claimed), nk = hi, hkv = hq = the fewest heads with hkv * nk * d >= 2^31, and a
 * decode-like nq, so that K and V cross 2^31 elements while the work stays
 * that of a few query rows. */
#include <math.h>

#include "harness/case/generate_internal.h"

enum { SHAPE_SAME, SHAPE_DECODE, SHAPE_APART, SHAPE_CROSS31 };

#define ELEMS_2_31 2147483648.0

/* The powers of two in lo..hi, at most 31; how many. */
static int powers_in(int lo, int hi, int *out)
{
    int n = 0;
    for (long p = 1; p <= hi && n < 31; p *= 2)
        if (p >= lo)
            out[n++] = (int)p;
    return n;
}

static int power_or_neighbour(case_rng *r, int lo, int hi, bool neighbour)
{
    int pw[31], n = powers_in(lo > 1 ? lo - 1 : 1, hi < 0x40000000 ? hi + 1 : hi, pw);
    if (n == 0)
        return case_rng_int(r, lo, hi);
    int len = pw[case_rng_int(r, 0, n - 1)];
    if (neighbour)
        len += case_rng_u64(r) % 2 ? 1 : -1;
    return len < lo ? lo : len > hi ? hi : len;
}

/* m * T + r within lo..hi: one past a tile edge, half a tile, or one short of the next. */
static int tile_remainder(case_rng *r, int lo, int hi)
{
    int tile = case_rng_u64(r) % 2 ? 128 : 64;
    int rems[] = {1, tile / 2, tile - 1};
    int rem = rems[case_rng_int(r, 0, COUNT(rems) - 1)];
    int m_lo = lo > rem ? (lo - rem + tile - 1) / tile : 0, m_hi = (hi - rem) / tile;
    if (hi < rem || m_hi < m_lo)
        return case_rng_int(r, lo, hi);
    return case_rng_int(r, m_lo, m_hi) * tile + rem;
}

int gen_long_length(case_rng *r, int lo, int hi)
{
    static const int w[] = {30, 25, 25, 20};
    switch (case_rng_pick(r, w, COUNT(w))) {
    case 0:
        return power_or_neighbour(r, lo, hi, false);
    case 1:
        return power_or_neighbour(r, lo, hi, true);
    case 2:
        return tile_remainder(r, lo, hi);
    default:
        return case_rng_int(r, lo, hi);
    }
}

static int decode_rows(case_rng *r, int nk)
{
    static const int w[] = {20, 30, 10, 20, 20};
    int nq;
    switch (case_rng_pick(r, w, COUNT(w))) {
    case 0:
        nq = 1;
        break;
    case 1:
        nq = case_rng_int(r, 2, 16);
        break;
    case 2:
        nq = 64;
        break;
    case 3:
        nq = 127 + case_rng_int(r, 0, 2);
        break;
    default:
        nq = case_rng_int(r, 1, 512);
        break;
    }
    return nq < nk ? nq : nk;
}

static void long_heads(case_rng *r, bool gqa, ac_case *c)
{
    static const int w[] = {25, 60, 15};
    static const int groups[] = {2, 4, 8}, mqa[] = {4, 8, 16};
    switch (gqa ? case_rng_pick(r, w, COUNT(w)) : 0) {
    case 0:
        c->heads_q = c->heads_kv = case_rng_int(r, 1, 4);
        break;
    case 1:
        c->heads_kv = case_rng_int(r, 1, 4);
        c->heads_q = c->heads_kv * groups[case_rng_int(r, 0, COUNT(groups) - 1)];
        break;
    default:
        c->heads_kv = 1, c->heads_q = mqa[case_rng_int(r, 0, COUNT(mqa) - 1)];
        break;
    }
}

static int long_head_dim(case_rng *r, const ac_caps *caps)
{
    if (caps->n_head_dims > 0)
        return gen_draw_head_dim(r, caps);
    int top = gen_head_dim_top(caps);
    static const int w[] = {35, 25, 10, 10, 10, 10};
    static const int mid[] = {80, 96, 160};
    int d;
    switch (case_rng_pick(r, w, COUNT(w))) {
    case 0:
        d = 128;
        break;
    case 1:
        d = 64;
        break;
    case 2:
        d = 256;
        break;
    case 3:
        d = mid[case_rng_int(r, 0, COUNT(mid) - 1)];
        break;
    case 4:
        d = 32;
        break;
    default:
        d = case_rng_int(r, 1, 63);
        break;
    }
    return d <= top ? d : case_rng_int(r, 1, top);
}

/* The largest claimed head dim <= 256 (128 when any dim is claimed). */
static int cross31_head_dim(const ac_caps *caps)
{
    int best = 0;
    for (int i = 0; i < caps->n_head_dims && i < AC_MAX_LISTED_HEAD_DIMS; i++)
        if (caps->head_dims[i] <= 256 && caps->head_dims[i] > best)
            best = caps->head_dims[i];
    if (caps->n_head_dims > 0)
        return best ? best : caps->head_dims[0];
    int top = gen_head_dim_top(caps);
    return top < 128 ? top : 128;
}

static void decode_mask(case_rng *r, const int mw[AC_MASK_KIND_COUNT], ac_case *c)
{
    if (mw[AC_MASK_CAUSAL_BR] > 0 && case_rng_u64(r) % 10 < 6) {
        ac_case_set_mask(c, AC_MASK_CAUSAL_BR);
        case_mask_draw(r, c);
    } else {
        gen_draw_mask(r, mw, c);
    }
}

/* K and V of >= 2^31 elements with a decode-like query; false when that
 * breaks the size cap (c is then left for the caller to redraw). */
static bool cross31_shape(case_rng *r, const ac_gen *g, const int mw[AC_MASK_KIND_COUNT], ac_case *c)
{
    int hi = ac_gen_max_seqlen(g), d = cross31_head_dim(&g->caps);
    double heads = floor(ELEMS_2_31 / ((double)hi * d)) + 1;
    if (heads > 4096)
        return false; /* lengths this short need absurd head counts: not a long-context shape */
    c->batch = 1;
    c->head_dim = d;
    c->seqlen_k = hi;
    c->heads_kv = c->heads_q = (int)heads;
    c->seqlen_q = decode_rows(r, hi);
    decode_mask(r, mw, c);
    return gen_keeps_cap(g, c);
}

void gen_long_shape(case_rng *r, const ac_gen *g, const int mw[AC_MASK_KIND_COUNT], ac_case *c)
{
    static const int w[] = {40, 20, 30, 10};
    static const int wb[] = {80, 15, 5}, batches[] = {1, 2, 4};
    int lo = ac_gen_min_seqlen(g), hi = ac_gen_max_seqlen(g);
    int shape = case_rng_pick(r, w, COUNT(w));
    ac_case before = *c;
    if (shape == SHAPE_CROSS31 && cross31_shape(r, g, mw, c))
        return;
    *c = before; /* what the refused 2^31 shape drew is dropped */
    c->seqlen_k = gen_long_length(r, lo, hi);
    c->seqlen_q = shape == SHAPE_DECODE ? decode_rows(r, c->seqlen_k)
        : shape == SHAPE_APART          ? gen_long_length(r, lo, hi)
                                        : c->seqlen_k;
    c->batch = batches[case_rng_pick(r, wb, COUNT(wb))];
    long_heads(r, g->caps.gqa, c);
    c->head_dim = long_head_dim(r, &g->caps);
    if (shape == SHAPE_DECODE)
        decode_mask(r, mw, c);
    else
        gen_draw_mask(r, mw, c);
}
