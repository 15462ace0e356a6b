/* kernels/cpu_flash_bwd.c — the backward of cpu-flash: FlashAttention-2's
 * backward by recomputation from LSE, per (batch, kv head, K/V tile), over the
 * query heads of the GQA group and their Q tiles:
 *   D = rowsum(dO * O) from the stored O (f32), P = exp(S - LSE) (f32),
 *   dV += P^T dO with P in dtype, dP = dO V^T, dS = P (dP - D) rounded to dtype,
 *   dK += dS^T Q, dQ += dS K, all sums f32; the scale applied to dK and dQ at
 *   the end, as FlashAttention-2 does; dK, dV summed over the GQA group.
 * Shares the mask, tiles and products with the forward (cpu_flash.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_flash_internal.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3") /* see cpu_flash.c */
#endif

typedef struct {
    float *k_rows, *v_rows; /* (keys_alloc x d) of one kv head */
    float *k_t, *v_t; /* (d x Bc) the current K/V tile transposed */
    float *q_all, *do_all, *dq_acc; /* (group x seqlen_q x d): the query heads of one kv head */
    float *lse_all, *delta_all; /* (group x seqlen_q) */
    float *lse_lo; /* (group x seqlen_q) f32 only: LSE's last bits, see refine_lse */
    float *o_rows; /* (seqlen_q x d) scratch for D */
    float *s, *p_dt, *dp; /* (Br x Bc): P in f32, P in dtype, dP then dS */
    float *dk_acc, *dv_acc; /* (Bc x d) */
    int *heads, *lo, *hi;
    int keys_alloc;
} bwd_work;

