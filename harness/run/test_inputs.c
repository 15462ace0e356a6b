/* harness/run/test_inputs.c — inputs drawn from case lines: exact dtype values,
 * determinism, the distributions' advertised properties, masks (suite harness_inputs). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "harness/harness.h"

static ac_inputs make(const char *line)
{
    ac_case c;
    ac_err err = {{0}};
    cr_assert_eq(ac_case_parse(line, &c, &err), AC_OK, "%s: %s", line, err.msg);
    ac_inputs in;
    cr_assert_eq(ac_inputs_make(&c, &in, &err), AC_OK, "%s: %s", line, err.msg);
    return in;
}

/* Score S_ij of (b, h) from the widened inputs, scale included. */
static double score(const ac_inputs *in, int b, int h, int i, int j)
{
    const ac_problem *p = &in->p;
    double s = 0.0;
    for (int c = 0; c < p->head_dim; c++)
        s += in->qd[ac_q_index(p, b, h, i, c)] * in->kd[ac_kv_index(p, b, ac_kv_head_of(p, h), j, c)];
    return p->scale * s;
}

static double max_abs(const double *x, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(x[i]));
    return m;
}

static void assert_exact_widenings(const ac_inputs *in)
{
    ac_dtype t = in->c.dtype;
    size_t nq = ac_q_elems(&in->p), nkv = ac_kv_elems(&in->p);
    const void *bufs[4] = {in->q, in->d_o, in->k, in->v};
    const double *wide[4] = {in->qd, in->d_od, in->kd, in->vd};
    for (int a = 0; a < 4; a++)
        for (size_t i = 0; i < (a < 2 ? nq : nkv); i++) {
            double x = wide[a][i];
            cr_assert(isfinite(x), "tensor %d element %zu not finite", a, i);
            cr_assert_eq(x, ac_widen(t, ac_bits_get(t, bufs[a], i)), "tensor %d element %zu", a, i);
            cr_assert_eq(ac_round(t, x), x);
        }
}

Test(harness_inputs, values_are_exact_dtype_values_in_every_dtype)
{
    const char *lines[] = {
        "v1 seed=4 b=2 hq=4 hkv=2 nq=9 nk=13 d=7 dtype=f16 mask=none layout=bhsd dist=normal(0,1) scale=auto",
        "v1 seed=4 b=2 hq=4 hkv=2 nq=9 nk=13 d=7 dtype=bf16 mask=none layout=bshd dist=uniform(-4,4) scale=auto",
        "v1 seed=4 b=2 hq=4 hkv=2 nq=9 nk=13 d=7 dtype=f32 mask=none layout=bhsd dist=outliers(1,0.01) scale=auto",
    };
    for (int l = 0; l < 3; l++) {
        ac_inputs in = make(lines[l]);
        assert_exact_widenings(&in);
        ac_inputs_free(&in);
    }
}

Test(harness_inputs, same_case_gives_byte_identical_tensors)
{
    const char *line = "v1 seed=11 b=2 hq=2 hkv=1 nq=17 nk=5 d=12 dtype=bf16 mask=dense(0.5) maskrows=0.25 layout=bhsd "
                       "dist=normal(0,1) scale=auto";
    ac_inputs a = make(line), b = make(line);
    size_t nq = ac_q_elems(&a.p) * 2, nkv = ac_kv_elems(&a.p) * 2;
    cr_assert(memcmp(a.q, b.q, nq) == 0 && memcmp(a.k, b.k, nkv) == 0 && memcmp(a.v, b.v, nkv) == 0 &&
              memcmp(a.d_o, b.d_o, nq) == 0);
    cr_assert(memcmp(a.dense_mask, b.dense_mask, 17 * 5) == 0);
    ac_inputs c = make("v1 seed=12 b=2 hq=2 hkv=1 nq=17 nk=5 d=12 dtype=bf16 mask=dense(0.5) maskrows=0.25 layout=bhsd "
                       "dist=normal(0,1) scale=auto");
    cr_assert(memcmp(a.q, c.q, nq) != 0, "another seed, other values");
    ac_inputs_free(&a), ac_inputs_free(&b), ac_inputs_free(&c);
}

