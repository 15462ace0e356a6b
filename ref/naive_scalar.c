/* ref/naive_scalar.c — the same-dtype naive baseline in plain scalar loops,
 * one element at a time: the first implementation, kept as the test oracle of
 * the blocked one (naive.c), compiled into the tests only.
 *
 * Forward, per row i:  S_ij = round_t(fl32(fl32(sum_c Q_ic K_jc) * scale)),
 * the sum accumulated in float in order over c;  m = max_j S_ij,
 * e_j = expf(S_ij - m), l = sum_j e_j (float, in order over j),
 * P_ij = round_t(e_j / l);  O_ic = round_t(sum_j P_ij V_jc) (float
 * accumulation);  LSE = m + logf(l) in float.
 * Backward (P recomputed exactly as the forward made it, i.e. the P a
 * framework would have saved; D from the given, naive O):
 *   D_i = sum_c dO_ic O_ic (float);  dP_ij = round_t(sum_c dO_ic V_jc);
 *   dS_ij = round_t(P_ij (dP_ij - D_i));  dQ = round_t(scale * sum_j dS_ij K_jc);
 *   dK = round_t(scale * sum_i dS_ij Q_ic);  dV = round_t(sum_i P_ij dO_ic),
 * the sums in float in order (over j; over the group's heads, then i), dK and
 * dV summed over the query heads of a GQA group.  For t = f32 rounding to t
 * is the identity.  Masked pairs are skipped; a row with no visible key gives
 * O = 0, LSE = -inf. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "naive_mods.h"
#include "naive_scalar.h"
#include "ref.h"
#include "variants_internal.h"

static float round_t(ac_dtype t, float x) { return (float)ac_round(t, (double)x); }

/* Row i of head h as the forward makes it: p_row[j] = P_ij (0 where masked).
 * Returns false when no key is visible; *lse_nat gets m + logf(l). */
static bool naive_probs_row(const ac_problem *p, ac_dtype t, const double *q, const double *k, int b, int h, int i,
                            float *p_row, float *slope_row, float *lse_nat)
{
    int nk = ac_seqlen_k_of(p, b), h_kv = ac_kv_head_of(p, h), d = p->head_dim;
    float scale = (float)p->scale, sink = naive_sink(p, h), m = sink;
    bool any = false;
    for (int j = 0; j < nk; j++) {
        p_row[j] = NAN; /* hidden: P = 0 exactly, whatever l is */
        if (!ac_visible(p, b, h, i, j))
            continue;
        float acc = 0.0f;
        for (int c = 0; c < d; c++)
            acc += (float)q[ac_q_index(p, b, h, i, c)] * (float)k[ac_kv_index(p, b, h_kv, j, c)];
        p_row[j] = round_t(t, acc * scale);
        if (ac_problem_has_score_mods(p)) /* the variants' S' (naive_mods.h) */
            p_row[j] = naive_score_mod(p, t, b, h, i, j, p_row[j], slope_row ? &slope_row[j] : NULL);
        m = p_row[j] > m ? p_row[j] : m;
        any = true;
    }
    if (!any) { /* no visible key: LSE = -inf, or the sink's (m = s_h, l = 1) */
        memset(p_row, 0, (size_t)nk * sizeof *p_row);
        *lse_nat = sink;
        return false;
    }
    float l = 0.0f;
    for (int j = 0; j < nk; j++) {
        p_row[j] = isnan(p_row[j]) ? -0.0f : p_row[j] == -INFINITY ? 0.0f : expf(p_row[j] - m);
        l += p_row[j];
    }
    l += naive_sink_term(sink, m);
    for (int j = 0; j < nk; j++)
        p_row[j] = p_row[j] == 0.0f && signbit(p_row[j]) ? 0.0f : round_t(t, p_row[j] / l);
    *lse_nat = m + logf(l);
    return true;
}

/* Row i of a Q-like (kind Q: dQ) or O-like (kind O: O) output set to 0. */
static void zero_row(const ac_problem *p, ac_tensor_kind kind, double *x, int b, int h, int i)
{
    for (int c = 0; c < ac_tensor_dim(p, kind); c++)
        x[ac_tensor_index(p, kind, b, h, i, c)] = 0.0;
}

