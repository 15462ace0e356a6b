/* kernels/devmem_none.c — device memory in a build without CUDA: there is no
 * device, so every call is an environment error (exit status 3), never a crash. */
#include <stddef.h>

#include "kernel.h"

#define NO_CUDA "built without CUDA"

bool ac_cuda_present(ac_err *why)
{
    ac_fail(why, AC_ERR_ENV, NO_CUDA);
    return false;
}

int ac_dev_alloc(void **dev, size_t bytes, ac_err *err)
{
    *dev = NULL;
    return ac_fail(err, AC_ERR_ENV, NO_CUDA ": cannot allocate %zu bytes of device memory", bytes);
}

void ac_dev_free(void *dev) { (void)dev; }

int ac_dev_upload(void *dev, const void *host, size_t bytes, ac_err *err)
{
    (void)dev, (void)host, (void)bytes;
    return ac_fail(err, AC_ERR_ENV, NO_CUDA ": cannot copy to the device");
}

int ac_dev_download(void *host, const void *dev, size_t bytes, ac_err *err)
{
    (void)dev, (void)host, (void)bytes;
    return ac_fail(err, AC_ERR_ENV, NO_CUDA ": cannot copy from the device");
}

int ac_dev_sync(ac_err *err) { return ac_fail(err, AC_ERR_ENV, NO_CUDA ": no device to synchronise"); }

int ac_dev_sync_kernel(ac_err *err) { return ac_fail(err, AC_ERR_ENV, NO_CUDA ": no device to synchronise"); }
