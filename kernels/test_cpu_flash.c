/* kernels/test_cpu_flash.c — cpu-flash against the fp64 reference on every mask
 * kind, the online-softmax recurrence on the seeds' hand-worked numbers, and
 * every mutant: it differs from cpu-flash where its bug is and nowhere else
 * (suite kernels_cpu_flash). */
#include "cpu_flash_internal.h"
#include "test_kernels_support.h"

static const cpu_flash_params plain = {.block_q = 64, .block_k = 64, .mut = CF_MUT_NONE};

/* ---- the online-softmax step on the seeds' examples ------------------------- */

static void stream_row(const float *scores, int n, int pile, float *m, float *l)
{
    float s[8];
    *m = -INFINITY;
    *l = 0.0f;
    for (int j0 = 0; j0 < n; j0 += pile) {
        memcpy(s, scores + j0, (size_t)pile * sizeof(float));
        cf_online_softmax_step(&plain, m, l, s, pile);
    }
}

Test(kernels_cpu_flash, online_step_two_piles_gives_max_5_and_denominator_1_2034)
{
    const float row[4] = {1, 3, 2, 5};
    float m, l;
    stream_row(row, 4, 2, &m, &l);
    cr_assert_eq(m, 5.0f);
    /* the text: 1.203 (exact: e^-4 + e^-2 + e^-3 + 1) */
    cr_assert(fabsf(l - 1.2034380f) < 1e-6f, "l = %.7f", l);
    cr_assert(fabs(l - (exp(-4) + exp(-2) + exp(-3) + 1)) < 1e-6);
}

Test(kernels_cpu_flash, online_step_chunks_of_three_give_max_9_and_denominator_1_5069)
{
    const float row[6] = {2, 8, 1, 9, 3, 7};
    float m, l;
    stream_row(row, 6, 3, &m, &l);
    cr_assert_eq(m, 9.0f);
    /* the text: 1.506 (exact: 1.50688...) */
    cr_assert(fabs(l - (exp(-7) + exp(-1) + exp(-8) + 1 + exp(-6) + exp(-2))) < 1e-6, "l = %.7f", l);
    cr_assert(fabsf(l - 1.5069f) < 1e-4f);
}

Test(kernels_cpu_flash, online_step_rescale_factor_is_exp_of_max_drop)
{
    float m = 3.0f, l = 1.1353353f, s[2] = {2, 5};
    float alpha = cf_online_softmax_step(&plain, &m, &l, s, 2);
    cr_assert(fabsf(alpha - expf(-2.0f)) < 1e-7f, "alpha %g", alpha);
    cr_assert(fabsf(s[0] - expf(-3.0f)) < 1e-7f && s[1] == 1.0f, "P = %g %g", s[0], s[1]);
}

Test(kernels_cpu_flash, online_step_all_masked_tile_keeps_row_at_zero)
{
    float m = -INFINITY, l = 0.0f, s[3] = {-INFINITY, -INFINITY, -INFINITY};
    float alpha = cf_online_softmax_step(&plain, &m, &l, s, 3);
    cr_assert(m == -INFINITY && l == 0.0f && alpha == 0.0f, "m %g l %g alpha %g", m, l, alpha);
    cr_assert(s[0] == 0.0f && s[1] == 0.0f && s[2] == 0.0f);
}

Test(kernels_cpu_flash, round_to_dtype_and_output_bits_match_reference_rounding)
{
    uint64_t st = 42;
    const float special[] = {0.0f,     -0.0f,      65504.0f, 65519.99f, 65520.0f,  0x1p-14f,  0x1.ffcp-15f,
                             0x1p-25f, 0x1.8p-24f, 3.0e38f,  INFINITY,  -INFINITY, 0x1p-130f, 1.0f + 0x1p-11f};
    for (int t = AC_F32; t < AC_E4M3; t++) /* the 16- and 32-bit dtypes; fp8: test_cpu_flash_fp8.c */ {
        for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) {
            cr_assert_eq(cf_round_to((ac_dtype)t, special[i]), (float)ac_round((ac_dtype)t, special[i]), "%s: %a",
                         ac_dtype_name((ac_dtype)t), (double)special[i]);
            cr_assert_eq(cf_narrow_bits((ac_dtype)t, special[i]), ac_narrow((ac_dtype)t, special[i]), "%s bits: %a",
                         ac_dtype_name((ac_dtype)t), (double)special[i]);
        }
        for (int n = 0; n < 20000; n++) { /* random magnitudes across f16 and bf16 ranges */
            float x = (float)(tk_normal(&st) * ldexp(1.0, (int)(tk_next(&st) % 60) - 40));
            cr_assert_eq(cf_round_to((ac_dtype)t, x), (float)ac_round((ac_dtype)t, x), "%s: %a",
                         ac_dtype_name((ac_dtype)t), (double)x);
            cr_assert_eq(cf_narrow_bits((ac_dtype)t, x), ac_narrow((ac_dtype)t, x), "%s bits: %a",
                         ac_dtype_name((ac_dtype)t), (double)x);
        }
    }
    cr_assert(isnan(cf_round_to(AC_F16, NAN)) && isnan(cf_round_to(AC_BF16, NAN)));
}

