/* ref/mpfr_exact.h — internal to ref/: the exact-arithmetic pieces the MPFR
 * reference (mpfr_ref.c) is built on.  Not part of the public interface.
 *
 * Exact matrix products in double by slicing (Ozaki's scheme): every line of
 * a matrix (a row, or a column) is split into slices whose entries are
 * integers of at most beta bits times a per-line power of two.  With
 * 2 beta + ceil(log2 n) <= 53, a dgemm of two slices over n terms is exact:
 * every partial sum is an integer below 2^53 times the product of quanta. */
#ifndef ATTNCHECK_REF_MPFR_EXACT_H
#define ATTNCHECK_REF_MPFR_EXACT_H

#include <mpfr.h>
#include <stdbool.h>
#include <stddef.h>

/* Largest beta with 2 beta + ceil(log2 n) <= 53. */
int mx_exact_beta(size_t n);

/* An outer x inner block of doubles at src[o * ld + i]; its lines are the
 * rows (outer index) or the columns (inner index). */
typedef struct {
    const double *src;
    size_t outer, inner, ld;
    bool lines_are_rows;
} mx_block;

#define MX_TOO_MANY_SLICES (-1)
#define MX_BAD_VALUE (-2)

/* Splits the block exactly into slices: slice s is out[s * outer * inner +
 * o * inner + i] (the block's own layout, contiguous), and the slices add up
 * to the block exactly.  Returns the number of slices (0 for an all-zero
 * block), MX_TOO_MANY_SLICES past max_slices, or MX_BAD_VALUE for a value
 * that is not finite with magnitude 0 or in [2^-400, 2^400] (the range in
 * which no slice product under- or overflows; f32/f16/bf16 values are in it).
 * rem: scratch of outer * inner doubles, line: of 3 * max(outer, inner). */
int mx_slice_block(const mx_block *b, int beta, double *out, int max_slices, double *rem, double *line);

/* Slices of x in [0, 1] on the grid of a line with |x| < 2^1: slice s is
 * the integer formed by bits [1 - beta (s+1), 1 - beta s) of x, times
 * quantum[s] = 2^(1 - beta (s+1)), written to out[s * stride].  The bits below
 * 1 - beta n_slices are dropped (truncation, < 2^(1 - beta n_slices)).
 * x must have been set up with mpfr_custom_init_set (its limbs are read). */
void mx_slice_bits(mpfr_t x, int beta, int n_slices, const double *quantum, double *out, size_t stride);

/* dst = the exact sum of terms[0..n), rounded once to dst's precision.
 * tmp, ptrs: 64 scratch variables of >= 53 bits and their pointers. */
void mx_sum_doubles(mpfr_t dst, const double *terms, size_t n, mpfr_t *tmp, mpfr_ptr *ptrs);

/* exp(x) for x <= 0 at a given precision, by table reduction: with
 * n = round(-x 2^20) written in base 32 as (a; b1 b2 b3 b4),
 * exp(x) = exp(-a) exp(-b1/32) exp(-b2/32^2) exp(-b3/32^3) exp(-b4/32^4)
 * exp(r), |r| <= 2^-20, and exp(r) by its Taylor series in Horner form, each
 * stage at the precision its weight needs.  MPFR's own exp costs 4 to 7 us
 * on a 128-bit argument; this costs a fraction.  Relative error below
 * 1.1 * 2^-prec.  Arguments below -64 go to mpfr_exp.  The table (about
 * 3200 values) is built once per call of the MPFR reference. */
#define MX_EXP_WHOLE 64
#define MX_EXP_LEVELS 4
#define MX_EXP_MAX_TERMS 48

typedef struct {
    int prec, terms;
    mpfr_t whole[MX_EXP_WHOLE + 1]; /* exp(-a) */
    mpfr_t frac[MX_EXP_LEVELS][32]; /* level l: exp(-b 32^-(l+1)) */
    mpfr_t coef[MX_EXP_MAX_TERMS + 1]; /* 1/n! */
    mpfr_t hi[(MX_EXP_WHOLE + 1) * 32]; /* exp(-a - b1/32): whole x frac[0] */
    mpfr_t mid[32 * 32]; /* exp(-b2/32^2 - b3/32^3): frac[1] x frac[2] */
} mx_exp_table;

typedef struct {
    mpfr_t r, grid, acc;
    mpfr_t h[MX_EXP_MAX_TERMS + 1]; /* Horner stages, precision falling with n */
} mx_exp_scratch;

void mx_exp_table_init(mx_exp_table *t, int prec);
void mx_exp_table_clear(mx_exp_table *t);
void mx_exp_scratch_init(mx_exp_scratch *s, const mx_exp_table *t);
void mx_exp_scratch_clear(mx_exp_scratch *s, const mx_exp_table *t);
/* out = exp(x) rounded to out's precision (out may be x); x <= 0. */
void mx_exp(mpfr_t out, mpfr_srcptr x, const mx_exp_table *t, mx_exp_scratch *s);

/* ---- shared by mpfr_ref.c and certify.c ---------------------------------- */
#include "ref.h"

size_t mx_total_rows(const ac_problem *p); /* B * Hq * Nq */
int mx_cmp_size(const void *a, const void *b);
/* The checks every MPFR entry point makes: problem, inputs, precision. */
int mx_check_args(const ac_problem *p, const double *q, const double *k, const double *v, int prec_bits, const char *fn,
                  ac_err *err);
/* The MPFR path on row ids ids[0..n) sorted ascending; results compact:
 * o[t * d + c] and lse[t] for the t-th id. */
int mx_forward_rows(const ac_problem *p, const double *q, const double *k, const double *v, int prec, const size_t *ids,
                    size_t n, double *o, double *lse, ac_err *err);

#endif
