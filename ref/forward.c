/* ref/forward.c — the fp64 reference forward: O = softmax(scale * Q K^T + mask) V
 * and LSE (natural log), plus the block machinery the backward and the error
 * scales share (fp64_block.h).
 *
 * Per (b, h) and per block of query rows (ref_block_rows): S = scale * Q K^T by
 * cblas_dgemm reading Q and K in place through their row strides (BHSD: d,
 * BSHD: heads * d), masked to -inf, softmax in double with the row maximum
 * subtracted, LSE = m + log(l), O = P V by cblas_dgemm writing in place, then
 * each row divided by l.  Only the key range a block can see goes through the
 * dgemms, so causal and window masks cost about what they keep.  The blocks
 * are independent tasks of a parallel for (parallel.h: one BLAS thread per
 * worker), each writing only its rows, so the result does not depend on the
 * thread count.
 *
 * The exp over Nq * Nk scores is the one non-BLAS cost; glibc's scalar exp
 * alone takes longer than both dgemms at N = 4096, d = 128, so ref_exp_shifted
 * is a vectorised exp (GCC vector extensions, cloned for AVX-512 and AVX2 on
 * x86-64) accurate to a few double ulps: 2^-50 relative, far below the 2^-30
 * (1/64 of an f32 ulp) the reference is certified to. */
#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fp64_block.h"
#include "parallel.h"
#include "ref.h"
#include "variants_internal.h"

/* ---- vectorised exp ------------------------------------------------------- */

#define VLEN 8
typedef double vec_d __attribute__((vector_size(VLEN * sizeof(double))));
typedef int64_t vec_i __attribute__((vector_size(VLEN * sizeof(double))));

/* exp(x) = 2^k * exp(r), k = round(x / ln 2), r = x - k ln 2 with ln 2 split
 * Cody-Waite style (the high part has 32 significant bits, so k * LN2_HI is
 * exact for |k| < 2^21), |r| <= 0.347.  exp(r) by its Taylor series to r^13:
 * the first dropped term is below 2^-58 relative.  2^k is applied as two
 * factors 2^(k/2) 2^(k - k/2), each a normal double, so results in the
 * subnormal range round once, correctly.  x is clamped to [-746, 709.7]
 * first: exp(-746) rounds to 0, so -inf gives exactly 0; NaN stays NaN. */
static const double LN2_HI = 0x1.62e42feep-1;
static const double LN2_LO = 0x1.a39ef35793c76p-33;
static const double LOG2_E = 0x1.71547652b82fep0;
static const double ROUND_MAGIC = 0x1.8p52; /* adding it rounds to an integer kept in the low bits */

/* Operands go by pointer: a vector passed by value would change the ABI
 * between the clones (-Wpsabi). */
#define SELECT_D(take_a, a, b) ((vec_d)(((vec_i)(a) & (take_a)) | ((vec_i)(b) & ~(take_a))))

static inline __attribute__((always_inline)) void vec_exp(vec_d *arg)
{
    vec_d x = *arg;
    const vec_d zero = {0};
    const vec_d lo = zero - 746.0, hi = zero + 709.7, magic = zero + ROUND_MAGIC;
    x = SELECT_D(x < lo, lo, x);
    x = SELECT_D(x > hi, hi, x);
    vec_d t = x * LOG2_E + ROUND_MAGIC;
    vec_d k = t - ROUND_MAGIC;
    vec_i k_int = (vec_i)t - (vec_i)magic;
    vec_d r = (x - k * LN2_HI) - k * LN2_LO;
    vec_d poly = r * (1.0 / 6227020800.0) + (1.0 / 479001600.0);
    poly = poly * r + (1.0 / 39916800.0);
    poly = poly * r + (1.0 / 3628800.0);
    poly = poly * r + (1.0 / 362880.0);
    poly = poly * r + (1.0 / 40320.0);
    poly = poly * r + (1.0 / 5040.0);
    poly = poly * r + (1.0 / 720.0);
    poly = poly * r + (1.0 / 120.0);
    poly = poly * r + (1.0 / 24.0);
    poly = poly * r + (1.0 / 6.0);
    poly = poly * r + 0.5;
    poly = poly * r + 1.0;
    poly = poly * r + 1.0;
    vec_i k_half = k_int >> 1;
    vec_d two_k1 = (vec_d)((k_half + 1023) << 52);
    vec_d two_k2 = (vec_d)((k_int - k_half + 1023) << 52);
    *arg = poly * two_k1 * two_k2;
}

