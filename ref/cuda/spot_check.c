/* ref/cuda/spot_check.c — the CPU spot check of the GPU reference: sampled
 * query rows (O, LSE, D, dQ) and key rows (dK, dV) recomputed in fp64 on the
 * CPU, straight from the definitions, and compared with the device's values
 * in units of max(ulp_t(x), u_t A), A the absolute-value shadow of x's sum
 * (ref_gpu.h).  Plain C: built with or without CUDA, tested on the CPU.
 *
 * A row is O(Nk d) work and a key O(G Nq d), so a handful of each costs well
 * under a second even at N = 131072. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../ref_gpu.h"

const char *ref_gpu_check_name(ref_gpu_check_output o)
{
    static const char *const names[REF_GPU_CHECK_COUNT] = {"O", "LSE", "dQ", "dK", "dV", "D"};
    return (unsigned)o < REF_GPU_CHECK_COUNT ? names[o] : "?";
}

typedef struct {
    const ac_problem *p;
    ac_dtype t;
    double u_t, u_f32;
    const double *q, *k, *v, *d_o;
    const ref_gpu_outputs *got;
    bool backward;
    ref_gpu_check *chk;
    double *prob; /* (Nk): P of the current row */
    double *sum, *shadow, *sum2, *shadow2; /* (d) */
} spot;

/* Keeps the element if it is the output's worst so far (the first of equals wins). */
static void keep_worst(spot *s, ref_gpu_check_output o, ref_gpu_disagreement x)
{
    ref_gpu_disagreement *w = &s->chk->worst[o];
    if (w->b < 0 || x.units > w->units)
        *w = x;
}

static void note(spot *s, ref_gpu_check_output o, double got, double want, double unit, int b, int h, int row, int col)
{
    double units;
    if (isfinite(got) && isfinite(want))
        units = fabs(got - want) / unit;
    else /* special values agree only with themselves */
        units = (got == want || (isnan(got) && isnan(want))) ? 0.0 : INFINITY;
    keep_worst(s, o, (ref_gpu_disagreement){units, b, h, row, col, got, want, unit});
}

static double unit_of(const spot *s, double x, double shadow)
{
    double ulp = isfinite(x) ? ac_ulp(s->t, x) : 1.0;
    double rel = s->u_t * shadow;
    return rel > ulp ? rel : ulp;
}

static double dot(const double *a, const double *b, int d)
{
    double sum = 0.0;
    for (int c = 0; c < d; c++)
        sum += a[c] * b[c];
    return sum;
}

static double dot_abs(const double *a, const double *b, int d)
{
    double sum = 0.0;
    for (int c = 0; c < d; c++)
        sum += fabs(a[c] * b[c]);
    return sum;
}

/* ---- query rows ------------------------------------------------------------ */

/* prob[j] <- P_ij over [lo, hi) (0 where masked); returns LSE_i (-inf: no key)
 * and *g_max = max_j sum_c |Q_ic K_jc| over the visible keys. */
static double row_probs(spot *s, int b, int h, int i, int lo, int hi, double *g_max)
{
    const ac_problem *p = s->p;
    int d = p->head_dim, hk = ac_kv_head_of(p, h);
    const double *qi = s->q + ac_q_index(p, b, h, i, 0);
    double m = -INFINITY;
    *g_max = 0.0;
    for (int j = lo; j < hi; j++) {
        s->prob[j] = -INFINITY;
        if (!ac_visible(p, b, h, i, j))
            continue;
        const double *kj = s->k + ac_kv_index(p, b, hk, j, 0);
        s->prob[j] = p->scale * dot(qi, kj, d);
        double g = dot_abs(qi, kj, d);
        *g_max = g > *g_max ? g : *g_max;
        m = s->prob[j] > m ? s->prob[j] : m;
    }
    if (m == -INFINITY) {
        for (int j = lo; j < hi; j++)
            s->prob[j] = 0.0;
        return -INFINITY;
    }
    double l = 0.0;
    for (int j = lo; j < hi; j++)
        l += s->prob[j] == -INFINITY ? 0.0 : exp(s->prob[j] - m);
    double lse = m + log(l);
    for (int j = lo; j < hi; j++)
        s->prob[j] = s->prob[j] == -INFINITY ? 0.0 : exp(s->prob[j] - lse);
    return lse;
}

