/* ref/scales.c — the error scales E, the denominators of the gating metric
 * scaled_err = |y - x| / (u * E).  docs/DESIGN.md's definitions, with two terms it
 * leaves out made explicit.  With tau = eta / (2u) (eta the dtype's smallest
 * subnormal, u its unit roundoff), dPhat_ij = sum_c |dO_ic||V_jc|,
 * Dhat_i = sum_c |dO_ic||O_ic|:
 *   E_O_ic  = tau + sum_j (P_ij (1 + rho (G_ij + g_i)) + tau) |V_jc|
 *   (dropout: P_ij f_ij (2 + ...) in E_O and E_dV, f = keep / (1 - p), and dPhat f (1 + rho))
 *   E_dV_jc = tau + sum_i (P_ij (1 + r_ij) + tau) |dO_ic|          (i over the GQA group too)
 *   E_dQ_ic = tau + scale * sum_j (P_ij ((1 + r_ij)(dPhat_ij + Dhat_i) + R_i) + tau) |K_jc|
 *   E_dK_jc = tau + scale * sum_i (P_ij ((1 + r_ij)(dPhat_ij + Dhat_i) + R_i) + tau) |Q_ic|
 * The sums run over visible (i, j) pairs only: a masked pair is an exact zero
 * in any kernel, so it carries no rounding error.
 *
 * The added terms, and why:
 * - the leading tau: the output's own rounding.  Where an output lands in the
 *   subnormals (dK of a barely-attended key in f16) the correctly rounded value
 *   is off by eta/2 = u * tau, whatever E the computation had.  Added to every
 *   element whose E is not an exact zero.
 * - the S terms, rho = u_f32 / u: every fused kernel computes S = scale QK^T in
 *   f32, a dot product of d exact products, so S_ij errs by up to u_f32 G_ij,
 *   G_ij = d |scale| sum_c |Q_ic||K_jc| (Higham's gamma_d bound; reached when
 *   the products are alike, as "increasing" scores make them).  Softmax turns it into a relative error of P_ij of
 *   G_ij + g_i, g_i = sum_k P_ik G_ik (the normalisation's share).  The
 *   backward recomputes P from the stored f32 LSE, whose rounding adds |L_i|:
 *   r_ij = rho (G_ij + g_i + |L_i|).  That error reaches dS through P, and
 *   through D computed from the forward's O: R_i = sum_k P_ik r_ik dPhat_ik.
 *   Negligible for f16/bf16 at ordinary scores (rho = 2^-13, 2^-16), dominant
 *   for f32 kernels and for scores in the thousands; without it a correct f32
 *   kernel reads up to 485 on scores x16.
 * Computed like the fp64 backward, in two parallel passes (parallel.h) so
 * that no two workers add into one output and the sums' order does not depend
 * on the thread count:
 *   1. per (b, h, block of rows): P from the reference LSE, G, the weights,
 *      E_O = W_O |V| and E_dQ = scale W_G |K| (dgemms on absolute values); it
 *      keeps each row's g_i and R_i, sums over the whole row;
 *   2. per (b, h_kv, tile of SCALE_KEY_TILE keys): for each query head of the
 *      group, then each row block that sees the tile, the pair's weights again
 *      from the kept g_i, R_i, then E_dV += W_V^T |dO| and E_dK += scale W_G^T |Q|.
 * Only the keys a block can see go through the dgemms.  A scale is a double
 * computation of nonnegative terms, accurate to ~d * 2^-53. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fp64_block.h"
#include "parallel.h"
#include "ref.h"
#include "variants_internal.h"

#define SCALE_KEY_TILE 256

typedef struct {
    const ac_problem *p;
    const double *q, *k, *v, *o, *lse, *d_o;
    double *e_o, *e_dq, *e_dk, *e_dv;
    double tau; /* eta / 2u */
    double rho; /* u_f32 / u */
    double *abs_k, *abs_v; /* (B, Hkv, Nk, d), packed once */
    double *g_row, *r_row; /* (B, Hq, Nq): g_i and R_i as pass 1 summed them */
    double ***bufs; /* per worker: the scale_buffers arrays below */
    bool mods; /* the problem has score modifiers (ac_problem_has_score_mods) */
    double *e_dbias; /* (bias) E_dBias, or NULL: pass 3 */
    double dbias_factor, dbias_tau; /* u_t / u_b and tau_b: dBias is stored in the bias's dtype b */
    double p_floor; /* rho tau_f32 = eta_f32 / 2u: a kernel's f32 P below the subnormals, in units of u */
    bool fp8; /* fp8 inputs: E_O's P term at the declared format (fp8_weight) */
    double p_rel, p_tau; /* max(1, u_p / u), and P's floor eta_p / 2u (fp8 P: / sigma_min, times the row's max P) */
} scale_job;

/* One worker's block buffers: probabilities, the O, dV and dQ/dK weights, the
 * score magnitudes G (then the backward's relative error r of P), each
 * (block, keys); |Q|, |dO|, |O| of the block's rows (block, d). */