static void bwd_work_free(bwd_work *w)
{
    void *all[] = {w->k_rows,  w->v_rows, w->k_t,       w->v_t,    w->q_all, w->do_all, w->dq_acc,
                   w->lse_all, w->lse_lo, w->delta_all, w->o_rows, w->s,     w->p_dt,   w->dp,
                   w->dk_acc,  w->dv_acc, w->heads,     w->lo,     w->hi};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

static int bwd_work_alloc(const cpu_flash_params *cp, const ac_problem *p, bwd_work *w)
{
    size_t d = (size_t)p->head_dim, br = (size_t)cp->block_q, bc = (size_t)cp->block_k, nq = (size_t)p->seqlen_q;
    size_t group = (size_t)(p->heads_q / p->heads_kv), f = sizeof(float);
    memset(w, 0, sizeof *w);
    w->keys_alloc = (p->seqlen_k + cp->block_k - 1) / cp->block_k * cp->block_k;
    w->k_rows = calloc((size_t)w->keys_alloc * d, f);
    w->v_rows = calloc((size_t)w->keys_alloc * d, f);
    w->k_t = malloc(d * bc * f);
    w->v_t = malloc(d * bc * f);
    w->q_all = malloc(group * nq * d * f);
    w->do_all = malloc(group * nq * d * f);
    w->dq_acc = malloc(group * nq * d * f);
    w->lse_all = malloc(group * nq * f);
    w->lse_lo = calloc(group * nq, f);
    w->delta_all = malloc(group * nq * f);
    w->o_rows = malloc(nq * d * f);
    w->s = malloc(br * bc * f);
    w->p_dt = malloc(br * bc * f);
    w->dp = malloc(br * bc * f);
    w->dk_acc = malloc(bc * d * f);
    w->dv_acc = malloc(bc * d * f);
    w->heads = malloc((size_t)p->heads_q * sizeof(int));
    w->lo = malloc(nq * sizeof(int));
    w->hi = malloc(nq * sizeof(int));
    return w->k_rows && w->v_rows && w->k_t && w->v_t && w->q_all && w->do_all && w->dq_acc && w->lse_all &&
        w->lse_lo && w->delta_all && w->o_rows && w->s && w->p_dt && w->dp && w->dk_acc && w->dv_acc && w->heads &&
        w->lo && w->hi;
}

/* D = rowsum(dO * O) in f32 from the stored (rounded) O, the preprocessing pass. */
static void bwd_delta(const cpu_flash_params *cp, const ac_problem *p, ac_dtype t, int b, int h, int nq,
                      const ac_bwd_args *a, const float *do_rows, float *o_rows, float *delta)
{
    int d = p->head_dim;
    cf_load_rows(p, t, a->o, p->heads_q, p->seqlen_q, b, h, 0, nq, o_rows);
    for (int i = 0; i < nq; i++) {
        int src = cp->mut == CF_MUT_BWD_DELTA_WRONG_ROW ? (i + 1) % nq : i;
        float sum = 0.0f;
        for (int c = 0; c < d; c++)
            sum += do_rows[(size_t)i * d + c] * o_rows[(size_t)src * d + c];
        delta[i] = sum;
    }
}

/* P = exp(s * scale - lse) with the exponent carried to about u: the product's
 * and the difference's rounding errors (an exact two-product and two-sum) enter
 * as a first-order correction.  Rounding the exponent cost P a relative |lse| u,
 * which put f32 dV at 2-4x the naive baseline's mean error, whose P is rounded
 * once (found by the fuzzer on cuda-flash; this emulation showed the same).
 * cuda-flash's f32 backward does the same (kernels/cuda/common.cuh). */
static float exp_shifted(float s, float scale, float lse, float lse_lo)
{
    float hi = s * scale;
    if (!isfinite(hi) || !isfinite(lse))
        return expf(hi - lse);
    float lo = fmaf(s, scale, -hi), x = hi - lse, bb = x - hi;
    float err = (hi - (x - bb)) + (-lse - bb), corr = (lo + err) - lse_lo;
    float e = expf(x);
    /* Scores past ~2^14, where the correction is not small: the forward's LSE came
     * from rounded scores, so P is taken as the forward saw them (one-hot there). */
    return fabsf(corr) <= 0x1p-10f ? fmaf(e, corr, e) : e;
}

/* f32 only: the stored LSE is itself rounded, by up to |LSE| u / 2, and every P
 * of its row inherits that error in full, the same for every key: at Nk = 65
 * that alone put dV at 2.5x the naive baseline's mean error (whose P is rounded
 * once per element).  So the backward measures the stored LSE's remainder,
 * lse_lo = ln sum_j exp(s_ij scale - LSE_i), and subtracts it in the exponent:
 * the scores are the backward's own f32 ones (the same sums in the same
 * order), so its P sum to 1 and errors shared by a row's scores still cancel;
 * the exponent and the sum are in double.  It only refines: a remainder past
 * 2^-12 means an LSE wrong beyond rounding, left as it is so that a bad LSE
 * still shows in the gradients; scores past 2^40, where double cannot hold
 * the exponent to 2^-12, are left alone too. */
static void refine_lse(const ac_problem *p, int b, int h, int nq, const float *q_rows, const float *k_rows,
                       const int *lo, const int *hi, const float *lse, float *lse_lo)
{
    int d = p->head_dim;
    double scale = (double)(float)p->scale;
    for (int i = 0; i < nq; i++) {
        lse_lo[i] = 0.0f;
        if (!isfinite(lse[i])) /* -inf: a row with nothing visible */
            continue;
        const uint8_t *dense = cf_dense_row(p, b, h, i);
        double sum = 0.0, top = 0.0;
        for (int j = lo[i]; j < hi[i]; j++) {
            if (dense && j < p->seqlen_k && !dense[j])
                continue;
            float s = 0.0f; /* as cf_gemm_nt sums it */
            for (int c = 0; c < d; c++)
                s += q_rows[(size_t)i * d + c] * k_rows[(size_t)j * d + c];
            sum += exp((double)s * scale - lse[i]);
            top = fmax(top, fabs((double)s * scale));
        }
        double r = sum > 0.0 ? log(sum) : 0.0;
        lse_lo[i] = fabs(r) < 0x1p-12 && top < 0x1p40 ? (float)r : 0.0f;
    }
}

/* One (Q tile of query head slot g, K/V tile at j0) block of the backward. */
static void bwd_block(const ac_problem *p, ac_dtype t, int b, int h, int g, int i0, int rows, int j0, int cols,
                      bwd_work *w)
{
    int d = p->head_dim;
    size_t row0 = (size_t)g * p->seqlen_q + i0;
    const float *q = w->q_all + row0 * d, *d_o = w->do_all + row0 * d;
    const float *lse = w->lse_all + row0, *lse_lo = w->lse_lo + row0, *delta = w->delta_all + row0;
    float *dq = w->dq_acc + row0 * d, scale = (float)p->scale;
    cf_gemm_nt(q, w->k_t, rows, cols, d, w->s); /* raw scores: the scale enters the exponent */
    cf_mask_tile(p, b, h, i0, rows, j0, cols, w->lo, w->hi, w->s);
    /* P recomputed from LSE; a hidden pair (the mask's -inf, on the raw score)
     * and a row with nothing visible have P = 0.  The -inf must not meet the
     * scale: times a negative scale it is +inf, and P was Inf (dQ overflow on
     * every masked case with scale < 0). */
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            float *s = &w->s[(size_t)r * cols + c];
            bool hidden = *s == -INFINITY || lse[r] == -INFINITY;
            *s = hidden ? 0.0f : exp_shifted(*s, scale, lse[r], lse_lo[r]);
            w->p_dt[(size_t)r * cols + c] = cf_round_to(t, *s);
        }
    cf_gemm_tn_acc(w->p_dt, cols, d_o, rows, cols, d, w->dv_acc); /* dV += P^T dO */
    cf_gemm_nt(d_o, w->v_t, rows, cols, d, w->dp); /* dP = dO V^T */
    for (int r = 0; r < rows; r++) /* dS = P (dP - D), in dtype */
        for (int c = 0; c < cols; c++) {
            size_t x = (size_t)r * cols + c;
            w->dp[x] = cf_round_to(t, w->s[x] * (w->dp[x] - delta[r]));
        }
    cf_gemm_tn_acc(w->dp, cols, q, rows, cols, d, w->dk_acc); /* dK += dS^T Q */
    for (int r = 0; r < rows; r++) /* dQ += dS K */
        cf_combine_rows(dq + (size_t)r * d, w->dp + (size_t)r * cols, 1, w->k_rows + (size_t)j0 * d, d, cols, d);
}

