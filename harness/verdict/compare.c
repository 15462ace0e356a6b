/* harness/verdict/compare.c — the comparator: one kernel output against the reference,
 * element by element, into ac_metrics (see harness.h for the contract).
 *
 * Only the problem's own elements are looked at: rows i < nq_b of Q-like
 * outputs and LSE, keys j < nk_b of dK/dV; padding is unspecified.  Elements
 * are visited as (b, h, row, col) through ac_index, so both layouts give the
 * same metrics at the same places.
 *
 * Special values are classes of their own, decided before any magnitude (as
 * SLEEF's tester does): an element in a class other than a finite wrong zero
 * does not enter the ulp/scaled/abs statistics, whose errors would be NaN or
 * infinite and would hide the other elements.  Nothing here allocates. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness/verdict/compare.h"

const char *ac_output_name(ac_output o)
{
    static const char *const names[AC_OUT_COUNT] = {"O", "LSE", "dQ", "dK", "dV"};
    return (unsigned)o < AC_OUT_COUNT ? names[o] : "?";
}

ac_dtype ac_output_dtype(ac_dtype t, ac_output which) { return which == AC_OUT_LSE ? AC_F32 : t; }

const char *ac_special_name(ac_special s)
{
    static const char *const names[AC_SPECIAL_COUNT] = {
        [AC_SPECIAL_UNWRITTEN] = "unwritten", [AC_SPECIAL_UNEXPECTED_NAN] = "unexpected-nan",
        [AC_SPECIAL_OVERFLOW] = "overflow", [AC_SPECIAL_LOST] = "lost-special", [AC_SPECIAL_WRONG_ZERO] = "wrong-zero",
    };
    return (unsigned)s < AC_SPECIAL_COUNT ? names[s] : "?";
}

size_t ac_metrics_special(const ac_metrics *m, ac_special s)
{
    switch (s) {
    case AC_SPECIAL_UNWRITTEN: return m->n_unwritten;
    case AC_SPECIAL_UNEXPECTED_NAN: return m->n_unexpected_nan;
    case AC_SPECIAL_OVERFLOW: return m->n_overflow;
    case AC_SPECIAL_LOST: return m->n_lost_special;
    case AC_SPECIAL_WRONG_ZERO: return m->n_wrong_zero;
    default: return 0;
    }
}

size_t ac_metrics_specials(const ac_metrics *m)
{
    size_t n = 0;
    for (int s = 0; s < AC_SPECIAL_COUNT; s++)
        n += ac_metrics_special(m, (ac_special)s);
    return n;
}

/* ---- poison ------------------------------------------------------------ */

void ac_poison(ac_dtype t, void *buf, size_t n)
{
    uint32_t bits = ac_dtype_poison(t);
    for (size_t i = 0; i < n; i++)
        ac_bits_put(t, buf, i, bits);
}

void ac_poison_f32(float *buf, size_t n) { ac_poison(AC_F32, buf, n); }

bool ac_is_poison(ac_dtype t, const void *buf, size_t i) { return ac_bits_get(t, buf, i) == ac_dtype_poison(t); }

/* ---- one element ------------------------------------------------------- */

typedef struct {
    ac_metrics *m;
    ac_dtype t;    /* the dtype of the stored output (f32 for LSE) */
    double u;      /* its unit roundoff */
    bool is_lse;
    double sum_ulp;
    double min_normal; /* of the stored dtype: the means below skip elements under it */
    double sum_abs, sum_naive_abs, sum_escale;
    size_t n_mag;  /* elements in the magnitudes */
    size_t n_mean; /* ...of which in the means: |reference| >= min_normal */
    /* counting mode (ac_compare_count_over): elements over limit go to `over` */
    ac_metrics *over;
    double limit;
    size_t *row_counts; /* per query row (key for dK/dV) */
} accum;

typedef enum { EL_OK, EL_UNWRITTEN, EL_UNEXPECTED_NAN, EL_OVERFLOW, EL_LOST_SPECIAL, EL_WRONG_ZERO } el_class;