enum {
    B_PROB,
    B_WEIGHT_O,
    B_WEIGHT_V,
    B_WEIGHT_G,
    B_REL_ERR,
    B_SLOPE,
    B_SIGMA,
    B_KAPPA,
    B_ABS_Q,
    B_ABS_DO,
    B_ABS_O,
    B_COUNT
};
/* B_SLOPE, B_SIGMA, B_KAPPA: the score modifiers' terms (below), block-sized
 * only when the problem has them. */

typedef struct {
    const ref_head *hd;
    int i0, i1, jlo, jhi; /* the pair: rows [i0, i1), keys [jlo, jhi) */
    double **buf; /* B_COUNT arrays */
} scale_pair;

static void abs_rows(const double *src, size_t ld, int rows, int d, double *dst)
{
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < d; c++)
            dst[(size_t)r * d + c] = fabs(src[(size_t)r * ld + c]);
}

/* Row jlo of head (b, h_kv) of a packed |K| (d columns) or |V| (d_v columns: v_cols). */
static const double *head_abs_cols(const scale_job *job, const double *packed, const ref_head *hd, int jlo, int cols)
{
    const ac_problem *p = job->p;
    return packed + (((size_t)hd->b * p->heads_kv + hd->h_kv) * p->seqlen_k + jlo) * (size_t)cols;
}

static const double *head_abs(const scale_job *job, const double *packed, const ref_head *hd, int jlo)
{
    return head_abs_cols(job, packed, hd, jlo, packed == job->abs_v ? hd->d_v : hd->d);
}

static size_t row_id(const ref_head *hd, int i)
{
    return ((size_t)hd->b * hd->p->heads_q + hd->h) * hd->p->seqlen_q + i;
}

/* The score modifiers (docs/DESIGN.md, "Variants"): the kernel's f32 S' errs
 * by t' G + sigma (u_f32 units; t' = dS'/dS carries S's own error through the
 * tanh, sigma is the modifiers' rounding), which replaces G in every formula;
 * and the backward's dS = dS' t' meets the error of the kernel's t',
 * kappa = rho (2 + curv Ghat) in units of u: 2 u_f32 from 1 - tanh^2 cancelling
 * near saturation, curv Ghat from t' moving with S's error. */
static void pair_mod_errors(const scale_job *job, double **buf, size_t n)
{
    for (size_t e = 0; e < n; e++) {
        double ghat = buf[B_SLOPE][e] * buf[B_REL_ERR][e] + buf[B_SIGMA][e];
        buf[B_REL_ERR][e] = ghat;
        buf[B_KAPPA][e] = job->rho * (2.0 + buf[B_KAPPA][e] * ghat);
    }
}

/* prob <- P, weight_o <- 1 where visible and 0 where masked, rel_err <- G_ij;
 * |Q| (and |dO|, |O| with grads) of the rows into their buffers. */
static void pair_terms(const scale_job *job, const scale_pair *pr)
{
    const ref_head *hd = pr->hd;
    int rows = pr->i1 - pr->i0, cols = pr->jhi - pr->jlo, d = hd->d;
    double **buf = pr->buf;
    size_t q_at = hd->q_base + (size_t)pr->i0 * hd->ld_q, n = (size_t)rows * (size_t)cols;
    size_t o_at = hd->o_base + (size_t)pr->i0 * hd->ld_o;
    abs_rows(job->q + q_at, hd->ld_q, rows, d, buf[B_ABS_Q]);
    if (job->d_o) { /* O-like: d_v columns */
        abs_rows(job->d_o + o_at, hd->ld_o, rows, hd->d_v, buf[B_ABS_DO]);
        abs_rows(job->o + o_at, hd->ld_o, rows, hd->d_v, buf[B_ABS_O]);
    }
    ref_mod_aux aux = {buf[B_SLOPE], buf[B_SIGMA], buf[B_KAPPA]};
    ref_block_scores_mods(hd, job->q, job->k, pr->i0, pr->i1, pr->jlo, pr->jhi, buf[B_PROB], job->mods ? &aux : NULL);
    for (size_t e = 0; e < n; e++) /* ref_block_scores marks every masked pair with -inf */
        buf[B_WEIGHT_O][e] = buf[B_PROB][e] == -INFINITY ? 0.0 : 1.0;
    ref_block_probs_from_lse(hd, pr->i0, pr->i1, pr->jlo, pr->jhi, job->lse, buf[B_PROB]);
    /* G: d |scale| sum |Q||K| for an f32 dot product; an fp8 kernel's declared accumulator errs more */
    if (job->fp8 && hd->p->fp8_acc_bits > 0)
        ref_fp8_qk_errors(hd, job->q, job->k, pr->i0, pr->i1, pr->jlo, pr->jhi, buf[B_REL_ERR]);
    else
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, d, d * fabs(hd->p->scale), buf[B_ABS_Q], d,
                    head_abs(job, job->abs_k, hd, pr->jlo), d, 0.0, buf[B_REL_ERR], cols);
    if (job->mods)
        pair_mod_errors(job, buf, n);
}

