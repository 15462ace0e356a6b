/* kernels/test_cpu_flash_mutants.c — every cpu-flash mutant differs from
 * cpu-flash on a case chosen to expose its bug, and equals it bit for bit on a
 * case where the bug cannot show (suite kernels_cpu_flash). */
#include "cpu_flash_internal.h"
#include "test_kernels_support.h"

enum { OUT_O = 1, OUT_LSE = 2, OUT_DQ = 4, OUT_DK = 8, OUT_DV = 16 };

/* A small problem: hq, hkv, nq, nk, d, dtype, mask (0 none, 1 causal, 2 window
 * (3, 0), 3 dense with row 2 fully masked), alignment, input magnitude, scale
 * (0 = default). */
typedef struct {
    int hq, hkv, nq, nk, d;
    ac_dtype t;
    int mask;
    ac_align align;
    double magnitude, scale;
} spec;

static void build(tk_case *c, const spec *s, uint64_t seed)
{
    ac_problem p = ac_problem_dense(1, s->hq, s->hkv, s->nq, s->nk, s->d);
    if (s->scale != 0.0)
        p.scale = s->scale;
    p.windowed = s->mask == 1 || s->mask == 2;
    p.window_left = s->mask == 2 ? 3 : AC_WINDOW_INF;
    p.window_right = 0;
    p.align = s->align;
    tk_init(c, p, s->t, s->magnitude, seed);
    if (s->mask == 3)
        tk_dense_mask(c, 2, seed);
}

