/* harness/verdict/gate.c — the gate: one case's metrics and the budgets give
 * a verdict, why and kind (the order and the signature are in gate.h). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "harness/verdict/gate.h"

static void put(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void put(char *buf, size_t len, const char *fmt, ...)
{
    if (!buf || len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

/* "b=0 h=1 row=5 col=17"; K-like outputs name the KV head and the key. */
static void format_where(ac_output o, ac_where w, char *buf, size_t len)
{
    if (o == AC_OUT_DSINK)
        snprintf(buf, len, "h=%d", w.h);
    else if (o == AC_OUT_DBIAS) /* the bias's own indices: 0 on a broadcast axis */
        snprintf(buf, len, "bias b=%d h=%d row=%d key=%d", w.b, w.h, w.row, w.col);
    else if (o == AC_OUT_LSE)
        snprintf(buf, len, "b=%d h=%d row=%d", w.b, w.h, w.row);
    else if (o == AC_OUT_DK || o == AC_OUT_DV)
        snprintf(buf, len, "b=%d hkv=%d key=%d col=%d", w.b, w.h, w.row, w.col);
    else
        snprintf(buf, len, "b=%d h=%d row=%d col=%d", w.b, w.h, w.row, w.col);
}

#define WHERE_LEN 96 /* "b=0 hkv=1 key=5 col=17" */

/* What each special class means, for the why line (indexed by ac_special). */
static const char *const class_meaning[AC_SPECIAL_COUNT] = {
    [AC_SPECIAL_UNWRITTEN] = "never written (the poison NaN survived)",
    [AC_SPECIAL_UNEXPECTED_NAN] = "NaN where the reference is finite",
    [AC_SPECIAL_OVERFLOW] = "+-Inf where the reference is finite",
    [AC_SPECIAL_LOST] = "not the reference's NaN/Inf",
    [AC_SPECIAL_WRONG_ZERO] = "a zero where the reference is not (or nonzero where it is exactly 0)",
};

/* " (expected 0.5, got -3, E 0.02)": the values at the element a failure names. */
static void values(char *buf, size_t len, double x, double y, double e)
{
    if (isnan(e))
        snprintf(buf, len, " (expected %.6g, got %.6g)", x, y);
    else
        snprintf(buf, len, " (expected %.6g, got %.6g, error scale E %.3g)", x, y, e);
}

static void why_special(const ac_metrics *m, ac_output o, ac_special k, char *why, size_t why_len)
{
    char where[WHERE_LEN], vals[128];
    format_where(o, m->first_special, where, sizeof where);
    values(vals, sizeof vals, m->special_ref, m->special_got, NAN);
    put(why, why_len, "%s %s: %zu of %zu elements %s; first special value at %s%s%s", ac_output_name(o),
        ac_special_name(k), ac_metrics_special(m, k), m->n_compared, class_meaning[k], where,
        k == AC_SPECIAL_UNWRITTEN ? "" : vals,
        m->masked_rows_nan ? "; fully masked rows give NaN (naive-softmax convention), "
                             "attncheck expects O = 0 and LSE = -inf (FlashAttention's)"
                           : "");
}

static void why_scaled(const ac_inputs *in, const ac_metrics *m, const ac_budgets *b, ac_output o, char *why,
                       size_t why_len)
{
    ac_dtype t = in->c.dtype; /* budgets are per input dtype */
    const char *name = ac_output_name(o), *dt = ac_dtype_name(t);
    char where[WHERE_LEN], grown[96] = "", vals[128];
    format_where(o, m->at_max_scaled, where, sizeof where);
    values(vals, sizeof vals, m->worst_ref, m->worst_got, m->worst_escale);
    double g = ac_budget_growth(b, &in->p, t, o);
    if (g > 1.0)
        snprintf(grown, sizeof grown, " = %g x growth %.3g", b->max_scaled[t][o], g);
    put(why, why_len, "%s scaled error %.3g > budget %.3g (%s %s scaled%s; %.3gx over) at %s%s", name, m->max_scaled,
        m->budget_scaled, dt, name, grown, m->max_scaled / m->budget_scaled, where, vals);
}

static void why_vs_naive(const ac_inputs *in, const ac_metrics *m, ac_output o, char *why, size_t why_len)
{
    const char *name = ac_output_name(o);
    put(why, why_len,
        "%s mean abs error %.3g is %.3gx the naive baseline's %.3g > budget %g (%s %s "
        "vs-naive-mean; over %zu elements)",
        name, m->mean_abs, m->vs_naive_mean, m->naive_mean_abs, m->budget_vs_naive_mean, ac_dtype_name(in->c.dtype),
        name, m->n_mean);
}

/* Query rows and keys the problem really has (padding excluded), over all heads. */
static long problem_rows(const ac_problem *p, bool keys)
{
    long n = 0;
    for (int b = 0; b < p->batch; b++)
        n += keys ? ac_seqlen_k_of(p, b) : ac_seqlen_q_of(p, b);
    return n * (keys ? p->heads_kv : p->heads_q);
}

/* The mean is a statistic: it needs enough elements, and enough query rows and
 * keys, since the errors of one row's (or one key's) elements share their P. */
static bool vs_naive_applies(const ac_problem *p, const ac_metrics *m, ac_dtype out_dtype, ac_output o)
{
    double u = ac_unit_roundoff(ac_output_dtype(out_dtype, o));
    return m->present && m->has_naive && m->n_mean >= AC_VS_NAIVE_MIN_ELEMS &&
        problem_rows(p, false) >= AC_VS_NAIVE_MIN_ROWS && problem_rows(p, true) >= AC_VS_NAIVE_MIN_ROWS &&
        m->naive_mean_abs > 0.0 && m->naive_mean_abs >= u * m->mean_escale / AC_VS_NAIVE_FLOOR_DIV;
}

