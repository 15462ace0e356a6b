/* harness/verdict/compare.c — the comparator: one kernel output against the reference,
 * element by element, into ac_metrics (see harness.h for the contract).
 *
 * Only the problem's own elements are looked at: rows i < nq_b of Q-like
 * outputs and LSE, keys j < nk_b of dK/dV, dBias entries (mb, mh, i, j) some
 * sequence it broadcasts over has; padding is unspecified.  Elements are
 * visited as (b, h, row, col) through ac_tensor_index, so every layout gives
 * the same metrics at the same places (dBias: (mb, mh, i, j); dSink: h).
 *
 * Special values are classes of their own, decided before any magnitude (as
 * SLEEF's tester does): an element in a class other than a finite wrong zero
 * does not enter the ulp/scaled/abs statistics, whose errors would be NaN or
 * infinite and would hide the other elements.
 *
 * The walk runs in parallel (ref/parallel.h) in tasks of consecutive rows of
 * one (b, h), fixed by the problem, merged in walk order: compare_walk.c.
 * This file judges one element and one row into a task's partial, and merges
 * and finishes the partials. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness/verdict/compare.h"
#include "harness/verdict/compare_internal.h"

const char *ac_output_name(ac_output o)
{
    static const char *const names[AC_OUT_COUNT] = {"O", "LSE", "dQ", "dK", "dV", "dSink", "dBias"};
    return (unsigned)o < AC_OUT_COUNT ? names[o] : "?";
}

ac_dtype ac_output_dtype(ac_dtype t, ac_output which)
{
    return which == AC_OUT_LSE || which == AC_OUT_DSINK ? AC_F32 : t;
}

const char *ac_special_name(ac_special s)
{
    static const char *const names[AC_SPECIAL_COUNT] = {
        [AC_SPECIAL_UNWRITTEN] = "unwritten",   [AC_SPECIAL_UNEXPECTED_NAN] = "unexpected-nan",
        [AC_SPECIAL_OVERFLOW] = "overflow",     [AC_SPECIAL_LOST] = "lost-special",
        [AC_SPECIAL_WRONG_ZERO] = "wrong-zero",
    };
    return (unsigned)s < AC_SPECIAL_COUNT ? names[s] : "?";
}

size_t ac_metrics_special(const ac_metrics *m, ac_special s)
{
    switch (s) {
    case AC_SPECIAL_UNWRITTEN:
        return m->n_unwritten;
    case AC_SPECIAL_UNEXPECTED_NAN:
        return m->n_unexpected_nan;
    case AC_SPECIAL_OVERFLOW:
        return m->n_overflow;
    case AC_SPECIAL_LOST:
        return m->n_lost_special;
    case AC_SPECIAL_WRONG_ZERO:
        return m->n_wrong_zero;
    default:
        return 0;
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

static const ac_where nowhere = {-1, -1, -1, -1};

void cmp_partial_init(cmp_partial *pt)
{
    memset(pt, 0, sizeof *pt);
    pt->max_ulp = pt->max_scaled = -1.0; /* so the first element sets the place */
    pt->at_max_ulp = pt->at_max_scaled = pt->first_special = nowhere;
    pt->worst_ref = pt->worst_got = pt->worst_escale = NAN;
}

static size_t partial_specials(const cmp_partial *pt)
{
    return pt->n_unwritten + pt->n_unexpected_nan + pt->n_overflow + pt->n_lost_special + pt->n_wrong_zero;
}

typedef enum { EL_OK, EL_UNWRITTEN, EL_UNEXPECTED_NAN, EL_OVERFLOW, EL_LOST_SPECIAL, EL_WRONG_ZERO } el_class;

static void note_special(cmp_partial *pt, el_class cls, ac_where w, double x, double y)
{
    if (partial_specials(pt) == 0) {
        pt->first_special = w;
        pt->special_ref = x;
        pt->special_got = y;
    }
    switch (cls) {
    case EL_UNWRITTEN:
        pt->n_unwritten++;
        break;
    case EL_UNEXPECTED_NAN:
        pt->n_unexpected_nan++;
        break;
    case EL_OVERFLOW:
        pt->n_overflow++;
        break;
    case EL_LOST_SPECIAL:
        pt->n_lost_special++;
        break;
    case EL_WRONG_ZERO:
        pt->n_wrong_zero++;
        break;
    case EL_OK:
        break;
    }
}

