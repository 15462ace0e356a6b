/* ref/test_paged.c — the paged KV cache (suite ref_paged): keys read through a
 * shuffled block table with a shared prefix page give the contiguous
 * problem's reference bit for bit, slots not in use are never read, and the
 * paged fields are validated with messages naming them. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "ref.h"
#include "test_support.h"
#include "variants.h"

/* 3 sequences of 9, 0 and 13 keys in pages of 4, GQA 4:2, d 8, d_v 6, BSHD,
 * 2 query rows each (decode), causal bottom-right.  Sequence 2 shares its first
 * two pages (8 keys) with sequence 0: the contiguous K, V hold equal rows there. */
typedef struct {
    ac_problem contig, paged;
    int lens_k[3];
    int table[3 * 4];
    double *k, *v, *k_pages, *v_pages;
} pg_case;

static void make_case(pg_case *c, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    static const int lens[3] = {9, 0, 13};
    /* pages: seq 0 -> 5, 2, 7; seq 2 -> 5, 2 (shared), 0, 3; page 1, 4, 6 unused; -1 past the used entries */
    static const int table[12] = {5, 2, 7, -1, 9, -1, -1, -1, 5, 2, 0, 3};
    memcpy(c->lens_k, lens, sizeof lens);
    memcpy(c->table, table, sizeof table);
    c->contig = ac_problem_dense(3, 4, 2, 2, 13, 8);
    c->contig.layout = AC_LAYOUT_BSHD;
    c->contig.head_dim_v = 6;
    c->contig.seqlens_k = c->lens_k;
    c->contig.windowed = true, c->contig.window_left = AC_WINDOW_INF, c->contig.window_right = 0;
    c->contig.align = AC_ALIGN_BOTTOM_RIGHT;
    c->paged = c->contig;
    c->paged.page_size = 4, c->paged.num_pages = 10, c->paged.pages_per_seq = 4, c->paged.block_table = c->table;
    ts_rng r = {seed};
    c->k = ts_alloc(ac_kv_elems(&c->contig)), c->v = ts_alloc(ac_v_elems(&c->contig));
    ts_fill(&r, AC_BF16, 1.0, c->k, ac_kv_elems(&c->contig));
    ts_fill(&r, AC_BF16, 1.0, c->v, ac_v_elems(&c->contig));
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 8; j++) { /* the shared prefix */
            for (int x = 0; x < 8; x++)
                c->k[ac_kv_index(&c->contig, 2, h, j, x)] = c->k[ac_kv_index(&c->contig, 0, h, j, x)];
            for (int x = 0; x < 6; x++)
                c->v[ac_v_index(&c->contig, 2, h, j, x)] = c->v[ac_v_index(&c->contig, 0, h, j, x)];
        }
    for (int b = 0; b < 3; b++) /* padding keys NaN, as the inputs make them */
        for (int h = 0; h < 2; h++)
            for (int j = lens[b]; j < 13; j++) {
                for (int x = 0; x < 8; x++)
                    c->k[ac_kv_index(&c->contig, b, h, j, x)] = NAN;
                for (int x = 0; x < 6; x++)
                    c->v[ac_v_index(&c->contig, b, h, j, x)] = NAN;
            }
    size_t nk = ac_kv_elems(&c->paged), nv = ac_v_elems(&c->paged);
    c->k_pages = ts_alloc(nk), c->v_pages = ts_alloc(nv);
    for (size_t x = 0; x < nk; x++)
        c->k_pages[x] = NAN;
    for (size_t x = 0; x < nv; x++)
        c->v_pages[x] = NAN;
    ac_paged_scatter(&c->paged, AC_TENSOR_K, c->k, c->k_pages);
    ac_paged_scatter(&c->paged, AC_TENSOR_V, c->v, c->v_pages);
}

static void free_case(pg_case *c) { free(c->k), free(c->v), free(c->k_pages), free(c->v_pages); }

