/* ref/lse_scale.c — LSE's error scale (ref.h: ref_lse_error_scale), apart
 * from the other outputs' (scales.c): LSE's error is f32's whatever the
 * dtype, and it needs only Q, K and the reference LSE. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>

#include "fp64_block.h"
#include "parallel.h"
#include "ref.h"
#include "variants_internal.h"

static void abs_rows(const double *src, size_t ld, int rows, int d, double *dst)
{
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < d; c++)
            dst[(size_t)r * d + c] = fabs(src[(size_t)r * ld + c]);
}

/* ---- the LSE error scale -----------------------------------------------------
 * LSE's error is not a dtype rounding: whatever the input dtype, a fused
 * kernel computes S = scale * Q K^T in f32 from dtype inputs and
 * LSE = m + log(l) in f32, so
 *   E_lse_i = 1 + |LSE_i| + (d + 2) G_i,  G_i = |scale| max_{j visible} sum_c |Q_ic||K_jc|
 * with LSE's scaled error |y - x| / (u_f32 * E_lse):
 *   - each S_ij is an f32 dot product of d exact products: it errs by up to
 *     d u_f32 |scale| sum_c |Q_ic||K_jc| (Higham's gamma_d; reached when the
 *     products are alike, as "increasing" scores make them), and LSE is
 *     1-Lipschitz in the max norm of S: the d G_i (an fp8 kernel's declared
 *     accumulator: max_j of ref_fp8_qk_errors in place of d G_i);
 *   - the online softmax rescales l by exp(m_old - m_new), an exp of an f32
 *     argument of size |m_old - m_new|; the changes of m sum to at most 2 G_i:
 *     the 2 G_i;
 *   - l >= 1 (the maximum's own term), so log(l) errs by about u_f32 absolutely
 *     (times the accumulation factor over the Nk terms of l): the 1;
 *   - the final m + log(l) rounds relative to |LSE|: the |LSE_i|.
 * The accumulation factor over Nk is what the budgets' growth law allows for.  Rows
 * with no visible key (LSE exactly -inf) and padding rows get E = 0.
 *
 * Computed per (b, h, block of LSE_BLOCK_ROWS rows) in parallel: G of the
 * block's visible key range as one dgemm of |Q| and |K| (|K| packed once per
 * (b, h_kv)), then the row maxima over the visible keys. */

#define LSE_BLOCK_ROWS 64

typedef struct {
    const ac_problem *p;
    const double *q, *k, *lse;
    double *e_lse, *abs_k; /* abs_k: (B, Hkv, Nk, d) */
    double **abs_q, **g; /* per worker: (LSE_BLOCK_ROWS, d), (LSE_BLOCK_ROWS, Nk) */
    int row_blocks;
    double **s, **slope, **sigma; /* per worker, with score modifiers: (LSE_BLOCK_ROWS, Nk) each */
} lse_job;

static void lse_pack_abs_k(void *arg, size_t task, int worker)
{
    (void)worker;
    const lse_job *job = arg;
    const ac_problem *p = job->p;
    int b = (int)(task / p->heads_kv), h_kv = (int)(task % p->heads_kv);
    ref_head hd;
    ref_head_init(&hd, p, b, h_kv * (p->heads_q / p->heads_kv));
    abs_rows(job->k + hd.kv_base, hd.ld_kv, hd.stored_k, p->head_dim,
             job->abs_k + task * (size_t)p->seqlen_k * p->head_dim);
}

/* The largest g_row[j - jlo] over the visible keys j of row i; -1 when none. */
static double row_visible_max(const ref_head *hd, int i, int jlo, const double *g_row)
{
    const ac_problem *p = hd->p;
    int lo, hi;
    ac_visible_range(p, hd->b, i, &lo, &hi);
    double best = -1.0;
    for (int j = lo; j < hi; j++)
        if ((!ac_has_pair_mask(p) || ac_visible(p, hd->b, hd->h, i, j)) && g_row[j - jlo] > best)
            best = g_row[j - jlo];
    return best;
}

/* The general formula below serves problems with score modifiers or sinks;
 * the others keep the plain one, bit for bit. */
static bool lse_general(const ac_problem *p) { return ac_problem_has_score_mods(p) || p->sinks; }

