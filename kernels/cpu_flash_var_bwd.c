/* kernels/cpu_flash_var_bwd.c — cpu-flash's backward on problems with
 * variants: FlashAttention-2's backward by recomputation from LSE (as
 * cpu_flash_bwd.c, per batch, kv head and K/V tile over the query heads of
 * the GQA group), with S' recomputed as the forward made it
 * (cf_score_mods), P = exp(S' - LSE), and:
 *   softcap: dS = dS' (1 - tanh^2), the tanh recomputed with the scores, as
 *     FlashAttention does, rounded to the dtype once;
 *   sinks: P from the LSE that holds the sink; dSink_h = -sum_i Ps_i D_i in f32,
 *     Ps_i = exp(s_h - LSE_i), batches and rows in order;
 *   bias: dBias += dS' = P (dP - D) in f32 (before the softcap's t'), written
 *     in the bias's dtype at the end;
 *   dropout: the forward's keep draw again (cf_dropout_keep): dV takes P
 *     dropped, dP' = dP keep / (1 - p) in dS = P (dP' - D).
 * D = rowsum(dO * O) from the stored O; P and dS rounded to the dtype before
 * their products, all sums f32, the scale applied to dK and dQ at the end.
 * For f32 the stored LSE's own rounding is measured and taken out of the
 * exponent, as the plain path does (cpu_flash_bwd.c, refine_lse). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_flash_internal.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3") /* see cpu_flash.c */
#endif

typedef struct {
    float *k_rows, *v_rows; /* (keys_alloc x d), (keys_alloc x d_v) of one kv head */
    float *k_t, *v_t; /* (d x Bc), (d_v x Bc): the current K/V tile transposed */
    float *q_all, *do_all, *dq_acc; /* (group x seqlen_q x d); do_all (group x seqlen_q x d_v) */
    float *lse_all, *lse_lo, *delta_all; /* (group x seqlen_q) */
    float *o_rows; /* (seqlen_q x d_v) scratch for D */
    float *s, *slope, *p_dt, *dp; /* (Br x Bc) */
    float *dk_acc, *dv_acc; /* (Bc x d), (Bc x d_v) */
    int *heads, *lo, *hi;
    int keys_alloc;
    float *dsink_acc; /* (Hq) with sinks: -sum Ps D, f32 */
    float *dbias_acc; /* (bias) with a bias: dS' summed over its broadcast, f32 */
} vb_work;

