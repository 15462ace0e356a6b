/* ref/mpfr_ref.c — the gold reference: the forward in MPFR on chosen rows, and
 * the certification of the fp64 reference against it.
 *
 * What is exact and what is rounded, per row (b, h, i):
 *   S_ij = scale * sum_c q_ic k_jc: the dot product is exact, then rounded
 *     once to prec + 64 bits, then multiplied by scale at prec bits;
 *   m = max_j s_j, e_j = exp(s_j - m) (to 1.1 * 2^-prec relative, by tables
 *     and a short series: mpfr_exp costs 4-7 us on a full 128-bit argument)
 *     and l = sum_j e_j (mpfr_sum) at prec bits; LSE = m + log(l);
 *   O_ic = (sum_j e_j V_jc) / l: the sum is exact for every e_j truncated to
 *     an absolute 2^-(prec+16) (e_j <= 1), then divided by l at prec bits.
 * So O_ic is within 2^-(prec-3) * sum_j P_ij |V_jc| + 2^-(prec+16) *
 * sum_j |V_jc| / l of the exact value: at the default 128 bits that is below
 * 2^-60 relative unless the row cancels by more than 2^64.
 *
 * Why not one MPFR operation per product: certifying 8 rows at N = 4096,
 * d = 128 would then take about 3 times the fp64 forward.  Both matrix
 * products are instead done exactly in double by slicing (Ozaki's scheme):
 * every line (a row of Q, a key of K, a column of V, a row of e) is split into
 * slices whose entries are integers of at most beta bits times a per-line
 * power of two, beta small enough that a dgemm of slices over n terms is
 * exact (2 beta + log2 n <= 53).  One dgemm over stacked slices gives every
 * slice pair's exact partial sum; their exact total goes to MPFR.  The MPFR
 * work left per (row, key) is the score's conversion and the exp, run on two
 * threads over the rows of a chunk (ref_parallel_rows, as the fp64 forward).
 *
 * Inputs must be finite with magnitudes in [2^-400, 2^400] or zero (every
 * f32/f16/bf16 value is), so no slice product under- or overflows. */
#include <cblas.h>
#include <math.h>
#include <mpfr.h>
#include <stdlib.h>
#include <string.h>

#include "fp64_block.h"
#include "mpfr_exact.h"
#include "ref.h"
#include "variants_internal.h"

#define MP_MIN_PREC 64
#define MP_MAX_PREC 512
#define MP_ROWS_PER_CHUNK 8 /* rows of one (b, h) handled together */
#define MP_KEYS_PER_BLOCK 1024 /* keys per exact dgemm */
#define MP_MAX_SLICES 48 /* per line: [2^-400, 2^400] needs <= 40 */
#define MP_THREADS 2 /* ref_parallel_rows splits rows in two */

/* ---- workspace ---------------------------------------------------------------
 * Everything a call needs, allocated once: MPFR variables are initialised
 * here, never per element.  The per-key MPFR work (scores to MPFR, exp, the
 * sums) runs on two threads over the rows of a chunk, each with its own
 * scratch variables. */
typedef struct {
    double *buf;
    size_t cap;
} grow_buf;

static double *grow(grow_buf *g, size_t n)
{
    if (n == 0)
        n = 1;
    if (n > g->cap) {
        double *nb = realloc(g->buf, n * sizeof *nb);
        if (!nb)
            return NULL;
        g->buf = nb;
        g->cap = n;
    }
    return g->buf;
}

#define MP_MAX_TERMS (MP_MAX_SLICES * MP_MAX_SLICES)

typedef struct {
    mpfr_t tmp[64]; /* 64-bit scratch for expansions */
    mpfr_ptr tmp_ptrs[64];
    mpfr_t wide, part, max, t;
    mpfr_ptr *ptrs; /* seqlen_k pointers for mpfr_sum */
    mx_exp_scratch exp;
    double terms[MP_MAX_TERMS];
} mp_thread;

