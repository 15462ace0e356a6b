// kernels/cuda/naive.cu — cuda-naive: the three-kernel path.  S = scale QK^T
// with cuBLAS (f32 compute, S stored in f32), a masked softmax kernel writing
// P in the input dtype and LSE, then O = PV with cuBLAS (f32 compute).  S and
// P are materialised in device memory: the memory and speed foil of cuda-flash.
#include <cublas_v2.h>

#include <vector>

#include "mask.cuh"
#include "naive.cuh"

#define ACD_CUBLAS(err, call) \
    do { \
        cublasStatus_t acd_s_ = (call); \
        if (acd_s_ != CUBLAS_STATUS_SUCCESS) \
            return ac_fail((err), AC_ERR_ENV, "%s failed: %s (%s:%d)", #call, cublasGetStatusString(acd_s_), __FILE__, \
                           __LINE__); \
    } while (0)

namespace
{

cublasHandle_t g_handle;

int handle(cublasHandle_t *out, ac_err *err)
{
    if (!g_handle)
        ACD_CUBLAS(err, cublasCreate(&g_handle));
    *out = g_handle;
    return AC_OK;
}

cudaDataType_t cuda_type(ac_dtype t) { return t == AC_F16 ? CUDA_R_16F : t == AC_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// One block per row (b, h, i): P = softmax of the visible scores, LSE.
template <typename T>
__global__ void naive_softmax(acd_params p, long long mat, const float *__restrict__ S, T *__restrict__ P,
                              float *__restrict__ LSE)
{
    __shared__ float red[32];
    const long long row = blockIdx.x;
    const int i = (int)(row % p.Nq), h = (int)((row / p.Nq) % p.Hq), b = (int)(row / ((long long)p.Nq * p.Hq));
    const int nq = acd_nq(p, b), nk = acd_nk(p, b);
    const long long at = (row / p.Nq) * mat + (long long)i * p.Nk; // the row in its (b, h) matrix
    const float *Srow = S + at;
    T *Prow = P + at;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < nk; j += blockDim.x)
        if (acd_visible(p, b, h, i, j, nq, nk))
            mx = fmaxf(mx, Srow[j]);
    mx = acd_cta_reduce(mx, red, [](float a, float c) { return fmaxf(a, c); });
    float sum = 0.f;
    for (int j = threadIdx.x; j < nk; j += blockDim.x)
        if (mx != -INFINITY && acd_visible(p, b, h, i, j, nq, nk))
            sum += expf(Srow[j] - mx);
    sum = acd_cta_reduce(sum, red, [](float a, float c) { return a + c; });
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    for (int j = threadIdx.x; j < nk; j += blockDim.x) {
        const bool vis = mx != -INFINITY && acd_visible(p, b, h, i, j, nq, nk);
        Prow[j] = from_f<T>(vis ? expf(Srow[j] - mx) * inv : 0.f);
    }
    if (threadIdx.x == 0)
        LSE[row] = sum > 0.f ? mx + logf(sum) : -INFINITY;
}

// O rows of a batch whose sequence has no keys: the GEMM has k = 0, so write 0 here.
template <typename T> __global__ void naive_zero_rows(acd_params p, int b, T *__restrict__ O)
{
    const long long n = (long long)p.Hq * p.Nq * p.D;
    for (long long x = blockIdx.x * (long long)blockDim.x + threadIdx.x; x < n;
         x += (long long)gridDim.x * blockDim.x) {
        const int c = (int)(x % p.D), i = (int)((x / p.D) % p.Nq), h = (int)(x / ((long long)p.D * p.Nq));
        O[b * p.q_sb + h * p.q_sh + (long long)i * p.q_ss + c] = from_f<T>(0.f);
    }
}

template <typename T>
int launch_softmax(const acd_params &p, const acd_naive_ws *w, float *lse, cudaStream_t stream, ac_err *err)
{
    naive_softmax<T><<<(unsigned)((long long)p.B * p.Hq * p.Nq), 256, 0, stream>>>(p, w->mat, w->S, (T *)w->P, lse);
    ACD_CHECK_LAUNCH(err, "naive_softmax");
    return AC_OK;
}

template <typename T> int launch_zero(const acd_params &p, int b, void *o, cudaStream_t stream, ac_err *err)
{
    naive_zero_rows<T><<<256, 256, 0, stream>>>(p, b, (T *)o);
    ACD_CHECK_LAUNCH(err, "naive_zero_rows");
    return AC_OK;
}

} // namespace

