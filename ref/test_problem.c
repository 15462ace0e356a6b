/* ref/test_problem.c — the attention problem: masks, layouts, validation
 * (suite ref_problem). */
#include <criterion/criterion.h>
#include <string.h>

#include "mask_kinds.h"
#include "ref.h"

/* Every mask on one hand-worked 3 x 5 example (Nq = 3, Nk = 5). */
static ac_problem p35(void) { return ac_problem_dense(1, 1, 1, 3, 5, 4); }

static void assert_mask(const ac_problem *p, int b, int h, const int want[3][5], const char *what)
{
    for (int i = 0; i < 3; i++) {
        int lo, hi, first = -1, last = -1;
        ac_visible_range(p, b, i, &lo, &hi);
        for (int j = 0; j < 5; j++) {
            cr_assert_eq(ac_visible(p, b, h, i, j), want[i][j] != 0, "%s: (%d, %d) visible = %d, want %d", what, i, j,
                         ac_visible(p, b, h, i, j), want[i][j]);
            if (want[i][j] && first < 0)
                first = j;
            if (want[i][j])
                last = j;
        }
        if (first >= 0 && !p->dense_mask) /* without a dense mask the range is exact */
            cr_assert(lo == first && hi == last + 1, "%s row %d: range [%d, %d), want [%d, %d)", what, i, lo, hi, first,
                      last + 1);
        if (first < 0 && !p->dense_mask)
            cr_assert(hi <= lo, "%s row %d: empty row with range [%d, %d)", what, i, lo, hi);
    }
}

Test(ref_problem, no_mask_sees_every_key)
{
    ac_problem p = p35();
    const int want[3][5] = {{1, 1, 1, 1, 1}, {1, 1, 1, 1, 1}, {1, 1, 1, 1, 1}};
    assert_mask(&p, 0, 0, want, "none");
}

Test(ref_problem, causal_top_left_and_bottom_right)
{
    ac_problem p = p35();
    p.windowed = true;
    p.window_right = 0;
    const int tl[3][5] = {{1, 0, 0, 0, 0}, {1, 1, 0, 0, 0}, {1, 1, 1, 0, 0}};
    assert_mask(&p, 0, 0, tl, "causal top-left");
    p.align = AC_ALIGN_BOTTOM_RIGHT; /* the last query meets the last key */
    const int br[3][5] = {{1, 1, 1, 0, 0}, {1, 1, 1, 1, 0}, {1, 1, 1, 1, 1}};
    assert_mask(&p, 0, 0, br, "causal bottom-right");
}

Test(ref_problem, sliding_windows_in_both_alignments)
{
    ac_problem p = p35();
    p.windowed = true;
    p.window_left = 1;
    p.window_right = 1;
    const int tl11[3][5] = {{1, 1, 0, 0, 0}, {1, 1, 1, 0, 0}, {0, 1, 1, 1, 0}};
    assert_mask(&p, 0, 0, tl11, "window (1,1) top-left");
    p.window_left = 0;
    const int tl01[3][5] = {{1, 1, 0, 0, 0}, {0, 1, 1, 0, 0}, {0, 0, 1, 1, 0}};
    assert_mask(&p, 0, 0, tl01, "window (0,1) top-left");
    p.align = AC_ALIGN_BOTTOM_RIGHT;
    p.window_left = 1;
    p.window_right = 0;
    const int br10[3][5] = {{0, 1, 1, 0, 0}, {0, 0, 1, 1, 0}, {0, 0, 0, 1, 1}};
    assert_mask(&p, 0, 0, br10, "window (1,0) bottom-right");
    p.window_left = AC_WINDOW_INF;
    p.window_right = 2;
    const int br_inf2[3][5] = {{1, 1, 1, 1, 1}, {1, 1, 1, 1, 1}, {1, 1, 1, 1, 1}};
    assert_mask(&p, 0, 0, br_inf2, "window (inf,2) bottom-right");
    p.align = AC_ALIGN_TOP_LEFT;
    const int tl_inf2[3][5] = {{1, 1, 1, 0, 0}, {1, 1, 1, 1, 0}, {1, 1, 1, 1, 1}};
    assert_mask(&p, 0, 0, tl_inf2, "window (inf,2) top-left");
}

