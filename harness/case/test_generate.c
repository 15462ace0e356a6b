/* harness/case/test_generate.c — the generator: determinism, coverage, caps and
 * filters, sizes (suite harness_generate). */
#include <criterion/criterion.h>
#include <string.h>

#include "harness/harness.h"

static ac_caps claim_everything(void)
{
    ac_caps caps = {
        .dtypes = (1u << AC_F32) | (1u << AC_F16) | (1u << AC_BF16),
        .max_head_dim = 256,
        .masks = AC_MASKCAP_ALL,
        .layouts = 3,
        .gqa = true,
        .varlen = true,
        .backward = true,
    };
    return caps;
}

static void line_of(const ac_case *c, char *buf) { cr_assert_gt(ac_case_format(c, buf, AC_CASE_LINE_MAX), 0); }

Test(harness_generate, same_seed_gives_the_same_stream_and_case_k_alone_equals_the_kth)
{
    ac_caps caps = claim_everything();
    ac_gen a, b;
    ac_gen_init(&a, 77, &caps);
    ac_gen_init(&b, 77, &caps);
    for (int k = 0; k < 300; k++) {
        ac_case ca, cb, alone;
        char la[AC_CASE_LINE_MAX], lb[AC_CASE_LINE_MAX], lk[AC_CASE_LINE_MAX];
        cr_assert_eq(ac_gen_next(&a, &ca, NULL), AC_OK);
        cr_assert_eq(ac_gen_next(&b, &cb, NULL), AC_OK);
        cr_assert_eq(ac_gen_case_at(&a, (uint64_t)k, &alone, NULL), AC_OK);
        line_of(&ca, la), line_of(&cb, lb), line_of(&alone, lk);
        cr_assert_str_eq(la, lb);
        cr_assert_str_eq(la, lk, "case %d regenerated alone differs", k);
    }
    cr_assert_eq(a.index, 300u);
}

Test(harness_generate, different_campaign_seeds_give_different_streams)
{
    ac_caps caps = claim_everything();
    ac_gen a, b;
    ac_gen_init(&a, 1, &caps);
    ac_gen_init(&b, 2, &caps);
    int same = 0;
    for (int k = 0; k < 50; k++) {
        ac_case ca, cb;
        char la[AC_CASE_LINE_MAX], lb[AC_CASE_LINE_MAX];
        ac_gen_next(&a, &ca, NULL), ac_gen_next(&b, &cb, NULL);
        line_of(&ca, la), line_of(&cb, lb);
        same += strcmp(la, lb) == 0;
    }
    cr_assert_eq(same, 0);
}

/* What the first 2000 cases of a kernel claiming everything must contain. */
typedef struct {
    int dtype[AC_DTYPE_COUNT], dist[AC_DIST_COUNT], layout[2];
    int none, causal_tl, causal_br, window_tl, window_br, dense, dense_masked_rows, dense_no_masked_rows;
    int window_width1, window_left_inf, window_right_inf;
    int gqa, mqa, varlen_q, varlen_k, seqlen1_q, seqlen1_k, nq_gt_nk, nq_lt_nk, br_leading_rows_masked;
    int small, scale_explicit;
    long over_cap;
} coverage;

static void tally(const ac_case *c, int max_len, coverage *cv)
{
    cv->dtype[c->dtype]++, cv->dist[c->dist]++, cv->layout[c->layout]++;
    bool br = ac_mask_align(c->mask) == AC_ALIGN_BOTTOM_RIGHT;
    switch (c->mask) {
    case AC_MASK_NONE:
        cv->none++;
        break;
    case AC_MASK_CAUSAL_TL:
        cv->causal_tl++;
        break;
    case AC_MASK_CAUSAL_BR:
        cv->causal_br++;
        break;
    case AC_MASK_WINDOW_TL:
    case AC_MASK_WINDOW_BR:
        br ? cv->window_br++ : cv->window_tl++;
        cv->window_width1 += c->window_left == 0 && c->window_right == 0;
        cv->window_left_inf += c->window_left == AC_WINDOW_INF && c->window_right != AC_WINDOW_INF;
        cv->window_right_inf += c->window_right == AC_WINDOW_INF && c->window_left != AC_WINDOW_INF;
        break;
    case AC_MASK_DENSE:
        cv->dense++, c->masked_rows > 0 ? cv->dense_masked_rows++ : cv->dense_no_masked_rows++;
        break;
    default:
        break;
    }
    cv->gqa += c->heads_kv > 1 && c->heads_q > c->heads_kv;
    cv->mqa += c->heads_kv == 1 && c->heads_q > 1;
    cv->varlen_q += c->n_seqlens_q > 0, cv->varlen_k += c->n_seqlens_k > 0;
    cv->seqlen1_q += c->seqlen_q == 1, cv->seqlen1_k += c->seqlen_k == 1;
    cv->nq_gt_nk += c->seqlen_q > c->seqlen_k, cv->nq_lt_nk += c->seqlen_q < c->seqlen_k;
    cv->br_leading_rows_masked += c->mask == AC_MASK_CAUSAL_BR && c->seqlen_q > c->seqlen_k;
    cv->small += c->seqlen_q <= 80 && c->seqlen_k <= 80 && c->head_dim <= 64;
    cv->scale_explicit += !c->scale_auto;
    cv->over_cap += c->seqlen_q > max_len || c->seqlen_k > max_len;
}