static int check_args(const ac_problem *p, ac_dtype t, const void *const *tensors, int n, const char *who, ac_err *err)
{
    int status = ac_problem_validate(p, 0, err);
    if (status == AC_OK)
        status = ref_dropout_check(p, who, err);
    if (status != AC_OK)
        return status;
    if ((unsigned)t >= AC_DTYPE_COUNT)
        return ac_fail(err, AC_ERR_INPUT, "%s: unknown dtype %d", who, (int)t);
    for (int a = 0; a < n; a++)
        if (!tensors[a])
            return ac_fail(err, AC_ERR_INPUT, "%s: NULL tensor (argument %d of the tensors)", who, a + 1);
    return AC_OK;
}

int ref_naive_forward_scalar(const ac_problem *p, ac_dtype t, const double *q, const double *k, const double *v,
                             double *o, double *lse, ac_err *err)
{
    const void *tensors[] = {q, k, v, o, lse};
    int status = check_args(p, t, tensors, 5, "ref_naive_forward_scalar", err);
    if (status != AC_OK)
        return status;
    float *p_row = malloc((size_t)p->seqlen_k * sizeof *p_row);
    if (!p_row)
        return ac_fail(err, AC_ERR_ENV, "ref_naive_forward_scalar: out of memory");
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < p->heads_q; h++)
            for (int i = 0; i < ac_stored_rows(p, b, true); i++) { /* THD stores no padding rows */
                float lse_nat = -INFINITY;
                size_t at = ac_lse_index(p, b, h, i);
                if (i >= ac_seqlen_q_of(p, b) || !naive_probs_row(p, t, q, k, b, h, i, p_row, NULL, &lse_nat)) {
                    zero_row(p, AC_TENSOR_O, o, b, h, i);
                    lse[at] = lse_nat; /* -inf (padding, nothing visible), or the sink */
                    continue;
                }
                lse[at] = lse_nat;
                int nk = ac_seqlen_k_of(p, b), h_kv = ac_kv_head_of(p, h);
                for (int j = 0; j < nk; j++) /* after the softmax: O takes P dropped */
                    p_row[j] = naive_drop(p, t, b, h, i, j, p_row[j]);
                for (int c = 0; c < ac_head_dim_v(p); c++) {
                    float acc = 0.0f;
                    for (int j = 0; j < nk; j++)
                        acc += p_row[j] * (float)v[ac_v_index(p, b, h_kv, j, c)];
                    o[ac_o_index(p, b, h, i, c)] = round_t(t, acc);
                }
            }
    free(p_row);
    return AC_OK;
}

/* ---- backward ---------------------------------------------------------------- */

typedef struct {
    const double *q, *k, *v, *o, *d_o;
    double *dq;
    float *p_row, *ds_row, *slope_row;
    float *dk_acc, *dv_acc; /* (Nk, d) of the current K/V head, float sums */
} naive_bwd;

/* ds_row <- dS_i (0 where masked); P_i in p_row. */
static void naive_grad_scores(const ac_problem *p, ac_dtype t, const naive_bwd *w, int b, int h, int i)
{
    int nk = ac_seqlen_k_of(p, b), h_kv = ac_kv_head_of(p, h), d = ac_head_dim_v(p); /* dO, O, V: d_v */
    float delta = 0.0f;
    for (int c = 0; c < d; c++)
        delta += (float)w->d_o[ac_o_index(p, b, h, i, c)] * (float)w->o[ac_o_index(p, b, h, i, c)];
    for (int j = 0; j < nk; j++) {
        w->ds_row[j] = 0.0f;
        if (!ac_visible(p, b, h, i, j))
            continue;
        float dp = 0.0f;
        for (int c = 0; c < d; c++)
            dp += (float)w->d_o[ac_o_index(p, b, h, i, c)] * (float)w->v[ac_v_index(p, b, h_kv, j, c)];
        w->ds_row[j] = round_t(t, w->p_row[j] * (naive_drop(p, t, b, h, i, j, round_t(t, dp)) - delta));
        if (ac_problem_has_score_mods(p))
            w->ds_row[j] = round_t(t, w->ds_row[j] * w->slope_row[j]);
    }
}