typedef struct {
    const ac_problem *p;
    const double *q, *k, *v;
    int prec;
    ac_err *err;
    double *qrows, *rem, *line;
    grow_buf qs, ks, cs, es, vs, cpv;
    uint8_t *vis; /* MP_ROWS_PER_CHUNK x seqlen_k */
    mpfr_t *score; /* MP_ROWS_PER_CHUNK x seqlen_k: s_j, then e_j */
    void *score_limbs;
    mpfr_t *acc; /* MP_ROWS_PER_CHUNK x d, at prec + 64 */
    mpfr_t row_l[MP_ROWS_PER_CHUNK];
    bool row_alive[MP_ROWS_PER_CHUNK];
    mp_thread *th; /* MP_THREADS */
    mx_exp_table exp; /* read-only once built: shared by the threads */
    mpfr_t scale; /* the softmax scale, exactly (53 bits) */
    bool mpfr_ready;
} mp_work;

static mp_thread *thread_of(mp_work *w, int r0) { return &w->th[r0 == 0 ? 0 : 1]; }

static void work_free(mp_work *w)
{
    free(w->qrows);
    free(w->rem);
    free(w->line);
    free(w->vis);
    grow_buf *bufs[] = {&w->qs, &w->ks, &w->cs, &w->es, &w->vs, &w->cpv};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        free(bufs[i]->buf);
    free(w->score);
    free(w->score_limbs);
    if (w->mpfr_ready) {
        for (size_t i = 0; i < (size_t)MP_ROWS_PER_CHUNK * ac_head_dim_v(w->p); i++)
            mpfr_clear(w->acc[i]);
        for (int r = 0; r < MP_ROWS_PER_CHUNK; r++)
            mpfr_clear(w->row_l[r]);
        for (int t = 0; t < MP_THREADS; t++) {
            for (int i = 0; i < 64; i++)
                mpfr_clear(w->th[t].tmp[i]);
            mpfr_clears(w->th[t].wide, w->th[t].part, w->th[t].max, w->th[t].t, (mpfr_ptr)0);
            mx_exp_scratch_clear(&w->th[t].exp, &w->exp);
        }
        mx_exp_table_clear(&w->exp);
        mpfr_clear(w->scale);
    }
    for (int t = 0; w->th && t < MP_THREADS; t++)
        free(w->th[t].ptrs);
    free(w->th);
    free(w->acc);
}

/* The per-key variables live in one block (MPFR's custom interface): one
 * allocation for all of them, and their limbs can be read directly. */
static int score_pool_init(mp_work *w, size_t n)
{
    size_t bytes = mpfr_custom_get_size(w->prec);
    bytes = (bytes + sizeof(mp_limb_t) - 1) / sizeof(mp_limb_t) * sizeof(mp_limb_t);
    w->score = malloc(n * sizeof *w->score);
    w->score_limbs = malloc(n * bytes);
    if (!w->score || !w->score_limbs)
        return AC_ERR_ENV;
    for (size_t i = 0; i < n; i++) {
        void *limbs = (char *)w->score_limbs + i * bytes;
        mpfr_custom_init(limbs, w->prec);
        mpfr_custom_init_set(w->score[i], MPFR_ZERO_KIND, 0, w->prec, limbs);
    }
    return AC_OK;
}

static void mpfr_vars_init(mp_work *w)
{
    size_t d = (size_t)ac_head_dim_v(w->p); /* acc holds O rows */
    for (size_t i = 0; i < MP_ROWS_PER_CHUNK * d; i++)
        mpfr_init2(w->acc[i], w->prec + 64);
    for (int r = 0; r < MP_ROWS_PER_CHUNK; r++)
        mpfr_init2(w->row_l[r], w->prec);
    mx_exp_table_init(&w->exp, w->prec);
    mpfr_init2(w->scale, 53);
    mpfr_set_d(w->scale, w->p->scale, MPFR_RNDN);
    for (int t = 0; t < MP_THREADS; t++) {
        mp_thread *th = &w->th[t];
        mx_exp_scratch_init(&th->exp, &w->exp);
        for (int i = 0; i < 64; i++) {
            mpfr_init2(th->tmp[i], 64);
            th->tmp_ptrs[i] = th->tmp[i];
        }
        mpfr_init2(th->wide, w->prec + 64);
        mpfr_init2(th->part, w->prec + 64);
        mpfr_inits2(w->prec, th->max, th->t, (mpfr_ptr)0);
    }
    w->mpfr_ready = true;
}