#if defined(__x86_64__) && defined(__gnu_linux__) && !defined(__clang__)
/* Cloned per instruction set (chosen at load time by CPU features) and with
 * a * b + c contracted into FMAs, which only makes the exp more accurate. */
#define REF_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2,fma", "default"), optimize("fp-contract=fast")))
#else
#define REF_SIMD_CLONES
#endif

REF_SIMD_CLONES
double ref_exp_shifted(double *x, size_t n, double shift)
{
    vec_d sum = {0};
    size_t i = 0;
    /* Four independent vectors per step: one exp is a chain of ~30 dependent
     * operations, and interleaving chains keeps the FP units busy. */
    for (; i + 4 * VLEN <= n; i += 4 * VLEN) {
        vec_d v[4];
        memcpy(v, x + i, sizeof v);
        for (int u = 0; u < 4; u++) {
            v[u] -= shift;
            vec_exp(&v[u]);
        }
        memcpy(x + i, v, sizeof v);
        sum += (v[0] + v[1]) + (v[2] + v[3]);
    }
    for (; i + VLEN <= n; i += VLEN) {
        vec_d v;
        memcpy(&v, x + i, sizeof v);
        v -= shift;
        vec_exp(&v);
        memcpy(x + i, &v, sizeof v);
        sum += v;
    }
    if (i < n) { /* the tail through one padded vector: same arithmetic, same accuracy */
        double tail[VLEN];
        for (size_t j = 0; j < VLEN; j++)
            tail[j] = i + j < n ? x[i + j] - shift : -INFINITY;
        vec_d v;
        memcpy(&v, tail, sizeof v);
        vec_exp(&v);
        sum += v;
        memcpy(tail, &v, sizeof v);
        memcpy(x + i, tail, (n - i) * sizeof(double));
    }
    double total = 0.0;
    for (int j = 0; j < VLEN; j++)
        total += sum[j];
    return total;
}

/* The largest of x[0..n), -inf when n == 0: eight running maxima per vector,
 * since one scalar chain of compares costs a full latency per element. */
REF_SIMD_CLONES
static double row_max(const double *x, size_t n)
{
    const vec_d neg_inf = (vec_d){0} - INFINITY;
    vec_d m = neg_inf;
    size_t i = 0;
    for (; i + VLEN <= n; i += VLEN) {
        vec_d v;
        memcpy(&v, x + i, sizeof v);
        m = SELECT_D(v > m, v, m);
    }
    double best = -INFINITY;
    for (int j = 0; j < VLEN; j++)
        best = m[j] > best ? m[j] : best;
    for (; i < n; i++)
        best = x[i] > best ? x[i] : best;
    return best;
}

/* ---- blocks of one (b, h) ------------------------------------------------- */

int ref_block_rows(const ac_problem *p)
{
    size_t rows = REF_BLOCK_ELEMS / (size_t)(p->seqlen_k > 0 ? p->seqlen_k : 1);
    rows = rows < REF_BLOCK_MIN_ROWS ? REF_BLOCK_MIN_ROWS : rows > REF_BLOCK_MAX_ROWS ? REF_BLOCK_MAX_ROWS : rows;
    return rows < (size_t)p->seqlen_q ? (int)rows : (p->seqlen_q > 0 ? p->seqlen_q : 1);
}

int ref_block_count(const ac_problem *p)
{
    int rows = ref_block_rows(p);
    return (p->seqlen_q + rows - 1) / rows;
}

