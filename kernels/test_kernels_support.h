/* kernels/test_kernels_support.h — shared by the kernels/ tests only: a small
 * attention case (problem, fresh random inputs in a dtype, poisoned outputs)
 * and runners for a kernel's forward and backward on it. */
#ifndef ATTNCHECK_TEST_KERNELS_SUPPORT_H
#define ATTNCHECK_TEST_KERNELS_SUPPORT_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel.h"

typedef struct {
    ac_problem p;
    ac_dtype t;
    size_t nq, nkv, nl; /* element counts */
    size_t no, nv; /* O, dO and V, dV (d_v columns; nq, nkv without the dv variant) */
    void *q, *k, *v, *d_o;
    void *o, *dq, *dk, *dv; /* the kernel's outputs, poisoned before each run */
    float *lse;
    int seqlens_q[8], seqlens_k[8];
    uint8_t *mask;
} tk_case;

static inline uint64_t tk_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Standard normal (Box-Muller), never exactly zero after rounding for |x| > tiny. */
static inline double tk_normal(uint64_t *state)
{
    double u1 = ((double)(tk_next(state) >> 11) + 0.5) * 0x1p-53;
    double u2 = (double)(tk_next(state) >> 11) * 0x1p-53;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static inline void *tk_fill(ac_dtype t, size_t n, double magnitude, uint64_t *state)
{
    size_t sz = ac_dtype_size(t);
    void *buf = malloc(n * sz);
    cr_assert(buf);
    for (size_t i = 0; i < n; i++) {
        uint32_t bits = ac_narrow(t, magnitude * tk_normal(state));
        if (sz == 4)
            ((uint32_t *)buf)[i] = bits;
        else
            ((uint16_t *)buf)[i] = (uint16_t)bits;
    }
    return buf;
}

/* Inputs for the problem p (whose mask/seqlens arrays, if any, the caller set
 * into c->mask / c->seqlens_* before or after: they are read at run time). */
static inline void tk_init(tk_case *c, ac_problem p, ac_dtype t, double magnitude, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->p = p;
    c->t = t;
    c->nq = ac_q_elems(&p);
    c->nkv = ac_kv_elems(&p);
    c->no = ac_o_elems(&p);
    c->nv = ac_v_elems(&p);
    c->nl = ac_lse_elems(&p);
    uint64_t st = seed * 7919u + 1;
    c->q = tk_fill(t, c->nq, magnitude, &st);
    c->k = tk_fill(t, c->nkv, magnitude, &st);
    c->v = tk_fill(t, c->nv, 1.0, &st);
    c->d_o = tk_fill(t, c->no, 1.0, &st);
    size_t sz = ac_dtype_size(t);
    c->o = malloc(c->no * sz);
    c->dq = malloc(c->nq * sz);
    c->dk = malloc(c->nkv * sz);
    c->dv = malloc(c->nv * sz);
    c->lse = malloc(c->nl * sizeof(float));
    cr_assert(c->o && c->dq && c->dk && c->dv && c->lse);
}

static inline void tk_free(tk_case *c)
{
    void *all[] = {c->q, c->k, c->v, c->d_o, c->o, c->dq, c->dk, c->dv, c->lse, c->mask};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

/* A dense mask of random bits (about 3/4 visible) with query row `masked_row`
 * (of every batch and head) fully hidden; -1 for none. */
static inline void tk_dense_mask(tk_case *c, int masked_row, uint64_t seed)
{
    ac_problem *p = &c->p;
    size_t n = (size_t)p->batch * p->heads_q * p->seqlen_q * p->seqlen_k;
    c->mask = malloc(n);
    cr_assert(c->mask);
    uint64_t st = seed;
    for (size_t x = 0; x < n; x++) {
        int i = (int)(x / (size_t)p->seqlen_k % (size_t)p->seqlen_q);
        c->mask[x] = i == masked_row ? 0 : (tk_next(&st) & 3) != 0;
    }
    p->dense_mask = c->mask;
    p->mask_batch = p->batch;
    p->mask_heads = p->heads_q;
}

static inline void tk_poison(tk_case *c)
{
    size_t sz = ac_dtype_size(c->t);
    memset(c->o, 0xFF, c->no * sz); /* all-ones bits: a NaN in every dtype */
    memset(c->dq, 0xFF, c->nq * sz);
    memset(c->dk, 0xFF, c->nkv * sz);
    memset(c->dv, 0xFF, c->nv * sz);
    for (size_t i = 0; i < c->nl; i++)
        c->lse[i] = NAN;
}

static inline void tk_forward(const ac_kernel *k, tk_case *c)
{
    ac_err err = {{0}};
    uint8_t *bits = c->p.dropout_p > 0.0 ? calloc((ac_dropout_elems(&c->p) + 7) / 8, 1) : NULL; /* its keep mask */
    ac_fwd_args a = {.q = c->q, .k = c->k, .v = c->v, .o = c->o, .lse = c->lse, .dropout_mask = bits};
    cr_assert_eq(k->forward(k, &c->p, c->t, &a, &err), AC_OK, "%s forward: %s", k->name, err.msg);
    free(bits);
}

/* Backward from the kernel's own O and LSE (run tk_forward first). */
static inline void tk_backward(const ac_kernel *k, tk_case *c)
{
    ac_err err = {{0}};
    ac_bwd_args a = {.q = c->q,
                     .k = c->k,
                     .v = c->v,
                     .o = c->o,
                     .d_o = c->d_o,
                     .lse = c->lse,
                     .dq = c->dq,
                     .dk = c->dk,
                     .dv = c->dv};
    cr_assert_eq(k->backward(k, &c->p, c->t, &a, &err), AC_OK, "%s backward: %s", k->name, err.msg);
}

static inline double *tk_widen(ac_dtype t, const void *buf, size_t n)
{
    double *out = malloc((n ? n : 1) * sizeof(double));
    cr_assert(out);
    ac_load(t, buf, n, out);
    return out;
}

#endif
