/* harness/verdict/test_compare_params.c — the variants' parameter gradients
 * through the comparator's walk (suite harness_compare): dBias (rows i of each
 * broadcast slice (mb, mh), the keys some sequence of the slice has) and
 * dSink (one value per query head) give the same metrics on any thread count
 * and task size, name planted errors at their place, compare exactly the
 * entries a sequence has, and count the diagnosis's over-budget elements. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness/harness.h"
#include "harness/verdict/compare_internal.h"

/* Varlen bottom-right causal (2 batches, 4 query heads), with a bias of
 * (bias_batch, bias_heads) and f32 or the inputs' dtype, or sinks. */
typedef struct {
    ac_inputs in;
    int lens_q[2], lens_k[2];
    float sinks[4];
    size_t n;
    double *ref, *escale;
    void *got, *bias;
} pfix;

static uint64_t state = 0xbadc0de;
static double uniform01(void)
{
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1p-53;
}

static void pfix_init(pfix *f, ac_dtype t, ac_output which, int bias_batch, int bias_heads, ac_dtype bias_dtype)
{
    memset(f, 0, sizeof *f);
    f->in.c.dtype = t;
    f->lens_q[0] = 40, f->lens_q[1] = 29, f->lens_k[0] = 23, f->lens_k[1] = 31;
    ac_problem p = ac_problem_dense(2, 4, 2, 40, 31, 16);
    p.windowed = true, p.window_left = AC_WINDOW_INF, p.window_right = 0, p.align = AC_ALIGN_BOTTOM_RIGHT;
    p.seqlens_q = f->lens_q, p.seqlens_k = f->lens_k;
    if (which == AC_OUT_DBIAS) {
        p.bias_batch = bias_batch, p.bias_heads = bias_heads, p.bias_dtype = bias_dtype;
        f->bias = calloc((size_t)bias_batch * bias_heads * 40 * 31, 4);
        p.bias = f->bias;
        f->n = ac_bias_elems(&p);
    } else {
        p.sinks = f->sinks;
        f->n = 4;
    }
    f->in.p = p;
    ac_dtype st = which == AC_OUT_DBIAS ? bias_dtype : ac_output_dtype(t, which);
    f->ref = calloc(f->n, sizeof(double)), f->escale = calloc(f->n, sizeof(double));
    double *y = calloc(f->n, sizeof(double));
    f->got = calloc(f->n, 4);
    cr_assert(f->ref && f->escale && y && f->got);
    for (size_t e = 0; e < f->n; e++) {
        f->ref[e] = (uniform01() < 0.5 ? -1 : 1) * ldexp(1.0 + uniform01(), (int)(8 * uniform01()) - 4);
        f->escale[e] = 1.0 + 2.0 * uniform01();
        y[e] = ac_round(st, f->ref[e] + ac_ulp(st, f->ref[e]) * (int)(7 * uniform01() - 3));
    }
    ac_store(st, y, f->n, f->got);
    free(y);
}

static void pfix_free(pfix *f) { free(f->ref), free(f->escale), free(f->got), free(f->bias); }

static ac_dtype stored(const pfix *f, ac_output which)
{
    return which == AC_OUT_DBIAS ? f->in.p.bias_dtype : ac_output_dtype(f->in.c.dtype, which);
}

static void put(pfix *f, ac_output which, size_t at, double y)
{
    ac_bits_put(stored(f, which), f->got, at, ac_narrow(stored(f, which), y));
}

/* Entries of dBias slice mb some sequence has: row i keeps the keys of the longest sequence reaching it. */
static size_t entries_in_problem(const pfix *f, int mb)
{
    size_t n = 0;
    for (int i = 0; i < 40; i++) {
        int keys = 0;
        for (int b = f->in.p.bias_batch > 1 ? mb : 0; b < (f->in.p.bias_batch > 1 ? mb + 1 : 2); b++)
            if (i < f->lens_q[b] && f->lens_k[b] > keys)
                keys = f->lens_k[b];
        n += (size_t)keys;
    }
    return n;
}

Test(harness_compare, dbias_and_dsink_metrics_do_not_depend_on_the_thread_count)
{
    const int shapes[][2] = {{1, 1}, {1, 4}, {2, 1}, {2, 4}}, rows[] = {1, 7, 0}, workers[] = {1, 3, 8};
    for (int s = 0; s < 5; s++) {
        ac_output which = s < 4 ? AC_OUT_DBIAS : AC_OUT_DSINK;
        pfix f;
        pfix_init(&f, AC_F16, which, s < 4 ? shapes[s][0] : 0, s < 4 ? shapes[s][1] : 0, s % 2 ? AC_F32 : AC_F16);
        put(&f, which, 1, NAN);
        ac_bits_put(stored(&f, which), f.got, 2, ac_dtype_poison(stored(&f, which)));
        for (int r = 0; r < 3; r++) {
            ac_metrics one, many;
            compare_with(&f.in, which, f.got, f.ref, f.escale, NULL, 1, rows[r], &one);
            cr_assert_eq(ac_metrics_specials(&one), 2, "shape %d: specials %zu", s, ac_metrics_specials(&one));
            cr_assert_eq(one.n_unwritten, 1);
            for (int w = 1; w < 3; w++) {
                compare_with(&f.in, which, f.got, f.ref, f.escale, NULL, workers[w], rows[r], &many);
                cr_assert_eq(memcmp(&one, &many, sizeof one), 0, "shape %d, %d rows a task: 1 and %d workers differ", s,
                             rows[r], workers[w]);
            }
        }
        pfix_free(&f);
    }
}

/* A (2, 4) f32 bias: exactly the entries some sequence has are compared; a poisoned
 * entry of padding (row 35 of batch 1, past its 29 rows) is not looked at, the worst
 * error and the first special are named at (mb, mh, i, j). */