void ref_block_task(const ac_problem *p, size_t task, ref_head *hd, int *i0, int *i1)
{
    int blocks = ref_block_count(p), rows = ref_block_rows(p);
    size_t head = task / (size_t)blocks;
    ref_head_init(hd, p, (int)(head / p->heads_q), (int)(head % p->heads_q));
    *i0 = (int)(task % (size_t)blocks) * rows;
    *i1 = *i0 + rows < p->seqlen_q ? *i0 + rows : p->seqlen_q;
}

void ref_head_init(ref_head *hd, const ac_problem *p, int b, int h)
{
    hd->p = p;
    hd->b = b;
    hd->h = h;
    hd->h_kv = ac_kv_head_of(p, h);
    hd->seqlen_q = ac_seqlen_q_of(p, b);
    hd->seqlen_k = ac_seqlen_k_of(p, b);
    hd->stored_q = ac_stored_rows(p, b, true);
    hd->stored_k = ac_stored_rows(p, b, false);
    hd->d = p->head_dim;
    hd->d_v = ac_head_dim_v(p);
    bool bshd = p->layout != AC_LAYOUT_BHSD; /* BSHD and THD: a row of every head, then the next */
    hd->ld_q = (size_t)p->head_dim * (bshd ? (size_t)p->heads_q : 1);
    hd->ld_kv = (size_t)p->head_dim * (bshd ? (size_t)p->heads_kv : 1);
    hd->q_base = ac_q_index(p, b, h, 0, 0);
    hd->kv_base = ac_kv_index(p, b, hd->h_kv, 0, 0);
    hd->ld_o = (size_t)hd->d_v * (bshd ? (size_t)p->heads_q : 1);
    hd->ld_v = (size_t)hd->d_v * (bshd ? (size_t)p->heads_kv : 1);
    hd->o_base = ac_o_index(p, b, h, 0, 0);
    hd->v_base = ac_v_index(p, b, hd->h_kv, 0, 0);
}

void ref_block_keys(const ref_head *hd, int i0, int i1, int *jlo, int *jhi)
{
    *jlo = hd->seqlen_k;
    *jhi = 0;
    for (int i = i0; i < i1; i++) {
        int lo, hi;
        ac_visible_range(hd->p, hd->b, i, &lo, &hi);
        if (hi <= lo)
            continue;
        if (lo < *jlo)
            *jlo = lo;
        if (hi > *jhi)
            *jhi = hi;
    }
}

/* Row i of the dense mask for this head, or NULL when there is none. */
static const uint8_t *dense_mask_row(const ref_head *hd, int i)
{
    const ac_problem *p = hd->p;
    if (!p->dense_mask)
        return NULL;
    size_t mb = p->mask_batch == 1 ? 0 : (size_t)hd->b;
    size_t mh = p->mask_heads == 1 ? 0 : (size_t)hd->h;
    return p->dense_mask + ((mb * p->mask_heads + mh) * p->seqlen_q + i) * p->seqlen_k;
}

void ref_block_scores(const ref_head *hd, const double *q, const double *k, int i0, int i1, int jlo, int jhi, double *s)
{
    ref_block_scores_mods(hd, q, k, i0, i1, jlo, jhi, s, NULL);
}

