/* harness/verdict/test_compare_parallel.c — the comparator's walk in tasks:
 * the metrics do not depend on the thread count, ties and the first special
 * go to the first place in walk order across tasks, and the partition moves
 * the means in their last bits only (suite harness_compare). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness/harness.h"
#include "harness/verdict/compare_internal.h"

/* One output of a varlen, bottom-right causal problem (nq > nk: the first rows
 * of a sequence see no key) with fresh random references, scales and naive
 * values, and a kernel off by a random few ulps everywhere. */
typedef struct {
    ac_inputs in;
    int lens_q[2], lens_k[2];
    size_t n;
    double *ref, *escale, *naive;
    void *got;
} fixture;

static uint64_t rng_state = 0xc0ffee;
static double uniform01(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1p-53;
}

static void fixture_init(fixture *f, ac_dtype t, ac_output which)
{
    memset(f, 0, sizeof *f);
    f->in.c.dtype = t;
    f->lens_q[0] = 40, f->lens_q[1] = 29, f->lens_k[0] = 23, f->lens_k[1] = 31;
    ac_problem p = ac_problem_dense(2, 4, 2, 40, 31, 16);
    p.layout = AC_LAYOUT_BSHD;
    p.windowed = true, p.window_left = AC_WINDOW_INF, p.window_right = 0, p.align = AC_ALIGN_BOTTOM_RIGHT;
    p.seqlens_q = f->lens_q, p.seqlens_k = f->lens_k;
    f->in.p = p;
    bool k_like = which == AC_OUT_DK || which == AC_OUT_DV;
    f->n = which == AC_OUT_LSE ? ac_lse_elems(&p) : k_like ? ac_kv_elems(&p) : ac_q_elems(&p);
    ac_dtype st = ac_output_dtype(t, which);
    f->ref = calloc(f->n, sizeof(double));
    f->escale = calloc(f->n, sizeof(double));
    f->naive = calloc(f->n, sizeof(double));
    double *y = calloc(f->n, sizeof(double));
    f->got = calloc(f->n, 4);
    cr_assert(f->ref && f->escale && f->naive && y && f->got);
    for (size_t e = 0; e < f->n; e++) {
        f->ref[e] = (uniform01() < 0.5 ? -1 : 1) * ldexp(1.0 + uniform01(), (int)(8 * uniform01()) - 4);
        f->escale[e] = 1.0 + 2.0 * uniform01();
        double ulp = ac_ulp(st, f->ref[e]);
        y[e] = ac_round(st, f->ref[e] + ulp * (int)(7 * uniform01() - 3));
        f->naive[e] = f->ref[e] + ulp * (int)(5 * uniform01() - 2);
    }
    ac_store(st, y, f->n, f->got);
    free(y);
}

static void fixture_free(fixture *f) { free(f->ref), free(f->escale), free(f->naive), free(f->got); }

static void put(fixture *f, ac_output which, size_t at, double y)
{
    ac_dtype st = ac_output_dtype(f->in.c.dtype, which);
    ac_bits_put(st, f->got, at, ac_narrow(st, y));
}

static void compare_on(const fixture *f, ac_output which, int workers, int rows_per_task, ac_metrics *m)
{
    compare_with(&f->in, which, f->got, f->ref, f->escale, f->naive, workers, rows_per_task, m);
}

static void assert_where(ac_where w, int b, int h, int row, int col)
{
    cr_assert(w.b == b && w.h == h && w.row == row && w.col == col,
              "expected (b=%d h=%d row=%d col=%d), got (%d %d %d %d)", b, h, row, col, w.b, w.h, w.row, w.col);
}

/* Specials in several tasks, then every output at 1, 3 and 8 workers and
 * three task sizes: the same ac_metrics, byte for byte, for each task size. */
Test(harness_compare, metrics_do_not_depend_on_the_thread_count)
{
    const ac_output outs[] = {AC_OUT_O, AC_OUT_LSE, AC_OUT_DQ, AC_OUT_DK, AC_OUT_DV};
    const int rows[] = {1, 7, 0}, workers[] = {1, 3, 8};
    for (int o = 0; o < 5; o++) {
        fixture f;
        fixture_init(&f, AC_BF16, outs[o]);
        put(&f, outs[o], f.n / 3, NAN);
        put(&f, outs[o], f.n / 2, INFINITY);
        ac_bits_put(ac_output_dtype(AC_BF16, outs[o]), f.got, 2 * f.n / 3,
                    ac_dtype_poison(ac_output_dtype(AC_BF16, outs[o])));
        for (int r = 0; r < 3; r++) {
            ac_metrics one, many;
            compare_on(&f, outs[o], 1, rows[r], &one);
            cr_assert_eq(ac_metrics_specials(&one), 3, "%s: specials %zu", ac_output_name(outs[o]),
                         ac_metrics_specials(&one));
            for (int w = 1; w < 3; w++) {
                compare_on(&f, outs[o], workers[w], rows[r], &many);
                cr_assert_eq(memcmp(&one, &many, sizeof one), 0, "%s, %d rows a task: 1 and %d workers differ",
                             ac_output_name(outs[o]), rows[r], workers[w]);
            }
        }
        fixture_free(&f);
    }
}