static void vb_free(vb_work *w)
{
    void *all[] = {w->k_rows, w->v_rows,    w->k_t,    w->v_t, w->q_all,     w->do_all,   w->dq_acc, w->lse_all,
                   w->lse_lo, w->delta_all, w->o_rows, w->s,   w->slope,     w->p_dt,     w->dp,     w->dk_acc,
                   w->dv_acc, w->heads,     w->lo,     w->hi,  w->dsink_acc, w->dbias_acc};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

static bool vb_alloc(const cpu_flash_params *cp, const ac_problem *p, vb_work *w)
{
    size_t d = (size_t)p->head_dim, d_v = (size_t)ac_head_dim_v(p), br = (size_t)cp->block_q, bc = (size_t)cp->block_k;
    size_t nq = (size_t)p->seqlen_q, group = (size_t)(p->heads_q / p->heads_kv), f = sizeof(float);
    memset(w, 0, sizeof *w);
    w->keys_alloc = (p->seqlen_k + cp->block_k - 1) / cp->block_k * cp->block_k;
    w->k_rows = calloc((size_t)w->keys_alloc * d, f);
    w->v_rows = calloc((size_t)w->keys_alloc * d_v, f);
    w->k_t = malloc(d * bc * f);
    w->v_t = malloc(d_v * bc * f);
    w->q_all = malloc(group * nq * d * f);
    w->do_all = malloc(group * nq * d_v * f);
    w->dq_acc = malloc(group * nq * d * f);
    w->lse_all = malloc(group * nq * f);
    w->lse_lo = calloc(group * nq, f);
    w->delta_all = malloc(group * nq * f);
    w->o_rows = malloc(nq * d_v * f);
    w->s = malloc(br * bc * f);
    w->slope = malloc(br * bc * f);
    w->p_dt = malloc(br * bc * f);
    w->dp = malloc(br * bc * f);
    w->dk_acc = malloc(bc * d * f);
    w->dv_acc = malloc(bc * d_v * f);
    w->heads = malloc((size_t)p->heads_q * sizeof(int));
    w->lo = malloc(3 * nq * sizeof(int)); /* and the sink tokens' gap (cf_sink_token_ranges) */
    w->hi = malloc(nq * sizeof(int));
    w->dsink_acc = calloc((size_t)p->heads_q, f);
    if (p->bias && !(w->dbias_acc = calloc(ac_bias_elems(p), f)))
        return false;
    return w->dsink_acc && w->k_rows && w->v_rows && w->k_t && w->v_t && w->q_all && w->do_all && w->dq_acc &&
        w->lse_all && w->lse_lo && w->delta_all && w->o_rows && w->s && w->slope && w->p_dt && w->dp && w->dk_acc &&
        w->dv_acc && w->heads && w->lo && w->hi;
}

/* P = exp(s - lse - lse_lo) with the difference's rounding error (an exact
 * two-sum) carried as a first-order correction, as cpu_flash_bwd.c's
 * exp_shifted does for plain scores. */
static float exp_from_lse(float s, float lse, float lse_lo)
{
    if (!isfinite(s) || !isfinite(lse))
        return expf(s - lse);
    float x = s - lse, bb = x - s;
    float err = (s - (x - bb)) + (-lse - bb), corr = err - lse_lo;
    float e = expf(x);
    return fabsf(corr) <= 0x1p-10f ? fmaf(e, corr, e) : e;
}

/* S' of the (Q tile of head slot g, K/V tile at j0) block, masked; slope gets dT/dS. */
static void vb_scores(const cpu_flash_params *cp, const ac_problem *p, int b, int h, int g, int i0, int rows, int j0,
                      int cols, vb_work *w)
{
    const float *q = w->q_all + ((size_t)g * p->seqlen_q + i0) * p->head_dim;
    cf_gemm_nt(q, w->k_t, rows, cols, p->head_dim, w->s);
    cf_score_mods(cp, p, b, h, i0, rows, j0, cols, w->s, w->slope);
    cf_mask_tile(p, b, h, i0, rows, j0, cols, w->lo, w->hi, w->s);
    cf_mask_sink_gap(p, i0, rows, j0, cols, w->lo, w->s);
}

/* f32: the remainder of the stored LSE, ln sum_j exp(S'_ij - LSE_i) over the
 * kernel's own scores, in double; kept only when it is rounding (see
 * cpu_flash_bwd.c, refine_lse). */
static void vb_refine_lse(const cpu_flash_params *cp, const ac_problem *p, int b, int h, int g, int nq, vb_work *w)
{
    int bc = cp->block_k, br = cp->block_q;
    const float *lse = w->lse_all + (size_t)g * p->seqlen_q;
    float *lse_lo = w->lse_lo + (size_t)g * p->seqlen_q;
    for (int i0 = 0; i0 < nq; i0 += br) {
        int rows = nq - i0 < br ? nq - i0 : br;
        double sum[256] = {0}; /* br <= 256 */
        for (int j0 = 0; j0 < w->hi[i0 + rows - 1]; j0 += bc) {
            int cols = w->hi[i0 + rows - 1] - j0 < bc ? w->hi[i0 + rows - 1] - j0 : bc;
            if (cf_block_masked(w->lo, w->hi, i0, i0 + rows, j0, j0 + bc))
                continue;
            cf_transpose_tile(w->k_rows, j0, cols, p->head_dim, w->k_t);
            vb_scores(cp, p, b, h, g, i0, rows, j0, cols, w);
            for (int r = 0; r < rows; r++)
                for (int c = 0; c < cols && isfinite(lse[i0 + r]); c++)
                    sum[r] += exp((double)w->s[(size_t)r * cols + c] - lse[i0 + r]);
        }
        for (int r = 0; r < rows; r++) {
            if (p->sinks && isfinite(lse[i0 + r])) /* the sink's term of the denominator */
                sum[r] += exp((double)p->sinks[h] - lse[i0 + r]);
            double rem = sum[r] > 0.0 ? log(sum[r]) : 0.0;
            lse_lo[i0 + r] = isfinite(lse[i0 + r]) && fabs(rem) < 0x1p-12 ? (float)rem : 0.0f;
        }
    }
}

/* dS'_ij = P_ij (dP_ij - D_i) of the block added to the bias entry (b, h) reads. */
static void vb_dbias(const cpu_flash_params *cp, const ac_problem *p, int b, int h, int i0, int rows, int j0, int cols,
                     const float *delta, vb_work *w)
{
    int mb, mh;
    cf_bias_rows(cp, p, b, h, &mb, &mh);
    for (int r = 0; r < rows; r++) {
        float *acc = w->dbias_acc + ac_bias_index(p, mb, mh, i0 + r, j0);
        for (int c = 0; c < cols; c++)
            acc[c] += w->s[(size_t)r * cols + c] * (w->dp[(size_t)r * cols + c] - delta[r]);
    }
}

/* P dropped for dV: kept P times 1 / (1 - p) rounded to the dtype, dropped 0. */
static void vb_dropout_p(const cpu_flash_params *cp, const ac_problem *p, ac_dtype t, int b, int h, int i0, int rows,
                         int j0, int cols, vb_work *w)
{
    float f = cf_dropout_scale(cp, p);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            size_t x = (size_t)r * cols + c;
            w->p_dt[x] = cf_dropout_keep(p, b, h, i0 + r, j0 + c) ? cf_round_to(t, w->s[x] * f) : 0.0f;
        }
}