static int work_init(mp_work *w, const ac_problem *p, const double *q, const double *k, const double *v, int prec,
                     ac_err *err)
{
    memset(w, 0, sizeof *w);
    w->p = p;
    w->q = q;
    w->k = k;
    w->v = v;
    w->prec = prec;
    w->err = err;
    size_t d = (size_t)p->head_dim, d_v = (size_t)ac_head_dim_v(p), nk = (size_t)p->seqlen_k, rows = MP_ROWS_PER_CHUNK;
    size_t d_max = d > d_v ? d : d_v; /* K blocks are sliced with d columns, V blocks with d_v */
    size_t block = MP_KEYS_PER_BLOCK * d_max, widest = d_max > MP_KEYS_PER_BLOCK ? d_max : MP_KEYS_PER_BLOCK;
    w->qrows = malloc(rows * d * sizeof *w->qrows);
    w->rem = malloc(block * sizeof *w->rem);
    w->line = malloc(3 * widest * sizeof *w->line);
    w->vis = malloc(rows * nk);
    w->acc = malloc(rows * d_v * sizeof *w->acc);
    w->th = calloc(MP_THREADS, sizeof *w->th);
    bool ok = w->qrows && w->rem && w->line && w->vis && w->acc && w->th;
    for (int t = 0; ok && t < MP_THREADS; t++)
        ok = (w->th[t].ptrs = malloc((nk + 1) * sizeof *w->th[t].ptrs)) != NULL; /* + a sink */
    if (!ok || score_pool_init(w, rows * nk) != AC_OK) {
        work_free(w);
        return ac_fail(err, AC_ERR_ENV, "ref_forward_mpfr: out of memory (seqlen_k=%zu, d=%zu)", nk, d);
    }
    mpfr_vars_init(w);
    return AC_OK;
}

/* A slicing result as a status with a message naming the tensor. */
static int slice_status(mp_work *w, int used, const char *what, int b, int h)
{
    if (used == MX_BAD_VALUE)
        return ac_fail(w->err, AC_ERR_INPUT,
                       "ref_forward_mpfr: %s of (b=%d, head=%d) holds a value that is not finite with "
                       "magnitude 0 or in [2^-400, 2^400] (f32/f16/bf16 values always are)",
                       what, b, h);
    if (used < 0)
        return ac_fail(w->err, AC_ERR_ENV, "ref_forward_mpfr: %s of (b=%d, head=%d) needs more than %d slices", what, b,
                       h, MP_MAX_SLICES);
    return AC_OK;
}

static int out_of_memory(mp_work *w) { return ac_fail(w->err, AC_ERR_ENV, "ref_forward_mpfr: out of memory"); }

/* ---- one chunk: up to MP_ROWS_PER_CHUNK query rows of one (b, h) ---------- */
typedef struct {
    int b, h, h_kv, n;
    int i[MP_ROWS_PER_CHUNK]; /* query rows */
    int jlo, jhi; /* union of their visible key ranges */
    double *o; /* n x d, compact */
    double *lse; /* n */
} mp_chunk;

/* What the row-parallel passes share. */
typedef struct {
    mp_work *w;
    mp_chunk *ch;
    int j0, j1; /* key block */
    int s_q, s_k; /* score slices of Q and K */
    int s_e, s_v; /* slices of e and V */
} mp_job;

/* Row strides of K (d columns) and V (d_v). */
static size_t kv_row_stride(const ac_problem *p)
{
    return p->layout != AC_LAYOUT_BHSD ? (size_t)p->heads_kv * p->head_dim : (size_t)p->head_dim; /* BSHD, THD */
}

static size_t v_row_stride(const ac_problem *p)
{
    size_t d_v = (size_t)ac_head_dim_v(p);
    return p->layout != AC_LAYOUT_BHSD ? (size_t)p->heads_kv * d_v : d_v;
}

static mpfr_ptr score_at(mp_work *w, int r, int j) { return w->score[(size_t)r * w->p->seqlen_k + j]; }

