/* harness/case/test_generate.c — the generator: determinism, coverage, caps and
 * filters, sizes (suite harness_generate). */
#include <criterion/criterion.h>
#include <string.h>

#include "harness/harness.h"

static ac_caps claim_everything(void)
{
    ac_caps caps = {
        .dtypes = (1u << AC_F32) | (1u << AC_F16) | (1u << AC_BF16), .max_head_dim = 256,
        .masks = AC_MASKCAP_ALL, .layouts = 3, .gqa = true, .varlen = true, .backward = true,
    };
    return caps;
}

static void line_of(const ac_case *c, char *buf)
{
    cr_assert_gt(ac_case_format(c, buf, AC_CASE_LINE_MAX), 0);
}

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
    case AC_MASK_NONE: cv->none++; break;
    case AC_MASK_CAUSAL_TL: cv->causal_tl++; break;
    case AC_MASK_CAUSAL_BR: cv->causal_br++; break;
    case AC_MASK_WINDOW_TL: case AC_MASK_WINDOW_BR:
        br ? cv->window_br++ : cv->window_tl++;
        cv->window_width1 += c->window_left == 0 && c->window_right == 0;
        cv->window_left_inf += c->window_left == AC_WINDOW_INF && c->window_right != AC_WINDOW_INF;
        cv->window_right_inf += c->window_right == AC_WINDOW_INF && c->window_left != AC_WINDOW_INF;
        break;
    case AC_MASK_DENSE: cv->dense++, c->masked_rows > 0 ? cv->dense_masked_rows++ : cv->dense_no_masked_rows++; break;
    default: break;
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
    for (int t = 0; t < AC_DTYPE_COUNT; t++)
        cr_assert_gt(cv.dtype[t], 400, "dtype %s: %d", ac_dtype_name((ac_dtype)t), cv.dtype[t]);
    for (int d = 0; d < AC_DIST_COUNT; d++)
        cr_assert_gt(cv.dist[d], 40, "dist %s: %d", ac_dist_name((ac_dist_kind)d), cv.dist[d]);
    cr_assert(cv.layout[0] > 500 && cv.layout[1] > 500);
    cr_assert(cv.none > 100 && cv.causal_tl > 100 && cv.causal_br > 100 && cv.window_tl > 50 && cv.window_br > 50 &&
              cv.dense > 100, "masks: %d %d %d %d %d %d", cv.none, cv.causal_tl, cv.causal_br, cv.window_tl,
              cv.window_br, cv.dense);
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
        .dtypes = 1u << AC_F16, .head_dims = {64, 128}, .n_head_dims = 2, .max_head_dim = 128,
        .masks = AC_MASKCAP_NONE, .layouts = 1u << AC_LAYOUT_BHSD,
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
