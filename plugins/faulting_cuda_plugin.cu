// plugins/faulting_cuda_plugin.cu — a CUDA plugin whose forward faults on the
// device (a store through an address no allocation holds), built only with
// CUDA.  It exists to check, on a GPU (ci/gpu-run.sh, step "plugins"), that
// attncheck reports a device fault a kernel caused as a kernel failure of kind
// kernel:device-fault naming the plugin (exit 1), never as an environment error
// (exit 3), and that a campaign goes on in a fresh worker with a fresh context:
//   attncheck run --plugin libattncheck-faulting-cuda-plugin.so
//   --kernel faulting-cuda --case 'v1 ... dtype=f16 ... d=64 ...'
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include "attncheck_plugin.h"

__global__ void store_out_of_bounds(float *o, size_t past_end)
{
    o[past_end + (size_t)threadIdx.x * 4096u] = 1.0f; // far past the end of O: an illegal address
}

static int faulting_forward(void *user, const attncheck_problem *p, int32_t dtype, const void *q, const void *k,
                            const void *v, void *o, float *lse, char *errbuf, size_t errbuf_len)
{
    (void)user, (void)dtype, (void)q, (void)k, (void)v, (void)lse;
    size_t elems = (size_t)p->batch * p->heads_q * p->seqlen_q * p->head_dim;
    store_out_of_bounds<<<1, 32>>>((float *)o, elems + ((size_t)1 << 34));
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        snprintf(errbuf, errbuf_len, "launch: %s", cudaGetErrorString(e));
        return 1;
    }
    return 0; // the fault surfaces at attncheck's synchronisation after the call
}

// Filled field by field (C++ has no designated initialisers for every field
// before C++20, and -Wextra wants each one named); the rest stay zero.
extern "C" const attncheck_plugin *attncheck_plugin_describe(void)
{
    static attncheck_plugin faulting;
    faulting.abi_version = ATTNCHECK_PLUGIN_ABI_V1;
    faulting.name = "faulting-cuda";
    faulting.description = "a CUDA plugin whose forward stores past its output: a device fault on purpose";
    faulting.caps.dtypes = (1u << ATTNCHECK_DTYPE_F16) | (1u << ATTNCHECK_DTYPE_BF16) | (1u << ATTNCHECK_DTYPE_F32);
    faulting.caps.max_head_dim = 256;
    faulting.caps.masks = ATTNCHECK_MASK_NONE;
    faulting.caps.layouts = (1u << ATTNCHECK_LAYOUT_BHSD) | (1u << ATTNCHECK_LAYOUT_BSHD);
    faulting.memory = ATTNCHECK_MEM_CUDA;
    faulting.forward = faulting_forward;
    return &faulting;
}