/* With sinks: Ps_i |s_h|, Ps_i = exp(s_h - LSE_i).  The kernel's exp(s_h - m)
 * takes an f32 argument, so the sink's term of the denominator errs by
 * u_f32 |s_h - m| relative, like a score's: |s_h| plays G's part. */
static double sink_share(const ref_head *hd, const double *lse, int i)
{
    double sink = ref_sink_of(hd->p, hd->h), l = lse[ac_lse_index(hd->p, hd->b, hd->h, i)];
    return isfinite(l) ? exp(sink - l) * fabs(sink) : 0.0;
}

/* g_i = sum_j P_ij G_ij over the visible keys of each row (pass 1 sees them all). */
static void pair_g_rows(const scale_job *job, const scale_pair *pr)
{
    int cols = pr->jhi - pr->jlo;
    for (int i = pr->i0; i < pr->i1; i++) {
        size_t at = (size_t)(i - pr->i0) * cols;
        const double *vis = pr->buf[B_WEIGHT_O] + at, *prob = pr->buf[B_PROB] + at, *g = pr->buf[B_REL_ERR] + at;
        double g_row = 0.0;
        for (int j = 0; j < cols; j++)
            g_row += vis[j] != 0.0 ? prob[j] * g[j] : 0.0;
        if (pr->hd->p->sinks) /* the sink's share of the denominator, |s_h| its "score" */
            g_row += sink_share(pr->hd, job->lse, i);
        job->g_row[row_id(pr->hd, i)] = g_row;
    }
}

/* fp8 inputs (docs/DESIGN.md, "fp8"): the kernel rounds P to its declared
 * format p before P V, relatively u_p (an fp8 P: sigma exp(S - m), so its
 * subnormal floor eta_p / 2 is absolute in units of sigma, i.e. of the row's
 * largest P over sigma >= AC_FP8_P_SIGMA_MIN), and applies V's descale to
 * its f32 accumulator (per block: to each tile's partial sum, then added):
 * two f32 roundings, 2 rho.  The row's normaliser l is the unquantised f32
 * sum, as for the other dtypes:
 *   weight_O = P_ij (max(1, u_p / u) + 2 rho + rho (G_ij + g_i)) + tau_p (fp8 P: tau_p max_k P_ik)
 * (the 1: O's own rounding to the output dtype, when P is kept finer than O). */
static void fp8_weights_o(const scale_job *job, const scale_pair *pr)
{
    int cols = pr->jhi - pr->jlo;
    bool p_fp8 = ac_dtype_is_fp8(pr->hd->p->fp8_p);
    for (int i = pr->i0; i < pr->i1; i++) {
        size_t at = (size_t)(i - pr->i0) * cols;
        double *vis = pr->buf[B_WEIGHT_O] + at, *g = pr->buf[B_REL_ERR] + at;
        const double *prob = pr->buf[B_PROB] + at;
        double g_row = job->g_row[row_id(pr->hd, i)], p_max = 0.0;
        for (int j = 0; j < cols; j++)
            p_max = vis[j] != 0.0 ? fmax(p_max, prob[j]) : p_max;
        double floor_p = p_fp8 ? job->p_tau * p_max : job->p_tau;
        for (int j = 0; j < cols; j++)
            vis[j] =
                vis[j] == 0.0 ? 0.0 : prob[j] * (job->p_rel + 2.0 * job->rho + job->rho * (g[j] + g_row)) + floor_p;
    }
}

/* weight_o, weight_v as in the header, 0 where masked; rel_err <- r_ij. */
static void pair_weights_o(const scale_job *job, const scale_pair *pr)
{
    if (job->fp8) {
        fp8_weights_o(job, pr);
        return;
    }
    int cols = pr->jhi - pr->jlo;
    for (int i = pr->i0; i < pr->i1; i++) {
        size_t at = (size_t)(i - pr->i0) * cols;
        double *vis = pr->buf[B_WEIGHT_O] + at, *wv = pr->buf[B_WEIGHT_V] + at, *g = pr->buf[B_REL_ERR] + at;
        const double *prob = pr->buf[B_PROB] + at;
        double g_row = job->g_row[row_id(pr->hd, i)];
        double lse = job->lse[ac_lse_index(pr->hd->p, pr->hd->b, pr->hd->h, i)];
        double lse_mag = isfinite(lse) ? fabs(lse) : 0.0;
        for (int j = 0; j < cols; j++) {
            if (vis[j] == 0.0) {
                wv[j] = g[j] = 0.0;
                continue;
            }
            /* dropout: O and dV take P keep / (1 - p), whose product rounds once more */
            double f = 1.0, once = 0.0;
            if (pr->hd->p->dropout_p > 0.0)
                f = ac_dropout_factor(pr->hd->p, pr->hd->b, pr->hd->h, i, pr->jlo + j), once = 1.0;
            vis[j] = prob[j] * f * (1.0 + once + job->rho * (g[j] + g_row)) + job->tau;
            g[j] = job->rho * (g[j] + g_row + lse_mag);
            wv[j] = prob[j] * f * (1.0 + once + g[j]) + job->tau;
        }
    }
}