/* Which keys each row sees: the window/length range, then the dense mask. */
static void chunk_visibility(mp_work *w, mp_chunk *ch)
{
    const ac_problem *p = w->p;
    ch->jlo = p->seqlen_k;
    ch->jhi = 0;
    for (int r = 0; r < ch->n; r++) {
        int lo, hi;
        ac_visible_range(p, ch->b, ch->i[r], &lo, &hi);
        uint8_t *vis = w->vis + (size_t)r * p->seqlen_k;
        memset(vis, 0, (size_t)p->seqlen_k);
        w->row_alive[r] = false;
        for (int j = lo; j < hi; j++) {
            vis[j] = ac_visible(p, ch->b, ch->h, ch->i[r], j);
            w->row_alive[r] |= vis[j] != 0;
        }
        if (hi > lo && lo < ch->jlo)
            ch->jlo = lo;
        if (hi > lo && hi > ch->jhi)
            ch->jhi = hi;
    }
}

/* The variants' S' = ac_score_mod of one score of (b, h, i, j), in place at
 * prec bits: softcap c tanh(S / c), then ALiBi's slope x distance (exact in
 * double: a 24-bit slope times an integer below 2^29) subtracted. */
static void score_mods(const ac_problem *p, int b, int h, int i, int j, mpfr_ptr score)
{
    if (p->softcap != 0.0) {
        mpfr_div_d(score, score, p->softcap, MPFR_RNDN);
        mpfr_tanh(score, score, MPFR_RNDN);
        mpfr_mul_d(score, score, p->softcap, MPFR_RNDN);
    }
    if (p->alibi_slopes)
        mpfr_sub_d(score, score, ac_alibi_bias(p, b, h, i, j), MPFR_RNDN);
    if (p->bias) /* finite here: a -inf entry's pair is not visible */
        mpfr_add_d(score, score, ac_bias_at(p, b, h, i, j), MPFR_RNDN);
}

/* Rows [r0, r1): every visible key's exact score (the slice pairs' partial
 * sums added exactly), rounded to prec + 64 bits, times scale at prec bits,
 * then the variants' score modifiers. */
static void scores_rows(void *arg, int r0, int r1)
{
    const mp_job *job = arg;
    mp_work *w = job->w;
    mp_thread *th = thread_of(w, r0);
    size_t R = (size_t)job->ch->n, nb = (size_t)(job->j1 - job->j0), ldc = (size_t)job->s_k * nb;
    const double *cs = w->cs.buf;
    bool mods = ac_problem_has_score_mods(w->p);
    for (int r = r0; r < r1; r++) {
        const uint8_t *vis = w->vis + (size_t)r * w->p->seqlen_k;
        for (int j = job->j0; j < job->j1; j++) {
            if (!vis[j])
                continue;
            size_t n = 0;
            for (int s = 0; s < job->s_q; s++)
                for (int t = 0; t < job->s_k; t++)
                    th->terms[n++] = cs[((size_t)s * R + (size_t)r) * ldc + (size_t)t * nb + (size_t)(j - job->j0)];
            mx_sum_doubles(th->wide, th->terms, n, th->tmp, th->tmp_ptrs);
            mpfr_mul(score_at(w, r, j), th->wide, w->scale, MPFR_RNDN); /* not mul_d: no temporary */
            if (mods)
                score_mods(w->p, job->ch->b, job->ch->h, job->ch->i[r], j, score_at(w, r, j));
        }
    }
    if (r0 > 0 && mods) /* on the helper thread, about to end: drop what tanh cached */
        mpfr_free_cache2(MPFR_FREE_LOCAL_CACHE);
}

