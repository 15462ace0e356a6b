/* harness/verdict/gate.c — the gate: one case's metrics and the budgets give
 * a verdict, why and kind (the order and the signature are in gate.h). */
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

static bool gate_specials(const ac_metrics m[AC_OUT_COUNT], char *why, size_t why_len, char *kind,
                          size_t kind_len)
{
    for (int k = 0; k < AC_SPECIAL_COUNT; k++)
        for (int o = 0; o < AC_OUT_COUNT; o++) {
            size_t n = m[o].present ? ac_metrics_special(&m[o], (ac_special)k) : 0;
            if (n == 0)
                continue;
            char where[WHERE_LEN];
            format_where((ac_output)o, m[o].first_special, where, sizeof where);
            const char *name = ac_output_name((ac_output)o);
            const char *cls = ac_special_name((ac_special)k);
            put(kind, kind_len, "%s:%s", name, cls);
            put(why, why_len, "%s %s: %zu of %zu elements %s; first special value at %s%s", name, cls,
                n, m[o].n_compared, class_meaning[k], where,
                m[o].masked_rows_nan ? "; fully masked rows give NaN (naive-softmax convention), "
                                       "attncheck expects O = 0 and LSE = -inf (FlashAttention's)" : "");
            return true;
        }
    return false;
}

static bool gate_scaled(const ac_inputs *in, const ac_metrics m[AC_OUT_COUNT], const ac_budgets *b,
                        char *why, size_t why_len, char *kind, size_t kind_len)
{
    ac_dtype t = in->c.dtype; /* budgets are per input dtype */
    for (int o = 0; o < AC_OUT_COUNT; o++) {
        double limit = ac_budget_max_scaled(b, &in->p, t, (ac_output)o);
        if (!m[o].present || m[o].max_scaled <= limit)
            continue;
        const char *name = ac_output_name((ac_output)o), *dt = ac_dtype_name(t);
        char where[WHERE_LEN], grown[96] = "";
        format_where((ac_output)o, m[o].at_max_scaled, where, sizeof where);
        double g = ac_budget_growth(b, &in->p, t, (ac_output)o);
        if (g > 1.0)
            snprintf(grown, sizeof grown, " = %g x growth %.3g", b->max_scaled[t][o], g);
        put(kind, kind_len, "%s:scaled", name);
        put(why, why_len, "%s scaled error %.3g > budget %.3g (%s %s scaled%s; %.3gx over) at %s", name,
            m[o].max_scaled, limit, dt, name, grown, m[o].max_scaled / limit, where);
        return true;
    }
    return false;
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

static bool gate_vs_naive(const ac_inputs *in, const ac_metrics m[AC_OUT_COUNT], const ac_budgets *b,
                          char *why, size_t why_len, char *kind, size_t kind_len)
{
    ac_dtype t = in->c.dtype; /* budgets are per input dtype */
    for (int o = 0; o < AC_OUT_COUNT; o++) {
        double limit = b->max_vs_naive_mean[t][o];
        bool applies = vs_naive_applies(&in->p, &m[o], ac_inputs_out_dtype(in), (ac_output)o);
        if (limit <= 0.0 || !applies || m[o].vs_naive_mean <= limit)
            continue;
        const char *name = ac_output_name((ac_output)o);
        put(kind, kind_len, "%s:vs-naive-mean", name);
        put(why, why_len, "%s mean abs error %.3g is %.3gx the naive baseline's %.3g > budget %g (%s %s "
            "vs-naive-mean; over %zu elements)", name, m[o].mean_abs, m[o].vs_naive_mean,
            m[o].naive_mean_abs, limit, ac_dtype_name(t), name, m[o].n_mean);
        return true;
    }
    return false;
}

ac_verdict ac_gate(const ac_inputs *in, const ac_metrics m[AC_OUT_COUNT], const ac_budgets *b,
                   char *why, size_t why_len, char *kind, size_t kind_len)
{
    put(why, why_len, "%s", "");
    put(kind, kind_len, "%s", "");
    if (!b || b->version != 1) {
        put(kind, kind_len, "%s", "budgets");
        put(why, why_len, "%s", "no budgets loaded (ac_budgets_load first)");
        return AC_VERDICT_ERROR;
    }
    if (gate_specials(m, why, why_len, kind, kind_len) ||
        gate_scaled(in, m, b, why, why_len, kind, kind_len) ||
        gate_vs_naive(in, m, b, why, why_len, kind, kind_len))
        return AC_VERDICT_FAIL;
    return AC_VERDICT_PASS;
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