static void note_special(accum *a, el_class cls, ac_where w, double x, double y)
{
    ac_metrics *m = a->m;
    if (ac_metrics_specials(m) == 0) {
        m->first_special = w;
        m->special_ref = x;
        m->special_got = y;
    }
    switch (cls) {
    case EL_UNWRITTEN: m->n_unwritten++; break;
    case EL_UNEXPECTED_NAN: m->n_unexpected_nan++; break;
    case EL_OVERFLOW: m->n_overflow++; break;
    case EL_LOST_SPECIAL: m->n_lost_special++; break;
    case EL_WRONG_ZERO: m->n_wrong_zero++; break;
    case EL_OK: break;
    }
}

/* A non-finite reference: the kernel must give the same special value.  The
 * one reference non-finite value is LSE = -inf on a row with no visible key,
 * where +inf (FlashAttention 2) is an accepted convention too. */
static el_class classify_special_ref(const accum *a, double x, double y)
{
    if (isnan(x))
        return isnan(y) ? EL_OK : EL_LOST_SPECIAL;
    if (y == x)
        return EL_OK;
    if (a->is_lse && x == -INFINITY && y == INFINITY)
        return EL_OK;
    return EL_LOST_SPECIAL;
}

static bool update_max(double err, double *max, ac_where *at, ac_where w)
{
    if (err > *max) {
        *max = err;
        *at = w;
        return true;
    }
    return false;
}

/* Returns the element's scaled error (0 where E == 0). */
static double add_magnitudes(accum *a, ac_where w, double x, double y, double e, const double *naive_x)
{
    ac_metrics *m = a->m;
    double abs_err = fabs(y - x);
    double ulp_err = abs_err / ac_ulp(a->t, x);
    /* The means skip references below the smallest normal (0 included): rounding
     * there is absolute, eta/2 a step, and an exact-zero reference reached through
     * cancellation leaves every f32 computation its noise, so a ratio of means
     * would count rounding steps, not precision (a correct f32 dQ near 1e-44
     * read 2.3x the naive: 14 eta against 6).  The scaled error judges them. */
    bool in_mean = fabs(x) >= a->min_normal;
    a->n_mag++;
    a->n_mean += in_mean;
    a->sum_ulp += ulp_err;
    if (in_mean) {
        a->sum_abs += abs_err;
        a->sum_escale += e;
    }
    if (abs_err > m->max_abs)
        m->max_abs = abs_err;
    update_max(ulp_err, &m->max_ulp, &m->at_max_ulp, w);
    double scaled = e > 0.0 ? abs_err / (a->u * e) : 0.0;
    if (e > 0.0 && update_max(scaled, &m->max_scaled, &m->at_max_scaled, w)) {
        m->worst_ref = x;
        m->worst_got = y;
        m->worst_escale = e;
    }
    if (naive_x) {
        /* A non-finite naive value where the reference is finite: the baseline failed. */
        double naive_err = isfinite(*naive_x) ? fabs(*naive_x - x) : INFINITY;
        if (in_mean)
            a->sum_naive_abs += naive_err;
        if (naive_err > m->naive_max_abs)
            m->naive_max_abs = naive_err;
    }
    return scaled;
}

/* Classifies one element and feeds the statistics.  Returns its class; *scaled
 * its scaled error when it entered the magnitudes. */
static el_class judge_element(accum *a, ac_where w, uint32_t got_bits, double x, double e, const double *naive_x,
                              double *scaled)
{
    if (got_bits == ac_dtype_poison(a->t)) {
        note_special(a, EL_UNWRITTEN, w, x, NAN);
        return EL_UNWRITTEN;
    }
    double y = ac_widen(a->t, got_bits);
    el_class cls = EL_OK;
    if (!isfinite(x))
        cls = classify_special_ref(a, x, y);
    else if (isnan(y))
        cls = EL_UNEXPECTED_NAN;
    else if (isinf(y) && y == ac_round(a->t, x))
        return EL_OK; /* x beyond the dtype's range: the correctly rounded output is this Inf */
    else if (isinf(y))
        cls = EL_OVERFLOW;
    else if (e == 0.0 && y != x)
        cls = EL_WRONG_ZERO; /* E == 0: x is an exact zero, any other value is wrong */
    if (cls != EL_OK) {
        note_special(a, cls, w, x, y);
        return cls;
    }
    if (!isfinite(x))
        return EL_OK; /* matching special values: nothing to measure */
    if (y == 0.0 && x != 0.0 && fabs(x) > AC_WRONG_ZERO_SCALED * a->u * e) {
        note_special(a, EL_WRONG_ZERO, w, x, y);
        cls = EL_WRONG_ZERO;
    }
    *scaled = add_magnitudes(a, w, x, y, e, naive_x);
    return cls;
}