Test(ref_paged, key_index_goes_through_the_block_table)
{
    pg_case c;
    make_case(&c, 1);
    /* sequence 2, key 9: page entry 9 / 4 = 2 -> page 0, slot 1; BSHD-like pages (page, slot, Hkv, d) */
    cr_assert_eq(ac_kv_index(&c.paged, 2, 1, 9, 3), (size_t)((0 * 4 + 1) * 2 + 1) * 8 + 3);
    cr_assert_eq(ac_v_index(&c.paged, 0, 0, 5, 2), (size_t)((2 * 4 + 1) * 2 + 0) * 6 + 2);
    cr_assert_eq(ac_kv_elems(&c.paged), (size_t)10 * 4 * 2 * 8);
    cr_assert_eq(ac_stored_rows(&c.paged, 2, false), 13);
    cr_assert_eq(ac_problem_variants(&c.paged), AC_VAR_PAGED | AC_VAR_DV);
    c.paged.num_splits = 3;
    cr_assert_eq(ac_problem_variants(&c.paged), AC_VAR_PAGED | AC_VAR_DV | AC_VAR_SPLIT);
    c.paged.num_splits = 1;
    cr_assert_eq(ac_problem_variants(&c.paged) & AC_VAR_SPLIT, 0u, "one split is no split");
    free_case(&c);
}

Test(ref_paged, gather_gives_the_contiguous_tensors_bit_for_bit)
{
    pg_case c;
    make_case(&c, 2);
    ac_problem twin = ac_problem_unpaged(&c.paged);
    cr_assert_eq(twin.page_size, 0);
    cr_assert_null(twin.block_table);
    cr_assert_eq(ac_kv_elems(&twin), ac_kv_elems(&c.contig));
    double *k = ts_alloc(ac_kv_elems(&twin)), *v = ts_alloc(ac_v_elems(&twin));
    ac_paged_gather(&c.paged, AC_TENSOR_K, c.k_pages, k);
    ac_paged_gather(&c.paged, AC_TENSOR_V, c.v_pages, v);
    for (size_t x = 0; x < ac_kv_elems(&twin); x++)
        cr_assert(memcmp(&k[x], &c.k[x], sizeof(double)) == 0 || (isnan(k[x]) && isnan(c.k[x])), "K[%zu]", x);
    for (size_t x = 0; x < ac_v_elems(&twin); x++)
        cr_assert(memcmp(&v[x], &c.v[x], sizeof(double)) == 0 || (isnan(v[x]) && isnan(c.v[x])), "V[%zu]", x);
    free(k), free(v), free_case(&c);
}

Test(ref_paged, unused_slots_and_pages_stay_nan)
{
    pg_case c;
    make_case(&c, 3);
    /* page 7 holds sequence 0's keys 8..11: only key 8 is real; pages 1, 4, 6, 8, 9 are in no sequence */
    size_t per_page = (size_t)4 * 2 * 8;
    for (int slot = 0; slot < 4; slot++)
        for (size_t x = 0; x < 2 * 8; x++) {
            double k = c.k_pages[7 * per_page + slot * 16 + x];
            cr_assert(slot == 0 ? !isnan(k) : isnan(k), "page 7 slot %d", slot);
        }
    static const int unused[] = {1, 4, 6, 8, 9};
    for (size_t u = 0; u < sizeof unused / sizeof unused[0]; u++)
        for (size_t x = 0; x < per_page; x++)
            cr_assert(isnan(c.k_pages[unused[u] * per_page + x]), "page %d", unused[u]);
    free_case(&c);
}

/* The fp64 forward and the naive baseline on the gathered twin equal those on
 * the contiguous problem, bit for bit. */