Test(harness_inputs, both_layouts_hold_the_same_logical_values)
{
    ac_inputs a =
        make("v1 seed=3 b=2 hq=4 hkv=2 nq=5 nk=6 d=3 dtype=f16 mask=none layout=bhsd dist=normal(0,1) scale=auto");
    ac_inputs b =
        make("v1 seed=3 b=2 hq=4 hkv=2 nq=5 nk=6 d=3 dtype=f16 mask=none layout=bshd dist=normal(0,1) scale=auto");
    for (int bb = 0; bb < 2; bb++)
        for (int h = 0; h < 4; h++)
            for (int i = 0; i < 5; i++)
                for (int c = 0; c < 3; c++)
                    cr_assert_eq(a.qd[ac_q_index(&a.p, bb, h, i, c)], b.qd[ac_q_index(&b.p, bb, h, i, c)]);
    for (int bb = 0; bb < 2; bb++)
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < 6; j++)
                for (int c = 0; c < 3; c++)
                    cr_assert_eq(a.vd[ac_kv_index(&a.p, bb, h, j, c)], b.vd[ac_kv_index(&b.p, bb, h, j, c)]);
    ac_inputs_free(&a), ac_inputs_free(&b);
}

Test(harness_inputs, problem_carries_scale_mask_and_lengths)
{
    ac_inputs in = make("v1 seed=1 b=2 hq=2 hkv=1 nq=8 nk=6 d=10 dtype=f16 mask=window-br(inf,2) seqlens-k=6,3 "
                        "layout=bhsd dist=normal(0,1) scale=auto");
    cr_assert_eq(in.p.scale, (double)(float)(1.0 / sqrt(10.0)));
    cr_assert(in.p.windowed && in.p.window_left == AC_WINDOW_INF && in.p.window_right == 2);
    cr_assert_eq(in.p.align, AC_ALIGN_BOTTOM_RIGHT);
    cr_assert(in.p.seqlens_q == NULL && in.p.seqlens_k == in.seqlens_k && in.seqlens_k[1] == 3);
    ac_inputs_free(&in);
    in =
        make("v1 seed=1 b=1 hq=1 hkv=1 nq=8 nk=6 d=10 dtype=f16 mask=causal-tl layout=bhsd dist=normal(0,1) scale=0.1");
    cr_assert_eq(in.p.scale, (double)0.1f);
    cr_assert(in.p.windowed && in.p.window_left == AC_WINDOW_INF && in.p.window_right == 0);
    cr_assert_eq(in.p.align, AC_ALIGN_TOP_LEFT);
    ac_inputs_free(&in);
}

Test(harness_inputs, increasing_raises_every_rows_scores_along_the_keys)
{
    const char *lines[] = {
        "v1 seed=5 b=1 hq=2 hkv=1 nq=4 nk=300 d=16 dtype=f16 mask=none layout=bhsd dist=increasing(16) scale=auto",
        "v1 seed=6 b=2 hq=1 hkv=1 nq=3 nk=200 d=5 dtype=bf16 mask=none layout=bshd dist=increasing(32) scale=0.3",
    };
    for (int l = 0; l < 2; l++) {
        ac_inputs in = make(lines[l]);
        for (int b = 0; b < in.p.batch; b++)
            for (int h = 0; h < in.p.heads_q; h++)
                for (int i = 0; i < in.p.seqlen_q; i++) {
                    double prev = score(&in, b, h, i, 0), tile_max = prev, first = prev;
                    for (int j = 1; j < in.p.seqlen_k; j++) {
                        double s = score(&in, b, h, i, j);
                        cr_assert_geq(s, prev, "row %d: S[%d] = %g < S[%d] = %g", i, j, s, j - 1, prev);
                        if (j % 64 == 0) { /* every K/V tile raises the running max */
                            cr_assert_gt(s, tile_max, "row %d tile at %d", i, j);
                            tile_max = s;
                        }
                        prev = s;
                    }
                    cr_assert_gt(prev - first, in.c.dist_a * 0.4, "row %d grows by %g", i, prev - first);
                }
        ac_inputs_free(&in);
    }
}