void ref_block_scores_mods(const ref_head *hd, const double *q, const double *k, int i0, int i1, int jlo, int jhi,
                           double *s, const ref_mod_aux *aux)
{
    int rows = i1 - i0, cols = jhi - jlo;
    if (!ref_fp8_block_products(hd, q, k, i0, i1, jlo, jhi, s))
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, hd->d, hd->p->scale,
                    q + hd->q_base + (size_t)i0 * hd->ld_q, (int)hd->ld_q, k + hd->kv_base + (size_t)jlo * hd->ld_kv,
                    (int)hd->ld_kv, 0.0, s, cols);
    if (aux || ac_problem_has_score_mods(hd->p)) /* the variants' S' (ref/variants.c) */
        ref_block_mods(hd, i0, i1, jlo, jhi, s, aux);
    for (int i = i0; i < i1; i++) {
        double *row = s + (size_t)(i - i0) * cols;
        int lo, hi;
        ac_visible_range(hd->p, hd->b, i, &lo, &hi);
        for (int j = jlo; j < jhi && j < lo; j++)
            row[j - jlo] = -INFINITY;
        for (int j = hi > jlo ? hi : jlo; j < jhi; j++)
            row[j - jlo] = -INFINITY;
        int g0, g1; /* sink tokens: the keys between them and the window */
        ac_visible_gap(hd->p, hd->b, i, &g0, &g1);
        for (int j = g0 > jlo ? g0 : jlo; j < g1 && j < jhi; j++)
            row[j - jlo] = -INFINITY;
        const uint8_t *mask = dense_mask_row(hd, i);
        if (mask)
            for (int j = jlo; j < jhi; j++)
                if (!mask[j])
                    row[j - jlo] = -INFINITY;
    }
}

/* The part [lo, hi) of row i that can hold visible keys, clipped to the block's
 * key range; entries outside it are set to 0. */
static void row_live_range(const ref_head *hd, int i, int jlo, int jhi, double *row, int *lo, int *hi)
{
    ac_visible_range(hd->p, hd->b, i, lo, hi);
    if (*lo < jlo)
        *lo = jlo;
    if (*hi > jhi)
        *hi = jhi;
    if (*hi < *lo)
        *hi = *lo;
    for (int j = jlo; j < *lo; j++)
        row[j - jlo] = 0.0;
    for (int j = *hi; j < jhi; j++)
        row[j - jlo] = 0.0;
}

void ref_block_probs_from_lse(const ref_head *hd, int i0, int i1, int jlo, int jhi, const double *lse_nat, double *s)
{
    int cols = jhi - jlo;
    for (int i = i0; i < i1; i++) {
        double *row = s + (size_t)(i - i0) * cols;
        double lse = lse_nat[ac_lse_index(hd->p, hd->b, hd->h, i)];
        int lo, hi;
        row_live_range(hd, i, jlo, jhi, row, &lo, &hi);
        if (lse == -INFINITY)
            memset(row, 0, (size_t)cols * sizeof *row);
        else
            ref_exp_shifted(row + (lo - jlo), (size_t)(hi - lo), lse);
    }
}

void ref_zero_q_rows(const ref_head *hd, double *t, int i0, int i1)
{
    for (int i = i0; i < i1; i++)
        memset(t + hd->q_base + (size_t)i * hd->ld_q, 0, (size_t)hd->d * sizeof *t);
}

void ref_zero_o_rows(const ref_head *hd, double *t, int i0, int i1)
{
    for (int i = i0; i < i1; i++)
        memset(t + hd->o_base + (size_t)i * hd->ld_o, 0, (size_t)hd->d_v * sizeof *t);
}

/* ---- two threads over the rows of a block ----------------------------------- */

typedef struct {
    ref_rows_fn fn;
    void *ctx;
    int i0, i1;
} rows_job;

static void *run_rows_job(void *arg)
{
    rows_job *job = arg;
    job->fn(job->ctx, job->i0, job->i1);
    return NULL;
}

/* Blocks smaller than this run on the calling thread: a thread start costs
 * tens of microseconds, an exp of 2^16 scores about a hundred. */
#define REF_PARALLEL_MIN_ELEMS ((size_t)1 << 16)

void ref_parallel_rows(ref_rows_fn fn, void *ctx, int i0, int i1, size_t elems)
{
    pthread_t helper;
    int mid = i0 + (i1 - i0) / 2;
    rows_job second = {fn, ctx, mid, i1};
    if (elems < REF_PARALLEL_MIN_ELEMS || i1 - i0 < 2 || pthread_create(&helper, NULL, run_rows_job, &second) != 0) {
        fn(ctx, i0, i1); /* small, or no thread to be had: all on this one */
        return;
    }
    fn(ctx, i0, mid);
    pthread_join(helper, NULL);
}