Test(harness_generate, first_2000_cases_cover_every_feature_claimed)
{
    ac_caps caps = claim_everything();
    ac_gen g;
    ac_gen_init(&g, 2026, &caps);
    coverage cv;
    memset(&cv, 0, sizeof cv);
    for (int k = 0; k < 2000; k++) {
        ac_case c;
        ac_err err = {{0}};
        cr_assert_eq(ac_gen_next(&g, &c, &err), AC_OK, "%s", err.msg);
        tally(&c, AC_GEN_DEFAULT_MAX_SEQLEN, &cv);
    }
    for (int t = 0; t < AC_E4M3; t++) /* the caps claim the 16- and 32-bit dtypes */
        cr_assert_gt(cv.dtype[t], 400, "dtype %s: %d", ac_dtype_name((ac_dtype)t), cv.dtype[t]);
    for (int d = 0; d < AC_DIST_COUNT; d++)
        if (d != AC_DIST_FA3) /* drawn for fp8 cases only (gen_fp8.c) */
            cr_assert_gt(cv.dist[d], 40, "dist %s: %d", ac_dist_name((ac_dist_kind)d), cv.dist[d]);
    cr_assert(cv.layout[0] > 500 && cv.layout[1] > 500);
    cr_assert(cv.none > 100 && cv.causal_tl > 100 && cv.causal_br > 100 && cv.window_tl > 50 && cv.window_br > 50 &&
                  cv.dense > 100,
              "masks: %d %d %d %d %d %d", cv.none, cv.causal_tl, cv.causal_br, cv.window_tl, cv.window_br, cv.dense);
    cr_assert(cv.dense_masked_rows > 30 && cv.dense_no_masked_rows > 30);
    cr_assert(cv.window_width1 > 5 && cv.window_left_inf > 5 && cv.window_right_inf > 5);
    cr_assert(cv.gqa > 100 && cv.mqa > 50, "gqa %d mqa %d", cv.gqa, cv.mqa);
    cr_assert(cv.varlen_q > 100 && cv.varlen_k > 100);
    cr_assert(cv.seqlen1_q > 20 && cv.seqlen1_k > 20);
    cr_assert(cv.nq_gt_nk > 400 && cv.nq_lt_nk > 400, "nq>nk %d, nq<nk %d", cv.nq_gt_nk, cv.nq_lt_nk);
    cr_assert_gt(cv.br_leading_rows_masked, 30, "causal-br with Nq > Nk (leading rows fully masked)");
    cr_assert_gt(cv.scale_explicit, 100);
    cr_assert_gt(cv.small, 2000 * 65 / 100, "most cases small: %d of 2000", cv.small);
    cr_assert_eq(cv.over_cap, 0);
}

Test(harness_generate, a_narrow_kernel_gets_only_what_it_claims)
{
    ac_caps caps = {
        .dtypes = 1u << AC_F16,
        .head_dims = {64, 128},
        .n_head_dims = 2,
        .max_head_dim = 128,
        .masks = AC_MASKCAP_NONE,
        .layouts = 1u << AC_LAYOUT_BHSD,
    };
    ac_gen g;
    ac_gen_init(&g, 5, &caps);
    int d64 = 0, d128 = 0;
    for (int k = 0; k < 1000; k++) {
        ac_case c;
        cr_assert_eq(ac_gen_next(&g, &c, NULL), AC_OK);
        cr_assert_eq(c.dtype, AC_F16);
        cr_assert(c.head_dim == 64 || c.head_dim == 128, "d=%d", c.head_dim);
        d64 += c.head_dim == 64, d128 += c.head_dim == 128;
        cr_assert_eq(c.mask, AC_MASK_NONE);
        cr_assert_eq(c.layout, AC_LAYOUT_BHSD);
        cr_assert_eq(c.heads_q, c.heads_kv, "no GQA claimed");
        cr_assert(c.n_seqlens_q == 0 && c.n_seqlens_k == 0, "no varlen claimed");
    }
    cr_assert(d64 > 300 && d128 > 300);
}

