/* ref/cuda/test_gpuref_compare.c — the GPU bundle against the CPU bundle of
 * the same inputs, array by array, every element (padding included: both
 * tiers write 0 there, LSE -inf).
 *
 * fp64 outputs x (CPU) and y (GPU), E the CPU's error scale of x:
 *   |y - x| <= max(1e-12 max(|x|, E), max(ulp_t(x), u_t E) / 64)
 * — two fp64 computations agree to ~1e-15 of the terms' magnitude, and where
 * they cannot (scores of 1e9: S's own rounding moves P by 1e-7) the
 * certification tolerance is what the harness needs; D uses Dhat = sum |dO||O|
 * for E.  Scales (all terms >= 0): |y - x| <= max(1e-12, u_t / 64) |x|.
 * Special values must be the same.  The naive baseline: its error against the
 * fp64 reference, max and mean, within 10% of the CPU naive's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_gpuref.h"

#define POISON 1e300

static double *alloc_poisoned(size_t n)
{
    double *x = malloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; x && i < n; i++)
        x[i] = POISON;
    return x;
}

int tg_bundle_alloc(const ac_problem *p, bool backward, tg_bundle *g)
{
    memset(g, 0, sizeof *g);
    size_t nq = ac_q_elems(p), nkv = ac_kv_elems(p), nl = ac_lse_elems(p);
    ref_gpu_outputs *o = &g->out;
    double **fwd[] = {&o->o, &o->e_o, &o->naive_o}, **fwd_rows[] = {&o->lse, &o->e_lse, &o->naive_lse};
    double **bwd_q[] = {&o->dq, &o->e_dq, &o->naive_dq},
           **bwd_kv[] = {&o->dk, &o->dv, &o->e_dk, &o->e_dv, &o->naive_dk, &o->naive_dv};
    bool ok = true;
    for (int a = 0; a < 3; a++) {
        ok &= (*fwd[a] = alloc_poisoned(nq)) != NULL;
        ok &= (*fwd_rows[a] = alloc_poisoned(nl)) != NULL;
        if (backward)
            ok &= (*bwd_q[a] = alloc_poisoned(nq)) != NULL;
    }
    for (int a = 0; backward && a < 6; a++)
        ok &= (*bwd_kv[a] = alloc_poisoned(nkv)) != NULL;
    if (backward)
        ok &= (o->delta = alloc_poisoned(nl)) != NULL;
    g->backward = backward;
    return ok ? AC_OK : AC_ERR_ENV;
}

void tg_bundle_free(tg_bundle *g)
{
    ref_gpu_outputs *o = &g->out;
    double *all[] = {o->o,    o->lse,  o->dq,   o->dk,      o->dv,        o->delta,    o->e_o,      o->e_lse,
                     o->e_dq, o->e_dk, o->e_dv, o->naive_o, o->naive_lse, o->naive_dq, o->naive_dk, o->naive_dv};
    for (size_t a = 0; a < sizeof all / sizeof all[0]; a++)
        free(all[a]);
    memset(g, 0, sizeof *g);
}

/* ---- element places ------------------------------------------------------------ */

typedef enum { SHAPE_Q, SHAPE_KV, SHAPE_ROWS } shape;

static void place(const ac_problem *p, shape s, size_t e, char *buf, size_t len)
{
    if (s == SHAPE_ROWS) {
        size_t i = e % p->seqlen_q, h = e / p->seqlen_q % p->heads_q, b = e / p->seqlen_q / p->heads_q;
        snprintf(buf, len, "[b=%zu h=%zu i=%zu]", b, h, i);
        return;
    }
    size_t d = p->head_dim, heads = s == SHAPE_Q ? p->heads_q : p->heads_kv;
    size_t n = s == SHAPE_Q ? p->seqlen_q : p->seqlen_k, c = e % d, rest = e / d, h, i, b;
    if (p->layout == AC_LAYOUT_BSHD) {
        h = rest % heads, i = rest / heads % n, b = rest / heads / n;
    } else {
        i = rest % n, h = rest / n % heads, b = rest / n / heads;
    }
    snprintf(buf, len, "[b=%zu h=%zu %s=%zu c=%zu]", b, h, s == SHAPE_Q ? "i" : "j", i, c);
}

static size_t count_of(const ac_problem *p, shape s)
{
    return s == SHAPE_Q ? ac_q_elems(p) : s == SHAPE_KV ? ac_kv_elems(p) : ac_lse_elems(p);
}

static bool same_special(double x, double y) { return x == y || (isnan(x) && isnan(y)); }

