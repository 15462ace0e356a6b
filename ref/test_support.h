/* ref/test_support.h — helpers for the ref/ unit tests (R1's suites): a
 * small seeded PRNG, inputs that are exact dtype values, and a direct
 * double-loop attention forward to check the blocked dgemm path against.
 * Header-only (static functions) so each test file stays self-contained. */
#ifndef ATTNCHECK_REF_TEST_SUPPORT_H
#define ATTNCHECK_REF_TEST_SUPPORT_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ref.h"

typedef struct {
    uint64_t state;
} ts_rng;

static inline uint64_t ts_next(ts_rng *r)
{
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1). */
static inline double ts_uniform(ts_rng *r) { return ((double)(ts_next(r) >> 11) + 0.5) * 0x1p-53; }

/* Standard normal by Box-Muller (one of the pair is enough here). */
static inline double ts_normal(ts_rng *r)
{
    double u1 = ts_uniform(r), u2 = ts_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* n normal(0, sigma) values rounded to dtype t, so they are exact dtype values. */
static inline void ts_fill(ts_rng *r, ac_dtype t, double sigma, double *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = ac_round(t, sigma * ts_normal(r));
}

static inline double *ts_alloc(size_t n)
{
    double *x = calloc(n ? n : 1, sizeof *x);
    if (!x)
        abort(); /* tests only */
    return x;
}

/* The whole input and output set of one problem, allocated and filled. */
typedef struct {
    ac_problem p;
    double *q, *k, *v, *d_o; /* inputs */
    double *o, *lse, *dq, *dk, *dv, *delta;
} ts_case;

static inline void ts_case_init(ts_case *c, const ac_problem *p, ac_dtype t, uint64_t seed)
{
    ts_rng r = {seed};
    c->p = *p;
    size_t nq = ac_q_elems(p), nkv = ac_kv_elems(p), nl = ac_lse_elems(p);
    size_t no = ac_o_elems(p), nv = ac_v_elems(p); /* O, dO, V, dV: d_v columns */
    c->q = ts_alloc(nq);
    c->k = ts_alloc(nkv);
    c->v = ts_alloc(nv);
    c->d_o = ts_alloc(no);
    c->o = ts_alloc(no);
    c->lse = ts_alloc(nl);
    c->dq = ts_alloc(nq);
    c->dk = ts_alloc(nkv);
    c->dv = ts_alloc(nv);
    c->delta = ts_alloc(nl);
    ts_fill(&r, t, 1.0, c->q, nq);
    ts_fill(&r, t, 1.0, c->k, nkv);
    ts_fill(&r, t, 1.0, c->v, nv);
    ts_fill(&r, t, 1.0, c->d_o, no);
}

static inline void ts_case_free(ts_case *c)
{
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->d_o);
    free(c->o);
    free(c->lse);
    free(c->dq);
    free(c->dk);
    free(c->dv);
    free(c->delta);
}

/* Direct forward of one row in plain double loops (libm exp, no BLAS):
 * o_row[c] (d values) and the returned LSE; p_row (Nk) gets P_ij. */
static inline double ts_direct_row(const ac_problem *p, const double *q, const double *k, const double *v, int b, int h,
                                   int i, double *o_row, double *p_row)
{
    int nk = p->seqlen_k, d = p->head_dim, hk = ac_kv_head_of(p, h), lo, hi;
    double m = -INFINITY;
    ac_visible_range(p, b, i, &lo, &hi); /* only to skip work: ac_visible decides */
    for (int j = 0; j < nk; j++) {
        p_row[j] = -INFINITY;
        if (j < lo || j >= hi || !ac_visible(p, b, h, i, j))
            continue;
        double s = 0.0;
        for (int c = 0; c < d; c++)
            s += q[ac_q_index(p, b, h, i, c)] * k[ac_kv_index(p, b, hk, j, c)];
        p_row[j] = s * p->scale;
        m = p_row[j] > m ? p_row[j] : m;
    }
    for (int c = 0; c < d; c++)
        o_row[c] = 0.0;
    if (m == -INFINITY) {
        for (int j = 0; j < nk; j++)
            p_row[j] = 0.0;
        return -INFINITY;
    }
    double l = 0.0;
    for (int j = 0; j < nk; j++) {
        p_row[j] = p_row[j] == -INFINITY ? 0.0 : exp(p_row[j] - m);
        l += p_row[j];
    }
    for (int j = 0; j < nk; j++) {
        p_row[j] /= l;
        for (int c = 0; c < d && p_row[j] != 0.0; c++)
            o_row[c] += p_row[j] * v[ac_kv_index(p, b, hk, j, c)];
    }
    return m + log(l);
}

/* Problems used across the suites: every mask kind on small shapes. */
enum {
    TS_NONE,
    TS_CAUSAL_TL,
    TS_CAUSAL_BR,
    TS_WINDOW_TL,
    TS_WINDOW_BR,
    TS_VARLEN,
    TS_DENSE,
    TS_GQA,
    TS_BSHD,
    TS_KIND_COUNT
};

static const int ts_varlen_q[2] = {3, 6};
static const int ts_varlen_k[2] = {7, 2};

/* Dense mask (1, 1, 6, 7) with row 2 fully masked. */
static const uint8_t ts_dense_mask[6 * 7] = {
    1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0,
    1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 1, 0, 0, 0,
};

static inline const char *ts_kind_name(int kind)
{
    static const char *names[TS_KIND_COUNT] = {"none",   "causal-tl", "causal-br", "window-tl", "window-br",
                                               "varlen", "dense",     "gqa",       "bshd"};
    return names[kind];
}

/* Small problems (B <= 2, H <= 4, N <= 7, d = 4) of each kind. */
static inline ac_problem ts_problem(int kind)
{
    ac_problem p = ac_problem_dense(1, 2, 2, 6, 7, 4);
    switch (kind) {
    case TS_CAUSAL_TL:
        p.windowed = true;
        p.window_right = 0;
        break;
    case TS_CAUSAL_BR: /* Nq > Nk: the first two rows see no key */
        p = ac_problem_dense(1, 2, 2, 7, 5, 4);
        p.windowed = true;
        p.window_right = 0;
        p.align = AC_ALIGN_BOTTOM_RIGHT;
        break;
    case TS_WINDOW_TL:
        p.windowed = true;
        p.window_left = 2;
        p.window_right = 1;
        break;
    case TS_WINDOW_BR:
        p.windowed = true;
        p.window_left = 1;
        p.window_right = 2;
        p.align = AC_ALIGN_BOTTOM_RIGHT;
        break;
    case TS_VARLEN:
        p.batch = 2;
        p.seqlens_q = ts_varlen_q;
        p.seqlens_k = ts_varlen_k;
        break;
    case TS_DENSE:
        p.dense_mask = ts_dense_mask;
        break;
    case TS_GQA:
        p.heads_q = 4;
        p.heads_kv = 2;
        p.windowed = true;
        p.window_right = 0;
        break;
    case TS_BSHD:
        p = ac_problem_dense(2, 3, 1, 5, 6, 4);
        p.layout = AC_LAYOUT_BSHD;
        break;
    default:
        break;
    }
    return p;
}

#endif
