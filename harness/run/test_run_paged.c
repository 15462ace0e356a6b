/* harness/run/test_run_paged.c — the paged KV cache and split-KV end to end
 * (suite harness_paged): the inputs of kv=paged(P) (the table drawn, slots
 * not in use NaN, the gathered K and V those of the unpaged line), the
 * reference of a paged case equal to the unpaged one bit for bit, correct
 * kernels passing paged and split lines, each decode mutant caught with the
 * kind and at the place its bug puts it, a kernel not claiming paging not
 * run on a paged case, and the block table in the worker's arena. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/harness.h"
#include "harness/run/arena.h"
#include "harness/run/test_worker_support.h"

TestSuite(harness_paged, .init = use_attncheck_as_worker);

static ac_inputs make(const char *line)
{
    ac_case c;
    ac_inputs in;
    ac_err err = {{0}};
    cr_assert_eq(ac_case_parse(line, &c, &err), AC_OK, "%s: %s", line, err.msg);
    cr_assert_eq(ac_inputs_make(&c, &in, &err), AC_OK, "%s: %s", line, err.msg);
    return in;
}

static ac_result run_line(const char *kernel, const char *line, bool isolate)
{
    const ac_kernel *k = ac_kernel_find(kernel);
    cr_assert_not_null(k, "no kernel %s", kernel);
    ac_case c;
    ac_err err = {{0}};
    cr_assert_eq(ac_case_parse(line, &c, &err), AC_OK, "%s: %s", line, err.msg);
    ac_budgets b;
    cr_assert_eq(ac_budgets_load(ac_budgets_default_path(), &b, &err), AC_OK, "%s", err.msg);
    ac_run_opts o = {.backward = true, .cert_rows = 2, .isolate = isolate};
    ac_result r;
    cr_assert_eq(ac_run_case(k, &c, &b, &o, &r, &err), AC_OK, "%s on %s: %s", kernel, line, err.msg);
    return r;
}

#define BASE "v1 seed=5 b=3 hq=4 hkv=2 nq=3 nk=150 d=16 dtype=bf16 mask=causal-br seqlens-k=150,1,37 layout=bshd "

/* Every slot of the cache is either one sequence's key (finite) or NaN, and the
 * slots in use are exactly those the table names for keys j < nk_b. */
Test(harness_paged, unused_slots_and_spare_pages_are_nan)
{
    ac_inputs in = make(BASE "dist=normal(0,1) scale=auto kv=paged(16)");
    const ac_problem *p = &in.p;
    cr_assert_eq(p->page_size, 16);
    cr_assert_eq(p->pages_per_seq, 10, "ceil(150 / 16)");
    size_t rows = (size_t)p->num_pages * p->page_size;
    bool *used = calloc(rows, 1);
    for (int b = 0; b < p->batch; b++)
        for (int j = 0; j < p->seqlens_k[b]; j++)
            used[ac_paged_row(p, b, j)] = true;
    size_t n_used = 0;
    for (size_t r = 0; r < rows; r++) {
        n_used += used[r];
        for (int h = 0; h < p->heads_kv; h++)
            for (int c = 0; c < p->head_dim; c++) {
                double k = in.kd[(r * p->heads_kv + h) * p->head_dim + c];
                cr_assert(used[r] ? isfinite(k) : isnan(k), "row %zu used=%d K=%g", r, used[r], k);
            }
    }
    /* 10 + 1 + 3 pages, unless sequence 2 shares a prefix page of sequence 0 */
    cr_assert(n_used <= 150 + 1 + 37 && n_used >= 150 + 1 + 37 - 32, "%zu slots in use", n_used);
    cr_assert_gt(p->num_pages, 14 - 2, "spare pages beyond those in use");
    free(used);
    ac_inputs_free(&in);
}

/* dist=equal() shares nothing: the gathered K, V are the unpaged line's bit for
 * bit, and so is the whole reference (fp64, scales, naive baseline). */