static int chunk_scores_block(mp_work *w, mp_chunk *ch, int s_q, int j0, int j1)
{
    const ac_problem *p = w->p;
    size_t d = (size_t)p->head_dim, nb = (size_t)(j1 - j0), R = (size_t)ch->n;
    mx_block keys = {w->k + ac_kv_index(p, ch->b, ch->h_kv, j0, 0), nb, d, kv_row_stride(p), true};
    double *ks = grow(&w->ks, MP_MAX_SLICES * nb * d);
    if (!ks)
        return out_of_memory(w);
    int s_k = mx_slice_block(&keys, mx_exact_beta(d), ks, MP_MAX_SLICES, w->rem, w->line);
    if (s_k < 0)
        return slice_status(w, s_k, "k", ch->b, ch->h_kv);
    double *cs = grow(&w->cs, (size_t)s_q * R * s_k * nb);
    if (!cs)
        return out_of_memory(w);
    if (s_k == 0 || s_q == 0)
        memset(cs, 0, (size_t)s_q * R * s_k * nb * sizeof *cs);
    else /* every slice of every row against every slice of every key, exactly */
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s_q * (int)R, s_k * (int)nb, (int)d, 1.0, w->qs.buf,
                    (int)d, ks, (int)d, 0.0, cs, s_k * (int)nb);
    mp_job job = {.w = w, .ch = ch, .j0 = j0, .j1 = j1, .s_q = s_q, .s_k = s_k};
    ref_parallel_rows(scores_rows, &job, 0, ch->n, R * nb * 64);
    return AC_OK;
}

static int chunk_scores(mp_work *w, mp_chunk *ch)
{
    const ac_problem *p = w->p;
    size_t d = (size_t)p->head_dim, R = (size_t)ch->n;
    for (size_t r = 0; r < R; r++)
        memcpy(w->qrows + r * d, w->q + ac_q_index(p, ch->b, ch->h, ch->i[r], 0), d * sizeof *w->qrows);
    mx_block rows = {w->qrows, R, d, d, true};
    double *qs = grow(&w->qs, MP_MAX_SLICES * R * d);
    if (!qs)
        return out_of_memory(w);
    int s_q = mx_slice_block(&rows, mx_exact_beta(d), qs, MP_MAX_SLICES, w->rem, w->line);
    if (s_q < 0)
        return slice_status(w, s_q, "q", ch->b, ch->h);
    for (int j0 = ch->jlo; j0 < ch->jhi; j0 += MP_KEYS_PER_BLOCK) {
        int j1 = j0 + MP_KEYS_PER_BLOCK < ch->jhi ? j0 + MP_KEYS_PER_BLOCK : ch->jhi;
        int status = chunk_scores_block(w, ch, s_q, j0, j1);
        if (status != AC_OK)
            return status;
    }
    return AC_OK;
}

/* Rows [r0, r1) in MPFR at prec bits: m, e_j = exp(s_j - m) in place,
 * l = sum e_j (mpfr_sum, one rounding), LSE = m + log(l). */
static void softmax_rows(void *arg, int r0, int r1)
{
    const mp_job *job = arg;
    mp_work *w = job->w;
    mp_chunk *ch = job->ch;
    mp_thread *th = thread_of(w, r0);
    const float *sinks = w->p->sinks;
    for (int r = r0; r < r1; r++) {
        if (!w->row_alive[r] && !sinks) {
            ch->lse[r] = -INFINITY;
            continue;
        }
        const uint8_t *vis = w->vis + (size_t)r * w->p->seqlen_k;
        bool first = !sinks;
        if (sinks) /* the sink joins the max and the denominator, with no value */
            mpfr_set_d(th->max, (double)sinks[ch->h], MPFR_RNDN);
        for (int j = ch->jlo; j < ch->jhi; j++)
            if (vis[j] && (first || mpfr_cmp(score_at(w, r, j), th->max) > 0)) {
                mpfr_set(th->max, score_at(w, r, j), MPFR_RNDN);
                first = false;
            }
        size_t n = 0;
        for (int j = ch->jlo; j < ch->jhi; j++) {
            if (!vis[j])
                continue;
            mpfr_ptr e = score_at(w, r, j);
            mpfr_sub(e, e, th->max, MPFR_RNDN);
            mx_exp(e, e, &w->exp, &th->exp);
            th->ptrs[n++] = e;
        }
        if (sinks) {
            mpfr_set_d(th->t, (double)sinks[ch->h], MPFR_RNDN);
            mpfr_sub(th->t, th->t, th->max, MPFR_RNDN);
            mpfr_exp(th->t, th->t, MPFR_RNDN);
            th->ptrs[n++] = th->t;
        }
        mpfr_sum(w->row_l[r], th->ptrs, n, MPFR_RNDN);
        mpfr_log(th->t, w->row_l[r], MPFR_RNDN);
        mpfr_add(th->t, th->t, th->max, MPFR_RNDN);
        ch->lse[r] = mpfr_get_d(th->t, MPFR_RNDN);
        /* after l: O takes the kept e only (e <= 1 stays what the exact P V slices hold),
         * the 1 / (1 - p) once per row in chunk_pv */
        for (int j = ch->jlo; w->p->dropout_p > 0.0 && j < ch->jhi; j++)
            if (vis[j] && ac_dropout_factor(w->p, ch->b, ch->h, ch->i[r], j) == 0.0)
                mpfr_set_zero(score_at(w, r, j), 1);
    }
    if (r0 > 0) /* on the helper thread, about to end: drop its constant caches (log 2) */
        mpfr_free_cache2(MPFR_FREE_LOCAL_CACHE);
}