Test(harness_compare, dbias_compares_the_entries_a_sequence_has_and_names_the_place)
{
    pfix f;
    pfix_init(&f, AC_BF16, AC_OUT_DBIAS, 2, 4, AC_F32);
    const ac_problem *p = &f.in.p;
    ac_bits_put(AC_F32, f.got, ac_bias_index(p, 1, 2, 35, 3), ac_dtype_poison(AC_F32)); /* padding */
    size_t worst = ac_bias_index(p, 1, 3, 20, 30), special = ac_bias_index(p, 0, 1, 39, 22);
    f.ref[worst] = 1.0, f.escale[worst] = 1.0;
    put(&f, AC_OUT_DBIAS, worst, 1.0 + 4096 * 0x1p-24); /* 4096 f32 units */
    put(&f, AC_OUT_DBIAS, special, INFINITY);
    for (int workers = 1; workers <= 8; workers += 7) {
        ac_metrics m;
        compare_with(&f.in, AC_OUT_DBIAS, f.got, f.ref, f.escale, NULL, workers, 3, &m);
        cr_assert_eq(m.n_compared, 4 * (entries_in_problem(&f, 0) + entries_in_problem(&f, 1)));
        cr_assert_eq(m.n_compared, (size_t)4 * (40 * 23 + 29 * 31), "batch 0 is 40 x 23, batch 1 29 x 31");
        cr_assert_eq(m.n_unwritten, 0, "the padding's poison is not looked at");
        cr_assert_eq(m.n_overflow, 1);
        cr_assert(m.first_special.b == 0 && m.first_special.h == 1 && m.first_special.row == 39 &&
                  m.first_special.col == 22);
        cr_assert_eq(m.max_scaled, 4096.0);
        cr_assert(m.at_max_scaled.b == 1 && m.at_max_scaled.h == 3 && m.at_max_scaled.row == 20 &&
                  m.at_max_scaled.col == 30);
    }
    pfix_free(&f);
}

/* A bias broadcast over the batch: row i's keys are the longest sequence's reaching it. */
Test(harness_compare, a_bias_broadcast_over_the_batch_compares_the_union_of_its_sequences)
{
    pfix f;
    pfix_init(&f, AC_F16, AC_OUT_DBIAS, 1, 1, AC_F16);
    ac_metrics m;
    compare_with(&f.in, AC_OUT_DBIAS, f.got, f.ref, f.escale, NULL, 3, 0, &m);
    /* rows 0..28: both sequences, 31 keys; rows 29..39: batch 0 alone, 23 keys */
    cr_assert_eq(m.n_compared, (size_t)29 * 31 + 11 * 23);
    cr_assert_eq(m.n_compared, entries_in_problem(&f, 0));
    pfix_free(&f);
}

Test(harness_compare, dsink_names_its_head_and_counts_per_head)
{
    pfix f;
    pfix_init(&f, AC_F16, AC_OUT_DSINK, 0, 0, AC_F32);
    f.ref[2] = 0.5, f.escale[2] = 1.0;
    put(&f, AC_OUT_DSINK, 2, 0.5 + 4096 * 0x1p-24); /* dSink is f32: 4096 units of 2^-24 (the noise: <= 96) */
    ac_metrics m;
    compare_with(&f.in, AC_OUT_DSINK, f.got, f.ref, f.escale, NULL, 8, 0, &m);
    cr_assert_eq(m.n_compared, 4);
    cr_assert_eq(m.max_scaled, 4096.0);
    cr_assert(m.at_max_scaled.b == -1 && m.at_max_scaled.h == 2 && m.at_max_scaled.row == -1);
    ac_err err = {{0}};
    cr_assert_eq(ac_compare_count_over(&f.in, AC_OUT_DSINK, f.got, f.ref, f.escale, 200.0, &m, &err), AC_OK);
    cr_assert_eq(m.n_over, 1);
    cr_assert_eq(m.n_heads, 4);
    cr_assert(m.over_per_head[2] == 1 && m.over_per_head[0] == 0 && m.over_per_head[3] == 0);
    cr_assert_eq(m.n_rows_over, 0, "dSink has no rows");
    pfix_free(&f);
}

Test(harness_compare, dbias_over_budget_counts_go_to_its_heads_and_rows)
{
    pfix f;
    pfix_init(&f, AC_F16, AC_OUT_DBIAS, 2, 4, AC_F16);
    const ac_problem *p = &f.in.p;
    int planted[][4] = {{0, 1, 5, 3}, {1, 1, 5, 7}, {1, 3, 28, 0}};
    for (int k = 0; k < 3; k++) {
        size_t at = ac_bias_index(p, planted[k][0], planted[k][1], planted[k][2], planted[k][3]);
        f.ref[at] = 1.0, f.escale[at] = 1.0;
        put(&f, AC_OUT_DBIAS, at, 2.0); /* 2048 units of f16's 2^-11 */
    }
    ac_metrics m;
    ac_err err = {{0}};
    cr_assert_eq(ac_compare_count_over(&f.in, AC_OUT_DBIAS, f.got, f.ref, f.escale, 100.0, &m, &err), AC_OK);
    cr_assert_eq(m.n_over, 3);
    cr_assert_eq(m.n_heads, 4, "the bias's heads");
    cr_assert(m.over_per_head[1] == 2 && m.over_per_head[3] == 1 && m.over_per_head[0] == 0);
    cr_assert_eq(m.n_rows_over, 2);
    cr_assert(m.rows_over[0].row == 5 && m.rows_over[0].n == 2 && m.rows_over[1].row == 28);
    pfix_free(&f);
}
