// ref/cuda/cublas_lazy.cu — the cuBLAS functions attncheck calls, opened on first use.
//
// Linking libcublas maps libcublasLt with it, whose 353 000 relocations cost every process
// that starts ~80 ms of page faults before main (perf, 2026-11-29; 6 ms without them): the
// CLI, every run of it in the unit tests (their suite took 100 s with cuBLAS linked, 24 s
// without), a plugin's or --exec's worker.  Only the GPU reference and cuda-naive call cuBLAS,
// so its functions are defined here under their own names, with cublas_v2.h's prototypes
// (the compiler checks each signature against the header), and each forwards to the library
// opened by dlopen the first time any of them is called (as PyTorch's LazyNVRTC does for
// NVRTC).  Without the library a call returns CUBLAS_STATUS_NOT_INITIALIZED and
// cublasGetStatusString says why, so callers report "cuBLAS not loaded: <dlerror>".
// The executable does not export these names, so libcublas's own calls never bind to them.
#include <cublas_v2.h>
#include <dlfcn.h>

#include <cstdio>
#include <mutex>

namespace
{

#define LAZY_STR2(x) #x
#define LAZY_STR(x) LAZY_STR2(x)
constexpr const char *kSoname = "libcublas.so." LAZY_STR(CUBLAS_VER_MAJOR);

void *g_lib;
char g_why[512];
std::once_flag g_once;

// cuBLAS's function `name`, or null (g_why says why); the library opened on the first call.
void *lazy_symbol(const char *name)
{
    std::call_once(g_once, [] {
        g_lib = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL);
        if (!g_lib)
            snprintf(g_why, sizeof g_why, "cuBLAS not loaded: %s", dlerror());
    });
    if (!g_lib)
        return nullptr;
    void *f = dlsym(g_lib, name);
    if (!f)
        snprintf(g_why, sizeof g_why, "cuBLAS (%s) has no %s", kSoname, name);
    return f;
}

// The call forwarded, its function looked up once per definition below.
#define LAZY_FORWARD(fn, ...) \
    do { \
        static const auto f_ = reinterpret_cast<decltype(&fn)>(lazy_symbol(#fn)); \
        return f_ ? f_(__VA_ARGS__) : CUBLAS_STATUS_NOT_INITIALIZED; \
    } while (0)

} // namespace

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t *handle) { LAZY_FORWARD(cublasCreate_v2, handle); }

cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) { LAZY_FORWARD(cublasDestroy_v2, handle); }

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream)
{
    LAZY_FORWARD(cublasSetStream_v2, handle, stream);
}

cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode)
{
    LAZY_FORWARD(cublasSetMathMode, handle, mode);
}

cublasStatus_t CUBLASWINAPI cublasDgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                           int m, int n, int k, const double *alpha, const double *A, int lda,
                                           const double *B, int ldb, const double *beta, double *C, int ldc)
{
    LAZY_FORWARD(cublasDgemm_v2, handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

cublasStatus_t CUBLASWINAPI cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                           int m, int n, int k, const float *alpha, const float *A, int lda,
                                           const float *B, int ldb, const float *beta, float *C, int ldc)
{
    LAZY_FORWARD(cublasSgemm_v2, handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

// cublas_api.h also has an inline C++ overload of this name (a cudaDataType compute type), so the
// pointer's type is spelled out rather than taken with decltype.
cublasStatus_t CUBLASWINAPI cublasGemmBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                                cublasOperation_t transb, int m, int n, int k, const void *alpha,
                                                const void *const Aarray[], cudaDataType Atype, int lda,
                                                const void *const Barray[], cudaDataType Btype, int ldb,
                                                const void *beta, void *const Carray[], cudaDataType Ctype, int ldc,
                                                int batchCount, cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
    using fn_t =
        cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                           const void *const[], cudaDataType, int, const void *const[], cudaDataType, int, const void *,
                           void *const[], cudaDataType, int, int, cublasComputeType_t, cublasGemmAlgo_t);
    static const auto f = reinterpret_cast<fn_t>(lazy_symbol("cublasGemmBatchedEx"));
    return f ? f(handle, transa, transb, m, n, k, alpha, Aarray, Atype, lda, Barray, Btype, ldb, beta, Carray, Ctype,
                 ldc, batchCount, computeType, algo)
             : CUBLAS_STATUS_NOT_INITIALIZED;
}

const char *CUBLASWINAPI cublasGetStatusString(cublasStatus_t status)
{
    static const auto f = reinterpret_cast<decltype(&cublasGetStatusString)>(lazy_symbol("cublasGetStatusString"));
    return f ? f(status) : g_why;
}