/* ---- cpu-flash against the fp64 reference -------------------------------------- */

typedef enum {
    K_NONE,
    K_CAUSAL_TL,
    K_CAUSAL_BR_TALL,
    K_CAUSAL_BR_WIDE,
    K_WINDOW_TL,
    K_WINDOW_BR,
    K_DENSE,
    K_VARLEN,
    K_GQA_BSHD,
    K_WIDE_HEAD,
    K_COUNT
} kind;

static const char *kind_names[K_COUNT] = {"none",
                                          "causal-tl",
                                          "causal-br nq>nk",
                                          "causal-br nq<nk",
                                          "window(5,3)-tl",
                                          "window(17,0)-br",
                                          "dense+masked row",
                                          "varlen",
                                          "gqa 4:1 bshd d=1",
                                          "d=200"};

static void make_case(tk_case *c, kind k, ac_dtype t, uint64_t seed)
{
    ac_problem p = ac_problem_dense(1, 2, 2, 70, 135, 24);
    if (k == K_CAUSAL_BR_TALL)
        p.seqlen_q = 135, p.seqlen_k = 70;
    if (k == K_WINDOW_TL)
        p.seqlen_q = p.seqlen_k = 100;
    if (k == K_WINDOW_BR)
        p.seqlen_q = 50, p.seqlen_k = 150;
    if (k == K_VARLEN)
        p.batch = 3;
    if (k == K_GQA_BSHD)
        p.heads_q = 4, p.heads_kv = 1, p.head_dim = 1, p.layout = AC_LAYOUT_BSHD;
    if (k == K_WIDE_HEAD)
        p.batch = 1, p.seqlen_q = 3, p.seqlen_k = 200, p.head_dim = 200;
    p.scale = ac_default_scale(p.head_dim);
    p.windowed = k >= K_CAUSAL_TL && k <= K_WINDOW_BR;
    p.window_left = k == K_WINDOW_TL ? 5 : k == K_WINDOW_BR ? 17 : AC_WINDOW_INF;
    p.window_right = k == K_WINDOW_TL ? 3 : 0;
    p.align = (k == K_CAUSAL_BR_TALL || k == K_CAUSAL_BR_WIDE || k == K_WINDOW_BR) ? AC_ALIGN_BOTTOM_RIGHT
                                                                                   : AC_ALIGN_TOP_LEFT;
    tk_init(c, p, t, 1.0, seed);
    if (k == K_DENSE)
        tk_dense_mask(c, 7, seed);
    if (k == K_VARLEN) {
        const int sq[3] = {70, 1, 33}, sk[3] = {135, 64, 0};
        memcpy(c->seqlens_q, sq, sizeof sq);
        memcpy(c->seqlens_k, sk, sizeof sk);
        c->p.seqlens_q = c->seqlens_q;
        c->p.seqlens_k = c->seqlens_k;
    }
}

/* max over O of |o - o_ref| / (u * E), E = sum_j P_ij |V_jc| (docs/DESIGN.md's scale),
 * and of the LSE's relative error; fully masked rows must be exactly 0 / -inf. */
