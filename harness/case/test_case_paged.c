/* harness/case/test_case_paged.c — the case line's kv= and splits= fields
 * (suite harness_case_paged): round trips, bad values named, old lines
 * unchanged, the generator's paged and decode draws, the shrinker's steps. */
#include <criterion/criterion.h>
#include <string.h>

#include "harness/campaign/shrink.h"
#include "harness/case/case.h"
#include "harness/case/generate.h"
#include "kernels/kernel.h"

#define HEAD \
    "v1 seed=9 b=2 hq=8 hkv=2 nq=3 nk=700 d=64 dtype=bf16 mask=causal-br layout=bhsd dist=normal(0,1) scale=auto"

Test(harness_case_paged, lines_round_trip_byte_for_byte)
{
    static const char *const lines[] = {
        HEAD " kv=paged(16)",
        HEAD " kv=paged(1,contig)",
        HEAD " kv=paged(4096) splits=1",
        HEAD " splits=1024",
        HEAD " softcap=30 kv=paged(256) splits=7",
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        ac_case c;
        ac_err err = {{0}};
        char out[AC_CASE_LINE_MAX];
        cr_assert_eq(ac_case_parse(lines[i], &c, &err), AC_OK, "%s: %s", lines[i], err.msg);
        cr_assert_geq(ac_case_format(&c, out, sizeof out), 0);
        cr_assert_str_eq(out, lines[i]);
    }
}

Test(harness_case_paged, fields_parse_to_their_values_and_auto_is_the_default)
{
    ac_case c, plain;
    cr_assert_eq(ac_case_parse(HEAD " kv=paged(32,contig) splits=5", &c, NULL), AC_OK);
    cr_assert_eq(c.kv_page_size, 32);
    cr_assert(c.kv_contig);
    cr_assert_eq(c.num_splits, 5);
    cr_assert_eq(ac_case_parse(HEAD " splits=auto", &c, NULL), AC_OK);
    cr_assert_eq(ac_case_parse(HEAD, &plain, NULL), AC_OK);
    cr_assert_eq(c.num_splits, 0);
    cr_assert_eq(plain.kv_page_size, 0);
    cr_assert_eq(plain.num_splits, 0);
    char a[AC_CASE_LINE_MAX], b[AC_CASE_LINE_MAX];
    ac_case_format(&c, a, sizeof a), ac_case_format(&plain, b, sizeof b);
    cr_assert_str_eq(a, b, "splits=auto is the line without splits");
    cr_assert_str_eq(b, HEAD, "a line without the fields prints as before");
}