Test(ref_problem, per_sequence_lengths_pad_rows_and_keys)
{
    ac_problem p = ac_problem_dense(2, 1, 1, 3, 5, 4);
    const int nq[2] = {3, 2}, nk[2] = {5, 3};
    p.seqlens_q = nq;
    p.seqlens_k = nk;
    const int full[3][5] = {{1, 1, 1, 1, 1}, {1, 1, 1, 1, 1}, {1, 1, 1, 1, 1}};
    const int short_b[3][5] = {{1, 1, 1, 0, 0}, {1, 1, 1, 0, 0}, {0, 0, 0, 0, 0}};
    assert_mask(&p, 0, 0, full, "varlen batch 0");
    assert_mask(&p, 1, 0, short_b, "varlen batch 1");
    cr_assert_eq(ac_seqlen_q_of(&p, 1), 2);
    cr_assert_eq(ac_seqlen_k_of(&p, 1), 3);
    /* bottom-right causal aligns to each sequence's own lengths: c = i + 3 - 2 */
    p.windowed = true;
    p.window_right = 0;
    p.align = AC_ALIGN_BOTTOM_RIGHT;
    const int br_b1[3][5] = {{1, 1, 0, 0, 0}, {1, 1, 1, 0, 0}, {0, 0, 0, 0, 0}};
    assert_mask(&p, 1, 0, br_b1, "varlen causal bottom-right batch 1");
}

Test(ref_problem, dense_mask_per_batch_and_head_and_with_causal)
{
    ac_problem p = ac_problem_dense(2, 2, 1, 3, 5, 4);
    uint8_t mask[2 * 2 * 15];
    for (int n = 0; n < 60; n++)
        mask[n] = (uint8_t)((n * 7 + n / 15) % 3 != 0);
    p.dense_mask = mask;
    p.mask_batch = 2;
    p.mask_heads = 2;
    for (int b = 0; b < 2; b++)
        for (int h = 0; h < 2; h++) {
            int want[3][5];
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 5; j++)
                    want[i][j] = mask[((b * 2 + h) * 3 + i) * 5 + j];
            assert_mask(&p, b, h, want, "dense (B, Hq)");
        }
    /* one mask for all batches and heads, and with causal top-left on top: AND */
    const uint8_t shared[15] = {1, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0, 1, 0, 1};
    p.dense_mask = shared;
    p.mask_batch = 1;
    p.mask_heads = 1;
    p.windowed = true;
    p.window_right = 0;
    const int and_causal[3][5] = {{1, 0, 0, 0, 0}, {0, 1, 0, 0, 0}, {1, 0, 1, 0, 0}};
    assert_mask(&p, 1, 1, and_causal, "dense and causal");
}

Test(ref_problem, index_of_both_layouts)
{
    ac_problem p = ac_problem_dense(2, 3, 1, 4, 6, 5); /* B=2, Hq=3, Hkv=1, Nq=4, Nk=6, d=5 */
    /* BHSD: ((b H + h) S + s) d + c;  BSHD: ((b S + s) H + h) d + c */
    cr_assert_eq(ac_q_index(&p, 1, 0, 2, 1), (size_t)(((1 * 3 + 0) * 4 + 2) * 5 + 1)); /* 71 */
    cr_assert_eq(ac_kv_index(&p, 1, 0, 5, 4), (size_t)(((1 * 1 + 0) * 6 + 5) * 5 + 4)); /* 59 */
    cr_assert_eq(ac_lse_index(&p, 1, 2, 3), (size_t)((1 * 3 + 2) * 4 + 3));
    p.layout = AC_LAYOUT_BSHD;
    cr_assert_eq(ac_q_index(&p, 1, 0, 2, 1), (size_t)(((1 * 4 + 2) * 3 + 0) * 5 + 1)); /* 91 */
    cr_assert_eq(ac_kv_index(&p, 1, 0, 5, 4), (size_t)(((1 * 6 + 5) * 1 + 0) * 5 + 4));
    cr_assert_eq(ac_lse_index(&p, 1, 2, 3), (size_t)((1 * 3 + 2) * 4 + 3), "LSE is (B, Hq, Nq) in both layouts");
    cr_assert_eq(ac_q_elems(&p), (size_t)2 * 3 * 4 * 5);
    cr_assert_eq(ac_kv_elems(&p), (size_t)2 * 1 * 6 * 5);
    cr_assert_eq(ac_lse_elems(&p), (size_t)2 * 3 * 4);
    for (int layout = 0; layout < 2; layout++) { /* a bijection onto [0, elems) */
        p.layout = (ac_layout)layout;
        unsigned char seen[120] = {0};
        for (int b = 0; b < 2; b++)
            for (int h = 0; h < 3; h++)
                for (int s = 0; s < 4; s++)
                    for (int c = 0; c < 5; c++) {
                        size_t at = ac_q_index(&p, b, h, s, c);
                        cr_assert(at < 120 && !seen[at], "layout %d: index %zu repeated or out of range", layout, at);
                        seen[at] = 1;
                    }
    }
}

