// kernels/cuda/naive.cuh — cuda-naive's workspace, split from its launch so
// the bench can time the launches alone.
#pragma once
#include "common.cuh"

struct acd_naive_ws {
    float *S; // (B, Hq) matrices (Nq, Nk) of scaled scores, f32, each starting at a multiple of mat elements
    void *P; // the same of probabilities, input dtype
    // Elements from one (b, h) matrix of S or P to the next: Nq Nk rounded up to 8, so every matrix the
    // batched GEMMs are given starts 16-byte aligned (cuBLAS's pointer arrays must be "properly aligned": an
    // S at 68 bytes, Nq Nk = 17, gave one head's scores shifted on the H200 with Nk = 1 and 16 query rows).
    long long mat;
    void **ptrs; // 6 x B*Hq matrix pointers for the batched GEMMs
    size_t s_bytes, p_bytes, ptr_bytes;
};

int acd_naive_prepare(const acd_params &p, ac_dtype t, const ac_fwd_args *a, acd_naive_ws *w, ac_err *err);
void acd_naive_release(acd_naive_ws *w);
int acd_naive_run(const acd_params &p, const ac_problem *prob, ac_dtype t, const ac_fwd_args *a, const acd_naive_ws *w,
                  cudaStream_t stream, ac_err *err);
