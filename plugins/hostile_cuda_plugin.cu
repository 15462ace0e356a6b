// plugins/hostile_cuda_plugin.cu — CUDA kernels that scribble on purpose, one
// per build flag (plugins/meson.build, CUDA builds only): they check on a GPU
// (ci/gpu-run.sh, step "plugins") that the device guard zones and the input
// check work as on the host.  Neither faults the device: the stray stores land
// inside the guard zones attncheck stages around each buffer.
//
//   -DHOSTILE_CUDA_O_PAST    writes O (zeros) and LSE, then 64 floats past O's end
//                            -> kernel:out-of-bounds-write, "past the end of O: elements end+0 to end+63"
//   -DHOSTILE_CUDA_MODIFY_Q  writes O and LSE, and flips the last bit of Q[0] on the device
//                            -> kernel:input-modified, "Q, the first at element 0"
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include "attncheck_plugin.h"

__global__ void scribble(float *o, float *lse, uint32_t *q, size_t n_o, size_t n_lse)
{
    for (size_t i = threadIdx.x; i < n_o; i += blockDim.x)
        o[i] = 0.0f;
    for (size_t i = threadIdx.x; i < n_lse; i += blockDim.x)
        lse[i] = 0.0f;
#if defined(HOSTILE_CUDA_O_PAST)
    (void)q;
    if (threadIdx.x < 64)
        o[n_o + threadIdx.x] = 1.0f;
#elif defined(HOSTILE_CUDA_MODIFY_Q)
    if (threadIdx.x == 0)
        q[0] ^= 1u;
#else
#error "build with -DHOSTILE_CUDA_O_PAST or -DHOSTILE_CUDA_MODIFY_Q (plugins/meson.build)"
#endif
}

static int hostile_forward(void *user, const attncheck_problem *p, int32_t dtype, const void *q, const void *k,
                           const void *v, void *o, float *lse, char *errbuf, size_t errbuf_len)
{
    (void)user, (void)dtype, (void)k, (void)v;
    size_t n_lse = (size_t)p->batch * p->heads_q * p->seqlen_q, n_o = n_lse * p->head_dim;
    scribble<<<1, 128>>>((float *)o, lse, (uint32_t *)q, n_o, n_lse);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        snprintf(errbuf, errbuf_len, "launch: %s", cudaGetErrorString(e));
        return 1;
    }
    return 0;
}

// Filled field by field, as plugins/faulting_cuda_plugin.cu does.
extern "C" const attncheck_plugin *attncheck_plugin_describe(void)
{
    static attncheck_plugin hostile;
    hostile.abi_version = ATTNCHECK_PLUGIN_ABI_V1;
    hostile.name = HOSTILE_NAME;
    hostile.description = "a CUDA kernel that scribbles on purpose (plugins/hostile_cuda_plugin.cu)";
    hostile.caps.dtypes = 1u << ATTNCHECK_DTYPE_F32;
    hostile.caps.max_head_dim = 128;
    hostile.caps.masks = ATTNCHECK_MASK_NONE;
    hostile.caps.layouts = 1u << ATTNCHECK_LAYOUT_BHSD;
    hostile.memory = ATTNCHECK_MEM_CUDA;
    hostile.forward = hostile_forward;
    return &hostile;
}
