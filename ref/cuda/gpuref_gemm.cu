// ref/cuda/gpuref_gemm.cu — the GEMMs of the GPU reference, row-major over
// cuBLAS's column-major: a row-major X with row stride ld is the column-major
// X^T with the same ld, so C = op(A) op(B) is cuBLAS's C^T = op(B)^T op(A)^T,
// the operands swapped and the transposes kept.  Also cuBLAS's own DGEMM and
// SGEMM rates on this device, which the bench compares the reference with.
#include "gpuref_run.cuh"

namespace
{

inline cublasOperation_t op(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

} // namespace

int refg_dgemm(refg_run *r, bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double *a, int lda,
               const double *b, int ldb, double beta, double *c, int ldc, double *flops, ac_err *err)
{
    REFG_CUBLAS(err,
                cublasDgemm(r->ctx->blas, op(trans_b), op(trans_a), n, m, k, &alpha, b, ldb, a, lda, &beta, c, ldc));
    *flops += 2.0 * m * n * k;
    return AC_OK;
}

namespace
{

// Buffers of a timing run, freed on every path.
struct gemm_bufs {
    void *a = nullptr, *b = nullptr, *c = nullptr;
    cudaEvent_t start = nullptr, stop = nullptr;
    ~gemm_bufs()
    {
        cudaFree(a);
        cudaFree(b);
        cudaFree(c);
        if (start)
            cudaEventDestroy(start);
        if (stop)
            cudaEventDestroy(stop);
    }
};

__global__ void fill_values(double *x64, float *x32, size_t n, unsigned seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)(i * 2654435761u) ^ seed;
        double x = (double)(h % 2001u) / 1000.0 - 1.0; // in [-1, 1]: no overflow, no denormals
        if (x64)
            x64[i] = x;
        if (x32)
            x32[i] = (float)x;
    }
}

int gemm_call(refg_ctx *ctx, bool fp64, int m, int n, int k, const gemm_bufs &g, ac_err *err)
{
    if (fp64) {
        const double one = 1.0, zero = 0.0;
        REFG_CUBLAS(err,
                    cublasDgemm(ctx->blas, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, (const double *)g.a, m,
                                (const double *)g.b, k, &zero, (double *)g.c, m));
    } else {
        const float one = 1.0f, zero = 0.0f;
        REFG_CUBLAS(err,
                    cublasSgemm(ctx->blas, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, (const float *)g.a, m,
                                (const float *)g.b, k, &zero, (float *)g.c, m));
    }
    return AC_OK;
}

} // namespace

int refg_gemm_tflops(bool fp64, int m, int n, int k, int reps, double *tflops, ac_err *err)
{
    refg_ctx *ctx;
    REFG_TRY(refg_context(&ctx, err));
    size_t es = fp64 ? sizeof(double) : sizeof(float);
    size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * n;
    gemm_bufs g;
    REFG_CUDA(err, cudaMalloc(&g.a, na * es));
    REFG_CUDA(err, cudaMalloc(&g.b, nb * es));
    REFG_CUDA(err, cudaMalloc(&g.c, nc * es));
    fill_values<<<1024, 256, 0, ctx->stream>>>(fp64 ? (double *)g.a : nullptr, fp64 ? nullptr : (float *)g.a, na, 1u);
    REFG_LAUNCH(err, "fill_values");
    fill_values<<<1024, 256, 0, ctx->stream>>>(fp64 ? (double *)g.b : nullptr, fp64 ? nullptr : (float *)g.b, nb, 2u);
    REFG_LAUNCH(err, "fill_values");
    REFG_CUDA(err, cudaEventCreate(&g.start));
    REFG_CUDA(err, cudaEventCreate(&g.stop));
    REFG_TRY(gemm_call(ctx, fp64, m, n, k, g, err)); // warm-up: kernel selection, clocks
    REFG_CUDA(err, cudaEventRecord(g.start, ctx->stream));
    for (int i = 0; i < reps; i++)
        REFG_TRY(gemm_call(ctx, fp64, m, n, k, g, err));
    REFG_CUDA(err, cudaEventRecord(g.stop, ctx->stream));
    REFG_CUDA(err, cudaEventSynchronize(g.stop));
    float ms = 0.0f;
    REFG_CUDA(err, cudaEventElapsedTime(&ms, g.start, g.stop));
    *tflops = 2.0 * m * n * (double)k * reps / (ms * 1e-3) / 1e12;
    return AC_OK;
}

int refg_gemm_warm(refg_ctx *ctx, ac_err *err)
{
    const int n = 128;
    gemm_bufs g;
    size_t bytes = (size_t)n * n * sizeof(double);
    REFG_CUDA(err, cudaMalloc(&g.a, bytes));
    REFG_CUDA(err, cudaMalloc(&g.b, bytes));
    REFG_CUDA(err, cudaMalloc(&g.c, bytes));
    REFG_CUDA(err, cudaMemsetAsync(g.a, 0, bytes, ctx->stream));
    REFG_CUDA(err, cudaMemsetAsync(g.b, 0, bytes, ctx->stream));
    REFG_TRY(gemm_call(ctx, true, n, n, n, g, err));
    REFG_CUDA(err, cudaStreamSynchronize(ctx->stream));
    return AC_OK;
}
