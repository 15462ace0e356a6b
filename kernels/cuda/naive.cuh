// kernels/cuda/naive.cuh — cuda-naive's workspace, split from its launch so
// the bench can time the launches alone.
#pragma once
#include "common.cuh"

struct acd_naive_ws {
    float *S; // (B, Hq, Nq, Nk) scaled scores, f32
    void *P; // (B, Hq, Nq, Nk) probabilities, input dtype
    void **ptrs; // 6 x B*Hq matrix pointers for the batched GEMMs
    size_t s_bytes, p_bytes, ptr_bytes;
};

int acd_naive_prepare(const acd_params &p, ac_dtype t, const ac_fwd_args *a, acd_naive_ws *w, ac_err *err);
void acd_naive_release(acd_naive_ws *w);
int acd_naive_run(const acd_params &p, const ac_problem *prob, ac_dtype t, const ac_fwd_args *a, const acd_naive_ws *w,
                  cudaStream_t stream, ac_err *err);