/* ---- fp64 arrays -------------------------------------------------------------------- */

typedef struct {
    const char *name;
    shape s;
    const double *want, *got, *escale; /* escale: E per element, or NULL for a scale array */
    ac_dtype t; /* the dtype of its ulp and u */
} fp64_array;

static double tolerance(const fp64_array *a, size_t e)
{
    double x = a->want[e], u = ac_unit_roundoff(a->t);
    if (!a->escale) { /* a scale: nonnegative terms */
        double rel = u / 64.0 > 1e-12 ? u / 64.0 : 1e-12;
        return rel * fabs(x);
    }
    double big = fabs(x) > a->escale[e] ? fabs(x) : a->escale[e];
    double cert = ac_ulp(a->t, x) > u * a->escale[e] ? ac_ulp(a->t, x) : u * a->escale[e];
    return 1e-12 * big > cert / 64.0 ? 1e-12 * big : cert / 64.0;
}

/* Returns 1 when some element is out of tolerance; *worst gets the largest ratio. */
static int compare_fp64(const ac_problem *p, const fp64_array *a, bool verbose, double *worst)
{
    size_t n = count_of(p, a->s), at = 0, bad = 0;
    double max_units = 0.0, max_rel = 0.0;
    for (size_t e = 0; e < n; e++) {
        double x = a->want[e], y = a->got[e], units;
        if (!isfinite(x) || !isfinite(y))
            units = same_special(x, y) ? 0.0 : INFINITY;
        else {
            double tol = tolerance(a, e), diff = fabs(y - x);
            units = diff == 0.0 ? 0.0 : tol > 0.0 ? diff / tol : INFINITY;
            double scale = a->escale && a->escale[e] > fabs(x) ? a->escale[e] : fabs(x);
            if (scale > 0.0 && diff / scale > max_rel)
                max_rel = diff / scale;
        }
        bad += units > 1.0;
        if (units > max_units || (e == 0 && units == 0.0)) {
            max_units = units;
            at = e;
        }
    }
    char where[96];
    place(p, a->s, at, where, sizeof where);
    if (bad || verbose)
        tg_say("    %s %-9s %zu/%zu out of tolerance; worst %.3g x tol at %s: gpu %.17g cpu %.17g; max rel %.2e\n",
               bad ? "FAIL" : "ok  ", a->name, bad, n, max_units, where, a->got[at], a->want[at], max_rel);
    *worst = max_units > *worst ? max_units : *worst;
    return bad > 0;
}

/* ---- naive arrays ----------------------------------------------------------------------- */

typedef struct {
    double max_err, mean_err;
    size_t n, n_mean, specials_apart;
} err_stats;

typedef struct {
    const char *name;
    shape s;
    const double *ref, *cpu, *gpu, *escale;
    ac_dtype t;
} naive_array;

static void add_error(err_stats *st, double ref, double y, double normal_min)
{
    double err = fabs(y - ref);
    st->max_err = err > st->max_err ? err : st->max_err;
    if (fabs(ref) >= normal_min) {
        st->mean_err += err;
        st->n_mean++;
    }
    st->n++;
}

/* Within 10% (2x when under 1024 elements), or both under the floor below
 * which the harness does not read a naive error (u mean(E) / 64). */
static bool stats_close(double gpu, double cpu, size_t n, double floor)
{
    if (gpu <= floor && cpu <= floor)
        return true;
    double tol = n >= 1024 ? 1.1 : 2.0;
    return gpu <= tol * cpu && cpu <= tol * gpu;
}