/* One (Q tile of head slot g, K/V tile at j0) block. */
static void vb_block(const cpu_flash_params *cp, const ac_problem *p, ac_dtype t, int b, int h, int g, int i0, int rows,
                     int j0, int cols, vb_work *w)
{
    int d = p->head_dim, d_v = ac_head_dim_v(p);
    size_t row0 = (size_t)g * p->seqlen_q + i0;
    const float *q = w->q_all + row0 * d, *d_o = w->do_all + row0 * d_v;
    const float *lse = w->lse_all + row0, *lse_lo = w->lse_lo + row0, *delta = w->delta_all + row0;
    float *dq = w->dq_acc + row0 * d;
    vb_scores(cp, p, b, h, g, i0, rows, j0, cols, w);
    for (int r = 0; r < rows; r++) /* P recomputed from LSE; a row with nothing visible has P = 0 */
        for (int c = 0; c < cols; c++) {
            float *s = &w->s[(size_t)r * cols + c];
            *s = lse[r] == -INFINITY ? 0.0f : exp_from_lse(*s, lse[r], lse_lo[r]);
            w->p_dt[(size_t)r * cols + c] = cf_round_to(t, *s);
        }
    if (p->dropout_p > 0.0) /* dV takes P dropped, as O did: the forward's draw again */
        vb_dropout_p(cp, p, t, b, h, i0, rows, j0, cols, w);
    cf_gemm_tn_acc(w->p_dt, cols, d_o, rows, cols, d_v, w->dv_acc); /* dV += P^T dO */
    cf_gemm_nt(d_o, w->v_t, rows, cols, d_v, w->dp); /* dP = dO V^T */
    if (p->dropout_p > 0.0) /* dP' = dP keep / (1 - p) */
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++)
                w->dp[(size_t)r * cols + c] *=
                    cf_dropout_keep(p, b, h, i0 + r, j0 + c) ? cf_dropout_scale(cp, p) : 0.0f;
    if (p->bias) /* dBias += dS' = P (dP - D), f32, before the softcap's t' */
        vb_dbias(cp, p, b, h, i0, rows, j0, cols, delta, w);
    for (int r = 0; r < rows; r++) /* dS = P (dP - D) dT/dS, in dtype */
        for (int c = 0; c < cols; c++) {
            size_t x = (size_t)r * cols + c;
            w->dp[x] = cf_round_to(t, w->s[x] * (w->dp[x] - delta[r]) * w->slope[x]);
        }
    cf_gemm_tn_acc(w->dp, cols, q, rows, cols, d, w->dk_acc); /* dK += dS^T Q */
    for (int r = 0; r < rows; r++) /* dQ += dS K */
        cf_combine_rows(dq + (size_t)r * d, w->dp + (size_t)r * cols, 1, w->k_rows + (size_t)j0 * d, d, cols, d);
}