/* weight_g for dQ, dK with score modifiers: dS = dS' t', so
 * t' P ((1 + r)(dPhat + Dhat) + R) + P (dPhat + Dhat) kappa + tau + rho tau_f32 t' (dPhat + Dhat)
 * (pair_mod_errors; the last for an f32 P below the subnormals, which steep ALiBi
 * slopes and -inf-like biases make common: a kernel's P = 0 there; it matters in f32 only);
 * with ds_prime dS' alone (dBias's): P ((1 + r + rho d_v)(dPhat + Dhat) + R) + tau + rho tau_f32
 * (dPhat + Dhat), the rho d_v for the f32 dot products dP and D of d_v terms each
 * (Higham's gamma, as G's d) and rho tau_f32 (dPhat + Dhat) for an f32 P below the
 * subnormals (a kernel's P = 0 where exp(S' - LSE) < eta_f32): dQ and dK average
 * these away over their keys' sum; a dBias entry of one (b, h) is that one dS'.
 * One row of the block from `at`; weight_g holds dPhat on entry. */
static void mod_weights_grad(const scale_job *job, double **buf, size_t at, int cols, double delta_hat, double r_row,
                             bool ds_prime)
{
    double *w = buf[B_WEIGHT_G] + at;
    const double *prob = buf[B_PROB] + at, *vis = buf[B_WEIGHT_O] + at, *rel = buf[B_REL_ERR] + at;
    const double *slope = buf[B_SLOPE] + at, *kappa = buf[B_KAPPA] + at;
    for (int j = 0; j < cols; j++) {
        if (vis[j] == 0.0) {
            w[j] = 0.0;
            continue;
        }
        double mag = w[j] + delta_hat, w_ds = prob[j] * ((1.0 + rel[j]) * mag + r_row);
        w[j] = ds_prime ? w_ds + prob[j] * job->rho * ac_head_dim_v(job->p) * mag + job->tau + job->p_floor * mag
                        : w_ds * slope[j] + prob[j] * mag * kappa[j] + job->tau + job->p_floor * slope[j] * mag;
    }
}

/* weight_g <- P ((1 + r)(dPhat + Dhat) + R) + tau where visible, 0 where
 * masked; R_i summed here in pass 1 (keep_r), read back in pass 2. */
/* Dropout: D_i comes from the kernel's O, which errs by u E_O, and a dropped P
 * leaves fewer, larger terms in O than E's "Dhat" rounding share allows for:
 * every pair's dS gains P_ij sum_c |dO_ic| E_O_ic (E_O of pass 1, done for these rows). */
static void add_delta_error(const scale_job *job, const ref_head *hd, int i, const double *prob, const double *vis,
                            double *w, int cols)
{
    const double *d_o = job->d_o + hd->o_base + (size_t)i * hd->ld_o,
                 *e_o = job->e_o + hd->o_base + (size_t)i * hd->ld_o;
    double d_err = 0.0;
    for (int c = 0; c < hd->d_v; c++)
        d_err += fabs(d_o[c]) * e_o[c];
    for (int j = 0; j < cols; j++)
        w[j] += vis[j] != 0.0 ? prob[j] * d_err : 0.0;
}

static void pair_weights_grad(const scale_job *job, const scale_pair *pr, bool keep_r, bool ds_prime)
{
    const ref_head *hd = pr->hd;
    int rows = pr->i1 - pr->i0, cols = pr->jhi - pr->jlo, d = hd->d_v; /* dPhat = |dO||V|^T: over d_v */
    double **buf = pr->buf;
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, d, 1.0, buf[B_ABS_DO], d,
                head_abs(job, job->abs_v, hd, pr->jlo), d, 0.0, buf[B_WEIGHT_G], cols);
    if (hd->p->dropout_p > 0.0) /* dP' = dP keep / (1 - p), its f32 product rounding rho more */
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < cols; j++)
                buf[B_WEIGHT_G][(size_t)r * cols + j] *=
                    ac_dropout_factor(hd->p, hd->b, hd->h, pr->i0 + r, pr->jlo + j) * (1.0 + job->rho);
    for (int r = 0; r < rows; r++) {
        double delta_hat = 0.0;
        for (int c = 0; c < d; c++)
            delta_hat += buf[B_ABS_DO][(size_t)r * d + c] * buf[B_ABS_O][(size_t)r * d + c];
        size_t at = (size_t)r * cols;
        double *w = buf[B_WEIGHT_G] + at;
        const double *prob = buf[B_PROB] + at, *vis = buf[B_WEIGHT_O] + at, *rel = buf[B_REL_ERR] + at;
        if (keep_r) {
            double r_row = 0.0;
            for (int j = 0; j < cols; j++)
                r_row += vis[j] != 0.0 ? prob[j] * rel[j] * w[j] : 0.0;
            job->r_row[row_id(hd, pr->i0 + r)] = r_row;
        }
        double r_row = job->r_row[row_id(hd, pr->i0 + r)];
        if (job->mods)
            mod_weights_grad(job, buf, at, cols, delta_hat, r_row, ds_prime);
        else
            for (int j = 0; j < cols; j++)
                w[j] = vis[j] != 0.0 ? prob[j] * ((1.0 + rel[j]) * (w[j] + delta_hat) + r_row) + job->tau : 0.0;
        if (hd->p->dropout_p > 0.0 && !ds_prime) /* (dBias adds it itself, dbias_pair) */
            add_delta_error(job, hd, pr->i0 + r, prob, vis, w, cols);
    }
}