static int compare_naive(const ac_problem *p, const naive_array *a, bool verbose, size_t *same, size_t *total)
{
    size_t n = count_of(p, a->s), equal = 0, apart = 0;
    err_stats g = {0}, c = {0};
    double normal_min = ldexp(1.0, a->t == AC_F16 ? -14 : -126), e_sum = 0.0;
    size_t e_n = 0;
    for (size_t e = 0; e < n; e++) {
        double x = a->ref[e], yc = a->cpu[e], yg = a->gpu[e];
        equal += same_special(yc, yg) && (yc != 0.0 || signbit(yc) == signbit(yg));
        if (isfinite(yc) != isfinite(yg) || (!isfinite(yc) && !same_special(yc, yg))) {
            apart++;
            continue;
        }
        if (!isfinite(x) || !isfinite(yc))
            continue;
        add_error(&c, x, yc, normal_min);
        add_error(&g, x, yg, normal_min);
        if (fabs(x) >= normal_min) {
            e_sum += a->escale[e];
            e_n++;
        }
    }
    double floor = e_n ? ac_unit_roundoff(a->t) * (e_sum / (double)e_n) / 64.0 : 0.0;
    double gm = g.n_mean ? g.mean_err / (double)g.n_mean : 0.0, cm = c.n_mean ? c.mean_err / (double)c.n_mean : 0.0;
    bool ok = apart == 0 && stats_close(g.max_err, c.max_err, g.n, floor) && stats_close(gm, cm, g.n_mean, floor);
    if (!ok || verbose)
        tg_say("    %s naive %-4s max err gpu %.3e cpu %.3e, mean gpu %.3e cpu %.3e (%zu elements, floor %.2e); "
               "%zu/%zu bitwise equal, %zu special values apart\n",
               ok ? "ok  " : "FAIL", a->name, g.max_err, c.max_err, gm, cm, g.n, floor, equal, n, apart);
    *same += equal;
    *total += n;
    return !ok;
}

/* Dhat_i = sum_c |dO_ic||O_ic| from the CPU's O: the E of D. */
static double *delta_shadow(const ac_inputs *in, const ac_reference *r)
{
    const ac_problem *p = &in->p;
    double *dhat = calloc(ac_lse_elems(p) ? ac_lse_elems(p) : 1, sizeof *dhat);
    for (int b = 0; dhat && b < p->batch; b++)
        for (int h = 0; h < p->heads_q; h++)
            for (int i = 0; i < p->seqlen_q; i++)
                for (int c = 0; c < p->head_dim; c++) {
                    size_t at = ac_q_index(p, b, h, i, c);
                    dhat[ac_lse_index(p, b, h, i)] += fabs(in->d_od[at] * r->o[at]);
                }
    return dhat;
}

int tg_compare(const ac_inputs *in, const ac_reference *r, const tg_bundle *g, bool verbose, double *worst_units,
               double *naive_same)
{
    const ac_problem *p = &in->p;
    const ref_gpu_outputs *o = &g->out;
    ac_dtype t = in->c.dtype;
    bool bwd = g->backward;
    double *dhat = bwd ? delta_shadow(in, r) : NULL;
    fp64_array fp[] = {
        {"O", SHAPE_Q, r->o, o->o, r->e_o, t},         {"LSE", SHAPE_ROWS, r->lse, o->lse, r->e_lse, AC_F32},
        {"E_O", SHAPE_Q, r->e_o, o->e_o, NULL, t},     {"E_lse", SHAPE_ROWS, r->e_lse, o->e_lse, NULL, AC_F32},
        {"dQ", SHAPE_Q, r->dq, o->dq, r->e_dq, t},     {"dK", SHAPE_KV, r->dk, o->dk, r->e_dk, t},
        {"dV", SHAPE_KV, r->dv, o->dv, r->e_dv, t},    {"D", SHAPE_ROWS, r->delta, o->delta, dhat, t},
        {"E_dQ", SHAPE_Q, r->e_dq, o->e_dq, NULL, t},  {"E_dK", SHAPE_KV, r->e_dk, o->e_dk, NULL, t},
        {"E_dV", SHAPE_KV, r->e_dv, o->e_dv, NULL, t},
    };
    naive_array nv[] = {
        {"O", SHAPE_Q, r->o, r->naive_o, o->naive_o, r->e_o, t},
        {"LSE", SHAPE_ROWS, r->lse, r->naive_lse, o->naive_lse, r->e_lse, AC_F32},
        {"dQ", SHAPE_Q, r->dq, r->naive_dq, o->naive_dq, r->e_dq, t},
        {"dK", SHAPE_KV, r->dk, r->naive_dk, o->naive_dk, r->e_dk, t},
        {"dV", SHAPE_KV, r->dv, r->naive_dv, o->naive_dv, r->e_dv, t},
    };
    int failures = 0;
    size_t n_fp = bwd ? 11 : 4, n_nv = bwd ? 5 : 2, same = 0, total = 0;
    *worst_units = 0.0;
    if (bwd && !dhat) {
        tg_say("    FAIL out of memory\n");
        return 1;
    }
    for (size_t a = 0; a < n_fp; a++)
        failures += compare_fp64(p, &fp[a], verbose, worst_units);
    for (size_t a = 0; a < n_nv; a++)
        failures += compare_naive(p, &nv[a], verbose, &same, &total);
    *naive_same = total ? (double)same / (double)total : 1.0;
    free(dhat);
    return failures;
}