/* D, dQ of row i: sum (dO O), and scale sum_j P (dP - D) K with its shadow. */
static void check_row_backward(spot *s, int b, int h, int i, int lo, int hi)
{
    const ac_problem *p = s->p;
    int d = p->head_dim, hk = ac_kv_head_of(p, h);
    const double *doi = s->d_o + ac_q_index(p, b, h, i, 0);
    double delta = dot(doi, s->sum, d), delta_abs = dot_abs(doi, s->sum, d);
    note(s, REF_GPU_CHECK_DELTA, s->got->delta[ac_lse_index(p, b, h, i)], delta, unit_of(s, delta, delta_abs), b, h, i,
         -1);
    for (int c = 0; c < d; c++)
        s->sum2[c] = s->shadow2[c] = 0.0;
    for (int j = lo; j < hi; j++) {
        if (s->prob[j] == 0.0)
            continue; /* masked, or underflowed: dS = 0 exactly */
        const double *vj = s->v + ac_kv_index(p, b, hk, j, 0), *kj = s->k + ac_kv_index(p, b, hk, j, 0);
        double ds = s->prob[j] * (dot(doi, vj, d) - delta);
        double weight = s->prob[j] * (dot_abs(doi, vj, d) + delta_abs);
        for (int c = 0; c < d; c++) {
            s->sum2[c] += ds * kj[c];
            s->shadow2[c] += weight * fabs(kj[c]);
        }
    }
    for (int c = 0; c < d; c++) {
        double x = p->scale * s->sum2[c];
        note(s, REF_GPU_CHECK_DQ, s->got->dq[ac_q_index(p, b, h, i, c)], x,
             unit_of(s, x, fabs(p->scale) * s->shadow2[c]), b, h, i, c);
    }
}

static void check_row(spot *s, int b, int h, int i)
{
    const ac_problem *p = s->p;
    int d = p->head_dim, hk = ac_kv_head_of(p, h), lo, hi;
    ac_visible_range(p, b, i, &lo, &hi);
    if (hi < lo)
        hi = lo;
    double g_max;
    double lse = row_probs(s, b, h, i, lo, hi, &g_max);
    double lse_unit = s->u_f32 * (1.0 + (isfinite(lse) ? fabs(lse) : 0.0) + fabs(p->scale) * g_max);
    note(s, REF_GPU_CHECK_LSE, s->got->lse[ac_lse_index(p, b, h, i)], lse, lse_unit, b, h, i, -1);
    for (int c = 0; c < d; c++)
        s->sum[c] = s->shadow[c] = 0.0;
    for (int j = lo; j < hi; j++) {
        if (s->prob[j] == 0.0)
            continue;
        const double *vj = s->v + ac_kv_index(p, b, hk, j, 0);
        for (int c = 0; c < d; c++) {
            s->sum[c] += s->prob[j] * vj[c];
            s->shadow[c] += s->prob[j] * fabs(vj[c]);
        }
    }
    for (int c = 0; c < d; c++)
        note(s, REF_GPU_CHECK_O, s->got->o[ac_q_index(p, b, h, i, c)], s->sum[c], unit_of(s, s->sum[c], s->shadow[c]),
             b, h, i, c);
    if (s->backward)
        check_row_backward(s, b, h, i, lo, hi); /* s->sum holds the CPU's O row */
}

/* ---- key rows ----------------------------------------------------------------- */

/* Adds query row i's share to dK_j, dV_j (sum, sum2) and their shadows, with
 * P from the device's LSE and dS from its D, as the device did. */