Test(harness_inputs, equal_gives_identical_key_rows)
{
    ac_inputs in =
        make("v1 seed=8 b=2 hq=4 hkv=2 nq=5 nk=9 d=6 dtype=f16 mask=none layout=bshd dist=equal() scale=auto");
    for (int b = 0; b < 2; b++)
        for (int h = 0; h < 2; h++)
            for (int j = 1; j < 9; j++)
                for (int c = 0; c < 6; c++)
                    cr_assert_eq(in.kd[ac_kv_index(&in.p, b, h, j, c)], in.kd[ac_kv_index(&in.p, b, h, 0, c)]);
    cr_assert_neq(in.kd[ac_kv_index(&in.p, 0, 0, 0, 0)], in.kd[ac_kv_index(&in.p, 0, 1, 0, 0)], "heads differ");
    ac_inputs_free(&in);
}

Test(harness_inputs, dominant_key_beats_every_other_by_the_margin)
{
    const char *lines[] = {
        "v1 seed=2 b=2 hq=4 hkv=2 nq=7 nk=11 d=8 dtype=f16 mask=none layout=bhsd dist=dominant(8) scale=auto",
        "v1 seed=3 b=1 hq=1 hkv=1 nq=5 nk=6 d=1 dtype=bf16 mask=none layout=bhsd dist=dominant(20) scale=-0.5",
    };
    for (int l = 0; l < 2; l++) {
        ac_inputs in = make(lines[l]);
        for (int b = 0; b < in.p.batch; b++)
            for (int h = 0; h < in.p.heads_q; h++) {
                int jstar = 0; /* the key that wins row 0 must win every row by the margin */
                for (int j = 1; j < in.p.seqlen_k; j++)
                    if (score(&in, b, h, 0, j) > score(&in, b, h, 0, jstar))
                        jstar = j;
                for (int i = 0; i < in.p.seqlen_q; i++)
                    for (int j = 0; j < in.p.seqlen_k; j++)
                        if (j != jstar)
                            cr_assert_geq(score(&in, b, h, i, jstar) - score(&in, b, h, i, j), in.c.dist_a,
                                          "b%d h%d row %d: key %d within the margin of %d", b, h, i, j, jstar);
            }
        ac_inputs_free(&in);
    }
}

/* A seed whose huge/tiny mode is `mode`. */
static uint64_t seed_with_mode(int mode)
{
    for (uint64_t s = 1;; s++) {
        ac_case c = ac_case_default();
        c.seed = s;
        if (ac_dist_mode(&c) == mode)
            return s;
    }
}

Test(harness_inputs, huge_reaches_past_half_the_f16_maximum_in_both_modes)
{
    char line[AC_CASE_LINE_MAX];
    for (int mode = 0; mode < 2; mode++) {
        snprintf(line, sizeof line,
                 "v1 seed=%llu b=1 hq=2 hkv=1 nq=6 nk=7 d=8 dtype=f16 mask=none layout=bhsd dist=huge(0.9) scale=auto",
                 (unsigned long long)seed_with_mode(mode));
        ac_inputs in = make(line);
        assert_exact_widenings(&in); /* and every element finite */
        double q = max_abs(in.qd, ac_q_elems(&in.p)), v = max_abs(in.vd, ac_kv_elems(&in.p));
        double big = mode == 0 ? q : v, other = mode == 0 ? v : q;
        cr_assert_gt(big, 0.5 * 65504, "mode %d: max %g", mode, big);
        cr_assert_lt(other, 16.0, "mode %d: the other tensors stay normal(0,1)", mode);
        ac_inputs_free(&in);
    }
}

Test(harness_inputs, tiny_stays_just_above_the_smallest_normal)
{
    char line[AC_CASE_LINE_MAX];
    snprintf(line, sizeof line,
             "v1 seed=%llu b=1 hq=1 hkv=1 nq=6 nk=40 d=8 dtype=f16 mask=none layout=bhsd dist=tiny() scale=auto",
             (unsigned long long)seed_with_mode(1));
    ac_inputs in = make(line);
    double min_normal = 0x1p-14;
    for (size_t i = 0; i < ac_kv_elems(&in.p); i++) {
        double a = fabs(in.vd[i]);
        cr_assert(a >= 2 * min_normal && a <= 128 * min_normal, "V[%zu] = %g", i, in.vd[i]);
    }
    ac_inputs_free(&in);
}