/* D = rowsum(dO * O) in f32 from the stored O. */
static void vb_delta(const cpu_flash_params *cp, const ac_problem *p, ac_dtype t, int b, int h, int nq,
                     const ac_bwd_args *a, const float *do_rows, float *o_rows, float *delta)
{
    int d = ac_head_dim_v(p); /* O and dO rows */
    cf_load_kind(cp, p, t, a->o, AC_TENSOR_O, b, h, 0, nq, o_rows);
    for (int i = 0; i < nq; i++) {
        int src = cp->mut == CF_MUT_BWD_DELTA_WRONG_ROW ? (i + 1) % nq : i;
        float sum = 0.0f;
        for (int c = 0; c < d; c++)
            sum += do_rows[(size_t)i * d + c] * o_rows[(size_t)src * d + c];
        delta[i] = sum;
    }
}

/* dSink_h -= sum_i Ps_i D_i, Ps_i = exp(s_h - LSE_i) as P is recomputed (row by row, f32). */
static void vb_dsink(const ac_problem *p, int h, int g, int nq, vb_work *w)
{
    const float *lse = w->lse_all + (size_t)g * p->seqlen_q, *lse_lo = w->lse_lo + (size_t)g * p->seqlen_q;
    const float *delta = w->delta_all + (size_t)g * p->seqlen_q;
    for (int i = 0; i < nq; i++)
        if (lse[i] != -INFINITY)
            w->dsink_acc[h] -= exp_from_lse(p->sinks[h], lse[i], lse_lo[i]) * delta[i];
}

static void vb_load_group(const cpu_flash_params *cp, const ac_problem *p, ac_dtype t, int b, int n_heads,
                          const ac_bwd_args *a, vb_work *w)
{
    int nq = ac_seqlen_q_of(p, b);
    size_t stride = (size_t)p->seqlen_q * p->head_dim, stride_v = (size_t)p->seqlen_q * ac_head_dim_v(p);
    for (int g = 0; g < n_heads; g++) {
        int h = w->heads[g];
        float *do_rows = w->do_all + g * stride_v;
        cf_load_kind(cp, p, t, a->q, AC_TENSOR_Q, b, h, 0, nq, w->q_all + g * stride);
        cf_load_kind(cp, p, t, a->d_o, AC_TENSOR_O, b, h, 0, nq, do_rows);
        for (int i = 0; i < nq; i++)
            w->lse_all[(size_t)g * p->seqlen_q + i] = a->lse[ac_lse_index(p, b, h, i)];
        memset(w->lse_lo + (size_t)g * p->seqlen_q, 0, (size_t)p->seqlen_q * sizeof(float));
        if (t == AC_F32)
            vb_refine_lse(cp, p, b, h, g, nq, w);
        vb_delta(cp, p, t, b, h, nq, a, do_rows, w->o_rows, w->delta_all + (size_t)g * p->seqlen_q);
        if (p->sinks)
            vb_dsink(p, h, g, nq, w);
    }
    memset(w->dq_acc, 0, (size_t)n_heads * stride * sizeof(float));
}

/* The softmax scale multiplies dS in both dK and dQ, once (the plain path's mutants act here too). */
static float grad_scale(const cpu_flash_params *cp, const ac_problem *p)
{
    float scale = (float)p->scale;
    if (cp->mut == CF_MUT_BWD_SCALE_TWICE)
        return scale * scale;
    return cp->mut == CF_MUT_BWD_NO_SCALE ? 1.0f : scale;
}

