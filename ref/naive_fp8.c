/* ref/naive_fp8.c — the naive baseline of an fp8 problem (issue 17): what a
 * framework does with dequantised inputs, in the recipe the kernel declares.
 *   S = scale Q K^T accumulated in f32 from the exact inputs (code * descale,
 *   each rounded to f32), or in the accumulator the kernel declares
 *   (fp8_acc_bits: Hopper's fp8 tensor cores' e8m13), not rounded further;
 *   softmax in f32: m, P~ = exp(S - m), l = sum P~;
 *   P rounded to the declared format: fp8 as AC_FP8_P_SIGMA P~ (the row max onto
 *   448, ac_fp8_p_round), bf16/f16 as P~ itself;
 *   O = (sum_j P_j V_j in f32) / (sigma l), rounded to the output dtype; LSE = m + log l.
 * Rows in parallel over (b, h); each row's arithmetic is fixed, so the result
 * does not depend on the thread count. */
#include <math.h>
#include <stdlib.h>

#include "parallel.h"
#include "ref.h"

typedef struct {
    const ac_problem *p;
    const double *q, *k, *v;
    double *o, *lse;
    float **rows; /* per worker: Nk scores/probabilities */
} fp8_job;

/* Q_i . K_j in the declared accumulator: f32, or (fp8_acc_bits b) the tensor
 * cores' steps of AC_FP8_ACC_STEP products (ref.h, ac_fp8_acc_step) over the
 * f32-rounded inputs. */
static float qk_dot(const ac_problem *p, const double *q, const double *k)
{
    if (p->fp8_acc_bits <= 0) {
        float acc = 0.0f;
        for (int c = 0; c < p->head_dim; c++)
            acc += (float)q[c] * (float)k[c];
        return acc;
    }
    double acc = 0.0, prod[AC_FP8_ACC_STEP];
    for (int c0 = 0; c0 < p->head_dim; c0 += AC_FP8_ACC_STEP) {
        int n = p->head_dim - c0 < AC_FP8_ACC_STEP ? p->head_dim - c0 : AC_FP8_ACC_STEP;
        for (int c = 0; c < n; c++)
            prod[c] = (double)(float)q[c0 + c] * (double)(float)k[c0 + c];
        acc = ac_fp8_acc_step(acc, prod, n, p->fp8_acc_bits);
    }
    return (float)acc;
}

/* sum_j P_j V_jc (V's column at v, keys ld apart) in the declared
 * accumulator: f32, or the tensor cores' steps of AC_FP8_ACC_STEP keys. */
static float pv_dot(const ac_problem *p, const float *pr, const double *v, size_t ld, int nk)
{
    if (p->fp8_acc_bits <= 0) {
        float acc = 0.0f;
        for (int j = 0; j < nk; j++)
            acc += pr[j] * (float)v[(size_t)j * ld];
        return acc;
    }
    double acc = 0.0, prod[AC_FP8_ACC_STEP];
    for (int j0 = 0; j0 < nk; j0 += AC_FP8_ACC_STEP) {
        int n = nk - j0 < AC_FP8_ACC_STEP ? nk - j0 : AC_FP8_ACC_STEP;
        for (int j = 0; j < n; j++)
            prod[j] = (double)pr[j0 + j] * (double)(float)v[(size_t)(j0 + j) * ld];
        acc = ac_fp8_acc_step(acc, prod, n, p->fp8_acc_bits);
    }
    return (float)acc;
}

