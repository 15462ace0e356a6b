/* harness/campaign/test_shrink.c — the shrinker on synthetic failure predicates (no
 * kernel runs: the predicate is the failure).  The corpus is in test_corpus.c,
 * a real failure shrunk through the runner in run/test_run.c. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "harness/harness.h"

/* A big case with every knob turned away from the default. */
static ac_case big_case(void)
{
    ac_case c = ac_case_default();
    c.seed = 9;
    c.batch = 4;
    c.heads_q = 16;
    c.heads_kv = 4;
    c.seqlen_q = 300;
    c.seqlen_k = 700;
    c.head_dim = 96;
    c.dtype = AC_BF16;
    c.layout = AC_LAYOUT_BSHD;
    ac_case_set_mask(&c, AC_MASK_CAUSAL_BR);
    c.dist = AC_DIST_OUTLIERS;
    c.dist_a = 2;
    c.dist_b = 0.01;
    c.scale_auto = false;
    c.scale = 0.5;
    cr_assert_eq(ac_case_validate(&c, NULL), AC_OK, "the starting case must be valid");
    return c;
}

typedef struct {
    int calls;
} counter;

/* "fails iff nk >= 37 and the mask is causal bottom-right" */
static bool nk37_causal_br(const ac_case *c, void *ctx)
{
    ((counter *)ctx)->calls++;
    return c->seqlen_k >= 37 && c->mask == AC_MASK_CAUSAL_BR;
}

Test(harness_shrink, reaches_exact_minimum_of_monotone_predicate)
{
    ac_case start = big_case(), min;
    counter n = {0};
    int calls = ac_shrink(&start, nk37_causal_br, &n, 1000, &min);
    ac_case def = ac_case_default();
    cr_assert_eq(calls, n.calls, "returns the number of predicate calls");
    cr_assert_eq(min.seqlen_k, 37, "nk shrinks to the threshold exactly, got %d", min.seqlen_k);
    cr_assert_eq(min.seqlen_q, 1);
    cr_assert_eq(min.batch, 1);
    cr_assert_eq(min.heads_q, 1);
    cr_assert_eq(min.heads_kv, 1);
    cr_assert_eq(min.head_dim, 1);
    cr_assert_eq(min.mask, AC_MASK_CAUSAL_BR, "the alignment is kept: the failure needs it");
    cr_assert_eq(min.dist, def.dist);
    cr_assert_eq(min.dist_a, def.dist_a);
    cr_assert_eq(min.dist_b, def.dist_b);
    cr_assert_eq(min.layout, def.layout);
    cr_assert(min.scale_auto);
    cr_assert_eq(min.seed, 1);
    cr_assert_eq(min.dtype, AC_BF16, "the dtype is never changed");
    cr_assert_lt(calls, 250, "greedy shrinking stays cheap: %d calls", calls);
}

/* The GQA head-mapping bug needs hkv >= 2 and a real group. */
static bool needs_gqa_two_kv(const ac_case *c, void *ctx)
{
    (void)ctx;
    return c->heads_kv >= 2 && c->heads_q > c->heads_kv;
}

Test(harness_shrink, heads_keep_gqa_divisibility)
{
    ac_case start = big_case(), min;
    ac_shrink(&start, needs_gqa_two_kv, NULL, 1000, &min);
    cr_assert_eq(min.heads_kv, 2, "got hkv=%d", min.heads_kv);
    cr_assert_eq(min.heads_q, 4, "got hq=%d", min.heads_q);
}

static bool any_mask(const ac_case *c, void *ctx)
{
    (void)ctx;
    return c->mask != AC_MASK_NONE;
}

Test(harness_shrink, window_simplifies_to_causal_with_default_alignment)
{
    ac_case start = big_case(), min;
    start.mask = AC_MASK_WINDOW_BR;
    start.window_left = 5;
    start.window_right = 3;
    cr_assert_eq(ac_case_validate(&start, NULL), AC_OK);
    ac_shrink(&start, any_mask, NULL, 1000, &min);
    cr_assert_eq(min.mask, AC_MASK_CAUSAL_TL,
                 "window-br -> causal-br -> causal-tl: an alignment the failure "
                 "does not need is dropped");
}

static bool zero_length_key_sequence(const ac_case *c, void *ctx)
{
    (void)ctx;
    for (int b = 0; b < c->n_seqlens_k; b++)
        if (c->seqlens_k[b] == 0)
            return true;
    return false;
}

Test(harness_shrink, batch_keeps_the_sequence_that_fails)
{
    ac_case start = big_case(), min;
    start.batch = 3;
    start.mask = AC_MASK_NONE;
    start.n_seqlens_q = 3;
    start.n_seqlens_k = 3;
    int lq[3] = {100, 300, 7}, lk[3] = {500, 0, 700};
    memcpy(start.seqlens_q, lq, sizeof lq);
    memcpy(start.seqlens_k, lk, sizeof lk);
    cr_assert_eq(ac_case_validate(&start, NULL), AC_OK);
    ac_shrink(&start, zero_length_key_sequence, NULL, 1000, &min);
    cr_assert_eq(min.batch, 1);
    cr_assert_eq(min.n_seqlens_k, 1);
    cr_assert_eq(min.seqlens_k[0], 0, "the zero-length sequence is the one kept");
    cr_assert_eq(min.n_seqlens_q, 0, "query lengths the failure does not need are dropped");
    cr_assert_eq(min.seqlen_k, 1);
}

static bool always(const ac_case *c, void *ctx)
{
    (void)c;
    ((counter *)ctx)->calls++;
    return true;
}

Test(harness_shrink, stops_after_max_steps)
{
    ac_case start = big_case(), min;
    counter n = {0};
    int calls = ac_shrink(&start, always, &n, 5, &min);
    cr_assert_eq(calls, 5);
    cr_assert_eq(n.calls, 5);
}

static bool never(const ac_case *c, void *ctx)
{
    (void)c;
    (void)ctx;
    return false;
}

Test(harness_shrink, nothing_kept_returns_the_original)
{
    ac_case start = big_case(), min;
    ac_shrink(&start, never, NULL, 1000, &min);
    char a[AC_CASE_LINE_MAX], b[AC_CASE_LINE_MAX];
    ac_case_format(&start, a, sizeof a);
    ac_case_format(&min, b, sizeof b);
    cr_assert_str_eq(a, b);
}
