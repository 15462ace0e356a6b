/* ref/naive_kernels.h — internal to ref/: the three float product loops of
 * the naive baseline, vectorised, with the summation order of the scalar
 * definition (naive_scalar.c) kept exactly: every output element is
 * ((0 + x_0 y_0) + x_1 y_1) + ..., each product rounded to float before it is
 * added (no FMA), the terms in index order.  So the blocked baseline equals
 * the scalar one bit for bit, in every dtype (f32 included, where any other
 * order changes the error statistics the vs-naive ratio divides by).
 *
 * Vectors run across the output's contiguous index (keys for S and dP, the
 * head dimension for the others), never across the sum.  Widths: `cols` in
 * nk_dot_rows and `d_pad` elsewhere are multiples of NK_COLS, and the arrays
 * they index are that wide (zero padding). */
#ifndef ATTNCHECK_REF_NAIVE_KERNELS_H
#define ATTNCHECK_REF_NAIVE_KERNELS_H

#include <stddef.h>

#define NK_COLS 32 /* output columns per step: two vectors of 16 floats */

/* out[r][j] = sum_{c < d} a[r][c] bt[c][j] for r < rows, j < cols: S = Q K^T and
 * dP = dO V^T from K^T / V^T stored (d, keys). */
void nk_dot_rows(const float *a, size_t lda, int rows, const float *bt, size_t ldb, int cols, int d, float *out,
                 size_t ldo);

/* out[r][c] = sum_{j < n} w[r][j] b[j][c] for r < rows, c < d_pad: O = P V, dQ = dS K. */
void nk_acc_rows(const float *w, size_t ldw, int rows, int n, const float *b, size_t ldb, int d_pad, float *out,
                 size_t ldo);

/* acc[j][c] += sum_{i < rows} w[i][j] x[i][c] for j < keys, c < d_pad, the
 * terms added to acc one row at a time in order of i: dV += P^T dO,
 * dK += dS^T Q, continuing the scalar's running sums across calls. */
void nk_acc_cols(const float *w, size_t ldw, int rows, int keys, const float *x, size_t ldx, int d_pad, float *acc,
                 size_t ld_acc);

#endif