static void add_key_share(spot *s, int b, int h, int i, int j)
{
    const ac_problem *p = s->p;
    int d = p->head_dim, hk = ac_kv_head_of(p, h);
    size_t at = ac_lse_index(p, b, h, i);
    double lse = s->got->lse[at];
    if (lse == -INFINITY)
        return;
    if (!isfinite(lse)) { /* NaN or +inf where a visible key exists: wrong in any case */
        keep_worst(s, REF_GPU_CHECK_LSE, (ref_gpu_disagreement){INFINITY, b, h, i, -1, lse, NAN, 1.0});
        return;
    }
    const double *qi = s->q + ac_q_index(p, b, h, i, 0), *doi = s->d_o + ac_q_index(p, b, h, i, 0);
    const double *oi = s->got->o + ac_q_index(p, b, h, i, 0);
    const double *kj = s->k + ac_kv_index(p, b, hk, j, 0), *vj = s->v + ac_kv_index(p, b, hk, j, 0);
    double prob = exp(p->scale * dot(qi, kj, d) - lse);
    if (prob == 0.0)
        return;
    double ds = prob * (dot(doi, vj, d) - s->got->delta[at]);
    double weight = prob * (dot_abs(doi, vj, d) + dot_abs(doi, oi, d));
    for (int c = 0; c < d; c++) {
        s->sum[c] += ds * qi[c];
        s->shadow[c] += weight * fabs(qi[c]);
        s->sum2[c] += prob * doi[c];
        s->shadow2[c] += prob * fabs(doi[c]);
    }
}

static void check_key(spot *s, int b, int hk, int j)
{
    const ac_problem *p = s->p;
    int d = p->head_dim, group = p->heads_q / p->heads_kv, nq = ac_seqlen_q_of(p, b);
    for (int c = 0; c < d; c++)
        s->sum[c] = s->shadow[c] = s->sum2[c] = s->shadow2[c] = 0.0;
    for (int h = hk * group; h < (hk + 1) * group; h++)
        for (int i = 0; i < nq; i++)
            if (ac_visible(p, b, h, i, j))
                add_key_share(s, b, h, i, j);
    for (int c = 0; c < d; c++) {
        size_t at = ac_kv_index(p, b, hk, j, c);
        double dk = p->scale * s->sum[c];
        note(s, REF_GPU_CHECK_DK, s->got->dk[at], dk, unit_of(s, dk, fabs(p->scale) * s->shadow[c]), b, hk, j, c);
        note(s, REF_GPU_CHECK_DV, s->got->dv[at], s->sum2[c], unit_of(s, s->sum2[c], s->shadow2[c]), b, hk, j, c);
    }
}

/* ---- sampling ------------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* n distinct indices in [0, total), sorted: all of them when n >= total. */
static size_t *sample(size_t total, size_t *n, uint64_t seed)
{
    if (*n > total)
        *n = total;
    size_t *idx = malloc((*n ? *n : 1) * sizeof *idx);
    if (!idx)
        return NULL;
    if (*n == total) {
        for (size_t x = 0; x < total; x++)
            idx[x] = x;
        return idx;
    }
    uint64_t state = seed;
    size_t have = 0;
    while (have < *n) { /* insertion into a sorted array: n is a handful */
        size_t x = (size_t)(splitmix64(&state) % total), at = have;
        while (at > 0 && idx[at - 1] > x)
            at--;
        if (at > 0 && idx[at - 1] == x)
            continue;
        memmove(idx + at + 1, idx + at, (have - at) * sizeof *idx);
        idx[at] = x;
        have++;
    }
    return idx;
}

/* Sequence-major numbering of the valid rows (heads = Hq, lengths nq_b) or
 * keys (Hkv, nk_b): index -> (b, h, i). */
static size_t count_valid(const ac_problem *p, bool keys)
{
    size_t total = 0;
    for (int b = 0; b < p->batch; b++)
        total += (size_t)(keys ? p->heads_kv : p->heads_q) * (keys ? ac_seqlen_k_of(p, b) : ac_seqlen_q_of(p, b));
    return total;
}

static void locate(const ac_problem *p, bool keys, size_t x, int *b, int *h, int *i)
{
    *h = *i = 0; /* x < count_valid: always set below */
    for (*b = 0; *b < p->batch; (*b)++) {
        size_t len = (size_t)(keys ? ac_seqlen_k_of(p, *b) : ac_seqlen_q_of(p, *b));
        size_t here = (size_t)(keys ? p->heads_kv : p->heads_q) * len;
        if (x < here) {
            *h = (int)(x / len);
            *i = (int)(x % len);
            return;
        }
        x -= here;
    }
}