/* ---- the forward ------------------------------------------------------------ */

/* Softmax of the rows of one score block, in place: s becomes exp(s - m_i) and
 * l[r] the row sum (0 for a row without a visible key); lse written. */
typedef struct {
    const ref_head *hd;
    int i0, jlo, jhi; /* the block: row i0 is row 0 of s */
    double *s, *l, *lse;
} softmax_job;

/* One row with a sink s_h (ref.h): the max and the denominator take it in,
 * exp(s_h - m) with no value; masked entries are already 0 (exp(-inf)) or
 * outside [lo, hi) (zeroed by row_live_range).  A row with no visible key:
 * l = 1 at m = s_h, so LSE = s_h and O = 0. */
static void block_softmax_sink_row(const ref_head *hd, double *live, int n, double row_m, double *l, double *lse)
{
    double sink = ref_sink_of(hd->p, hd->h), m = fmax(row_m, sink);
    *l = ref_exp_shifted(live, (size_t)n, m) + exp(sink - m);
    *lse = m + log(*l);
}

static void block_softmax_rows(void *arg, int r0, int r1)
{
    const softmax_job *job = arg;
    const ref_head *hd = job->hd;
    int i0 = job->i0, jlo = job->jlo, jhi = job->jhi;
    double *s = job->s, *l = job->l, *lse = job->lse;
    int cols = jhi - jlo;
    for (int i = r0; i < r1; i++) {
        double *row = s + (size_t)(i - i0) * cols;
        int lo, hi;
        row_live_range(hd, i, jlo, jhi, row, &lo, &hi);
        double m = row_max(row + (lo - jlo), (size_t)(hi - lo));
        size_t at = ac_lse_index(hd->p, hd->b, hd->h, i);
        if (hd->p->sinks) {
            block_softmax_sink_row(hd, row + (lo - jlo), hi - lo, m, &l[i - i0], &lse[at]);
            continue;
        }
        if (m == -INFINITY) { /* no visible key: O = 0, LSE = -inf */
            memset(row, 0, (size_t)cols * sizeof *row);
            l[i - i0] = 0.0;
            lse[at] = -INFINITY;
            continue;
        }
        l[i - i0] = ref_exp_shifted(row + (lo - jlo), (size_t)(hi - lo), m);
        lse[at] = m + log(l[i - i0]);
    }
}

static void block_softmax(const ref_head *hd, int i0, int i1, int jlo, int jhi, double *s, double *l, double *lse)
{
    softmax_job job = {hd, i0, jlo, jhi, s, l, lse};
    block_softmax_rows(&job, i0, i1); /* already on a worker of the parallel for */
}

static void forward_block(const ref_head *hd, const double *q, const double *k, const double *v, int i0, int i1,
                          double *s, double *l, double *o, double *lse)
{
    int jlo, jhi;
    ref_block_keys(hd, i0, i1, &jlo, &jhi);
    if (jhi <= jlo) { /* no row of the block sees a key: LSE = -inf, or the sink */
        ref_zero_o_rows(hd, o, i0, i1);
        for (int i = i0; i < i1; i++)
            lse[ac_lse_index(hd->p, hd->b, hd->h, i)] = ref_sink_of(hd->p, hd->h);
        return;
    }
    ref_block_scores(hd, q, k, i0, i1, jlo, jhi, s);
    block_softmax(hd, i0, i1, jlo, jhi, s, l, lse);
    ref_block_dropout(hd, i0, i1, jlo, jhi, s); /* after the softmax: LSE is the undropped one's */
    double *o_rows = o + hd->o_base + (size_t)i0 * hd->ld_o;
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i1 - i0, hd->d_v, jhi - jlo, 1.0, s, jhi - jlo,
                v + hd->v_base + (size_t)jlo * hd->ld_v, (int)hd->ld_v, 0.0, o_rows, (int)hd->ld_o);
    for (int i = i0; i < i1; i++) {
        double *o_row = o_rows + (size_t)(i - i0) * hd->ld_o;
        double li = l[i - i0];
        for (int c = 0; c < hd->d_v; c++) /* exact zeros for a masked row, even if V holds NaN */
            o_row[c] = li > 0.0 ? o_row[c] / li : 0.0;
    }
}