static void naive_bwd_row(const ac_problem *p, ac_dtype t, const naive_bwd *w, int b, int h, int i)
{
    int nk = ac_seqlen_k_of(p, b), h_kv = ac_kv_head_of(p, h), d = p->head_dim;
    float scale = (float)p->scale, lse_unused;
    if (!naive_probs_row(p, t, w->q, w->k, b, h, i, w->p_row, w->slope_row, &lse_unused)) {
        zero_row(p, AC_TENSOR_Q, w->dq, b, h, i);
        return;
    }
    naive_grad_scores(p, t, w, b, h, i);
    for (int c = 0; c < d; c++) {
        float acc = 0.0f;
        for (int j = 0; j < nk; j++)
            acc += w->ds_row[j] * (float)w->k[ac_kv_index(p, b, h_kv, j, c)];
        w->dq[ac_q_index(p, b, h, i, c)] = round_t(t, scale * acc);
    }
    int d_v = ac_head_dim_v(p);
    for (int j = 0; j < nk; j++) {
        for (int c = 0; c < d; c++)
            w->dk_acc[(size_t)j * d + c] += w->ds_row[j] * (float)w->q[ac_q_index(p, b, h, i, c)];
        float p_drop = naive_drop(p, t, b, h, i, j, w->p_row[j]); /* dV = P'^T dO */
        for (int c = 0; c < d_v; c++)
            w->dv_acc[(size_t)j * d_v + c] += p_drop * (float)w->d_o[ac_o_index(p, b, h, i, c)];
    }
}

/* One K/V head: every query row of its GQA group, then dK, dV rounded. */
static void naive_bwd_kv_head(const ac_problem *p, ac_dtype t, naive_bwd *w, double *dk, double *dv, int b, int h_kv)
{
    int d = p->head_dim, d_v = ac_head_dim_v(p), group = p->heads_q / p->heads_kv;
    memset(w->dk_acc, 0, (size_t)p->seqlen_k * d * sizeof *w->dk_acc);
    memset(w->dv_acc, 0, (size_t)p->seqlen_k * d_v * sizeof *w->dv_acc);
    for (int h = h_kv * group; h < (h_kv + 1) * group; h++)
        for (int i = 0; i < ac_stored_rows(p, b, true); i++) {
            if (i < ac_seqlen_q_of(p, b))
                naive_bwd_row(p, t, w, b, h, i);
            else
                zero_row(p, AC_TENSOR_Q, w->dq, b, h, i);
        }
    float scale = (float)p->scale;
    for (int j = 0; j < ac_stored_rows(p, b, false); j++) {
        for (int c = 0; c < d; c++)
            dk[ac_kv_index(p, b, h_kv, j, c)] = round_t(t, scale * w->dk_acc[(size_t)j * d + c]);
        for (int c = 0; c < d_v; c++)
            dv[ac_v_index(p, b, h_kv, j, c)] = round_t(t, w->dv_acc[(size_t)j * d_v + c]);
    }
}

int ref_naive_backward_scalar(const ac_problem *p, ac_dtype t, const double *q, const double *k, const double *v,
                              const double *o, const double *lse, const double *d_o, double *dq, double *dk, double *dv,
                              ac_err *err)
{
    /* lse is part of the interface for symmetry with the fp64 backward; the
     * naive backward reuses P exactly as its forward rounded it instead. */
    const void *tensors[] = {q, k, v, o, lse, d_o, dq, dk, dv};
    int status = check_args(p, t, tensors, 9, "ref_naive_backward_scalar", err);
    if (status != AC_OK)
        return status;
    size_t kv_head = (size_t)p->seqlen_k * p->head_dim, v_head = (size_t)p->seqlen_k * ac_head_dim_v(p);
    naive_bwd w = {q,
                   k,
                   v,
                   o,
                   d_o,
                   dq,
                   malloc((size_t)p->seqlen_k * sizeof(float)),
                   malloc((size_t)p->seqlen_k * sizeof(float)),
                   malloc((size_t)p->seqlen_k * sizeof(float)),
                   malloc(kv_head * sizeof(float)),
                   malloc(v_head * sizeof(float))};
    if (w.p_row && w.ds_row && w.slope_row && w.dk_acc && w.dv_acc)
        for (int b = 0; b < p->batch; b++)
            for (int h_kv = 0; h_kv < p->heads_kv; h_kv++)
                naive_bwd_kv_head(p, t, &w, dk, dv, b, h_kv);
    else
        status = ac_fail(err, AC_ERR_ENV, "ref_naive_backward_scalar: out of memory");
    free(w.p_row);
    free(w.ds_row);
    free(w.slope_row);
    free(w.dk_acc);
    free(w.dv_acc);
    return status;
}