static bool same_bits(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

/* Forward and backward of both kernels on the same inputs; which outputs differ. */
static unsigned differing_outputs(const ac_kernel *mutant, const spec *s)
{
    tk_case base, mut;
    build(&base, s, 99);
    build(&mut, s, 99);
    tk_poison(&base);
    tk_poison(&mut);
    tk_forward(ac_kernel_find("cpu-flash"), &base);
    tk_forward(mutant, &mut);
    tk_backward(ac_kernel_find("cpu-flash"), &base);
    tk_backward(mutant, &mut);
    size_t sz = ac_dtype_size(s->t);
    unsigned diff = 0;
    diff |= same_bits(base.o, mut.o, base.nq * sz) ? 0 : OUT_O;
    diff |= same_bits(base.lse, mut.lse, base.nl * sizeof(float)) ? 0 : OUT_LSE;
    diff |= same_bits(base.dq, mut.dq, base.nq * sz) ? 0 : OUT_DQ;
    diff |= same_bits(base.dk, mut.dk, base.nkv * sz) ? 0 : OUT_DK;
    diff |= same_bits(base.dv, mut.dv, base.nkv * sz) ? 0 : OUT_DV;
    tk_free(&base);
    tk_free(&mut);
    return diff;
}

typedef struct {
    const char *suffix;
    spec expose;
    unsigned must_differ; /* at least one of these outputs differs on `expose` */
    spec hide; /* every output bit-identical */
} mutant_case;

#define F16 AC_F16
#define TL AC_ALIGN_TOP_LEFT
#define BR AC_ALIGN_BOTTOM_RIGHT
static const mutant_case cases[] = {
    /* several K/V tiles: some row's max rises after the first tile / one tile only */
    {"no-rescale-l", {1, 1, 8, 200, 16, F16, 0, TL, 1, 0}, OUT_O, {1, 1, 8, 64, 16, F16, 0, TL, 1, 0}},
    {"no-rescale-o", {1, 1, 8, 200, 16, F16, 0, TL, 1, 0}, OUT_O, {1, 1, 8, 64, 16, F16, 0, TL, 1, 0}},
    {"per-tile-normalise", {1, 1, 8, 200, 16, F16, 0, TL, 1, 0}, OUT_O, {1, 1, 8, 64, 16, F16, 0, TL, 1, 0}},
    {"causal-off-by-one", {1, 1, 9, 9, 8, F16, 1, TL, 1, 0}, OUT_O, {1, 1, 9, 9, 8, F16, 0, TL, 1, 0}},
    {"causal-tl-for-br", {1, 1, 5, 9, 8, F16, 1, BR, 1, 0}, OUT_O, {1, 1, 9, 9, 8, F16, 1, BR, 1, 0}},
    {"window-edge-off-by-one", {1, 1, 9, 9, 8, F16, 2, TL, 1, 0}, OUT_O, {1, 1, 9, 9, 8, F16, 1, TL, 1, 0}},
    {"last-kv-tile-unmasked", {1, 1, 4, 70, 8, F16, 0, TL, 1, 0}, OUT_O, {1, 1, 4, 128, 8, F16, 0, TL, 1, 0}},
    {"last-q-tile-unwritten", {1, 1, 70, 8, 8, F16, 0, TL, 1, 0}, OUT_O | OUT_LSE, {1, 1, 64, 8, 8, F16, 0, TL, 1, 0}},
    {"gqa-head-mod", {4, 2, 5, 7, 8, F16, 0, TL, 1, 0}, OUT_O, {2, 2, 5, 7, 8, F16, 0, TL, 1, 0}},
    {"masked-row-nan", {1, 1, 5, 7, 8, F16, 3, TL, 1, 0}, OUT_O, {1, 1, 5, 7, 8, F16, 0, TL, 1, 0}},
    {"o-accum-in-dtype", {1, 1, 8, 100, 16, F16, 0, TL, 1, 0}, OUT_O, {1, 1, 8, 100, 16, AC_F32, 0, TL, 1, 0}},
    {"bwd-delta-wrong-row", {1, 1, 5, 7, 8, F16, 0, TL, 1, 0}, OUT_DQ | OUT_DK, {1, 1, 1, 7, 8, F16, 0, TL, 1, 0}},
    {"bwd-no-gqa-sum", {4, 2, 5, 7, 8, F16, 0, TL, 1, 0}, OUT_DK | OUT_DV, {2, 2, 5, 7, 8, F16, 0, TL, 1, 0}},
    {"bwd-scale-twice", {1, 1, 5, 7, 8, F16, 0, TL, 1, 0}, OUT_DQ | OUT_DK, {1, 1, 5, 7, 8, F16, 0, TL, 1, 1.0}},
    {"bwd-no-scale", {1, 1, 5, 7, 8, F16, 0, TL, 1, 0}, OUT_DQ | OUT_DK, {1, 1, 5, 7, 8, F16, 0, TL, 1, 1.0}},
};

static const ac_kernel *mutant_named(const char *suffix)
{
    char name[96];
    snprintf(name, sizeof name, "cpu-flash-mutant-%s", suffix);
    const ac_kernel *k = ac_kernel_find(name);
    cr_assert(k, "%s is not registered", name);
    return k;
}

Test(kernels_cpu_flash, each_mutant_differs_where_its_bug_is_and_nowhere_else)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const mutant_case *m = &cases[i];
        const ac_kernel *k = mutant_named(m->suffix);
        unsigned shown = differing_outputs(k, &m->expose);
        cr_assert(shown & m->must_differ, "%s: exposing case changed outputs 0x%x, expected some of 0x%x", k->name,
                  shown, m->must_differ);
        cr_assert_eq(differing_outputs(k, &m->hide), 0u, "%s: differs where its bug cannot show", k->name);
    }
}

/* The forward stays right: O bit-identical, only LSE (and hence the backward) moves. */
Test(kernels_cpu_flash, lse_mutants_keep_o_and_break_lse_and_gradients)
{
    const spec s = {1, 1, 5, 70, 8, F16, 0, TL, 1, 0};
    const char *names[2] = {"lse-log2", "lse-without-max"};
    for (int i = 0; i < 2; i++) {
        unsigned diff = differing_outputs(mutant_named(names[i]), &s);
        cr_assert(!(diff & OUT_O), "%s changed O", names[i]);
        cr_assert((diff & OUT_LSE) && (diff & OUT_DQ) && (diff & OUT_DK), "%s: outputs 0x%x", names[i], diff);
    }
}