Test(harness_case_paged, bad_values_are_named)
{
    static const char *const bad[][2] = {
        {HEAD " kv=paged(0)", "kv: page size must be in 1..4096, got '0'"},
        {HEAD " kv=paged(5000)", "kv: page size must be in 1..4096"},
        {HEAD " kv=paged(x)", "kv: page size"},
        {HEAD " kv=paged(16,shuffled)", "kv: expected paged(P) or paged(P,contig)"},
        {HEAD " kv=pages(16)", "kv: expected paged(P)"},
        {HEAD " kv=16", "kv: expected paged(P)"},
        {HEAD " splits=0", "splits: expected auto or a split count in 1..1024, got '0'"},
        {HEAD " splits=-2", "splits: expected auto"},
        {"v1 seed=9 b=2 hq=8 hkv=2 nq=3 nk=700 d=64 dtype=bf16 mask=causal-br layout=thd dist=normal(0,1) scale=auto "
         "kv=paged(16)",
         "kv: a paged KV cache takes layout=bhsd or bshd, not thd"},
        {HEAD " dropout=0.1 kv=paged(16)", "kv: a paged KV cache is decode (forward only): no dropout"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ac_case c;
        ac_err err = {{0}};
        cr_assert_eq(ac_case_parse(bad[i][0], &c, &err), AC_ERR_INPUT, "%s", bad[i][0]);
        cr_assert(strstr(err.msg, bad[i][1]), "'%s' lacks '%s'", err.msg, bad[i][1]);
    }
}

static ac_caps all_caps(void)
{
    ac_caps caps = {.dtypes = 7,
                    .max_head_dim = AC_MAX_HEAD_DIM,
                    .masks = AC_MASKCAP_ALL,
                    .layouts = AC_LAYOUTS_ALL,
                    .gqa = true,
                    .varlen = true,
                    .backward = true,
                    .variants = AC_VAR_ALL};
    return caps;
}

Test(harness_case_paged, the_default_profile_pages_some_cases_and_only_for_a_kernel_claiming_it)
{
    ac_caps caps = all_caps(), unpaged = caps;
    unpaged.variants &= ~(unsigned)(AC_VAR_PAGED | AC_VAR_SPLIT);
    ac_gen g, g0;
    ac_gen_init(&g, 3, &caps);
    ac_gen_init(&g0, 3, &unpaged);
    int paged = 0, split = 0, contig = 0;
    for (int k = 0; k < 1000; k++) {
        ac_case c, c0;
        cr_assert_eq(ac_gen_next(&g, &c, NULL), AC_OK);
        cr_assert_eq(ac_gen_next(&g0, &c0, NULL), AC_OK);
        cr_assert_eq(c0.kv_page_size + c0.num_splits, 0, "case %d: paging for a kernel that claims none", k);
        paged += c.kv_page_size > 0, split += c.num_splits >= 2, contig += c.kv_contig;
        if (c.kv_page_size > 0) {
            cr_assert(c.layout != AC_LAYOUT_THD && c.dropout == 0.0, "case %d", k);
            cr_assert(c.kv_page_size >= 1 && c.kv_page_size <= 256 && (c.kv_page_size & (c.kv_page_size - 1)) == 0);
        }
    }
    cr_assert(paged > 60 && paged < 200, "%d paged of 1000 (12%% of the non-THD, dropout-free)", paged);
    cr_assert_gt(split, 60, "%d split", split);
    cr_assert_gt(contig, 0);
}

Test(harness_case_paged, the_decode_profile_draws_decode_shapes)
{
    ac_caps caps = all_caps();
    ac_gen g;
    ac_gen_init(&g, 11, &caps);
    g.profile = AC_PROFILE_DECODE;
    g.cap.max_work = -1; /* the shapes as drawn */
    int paged = 0, long_k = 0, big_batch = 0, gqa = 0, empty_seq = 0, one_key = 0;
    for (int k = 0; k < 400; k++) {
        ac_case c;
        ac_err err = {{0}};
        cr_assert_eq(ac_gen_next(&g, &c, &err), AC_OK, "%s", err.msg);
        cr_assert(c.seqlen_q >= 1 && c.seqlen_q <= 16, "case %d: nq=%d", k, c.seqlen_q);
        cr_assert(c.seqlen_k >= 1 && c.seqlen_k <= 131072, "case %d: nk=%d", k, c.seqlen_k);
        paged += c.kv_page_size > 0, long_k += c.seqlen_k >= 16384, big_batch += c.batch >= 9;
        gqa += c.heads_q > c.heads_kv;
        for (int b = 0; b < c.n_seqlens_k; b++)
            empty_seq += c.seqlens_k[b] == 0, one_key += c.seqlens_k[b] == 1;
    }
    cr_assert_gt(paged, 300, "%d of 400 paged", paged);
    cr_assert_gt(long_k, 40, "%d with nk >= 16k", long_k);
    cr_assert_gt(big_batch, 80, "%d with b >= 9", big_batch);
    cr_assert_gt(gqa, 200);
    cr_assert_gt(empty_seq, 20);
    cr_assert_gt(one_key, 20);
}

static bool fails_when_paged_nk40(const ac_case *c, void *ctx)
{
    (void)ctx;
    return c->kv_page_size > 0 && c->seqlen_k >= 40;
}

static bool fails_always(const ac_case *c, void *ctx)
{
    (void)c, (void)ctx;
    return true;
}

Test(harness_case_paged, the_shrinker_orders_the_table_grows_pages_and_drops_splits)
{
    ac_case c, min;
    cr_assert_eq(ac_case_parse(HEAD " kv=paged(2) splits=9", &c, NULL), AC_OK);
    ac_shrink(&c, fails_when_paged_nk40, NULL, 2000, &min);
    cr_assert_eq(min.seqlen_k, 40);
    cr_assert_eq(min.kv_page_size, 64, "pages double until one holds the sequence");
    cr_assert(min.kv_contig, "the table in order");
    cr_assert_eq(min.num_splits, 1, "one split");
    ac_shrink(&c, fails_always, NULL, 2000, &min);
    cr_assert_eq(min.kv_page_size, 0, "paging dropped when not needed");
    cr_assert_eq(min.num_splits, 0, "and the split hint with it");
}