Test(harness_inputs, dense_maskrows_masks_exactly_the_chosen_rows_fully)
{
    ac_inputs in = make("v1 seed=9 b=1 hq=1 hkv=1 nq=20 nk=7 d=4 dtype=f16 mask=dense(1) maskrows=0.25 layout=bhsd "
                        "dist=normal(0,1) scale=auto");
    int masked = 0;
    for (int i = 0; i < 20; i++) {
        int visible = 0;
        for (int j = 0; j < 7; j++)
            visible += ac_visible(&in.p, 0, 0, i, j);
        cr_assert(visible == 0 || visible == 7, "row %d: keep=1 leaves rows whole or fully masked", i);
        masked += visible == 0;
    }
    cr_assert_eq(masked, 5, "0.25 of 20 rows");
    ac_inputs_free(&in);
    in = make("v1 seed=9 b=1 hq=1 hkv=1 nq=3 nk=7 d=4 dtype=f16 mask=dense(0.5) maskrows=0.01 layout=bhsd "
              "dist=normal(0,1) scale=auto");
    int empty = 0;
    for (int i = 0; i < 3; i++) {
        int visible = 0;
        for (int j = 0; j < 7; j++)
            visible += ac_visible(&in.p, 0, 0, i, j);
        empty += visible == 0;
    }
    cr_assert_geq(empty, 1, "a positive fraction masks at least one row");
    ac_inputs_free(&in);
}

Test(harness_inputs, d_o_is_standard_normal)
{
    ac_inputs in =
        make("v1 seed=21 b=1 hq=4 hkv=4 nq=64 nk=8 d=32 dtype=f32 mask=none layout=bhsd dist=huge(1) scale=auto");
    size_t n = ac_q_elems(&in.p);
    double sum = 0, sum2 = 0;
    for (size_t i = 0; i < n; i++)
        sum += in.d_od[i], sum2 += in.d_od[i] * in.d_od[i];
    double mean = sum / n, var = sum2 / n - mean * mean;
    cr_assert(fabs(mean) < 0.05 && fabs(var - 1) < 0.05, "mean %g var %g over %zu", mean, var, n);
    ac_inputs_free(&in);
}

Test(harness_inputs, too_big_shapes_fail_cleanly)
{
    ac_case c;
    cr_assert_eq(ac_case_parse("v1 seed=1 b=64 hq=64 hkv=64 nq=100000 nk=100000 d=512 dtype=f16", &c, NULL), AC_OK);
    ac_inputs in;
    ac_err err = {{0}};
    cr_assert_eq(ac_inputs_make(&c, &in, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "too big") != NULL, "%s", err.msg);
    cr_assert(in.q == NULL && in.qd == NULL);
    ac_inputs_free(&in); /* safe after a failure */
}

/* Checks one Q-like (q_like) or K-like tensor: elements inside the sequence
 * lengths finite, exact widenings of their bits; padding NaN in both.
 * Returns the largest |x| inside the lengths. */
static double check_padding(const ac_inputs *in, bool q_like, const void *bits, const double *wide)
{
    const ac_problem *p = &in->p;
    ac_dtype t = in->c.dtype;
    int heads = q_like ? p->heads_q : p->heads_kv, seqlen = q_like ? p->seqlen_q : p->seqlen_k;
    double top = 0.0;
    for (int b = 0; b < p->batch; b++) {
        int valid = q_like ? ac_seqlen_q_of(p, b) : ac_seqlen_k_of(p, b);
        for (int h = 0; h < heads; h++)
            for (int s = 0; s < seqlen; s++)
                for (int c = 0; c < p->head_dim; c++) {
                    size_t at = ac_index(p, heads, seqlen, b, h, s, c);
                    double x = ac_widen(t, ac_bits_get(t, bits, at));
                    if (s >= valid) {
                        cr_assert(isnan(x) && isnan(wide[at]), "padding b=%d h=%d s=%d c=%d: %g", b, h, s, c, x);
                        continue;
                    }
                    cr_assert(isfinite(x) && x == wide[at], "b=%d h=%d s=%d c=%d: %g", b, h, s, c, x);
                    top = fmax(top, fabs(x));
                }
    }
    return top;
}