Test(ref_problem, gqa_head_mapping_and_defaults)
{
    ac_problem p = ac_problem_dense(1, 8, 2, 3, 5, 64);
    int want[8] = {0, 0, 0, 0, 1, 1, 1, 1};
    for (int h = 0; h < 8; h++)
        cr_assert_eq(ac_kv_head_of(&p, h), want[h]);
    cr_assert_float_eq(p.scale, 0.125, 0.0, "default scale 1/sqrt(64)");
    cr_assert(!p.windowed && p.layout == AC_LAYOUT_BHSD && p.dense_mask == NULL && p.seqlens_q == NULL);
    cr_assert_eq(ac_problem_validate(&p, 0, NULL), AC_OK);
}

/* The problem is rejected with AC_ERR_INPUT and a message naming `field`. */
static void assert_rejected(const ac_problem *p, size_t budget, const char *field)
{
    ac_err err = {{0}};
    cr_assert_eq(ac_problem_validate(p, budget, &err), AC_ERR_INPUT, "%s: accepted", field);
    cr_assert(strstr(err.msg, field) != NULL, "message \"%s\" does not name %s", err.msg, field);
}

Test(ref_problem, validate_rejects_bad_sizes_naming_the_field)
{
    ac_problem ok = ac_problem_dense(2, 4, 2, 8, 8, 16), p;
    p = ok;
    p.batch = 0;
    assert_rejected(&p, 0, "batch");
    p = ok;
    p.heads_q = -1;
    assert_rejected(&p, 0, "heads_q");
    p = ok;
    p.heads_kv = 0;
    assert_rejected(&p, 0, "heads_kv");
    p = ok;
    p.heads_kv = 3;
    assert_rejected(&p, 0, "multiple");
    p = ok;
    p.seqlen_q = 0;
    assert_rejected(&p, 0, "seqlen_q");
    p = ok;
    p.seqlen_k = -7;
    assert_rejected(&p, 0, "seqlen_k");
    p = ok;
    p.head_dim = 0;
    assert_rejected(&p, 0, "head_dim");
    p = ok;
    p.head_dim = AC_MAX_HEAD_DIM + 1;
    assert_rejected(&p, 0, "head_dim");
    p = ok;
    p.scale = 0.0;
    assert_rejected(&p, 0, "scale");
    p = ok;
    p.layout = (ac_layout)5;
    assert_rejected(&p, 0, "layout");
    assert_rejected(NULL, 0, "problem");
}