/* A non-finite reference: the kernel must give the same special value.  The
 * one reference non-finite value is LSE = -inf on a row with no visible key,
 * where +inf (FlashAttention 2) is an accepted convention too. */
static el_class classify_special_ref(const cmp_judge *a, double x, double y)
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
static double add_magnitudes(const cmp_judge *a, cmp_partial *pt, ac_where w, double x, double y, double e,
                             const double *naive_x)
{
    double abs_err = fabs(y - x);
    double ulp_err = abs_err / ac_ulp(a->t, x);
    /* The means skip references below the smallest normal (0 included): rounding
     * there is absolute, eta/2 a step, and an exact-zero reference reached through
     * cancellation leaves every f32 computation its noise, so a ratio of means
     * would count rounding steps, not precision (a correct f32 dQ near 1e-44
     * read 2.3x the naive: 14 eta against 6).  The scaled error judges them. */
    bool in_mean = fabs(x) >= a->min_normal;
    pt->n_mag++;
    pt->n_mean += in_mean;
    pt->sum_ulp += ulp_err;
    pt->sum_sq += abs_err * abs_err;
    if (in_mean) {
        pt->sum_abs += abs_err;
        pt->sum_escale += e;
    }
    if (abs_err > pt->max_abs)
        pt->max_abs = abs_err;
    update_max(ulp_err, &pt->max_ulp, &pt->at_max_ulp, w);
    double scaled = e > 0.0 ? abs_err / (a->u * e) : 0.0;
    if (e > 0.0 && update_max(scaled, &pt->max_scaled, &pt->at_max_scaled, w)) {
        pt->worst_ref = x;
        pt->worst_got = y;
        pt->worst_escale = e;
    }
    if (naive_x) {
        /* A non-finite naive value where the reference is finite: the baseline failed. */
        double naive_err = isfinite(*naive_x) ? fabs(*naive_x - x) : INFINITY;
        if (in_mean)
            pt->sum_naive_abs += naive_err;
        pt->sum_naive_sq += naive_err * naive_err;
        if (naive_err > pt->naive_max_abs)
            pt->naive_max_abs = naive_err;
    }
    return scaled;
}

/* Classifies one element and feeds the statistics.  Returns its class; *scaled
 * its scaled error when it entered the magnitudes. */
static el_class judge_element(const cmp_judge *a, cmp_partial *pt, ac_where w, uint32_t got_bits, double x, double e,
                              const double *naive_x, double *scaled)
{
    if (got_bits == ac_dtype_poison(a->t)) {
        note_special(pt, EL_UNWRITTEN, w, x, NAN);
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
        note_special(pt, cls, w, x, y);
        return cls;
    }
    if (!isfinite(x))
        return EL_OK; /* matching special values: nothing to measure */
    if (y == 0.0 && x != 0.0 && fabs(x) > AC_WRONG_ZERO_SCALED * a->u * e) {
        note_special(pt, EL_WRONG_ZERO, w, x, y);
        cls = EL_WRONG_ZERO;
    }
    *scaled = add_magnitudes(a, pt, w, x, y, e, naive_x);
    return cls;
}