Test(harness_inputs, varlen_padding_is_nan_and_the_rest_is_drawn_as_without_lengths)
{
    ac_inputs a = make(
        "v1 seed=8 b=3 hq=4 hkv=2 nq=9 nk=13 d=5 dtype=bf16 mask=none seqlens-q=9,0,4 seqlens-k=2,13,0 layout=bshd");
    ac_inputs full = make("v1 seed=8 b=3 hq=4 hkv=2 nq=9 nk=13 d=5 dtype=bf16 mask=none layout=bshd");
    cr_assert_gt(check_padding(&a, true, a.q, a.qd), 0);
    cr_assert_gt(check_padding(&a, true, a.d_o, a.d_od), 0);
    cr_assert_gt(check_padding(&a, false, a.k, a.kd), 0);
    cr_assert_gt(check_padding(&a, false, a.v, a.vd), 0);
    /* inside the lengths, the values of the same line without them */
    size_t n_nan = 0;
    for (size_t i = 0; i < ac_kv_elems(&a.p); i++) {
        if (isnan(a.kd[i])) {
            n_nan++;
            continue;
        }
        cr_assert_eq(a.kd[i], full.kd[i], "K element %zu", i);
        cr_assert_eq(a.vd[i], full.vd[i], "V element %zu", i);
    }
    cr_assert_eq(n_nan, (size_t)2 * 5 * ((13 - 2) + 0 + 13), "padding keys of batches 0 and 2, 2 heads x d=5");
    ac_inputs_free(&a), ac_inputs_free(&full);
}

/* Every generated case becomes inputs; some rows come out fully masked. */
Test(harness_inputs, generated_cases_all_make_finite_nonzero_inputs_with_nan_padding)
{
    ac_caps caps = {
        .dtypes = 7,
        .max_head_dim = 256,
        .masks = AC_MASKCAP_ALL,
        .layouts = 3,
        .gqa = true,
        .varlen = true,
    };
    ac_gen g;
    ac_gen_init(&g, 31, &caps);
    g.max_seqlen = 96;
    int with_masked_row = 0;
    for (int k = 0; k < 300; k++) {
        ac_case c;
        ac_inputs in;
        ac_err err = {{0}};
        cr_assert_eq(ac_gen_next(&g, &c, &err), AC_OK);
        cr_assert_eq(ac_inputs_make(&c, &in, &err), AC_OK, "case %d: %s", k, err.msg);
        /* nonzero unless every sequence is empty (then all of it is NaN padding) */
        bool any_q = false, any_k = false;
        for (int b = 0; b < in.p.batch; b++)
            any_q |= ac_seqlen_q_of(&in.p, b) > 0, any_k |= ac_seqlen_k_of(&in.p, b) > 0;
        cr_assert_eq(check_padding(&in, true, in.q, in.qd) > 0, any_q, "case %d", k);
        cr_assert_eq(check_padding(&in, false, in.k, in.kd) > 0, any_k, "case %d", k);
        cr_assert_eq(check_padding(&in, false, in.v, in.vd) > 0, any_k, "case %d", k);
        check_padding(&in, true, in.d_o, in.d_od);
        bool found = false;
        for (int b = 0; b < in.p.batch && !found; b++)
            for (int i = 0; i < ac_seqlen_q_of(&in.p, b) && !found; i++) {
                bool any = false;
                for (int j = 0; j < in.p.seqlen_k && !any; j++)
                    any = ac_visible(&in.p, b, 0, i, j);
                found = !any;
            }
        with_masked_row += found;
        ac_inputs_free(&in);
    }
    cr_assert_gt(with_masked_row, 15, "cases with a fully masked row: %d", with_masked_row);
}

/* The generator's size cap asks this, so a long-context draw with a dense mask
 * of 65536 x 65536 (4 GiB of bytes, found on the H100) shrinks until it fits
 * instead of becoming a case that cannot be made. */
Test(harness_inputs, a_dense_mask_fits_only_within_the_inputs_budget)
{
    ac_case c = ac_case_default();
    c.seqlen_q = c.seqlen_k = 65536;
    ac_case_set_mask(&c, AC_MASK_DENSE);
    cr_assert(!ac_inputs_mask_fits(&c));
    c.seqlen_q = c.seqlen_k = 4096;
    cr_assert(ac_inputs_mask_fits(&c));
    c.seqlen_q = c.seqlen_k = 65536;
    ac_case_set_mask(&c, AC_MASK_CAUSAL_BR);
    cr_assert(ac_inputs_mask_fits(&c), "no dense mask, nothing to hold");
}
