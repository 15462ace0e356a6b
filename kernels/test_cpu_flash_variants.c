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
    bool thd;
    bool alibi;
    int bias; /* 0: none, 1: (1, Hq) f32, 2: (1, 1) f32 */
    int sink_tokens; /* > 0: with a window (3, 0) bottom-right */
    double dropout;
} var_spec;

static const float spec_sinks[2] = {0.5f, -1.0f};
static const float spec_alibi[2] = {0.25f, 0.0625f}; /* the paper's for 2 heads... of 4: 2^-2, 2^-4 */
static float spec_bias[2 * 9 * 70]; /* (1, Hq = 2, 9, 70), values from the entry's index */
static const int spec_cu_q[3] = {0, 9, 13}, spec_cu_k[3] = {0, 70, 95}; /* THD: lengths 9, 4 and 70, 25 */

static void build(tk_case *c, const var_spec *s, uint64_t seed)
{
    ac_problem p = ac_problem_dense(2, 2, 1, 9, 70, 16);
    p.softcap = s->softcap;
    p.sinks = s->sinks ? spec_sinks : NULL;
    p.head_dim_v = s->head_dim_v;
    if (s->alibi)
        p.alibi_slopes = spec_alibi, p.alibi_batch = 1;
    for (int x = 0; x < 2 * 9 * 70; x++)
        spec_bias[x] = (float)((x * 29 % 31) - 15) / 8.0f;
    if (s->sink_tokens)
        p.windowed = true, p.window_left = 3, p.window_right = 0, p.align = AC_ALIGN_BOTTOM_RIGHT,
        p.sink_tokens = s->sink_tokens;
    p.dropout_p = s->dropout, p.dropout_seed = 99;
    if (s->bias)
        p.bias = spec_bias, p.bias_dtype = AC_F32, p.bias_batch = 1, p.bias_heads = s->bias == 1 ? 2 : 1;
    if (s->thd) {
        p.layout = AC_LAYOUT_THD;
        p.cu_seqlens_q = spec_cu_q;
        p.cu_seqlens_k = spec_cu_k;
    }
    tk_init(c, p, AC_F16, 1.0, seed);
}

