/* ref/naive_kernels.c — the naive baseline's product loops (naive_kernels.h).
 *
 * Each is a register block of 4 rows (or keys) x NK_COLS columns: per step
 * of the sum, two vector loads, four broadcasts, eight multiplies and eight
 * adds, the accumulators staying in registers.  Remainders: a block's missing
 * rows repeat the last valid row and are not stored.  Multiplies and adds
 * stay separate (fp-contract=off): an FMA rounds once where the definition
 * rounds twice.  Cloned for AVX-512 and AVX2 on x86-64 like forward.c's exp. */
#include <string.h>

#include "naive_kernels.h"

#define VLEN 16
typedef float vec_f __attribute__((vector_size(VLEN * sizeof(float))));

#if defined(__x86_64__) && defined(__gnu_linux__) && !defined(__clang__)
#define NK_CLONES __attribute__((target_clones("avx512f", "avx2", "default"), optimize("fp-contract=off")))
#else
#define NK_CLONES
#endif

/* Macros, not functions: a vector passed or returned by value would change
 * the ABI between the clones (-Wpsabi). */
#define LOAD_VEC(v, src) memcpy(&(v), (src), sizeof(vec_f))
#define STORE_VEC(dst, v) memcpy((dst), &(v), sizeof(vec_f))

NK_CLONES
void nk_dot_rows(const float *a, size_t lda, int rows, const float *bt, size_t ldb, int cols, int d, float *out,
                 size_t ldo)
{
    for (int r0 = 0; r0 < rows; r0 += 4) {
        const float *ar[4];
        for (int u = 0; u < 4; u++)
            ar[u] = a + (size_t)(r0 + u < rows ? r0 + u : rows - 1) * lda;
        for (int j = 0; j < cols; j += NK_COLS) {
            vec_f acc[4][2] = {{{0}}};
            for (int c = 0; c < d; c++) {
                vec_f b0, b1;
                LOAD_VEC(b0, bt + (size_t)c * ldb + j);
                LOAD_VEC(b1, bt + (size_t)c * ldb + j + VLEN);
#pragma GCC unroll 4
                for (int u = 0; u < 4; u++) {
                    acc[u][0] += ar[u][c] * b0; /* the scalar is broadcast */
                    acc[u][1] += ar[u][c] * b1;
                }
            }
            for (int u = 0; u < 4 && r0 + u < rows; u++) {
                STORE_VEC(out + (size_t)(r0 + u) * ldo + j, acc[u][0]);
                STORE_VEC(out + (size_t)(r0 + u) * ldo + j + VLEN, acc[u][1]);
            }
        }
    }
}

NK_CLONES
void nk_acc_rows(const float *w, size_t ldw, int rows, int n, const float *b, size_t ldb, int d_pad, float *out,
                 size_t ldo)
{
    for (int r0 = 0; r0 < rows; r0 += 4) {
        const float *wr[4];
        for (int u = 0; u < 4; u++)
            wr[u] = w + (size_t)(r0 + u < rows ? r0 + u : rows - 1) * ldw;
        for (int c = 0; c < d_pad; c += NK_COLS) {
            vec_f acc[4][2] = {{{0}}};
            for (int j = 0; j < n; j++) {
                vec_f b0, b1;
                LOAD_VEC(b0, b + (size_t)j * ldb + c);
                LOAD_VEC(b1, b + (size_t)j * ldb + c + VLEN);
#pragma GCC unroll 4
                for (int u = 0; u < 4; u++) {
                    acc[u][0] += wr[u][j] * b0;
                    acc[u][1] += wr[u][j] * b1;
                }
            }
            for (int u = 0; u < 4 && r0 + u < rows; u++) {
                STORE_VEC(out + (size_t)(r0 + u) * ldo + c, acc[u][0]);
                STORE_VEC(out + (size_t)(r0 + u) * ldo + c + VLEN, acc[u][1]);
            }
        }
    }
}

NK_CLONES
void nk_acc_cols(const float *w, size_t ldw, int rows, int keys, const float *x, size_t ldx, int d_pad, float *acc,
                 size_t ld_acc)
{
    for (int j0 = 0; j0 < keys; j0 += 4) {
        int col[4];
        for (int u = 0; u < 4; u++)
            col[u] = j0 + u < keys ? j0 + u : keys - 1;
        for (int c = 0; c < d_pad; c += NK_COLS) {
            vec_f sum[4][2];
            for (int u = 0; u < 4; u++) {
                LOAD_VEC(sum[u][0], acc + (size_t)col[u] * ld_acc + c);
                LOAD_VEC(sum[u][1], acc + (size_t)col[u] * ld_acc + c + VLEN);
            }
            for (int i = 0; i < rows; i++) {
                const float *wi = w + (size_t)i * ldw;
                vec_f x0, x1;
                LOAD_VEC(x0, x + (size_t)i * ldx + c);
                LOAD_VEC(x1, x + (size_t)i * ldx + c + VLEN);
#pragma GCC unroll 4
                for (int u = 0; u < 4; u++) {
                    sum[u][0] += wi[col[u]] * x0;
                    sum[u][1] += wi[col[u]] * x1;
                }
            }
            for (int u = 0; u < 4 && j0 + u < keys; u++) {
                STORE_VEC(acc + (size_t)col[u] * ld_acc + c, sum[u][0]);
                STORE_VEC(acc + (size_t)col[u] * ld_acc + c + VLEN, sum[u][1]);
            }
        }
    }
}
