/* ref/fp64_block.h — internal to ref/: the pieces the fp64 forward, backward
 * and error scales share (defined in forward.c).  Not part of the public
 * interface; only the ref/ sources include it.
 *
 * All three walk one (batch b, query head h) at a time, in blocks of query
 * rows, so their memory is O(block * Nk): a score block S (rows x keys) is
 * computed by cblas_dgemm reading Q and K in place through their row strides,
 * masked, and turned into probabilities. */
#ifndef ATTNCHECK_REF_FP64_BLOCK_H
#define ATTNCHECK_REF_FP64_BLOCK_H

#include <stdbool.h>
#include <stddef.h>

#include "ref.h"

/* Query rows per block, the unit of work of the parallel for: REF_BLOCK_ELEMS
 * (8 MiB of scores) / Nk, kept within [REF_BLOCK_MIN_ROWS, REF_BLOCK_MAX_ROWS]
 * (and Nq).  Short blocks let causal and window masks skip the keys a block
 * cannot see and give every worker tasks; tall ones make better dgemms (one
 * BLAS thread at m = 64, 128, 256 rows: ~37, 45, 55 GFLOP/s here), so 128 at
 * most.  A worker holds one or two blocks: 16 MiB each at Nk = 128k. */
#define REF_BLOCK_MIN_ROWS 16
#define REF_BLOCK_MAX_ROWS 128
#define REF_BLOCK_ELEMS ((size_t)1 << 20)
int ref_block_rows(const ac_problem *p);
int ref_block_count(const ac_problem *p); /* blocks per (b, h): ceil(Nq / ref_block_rows) */

/* One (b, h) slice: head bases and row strides of the Q-like (Q, dQ), K-like
 * (K, dK), V-like (V, dV) and O-like (O, dO) tensors; the last two have d_v
 * columns (ac_head_dim_v), the first two d. */
typedef struct {
    const ac_problem *p;
    int b, h, h_kv;
    int seqlen_q, seqlen_k; /* nq_b, nk_b: rows and keys that are part of the problem */
    int stored_q, stored_k; /* rows and keys the tensors store for b: the padded lengths, or nq_b, nk_b
                               with THD (whose padding rows do not exist: nothing may be written there) */
    int d, d_v;
    size_t ld_q, ld_kv; /* row strides in elements: d (BHSD) or heads * d (BSHD) */
    size_t q_base, kv_base; /* offsets of row 0, column 0 of this head */
    size_t ld_o, ld_v; /* the same for O-like and V-like tensors (d_v columns) */
    size_t o_base, v_base;
} ref_head;

void ref_head_init(ref_head *hd, const ac_problem *p, int b, int h);

/* Task `task` of a parallel for over (b, h, block) in [0, B * Hq * ref_block_count):
 * its head and its rows [*i0, *i1) (may reach past nq_b into padding). */
void ref_block_task(const ac_problem *p, size_t task, ref_head *hd, int *i0, int *i1);

/* Per-worker scratch: for each kind, `workers` double buffers of sizes[kind]
 * elements, the array of them stored through slots[kind].  Free is safe after
 * a failed alloc. */
bool ref_scratch_alloc(double ***slots[], const size_t sizes[], int n_kinds, int workers);
void ref_scratch_free(double ***slots[], int n_kinds, int workers);

/* The key range [*jlo, *jhi) covering every visible key of rows [i0, i1)
 * (*jhi <= *jlo: none). */
void ref_block_keys(const ref_head *hd, int i0, int i1, int *jlo, int *jhi);

/* s = scale * Q[i0:i1] K[jlo:jhi]^T, row-major with row stride jhi - jlo, the
 * variants' score modifiers applied (S'), then masked: every entry whose key is
 * not visible becomes -inf. */
void ref_block_scores(const ref_head *hd, const double *q, const double *k, int i0, int i1, int jlo, int jhi,
                      double *s);

/* fp8 problems (ref/fp8.c): s = scale * Q[i0:i1] K[jlo:jhi]^T over the codes,
 * each S_ij then times its rows' descale factors, so equal exact scores stay
 * equal.  Returns false (s untouched) for other problems or when the code
 * copies cannot be allocated; the caller then multiplies code * factor. */
bool ref_fp8_block_products(const ref_head *hd, const double *q, const double *k, int i0, int i1, int jlo, int jhi,
                            double *s);

/* The same, with what the error scales and the backward need of the variants'
 * score modifiers (variants_internal.h) written to aux's arrays (same shape;
 * masked entries too, their values unused).  aux may be NULL. */
/* An fp8 kernel's declared accumulator (ref.h, fp8_acc_bits > 0): out[i - i0][j - jlo]
 * = |scale| 34 2^(24 - b) sum_k M_k, S_ij's error bound in units of u_f32 (ref/fp8.c). */
void ref_fp8_qk_errors(const ref_head *hd, const double *q, const double *k, int i0, int i1, int jlo, int jhi,
                       double *out);
/* And P V's (ref.h): e_o[(i - i0) * ld + c] += 34 2^-b / u sum_k M_k(i, c), in units of u of the
 * output, M_k over the step's P_ij V_jc (prob: rows i0..i1 over keys jlo..jhi, 0 where hidden). */
void ref_fp8_pv_errors(const ref_head *hd, const double *v, const double *prob, int i0, int i1, int jlo, int jhi,
                       double unit_out, double *e_o, size_t ld);

typedef struct ref_mod_aux ref_mod_aux;
void ref_block_scores_mods(const ref_head *hd, const double *q, const double *k, int i0, int i1, int jlo, int jhi,
                           double *s, const ref_mod_aux *aux);

/* Scores to probabilities with a known LSE per row: s = exp(s - lse_nat[i]);
 * masked entries (-inf) and rows with lse = -inf give exact zeros. */
void ref_block_probs_from_lse(const ref_head *hd, int i0, int i1, int jlo, int jhi, const double *lse_nat, double *s);

/* In place x[i] = exp(x[i] - shift) for n entries; returns their sum.
 * -inf gives 0; accurate to a few ulps (vectorised, see forward.c). */
double ref_exp_shifted(double *x, size_t n, double shift);

/* Runs fn(ctx, r0, r1) over rows [i0, i1), split between this thread and one
 * more when the block holds at least 2^16 elements.  fn must only write what
 * belongs to its rows.  For the MPFR reference's chunks (mpfr_ref.c); the
 * fp64 stages use parallel.h's parallel for instead. */
typedef void (*ref_rows_fn)(void *ctx, int r0, int r1);
void ref_parallel_rows(ref_rows_fn fn, void *ctx, int i0, int i1, size_t elems);

/* Zero rows [i0, i1) (all d columns) of a Q-like tensor of this head; of an
 * O-like one (d_v columns). */
void ref_zero_q_rows(const ref_head *hd, double *t, int i0, int i1);
void ref_zero_o_rows(const ref_head *hd, double *t, int i0, int i1);

#endif