int acd_naive_prepare(const acd_params &p, ac_dtype t, const ac_fwd_args *a, acd_naive_ws *w, ac_err *err)
{
    *w = acd_naive_ws{};
    w->mat = ((long long)p.Nq * p.Nk + 7) / 8 * 8;
    const size_t n_ptr = (size_t)p.B * p.Hq, elems = n_ptr * (size_t)w->mat, esz = ac_dtype_size(t);
    w->s_bytes = elems * sizeof(float);
    w->p_bytes = elems * esz;
    w->ptr_bytes = 6 * n_ptr * sizeof(void *);
    int status;
    if ((status = acd_ws_alloc((void **)&w->S, w->s_bytes, err)) != AC_OK)
        goto fail;
    if ((status = acd_ws_alloc(&w->P, w->p_bytes, err)) != AC_OK)
        goto fail;
    if ((status = acd_ws_alloc((void **)&w->ptrs, w->ptr_bytes, err)) != AC_OK)
        goto fail;
    {
        // Per (b, h) matrix pointers: Q, K, V, S, P, O; GQA maps h to its KV head.
        std::vector<const void *> host(6 * n_ptr);
        for (int b = 0; b < p.B; ++b)
            for (int h = 0; h < p.Hq; ++h) {
                const size_t x = (size_t)b * p.Hq + h, hk = h / p.group;
                const size_t qoff = (b * p.q_sb + h * p.q_sh) * esz, koff = (b * p.k_sb + hk * p.k_sh) * esz;
                host[x] = (const char *)a->q + qoff;
                host[n_ptr + x] = (const char *)a->k + koff;
                host[2 * n_ptr + x] = (const char *)a->v + koff;
                host[3 * n_ptr + x] = w->S + x * w->mat;
                host[4 * n_ptr + x] = (const char *)w->P + x * w->mat * esz;
                host[5 * n_ptr + x] = (const char *)a->o + qoff;
            }
        if ((status = ac_dev_upload(w->ptrs, host.data(), w->ptr_bytes, err)) != AC_OK)
            goto fail;
    }
    return AC_OK;
fail:
    acd_naive_release(w);
    return status;
}

void acd_naive_release(acd_naive_ws *w)
{
    acd_ws_free(w->S, w->s_bytes);
    acd_ws_free(w->P, w->p_bytes);
    acd_ws_free(w->ptrs, w->ptr_bytes);
    *w = acd_naive_ws{};
}

// Host lengths: per-batch GEMM sizes so padded keys are never read.
int acd_naive_run(const acd_params &p, const ac_problem *prob, ac_dtype t, const ac_fwd_args *a, const acd_naive_ws *w,
                  cudaStream_t stream, ac_err *err)
{
    cublasHandle_t hd = nullptr;
    int status = handle(&hd, err);
    if (status != AC_OK)
        return status;
    ACD_CUBLAS(err, cublasSetStream(hd, stream));
    const cudaDataType_t ty = cuda_type(t);
    const size_t n_ptr = (size_t)p.B * p.Hq;
    void **ptrs = w->ptrs;
    const float alpha_s = p.scale, one = 1.f, zero = 0.f;
    for (int b = 0; b < p.B; ++b) {
        const int nq = prob->seqlens_q ? prob->seqlens_q[b] : p.Nq, nk = prob->seqlens_k ? prob->seqlens_k[b] : p.Nk;
        if (nq == 0 || nk == 0)
            continue;
        const size_t x = (size_t)b * p.Hq;
        // S^T (column-major nk x nq, ld Nk) = K^T Q: S row-major, one row per query.
        ACD_CUBLAS(err,
                   cublasGemmBatchedEx(hd, CUBLAS_OP_T, CUBLAS_OP_N, nk, nq, p.D, &alpha_s,
                                       (const void *const *)(ptrs + n_ptr + x), ty, (int)p.k_ss,
                                       (const void *const *)(ptrs + x), ty, (int)p.q_ss, &zero, ptrs + 3 * n_ptr + x,
                                       CUDA_R_32F, p.Nk, p.Hq, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    switch (t) {
    case AC_F16:
        status = launch_softmax<__half>(p, w, a->lse, stream, err);
        break;
    case AC_BF16:
        status = launch_softmax<__nv_bfloat16>(p, w, a->lse, stream, err);
        break;
    default:
        status = launch_softmax<float>(p, w, a->lse, stream, err);
        break;
    }
    if (status != AC_OK)
        return status;
    for (int b = 0; b < p.B; ++b) {
        const int nq = prob->seqlens_q ? prob->seqlens_q[b] : p.Nq, nk = prob->seqlens_k ? prob->seqlens_k[b] : p.Nk;
        if (nq == 0)
            continue;
        if (nk == 0) {
            status = t == AC_F16 ? launch_zero<__half>(p, b, a->o, stream, err)
                : t == AC_BF16   ? launch_zero<__nv_bfloat16>(p, b, a->o, stream, err)
                                 : launch_zero<float>(p, b, a->o, stream, err);
            if (status != AC_OK)
                return status;
            continue;
        }
        const size_t x = (size_t)b * p.Hq;
        // O^T (column-major d x nq, ld q_ss) = V^T P^T.
        ACD_CUBLAS(err,
                   cublasGemmBatchedEx(
                       hd, CUBLAS_OP_N, CUBLAS_OP_N, p.D, nq, nk, &one, (const void *const *)(ptrs + 2 * n_ptr + x), ty,
                       (int)p.k_ss, (const void *const *)(ptrs + 4 * n_ptr + x), ty, p.Nk, &zero, ptrs + 5 * n_ptr + x,
                       ty, (int)p.q_ss, p.Hq, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    return AC_OK;
}

extern "C" int acd_naive_forward(const ac_problem *prob, ac_dtype t, const ac_fwd_args *a, ac_err *err)
{
    acd_params p;
    acd_staged st;
    int status = acd_stage(prob, ACD_MUT_NONE, &p, &st, err);
    if (status != AC_OK)
        return status;
    acd_naive_ws w;
    status = acd_naive_prepare(p, t, a, &w, err);
    if (status == AC_OK) {
        status = acd_naive_run(p, prob, t, a, &w, 0, err);
        if (status == AC_OK)
            status = ac_dev_sync(err);
        acd_naive_release(&w);
    }
    acd_unstage(&st);
    return status;
}