/* The output's own rounding, eta/2 = u * tau, on every element that is not an
 * exact zero of the computation (E = 0: a padding row, a fully masked row). */
static void add_rounding_floor(double *e, size_t ld, int rows, int d, double tau)
{
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < d; c++)
            e[(size_t)r * ld + c] += e[(size_t)r * ld + c] > 0.0 ? tau : 0.0;
}

/* ---- pass 1: E_O, E_dQ per block of rows ------------------------------------ */

static void rows_block(const scale_job *job, const ref_head *hd, int i0, int i1, double **buf)
{
    scale_pair pr = {hd, i0, i1, 0, 0, buf};
    ref_block_keys(hd, i0, i1, &pr.jlo, &pr.jhi);
    if (pr.jhi <= pr.jlo) { /* no visible pair: the outputs are exact zeros */
        ref_zero_o_rows(hd, job->e_o, i0, i1);
        if (job->d_o)
            ref_zero_q_rows(hd, job->e_dq, i0, i1);
        return;
    }
    int rows = i1 - i0, cols = pr.jhi - pr.jlo, d = hd->d, ld_q = (int)hd->ld_q;
    size_t q_at = hd->q_base + (size_t)i0 * hd->ld_q;
    pair_terms(job, &pr);
    pair_g_rows(job, &pr);
    pair_weights_o(job, &pr);
    size_t o_at = hd->o_base + (size_t)i0 * hd->ld_o;
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd->d_v, cols, 1.0, buf[B_WEIGHT_O], cols,
                head_abs(job, job->abs_v, hd, pr.jlo), hd->d_v, 0.0, job->e_o + o_at, (int)hd->ld_o);
    add_rounding_floor(job->e_o + o_at, hd->ld_o, rows, hd->d_v, job->tau);
    if (job->fp8 && hd->p->fp8_acc_bits > 0) /* the tensor cores' P V steps (ref.h) */
        ref_fp8_pv_errors(hd, job->v, buf[B_PROB], i0, i1, pr.jlo, pr.jhi, ac_unit_roundoff(hd->p->fp8_out),
                          job->e_o + o_at, hd->ld_o);
    if (!job->d_o)
        return;
    pair_weights_grad(job, &pr, true, false);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, cols, fabs(hd->p->scale), buf[B_WEIGHT_G], cols,
                head_abs(job, job->abs_k, hd, pr.jlo), d, 0.0, job->e_dq + q_at, ld_q);
    add_rounding_floor(job->e_dq + q_at, hd->ld_q, rows, d, job->tau);
}

static void rows_task(void *arg, size_t task, int worker)
{
    const scale_job *job = arg;
    ref_head hd;
    int i0, i1;
    ref_block_task(job->p, task, &hd, &i0, &i1);
    int live = i1 < hd.seqlen_q ? i1 : hd.seqlen_q, pad0 = i0 > hd.seqlen_q ? i0 : hd.seqlen_q;
    i1 = i1 < hd.stored_q ? i1 : hd.stored_q; /* THD stores no padding rows */
    if (i0 < live)
        rows_block(job, &hd, i0, live, job->bufs[worker]);
    ref_zero_o_rows(&hd, job->e_o, pad0, i1); /* padding rows */
    if (job->d_o)
        ref_zero_q_rows(&hd, job->e_dq, pad0, i1);
}

/* ---- pass 2: E_dK, E_dV per tile of keys -------------------------------------- */

static void keys_pair(const scale_job *job, const ref_head *hd, int i0, int i1, int j0, int j1, double **buf)
{
    scale_pair pr = {hd, i0, i1, j0, j1, buf};
    int rows = i1 - i0, cols = j1 - j0, d = hd->d, ld_kv = (int)hd->ld_kv;
    size_t kv_at = hd->kv_base + (size_t)j0 * hd->ld_kv;
    pair_terms(job, &pr);
    pair_weights_o(job, &pr);
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hd->d_v, rows, 1.0, buf[B_WEIGHT_V], cols, buf[B_ABS_DO],
                hd->d_v, 1.0, job->e_dv + hd->v_base + (size_t)j0 * hd->ld_v, (int)hd->ld_v);
    pair_weights_grad(job, &pr, false, false);
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, d, rows, fabs(hd->p->scale), buf[B_WEIGHT_G], cols,
                buf[B_ABS_Q], d, 1.0, job->e_dk + kv_at, ld_kv);
}

static int key_tiles(const ac_problem *p) { return (p->seqlen_k + SCALE_KEY_TILE - 1) / SCALE_KEY_TILE; }