/* Two equal worst errors and two specials, each pair in different tasks (one
 * row a task): the report names the first of each in walk order (b, h, row, col). */
Test(harness_compare, ties_and_the_first_special_go_to_the_earliest_place_across_tasks)
{
    fixture f;
    fixture_init(&f, AC_F16, AC_OUT_O);
    const ac_problem *p = &f.in.p;
    size_t early = ac_q_index(p, 0, 3, 30, 5), late = ac_q_index(p, 1, 1, 20, 9);
    f.ref[early] = f.ref[late] = 1.5;
    f.escale[early] = f.escale[late] = 2.0;
    put(&f, AC_OUT_O, late, 1.5 + 900 * 0x1p-10); /* 900 ulps: far above the random few */
    put(&f, AC_OUT_O, early, 1.5 + 900 * 0x1p-10);
    size_t nan_at = ac_q_index(p, 1, 0, 25, 2), inf_at = ac_q_index(p, 0, 2, 39, 15);
    put(&f, AC_OUT_O, nan_at, NAN);
    put(&f, AC_OUT_O, inf_at, INFINITY);
    for (int workers = 1; workers <= 8; workers += 7) {
        ac_metrics m;
        compare_on(&f, AC_OUT_O, workers, 1, &m);
        cr_assert_eq(m.max_scaled, 900 * 0x1p-10 / (0x1p-11 * 2.0), "max_scaled %g", m.max_scaled);
        assert_where(m.at_max_scaled, 0, 3, 30, 5);
        assert_where(m.at_max_ulp, 0, 3, 30, 5);
        cr_assert_eq(m.worst_got, 1.5 + 900 * 0x1p-10);
        cr_assert_eq(m.n_unexpected_nan, 1);
        cr_assert_eq(m.n_overflow, 1);
        assert_where(m.first_special, 0, 2, 39, 15);
        cr_assert(isinf(m.special_got) && m.special_got > 0);
    }
    fixture_free(&f);
}

/* The partition moves the means in their last bits only; everything else is
 * the same whatever the task size, the single task of each (b, h) included. */
Test(harness_compare, task_size_changes_the_means_in_their_last_bits_only)
{
    const ac_output outs[] = {AC_OUT_O, AC_OUT_LSE, AC_OUT_DK};
    for (int o = 0; o < 3; o++) {
        fixture f;
        fixture_init(&f, AC_F16, outs[o]);
        ac_metrics whole, rows1;
        compare_on(&f, outs[o], 1, 1000, &whole); /* one task per (b, h) */
        compare_on(&f, outs[o], 3, 1, &rows1);
        cr_assert_gt(whole.n_mean, 200u);
        double means[][2] = {{whole.mean_ulp, rows1.mean_ulp},
                             {whole.mean_abs, rows1.mean_abs},
                             {whole.mean_escale, rows1.mean_escale},
                             {whole.naive_mean_abs, rows1.naive_mean_abs},
                             {whole.rmse, rows1.rmse},
                             {whole.naive_rmse, rows1.naive_rmse}};
        for (int k = 0; k < 6; k++)
            cr_assert_float_eq(means[k][0], means[k][1], 1e-13 * fabs(means[k][0]), "%s mean %d: %.17g vs %.17g",
                               ac_output_name(outs[o]), k, means[k][0], means[k][1]);
        /* the rest exactly: copy the means over and compare the bytes */
        rows1.mean_ulp = whole.mean_ulp, rows1.mean_abs = whole.mean_abs, rows1.mean_escale = whole.mean_escale;
        rows1.naive_mean_abs = whole.naive_mean_abs, rows1.rmse = whole.rmse, rows1.naive_rmse = whole.naive_rmse;
        rows1.vs_naive_mean = whole.vs_naive_mean;
        cr_assert_eq(memcmp(&whole, &rows1, sizeof whole), 0, "%s: a field other than a mean differs",
                     ac_output_name(outs[o]));
        if (outs[o] != AC_OUT_DK)
            cr_assert_gt(whole.masked_rows, 0u, "the bottom-right rows without keys are counted");
        fixture_free(&f);
    }
}