static void backward_with_dsink(const ac_kernel *k, tk_case *c, float *dsink, float *dbias)
{
    ac_err err = {{0}};
    ac_bwd_args a = {.q = c->q,
                     .k = c->k,
                     .v = c->v,
                     .o = c->o,
                     .d_o = c->d_o,
                     .lse = c->lse,
                     .dq = c->dq,
                     .dk = c->dk,
                     .dv = c->dv,
                     .dsink = dsink,
                     .dbias = dbias};
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
    float dsink_base[2] = {0, 0}, dsink_mut[2] = {0, 0}, dbias_base[2 * 9 * 70], dbias_mut[2 * 9 * 70];
    backward_with_dsink(ac_kernel_find("cpu-flash"), &base, dsink_base, dbias_base);
    backward_with_dsink(mutant, &mut, dsink_mut, dbias_mut);
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
    /* the other sequence's keys and values: every output; the padded layouts have no cu_seqlens */
    {"cu-seqlens-late", {.thd = true}, OUT_O | OUT_LSE | OUT_DQ | OUT_DK | OUT_DV, {.sinks = true}},
    /* nq = 9 != nk = 70: every distance off by 61 */
    {"alibi-top-left", {.alibi = true}, OUT_O | OUT_LSE | OUT_DQ | OUT_DK | OUT_DV, {.softcap = 1.0}},
    /* batch 0 reads head row 0 for both heads; a (1, 1) bias has no axis to confuse */
    {"bias-wrong-axis", {.bias = 1}, OUT_O | OUT_LSE | OUT_DQ | OUT_DK | OUT_DV, {.bias = 2}},
    /* key 2 seen past the window: every output; without sink tokens the same kernel */
    {"sink-tokens-off-by-one", {.sink_tokens = 2}, OUT_O | OUT_LSE | OUT_DQ | OUT_DK | OUT_DV, {.softcap = 1.0}},
    /* O and the gradients 1 - p too small; LSE is the softmax's, untouched */
    {"dropout-no-rescale", {.dropout = 0.3}, OUT_O | OUT_DQ | OUT_DK | OUT_DV, {.sinks = true}},
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

/* ---- the packed THD layout -------------------------------------------------------------- */

/* Copies every stored element of tensor kind from the padded case's buffer to the packed one's. */
static void pack_kind(const ac_problem *pad, const ac_problem *thd, ac_tensor_kind kind, ac_dtype t, const void *from,
                      void *to)
{
    bool q_side = kind == AC_TENSOR_Q || kind == AC_TENSOR_O;
    int heads = q_side ? pad->heads_q : pad->heads_kv, d = ac_tensor_dim(pad, kind);
    for (int b = 0; b < pad->batch; b++)
        for (int h = 0; h < heads; h++)
            for (int s = 0; s < ac_stored_rows(thd, b, q_side); s++)
                for (int c = 0; c < d; c++)
                    ac_bits_put(t, to, ac_tensor_index(thd, kind, b, h, s, c),
                                ac_bits_get(t, from, ac_tensor_index(pad, kind, b, h, s, c)));
}

static void assert_rows_equal(const tk_case *pad, const tk_case *thd, ac_tensor_kind kind, const void *a, const void *b,
                              const char *what)
{
    bool q_side = kind == AC_TENSOR_Q || kind == AC_TENSOR_O;
    int heads = q_side ? pad->p.heads_q : pad->p.heads_kv, d = ac_tensor_dim(&pad->p, kind);
    for (int bb = 0; bb < pad->p.batch; bb++)
        for (int h = 0; h < heads; h++)
            for (int s = 0; s < ac_stored_rows(&thd->p, bb, q_side); s++)
                for (int c = 0; c < d; c++)
                    cr_assert_eq(ac_bits_get(pad->t, a, ac_tensor_index(&pad->p, kind, bb, h, s, c)),
                                 ac_bits_get(thd->t, b, ac_tensor_index(&thd->p, kind, bb, h, s, c)),
                                 "%s differs at batch %d head %d row %d col %d", what, bb, h, s, c);
}

/* The same sequences packed (THD) and padded (BSHD with seqlens) give the same
 * bits in every row both store: the layout moves rows, nothing else. */
Test(kernels_cpu_flash_variants, packed_thd_gives_the_padded_layouts_bits_row_for_row)
{
    static const int nq[3] = {40, 7, 23}, nk[3] = {90, 1, 50};
    static const int cu_q[4] = {0, 40, 47, 70}, cu_k[4] = {0, 90, 91, 141};
    const ac_kernel *k = ac_kernel_find("cpu-flash");
    ac_problem p = ac_problem_dense(3, 4, 2, 40, 90, 16);
    p.layout = AC_LAYOUT_BSHD;
    p.windowed = true, p.window_left = 30, p.window_right = 0, p.align = AC_ALIGN_BOTTOM_RIGHT;
    tk_case pad, thd;
    tk_init(&pad, p, AC_BF16, 1.0, 5);
    memcpy(pad.seqlens_q, nq, sizeof nq);
    memcpy(pad.seqlens_k, nk, sizeof nk);
    pad.p.seqlens_q = pad.seqlens_q, pad.p.seqlens_k = pad.seqlens_k;
    p.layout = AC_LAYOUT_THD;
    p.cu_seqlens_q = cu_q, p.cu_seqlens_k = cu_k;
    tk_init(&thd, p, AC_BF16, 1.0, 6);
    cr_assert_eq(thd.nq, (size_t)70 * 4 * 16);
    pack_kind(&pad.p, &thd.p, AC_TENSOR_Q, pad.t, pad.q, thd.q);
    pack_kind(&pad.p, &thd.p, AC_TENSOR_K, pad.t, pad.k, thd.k);
    pack_kind(&pad.p, &thd.p, AC_TENSOR_V, pad.t, pad.v, thd.v);
    pack_kind(&pad.p, &thd.p, AC_TENSOR_O, pad.t, pad.d_o, thd.d_o);
    tk_poison(&pad), tk_poison(&thd);
    tk_forward(k, &pad), tk_forward(k, &thd);
    tk_backward(k, &pad), tk_backward(k, &thd);
    assert_rows_equal(&pad, &thd, AC_TENSOR_O, pad.o, thd.o, "O");
    assert_rows_equal(&pad, &thd, AC_TENSOR_Q, pad.dq, thd.dq, "dQ");
    assert_rows_equal(&pad, &thd, AC_TENSOR_K, pad.dk, thd.dk, "dK");
    assert_rows_equal(&pad, &thd, AC_TENSOR_V, pad.dv, thd.dv, "dV");
    for (int b = 0; b < 3; b++)
        for (int h = 0; h < 4; h++)
            for (int i = 0; i < nq[b]; i++)
                cr_assert_eq(pad.lse[ac_lse_index(&pad.p, b, h, i)], thd.lse[ac_lse_index(&thd.p, b, h, i)],
                             "LSE differs at batch %d head %d row %d", b, h, i);
    tk_free(&pad), tk_free(&thd);
}