Test(harness_generate, filters_and_length_caps_are_obeyed)
{
    ac_caps caps = claim_everything();
    caps.max_seqlen = 100;
    ac_gen g;
    ac_gen_init(&g, 9, &caps);
    g.dtype_filter = 1u << AC_BF16;
    g.mask_filter = 1u << AC_MASK_CAUSAL_BR | 1u << AC_MASK_WINDOW_TL | 1u << AC_MASK_WINDOW_BR;
    g.max_seqlen = 4096; /* the kernel's own cap (100) still wins */
    cr_assert_eq(ac_gen_max_seqlen(&g), 100);
    int windows = 0;
    for (int k = 0; k < 500; k++) {
        ac_case c;
        cr_assert_eq(ac_gen_next(&g, &c, NULL), AC_OK);
        cr_assert_eq(c.dtype, AC_BF16);
        bool window = c.mask == AC_MASK_WINDOW_TL || c.mask == AC_MASK_WINDOW_BR;
        cr_assert(c.mask == AC_MASK_CAUSAL_BR || window, "mask=%s", ac_mask_name(c.mask));
        windows += window;
        cr_assert(c.seqlen_q <= 100 && c.seqlen_k <= 100);
    }
    cr_assert_gt(windows, 100);
}

Test(harness_generate, default_cap_is_512_and_a_raised_cap_reaches_large_lengths)
{
    ac_caps caps = claim_everything();
    ac_gen g;
    ac_gen_init(&g, 3, &caps);
    cr_assert_eq(ac_gen_max_seqlen(&g), AC_GEN_DEFAULT_MAX_SEQLEN);
    g.max_seqlen = 4096;
    int large = 0;
    for (int k = 0; k < 2000; k++) {
        ac_case c;
        cr_assert_eq(ac_gen_next(&g, &c, NULL), AC_OK);
        large += c.seqlen_q > 512 || c.seqlen_k > 512;
        cr_assert(c.seqlen_q <= 4096 && c.seqlen_k <= 4096);
    }
    cr_assert_gt(large, 20);
}

Test(harness_generate, nothing_to_draw_is_an_input_error_naming_what)
{
    ac_caps caps = claim_everything();
    ac_gen g;
    ac_gen_init(&g, 1, &caps);
    g.dtype_filter = 1u << 7; /* no such dtype */
    ac_case c;
    ac_err err = {{0}};
    cr_assert_eq(ac_gen_next(&g, &c, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "no dtype") != NULL, "%s", err.msg);
    cr_assert_eq(g.index, 0u);
    g.dtype_filter = 0;
    caps.masks = AC_MASKCAP_NONE;
    ac_gen_init(&g, 1, &caps);
    g.mask_filter = 1u << AC_MASK_DENSE;
    cr_assert_eq(ac_gen_next(&g, &c, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "no mask kind") != NULL, "%s", err.msg);
}

/* ---- the long profile (generate_long.c) ------------------------------------------- */

static bool is_pow2(long x) { return x > 0 && (x & (x - 1)) == 0; }
static double k_elems(const ac_case *c) { return (double)c->batch * c->heads_kv * c->seqlen_k * c->head_dim; }

typedef struct {
    int n, pow2, pow2_near, tile, decode, decode_br, gqa, cross31, same;
} long_counts;

static long_counts draw_long(ac_gen *g, int n)
{
    long_counts k = {0};
    for (int i = 0; i < n; i++) {
        ac_case c;
        cr_assert_eq(ac_gen_next(g, &c, NULL), AC_OK);
        long nk = c.seqlen_k;
        bool decode = c.seqlen_q <= 512 && c.seqlen_q < nk;
        cr_assert(nk >= 2048 && nk <= 131072, "nk=%ld", nk);
        cr_assert(decode || (c.seqlen_q >= 2048 && c.seqlen_q <= 131072), "nq=%d", c.seqlen_q);
        k.n++;
        k.pow2 += is_pow2(nk);
        k.pow2_near += is_pow2(nk + 1) || is_pow2(nk - 1);
        k.tile += !is_pow2(nk + 1) && !is_pow2(nk - 1) && (nk % 64 == 1 || nk % 64 == 32 || nk % 64 == 63);
        k.decode += decode;
        k.decode_br += decode && c.mask == AC_MASK_CAUSAL_BR;
        k.gqa += c.heads_q > c.heads_kv;
        k.cross31 += k_elems(&c) >= 2147483648.0;
        k.same += c.seqlen_q == nk;
    }
    return k;
}

static void assert_share(int count, int n, double lo, double hi, const char *what)
{
    double share = (double)count / n;
    cr_assert(share >= lo && share <= hi, "%s: %.3f of the cases, expected %.2f..%.2f", what, share, lo, hi);
}