static void naive_row(const fp8_job *job, int b, int h, int i, float *pr)
{
    const ac_problem *p = job->p;
    int nk = ac_seqlen_k_of(p, b), h_kv = ac_kv_head_of(p, h), dv = ac_head_dim_v(p);
    float m = -INFINITY, l = 0.0f, scale = (float)p->scale;
    bool p_fp8 = ac_dtype_is_fp8(p->fp8_p);
    float sigma = p_fp8 ? (float)AC_FP8_P_SIGMA : 1.0f;
    for (int j = 0; j < nk; j++) {
        pr[j] = -INFINITY;
        if (!ac_visible(p, b, h, i, j))
            continue;
        pr[j] = qk_dot(p, job->q + ac_q_index(p, b, h, i, 0), job->k + ac_kv_index(p, b, h_kv, j, 0)) * scale;
        m = pr[j] > m ? pr[j] : m;
    }
    size_t at_lse = ac_lse_index(p, b, h, i);
    if (m == -INFINITY) {
        for (int c = 0; c < dv; c++)
            job->o[ac_o_index(p, b, h, i, c)] = 0.0;
        job->lse[at_lse] = -INFINITY;
        return;
    }
    for (int j = 0; j < nk; j++) {
        float pt = pr[j] == -INFINITY ? 0.0f : expf(pr[j] - m);
        l += pt;
        pr[j] = p_fp8 ? ac_fp8_p_round(p->fp8_p, sigma * pt) : (float)ac_round(p->fp8_p, pt);
    }
    for (int c = 0; c < dv; c++) {
        float acc = pv_dot(p, pr, job->v + ac_v_index(p, b, h_kv, 0, c),
                           ac_v_index(p, b, h_kv, 1, c) - ac_v_index(p, b, h_kv, 0, c), nk);
        job->o[ac_o_index(p, b, h, i, c)] = ac_round(p->fp8_out, acc / (sigma * l));
    }
    job->lse[at_lse] = m + logf(l);
}

static void head_task(void *ctx, size_t task, int worker)
{
    const fp8_job *job = ctx;
    const ac_problem *p = job->p;
    int b = (int)(task / (size_t)p->heads_q), h = (int)(task % (size_t)p->heads_q);
    for (int i = 0; i < ac_stored_rows(p, b, true); i++) {
        if (i < ac_seqlen_q_of(p, b)) {
            naive_row(job, b, h, i, job->rows[worker]);
            continue;
        }
        for (int c = 0; c < ac_head_dim_v(p); c++) /* padding rows: as the other tiers leave them */
            job->o[ac_o_index(p, b, h, i, c)] = 0.0;
        job->lse[ac_lse_index(p, b, h, i)] = -INFINITY;
    }
}

int ref_naive_forward_fp8(const ac_problem *p, const double *q, const double *k, const double *v, double *o,
                          double *lse, ac_err *err)
{
    int workers = 1, st = ac_problem_validate(p, 0, err);
    if (st == AC_OK)
        st = ref_thread_count(&workers, err);
    if (st != AC_OK)
        return st;
    if (!q || !k || !v || !o || !lse)
        return ac_fail(err, AC_ERR_INPUT, "ref_naive_forward_fp8: NULL tensor");
    if (!ac_problem_is_fp8(p) || p->fp8_p == AC_F32 || (unsigned)p->fp8_p >= AC_DTYPE_COUNT)
        return ac_fail(err, AC_ERR_INPUT, "ref_naive_forward_fp8: not an fp8 problem with a P format");
    if (p->fp8_acc_bits < 0 || p->fp8_acc_bits > AC_FP8_ACC_MAX_BITS)
        return ac_fail(err, AC_ERR_INPUT, "ref_naive_forward_fp8: fp8_acc_bits %d is not 0 (f32) to 22",
                       p->fp8_acc_bits);
    fp8_job job = {p, q, k, v, o, lse, calloc((size_t)workers, sizeof(float *))};
    bool ok = job.rows != NULL;
    for (int w = 0; ok && w < workers; w++)
        ok = (job.rows[w] = malloc(((size_t)p->seqlen_k + 1) * sizeof(float))) != NULL;
    if (ok)
        ref_parallel_for(workers, (size_t)p->batch * p->heads_q, head_task, &job);
    for (int w = 0; job.rows && w < workers; w++)
        free(job.rows[w]);
    free(job.rows);
    return ok ? AC_OK : ac_fail(err, AC_ERR_ENV, "ref_naive_forward_fp8: out of memory");
}