static void check_forward(const tk_case *c, const char *what, double max_scaled)
{
    const ac_problem *p = &c->p;
    double *q = tk_widen(c->t, c->q, c->nq), *k = tk_widen(c->t, c->k, c->nkv), *v = tk_widen(c->t, c->v, c->nkv);
    double *o = tk_widen(c->t, c->o, c->nq), *o_ref = malloc(c->nq * sizeof(double));
    double *lse_ref = malloc(c->nl * sizeof(double)), u = ac_unit_roundoff(c->t), worst = 0.0;
    double *p_row = malloc((size_t)p->seqlen_k * sizeof(double));
    ac_err err = {{0}};
    cr_assert_eq(ref_forward_fp64(p, q, k, v, o_ref, lse_ref, &err), AC_OK, "%s", err.msg);
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < p->heads_q; h++)
            for (int i = 0; i < ac_seqlen_q_of(p, b); i++) {
                double lr = lse_ref[ac_lse_index(p, b, h, i)], lg = c->lse[ac_lse_index(p, b, h, i)];
                int hk = ac_kv_head_of(p, h);
                if (lr == -INFINITY) {
                    cr_assert(lg == -INFINITY, "%s: row %d fully masked, LSE %g", what, i, lg);
                    for (int x = 0; x < p->head_dim; x++)
                        cr_assert(o[ac_q_index(p, b, h, i, x)] == 0.0, "%s: masked row %d: O %g", what, i,
                                  o[ac_q_index(p, b, h, i, x)]);
                    continue;
                }
                cr_assert(fabs(lg - lr) <= 1e-5 * (1.0 + fabs(lr)), "%s: LSE row %d: %.8g vs %.8g", what, i, lg, lr);
                const double *qi = q + ac_q_index(p, b, h, i, 0); /* channels are contiguous */
                for (int j = 0; j < ac_seqlen_k_of(p, b); j++) {
                    const double *kj = k + ac_kv_index(p, b, hk, j, 0);
                    double s = 0.0;
                    for (int y = 0; y < p->head_dim; y++)
                        s += qi[y] * kj[y];
                    p_row[j] = ac_visible(p, b, h, i, j) ? exp(s * p->scale - lr) : 0.0;
                }
                for (int x = 0; x < p->head_dim; x++) {
                    double e = 0.0;
                    for (int j = 0; j < ac_seqlen_k_of(p, b); j++)
                        e += p_row[j] * fabs(v[ac_kv_index(p, b, hk, j, 0) + x]);
                    size_t at = ac_q_index(p, b, h, i, x);
                    double scaled = fabs(o[at] - o_ref[at]) / (u * e);
                    worst = scaled > worst ? scaled : worst;
                }
            }
    cr_assert(worst <= max_scaled, "%s: max scaled error %.3g > %g", what, worst, max_scaled);
    free(q), free(k), free(v), free(o), free(o_ref), free(lse_ref), free(p_row);
}

Test(kernels_cpu_flash, forward_matches_fp64_reference_on_every_mask_kind)
{
    const char *kernels[2] = {"cpu-flash", "cpu-flash-128x64"};
    for (int kn = 0; kn < 2; kn++)
        for (int t = AC_F32; t < AC_E4M3; t++) /* the 16- and 32-bit dtypes; fp8: test_cpu_flash_fp8.c */
            for (int k = 0; k < K_COUNT; k++) {
                tk_case c;
                make_case(&c, (kind)k, (ac_dtype)t, 10 + (uint64_t)k);
                tk_poison(&c);
                tk_forward(ac_kernel_find(kernels[kn]), &c);
                char what[96];
                snprintf(what, sizeof what, "%s %s %s", kernels[kn], ac_dtype_name((ac_dtype)t), kind_names[k]);
                /* f16/bf16: P and O rounded (<= ~1.5 in these units); f32 sums grow with N */
                check_forward(&c, what, t == AC_F32 ? 64.0 : 3.0);
                tk_free(&c);
            }
}

/* Gradients against ref_backward_fp64 fed the kernel's own O and LSE: error
 * relative to each tensor's largest reference value. */
static void check_backward(const tk_case *c, const char *what)
{
    const ac_problem *p = &c->p;
    double *q = tk_widen(c->t, c->q, c->nq), *k = tk_widen(c->t, c->k, c->nkv), *v = tk_widen(c->t, c->v, c->nkv);
    double *o = tk_widen(c->t, c->o, c->nq), *d_o = tk_widen(c->t, c->d_o, c->nq);
    double *lse = malloc(c->nl * sizeof(double)), *delta = malloc(c->nl * sizeof(double));
    double *ref[3] = {malloc(c->nq * sizeof(double)), malloc(c->nkv * sizeof(double)), malloc(c->nkv * sizeof(double))};
    double *got[3] = {tk_widen(c->t, c->dq, c->nq), tk_widen(c->t, c->dk, c->nkv), tk_widen(c->t, c->dv, c->nkv)};
    for (size_t i = 0; i < c->nl; i++)
        lse[i] = c->lse[i];
    ac_err err = {{0}};
    cr_assert_eq(ref_backward_fp64(p, q, k, v, o, lse, d_o, ref[0], ref[1], ref[2], delta, &err), AC_OK, "%s", err.msg);
    const char *names[3] = {"dQ", "dK", "dV"};
    double tol = c->t == AC_F32 ? 1e-5 : 16.0 * ac_unit_roundoff(c->t);
    for (int x = 0; x < 3; x++) {
        bool q_like = x == 0;
        double peak = 0.0, worst = 0.0;
        for (int b = 0; b < p->batch; b++)
            for (int h = 0; h < (q_like ? p->heads_q : p->heads_kv); h++)
                for (int s = 0; s < (q_like ? ac_seqlen_q_of(p, b) : ac_seqlen_k_of(p, b)); s++)
                    for (int cc = 0; cc < p->head_dim; cc++) {
                        size_t at = q_like ? ac_q_index(p, b, h, s, cc) : ac_kv_index(p, b, h, s, cc);
                        peak = fmax(peak, fabs(ref[x][at]));
                        worst = fmax(worst, fabs(got[x][at] - ref[x][at]));
                        cr_assert(!isnan(got[x][at]), "%s %s: NaN (unwritten?) at b%d h%d s%d c%d", what, names[x], b,
                                  h, s, cc);
                    }
        cr_assert(worst <= tol * peak + 1e-30, "%s %s: max error %.3g, %.3g of the peak %.3g", what, names[x], worst,
                  worst / peak, peak);
    }
    for (int x = 0; x < 3; x++)
        free(ref[x]), free(got[x]);
    free(q), free(k), free(v), free(o), free(d_o), free(lse), free(delta);
}

