/* kernels/test_cpu_flash_decode.c — cpu-flash's split-KV decode path (suite
 * kernels_cpu_flash_decode): through a shuffled block table with one split it
 * is the fused path on the contiguous K, V bit for bit; with more splits,
 * empty ones included, it stays within a few f32 roundings of it and never
 * makes NaN; the NaN in unused slots is never read. */
#include <math.h>

#include "cpu_flash_internal.h"
#include "test_kernels_support.h"

/* 3 sequences of 130, 1 and 0 keys (seqlens), GQA 4:2, 3 query rows, causal-br,
 * bf16; the same K, V moved into pages of 16 through a reversed table, every
 * other slot NaN. */
typedef struct {
    tk_case flat;
    ac_problem paged;
    int table[3 * 9];
    void *k_pages, *v_pages;
} dec_case;

static void make(dec_case *c, int splits)
{
    ac_problem p = ac_problem_dense(3, 4, 2, 3, 130, 16);
    p.layout = AC_LAYOUT_BSHD;
    p.windowed = true, p.window_left = AC_WINDOW_INF, p.window_right = 0, p.align = AC_ALIGN_BOTTOM_RIGHT;
    tk_init(&c->flat, p, AC_BF16, 1.0, 42);
    static const int lens[3] = {130, 1, 0};
    memcpy(c->flat.seqlens_k, lens, sizeof lens);
    c->flat.p.seqlens_k = c->flat.seqlens_k;
    c->paged = c->flat.p;
    c->paged.page_size = 16, c->paged.num_pages = 30, c->paged.pages_per_seq = 9, c->paged.block_table = c->table;
    for (int e = 0; e < 27; e++) /* reversed: sequence 0's pages 29, 28, ..., sequence 1's 20 */
        c->table[e] = 29 - e;
    c->paged.num_splits = splits;
    size_t n = ac_kv_elems(&c->paged);
    c->k_pages = malloc(n * 2), c->v_pages = malloc(n * 2);
    for (size_t x = 0; x < n; x++) /* NaN everywhere, then the keys in use */
        ((uint16_t *)c->k_pages)[x] = ((uint16_t *)c->v_pages)[x] = 0x7FC0;
    for (int b = 0; b < 3; b++)
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < lens[b]; j++)
                for (int x = 0; x < 16; x++) {
                    ((uint16_t *)c->k_pages)[ac_kv_index(&c->paged, b, h, j, x)] =
                        ((uint16_t *)c->flat.k)[ac_kv_index(&c->flat.p, b, h, j, x)];
                    ((uint16_t *)c->v_pages)[ac_v_index(&c->paged, b, h, j, x)] =
                        ((uint16_t *)c->flat.v)[ac_v_index(&c->flat.p, b, h, j, x)];
                }
}

static void run_paged(dec_case *c, const char *kernel, void *o, float *lse)
{
    const ac_kernel *k = ac_kernel_find(kernel);
    ac_err err = {{0}};
    ac_fwd_args a = {.q = c->flat.q, .k = c->k_pages, .v = c->v_pages, .o = o, .lse = lse};
    cr_assert_eq(k->forward(k, &c->paged, AC_BF16, &a, &err), AC_OK, "%s", err.msg);
}

static void free_case(dec_case *c)
{
    free(c->k_pages), free(c->v_pages);
    tk_free(&c->flat);
}

Test(kernels_cpu_flash_decode, one_split_through_the_table_is_the_fused_path_bit_for_bit)
{
    dec_case c;
    make(&c, 1);
    tk_poison(&c.flat);
    tk_forward(ac_kernel_find("cpu-flash"), &c.flat); /* contiguous: cpu_flash.c's tiles */
    uint16_t *o = malloc(c.flat.no * 2);
    float *lse = malloc(c.flat.nl * sizeof(float));
    run_paged(&c, "cpu-flash", o, lse);
    cr_assert(memcmp(o, c.flat.o, c.flat.no * 2) == 0, "O");
    cr_assert(memcmp(lse, c.flat.lse, c.flat.nl * sizeof(float)) == 0, "LSE");
    cr_assert_eq(lse[ac_lse_index(&c.paged, 2, 0, 0)], -INFINITY, "sequence 2 has no keys");
    free(o), free(lse), free_case(&c);
}