Test(harness_generate, long_profile_draws_the_lengths_and_shapes_it_claims)
{
    ac_caps caps = claim_everything();
    ac_gen g;
    ac_gen_init(&g, 5, &caps);
    g.profile = AC_PROFILE_LONG;
    g.cap.max_work = -1; /* no cap: what the profile draws, untouched */
    cr_assert_eq(ac_gen_min_seqlen(&g), 2048);
    cr_assert_eq(ac_gen_max_seqlen(&g), 131072);
    long_counts k = draw_long(&g, 4000);
    /* generate_long.c's weights: shape same 40, decode 20, apart 30, 2^31 10;
     * length pow2 30, pow2 +-1 25, tile remainder 25, uniform 20 */
    assert_share(k.pow2, k.n, 0.30, 0.45, "nk a power of two");
    assert_share(k.pow2_near, k.n, 0.17, 0.30, "nk a power of two +-1");
    assert_share(k.tile, k.n, 0.13, 0.27, "nk one past, half or one short of a tile edge");
    assert_share(k.decode, k.n, 0.22, 0.38, "decode-like nq <= 512 < nk");
    assert_share(k.decode_br, k.decode, 0.50, 0.80, "causal-br among the decode-like");
    assert_share(k.gqa, k.n, 0.55, 0.85, "hq > hkv (GQA, MQA)");
    assert_share(k.cross31, k.n, 0.06, 0.14, "K, V of >= 2^31 elements");
    assert_share(k.same, k.n, 0.30, 0.45, "nq = nk");
}

static bool under_2_31(const ac_case *c, const void *ctx)
{
    (void)ctx;
    return k_elems(c) < 2147483648.0 && (double)c->batch * c->heads_q * c->seqlen_q * c->head_dim < 2147483648.0;
}

Test(harness_generate, long_profile_draws_2_31_tensors_only_where_the_cap_holds_them)
{
    ac_caps caps = claim_everything();
    ac_gen g;
    ac_gen_init(&g, 5, &caps);
    g.profile = AC_PROFILE_LONG;
    g.cap = (ac_gen_cap){.max_work = -1, .fits = under_2_31};
    long_counts k = draw_long(&g, 1500);
    cr_assert_eq(k.cross31, 0, "a cap that cannot hold them gets none");
    assert_share(k.pow2, k.n, 0.25, 0.45, "the rest of the profile unchanged: nk a power of two");
}

static bool small_memory(const ac_case *c, const void *ctx)
{
    return (double)c->batch * c->heads_q * c->seqlen_q * c->seqlen_k <= *(const double *)ctx;
}

Test(harness_generate, a_case_over_the_cap_is_made_smaller_until_it_fits)
{
    ac_caps caps = claim_everything();
    ac_gen g;
    ac_gen_init(&g, 8, &caps);
    g.profile = AC_PROFILE_LONG;
    static const double limit = 1e8; /* scores of one 10k x 10k head */
    g.cap = (ac_gen_cap){.max_work = -1, .fits = small_memory, .ctx = &limit};
    int shrunk = 0;
    for (int i = 0; i < 500; i++) {
        ac_case c;
        cr_assert_eq(ac_gen_next(&g, &c, NULL), AC_OK);
        cr_assert(small_memory(&c, &limit), "case %d: b=%d hq=%d nq=%d nk=%d", i, c.batch, c.heads_q, c.seqlen_q,
                  c.seqlen_k);
        shrunk += c.seqlen_q < 2048 && c.seqlen_q > 512; /* halved below the floor: only when it had to */
    }
    cr_assert_eq(shrunk, 0, "lengths are halved down to the floor, not below");
}

Test(harness_generate, a_length_floor_folds_the_default_profile_into_range)
{
    ac_caps caps = claim_everything();
    ac_gen g;
    ac_gen_init(&g, 4, &caps);
    g.min_seqlen = 100;
    g.max_seqlen = 300;
    int at_floor = 0;
    for (int i = 0; i < 1000; i++) {
        ac_case c;
        cr_assert_eq(ac_gen_next(&g, &c, NULL), AC_OK);
        cr_assert(c.seqlen_q >= 100 && c.seqlen_q <= 300 && c.seqlen_k >= 100 && c.seqlen_k <= 300, "nq=%d nk=%d",
                  c.seqlen_q, c.seqlen_k);
        at_floor += c.seqlen_q == 100;
    }
    cr_assert_lt(at_floor, 100, "folded, not clamped: %d cases at the floor", at_floor);
    g.min_seqlen = 400;
    ac_case c;
    ac_err err = {{0}};
    cr_assert_eq(ac_gen_next(&g, &c, &err), AC_ERR_INPUT);
    cr_assert_not_null(strstr(err.msg, "--min-seqlen 400"), "%s", err.msg);
}