static void bwd_load_group(const cpu_flash_params *cp, const ac_problem *p, ac_dtype t, int b, int n_heads,
                           const ac_bwd_args *a, bwd_work *w)
{
    int nq = ac_seqlen_q_of(p, b);
    size_t stride = (size_t)p->seqlen_q * p->head_dim;
    for (int g = 0; g < n_heads; g++) {
        int h = w->heads[g];
        float *do_rows = w->do_all + g * stride;
        cf_load_rows(p, t, a->q, p->heads_q, p->seqlen_q, b, h, 0, nq, w->q_all + g * stride);
        cf_load_rows(p, t, a->d_o, p->heads_q, p->seqlen_q, b, h, 0, nq, do_rows);
        for (int i = 0; i < nq; i++)
            w->lse_all[(size_t)g * p->seqlen_q + i] = a->lse[ac_lse_index(p, b, h, i)];
        if (t == AC_F32)
            refine_lse(p, b, h, nq, w->q_all + g * stride, w->k_rows, w->lo, w->hi,
                       w->lse_all + (size_t)g * p->seqlen_q, w->lse_lo + (size_t)g * p->seqlen_q);
        bwd_delta(cp, p, t, b, h, nq, a, do_rows, w->o_rows, w->delta_all + (size_t)g * p->seqlen_q);
    }
    memset(w->dq_acc, 0, (size_t)n_heads * stride * sizeof(float));
}

/* The softmax scale multiplies dS in both dK and dQ, once. */
static float grad_scale(const cpu_flash_params *cp, const ac_problem *p)
{
    float scale = (float)p->scale;
    if (cp->mut == CF_MUT_BWD_SCALE_TWICE)
        return scale * scale;
    return cp->mut == CF_MUT_BWD_NO_SCALE ? 1.0f : scale;
}

