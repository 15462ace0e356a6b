// ref/cuda/gpuref_run.cuh — private to ref/cuda's device code: the state of one
// ref_gpu_reference call (device buffers of the current group and block, the
// cuBLAS handle and stream, stage timing), the checked-call macros, and the
// entry points the .cu files share.  gpuref.cu owns the call and the groups,
// gpuref_block.cu one block of query rows, gpuref_gemm.cu the GEMM wrappers.
#ifndef ATTNCHECK_GPUREF_RUN_CUH
#define ATTNCHECK_GPUREF_RUN_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "gpuref_device.cuh"
#include "gpuref_internal.h"

// A failed cudart / cuBLAS call becomes AC_ERR_ENV naming the call, file and line.
#define REFG_CUDA(err, call) \
    do { \
        cudaError_t refg_e_ = (call); \
        if (refg_e_ != cudaSuccess) \
            return ac_fail((err), AC_ERR_ENV, "GPU reference: %s failed: %s (%s:%d)", #call, \
                           cudaGetErrorString(refg_e_), __FILE__, __LINE__); \
    } while (0)
#define REFG_CUBLAS(err, call) \
    do { \
        cublasStatus_t refg_s_ = (call); \
        if (refg_s_ != CUBLAS_STATUS_SUCCESS) \
            return ac_fail((err), AC_ERR_ENV, "GPU reference: %s failed: %s (%s:%d)", #call, \
                           cublasGetStatusString(refg_s_), __FILE__, __LINE__); \
    } while (0)
// After a launch: a bad configuration shows at once, a fault at the next sync.
#define REFG_LAUNCH(err, name) \
    do { \
        cudaError_t refg_e_ = cudaGetLastError(); \
        if (refg_e_ != cudaSuccess) \
            return ac_fail((err), AC_ERR_ENV, "GPU reference: launch of %s failed: %s (%s:%d)", (name), \
                           cudaGetErrorString(refg_e_), __FILE__, __LINE__); \
    } while (0)
#define REFG_TRY(call) \
    do { \
        int refg_st_ = (call); \
        if (refg_st_ != AC_OK) \
            return refg_st_; \
    } while (0)

// Pinned staging of the downloads: two slots of this many bytes per context
// (transfer.c's double buffering).
#define REFG_STAGING_BYTES ((size_t)64 << 20)

// One per host thread: cuBLAS handles and streams are not to be shared between
// threads running cases at once.  A thread without one takes the context
// ref_gpu_warm_up made, if one waits, else makes its own.
struct refg_ctx {
    cublasHandle_t blas;
    cudaStream_t stream;
    int device;
    char name[128];
    double *staging[2]; // pinned, REFG_STAGING_BYTES each; NULL: downloads go pageable
    cudaEvent_t staged[2]; // a slot's copy is done
};
int refg_context(refg_ctx **out, ac_err *err);
// A DGEMM of 128 x 128 on ctx's handle, synchronised: cuBLAS loads its kernels
// at first use (gpuref_gemm.cu).
int refg_gemm_warm(refg_ctx *ctx, ac_err *err);

// The group's tensors, compact (G, Nq, d) / (Nk, d) / (G, Nq) with row stride d.
// Buffers a call does not need stay NULL.
struct refg_group_bufs {
    double *q, *q_abs, *d_o, *d_o_abs; // Q-like inputs, widened
    float *q32, *d_o32; // and in f32 for the naive
    double *k, *v, *k_abs, *v_abs; // K-like inputs
    float *k32, *v32;
    double *o, *dq, *e_o, *e_dq, *n_o, *n_dq; // Q-like outputs
    double *dk, *dv, *e_dk, *e_dv, *n_dk, *n_dv;
    float *n_dk_sum, *n_dv_sum; // the naive's f32 sums over rows and heads
    double *lse, *delta, *e_lse, *n_lse; // (G, Nq)
    unsigned char *staging; // bit patterns on their way up
    double *perm; // BSHD order on the way down
};

// One block of R x C: see ref_gpu.h's memory plan.
struct refg_block_bufs {
    double *s; // S, then P
    double *graw; // sum_c |Q||K|
    double *w; // E_O weights, then dV weights
    double *dp; // dP, then dS
    double *dph; // dPhat, then the dQ/dK weights
    float *n_s; // naive S, then P
    float *n_dp; // naive dP, then dS
    float *n_part; // (R, d): naive O or dQ sums
    uint8_t *mask; // dense mask slice, (R, C)
    double *g_row, *dhat; // (R)
    float *n_delta, *n_max, *n_sum; // (R): the naive's D, m, l
};

#define REFG_MAX_ALLOCS 64

struct refg_run {
    const ac_problem *p;
    ac_dtype t;
    bool backward, scales, naive, timing;
    size_t chunk_elems; // doubles per download chunk, at most a staging slot's
    refg_ctx *ctx;
    refg_sizes z;
    int block_rows, block_cols;
    refg_group_bufs gb;
    refg_block_bufs bb;
    // the current group
    int b, kv_head, group;
    refg_geom geom;
    // constants of the contract
    double scale, scale_abs, gscale, tau, rho;
    float scale_f;
    // accounting
    ref_gpu_stats *stats;
    int stage;
    double stage_t0;
    void *allocs[REFG_MAX_ALLOCS];
    int n_allocs;
    size_t bytes;
};

double refg_now(void);
// Closes the running stage (with timing: after a stream sync) and opens `stage`.
int refg_stage(refg_run *r, int stage, ac_err *err);

// Row-major GEMMs C(M x N) = alpha op(A)(M x K) op(B)(K x N) + beta C, on r's
// stream; flops (2 M N K) are added to *flops.
int refg_dgemm(refg_run *r, bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double *a, int lda,
               const double *b, int ldb, double beta, double *c, int ldc, double *flops, ac_err *err);

// One block: rows [i0, i0 + rows) of query head hl of the group, keys [jlo, jlo + cols).
struct refg_block_view {
    int hl, i0, rows, jlo, cols, d;
    size_t q_at, kv_at; // offsets of the block's first Q row and K row in the group buffers
};

// Query rows [i0, i1) of head hl of the group, keys [jlo, jhi): gpuref_block.cu.
int refg_block(refg_run *r, int hl, int i0, int i1, int jlo, int jhi, ac_err *err);
// Every (batch, KV head) group: inputs up, row blocks, outputs down (gpuref_groups.cu).
// in: q, k, v, d_o as given to ref_gpu_reference.
int refg_run_groups(refg_run *r, const void *const in[4], const ref_gpu_outputs *out, ac_err *err);
// The group's epilogue: E's rounding floor, the naive dK, dV rounded (gpuref_block.cu).
int refg_group_finish(refg_run *r, ac_err *err);
// The naive baseline of one block, and its group epilogue (gpuref_naive.cu).
int refg_block_naive(refg_run *r, const refg_block_view &v, ac_err *err);
int refg_group_finish_naive(refg_run *r, ac_err *err);
// Grid size for a grid-stride loop over n elements, 256 threads a block.
int refg_grid(size_t n);

#endif