/* judge_element, and in counting mode the element's place when it is over the limit. */
static el_class compare_element(const cmp_judge *a, cmp_partial *pt, ac_where w, uint32_t got_bits, double x, double e,
                                const double *naive_x)
{
    double scaled = 0.0;
    el_class cls = judge_element(a, pt, w, got_bits, x, e, naive_x, &scaled);
    if (a->over && (cls != EL_OK || scaled > a->limit)) {
        a->over->n_over++;
        if (w.h < AC_DIAG_MAX_HEADS)
            a->over->over_per_head[w.h]++;
        if (w.row >= 0) /* dSink has no row */
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
    if (!ac_has_pair_mask(p)) /* a dense mask, a bias's -inf, sink tokens' gap: per pair */
        return true;
    for (int j = lo; j < hi; j++)
        if (ac_visible(p, b, h, i, j))
            return true;
    return false;
}

/* One row of a Q-like output or of LSE.  A row with no visible key is also
 * classified as a whole: "zero" when every element is +-0 (LSE: +-inf),
 * "nan" when any is NaN. */
void cmp_q_row(const cmp_judge *a, cmp_partial *pt, const ac_problem *p, const cmp_tensors *tn, int b, int h, int i)
{
    bool masked = !row_has_visible_key(p, b, h, i);
    bool all_zero = true, any_nan = false, lse_posinf = false;
    int ncols = a->is_lse ? 1 : ac_tensor_dim(p, a->kind);
    size_t row = a->is_lse ? ac_lse_index(p, b, h, i) /* channels are contiguous */
                           : ac_tensor_index(p, a->kind, b, h, i, 0);
    for (int c = 0; c < ncols; c++) {
        size_t at = row + (size_t)c;
        ac_where w = {b, h, i, a->is_lse ? -1 : c};
        uint32_t bits = ac_bits_get(a->t, tn->got, at);
        compare_element(a, pt, w, bits, tn->ref[at], tn->escale[at], tn->naive ? tn->naive + at : NULL);
        if (!masked)
            continue;
        double y = bits == ac_dtype_poison(a->t) ? NAN : ac_widen(a->t, bits);
        any_nan |= isnan(y) && bits != ac_dtype_poison(a->t);
        all_zero &= a->is_lse ? isinf(y) : y == 0.0;
        lse_posinf |= a->is_lse && y == INFINITY;
    }
    if (!masked)
        return;
    pt->masked_rows++;
    pt->masked_rows_zero += all_zero;
    pt->masked_rows_nan += any_nan;
    pt->masked_rows_lse_posinf += lse_posinf;
}

void cmp_k_row(const cmp_judge *a, cmp_partial *pt, const ac_problem *p, const cmp_tensors *tn, int b, int h_kv, int j)
{
    size_t row = ac_tensor_index(p, a->kind, b, h_kv, j, 0);
    for (int c = 0; c < ac_tensor_dim(p, a->kind); c++) {
        size_t at = row + (size_t)c;
        ac_where w = {b, h_kv, j, c};
        compare_element(a, pt, w, ac_bits_get(a->t, tn->got, at), tn->ref[at], tn->escale[at],
                        tn->naive ? tn->naive + at : NULL);
    }
}

/* dBias: the keys of row i of broadcast slice mb that some sequence b it
 * covers has (i < nq_b, j < nk_b): j < the largest such nk_b; elsewhere the
 * entry is padding of every sequence. */
int cmp_bias_row_keys(const ac_problem *p, int mb, int i)
{
    int keys = 0, b0 = p->bias_batch > 1 ? mb : 0, b1 = p->bias_batch > 1 ? mb + 1 : p->batch;
    for (int b = b0; b < b1; b++)
        if (i < ac_seqlen_q_of(p, b) && ac_seqlen_k_of(p, b) > keys)
            keys = ac_seqlen_k_of(p, b);
    return keys;
}

/* Row i of dBias slice (mb, mh), at [mb, mh, i, j]. */
void cmp_bias_row(const cmp_judge *a, cmp_partial *pt, const ac_problem *p, const cmp_tensors *tn, int mb, int mh,
                  int i)
{
    int keys = cmp_bias_row_keys(p, mb, i);
    size_t row = ac_bias_index(p, mb, mh, i, 0);
    for (int j = 0; j < keys; j++) {
        ac_where w = {mb, mh, i, j};
        compare_element(a, pt, w, ac_bits_get(a->t, tn->got, row + (size_t)j), tn->ref[row + (size_t)j],
                        tn->escale[row + (size_t)j], NULL);
    }
}

/* dSink: one value per query head, at [-1, h, -1, -1]. */
void cmp_head(const cmp_judge *a, cmp_partial *pt, const cmp_tensors *tn, int h)
{
    ac_where w = {-1, h, -1, -1};
    compare_element(a, pt, w, ac_bits_get(a->t, tn->got, (size_t)h), tn->ref[h], tn->escale[h],
                    tn->naive ? tn->naive + h : NULL);
}

/* ---- partials: merged in walk order, finished into ac_metrics ---------------------- */

void cmp_merge(cmp_partial *into, const cmp_partial *from)
{
    if (from->max_ulp > into->max_ulp)
        into->max_ulp = from->max_ulp, into->at_max_ulp = from->at_max_ulp;
    if (from->max_scaled > into->max_scaled) {
        into->max_scaled = from->max_scaled, into->at_max_scaled = from->at_max_scaled;
        into->worst_ref = from->worst_ref, into->worst_got = from->worst_got;
        into->worst_escale = from->worst_escale;
    }
    if (from->max_abs > into->max_abs)
        into->max_abs = from->max_abs;
    if (from->naive_max_abs > into->naive_max_abs)
        into->naive_max_abs = from->naive_max_abs;
    if (partial_specials(into) == 0 && partial_specials(from) > 0) {
        into->first_special = from->first_special;
        into->special_ref = from->special_ref, into->special_got = from->special_got;
    }
    into->n_unwritten += from->n_unwritten, into->n_unexpected_nan += from->n_unexpected_nan;
    into->n_overflow += from->n_overflow, into->n_lost_special += from->n_lost_special;
    into->n_wrong_zero += from->n_wrong_zero;
    into->masked_rows += from->masked_rows, into->masked_rows_zero += from->masked_rows_zero;
    into->masked_rows_nan += from->masked_rows_nan, into->masked_rows_lse_posinf += from->masked_rows_lse_posinf;
    into->sum_ulp += from->sum_ulp, into->sum_abs += from->sum_abs;
    into->sum_naive_abs += from->sum_naive_abs, into->sum_escale += from->sum_escale;
    into->n_mag += from->n_mag, into->n_mean += from->n_mean;
    into->sum_sq += from->sum_sq, into->sum_naive_sq += from->sum_naive_sq;
}

static double ratio(double kernel, double naive)
{
    if (kernel == 0.0 && naive == 0.0)
        return 0.0;
    return naive == 0.0 ? INFINITY : kernel / naive;
}

/* The merged walk into m. */
void cmp_finish(const cmp_partial *pt, ac_metrics *m)
{
    m->max_ulp = pt->max_ulp, m->at_max_ulp = pt->at_max_ulp;
    m->max_scaled = pt->max_scaled, m->at_max_scaled = pt->at_max_scaled;
    m->worst_ref = pt->worst_ref, m->worst_got = pt->worst_got, m->worst_escale = pt->worst_escale;
    m->max_abs = pt->max_abs, m->naive_max_abs = pt->naive_max_abs;
    m->n_unwritten = pt->n_unwritten, m->n_unexpected_nan = pt->n_unexpected_nan;
    m->n_overflow = pt->n_overflow, m->n_lost_special = pt->n_lost_special, m->n_wrong_zero = pt->n_wrong_zero;
    m->first_special = pt->first_special, m->special_ref = pt->special_ref, m->special_got = pt->special_got;
    m->masked_rows = pt->masked_rows, m->masked_rows_zero = pt->masked_rows_zero;
    m->masked_rows_nan = pt->masked_rows_nan, m->masked_rows_lse_posinf = pt->masked_rows_lse_posinf;
    m->n_measured = pt->n_mag;
    if (pt->n_mag == 0) {
        m->max_ulp = m->max_scaled = 0.0;
        return;
    }
    m->mean_ulp = pt->sum_ulp / (double)pt->n_mag;
    m->rmse = sqrt(pt->sum_sq / (double)pt->n_mag);
    double n = pt->n_mean > 0 ? (double)pt->n_mean : 1.0; /* none: the sums are 0 */
    m->n_mean = pt->n_mean;
    m->mean_abs = pt->sum_abs / n;
    m->mean_escale = pt->sum_escale / n;
    if (m->max_scaled < 0.0)
        m->max_scaled = 0.0; /* every element had E == 0 and matched */
    if (!m->has_naive)
        return;
    m->naive_mean_abs = pt->sum_naive_abs / n;
    m->naive_rmse = sqrt(pt->sum_naive_sq / (double)pt->n_mag);
    m->vs_naive_max = ratio(m->max_abs, m->naive_max_abs);
    m->vs_naive_mean = ratio(m->mean_abs, m->naive_mean_abs);
}

/* The tensor shape of a Q-like or K-like output. */
ac_tensor_kind cmp_output_kind(ac_output which)
{
    switch (which) {
    case AC_OUT_O:
        return AC_TENSOR_O;
    case AC_OUT_DK:
        return AC_TENSOR_K;
    case AC_OUT_DV:
        return AC_TENSOR_V;
    default:
        return AC_TENSOR_Q;
    }
}

cmp_judge cmp_judge_for(const ac_inputs *in, ac_output which)
{
    cmp_judge a = {.t = ac_output_dtype(ac_inputs_out_dtype(in), which),
                   .is_lse = which == AC_OUT_LSE,
                   .kind = cmp_output_kind(which)};
    if (which == AC_OUT_DBIAS) /* stored like the bias */
        a.t = in->p.bias_dtype;
    a.u = ac_unit_roundoff(a.t);
    a.min_normal = ac_min_subnormal(a.t) / (2.0 * a.u);
    return a;
}