Test(harness_paged, the_reference_through_the_table_equals_the_unpaged_one)
{
    ac_inputs flat = make(BASE "dist=uniform(-1,1) scale=auto kv=paged(8,contig)");
    ac_inputs paged = make(BASE "dist=uniform(-1,1) scale=auto kv=paged(8)");
    ac_inputs plain = make(BASE "dist=uniform(-1,1) scale=auto");
    ac_err err = {{0}};
    ac_inputs view;
    cr_assert_eq(ac_inputs_unpaged(&flat, &view, &err), AC_OK, "%s", err.msg);
    size_t nk = ac_kv_elems(&plain.p);
    for (size_t x = 0; x < nk; x++) /* no sharing with a contiguous table: every key the plain line's */
        cr_assert(view.kd[x] == plain.kd[x] || (isnan(view.kd[x]) && isnan(plain.kd[x])), "K[%zu]", x);
    ac_inputs_unpaged_free(&flat, &view);
    ac_reference r_flat, r_plain;
    cr_assert_eq(ac_reference_make(&flat, false, 2, &r_flat, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(ac_reference_make(&plain, false, 2, &r_plain, &err), AC_OK, "%s", err.msg);
    size_t no = ac_o_elems(&plain.p), nl = ac_lse_elems(&plain.p);
    cr_assert(memcmp(r_flat.o, r_plain.o, no * sizeof(double)) == 0, "O");
    cr_assert(memcmp(r_flat.e_o, r_plain.e_o, no * sizeof(double)) == 0, "E_O");
    cr_assert(memcmp(r_flat.naive_o, r_plain.naive_o, no * sizeof(double)) == 0, "naive O");
    cr_assert(memcmp(r_flat.lse, r_plain.lse, nl * sizeof(double)) == 0, "LSE");
    cr_assert(r_flat.cert.certified, "the MPFR certificate on the gathered twin");
    cr_assert_eq(ac_reference_make(&paged, true, 0, &r_plain, &err), AC_ERR_INPUT, "paged: forward only");
    ac_reference_free(&r_flat);
    ac_inputs_free(&flat), ac_inputs_free(&paged), ac_inputs_free(&plain);
}

/* A shuffled table is not the identity, and a shared prefix page is named by two sequences. */
Test(harness_paged, the_table_is_shuffled_with_shared_prefix_pages)
{
    int shuffled = 0, shared = 0;
    for (int seed = 1; seed <= 20; seed++) {
        char line[512];
        snprintf(line, sizeof line,
                 "v1 seed=%d b=4 hq=2 hkv=1 nq=1 nk=64 d=8 dtype=f16 mask=causal-br seqlens-k=64,64,40,64 layout=bhsd "
                 "dist=normal(0,1) scale=auto kv=paged(8)",
                 seed);
        ac_inputs in = make(line);
        const ac_problem *p = &in.p;
        bool identity = true;
        for (int b = 0, next = 0; b < p->batch; b++)
            for (int e = 0; e < (p->seqlens_k[b] + 7) / 8; e++)
                identity &= p->block_table[b * p->pages_per_seq + e] == next++;
        shuffled += !identity;
        for (int b = 1; b < p->batch; b++)
            if (p->block_table[b * p->pages_per_seq] == p->block_table[0] ||
                p->block_table[b * p->pages_per_seq] == p->block_table[p->pages_per_seq]) {
                shared++;
                for (int c = 0; c < 8; c++) /* the shared page: one key, the same values for both */
                    cr_assert(!isnan(in.kd[ac_kv_index(p, b, 0, 0, c)]));
                break;
            }
        ac_inputs_free(&in);
    }
    cr_assert_geq(shuffled, 19, "%d of 20 tables shuffled", shuffled);
    cr_assert_geq(shared, 5, "%d of 20 caches share a prefix page", shared);
}

Test(harness_paged, correct_kernels_pass_paged_and_split_lines)
{
    static const char *const lines[] = {
        BASE "dist=normal(0,1) scale=auto kv=paged(16) splits=3",
        BASE "dist=normal(0,1) scale=auto kv=paged(1) splits=40",
        "v1 seed=6 b=2 hq=8 hkv=1 nq=16 nk=300 d=64 dtype=f16 mask=causal-br seqlens-k=0,300 layout=bhsd "
        "dist=increasing(16) scale=auto kv=paged(256)",
        "v1 seed=7 b=2 hq=2 hkv=2 nq=4 nk=129 d=8 dtype=f32 mask=window-br(20,0) layout=bhsd dist=normal(0,1) "
        "scale=auto softcap=5 sinks=over(4) kv=paged(4) splits=2",
        "v1 seed=8 b=1 hq=2 hkv=1 nq=70 nk=130 d=32 dtype=bf16 mask=none layout=bshd dist=normal(0,1) scale=auto "
        "splits=4",
    };
    static const char *const kernels[] = {"cpu-flash", "cpu-flash-128x64", "ref-fp64"};
    for (size_t l = 0; l < sizeof lines / sizeof lines[0]; l++)
        for (size_t k = 0; k < 3; k++) {
            ac_result r = run_line(kernels[k], lines[l], false);
            cr_assert_eq(r.verdict, AC_VERDICT_PASS, "%s on %s: %s", kernels[k], lines[l], r.why);
        }
}

typedef struct {
    const char *mutant, *line, *kind, *where;
} caught_row;

/* Each decode mutant on a line that shows its bug: the kind and the first place named. */
Test(harness_paged, each_decode_mutant_is_caught_where_its_bug_is)
{
    static const caught_row rows[] = {
        /* sequence 1 has one key: two of its three splits are empty */
        {"empty-split-nan", BASE "dist=normal(0,1) scale=auto kv=paged(16) splits=3", "O:unexpected-nan",
         "at b=1 h=0 row="},
        /* only the last sequence is unwritten */
        {"later-seq-unwritten", BASE "dist=normal(0,1) scale=auto kv=paged(16) splits=3", "O:unwritten",
         "at b=2 h=0 row=0"},
        /* 150 keys in pages of 16: slots 150..159 of sequence 0's last page; sequence 1 (1 key) reads 15 */
        {"last-page-slots", BASE "dist=normal(0,1) scale=auto kv=paged(16,contig) splits=1", "O:unexpected-nan",
         "at b=0 h=0 row="},
        /* keys 16.. read from the wrong page: sequences 0 and 2 (the worst, here), never 1 (one key) */
        {"page-size-wrong", BASE "dist=normal(0,1) scale=auto kv=paged(16,contig) splits=1", "O:scaled", "at b=2"},
        {"split-off-by-one",
         "v1 seed=5 b=1 hq=1 hkv=1 nq=1 nk=150 d=16 dtype=bf16 mask=none layout=bhsd "
         "dist=normal(0,1) scale=auto kv=paged(16) splits=3",
         "O:scaled", "at b=0 h=0 row=0"},
        {"combine-no-rescale",
         "v1 seed=5 b=1 hq=1 hkv=1 nq=1 nk=150 d=16 dtype=bf16 mask=none layout=bhsd "
         "dist=increasing(16) scale=auto kv=paged(16) splits=3",
         "O:scaled", "at b=0 h=0 row=0"},
    };
    for (size_t x = 0; x < sizeof rows / sizeof rows[0]; x++) {
        char name[96];
        snprintf(name, sizeof name, "cpu-flash-mutant-%s", rows[x].mutant);
        ac_result r = run_line(name, rows[x].line, false);
        cr_assert_eq(r.verdict, AC_VERDICT_FAIL, "%s passed", name);
        cr_assert_str_eq(r.kind, rows[x].kind, "%s: %s", name, r.why);
        cr_assert(strstr(r.why, rows[x].where), "%s: '%s' lacks '%s'", name, r.why, rows[x].where);
        ac_result clean = run_line("cpu-flash", rows[x].line, false);
        cr_assert_eq(clean.verdict, AC_VERDICT_PASS, "cpu-flash on %s: %s", rows[x].line, clean.why);
    }
}

/* The bugs need what they need: a single split hides the split bugs, whole pages the page bugs. */
Test(harness_paged, decode_mutants_pass_where_their_bug_cannot_show)
{
    static const caught_row rows[] = {
        {"empty-split-nan", BASE "dist=normal(0,1) scale=auto kv=paged(16) splits=1", NULL, NULL},
        {"split-off-by-one", BASE "dist=normal(0,1) scale=auto kv=paged(16) splits=1", NULL, NULL},
        {"combine-no-rescale", BASE "dist=normal(0,1) scale=auto kv=paged(16) splits=1", NULL, NULL},
        {"last-page-slots",
         "v1 seed=5 b=1 hq=1 hkv=1 nq=1 nk=64 d=16 dtype=bf16 mask=none layout=bhsd "
         "dist=normal(0,1) scale=auto kv=paged(16)",
         NULL, NULL},
        {"page-size-wrong",
         "v1 seed=5 b=1 hq=1 hkv=1 nq=1 nk=16 d=16 dtype=bf16 mask=none layout=bhsd "
         "dist=normal(0,1) scale=auto kv=paged(16)",
         NULL, NULL},
        {"later-seq-unwritten",
         "v1 seed=5 b=1 hq=1 hkv=1 nq=1 nk=64 d=16 dtype=bf16 mask=none layout=bhsd "
         "dist=normal(0,1) scale=auto kv=paged(16)",
         NULL, NULL},
    };
    for (size_t x = 0; x < sizeof rows / sizeof rows[0]; x++) {
        char name[96];
        snprintf(name, sizeof name, "cpu-flash-mutant-%s", rows[x].mutant);
        ac_result r = run_line(name, rows[x].line, false);
        cr_assert_eq(r.verdict, AC_VERDICT_PASS, "%s on %s: %s", name, rows[x].line, r.why);
    }
}

/* A kernel that claims no paging is not given a paged case. */
Test(harness_paged, a_kernel_without_the_paged_bit_is_not_run)
{
    ac_kernel k = *ac_kernel_find("cpu-flash");
    k.name = "cpu-flash-unpaged";
    k.caps.variants &= ~(unsigned)AC_VAR_PAGED;
    ac_inputs in = make(BASE "dist=normal(0,1) scale=auto kv=paged(16)");
    ac_err err = {{0}};
    cr_assert_eq(ac_kernel_supports(&k, &in.p, in.c.dtype, false, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "paged"), "%s", err.msg);
    ac_inputs_free(&in);
}

/* The arena carries the block table, the problem points at it, and a kernel
 * run in the worker gives the same metrics as in this process. */
Test(harness_paged, the_block_table_travels_in_the_arena_and_the_worker_agrees)
{
    ac_inputs in = make(BASE "dist=normal(0,1) scale=auto kv=paged(16) splits=2");
    ac_arena_layout l;
    ac_arena_plan(&in, false, &l);
    cr_assert_eq(l.bytes[AC_BUF_BLOCK_TABLE], (uint64_t)3 * 10 * sizeof(int));
    cr_assert_eq(l.bytes[AC_BUF_K], (uint64_t)in.p.num_pages * 16 * 2 * 16 * 2, "the pages, bf16");
    uint8_t *base = aligned_alloc(256, (l.total + 255) / 256 * 256);
    ac_arena_put_inputs(&l, &in, base);
    ac_problem q = ac_arena_problem(&in.p, &l, base);
    cr_assert_eq((const uint8_t *)q.block_table, base + l.off[AC_BUF_BLOCK_TABLE]);
    cr_assert(memcmp(q.block_table, in.p.block_table, l.bytes[AC_BUF_BLOCK_TABLE]) == 0);
    free(base);
    ac_inputs_free(&in);
    ac_result a = run_line("cpu-flash", BASE "dist=normal(0,1) scale=auto kv=paged(16) splits=2", true);
    ac_result b = run_line("cpu-flash", BASE "dist=normal(0,1) scale=auto kv=paged(16) splits=2", false);
    cr_assert_eq(a.verdict, AC_VERDICT_PASS, "%s", a.why);
    cr_assert(memcmp(&a.m[AC_OUT_O], &b.m[AC_OUT_O], sizeof a.m[AC_OUT_O]) == 0, "O's metrics");
}