/* Rows [r0, r1): slices of e_j for keys [j0, j1) straight from its bits,
 * es[(s * R + r) * nb + j - j0]; masked keys have e = 0. */
static void e_slices_rows(void *arg, int r0, int r1)
{
    const mp_job *job = arg;
    mp_work *w = job->w;
    size_t R = (size_t)job->ch->n, nb = (size_t)(job->j1 - job->j0);
    int beta = mx_exact_beta(nb);
    double quantum[MP_MAX_SLICES];
    for (int s = 0; s < job->s_e; s++)
        quantum[s] = ldexp(1.0, 1 - beta * (s + 1));
    for (int r = r0; r < r1; r++) {
        const uint8_t *vis = w->vis + (size_t)r * w->p->seqlen_k;
        for (int j = job->j0; j < job->j1; j++) {
            double *out = w->es.buf + (size_t)r * nb + (size_t)(j - job->j0);
            if (vis[j] && w->row_alive[r])
                mx_slice_bits(score_at(w, r, j), beta, job->s_e, quantum, out, R * nb);
            else
                for (int s = 0; s < job->s_e; s++)
                    out[(size_t)s * R * nb] = 0.0;
        }
    }
}

/* Rows [r0, r1): add this block's exact sum_j e_j V_jc into acc. */
static void pv_sum_rows(void *arg, int r0, int r1)
{
    const mp_job *job = arg;
    mp_work *w = job->w;
    mp_thread *th = thread_of(w, r0);
    size_t d = (size_t)ac_head_dim_v(w->p), R = (size_t)job->ch->n;
    for (int r = r0; r < r1; r++) {
        if (!w->row_alive[r])
            continue;
        for (size_t c = 0; c < d; c++) {
            size_t n = 0;
            for (int t = 0; t < job->s_v; t++)
                for (int s = 0; s < job->s_e; s++)
                    th->terms[n++] = w->cpv.buf[(((size_t)t * job->s_e + s) * R + (size_t)r) * d + c];
            mx_sum_doubles(th->part, th->terms, n, th->tmp, th->tmp_ptrs);
            mpfr_add(w->acc[(size_t)r * d + c], w->acc[(size_t)r * d + c], th->part, MPFR_RNDN);
        }
    }
}

/* sum_j e_j V_jc over keys [j0, j1), exactly up to the truncation of every
 * e_j below 2^-(prec+16), added into w->acc. */