/* Task: one block of rows [i0, i1) of one (b, h), padding rows included
 * (O = 0, LSE = -inf: not part of the problem). */
typedef struct {
    const ac_problem *p;
    const double *q, *k, *v;
    double *o, *lse;
    double **s, **l; /* per worker: (block, Nk), (block) */
} forward_job;

static void forward_task(void *arg, size_t task, int worker)
{
    const forward_job *job = arg;
    ref_head hd;
    int i0, i1;
    ref_block_task(job->p, task, &hd, &i0, &i1);
    int live = i1 < hd.seqlen_q ? i1 : hd.seqlen_q;
    if (i0 < live)
        forward_block(&hd, job->q, job->k, job->v, i0, live, job->s[worker], job->l[worker], job->o, job->lse);
    int pad0 = i0 > hd.seqlen_q ? i0 : hd.seqlen_q, pad1 = i1 < hd.stored_q ? i1 : hd.stored_q;
    ref_zero_o_rows(&hd, job->o, pad0, pad1);
    for (int i = pad0; i < pad1; i++)
        job->lse[ac_lse_index(job->p, hd.b, hd.h, i)] = -INFINITY;
}

int ref_forward_fp64(const ac_problem *p, const double *q, const double *k, const double *v, double *o, double *lse,
                     ac_err *err)
{
    int status = ac_problem_validate(p, 0, err), workers = 1;
    if (status != AC_OK)
        return status;
    if ((status = ref_dropout_check(p, "ref_forward_fp64", err)) != AC_OK)
        return status;
    if (!q || !k || !v || !o || !lse)
        return ac_fail(err, AC_ERR_INPUT, "ref_forward_fp64: NULL tensor (q, k, v, o and lse are required)");
    if ((status = ref_thread_count(&workers, err)) != AC_OK)
        return status;
    int block = ref_block_rows(p);
    size_t sizes[2] = {(size_t)block * p->seqlen_k, (size_t)block};
    workers = ref_workers_within(workers, (sizes[0] + sizes[1]) * sizeof(double));
    forward_job job = {p, q, k, v, o, lse, NULL, NULL};
    double ***slots[2] = {&job.s, &job.l};
    if (ref_scratch_alloc(slots, sizes, 2, workers))
        ref_parallel_for(workers, (size_t)p->batch * p->heads_q * ref_block_count(p), forward_task, &job);
    else
        status = ac_fail(err, AC_ERR_ENV, "ref_forward_fp64: out of memory for %d workers' %d x %d score blocks",
                         workers, block, p->seqlen_k);
    ref_scratch_free(slots, 2, workers);
    return status;
}

/* ---- per-worker scratch ----------------------------------------------------- */

void ref_scratch_free(double ***slots[], int n_kinds, int workers)
{
    for (int kind = 0; kind < n_kinds; kind++) {
        for (int w = 0; *slots[kind] && w < workers; w++)
            free((*slots[kind])[w]);
        free(*slots[kind]);
        *slots[kind] = NULL;
    }
}

bool ref_scratch_alloc(double ***slots[], const size_t sizes[], int n_kinds, int workers)
{
    bool ok = true;
    for (int kind = 0; kind < n_kinds; kind++) {
        *slots[kind] = calloc((size_t)workers, sizeof(double *));
        ok &= *slots[kind] != NULL;
        for (int w = 0; *slots[kind] && w < workers; w++) {
            (*slots[kind])[w] = malloc((sizes[kind] ? sizes[kind] : 1) * sizeof(double));
            ok &= (*slots[kind])[w] != NULL;
        }
    }
    return ok;
}