static void keys_task(void *arg, size_t task, int worker)
{
    const scale_job *job = arg;
    const ac_problem *p = job->p;
    int tiles = key_tiles(p), group = p->heads_q / p->heads_kv, rows = ref_block_rows(p);
    int b = (int)(task / ((size_t)p->heads_kv * tiles)), h_kv = (int)(task / tiles % p->heads_kv);
    int j0 = (int)(task % tiles) * SCALE_KEY_TILE;
    int j_end = j0 + SCALE_KEY_TILE < p->seqlen_k ? j0 + SCALE_KEY_TILE : p->seqlen_k;
    ref_head hd;
    ref_head_init(&hd, p, b, h_kv * group);
    j_end = j_end < hd.stored_k ? j_end : hd.stored_k; /* THD: keys past nk_b are another sequence's */
    if (j_end <= j0)
        return;
    double *e_dk = job->e_dk + hd.kv_base + (size_t)j0 * hd.ld_kv, *e_dv = job->e_dv + hd.v_base + (size_t)j0 * hd.ld_v;
    for (int j = 0; j < j_end - j0; j++) { /* the sums start at 0; padding keys stay 0 */
        memset(e_dk + (size_t)j * hd.ld_kv, 0, (size_t)hd.d * sizeof(double));
        memset(e_dv + (size_t)j * hd.ld_v, 0, (size_t)hd.d_v * sizeof(double));
    }
    int j1 = j_end < hd.seqlen_k ? j_end : hd.seqlen_k;
    for (int h = h_kv * group; j0 < j1 && h < (h_kv + 1) * group; h++) {
        ref_head_init(&hd, p, b, h);
        for (int i0 = 0; i0 < hd.seqlen_q; i0 += rows) {
            int i1 = i0 + rows < hd.seqlen_q ? i0 + rows : hd.seqlen_q, jlo, jhi;
            ref_block_keys(&hd, i0, i1, &jlo, &jhi);
            if (jlo < j1 && jhi > j0 && jlo < jhi)
                keys_pair(job, &hd, i0, i1, j0, j1, job->bufs[worker]);
        }
    }
    add_rounding_floor(e_dk, hd.ld_kv, j_end - j0, hd.d, job->tau);
    add_rounding_floor(e_dv, hd.ld_v, j_end - j0, hd.d_v, job->tau);
}

/* ---- pass 3: E_dBias per (mb, mh, block of rows) of the bias ---------------------
 * dBias = dS' summed over the (b, h) the bias broadcasts over, dS' = P (dP - D):
 * each term errs as E_dQ's dS does before the softcap's t' (the bias is added
 * after it), P ((1 + r + rho d_v)(dPhat + Dhat) + R + sum_c |dO_ic| E_O_ic) + tau + rho tau_f32 (dPhat + Dhat)
 * in units of u_t (the sum: D_i computed from the kernel's O, which errs by u E_O; E_dQ
 * leaves it to its keys' average, one dS' cannot), the rows' g_i
 * and R_i from pass 1; their sum is carried in the bias dtype's units (u_t / u_b)
 * with that dtype's own rounding floor tau_b.  A task writes only its entries,
 * summing its (b, h) in order, like the fp64 dBias. */
static int bias_dim(int n) { return n > 1 ? n : 1; }

static void dbias_pair(const scale_job *job, const ref_head *hd, int i0, int i1, double *e_rows, double **buf)
{
    scale_pair pr = {hd, i0, i1, 0, 0, buf};
    ref_block_keys(hd, i0, i1, &pr.jlo, &pr.jhi);
    if (pr.jhi <= pr.jlo)
        return;
    int cols = pr.jhi - pr.jlo;
    pair_terms(job, &pr);
    pair_weights_o(job, &pr);
    pair_weights_grad(job, &pr, false, true);
    for (int i = i0; i < i1; i++) {
        /* D_i from the kernel's O, which errs by u E_O: P_ij sum_c |dO_ic| E_O_ic more */
        const double *d_o = job->d_o + hd->o_base + (size_t)i * hd->ld_o,
                     *e_o = job->e_o + hd->o_base + (size_t)i * hd->ld_o;
        double d_err = 0.0;
        for (int c = 0; c < hd->d_v; c++)
            d_err += fabs(d_o[c]) * e_o[c];
        const double *w = buf[B_WEIGHT_G] + (size_t)(i - i0) * cols, *prob = buf[B_PROB] + (size_t)(i - i0) * cols;
        const double *vis = buf[B_WEIGHT_O] + (size_t)(i - i0) * cols;
        for (int j = pr.jlo; j < pr.jhi; j++)
            if (vis[j - pr.jlo] != 0.0)
                e_rows[(size_t)(i - i0) * job->p->seqlen_k + j] +=
                    job->dbias_factor * (w[j - pr.jlo] + prob[j - pr.jlo] * d_err);
    }
}