static int chunk_pv_block(mp_work *w, mp_chunk *ch, int j0, int j1)
{
    const ac_problem *p = w->p;
    size_t d = (size_t)ac_head_dim_v(p), nb = (size_t)(j1 - j0), R = (size_t)ch->n;
    int beta = mx_exact_beta(nb);
    mp_job job = {.w = w, .ch = ch, .j0 = j0, .j1 = j1, .s_e = (w->prec + 17 + beta - 1) / beta};
    double *es = grow(&w->es, (size_t)job.s_e * R * nb);
    double *vs = grow(&w->vs, MP_MAX_SLICES * nb * d);
    if (!es || !vs)
        return out_of_memory(w);
    ref_parallel_rows(e_slices_rows, &job, 0, ch->n, R * nb * 8);
    mx_block vblock = {w->v + ac_v_index(p, ch->b, ch->h_kv, j0, 0), nb, d, v_row_stride(p), false};
    job.s_v = mx_slice_block(&vblock, beta, vs, MP_MAX_SLICES, w->rem, w->line);
    if (job.s_v < 0)
        return slice_status(w, job.s_v, "v", ch->b, ch->h_kv);
    if (job.s_v == 0)
        return AC_OK; /* V all zero here: nothing to add */
    double *cpv = grow(&w->cpv, (size_t)job.s_v * job.s_e * R * d);
    if (!cpv)
        return out_of_memory(w);
    for (int t = 0; t < job.s_v; t++)
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, job.s_e * (int)R, (int)d, (int)nb, 1.0, es, (int)nb,
                    vs + (size_t)t * nb * d, (int)d, 0.0, cpv + (size_t)t * job.s_e * R * d, (int)d);
    ref_parallel_rows(pv_sum_rows, &job, 0, ch->n, R * d * 1024);
    return AC_OK;
}

static int chunk_pv(mp_work *w, mp_chunk *ch)
{
    size_t d = (size_t)ac_head_dim_v(w->p);
    for (size_t i = 0; i < (size_t)ch->n * d; i++)
        mpfr_set_zero(w->acc[i], 1);
    for (int j0 = ch->jlo; j0 < ch->jhi; j0 += MP_KEYS_PER_BLOCK) {
        int j1 = j0 + MP_KEYS_PER_BLOCK < ch->jhi ? j0 + MP_KEYS_PER_BLOCK : ch->jhi;
        int status = chunk_pv_block(w, ch, j0, j1);
        if (status != AC_OK)
            return status;
    }
    mpfr_ptr quotient = w->th[0].t;
    for (int r = 0; r < ch->n; r++)
        for (size_t c = 0; c < d; c++) {
            double *out = &ch->o[(size_t)r * d + c];
            if (!w->row_alive[r]) {
                *out = 0.0;
                continue;
            }
            mpfr_div(quotient, w->acc[(size_t)r * d + c], w->row_l[r], MPFR_RNDN);
            if (w->p->dropout_p > 0.0) /* the kept P's 1 / (1 - p), 1 - p as the fp64 tier rounds it */
                mpfr_div_d(quotient, quotient, 1.0 - w->p->dropout_p, MPFR_RNDN);
            *out = mpfr_get_d(quotient, MPFR_RNDN);
        }
    return AC_OK;
}

static int run_chunk(mp_work *w, mp_chunk *ch)
{
    chunk_visibility(w, ch);
    int status = chunk_scores(w, ch);
    if (status != AC_OK)
        return status;
    mp_job job = {.w = w, .ch = ch};
    ref_parallel_rows(softmax_rows, &job, 0, ch->n, (size_t)ch->n * (size_t)(ch->jhi - ch->jlo) * 1024);
    return chunk_pv(w, ch);
}

/* ---- the public entry points ------------------------------------------------ */

size_t mx_total_rows(const ac_problem *p) { return (size_t)p->batch * p->heads_q * p->seqlen_q; }

int mx_check_args(const ac_problem *p, const double *q, const double *k, const double *v, int prec_bits, const char *fn,
                  ac_err *err)
{
    if (!p)
        return ac_fail(err, AC_ERR_INPUT, "%s: problem is NULL", fn);
    int status = ac_problem_validate(p, 0, err);
    if (status == AC_OK)
        status = ref_dropout_check(p, fn, err);
    if (status != AC_OK)
        return status;
    if (!q || !k || !v)
        return ac_fail(err, AC_ERR_INPUT, "%s: input tensor %s is NULL", fn, !q ? "q" : !k ? "k" : "v");
    if (prec_bits < MP_MIN_PREC || prec_bits > MP_MAX_PREC)
        return ac_fail(err, AC_ERR_INPUT, "%s: prec_bits must be in %d..%d, got %d", fn, MP_MIN_PREC, MP_MAX_PREC,
                       prec_bits);
    return AC_OK;
}

