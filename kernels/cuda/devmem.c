/* kernels/cuda/devmem.c — device presence and the device-memory helpers the
 * harness stages AC_MEM_CUDA buffers with; every cudart call is checked. */
#include <stdio.h>

#include "acd.h"

bool ac_cuda_present(ac_err *why)
{
    int n_devices = 0;
    cudaError_t e = cudaGetDeviceCount(&n_devices);
    if (e != cudaSuccess) {
        ac_fail(why, AC_ERR_ENV, "no CUDA device: cudaGetDeviceCount failed: %s", cudaGetErrorString(e));
        return false;
    }
    if (n_devices == 0) {
        ac_fail(why, AC_ERR_ENV, "no CUDA device");
        return false;
    }
    int major = 0;
    e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    if (e != cudaSuccess || major < 8) {
        ac_fail(why, AC_ERR_ENV, "CUDA device 0 has compute capability %d.x; the kernels need >= 8.0", major);
        return false;
    }
    return true;
}

int ac_dev_alloc(void **dev, size_t bytes, ac_err *err)
{
    *dev = NULL;
    cudaError_t e = cudaMalloc(dev, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        *dev = NULL;
        return ac_fail(err, AC_ERR_ENV, "cudaMalloc(%zu bytes) failed: %s (%s:%d)", bytes, cudaGetErrorString(e),
                       __FILE__, __LINE__);
    }
    return AC_OK;
}

void ac_dev_free(void *dev)
{
    if (dev)
        (void)cudaFree(dev); /* a failure here means a fault already reported by a sync */
}

int ac_dev_upload(void *dev, const void *host, size_t bytes, ac_err *err)
{
    ACD_CHECK(err, cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
    return AC_OK;
}

int ac_dev_download(void *host, const void *dev, size_t bytes, ac_err *err)
{
    ACD_CHECK(err, cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
    return AC_OK;
}

int ac_dev_sync(ac_err *err)
{
    ACD_CHECK(err, cudaDeviceSynchronize());
    ACD_CHECK(err, cudaGetLastError());
    return AC_OK;
}

/* Errors a kernel's own code causes on the device.  They are sticky: every
 * later call in the process returns them, so they reach whoever synchronises. */
static bool caused_by_kernel(cudaError_t e)
{
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorIllegalInstruction:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchFailure: /* __trap() and faults the driver cannot name */
    case cudaErrorLaunchTimeout:
        return true;
    default:
        return false;
    }
}

int ac_dev_sync_kernel(ac_err *err)
{
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess)
        e = cudaGetLastError();
    if (e == cudaSuccess)
        return AC_OK;
    if (caused_by_kernel(e))
        return ac_fail(err, AC_KERNEL_FAULT, "device-fault: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
    return ac_fail(err, AC_ERR_ENV, "cudaDeviceSynchronize after the kernel: %s (%s)", cudaGetErrorString(e),
                   cudaGetErrorName(e));
}

/* ---- workspace accounting (bench memory figures) ---- */
static size_t ws_current, ws_peak;

size_t acd_workspace_peak(void) { return ws_peak; }
void acd_workspace_reset_peak(void) { ws_peak = ws_current; }

int acd_ws_alloc(void **dev, size_t bytes, ac_err *err)
{
    int st = ac_dev_alloc(dev, bytes, err);
    if (st != AC_OK)
        return st;
    ws_current += bytes;
    if (ws_current > ws_peak)
        ws_peak = ws_current;
    return AC_OK;
}

void acd_ws_free(void *dev, size_t bytes)
{
    if (!dev)
        return;
    ac_dev_free(dev);
    ws_current -= bytes;
}
