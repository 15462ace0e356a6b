/* ref/cuda/gpuref_internal.h — private to ref/cuda: the buffer counts behind
 * the memory plan (plan.c), shared with the device code (gpuref*.cu) so the
 * two cannot drift, and the DGEMM/SGEMM timing the bench compares against. */
#ifndef ATTNCHECK_GPUREF_INTERNAL_H
#define ATTNCHECK_GPUREF_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "../ref_gpu.h"

/* A block's S is at most this many entries (1 GiB per f64 buffer), and at
 * least REFG_MIN_ROWS rows tall unless the problem has fewer. */
#define REFG_BLOCK_ELEMS ((size_t)1 << 27)
#define REFG_MIN_ROWS 64
/* Doubles of per-row scratch in a block: g_i, Dhat_i, and the naive's D_i, m, l (f32). */
#define REFG_ROW_SCRATCH 4

/* What one call keeps on the device, in elements and buffer counts. */
typedef struct {
    size_t q_elems, kv_elems, rows; /* G Nq d, Nk d, G Nq of one group */
    int q64, q32, kv64, kv32, rows64; /* group buffers of each shape and width */
    size_t staging_bytes; /* bit patterns up, BSHD permutation down */
    int blk64, blk32, blk_mask; /* R x C buffers: f64, f32, bytes of dense mask */
} refg_sizes;

refg_sizes refg_sizes_of(const ac_problem *p, ac_dtype t, bool backward, bool scales, bool naive);
size_t refg_group_bytes(const refg_sizes *z);
size_t refg_block_bytes(const refg_sizes *z, size_t rows, size_t cols, int head_dim);

/* ---- downloads (transfer.c: plain C, the device behind callbacks) ----------
 * A slab: where a group's packed device buffer lands in a host tensor, in
 * elements: `height` rows of `width`, row r at offset + r * pitch (packed on
 * the device: row r at r * width). */
typedef struct {
    size_t offset, pitch, width, height;
} refg_slab;

typedef struct {
    double *host;
    refg_slab s;
} refg_xfer;

/* Packed elements [e0, e0 + n) of transfer `xfer`. */
typedef struct {
    int xfer;
    size_t e0, n;
} refg_chunk;

/* Two staging slots of slot_elems doubles (pinned host memory); fetch starts
 * copying a chunk from the device into a slot, wait returns when that copy is
 * done.  Both return AC_OK or an error status with err filled. */
typedef struct {
    double *slots[2];
    size_t slot_elems;
    int (*fetch)(void *ctx, int slot, const refg_chunk *c, ac_err *err);
    int (*wait)(void *ctx, int slot, ac_err *err);
    void *ctx;
} refg_pipe;

/* src (packed elements [e0, e0 + n) of slab s) to their places in host. */
void refg_scatter(double *host, const refg_slab *s, size_t e0, const double *src, size_t n);
/* The same on up to `workers` threads, 1 MiB a task. */
void refg_scatter_parallel(double *host, const refg_slab *s, size_t e0, const double *src, size_t n, int workers);
/* Every transfer, in order, chunk by chunk through the two slots: the device
 * fills one while the other is scattered. */
int refg_download(const refg_xfer *x, int n_xfers, const refg_pipe *pipe, int workers, ac_err *err);

/* cuBLAS's own rate on this device: reps timed calls of C(m x n) = A(m x k) B(k x n)
 * (after one warm-up), in TFLOP/s; fp64 selects DGEMM, else SGEMM (default
 * math: no TF32).  AC_ERR_ENV when there is no device. */
int refg_gemm_tflops(bool fp64, int m, int n, int k, int reps, double *tflops, ac_err *err);

#ifdef __cplusplus
}
#endif
#endif
