/* ref/certify.c — certification: how far the fp64 reference is from the
 * MPFR one, in output-dtype ulps, on rows sampled from a seed.
 *
 * Rows are drawn with splitmix64 from the seed, distinct, skipping padding
 * rows (i >= nq_b); when the problem has no more real rows than asked for,
 * all of them are checked.  A problem without any real row checks nothing
 * and is certified (rows_checked = 0 says so).  The distance of an O element
 * is |o64 - ompfr| / ulp(out_dtype, ompfr), two exact zeros being 0 ulps and
 * a NaN infinitely far; LSE is compared in absolute terms (both -inf: 0). */
#include <math.h>
#include <stdlib.h>

#include "mpfr_exact.h"
#include "ref.h"
#include "rng.h"

static bool is_real_row(const ac_problem *p, size_t id)
{
    size_t head = id / (size_t)p->seqlen_q;
    int b = (int)(head / (size_t)p->heads_q), i = (int)(id % (size_t)p->seqlen_q);
    return i < ac_seqlen_q_of(p, b);
}

/* n distinct non-padding row ids drawn from seed, sorted (all of them when
 * there are no more than n).  Returns how many. */
static size_t sample_rows(const ac_problem *p, size_t n, uint64_t seed, size_t *ids)
{
    size_t all = mx_total_rows(p), real = 0;
    for (int b = 0; b < p->batch; b++)
        real += (size_t)p->heads_q * (size_t)ac_seqlen_q_of(p, b);
    size_t got = 0;
    if (real <= n) {
        for (size_t id = 0; id < all; id++)
            if (is_real_row(p, id))
                ids[got++] = id;
        return got;
    }
    uint64_t state = seed;
    while (got < n) {
        size_t id = (size_t)(ac_splitmix64(&state) % all);
        bool dup = !is_real_row(p, id);
        for (size_t t = 0; t < got && !dup; t++)
            dup = ids[t] == id;
        if (!dup)
            ids[got++] = id;
    }
    qsort(ids, got, sizeof *ids, mx_cmp_size);
    return got;
}

/* |o64 - ompfr| in ulps of out_dtype at ompfr; two exact zeros are 0 ulps. */
static double ulp_distance(ac_dtype t, double o64, double ompfr)
{
    if (o64 == ompfr)
        return 0.0;
    if (isnan(o64))
        return INFINITY;
    return fabs(o64 - ompfr) / ac_ulp(t, ompfr);
}

static double lse_distance(double a, double b)
{
    if (a == b)
        return 0.0; /* both -inf included */
    return isnan(a) ? INFINITY : fabs(a - b);
}

int ref_certify(const ac_problem *p, ac_dtype out_dtype, const double *q, const double *k, const double *v,
                const double *o_fp64, const double *lse_fp64, size_t n_rows, uint64_t seed, int prec_bits,
                ac_cert *cert, ac_err *err)
{
    const char *fn = "ref_certify";
    int status = mx_check_args(p, q, k, v, prec_bits, fn, err);
    if (status != AC_OK)
        return status;
    if (!o_fp64 || !lse_fp64 || !cert)
        return ac_fail(err, AC_ERR_INPUT, "%s: %s is NULL", fn, !o_fp64 ? "o_fp64" : !lse_fp64 ? "lse_fp64" : "cert");
    if ((int)out_dtype < 0 || out_dtype >= AC_DTYPE_COUNT)
        return ac_fail(err, AC_ERR_INPUT, "%s: unknown out_dtype %d", fn, (int)out_dtype);
    if (n_rows > mx_total_rows(p))
        n_rows = mx_total_rows(p);
    size_t d = (size_t)ac_head_dim_v(p); /* O rows */
    size_t *ids = malloc((n_rows ? n_rows : 1) * sizeof *ids);
    double *o = malloc((n_rows ? n_rows : 1) * d * sizeof *o);
    double *lse = malloc((n_rows ? n_rows : 1) * sizeof *lse);
    if (!ids || !o || !lse) {
        free(ids);
        free(o);
        free(lse);
        return ac_fail(err, AC_ERR_ENV, "%s: out of memory for %zu rows", fn, n_rows);
    }
    size_t n = sample_rows(p, n_rows, seed, ids);
    status = mx_forward_rows(p, q, k, v, prec_bits, ids, n, o, lse, err);
    ac_cert c = {.rows_checked = n};
    for (size_t t = 0; t < n && status == AC_OK; t++) {
        size_t head = ids[t] / (size_t)p->seqlen_q;
        int b = (int)(head / (size_t)p->heads_q), h = (int)(head % (size_t)p->heads_q);
        int i = (int)(ids[t] % (size_t)p->seqlen_q);
        const double *row64 = o_fp64 + ac_o_index(p, b, h, i, 0);
        for (size_t cc = 0; cc < d; cc++)
            c.max_ulp_o = fmax(c.max_ulp_o, ulp_distance(out_dtype, row64[cc], o[t * d + cc]));
        c.max_abs_lse = fmax(c.max_abs_lse, lse_distance(lse_fp64[ac_lse_index(p, b, h, i)], lse[t]));
    }
    c.certified = c.max_ulp_o <= AC_CERT_MAX_ULP;
    if (status == AC_OK)
        *cert = c;
    free(ids);
    free(o);
    free(lse);
    return status;
}
