/* harness/case/generate_decode.c — the decode profile (--profile decode): a
 * serving engine's attention, where split-KV and paged caches break.  Lengths
 * up to max_seqlen (default 131072), every weight relative:
 *   nq        1: 35, 2..16 (speculative decoding): 65
 *   nk        1..64: 15; a long-context length (a power of two (+-1), a tile-edge
 *             remainder m*T + r, T in {64, 128}, r in {1, T/2, T-1}, or uniform) in
 *             64..hi: 85
 *   batch     1: 15, 2..8: 45, 9..64: 40, with key lengths per sequence
 *             (varlen claimed): 0: 5, 1: 10, nk: 25, 1..nk: 60 — one batch holds
 *             sequences thousands of keys apart
 *   heads     GQA packing (claimed): hkv 1..8 x group 1, 2, 4, 8, 16 alike (hq <= 64)
 *   head dim  listed dims: uniform; else 128: 50, 64: 30, 256: 10, 1..255: 10
 *   mask      causal-br 70% when claimed, else the kind weights of masks.c
 *   paging    (AC_VAR_PAGED claimed) 90%: page size 1, 2, 4, .., 256 alike, the
 *             table in order 10% of the time (gen_variants.c's gen_draw_paging)
 *   splits    (AC_VAR_SPLIT claimed) 60%: 1, 2, 3, 4, 8 or more than the key
 *             tiles (gen_draw_splits); else the kernel's own choice (auto)
 * The size cap then applies as in every profile (b = 1 first). */
#include "harness/case/gen_variants.h"
#include "harness/case/generate_internal.h"

static int decode_batch(case_rng *r)
{
    static const int w[] = {15, 45, 40};
    switch (case_rng_pick(r, w, COUNT(w))) {
    case 0:
        return 1;
    case 1:
        return case_rng_int(r, 2, 8);
    default:
        return case_rng_int(r, 9, AC_CASE_MAX_BATCH);
    }
}

static void decode_heads(case_rng *r, bool gqa, ac_case *c)
{
    static const int groups[] = {1, 2, 4, 8, 16};
    c->heads_kv = case_rng_int(r, 1, 8);
    c->heads_q = gqa ? c->heads_kv * groups[case_rng_int(r, 0, COUNT(groups) - 1)] : c->heads_kv;
}

static int decode_head_dim(case_rng *r, const ac_caps *caps)
{
    if (caps->n_head_dims > 0)
        return gen_draw_head_dim(r, caps);
    int top = gen_head_dim_top(caps);
    static const int w[] = {50, 30, 10, 10};
    static const int dims[] = {128, 64, 256};
    int k = case_rng_pick(r, w, COUNT(w)), d = k < 3 ? dims[k] : case_rng_int(r, 1, 255);
    return d <= top ? d : case_rng_int(r, 1, top);
}

static void decode_lengths(case_rng *r, const ac_gen *g, ac_case *c)
{
    int hi = ac_gen_max_seqlen(g);
    c->seqlen_q = case_rng_int(r, 0, 99) < 35 ? 1 : case_rng_int(r, 2, 16);
    c->seqlen_k =
        case_rng_int(r, 0, 99) < 15 || hi <= 64 ? case_rng_int(r, 1, hi < 64 ? hi : 64) : gen_long_length(r, 64, hi);
    if (c->seqlen_q > hi)
        c->seqlen_q = hi;
}

/* Key lengths per sequence: 0 5, 1 10, nk 25, 1..nk 60 (very unequal in one batch). */
static void decode_lens(case_rng *r, ac_case *c)
{
    static const int w[] = {5, 10, 25, 60};
    c->n_seqlens_k = c->batch;
    for (int b = 0; b < c->batch; b++)
        switch (case_rng_pick(r, w, COUNT(w))) {
        case 0:
            c->seqlens_k[b] = 0;
            break;
        case 1:
            c->seqlens_k[b] = 1;
            break;
        case 2:
            c->seqlens_k[b] = c->seqlen_k;
            break;
        default:
            c->seqlens_k[b] = case_rng_int(r, 1, c->seqlen_k);
            break;
        }
}

void gen_decode_shape(case_rng *r, const ac_gen *g, const int mw[AC_MASK_KIND_COUNT], ac_case *c)
{
    decode_lengths(r, g, c);
    c->batch = decode_batch(r);
    decode_heads(r, g->caps.gqa, c);
    c->head_dim = decode_head_dim(r, &g->caps);
    if (mw[AC_MASK_CAUSAL_BR] > 0 && case_rng_int(r, 0, 9) < 7) {
        ac_case_set_mask(c, AC_MASK_CAUSAL_BR);
        case_mask_draw(r, c);
    } else {
        gen_draw_mask(r, mw, c);
    }
    if (g->caps.varlen)
        decode_lens(r, c);
    if ((g->caps.variants & AC_VAR_PAGED) && case_rng_int(r, 0, 9) < 9)
        gen_draw_paging(r, c);
    if ((g->caps.variants & AC_VAR_SPLIT) && case_rng_int(r, 0, 9) < 6)
        c->num_splits = gen_draw_splits(r, c);
}