Test(ref_problem, validate_rejects_bad_masks_naming_the_field)
{
    ac_problem ok = ac_problem_dense(2, 4, 2, 8, 8, 16), p;
    p = ok;
    p.windowed = true;
    p.window_left = -2;
    assert_rejected(&p, 0, "window_left");
    p = ok;
    p.windowed = true;
    p.window_right = -3;
    assert_rejected(&p, 0, "window_right");
    p = ok;
    p.windowed = true;
    p.window_right = 0;
    p.align = (ac_align)4;
    assert_rejected(&p, 0, "align");
    const int long_q[2] = {8, 9}, neg_k[2] = {-1, 3};
    p = ok;
    p.seqlens_q = long_q;
    assert_rejected(&p, 0, "seqlens_q[1]");
    p = ok;
    p.seqlens_k = neg_k;
    assert_rejected(&p, 0, "seqlens_k[0]");
    uint8_t mask[8 * 8] = {1};
    p = ok;
    p.dense_mask = mask;
    p.mask_batch = 3;
    assert_rejected(&p, 0, "mask_batch");
    p = ok;
    p.dense_mask = mask;
    p.mask_heads = 2;
    assert_rejected(&p, 0, "mask_heads");
    p = ok;
    p.dense_mask = mask;
    cr_assert_eq(ac_problem_validate(&p, 0, NULL), AC_OK, "a (1, 1, Nq, Nk) mask is fine");
}

Test(ref_problem, validate_rejects_shapes_over_the_memory_budget)
{
    ac_problem p = ac_problem_dense(1, 1, 1, 1024, 1024, 64);
    cr_assert_eq(ac_problem_validate(&p, (size_t)256 << 20, NULL), AC_OK, "a 1024 x 1024 problem fits 256 MiB");
    assert_rejected(&p, 1 << 20, "budget");
    ac_problem huge = ac_problem_dense(64, 64, 64, 1 << 20, 1 << 20, 512); /* would overflow 32 bits */
    assert_rejected(&huge, 0, "budget");
}

/* The kinds of ref/mask_kinds.h a problem uses: its window (causal is (inf, 0))
 * in its alignment, its dense mask, or none. */
Test(ref_problem, mask_kinds_follow_the_window_alignment_and_dense_mask)
{
    ac_problem p = p35();
    cr_assert_eq(ac_problem_masks(&p), 1u << AC_MASK_NONE);
    p.windowed = true, p.window_left = AC_WINDOW_INF, p.window_right = 0;
    cr_assert_eq(ac_problem_masks(&p), 1u << AC_MASK_CAUSAL_TL);
    p.align = AC_ALIGN_BOTTOM_RIGHT;
    cr_assert_eq(ac_problem_masks(&p), 1u << AC_MASK_CAUSAL_BR);
    p.window_left = 2;
    cr_assert_eq(ac_problem_masks(&p), 1u << AC_MASK_WINDOW_BR, "(2, 0) is a window, not causal");
    uint8_t keep[15];
    memset(keep, 1, sizeof keep);
    p.dense_mask = keep;
    cr_assert_eq(ac_problem_masks(&p), 1u << AC_MASK_WINDOW_BR | 1u << AC_MASK_DENSE);
    p.windowed = false;
    cr_assert_eq(ac_problem_masks(&p), 1u << AC_MASK_DENSE);
}

Test(ref_problem, mask_kind_names_parse_back_and_windows_are_claimed_with_causal)
{
    for (int k = 0; k < AC_MASK_KIND_COUNT; k++) {
        const char *name = ac_mask_name((ac_mask_kind)k);
        ac_mask_kind back;
        cr_assert_eq(ac_mask_from_name(name, strlen(name), &back), AC_OK, "%s", name);
        cr_assert_eq(back, (ac_mask_kind)k);
        cr_assert_neq(strstr(ac_mask_names(), name), NULL, "%s missing from the list", name);
        cr_assert(ac_mask_needs((ac_mask_kind)k) & ac_mask_bit((ac_mask_kind)k), "%s needs its own bit", name);
    }
    ac_mask_kind k;
    cr_assert_eq(ac_mask_from_name("causal", 6, &k), AC_ERR_INPUT);
    cr_assert_eq(ac_mask_needs(AC_MASK_WINDOW_BR), ac_mask_bit(AC_MASK_WINDOW_BR) | ac_mask_bit(AC_MASK_CAUSAL_BR));
    cr_assert_eq(ac_mask_bit(AC_MASK_WINDOW_TL), ac_mask_bit(AC_MASK_WINDOW_BR), "the windows share one bit");
    cr_assert_str_eq(ac_mask_names(), "none, causal-tl, causal-br, window-tl, window-br, dense");
}