static void dbias_task(void *arg, size_t task, int worker)
{
    const scale_job *job = arg;
    const ac_problem *p = job->p;
    int rows = ref_block_rows(p), n_blocks = ref_block_count(p), heads = bias_dim(p->bias_heads);
    int mb = (int)(task / ((size_t)heads * n_blocks)), mh = (int)(task / n_blocks % heads);
    int i0 = (int)(task % n_blocks) * rows, i_end = i0 + rows < p->seqlen_q ? i0 + rows : p->seqlen_q;
    double *e = job->e_dbias + ac_bias_index(p, mb, mh, i0, 0);
    memset(e, 0, (size_t)(i_end - i0) * p->seqlen_k * sizeof(double));
    for (int b = p->bias_batch > 1 ? mb : 0; b < (p->bias_batch > 1 ? mb + 1 : p->batch); b++)
        for (int h = p->bias_heads > 1 ? mh : 0; h < (p->bias_heads > 1 ? mh + 1 : p->heads_q); h++) {
            ref_head hd;
            ref_head_init(&hd, p, b, h);
            int i1 = i_end < hd.seqlen_q ? i_end : hd.seqlen_q;
            if (i0 < i1)
                dbias_pair(job, &hd, i0, i1, e, job->bufs[worker]);
        }
    add_rounding_floor(e, (size_t)p->seqlen_k, i_end - i0, p->seqlen_k, job->dbias_tau);
}

/* ---- entry point -------------------------------------------------------------- */

static void pack_abs_kv(void *arg, size_t task, int worker)
{
    (void)worker;
    const scale_job *job = arg;
    const ac_problem *p = job->p;
    ref_head hd;
    ref_head_init(&hd, p, (int)(task / p->heads_kv), (int)(task % p->heads_kv) * (p->heads_q / p->heads_kv));
    /* the keys the tensors store (THD: nk_b; rows past it are never read) */
    abs_rows(job->k + hd.kv_base, hd.ld_kv, hd.stored_k, p->head_dim, (double *)head_abs(job, job->abs_k, &hd, 0));
    abs_rows(job->v + hd.v_base, hd.ld_v, hd.stored_k, hd.d_v, (double *)head_abs(job, job->abs_v, &hd, 0));
}

static void free_job(scale_job *job, int workers)
{
    for (int w = 0; job->bufs && w < workers; w++) {
        for (int b = 0; job->bufs[w] && b < B_COUNT; b++)
            free(job->bufs[w][b]);
        free(job->bufs[w]);
    }
    free(job->bufs);
    free(job->abs_k);
    free(job->abs_v);
    free(job->g_row);
    free(job->r_row);
}

static bool alloc_job(scale_job *job, int workers)
{
    const ac_problem *p = job->p;
    size_t keys = (size_t)(p->seqlen_k > SCALE_KEY_TILE ? p->seqlen_k : SCALE_KEY_TILE);
    int widest = ac_head_dim_v(p) > p->head_dim ? ac_head_dim_v(p) : p->head_dim; /* |Q| d, |dO| and |O| d_v */
    size_t blk = (size_t)ref_block_rows(p) * keys, rows = (size_t)ref_block_rows(p) * widest;
    /* |K|, |V| packed per (b, h_kv) with the padded length (THD's packed tensors are smaller) */
    size_t kv_rows = (size_t)p->batch * p->heads_kv * p->seqlen_k;
    size_t nl = (size_t)p->batch * p->heads_q * p->seqlen_q + 1; /* row_id: padded (THD has fewer LSE rows) */
    job->abs_k = malloc((kv_rows * p->head_dim + 1) * sizeof(double));
    job->abs_v = malloc((kv_rows * ac_head_dim_v(p) + 1) * sizeof(double));
    job->g_row = malloc(nl * sizeof(double));
    job->r_row = malloc(nl * sizeof(double));
    job->bufs = calloc((size_t)workers, sizeof(double **));
    bool ok = job->abs_k && job->abs_v && job->g_row && job->r_row && job->bufs;
    for (int w = 0; ok && w < workers; w++) {
        ok = (job->bufs[w] = calloc(B_COUNT, sizeof(double *))) != NULL;
        for (int b = 0; ok && b < B_COUNT; b++) {
            bool unused = !job->mods && (b == B_SLOPE || b == B_SIGMA || b == B_KAPPA);
            ok = (job->bufs[w][b] = malloc((unused ? 1 : b < B_ABS_Q ? blk : rows) * sizeof(double))) != NULL;
        }
    }
    return ok;
}

int ref_error_scales(const ac_problem *p, ac_dtype t, const double *q, const double *k, const double *v,
                     const double *o, const double *lse, const double *d_o, double *e_o, double *e_dq, double *e_dk,
                     double *e_dv, ac_err *err)
{
    return ref_error_scales_dbias(p, t, q, k, v, o, lse, d_o, e_o, e_dq, e_dk, e_dv, NULL, err);
}