/* ---- the check ------------------------------------------------------------------- */

static int check_args(const ac_problem *p, ac_dtype t, const double *q, const double *k, const double *v,
                      const double *d_o, const ref_gpu_outputs *got, const ref_gpu_check *chk, ac_err *err)
{
    int status = ac_problem_validate(p, SIZE_MAX, err);
    if (status == AC_OK)
        status = ref_gpu_supports(p, err);
    if (status != AC_OK)
        return status;
    if ((unsigned)t >= AC_DTYPE_COUNT)
        return ac_fail(err, AC_ERR_INPUT, "ref_gpu_spot_check: unknown dtype %d", (int)t);
    if (!q || !k || !v || !got || !got->o || !got->lse || !chk)
        return ac_fail(err, AC_ERR_INPUT,
                       "ref_gpu_spot_check: NULL argument (q, k, v, got, got->o, got->lse and chk are required)");
    if (d_o && !(got->dq && got->dk && got->dv && got->delta))
        return ac_fail(err, AC_ERR_INPUT, "ref_gpu_spot_check: d_o given but got->dq, dk, dv or delta is NULL");
    return AC_OK;
}

static void finish(ref_gpu_check *chk)
{
    chk->agrees = true;
    chk->worst_output = REF_GPU_CHECK_O;
    for (int o = 0; o < REF_GPU_CHECK_COUNT; o++) {
        if (!(chk->worst[o].units <= AC_CERT_MAX_ULP))
            chk->agrees = false;
        if (chk->worst[o].units > chk->worst[chk->worst_output].units)
            chk->worst_output = (ref_gpu_check_output)o;
    }
}

int ref_gpu_spot_check(const ac_problem *p, ac_dtype t, const double *q, const double *k, const double *v,
                       const double *d_o, const ref_gpu_outputs *got, size_t n_rows, size_t n_keys, uint64_t seed,
                       ref_gpu_check *chk, ac_err *err)
{
    int status = check_args(p, t, q, k, v, d_o, got, chk, err);
    if (status != AC_OK)
        return status;
    memset(chk, 0, sizeof *chk);
    for (int o = 0; o < REF_GPU_CHECK_COUNT; o++)
        chk->worst[o].b = -1;
    size_t nk = (size_t)p->seqlen_k, d = (size_t)p->head_dim;
    spot s = {p,
              t,
              ac_unit_roundoff(t),
              ac_unit_roundoff(AC_F32),
              q,
              k,
              v,
              d_o,
              got,
              d_o != NULL,
              chk,
              malloc(nk * sizeof(double)),
              malloc(d * sizeof(double)),
              malloc(d * sizeof(double)),
              malloc(d * sizeof(double)),
              malloc(d * sizeof(double))};
    size_t *rows = sample(count_valid(p, false), &n_rows, seed ^ 0x5157u);
    size_t *keys = s.backward ? sample(count_valid(p, true), &n_keys, seed ^ 0x4b45u) : NULL;
    if (!s.prob || !s.sum || !s.shadow || !s.sum2 || !s.shadow2 || !rows || (s.backward && !keys))
        status = ac_fail(err, AC_ERR_ENV, "ref_gpu_spot_check: out of memory");
    for (size_t x = 0; status == AC_OK && x < n_rows; x++) {
        int b, h, i;
        locate(p, false, rows[x], &b, &h, &i);
        check_row(&s, b, h, i);
    }
    for (size_t x = 0; status == AC_OK && s.backward && x < n_keys; x++) {
        int b, hk, j;
        locate(p, true, keys[x], &b, &hk, &j);
        check_key(&s, b, hk, j);
    }
    chk->rows_checked = status == AC_OK ? n_rows : 0;
    chk->keys_checked = status == AC_OK && s.backward ? n_keys : 0;
    finish(chk);
    free(rows);
    free(keys);
    free(s.prob), free(s.sum), free(s.shadow), free(s.sum2), free(s.shadow2);
    return status;
}
