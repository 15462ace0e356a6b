/* harness/verdict/diagnose.c — where a failing case's bad elements are, and
 * the usual mistakes its numbers fit, each re-checked under the alternative
 * (diagnose.h).  Runs only after a failure: the re-checks cost a forward
 * reference each. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/verdict/diagnose.h"

static const double *ref_of(const ac_reference *r, ac_output o)
{
    const double *x[AC_OUT_COUNT] = {r->o, r->lse, r->dq, r->dk, r->dv, r->dsink, r->dbias};
    return x[o];
}

static const double *escale_of(const ac_reference *r, ac_output o)
{
    const double *e[AC_OUT_COUNT] = {r->e_o, r->e_lse, r->e_dq, r->e_dk, r->e_dv, r->e_dsink, r->e_dbias};
    return e[o];
}

static bool k_like(ac_output o) { return o == AC_OUT_DK || o == AC_OUT_DV; }

/* The tensor shape of a Q-like or K-like output (O and dV: d_v columns). */
static ac_tensor_kind kind_of(ac_output o)
{
    return o == AC_OUT_O ? AC_TENSOR_O : o == AC_OUT_DK ? AC_TENSOR_K : o == AC_OUT_DV ? AC_TENSOR_V : AC_TENSOR_Q;
}

static size_t elems_of(const ac_problem *p, ac_output o)
{
    if (o == AC_OUT_DSINK)
        return (size_t)p->heads_q;
    if (o == AC_OUT_DBIAS)
        return ac_bias_elems(p);
    return o == AC_OUT_LSE ? ac_lse_elems(p) : ac_tensor_elems(p, kind_of(o));
}

/* Element (b, h, s, c) of a d-column tensor in a padded layout. */
static size_t padded_index(ac_layout l, int heads, int seq, int d, int b, int h, int s, int c)
{
    if (l == AC_LAYOUT_BSHD)
        return (((size_t)b * seq + s) * heads + h) * d + c;
    return (((size_t)b * heads + h) * seq + s) * d + c;
}