Test(kernels_cpu_flash, no_max_subtraction_overflows_on_large_scores_and_agrees_on_small_ones)
{
    const spec large = {1, 1, 4, 16, 16, F16, 0, TL, 8.0, 0};
    tk_case c;
    build(&c, &large, 3);
    tk_forward(mutant_named("no-max-subtraction"), &c);
    bool non_finite = false;
    for (size_t i = 0; i < c.nq; i++)
        non_finite |= !isfinite(ac_widen(AC_F16, ((uint16_t *)c.o)[i]));
    cr_assert(non_finite, "scores ~ +-64: exp(S) must overflow f16 somewhere");
    tk_free(&c);
    /* small scores: the same softmax up to rounding (the bug cannot show) */
    const spec small = {1, 1, 4, 16, 16, F16, 0, TL, 0.5, 0};
    tk_case a, b;
    build(&a, &small, 4);
    build(&b, &small, 4);
    tk_forward(ac_kernel_find("cpu-flash"), &a);
    tk_forward(mutant_named("no-max-subtraction"), &b);
    for (size_t i = 0; i < a.nq; i++) {
        double x = ac_widen(AC_F16, ((uint16_t *)a.o)[i]), y = ac_widen(AC_F16, ((uint16_t *)b.o)[i]);
        cr_assert(fabs(x - y) <= 4 * ac_unit_roundoff(AC_F16), "O[%zu]: %g vs %g", i, x, y); /* |V| ~ 1 */
    }
    tk_free(&a);
    tk_free(&b);
}

Test(kernels_cpu_flash, last_q_tile_unwritten_leaves_exactly_the_partial_tile_poisoned)
{
    const spec s = {1, 1, 70, 8, 8, F16, 0, TL, 1, 0};
    tk_case c;
    build(&c, &s, 5);
    tk_poison(&c);
    tk_forward(mutant_named("last-q-tile-unwritten"), &c);
    for (int i = 0; i < 70; i++)
        cr_assert_eq(isnan(c.lse[i]), i >= 64, "row %d: LSE %g", i, c.lse[i]);
    tk_free(&c);
}

Test(kernels_cpu_flash, masked_row_nan_puts_nan_in_exactly_the_fully_masked_row)
{
    const spec s = {1, 1, 5, 7, 8, F16, 3, TL, 1, 0};
    tk_case c;
    build(&c, &s, 6);
    tk_forward(mutant_named("masked-row-nan"), &c);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(isnan(ac_widen(AC_F16, ((uint16_t *)c.o)[ac_q_index(&c.p, 0, 0, i, 0)])), i == 2, "row %d", i);
    tk_free(&c);
}

Test(kernels_cpu_flash, there_are_at_least_twelve_mutants_claiming_what_cpu_flash_claims)
{
    const ac_kernel *all[64];
    size_t n = ac_cpu_flash_kernels(all, 64), mutants = 0;
    const ac_kernel *base = ac_kernel_find("cpu-flash");
    for (size_t i = 0; i < n; i++) {
        if (!strstr(all[i]->name, "mutant"))
            continue;
        mutants++;
        cr_assert(strncmp(all[i]->name, "cpu-flash-mutant-", 17) == 0, "%s", all[i]->name);
        cr_assert(strstr(all[i]->description, "mutant"), "%s: %s", all[i]->name, all[i]->description);
        cr_assert(memcmp(&all[i]->caps, &base->caps, sizeof base->caps) == 0, "%s claims differently", all[i]->name);
        cr_assert(all[i]->backward && all[i]->forward);
    }
    cr_assert_geq(mutants, 12);
    cr_assert_eq(mutants, (size_t)CF_MUT_COUNT - 1);
}