/* Runs the MPFR path on the row ids ids[0..n), sorted so rows of one head
 * are neighbours.  Results go to o/lse in the problem's layout, or, when
 * compact, to o[t * d + c] and lse[t] for the t-th id. */
static int mp_run(const ac_problem *p, const double *q, const double *k, const double *v, int prec, const size_t *ids,
                  size_t n, double *o, double *lse, bool compact, ac_err *err)
{
    mp_work w;
    int status = work_init(&w, p, q, k, v, prec, err);
    if (status != AC_OK)
        return status;
    size_t d = (size_t)ac_head_dim_v(p); /* O rows */
    double chunk_o[MP_ROWS_PER_CHUNK * AC_MAX_HEAD_DIM], chunk_lse[MP_ROWS_PER_CHUNK];
    for (size_t at = 0; at < n && status == AC_OK;) {
        size_t head = ids[at] / (size_t)p->seqlen_q;
        mp_chunk ch = {.b = (int)(head / (size_t)p->heads_q),
                       .h = (int)(head % (size_t)p->heads_q),
                       .o = chunk_o,
                       .lse = chunk_lse};
        ch.h_kv = ac_kv_head_of(p, ch.h);
        size_t first = at;
        while (at < n && ch.n < MP_ROWS_PER_CHUNK && ids[at] / (size_t)p->seqlen_q == head)
            ch.i[ch.n++] = (int)(ids[at++] % (size_t)p->seqlen_q);
        status = run_chunk(&w, &ch);
        for (int r = 0; r < ch.n && status == AC_OK; r++) {
            size_t t = first + (size_t)r;
            double *dst_o = compact ? o + t * d : o + ac_o_index(p, ch.b, ch.h, ch.i[r], 0);
            for (size_t c = 0; c < d; c++) /* a row's d elements are contiguous in both layouts */
                dst_o[c] = chunk_o[(size_t)r * d + c];
            lse[compact ? t : ac_lse_index(p, ch.b, ch.h, ch.i[r])] = chunk_lse[r];
        }
    }
    work_free(&w);
    return status;
}

/* Row id (b * Hq + h) * Nq + i is stored in the tensors (not a THD padding row). */
static bool row_stored(const ac_problem *p, size_t id)
{
    size_t head = id / (size_t)p->seqlen_q;
    int b = (int)(head / (size_t)p->heads_q), i = (int)(id % (size_t)p->seqlen_q);
    return i < ac_stored_rows(p, b, true);
}

int mx_cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

int ref_forward_mpfr(const ac_problem *p, const double *q, const double *k, const double *v, int prec_bits,
                     const size_t *rows, size_t n_rows, double *o, double *lse, ac_err *err)
{
    const char *fn = "ref_forward_mpfr";
    int status = mx_check_args(p, q, k, v, prec_bits, fn, err);
    if (status != AC_OK)
        return status;
    if (!o || !lse)
        return ac_fail(err, AC_ERR_INPUT, "%s: output %s is NULL", fn, !o ? "o" : "lse");
    size_t all = mx_total_rows(p), n = rows ? n_rows : all;
    for (size_t t = 0; rows && t < n_rows; t++)
        if (rows[t] >= all)
            return ac_fail(err, AC_ERR_INPUT, "%s: rows[%zu] = %zu is out of range (B*Hq*Nq = %zu)", fn, t, rows[t],
                           all);
    size_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids)
        return ac_fail(err, AC_ERR_ENV, "%s: out of memory for %zu row ids", fn, n);
    size_t kept = 0;
    for (size_t t = 0; t < n; t++) /* every row: THD stores no padding rows, so none is computed */
        if (rows || row_stored(p, t))
            ids[kept++] = rows ? rows[t] : t;
    n = kept;
    if (rows)
        qsort(ids, n, sizeof *ids, mx_cmp_size);
    status = mp_run(p, q, k, v, prec_bits, ids, n, o, lse, false, err);
    free(ids);
    return status;
}

int mx_forward_rows(const ac_problem *p, const double *q, const double *k, const double *v, int prec, const size_t *ids,
                    size_t n, double *o, double *lse, ac_err *err)
{
    return mp_run(p, q, k, v, prec, ids, n, o, lse, true, err);
}