static void bwd_kv_head(const cpu_flash_params *cp, const ac_problem *p, ac_dtype t, int b, int hk,
                        const ac_bwd_args *a, bwd_work *w)
{
    int d = p->head_dim, br = cp->block_q, bc = cp->block_k;
    int nq = ac_seqlen_q_of(p, b), nk = ac_seqlen_k_of(p, b), n_heads = 0;
    float gs = grad_scale(cp, p);
    for (int h = 0; h < p->heads_q; h++)
        if (cf_kv_head_of(cp, p, h) == hk)
            w->heads[n_heads++] = h;
    cf_load_rows(p, t, a->k, p->heads_kv, p->seqlen_k, b, hk, 0, p->seqlen_k, w->k_rows);
    cf_load_rows(p, t, a->v, p->heads_kv, p->seqlen_k, b, hk, 0, p->seqlen_k, w->v_rows);
    bwd_load_group(cp, p, t, b, n_heads, a, w);
    for (int j0 = 0; j0 < nk; j0 += bc) {
        /* keys past every row's range get P = 0: computing them would change nothing */
        int cols = nq > 0 && w->hi[nq - 1] - j0 < bc ? w->hi[nq - 1] - j0 : bc;
        cols = cols < 0 ? 0 : cols;
        cf_transpose_tile(w->k_rows, j0, cols, d, w->k_t);
        cf_transpose_tile(w->v_rows, j0, cols, d, w->v_t);
        memset(w->dk_acc, 0, (size_t)bc * d * sizeof(float));
        memset(w->dv_acc, 0, (size_t)bc * d * sizeof(float));
        for (int g = 0; g < n_heads; g++) {
            if (cp->mut == CF_MUT_BWD_NO_GQA_SUM) /* each query head overwrites instead of adding */
                memset(w->dk_acc, 0, (size_t)bc * d * sizeof(float)),
                    memset(w->dv_acc, 0, (size_t)bc * d * sizeof(float));
            for (int i0 = 0; i0 < nq; i0 += br) {
                int rows = nq - i0 < br ? nq - i0 : br;
                if (!cf_block_masked(w->lo, w->hi, i0, i0 + rows, j0, j0 + bc))
                    bwd_block(p, t, b, w->heads[g], g, i0, rows, j0, cols, w);
            }
        }
        for (int j = j0; j < nk && j < j0 + bc; j++) {
            size_t at = ac_kv_index(p, b, hk, j, 0), x = (size_t)(j - j0) * d;
            for (int c = 0; c < d; c++) {
                cf_store_elem(t, a->dk, at + c, w->dk_acc[x + c] * gs);
                cf_store_elem(t, a->dv, at + c, w->dv_acc[x + c]);
            }
        }
    }
    for (int g = 0; g < n_heads; g++)
        for (int i = 0; i < nq; i++) {
            size_t at = ac_q_index(p, b, w->heads[g], i, 0);
            const float *acc = w->dq_acc + ((size_t)g * p->seqlen_q + i) * d;
            for (int c = 0; c < d; c++)
                cf_store_elem(t, a->dq, at + c, acc[c] * gs);
        }
}

int cf_backward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_bwd_args *a, ac_err *err)
{
    const cpu_flash_params *cp = self->ctx;
    int st = cf_check_call(self, p, t, true, err);
    if (st != AC_OK)
        return st;
    if (cf_variant_path(p)) /* cpu_flash_var_bwd.c */
        return cf_backward_variants(self, p, t, a, err);
    bwd_work w;
    if (!bwd_work_alloc(cp, p, &w)) {
        bwd_work_free(&w);
        return ac_fail(err, AC_ERR_ENV, "%s: out of memory", self->name);
    }
    for (int b = 0; b < p->batch; b++) {
        cf_row_ranges(cp, p, b, w.lo, w.hi);
        for (int hk = 0; hk < p->heads_kv; hk++)
            bwd_kv_head(cp, p, t, b, hk, a, &w);
    }
    bwd_work_free(&w);
    return AC_OK;
}