/* judge_element, and in counting mode the element's place when it is over the limit. */
static el_class compare_element(accum *a, ac_where w, uint32_t got_bits, double x, double e, const double *naive_x)
{
    double scaled = 0.0;
    el_class cls = judge_element(a, w, got_bits, x, e, naive_x, &scaled);
    if (a->over && (cls != EL_OK || scaled > a->limit)) {
        a->over->n_over++;
        if (w.h < AC_DIAG_MAX_HEADS)
            a->over->over_per_head[w.h]++;
        a->row_counts[w.row]++;
    }
    return cls;
}

/* ---- rows and the fully-masked-row convention --------------------------- */

static bool row_has_visible_key(const ac_problem *p, int b, int h, int i)
{
    int lo, hi;
    ac_visible_range(p, b, i, &lo, &hi);
    if (hi <= lo)
        return false;
    if (!p->dense_mask)
        return true;
    for (int j = lo; j < hi; j++)
        if (ac_visible(p, b, h, i, j))
            return true;
    return false;
}

typedef struct {
    const void *got;
    const double *ref, *escale, *naive;
} tensors;

/* One row of a Q-like output or of LSE.  A row with no visible key is also
 * classified as a whole: "zero" when every element is +-0 (LSE: +-inf),
 * "nan" when any is NaN. */
static void compare_q_row(accum *a, const ac_problem *p, const tensors *tn, int b, int h, int i)
{
    bool masked = !row_has_visible_key(p, b, h, i);
    bool all_zero = true, any_nan = false, lse_posinf = false;
    int ncols = a->is_lse ? 1 : p->head_dim;
    for (int c = 0; c < ncols; c++) {
        size_t at = a->is_lse ? ac_lse_index(p, b, h, i) : ac_q_index(p, b, h, i, c);
        ac_where w = {b, h, i, a->is_lse ? -1 : c};
        uint32_t bits = ac_bits_get(a->t, tn->got, at);
        compare_element(a, w, bits, tn->ref[at], tn->escale[at], tn->naive ? tn->naive + at : NULL);
        if (!masked)
            continue;
        double y = bits == ac_dtype_poison(a->t) ? NAN : ac_widen(a->t, bits);
        any_nan |= isnan(y) && bits != ac_dtype_poison(a->t);
        all_zero &= a->is_lse ? isinf(y) : y == 0.0;
        lse_posinf |= a->is_lse && y == INFINITY;
    }
    if (!masked)
        return;
    a->m->masked_rows++;
    a->m->masked_rows_zero += all_zero;
    a->m->masked_rows_nan += any_nan;
    a->m->masked_rows_lse_posinf += lse_posinf;
}

static void compare_k_rows(accum *a, const ac_problem *p, const tensors *tn, int b, int h_kv)
{
    int nk = ac_seqlen_k_of(p, b);
    for (int j = 0; j < nk; j++)
        for (int c = 0; c < p->head_dim; c++) {
            size_t at = ac_kv_index(p, b, h_kv, j, c);
            ac_where w = {b, h_kv, j, c};
            compare_element(a, w, ac_bits_get(a->t, tn->got, at), tn->ref[at], tn->escale[at],
                            tn->naive ? tn->naive + at : NULL);
        }
}

static double ratio(double kernel, double naive)
{
    if (kernel == 0.0 && naive == 0.0)
        return 0.0;
    return naive == 0.0 ? INFINITY : kernel / naive;
}

static void finish(accum *a)
{
    ac_metrics *m = a->m;
    m->n_measured = a->n_mag;
    if (a->n_mag == 0) {
        m->max_ulp = m->max_scaled = 0.0;
        return;
    }
    m->mean_ulp = a->sum_ulp / (double)a->n_mag;
    double n = a->n_mean > 0 ? (double)a->n_mean : 1.0; /* none: the sums are 0 */
    m->n_mean = a->n_mean;
    m->mean_abs = a->sum_abs / n;
    m->mean_escale = a->sum_escale / n;
    if (m->max_scaled < 0.0)
        m->max_scaled = 0.0; /* every element had E == 0 and matched */
    if (!m->has_naive)
        return;
    m->naive_mean_abs = a->sum_naive_abs / n;
    m->vs_naive_max = ratio(m->max_abs, m->naive_max_abs);
    m->vs_naive_mean = ratio(m->mean_abs, m->naive_mean_abs);
}