static void add_hint(ac_metrics *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_hint(ac_metrics *m, const char *fmt, ...)
{
    size_t used = strlen(m->hint);
    if (used + 3 >= sizeof m->hint)
        return;
    if (used)
        used += (size_t)snprintf(m->hint + used, sizeof m->hint - used, "; ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->hint + used, sizeof m->hint - used, fmt, ap);
    va_end(ap);
}

/* Does got pass output o's budget against reference x with scale e (no special, max scaled <= limit)? */
static bool passes(const ac_inputs *in, ac_output o, const void *got, const double *x, const double *e, double limit,
                   double *max_scaled)
{
    ac_metrics s;
    ac_compare(in, o, got, x, e, NULL, &s);
    *max_scaled = s.max_scaled;
    return ac_metrics_specials(&s) == 0 && s.n_measured > 0 && s.max_scaled <= limit;
}

/* ---- layout: the output read as if written in the other layout --------------------- */

static int hint_layout(const ac_inputs *in, const ac_reference *ref, ac_output o, const void *got, ac_metrics *m,
                       ac_err *err)
{
    const ac_problem *p = &in->p;
    int heads = k_like(o) ? p->heads_kv : p->heads_q, seq = k_like(o) ? p->seqlen_k : p->seqlen_q;
    int d = ac_tensor_dim(p, kind_of(o));
    if (heads < 2 || seq < 2 || p->layout == AC_LAYOUT_THD)
        return AC_OK; /* both layouts are the same memory (THD has no other to mistake) */
    ac_dtype t = ac_inputs_out_dtype(in);
    void *moved = malloc(elems_of(p, o) * ac_dtype_size(t) + 1);
    if (!moved)
        return ac_fail(err, AC_ERR_ENV, "diagnosis: out of memory");
    ac_problem other = *p;
    other.layout = p->layout == AC_LAYOUT_BHSD ? AC_LAYOUT_BSHD : AC_LAYOUT_BHSD;
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < heads; h++)
            for (int s = 0; s < seq; s++)
                for (int c = 0; c < d; c++)
                    ac_bits_put(t, moved, padded_index(p->layout, heads, seq, d, b, h, s, c),
                                ac_bits_get(t, got, padded_index(other.layout, heads, seq, d, b, h, s, c)));
    double worst;
    const char *want = p->layout == AC_LAYOUT_BHSD ? "bhsd" : "bshd",
               *wrote = p->layout == AC_LAYOUT_BHSD ? "bshd" : "bhsd";
    if (passes(in, o, moved, ref_of(ref, o), escale_of(ref, o), m->budget_scaled, &worst))
        add_hint(m,
                 "%s matches the reference with --layout %s (max scaled %.2g): the kernel writes %s where %s "
                 "was asked (layout=%s in a case line)",
                 ac_output_name(o), wrote, worst, other.layout == AC_LAYOUT_BSHD ? "(B, S, H, d)" : "(B, H, S, d)",
                 want, wrote);
    free(moved);
    return AC_OK;
}

/* ---- LSE in the other base ---------------------------------------------------------- */

static int hint_lse_base(const ac_inputs *in, const ac_reference *ref, const float *got, ac_metrics *m, ac_err *err)
{
    size_t n = ac_lse_elems(&in->p);
    float *scaled = malloc(n * sizeof(float) + 1);
    if (!scaled)
        return ac_fail(err, AC_ERR_ENV, "diagnosis: out of memory");
    static const double factors[2] = {M_LN2, 1.0 / M_LN2};
    for (int f = 0; f < 2; f++) {
        for (size_t i = 0; i < n; i++)
            scaled[i] = (float)((double)got[i] * factors[f]); /* +-inf stays; the poison is NaN either way */
        double worst;
        if (!passes(in, AC_OUT_LSE, scaled, ref->lse, ref->e_lse, m->budget_scaled, &worst))
            continue;
        if (f == 0)
            add_hint(m,
                     "LSE x ln 2 matches the reference (max scaled %.2g): the kernel writes LSE in base 2 "
                     "(log2-sum-exp2); attncheck wants natural log (check: --lse-base 2)",
                     worst);
        else
            add_hint(m,
                     "LSE x log2(e) matches the reference (max scaled %.2g): the file holds natural logs "
                     "(check: drop --lse-base 2)",
                     worst);
    }
    free(scaled);
    return AC_OK;
}

/* ---- the reference under another problem: scale, alignment ------------------------- */

/* Does the kernel's O pass against the reference of problem alt (same inputs)? */
static int o_passes_under(const ac_inputs *in, const ac_problem *alt, const void *got_o, double limit, bool *ok,
                          double *worst, ac_err *err)
{
    size_t nq = ac_o_elems(alt), nl = ac_lse_elems(alt);
    double *o = malloc((nq + 1) * sizeof(double)), *lse = malloc((nl + 1) * sizeof(double));
    double *e = malloc((nq + 1) * sizeof(double));
    int st = o && lse && e ? AC_OK : ac_fail(err, AC_ERR_ENV, "diagnosis: out of memory");
    ac_inputs other = *in; /* shallow: the same tensors under another problem */
    other.p = *alt;
    ac_inputs flat = *in; /* a paged cache: the K, V the reference reads, gathered */
    ac_problem alt_flat = ac_problem_unpaged(alt);
    if (st == AC_OK)
        st = ac_inputs_unpaged(in, &flat, err);
    if (st == AC_OK)
        st = ref_forward_fp64(&alt_flat, in->qd, flat.kd, flat.vd, o, lse, err);
    if (st == AC_OK)
        st = ref_error_scales(&alt_flat, in->c.dtype, in->qd, flat.kd, flat.vd, o, lse, NULL, e, NULL, NULL, NULL, err);
    *ok = st == AC_OK && passes(&other, AC_OUT_O, got_o, o, e, limit, worst);
    ac_inputs_unpaged_free(in, &flat);
    free(o), free(lse), free(e);
    return st;
}

typedef struct {
    double scale;
    const char *what;
} scale_guess;

static int hint_scale(const ac_inputs *in, const void *got_o, ac_metrics *m, ac_err *err)
{
    const ac_problem *p = &in->p;
    double s = p->scale, d = p->head_dim;
    scale_guess guesses[] = {
        {1.0, "no softmax scale at all"},
        {(double)(float)ac_default_scale(p->head_dim), "the default 1/sqrt(d), not the scale asked for"},
        {s * s, "the scale applied twice"},
        {s * M_LOG2E, "scale x log2(e): exp taken where exp2 was meant"},
        {s * M_LN2, "scale x ln 2: exp2 taken without the log2(e) factor"},
        {1.0 / d, "1/d instead of 1/sqrt(d)"},
    };
    for (size_t i = 0; i < sizeof guesses / sizeof guesses[0]; i++) {
        double g = guesses[i].scale;
        bool seen = fabs(g - s) <= 1e-6 * fabs(s);
        for (size_t j = 0; j < i && !seen; j++)
            seen = fabs(g - guesses[j].scale) <= 1e-6 * fabs(g);
        if (seen)
            continue;
        ac_problem alt = *p;
        alt.scale = g;
        bool ok;
        double worst;
        int st = o_passes_under(in, &alt, got_o, m->budget_scaled, &ok, &worst, err);
        if (st != AC_OK)
            return st;
        if (ok) {
            add_hint(m, "O matches the reference with scale %.6g instead of %.6g (max scaled %.2g): %s", g, s, worst,
                     guesses[i].what);
            return AC_OK;
        }
    }
    return AC_OK;
}

/* The largest Nq - Nk over the sequences: the leading rows bottom-right alignment leaves without keys. */
static int leading_rows(const ac_problem *p)
{
    int most = 0;
    for (int b = 0; b < p->batch; b++) {
        int d = ac_seqlen_q_of(p, b) - ac_seqlen_k_of(p, b);
        most = d > most ? d : most;
    }
    return most;
}

static bool lengths_differ(const ac_problem *p)
{
    for (int b = 0; b < p->batch; b++)
        if (ac_seqlen_q_of(p, b) != ac_seqlen_k_of(p, b))
            return true;
    return false;
}

static void window_spelling(const ac_problem *p, ac_align a, char *buf, size_t len)
{
    const char *al = a == AC_ALIGN_BOTTOM_RIGHT ? "br" : "tl";
    if (p->window_left == AC_WINDOW_INF && p->window_right == 0) {
        snprintf(buf, len, "causal-%s", al);
        return;
    }
    char l[16] = "inf", r[16] = "inf";
    if (p->window_left != AC_WINDOW_INF)
        snprintf(l, sizeof l, "%d", p->window_left);
    if (p->window_right != AC_WINDOW_INF)
        snprintf(r, sizeof r, "%d", p->window_right);
    snprintf(buf, len, "window-%s(%s,%s)", al, l, r);
}

static int hint_alignment(const ac_inputs *in, const void *got_o, ac_metrics *m, ac_err *err)
{
    const ac_problem *p = &in->p;
    if (!p->windowed || !lengths_differ(p))
        return AC_OK;
    ac_problem alt = *p;
    alt.align = p->align == AC_ALIGN_TOP_LEFT ? AC_ALIGN_BOTTOM_RIGHT : AC_ALIGN_TOP_LEFT;
    bool ok;
    double worst;
    int st = o_passes_under(in, &alt, got_o, m->budget_scaled, &ok, &worst, err);
    if (st != AC_OK || !ok)
        return st;
    char asked[64], used[64], rows[160] = "";
    window_spelling(p, p->align, asked, sizeof asked);
    window_spelling(p, alt.align, used, sizeof used);
    int lead = leading_rows(p);
    if (lead > 0 && m->n_rows_over > 0 && m->last_row_over < lead)
        snprintf(rows, sizeof rows, "; the errors are confined to rows %d..%d of the Nq - Nk = %d leading rows",
                 m->first_row_over, m->last_row_over, lead);
    else if (m->n_rows_over > 0)
        snprintf(rows, sizeof rows,
                 "; the errors sit in rows %d..%d, along the diagonal band the two "
                 "alignments disagree on",
                 m->first_row_over, m->last_row_over);
    add_hint(m,
             "O matches the reference with mask=%s instead of %s (max scaled %.2g): the kernel aligns the mask "
             "%s%s",
             used, asked, worst,
             alt.align == AC_ALIGN_TOP_LEFT ? "top-left (PyTorch's is_causal)" : "bottom-right (FlashAttention >= 2.1)",
             rows);
    return AC_OK;
}

/* ---- gradients off by the scale -------------------------------------------------------- */

static int hint_gradient_scale(const ac_inputs *in, const ac_reference *ref, ac_output o, const void *got,
                               ac_metrics *m, ac_err *err)
{
    size_t n = elems_of(&in->p, o);
    double *x = malloc((n + 1) * sizeof(double)), *e = malloc((n + 1) * sizeof(double));
    if (!x || !e) {
        free(x), free(e);
        return ac_fail(err, AC_ERR_ENV, "diagnosis: out of memory");
    }
    double s = in->p.scale, factors[2] = {s, 1.0 / s};
    const char *what[2] = {"the softmax scale applied twice in the backward",
                           "the softmax scale never applied in "
                           "the backward"};
    for (int f = 0; f < 2 && fabs(s - 1.0) > 1e-6; f++) {
        for (size_t i = 0; i < n; i++)
            x[i] = ref_of(ref, o)[i] * factors[f], e[i] = escale_of(ref, o)[i] * fabs(factors[f]);
        double worst;
        if (passes(in, o, got, x, e, m->budget_scaled, &worst))
            add_hint(m, "%s matches the reference x %.6g (%s; max scaled %.2g): %s", ac_output_name(o), factors[f],
                     f == 0 ? "the scale" : "1/scale", worst, what[f]);
    }
    free(x), free(e);
    return AC_OK;
}

/* ---- where the bad elements are ----------------------------------------------------------- */

/* "heads 1-4,6-7 of 8" (the heads with elements over budget), or "every head of 8". */
static void heads_over(const ac_metrics *m, bool kv, char *buf, size_t len)
{
    int counted = m->n_heads < AC_DIAG_MAX_HEADS ? m->n_heads : AC_DIAG_MAX_HEADS, n = 0, bad = 0;
    for (int h = 0; h < counted; h++)
        bad += m->over_per_head[h] > 0;
    if (bad == m->n_heads) {
        if (m->n_heads == 1)
            snprintf(buf, len, "the one %shead", kv ? "KV " : "");
        else
            snprintf(buf, len, "all %d %sheads", m->n_heads, kv ? "KV " : "");
        return;
    }
    n = snprintf(buf, len, "%sheads ", kv ? "KV " : "");
    for (int h = 0, first = 1; h < counted && n < (int)len; h++) {
        if (!m->over_per_head[h] || (h > 0 && m->over_per_head[h - 1]))
            continue;
        int end = h;
        while (end + 1 < counted && m->over_per_head[end + 1])
            end++;
        n += end > h ? snprintf(buf + n, len - (size_t)n, "%s%d-%d", first ? "" : ",", h, end)
                     : snprintf(buf + n, len - (size_t)n, "%s%d", first ? "" : ",", h);
        first = 0;
    }
    if (n < (int)len)
        snprintf(buf + n, len - (size_t)n, " of %d", m->n_heads);
}

static void describe_over(const ac_metrics *m, ac_output o, char *buf, size_t len)
{
    if (m->n_over == 0) { /* a mean failed (against the naive baseline), no element: no places to give */
        snprintf(buf, len, "%s: no element over budget (%zu compared)", ac_output_name(o), m->n_compared);
        return;
    }
    char heads[160];
    heads_over(m, k_like(o), heads, sizeof heads);
    if (o == AC_OUT_DSINK) { /* one value per head: no rows */
        snprintf(buf, len, "%s over budget: %zu of %zu elements, in %s", ac_output_name(o), m->n_over, m->n_compared,
                 heads);
        return;
    }
    const char *rows = k_like(o) ? "keys" : "rows";
    snprintf(buf, len, "%s over budget: %zu of %zu elements, in %s, %s %d..%d (%d %s)", ac_output_name(o), m->n_over,
             m->n_compared, heads, rows, m->first_row_over, m->last_row_over, m->n_rows_over,
             m->n_rows_over == 1 ? rows[0] == 'k' ? "key" : "row" : rows);
}

static void append(char *why, size_t len, const char *text)
{
    size_t used = strlen(why);
    if (used + 3 < len)
        snprintf(why + used, len - used, "%s%s", used ? "; " : "", text);
}

static int hints(const ac_inputs *in, const ac_reference *ref, const void *const got[AC_OUT_COUNT],
                 ac_metrics m[AC_OUT_COUNT], ac_err *err)
{
    int st = AC_OK;
    for (int o = 0; o < AC_OUT_COUNT && st == AC_OK; o++) {
        /* Each hint re-checks the elements under an alternative: meaningless where no element failed (a
         * mean did), since the output passes that check as it is and so would fit any alternative near it. */
        if (!m[o].failed || !got[o] || m[o].n_over == 0)
            continue;
        if (o == AC_OUT_LSE)
            st = hint_lse_base(in, ref, got[o], &m[o], err);
        else if (o != AC_OUT_DSINK && o != AC_OUT_DBIAS) /* the parameter gradients have no layout */
            st = hint_layout(in, ref, (ac_output)o, got[o], &m[o], err);
        if (st == AC_OK && o == AC_OUT_O)
            st = hint_scale(in, got[o], &m[o], err);
        if (st == AC_OK && o == AC_OUT_O)
            st = hint_alignment(in, got[o], &m[o], err);
        if (st == AC_OK && (o == AC_OUT_DQ || o == AC_OUT_DK))
            st = hint_gradient_scale(in, ref, (ac_output)o, got[o], &m[o], err);
    }
    return st;
}

int ac_diagnose(const ac_inputs *in, const ac_reference *ref, const void *const got[AC_OUT_COUNT],
                ac_metrics m[AC_OUT_COUNT], char *why, size_t why_len, ac_err *err)
{
    int st = AC_OK;
    for (int o = 0; o < AC_OUT_COUNT && st == AC_OK; o++) {
        m[o].hint[0] = '\0';
        if (m[o].present && m[o].failed && got[o])
            st = ac_compare_count_over(in, (ac_output)o, got[o], ref_of(ref, (ac_output)o),
                                       escale_of(ref, (ac_output)o), m[o].budget_scaled, &m[o], err);
    }
    if (st == AC_OK)
        st = hints(in, ref, got, m, err);
    bool described = false; /* the first failing output's places; JSON has every output's */
    for (int o = 0; o < AC_OUT_COUNT && why; o++) {
        if (!m[o].present || !m[o].failed || !got[o])
            continue;
        char text[AC_HINT_LEN + 16];
        describe_over(&m[o], (ac_output)o, text, sizeof text);
        if (!described)
            append(why, why_len, text);
        described = true;
        if (m[o].hint[0]) {
            snprintf(text, sizeof text, "hint: %s", m[o].hint);
            append(why, why_len, text);
        }
    }
    return st;
}