static void vb_kv_head(const cpu_flash_params *cp, const ac_problem *p, ac_dtype t, int b, int hk, const ac_bwd_args *a,
                       vb_work *w)
{
    int d = p->head_dim, d_v = ac_head_dim_v(p), br = cp->block_q, bc = cp->block_k;
    int nq = ac_seqlen_q_of(p, b), nk = ac_seqlen_k_of(p, b), n_heads = 0;
    float gs = grad_scale(cp, p);
    for (int h = 0; h < p->heads_q; h++)
        if (cf_kv_head_of(cp, p, h) == hk)
            w->heads[n_heads++] = h;
    cf_load_kind(cp, p, t, a->k, AC_TENSOR_K, b, hk, 0, ac_stored_rows(p, b, false), w->k_rows);
    cf_load_kind(cp, p, t, a->v, AC_TENSOR_V, b, hk, 0, ac_stored_rows(p, b, false), w->v_rows);
    vb_load_group(cp, p, t, b, n_heads, a, w);
    for (int j0 = 0; j0 < nk; j0 += bc) {
        int cols = nq > 0 && w->hi[nq - 1] - j0 < bc ? w->hi[nq - 1] - j0 : bc;
        cols = cols < 0 ? 0 : cols;
        cf_transpose_tile(w->k_rows, j0, cols, d, w->k_t);
        cf_transpose_tile(w->v_rows, j0, cols, d_v, w->v_t);
        memset(w->dk_acc, 0, (size_t)bc * d * sizeof(float));
        memset(w->dv_acc, 0, (size_t)bc * d_v * sizeof(float));
        for (int g = 0; g < n_heads; g++) {
            if (cp->mut == CF_MUT_BWD_NO_GQA_SUM) /* each query head overwrites instead of adding */
                memset(w->dk_acc, 0, (size_t)bc * d * sizeof(float)),
                    memset(w->dv_acc, 0, (size_t)bc * d_v * sizeof(float));
            for (int i0 = 0; i0 < nq; i0 += br) {
                int rows = nq - i0 < br ? nq - i0 : br;
                if (cols > 0 && !cf_block_masked(w->lo, w->hi, i0, i0 + rows, j0, j0 + bc))
                    vb_block(cp, p, t, b, w->heads[g], g, i0, rows, j0, cols, w);
            }
        }
        for (int j = j0; j < nk && j < j0 + bc; j++) {
            size_t at = ac_kv_index(p, b, hk, j, 0), at_v = ac_v_index(p, b, hk, j, 0);
            for (int c = 0; c < d; c++)
                cf_store_elem(t, a->dk, at + c, w->dk_acc[(size_t)(j - j0) * d + c] * gs);
            for (int c = 0; c < d_v; c++)
                cf_store_elem(t, a->dv, at_v + c, w->dv_acc[(size_t)(j - j0) * d_v + c]);
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

int cf_backward_variants(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_bwd_args *a, ac_err *err)
{
    const cpu_flash_params *cp = self->ctx;
    if (cp->block_q > 256)
        return ac_fail(err, AC_ERR_INPUT, "%s: variants need block_q <= 256", self->name);
    if (p->sinks && !a->dsink)
        return ac_fail(err, AC_ERR_INPUT, "%s: a problem with sinks needs the dsink output", self->name);
    if (p->bias && !a->dbias)
        return ac_fail(err, AC_ERR_INPUT, "%s: a problem with a bias needs the dbias output", self->name);
    vb_work w;
    if (!vb_alloc(cp, p, &w)) {
        vb_free(&w);
        return ac_fail(err, AC_ERR_ENV, "%s: out of memory", self->name);
    }
    for (int b = 0; b < p->batch; b++) {
        cf_row_ranges(cp, p, b, w.lo, w.hi);
        cf_sink_token_ranges(cp, p, b, w.lo, w.hi);
        for (int hk = 0; hk < p->heads_kv; hk++)
            vb_kv_head(cp, p, t, b, hk, a, &w);
    }
    for (int h = 0; p->sinks && h < p->heads_q; h++)
        a->dsink[h] = w.dsink_acc[h];
    for (size_t x = 0; x < ac_bias_elems(p); x++) /* in the bias's dtype, every entry (0 where nothing reached) */
        ac_bits_put(p->bias_dtype, a->dbias, x, ac_narrow(p->bias_dtype, w.dbias_acc[x]));
    vb_free(&w);
    return AC_OK;
}