/* 2, 3, 9 (one key tile each past the 3 tiles: empty) and 40 splits against one:
 * P is rounded to bf16 against each split's own max, so O moves by a few
 * roundings of the terms (|V| ~ 1), never to NaN. */
Test(kernels_cpu_flash_decode, more_splits_stay_within_a_few_roundings_and_empty_ones_make_no_nan)
{
    static const int counts[] = {2, 3, 9, 40};
    dec_case one;
    make(&one, 1);
    uint16_t *o1 = malloc(one.flat.no * 2);
    float *l1 = malloc(one.flat.nl * sizeof(float));
    run_paged(&one, "cpu-flash", o1, l1);
    for (size_t s = 0; s < sizeof counts / sizeof counts[0]; s++) {
        dec_case c;
        make(&c, counts[s]);
        uint16_t *o = malloc(c.flat.no * 2);
        float *lse = malloc(c.flat.nl * sizeof(float));
        run_paged(&c, "cpu-flash", o, lse);
        for (size_t x = 0; x < c.flat.no; x++) {
            double a = ac_widen(AC_BF16, o[x]), b = ac_widen(AC_BF16, o1[x]);
            cr_assert(!isnan(a), "S=%d: O[%zu] NaN", counts[s], x);
            cr_assert_leq(fabs(a - b), 0x1p-6, "S=%d: O[%zu] %g vs %g", counts[s], x, a, b);
        }
        for (size_t x = 0; x < c.flat.nl; x++)
            cr_assert(lse[x] == l1[x] || fabsf(lse[x] - l1[x]) <= 4e-6f * fabsf(l1[x]), "S=%d: LSE[%zu]", counts[s], x);
        free(o), free(lse), free_case(&c);
    }
    free(o1), free(l1), free_case(&one);
}

/* The mutants on the same cache: each breaks what it should, the rest stays. */
Test(kernels_cpu_flash_decode, each_mutant_breaks_its_own_part)
{
    dec_case c;
    make(&c, 3);
    uint16_t *good = malloc(c.flat.no * 2), *bad = malloc(c.flat.no * 2);
    float *lg = malloc(c.flat.nl * sizeof(float)), *lb = malloc(c.flat.nl * sizeof(float));
    run_paged(&c, "cpu-flash", good, lg);
    /* 3 splits of one tile: sequence 0's row 0 sees keys 0..127 (split 2 empty for it), rows 1
     * and 2 reach into split 2; sequence 1 (one key) has 2 empty splits for its visible row 2 */
    run_paged(&c, "cpu-flash-mutant-empty-split-nan", bad, lb);
    for (int h = 0; h < 4; h++)
        for (int i = 0; i < 3; i++) {
            size_t at0 = ac_o_index(&c.paged, 0, h, i, 0), at1 = ac_o_index(&c.paged, 1, h, i, 0);
            if (i == 0)
                cr_assert(isnan(ac_widen(AC_BF16, bad[at0])), "sequence 0 row 0: its empty split's NaN");
            else
                cr_assert_eq(bad[at0], good[at0], "sequence 0 row %d: no empty split", i);
            cr_assert(i < 2 || isnan(ac_widen(AC_BF16, bad[at1])), "sequence 1's visible row is NaN");
        }
    /* the grid one sequence short: the last sequence's rows keep the poison */
    memset(bad, 0xFF, c.flat.no * 2);
    run_paged(&c, "cpu-flash-mutant-later-seq-unwritten", bad, lb);
    cr_assert_eq(bad[ac_o_index(&c.paged, 2, 3, 2, 15)], 0xFFFF, "sequence 2 unwritten");
    cr_assert_eq(bad[ac_o_index(&c.paged, 0, 0, 0, 0)], good[ac_o_index(&c.paged, 0, 0, 0, 0)]);
    /* whole pages read: sequence 0's 130 keys end 14 slots into a page of NaN */
    run_paged(&c, "cpu-flash-mutant-last-page-slots", bad, lb);
    cr_assert(isnan(ac_widen(AC_BF16, bad[ac_o_index(&c.paged, 0, 0, 2, 0)])), "the last row sees the NaN slots");
    free(good), free(bad), free(lg), free(lb), free_case(&c);
}