int ref_error_scales_dbias(const ac_problem *p, ac_dtype t, const double *q, const double *k, const double *v,
                           const double *o, const double *lse, const double *d_o, double *e_o, double *e_dq,
                           double *e_dk, double *e_dv, double *e_dbias, ac_err *err)
{
    int status = ac_problem_validate(p, 0, err), workers = 1;
    if (status != AC_OK)
        return status;
    if ((status = ref_dropout_check(p, "ref_error_scales", err)) != AC_OK)
        return status;
    if ((unsigned)t >= AC_DTYPE_COUNT)
        return ac_fail(err, AC_ERR_INPUT, "ref_error_scales: unknown dtype %d", (int)t);
    if (!q || !k || !v || !o || !lse || !e_o)
        return ac_fail(err, AC_ERR_INPUT, "ref_error_scales: NULL tensor (q, k, v, o, lse and e_o are required)");
    /* d_o decides: NULL skips the backward scales (e_dq, e_dk, e_dv are then
     * ignored); given, all three outputs are needed. */
    bool grads = d_o != NULL;
    if (grads && !(e_dq && e_dk && e_dv))
        return ac_fail(err, AC_ERR_INPUT,
                       "ref_error_scales: d_o given but e_dq, e_dk or e_dv is NULL "
                       "(pass d_o = NULL to skip the backward scales)");
    if ((status = ref_thread_count(&workers, err)) != AC_OK)
        return status;
    size_t keys = (size_t)(p->seqlen_k > SCALE_KEY_TILE ? p->seqlen_k : SCALE_KEY_TILE);
    size_t block_bufs = ac_problem_has_score_mods(p) ? B_ABS_Q : B_SLOPE;
    workers =
        ref_workers_within(workers, (block_bufs * keys + 3 * (size_t)p->head_dim) * ref_block_rows(p) * sizeof(double));
    bool fp8 = ac_problem_is_fp8(p);
    if (fp8 &&
        (grads || !ac_dtype_is_fp8(t) || p->fp8_p == AC_F32 || (unsigned)p->fp8_p >= AC_DTYPE_COUNT ||
         (unsigned)p->fp8_out >= AC_DTYPE_COUNT || p->fp8_acc_bits < 0 || p->fp8_acc_bits > AC_FP8_ACC_MAX_BITS))
        return ac_fail(err, AC_ERR_INPUT,
                       "ref_error_scales: an fp8 problem needs fp8 inputs, its out and p "
                       "formats, a products' accumulator of 0 (f32) to 22 bits, and no backward (forward only)");
    if (fp8)
        t = p->fp8_out; /* E is in units of the output's u */
    scale_job job = {p,
                     q,
                     k,
                     v,
                     o,
                     lse,
                     d_o,
                     e_o,
                     grads ? e_dq : NULL,
                     grads ? e_dk : NULL,
                     grads ? e_dv : NULL,
                     ac_min_subnormal(t) / (2.0 * ac_unit_roundoff(t)),
                     ac_unit_roundoff(AC_F32) / ac_unit_roundoff(t),
                     NULL,
                     NULL,
                     NULL,
                     NULL,
                     NULL,
                     ac_problem_has_score_mods(p),
                     grads && p->bias ? e_dbias : NULL,
                     p->bias ? ac_unit_roundoff(t) / ac_unit_roundoff(p->bias_dtype) : 0.0,
                     p->bias ? ac_min_subnormal(p->bias_dtype) / (2.0 * ac_unit_roundoff(p->bias_dtype)) : 0.0,
                     ac_min_subnormal(AC_F32) / (2.0 * ac_unit_roundoff(t)),
                     fp8,
                     0.0,
                     0.0};
    if (fp8) {
        double sigma = ac_dtype_is_fp8(p->fp8_p) ? AC_FP8_P_SIGMA_MIN : 1.0;
        /* At least 1: O's own rounding to the output dtype (u |O| <= u sum P |V|), which a P kept
         * finer than the output (p=f16, out=bf16: u_p / u = 1/8) does not cover. */
        job.p_rel = fmax(1.0, ac_unit_roundoff(p->fp8_p) / ac_unit_roundoff(t));
        job.p_tau = ac_min_subnormal(p->fp8_p) / (2.0 * sigma * ac_unit_roundoff(t));
    }
    if (alloc_job(&job, workers)) {
        ref_parallel_for(workers, (size_t)p->batch * p->heads_kv, pack_abs_kv, &job);
        ref_parallel_for(workers, (size_t)p->batch * p->heads_q * ref_block_count(p), rows_task, &job);
        if (grads) /* pass 2 reads g_i and R_i, which pass 1 writes */
            ref_parallel_for(workers, (size_t)p->batch * p->heads_kv * key_tiles(p), keys_task, &job);
        if (job.e_dbias) /* so does pass 3 */
            ref_parallel_for(workers, (size_t)bias_dim(p->bias_batch) * bias_dim(p->bias_heads) * ref_block_count(p),
                             dbias_task, &job);
    } else {
        status = ac_fail(err, AC_ERR_ENV, "ref_error_scales: out of memory for %d workers' %d x %d blocks", workers,
                         ref_block_rows(p), p->seqlen_k);
    }
    free_job(&job, workers);
    return status;
}