Test(kernels_cpu_flash, backward_matches_fp64_reference_on_every_mask_kind)
{
    const char *kernels[2] = {"cpu-flash", "cpu-flash-128x64"};
    for (int kn = 0; kn < 2; kn++)
        for (int t = AC_F32; t < AC_E4M3; t++) /* the 16- and 32-bit dtypes; fp8: test_cpu_flash_fp8.c */
            for (int k = 0; k < K_COUNT; k++) {
                tk_case c;
                make_case(&c, (kind)k, (ac_dtype)t, 20 + (uint64_t)k);
                tk_poison(&c);
                const ac_kernel *kern = ac_kernel_find(kernels[kn]);
                tk_forward(kern, &c);
                tk_backward(kern, &c);
                char what[96];
                snprintf(what, sizeof what, "%s %s %s", kernels[kn], ac_dtype_name((ac_dtype)t), kind_names[k]);
                check_backward(&c, what);
                tk_free(&c);
            }
}

/* A negative scale flips every score's sign: the backward must keep masked
 * pairs at P = 0 (it masked the raw scores with -inf, then multiplied by the
 * scale: +inf, so dQ overflowed on every masked case; issue 13's reproducer is
 * v1 seed=1 b=1 hq=1 hkv=1 nq=2 nk=2 d=1 dtype=f32 mask=causal-tl scale=-1). */
Test(kernels_cpu_flash, backward_with_a_negative_scale_matches_the_reference_on_every_mask_kind)
{
    for (int t = AC_F32; t < AC_E4M3; t++) /* the 16- and 32-bit dtypes; fp8: test_cpu_flash_fp8.c */
        for (int k = 0; k < K_COUNT; k++) {
            tk_case c;
            make_case(&c, (kind)k, (ac_dtype)t, 40 + (uint64_t)k);
            c.p.scale = -c.p.scale;
            tk_poison(&c);
            const ac_kernel *kern = ac_kernel_find("cpu-flash");
            tk_forward(kern, &c);
            tk_backward(kern, &c);
            char what[96];
            snprintf(what, sizeof what, "scale < 0, %s %s", ac_dtype_name((ac_dtype)t), kind_names[k]);
            check_forward(&c, what, t == AC_F32 ? 64.0 : 3.0);
            check_backward(&c, what);
            tk_free(&c);
        }
}

Test(kernels_cpu_flash, fully_masked_rows_give_zero_output_and_minus_infinite_lse)
{
    tk_case c;
    make_case(&c, K_DENSE, AC_F16, 5);
    tk_poison(&c);
    tk_forward(ac_kernel_find("cpu-flash"), &c);
    for (int b = 0; b < c.p.batch; b++)
        for (int h = 0; h < c.p.heads_q; h++) {
            cr_assert(c.lse[ac_lse_index(&c.p, b, h, 7)] == -INFINITY, "b%d h%d: LSE %g", b, h,
                      c.lse[ac_lse_index(&c.p, b, h, 7)]);
            for (int x = 0; x < c.p.head_dim; x++)
                cr_assert_eq(((uint16_t *)c.o)[ac_q_index(&c.p, b, h, 7, x)], 0, "O is +0");
            cr_assert(isfinite(c.lse[ac_lse_index(&c.p, b, h, 8)]));
        }
    tk_free(&c);
}

Test(kernels_cpu_flash, rejects_a_problem_outside_its_claims_with_input_error)
{
    tk_case c;
    make_case(&c, K_NONE, AC_F16, 1);
    c.p.heads_kv = 3; /* hq=2 not a multiple */
    ac_err err = {{0}};
    ac_fwd_args a = {.q = c.q, .k = c.k, .v = c.v, .o = c.o, .lse = c.lse};
    const ac_kernel *k = ac_kernel_find("cpu-flash");
    cr_assert_eq(k->forward(k, &c.p, c.t, &a, &err), AC_ERR_INPUT);
    cr_assert(strstr(err.msg, "heads_q"), "%s", err.msg);
    c.p.heads_kv = 2;
    tk_free(&c);
}