/* The budgets of one output for this problem, and what of it fails (m->failed). */
static void judge_output(const ac_inputs *in, ac_metrics *m, const ac_budgets *b, ac_output o)
{
    ac_dtype t = in->c.dtype;
    m->failed = 0;
    m->budget_scaled = ac_budget_max_scaled(b, &in->p, t, o);
    m->budget_vs_naive_mean = b->max_vs_naive_mean[t][o];
    m->vs_naive_applies = vs_naive_applies(&in->p, m, ac_inputs_out_dtype(in), o);
    if (!m->present)
        return;
    for (int k = 0; k < AC_SPECIAL_COUNT; k++)
        if (ac_metrics_special(m, (ac_special)k) > 0)
            m->failed |= 1u << k;
    if (m->max_scaled > m->budget_scaled)
        m->failed |= AC_FAILED_SCALED;
    if (m->budget_vs_naive_mean > 0.0 && m->vs_naive_applies && m->vs_naive_mean > m->budget_vs_naive_mean)
        m->failed |= AC_FAILED_VS_NAIVE;
}

/* The first failing class of an output, in the gate's order: specials, scaled, vs-naive. */
static int first_class(unsigned failed)
{
    for (int k = 0; k < AC_SPECIAL_COUNT; k++)
        if (failed & (1u << k))
            return k;
    return failed & AC_FAILED_SCALED ? AC_SPECIAL_COUNT : AC_SPECIAL_COUNT + 1;
}

static const char *class_name(int cls)
{
    return cls < AC_SPECIAL_COUNT ? ac_special_name((ac_special)cls)
        : cls == AC_SPECIAL_COUNT ? "scaled"
                                  : "vs-naive-mean";
}

/* "; also failing: LSE:scaled 12 > 4.3, dQ:unexpected-nan (5 elements)": every failure after the first. */
static void also_failing(const ac_metrics m[AC_OUT_COUNT], ac_output first, int first_cls, char *why, size_t len)
{
    size_t used = strlen(why);
    bool any = false;
    for (int o = 0; o < AC_OUT_COUNT; o++)
        for (int cls = 0; cls <= AC_SPECIAL_COUNT + 1; cls++) {
            unsigned bit = cls < AC_SPECIAL_COUNT ? 1u << cls
                : cls == AC_SPECIAL_COUNT         ? AC_FAILED_SCALED
                                                  : AC_FAILED_VS_NAIVE;
            if (!(m[o].failed & bit) || (o == (int)first && cls == first_cls) || used + 2 >= len)
                continue;
            char what[96];
            if (cls < AC_SPECIAL_COUNT)
                snprintf(what, sizeof what, " (%zu elements)", ac_metrics_special(&m[o], (ac_special)cls));
            else if (cls == AC_SPECIAL_COUNT)
                snprintf(what, sizeof what, " %.3g > %.3g", m[o].max_scaled, m[o].budget_scaled);
            else
                snprintf(what, sizeof what, " %.3gx > %g", m[o].vs_naive_mean, m[o].budget_vs_naive_mean);
            used +=
                (size_t)snprintf(why + used, len - used, "%s%s:%s%s",
                                 any ? ", " : "; also failing: ", ac_output_name((ac_output)o), class_name(cls), what);
            used = used < len ? used : len - 1;
            any = true;
        }
}

ac_verdict ac_gate(const ac_inputs *in, ac_metrics m[AC_OUT_COUNT], const ac_budgets *b, char *why, size_t why_len,
                   char *kind, size_t kind_len)
{
    put(why, why_len, "%s", "");
    put(kind, kind_len, "%s", "");
    if (!b || b->version != 1) {
        put(kind, kind_len, "%s", "budgets");
        put(why, why_len, "%s", "no budgets loaded (ac_budgets_load first)");
        return AC_VERDICT_ERROR;
    }
    int first = -1;
    for (int o = 0; o < AC_OUT_COUNT; o++) {
        judge_output(in, &m[o], b, (ac_output)o);
        if (first < 0 && m[o].failed)
            first = o;
    }
    if (first < 0)
        return AC_VERDICT_PASS;
    ac_output o = (ac_output)first;
    int cls = first_class(m[o].failed);
    put(kind, kind_len, "%s:%s", ac_output_name(o), class_name(cls));
    if (cls < AC_SPECIAL_COUNT)
        why_special(&m[o], o, (ac_special)cls, why, why_len);
    else if (cls == AC_SPECIAL_COUNT)
        why_scaled(in, &m[o], b, o, why, why_len);
    else
        why_vs_naive(in, &m[o], o, why, why_len);
    if (why && why_len)
        also_failing(m, o, cls, why, why_len);
    return AC_VERDICT_FAIL;
}

bool ac_cert_note(const ac_cert *cert, char *why, size_t why_len)
{
    if (!cert || cert->rows_checked == 0 || cert->certified || !why || why_len == 0)
        return false;
    size_t used = strlen(why);
    if (used + 1 >= why_len)
        return true;
    snprintf(why + used, why_len - used,
             "%sreference not certified: fp64 O is %.3g ulp from MPFR on %zu sampled rows (> 1/64 ulp); "
             "not a kernel failure, the reference needs a closer look",
             used ? "; " : "", cert->max_ulp_o, cert->rows_checked);
    return true;
}