/* With score modifiers: E_lse_i = 1 + |LSE_i| + max_j Ghat_ij + 2 max_j |S'_ij|
 * over the visible keys, Ghat = t' G + sigma the f32 error of S' (pair_mod_errors),
 * |S'| bounding the running max's changes (without modifiers, d G_i and 2 G_i:
 * G_i bounds |S|); with sinks |s_h| joins the max of |S'| (the running max
 * starts there) and a row with no visible key gets 1 + |LSE|. */
static void lse_rows_mods(const lse_job *job, const ref_head *hd, int i0, int i1, int jlo, int jhi, int worker)
{
    const ac_problem *p = job->p;
    int cols = jhi - jlo;
    double *s = job->s[worker], *g = job->g[worker], gd = p->head_dim * fabs(p->scale);
    ref_mod_aux aux = {.slope = job->slope[worker], .sigma = job->sigma[worker]};
    ref_block_scores_mods(hd, job->q, job->k, i0, i1, jlo, jhi, s, &aux);
    for (int i = i0; i < i1; i++) {
        size_t row = (size_t)(i - i0) * cols, at = ac_lse_index(p, hd->b, hd->h, i);
        double ghat_max = -1.0, score_max = fabs(ref_sink_of(p, hd->h)); /* -inf without sinks: replaced below */
        score_max = isfinite(score_max) ? score_max : 0.0;
        for (int j = 0; j < cols; j++) {
            if (s[row + j] == -INFINITY) /* masked */
                continue;
            ghat_max = fmax(ghat_max, aux.slope[row + j] * gd * g[row + j] + aux.sigma[row + j]);
            score_max = fmax(score_max, fabs(s[row + j]));
        }
        if (ghat_max < 0.0 && p->sinks) /* no visible key: LSE = s_h exactly, m = s_h, l = 1 */
            ghat_max = 0.0;
        if (ghat_max >= 0.0 && isfinite(job->lse[at]))
            job->e_lse[at] = 1.0 + fabs(job->lse[at]) + ghat_max + 2.0 * score_max;
    }
}

/* Rows of a block that sees no key: with sinks LSE = s_h (m = s_h, l = 1), its
 * rounding alone; without, -inf and E = 0 (already set). */
static void lse_rows_sink_only(const lse_job *job, const ref_head *hd, int i0, int i1)
{
    for (int i = i0; i < i1 && hd->p->sinks; i++) {
        size_t at = ac_lse_index(hd->p, hd->b, hd->h, i);
        job->e_lse[at] = 1.0 + fabs(job->lse[at]);
    }
}

static void lse_block(void *arg, size_t task, int worker)
{
    const lse_job *job = arg;
    const ac_problem *p = job->p;
    ref_head hd;
    ref_head_init(&hd, p, (int)(task / job->row_blocks / p->heads_q), (int)(task / job->row_blocks % p->heads_q));
    int i0 = (int)(task % job->row_blocks) * LSE_BLOCK_ROWS, d = p->head_dim;
    int i_end = i0 + LSE_BLOCK_ROWS < hd.stored_q ? i0 + LSE_BLOCK_ROWS : hd.stored_q;
    int i1 = i_end < hd.seqlen_q ? i_end : hd.seqlen_q, jlo, jhi;
    for (int i = i0; i < i_end; i++)
        job->e_lse[ac_lse_index(p, hd.b, hd.h, i)] = 0.0;
    if (i1 <= i0)
        return;
    ref_block_keys(&hd, i0, i1, &jlo, &jhi);
    if (jhi <= jlo) {
        lse_rows_sink_only(job, &hd, i0, i1);
        return;
    }
    int cols = jhi - jlo;
    double *abs_q = job->abs_q[worker], *g = job->g[worker], scale = fabs(p->scale);
    const double *abs_k = job->abs_k + ((size_t)hd.b * p->heads_kv + hd.h_kv) * p->seqlen_k * d;
    abs_rows(job->q + hd.q_base + (size_t)i0 * hd.ld_q, hd.ld_q, i1 - i0, d, abs_q);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i1 - i0, cols, d, 1.0, abs_q, d, abs_k + (size_t)jlo * d, d,
                0.0, g, cols);
    if (job->s) {
        lse_rows_mods(job, &hd, i0, i1, jlo, jhi, worker);
        return;
    }
    bool fp8_acc = ac_problem_is_fp8(p) && p->fp8_acc_bits > 0;
    for (int i = i0; i < i1; i++) {
        double g_max = row_visible_max(&hd, i, jlo, g + (size_t)(i - i0) * cols);
        size_t at = ac_lse_index(p, hd.b, hd.h, i);
        if (g_max >= 0.0 && isfinite(job->lse[at]))
            job->e_lse[at] = 1.0 + fabs(job->lse[at]) + (fp8_acc ? 2.0 : d + 2.0) * scale * g_max;
    }
    if (!fp8_acc)
        return;
    ref_fp8_qk_errors(&hd, job->q, job->k, i0, i1, jlo, jhi, g); /* the S term, in place of d G_i */
    for (int i = i0; i < i1; i++) {
        size_t at = ac_lse_index(p, hd.b, hd.h, i);
        if (job->e_lse[at] > 0.0)
            job->e_lse[at] += row_visible_max(&hd, i, jlo, g + (size_t)(i - i0) * cols);
    }
}

