/* kernels/test_cpu_flash_variants.c — cpu-flash's variant path (suite
 * kernels_cpu_flash_variants): it is the plain path where no variant is set,
 * and each variant's mutant differs from cpu-flash where its bug is and
 * nowhere else.  (That cpu-flash stays within the budgets on every variant is
 * harness/run/test_run_variants.c's, through the whole instrument.) */
#include "cpu_flash_internal.h"
#include "test_kernels_support.h"

static bool same_bits(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

/* The variant forward on a plain problem gives the plain forward's bits: the
 * variants enter only where they are set. */
Test(kernels_cpu_flash_variants, the_variant_forward_is_the_plain_one_where_no_variant_is_set)
{
    const ac_kernel *k = ac_kernel_find("cpu-flash");
    for (int mask = 0; mask < 3; mask++) {
        ac_problem p = ac_problem_dense(2, 4, 2, 70, 135, 24);
        p.windowed = mask > 0;
        p.window_left = mask == 2 ? 9 : AC_WINDOW_INF;
        p.window_right = 0;
        p.align = AC_ALIGN_BOTTOM_RIGHT;
        tk_case plain, var;
        tk_init(&plain, p, AC_BF16, 1.0, 31 + mask);
        tk_init(&var, p, AC_BF16, 1.0, 31 + mask);
        tk_poison(&plain);
        tk_poison(&var);
        tk_forward(k, &plain);
        ac_err err = {{0}};
        ac_fwd_args a = {.q = var.q, .k = var.k, .v = var.v, .o = var.o, .lse = var.lse};
        cr_assert_eq(cf_forward_variants(k, &var.p, var.t, &a, &err), AC_OK, "%s", err.msg);
        cr_assert(same_bits(plain.o, var.o, plain.nq * ac_dtype_size(AC_BF16)), "mask %d: O differs", mask);
        cr_assert(same_bits(plain.lse, var.lse, plain.nl * sizeof(float)), "mask %d: LSE differs", mask);
        tk_free(&plain);
        tk_free(&var);
    }
}

/* ---- each variant's mutant -------------------------------------------------------------- */

enum { OUT_O = 1, OUT_LSE = 2, OUT_DQ = 4, OUT_DK = 8, OUT_DV = 16 };

typedef struct {
    double softcap;
    bool sinks;
    int head_dim_v;
} var_spec;

static const float spec_sinks[2] = {0.5f, -1.0f};

static void build(tk_case *c, const var_spec *s, uint64_t seed)
{
    ac_problem p = ac_problem_dense(2, 2, 1, 9, 70, 16);
    p.softcap = s->softcap;
    p.sinks = s->sinks ? spec_sinks : NULL;
    p.head_dim_v = s->head_dim_v;
    tk_init(c, p, AC_F16, 1.0, seed);
}

static void backward_with_dsink(const ac_kernel *k, tk_case *c, float *dsink)
{
    ac_err err = {{0}};
    ac_bwd_args a = {.q = c->q, .k = c->k, .v = c->v, .o = c->o, .d_o = c->d_o, .lse = c->lse,
                     .dq = c->dq, .dk = c->dk, .dv = c->dv, .dsink = dsink};
    cr_assert_eq(k->backward(k, &c->p, c->t, &a, &err), AC_OK, "%s backward: %s", k->name, err.msg);
}

static unsigned differing_outputs(const ac_kernel *mutant, const var_spec *s)
{
    tk_case base, mut;
    build(&base, s, 77);
    build(&mut, s, 77);
    tk_poison(&base);
    tk_poison(&mut);
    tk_forward(ac_kernel_find("cpu-flash"), &base);
    tk_forward(mutant, &mut);
    float dsink_base[2] = {0, 0}, dsink_mut[2] = {0, 0};
    backward_with_dsink(ac_kernel_find("cpu-flash"), &base, dsink_base);
    backward_with_dsink(mutant, &mut, dsink_mut);
    size_t sz = ac_dtype_size(base.t);
    unsigned diff = 0;
    diff |= same_bits(base.o, mut.o, base.no * sz) ? 0 : OUT_O;
    diff |= same_bits(base.lse, mut.lse, base.nl * sizeof(float)) ? 0 : OUT_LSE;
    diff |= same_bits(base.dq, mut.dq, base.nq * sz) ? 0 : OUT_DQ;
    diff |= same_bits(base.dk, mut.dk, base.nkv * sz) ? 0 : OUT_DK;
    diff |= same_bits(base.dv, mut.dv, base.nv * sz) ? 0 : OUT_DV;
    tk_free(&base);
    tk_free(&mut);
    return diff;
}

typedef struct {
    const char *suffix;
    var_spec expose;
    unsigned must_differ;
    var_spec hide;
} mutant_case;

static const mutant_case cases[] = {
    {"softcap-before-scale", {.softcap = 1.0}, OUT_O | OUT_LSE, {.softcap = 0.0}},
    {"sink-not-in-lse", {.sinks = true}, OUT_LSE | OUT_DQ, {.softcap = 2.0}},
    /* V read wrongly: O (and through dP the gradients of Q and K; dV = P^T dO needs no V); d = 16: dv=16 is no variant */
    {"dv-with-dqk-stride", {.head_dim_v = 8}, OUT_O | OUT_DQ | OUT_DK, {.head_dim_v = 16}},
};

Test(kernels_cpu_flash_variants, each_variant_mutant_differs_where_its_bug_is_and_nowhere_else)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[96];
        snprintf(name, sizeof name, "cpu-flash-mutant-%s", cases[i].suffix);
        const ac_kernel *k = ac_kernel_find(name);
        cr_assert_not_null(k, "%s is not registered", name);
        unsigned shown = differing_outputs(k, &cases[i].expose);
        cr_assert((shown & cases[i].must_differ) == cases[i].must_differ, "%s: outputs 0x%x differ, expected 0x%x",
                  name, shown, cases[i].must_differ);
        cr_assert_eq(differing_outputs(k, &cases[i].hide), 0u, "%s: differs where its bug cannot show", name);
    }
}