static void walk(const ac_inputs *in, ac_output which, const tensors *tn, accum *a)
{
    const ac_problem *p = &in->p;
    ac_metrics *m = a->m;
    bool k_like = which == AC_OUT_DK || which == AC_OUT_DV;
    for (int b = 0; b < p->batch; b++) {
        if (k_like) {
            for (int h = 0; h < p->heads_kv; h++)
                compare_k_rows(a, p, tn, b, h);
            m->n_compared += (size_t)p->heads_kv * ac_seqlen_k_of(p, b) * p->head_dim;
            continue;
        }
        int nq = ac_seqlen_q_of(p, b);
        for (int h = 0; h < p->heads_q; h++)
            for (int i = 0; i < nq; i++)
                compare_q_row(a, p, tn, b, h, i);
        m->n_compared += (size_t)p->heads_q * nq * (a->is_lse ? 1 : p->head_dim);
    }
}

static accum accum_for(const ac_inputs *in, ac_output which, ac_metrics *m)
{
    static const ac_where nowhere = {-1, -1, -1, -1};
    memset(m, 0, sizeof *m);
    m->present = true;
    m->at_max_ulp = m->at_max_scaled = m->first_special = nowhere;
    m->max_ulp = m->max_scaled = -1.0; /* so the first element sets the place */
    m->worst_ref = m->worst_got = m->worst_escale = NAN;
    accum a = {.m = m, .t = ac_output_dtype(ac_inputs_out_dtype(in), which), .is_lse = which == AC_OUT_LSE};
    a.u = ac_unit_roundoff(a.t);
    a.min_normal = ac_min_subnormal(a.t) / (2.0 * a.u);
    return a;
}

void ac_compare(const ac_inputs *in, ac_output which, const void *got, const double *ref,
                const double *escale, const double *naive, ac_metrics *m)
{
    accum a = accum_for(in, which, m);
    m->has_naive = naive != NULL;
    tensors tn = {got, ref, escale, naive};
    walk(in, which, &tn, &a);
    finish(&a);
}

/* The rows with elements over budget: how many, their range, the first AC_DIAG_MAX_ROWS with counts. */
static void list_rows(ac_metrics *m, const size_t *counts, int n_rows)
{
    m->n_rows_over = m->n_rows_listed = 0;
    m->first_row_over = m->last_row_over = -1;
    for (int r = 0; r < n_rows; r++) {
        if (!counts[r])
            continue;
        if (m->n_rows_over++ == 0)
            m->first_row_over = r;
        m->last_row_over = r;
        if (m->n_rows_listed < AC_DIAG_MAX_ROWS)
            m->rows_over[m->n_rows_listed++] = (ac_row_count){r, counts[r]};
    }
}

int ac_compare_count_over(const ac_inputs *in, ac_output which, const void *got, const double *ref,
                          const double *escale, double limit, ac_metrics *m, ac_err *err)
{
    const ac_problem *p = &in->p;
    bool k_like = which == AC_OUT_DK || which == AC_OUT_DV;
    int n_rows = k_like ? p->seqlen_k : p->seqlen_q;
    ac_metrics scratch; /* the statistics of this second walk are thrown away */
    accum a = accum_for(in, which, &scratch);
    a.over = m;
    a.limit = limit;
    a.row_counts = calloc((size_t)n_rows + 1, sizeof(size_t));
    if (!a.row_counts)
        return ac_fail(err, AC_ERR_ENV, "diagnosis: out of memory for %d row counts", n_rows);
    m->n_over = 0;
    memset(m->over_per_head, 0, sizeof m->over_per_head);
    m->n_heads = k_like ? p->heads_kv : p->heads_q;
    tensors tn = {got, ref, escale, NULL};
    walk(in, which, &tn, &a);
    list_rows(m, a.row_counts, n_rows);
    free(a.row_counts);
    return AC_OK;
}