Test(ref_paged, reference_through_the_table_equals_the_contiguous_one)
{
    pg_case c;
    make_case(&c, 4);
    ac_problem twin = ac_problem_unpaged(&c.paged);
    ts_rng r = {44};
    size_t nq = ac_q_elems(&twin), no = ac_o_elems(&twin), nl = ac_lse_elems(&twin);
    double *q = ts_alloc(nq), *k = ts_alloc(ac_kv_elems(&twin)), *v = ts_alloc(ac_v_elems(&twin));
    ts_fill(&r, AC_BF16, 1.0, q, nq);
    ac_paged_gather(&c.paged, AC_TENSOR_K, c.k_pages, k);
    ac_paged_gather(&c.paged, AC_TENSOR_V, c.v_pages, v);
    double *o1 = ts_alloc(no), *l1 = ts_alloc(nl), *o2 = ts_alloc(no), *l2 = ts_alloc(nl);
    cr_assert_eq(ref_forward_fp64(&c.contig, q, c.k, c.v, o1, l1, NULL), AC_OK);
    cr_assert_eq(ref_forward_fp64(&twin, q, k, v, o2, l2, NULL), AC_OK);
    cr_assert(memcmp(o1, o2, no * sizeof *o1) == 0, "O");
    cr_assert(memcmp(l1, l2, nl * sizeof *l1) == 0, "LSE");
    cr_assert(isfinite(o1[ac_o_index(&twin, 2, 3, 1, 5)]), "a real row is finite");
    cr_assert_eq(l1[ac_lse_index(&twin, 1, 0, 0)], -INFINITY, "sequence 1 has no keys");
    cr_assert_eq(ref_naive_forward(&c.contig, AC_BF16, q, c.k, c.v, o1, l1, NULL), AC_OK);
    cr_assert_eq(ref_naive_forward(&twin, AC_BF16, q, k, v, o2, l2, NULL), AC_OK);
    cr_assert(memcmp(o1, o2, no * sizeof *o1) == 0, "naive O");
    free(q), free(k), free(v), free(o1), free(l1), free(o2), free(l2), free_case(&c);
}

typedef struct {
    int what;
    const char *needle;
} bad_row;

static void spoil(ac_problem *p, int *table, int what)
{
    switch (what) {
    case 0:
        table[8 + 2] = 10;
        break; /* page id past num_pages */
    case 1:
        table[1] = -3;
        break; /* negative page id */
    case 2:
        p->pages_per_seq = 3;
        break; /* 3 pages of 4 < 13 keys */
    case 3:
        p->page_size = 0;
        break; /* a table without a page size */
    case 4:
        p->seqlens_k = NULL;
        break;
    case 5:
        p->layout = AC_LAYOUT_THD;
        break;
    case 6:
        p->num_splits = -1;
        break;
    default:
        p->num_pages = 0;
        break;
    }
}

Test(ref_paged, bad_fields_are_named)
{
    static const bad_row rows[] = {{0, "block_table[2][2]=10: page id out of range 0..9"},
                                   {1, "block_table[0][1]=-3"},
                                   {2, "too short for seqlens_k[2]=13"},
                                   {3, "page_size: must be >= 1"},
                                   {4, "seqlens_k"},
                                   {5, "THD"},
                                   {6, "num_splits"},
                                   {7, "num_pages"}};
    for (size_t x = 0; x < sizeof rows / sizeof rows[0]; x++) {
        pg_case c;
        make_case(&c, 5);
        ac_err err = {{0}};
        cr_assert_eq(ac_problem_validate(&c.paged, 0, &err), AC_OK, "%s", err.msg);
        spoil(&c.paged, c.table, rows[x].what);
        cr_assert_eq(ac_problem_validate(&c.paged, 0, &err), AC_ERR_INPUT, "row %zu", x);
        cr_assert(strstr(err.msg, rows[x].needle), "'%s' lacks '%s'", err.msg, rows[x].needle);
        free_case(&c);
    }
}

/* The memory a paged case needs counts its pages beside the contiguous twin. */
Test(ref_paged, the_working_set_counts_the_pages)
{
    pg_case c;
    make_case(&c, 6);
    ac_problem twin = ac_problem_unpaged(&c.paged);
    double pages = 12.0 * 10 * 4 * 2 * (8 + 6);
    cr_assert_eq(ac_problem_working_set(&c.paged, 1) - ac_problem_working_set(&twin, 1), pages);
    free_case(&c);
}