static void lse_free(lse_job *job, int workers)
{
    double **per_worker[] = {job->abs_q, job->g, job->s, job->slope, job->sigma};
    for (size_t b = 0; b < sizeof per_worker / sizeof *per_worker; b++) {
        for (int w = 0; per_worker[b] && w < workers; w++)
            free(per_worker[b][w]);
        free(per_worker[b]);
    }
    free(job->abs_k);
}

/* The modifiers' blocks: S', t' and sigma per worker. */
static bool lse_alloc_mods(lse_job *job, int workers)
{
    size_t n = LSE_BLOCK_ROWS * (size_t)job->p->seqlen_k + 1;
    double ***slots[] = {&job->s, &job->slope, &job->sigma};
    bool ok = true;
    for (size_t b = 0; b < 3; b++) {
        *slots[b] = calloc((size_t)workers, sizeof(double *));
        ok = ok && *slots[b];
        for (int w = 0; ok && w < workers; w++)
            ok = ((*slots[b])[w] = malloc(n * sizeof(double))) != NULL;
    }
    return ok;
}

static bool lse_alloc(lse_job *job, int workers)
{
    const ac_problem *p = job->p;
    size_t d = (size_t)p->head_dim, nk = (size_t)p->seqlen_k;
    job->abs_k = malloc(((size_t)p->batch * p->heads_kv * nk * d + 1) * sizeof(double));
    job->abs_q = calloc((size_t)workers, sizeof(double *));
    job->g = calloc((size_t)workers, sizeof(double *));
    bool ok = job->abs_k && job->abs_q && job->g;
    for (int w = 0; ok && w < workers; w++) {
        job->abs_q[w] = malloc(LSE_BLOCK_ROWS * d * sizeof(double));
        job->g[w] = malloc((LSE_BLOCK_ROWS * nk + 1) * sizeof(double));
        ok = job->abs_q[w] && job->g[w];
    }
    return ok && (!lse_general(p) || lse_alloc_mods(job, workers));
}

int ref_lse_error_scale(const ac_problem *p, const double *q, const double *k, const double *lse, double *e_lse,
                        ac_err *err)
{
    int status = ac_problem_validate(p, 0, err), workers = 1;
    if (status != AC_OK)
        return status;
    if (!q || !k || !lse || !e_lse)
        return ac_fail(err, AC_ERR_INPUT, "ref_lse_error_scale: NULL tensor (q, k, lse and e_lse are required)");
    if ((status = ref_thread_count(&workers, err)) != AC_OK)
        return status;
    workers =
        ref_workers_within(workers, (lse_general(p) ? 4 : 1) * (size_t)LSE_BLOCK_ROWS * p->seqlen_k * sizeof(double));
    lse_job job = {p,    q,    k,   lse, e_lse, NULL, NULL, NULL, (p->seqlen_q + LSE_BLOCK_ROWS - 1) / LSE_BLOCK_ROWS,
                   NULL, NULL, NULL};
    if (lse_alloc(&job, workers)) {
        ref_parallel_for(workers, (size_t)p->batch * p->heads_kv, lse_pack_abs_k, &job);
        ref_parallel_for(workers, (size_t)p->batch * p->heads_q * job.row_blocks, lse_block, &job);
    } else {
        status = ac_fail(err, AC_ERR_ENV, "ref_lse_error_scale: out of memory for %d x %d blocks", LSE_BLOCK_ROWS,
                         p->seqlen_k);
    }
    lse_free(&job, workers);
    return status;
}
