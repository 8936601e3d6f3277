/* train.device = cuda asks the driver before any model memory is set up, so a job landing on a node
 * without a usable GPU stops at start with the driver's words. */
#include "config.h"

#include "device.h"

#include <string.h>
#include <unistd.h>

#include "check.h"

#ifdef MP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

int device_check(const char *device, const char *precision)
{
    if (strcmp(device, "cuda") != 0) {
        if (strcmp(precision, "fp32") != 0)
            return MP_FAIL("train.precision=%s: train.device=%s computes in fp32 only (bf16 is for train.device=cuda)",
                           precision, device);
        return MP_OK;
    }
#ifdef MP_HAVE_CUDA
    return MP_OK; /* the driver is asked once, when the backend starts (device_count) */
#else
    return MP_FAIL("train.device=%s: this build has only the CPU backend (configure --with-cuda)", device);
#endif
}

int device_count(const char *device)
{
#ifdef MP_HAVE_CUDA
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        MP_ERROR("train.device=%s: no usable CUDA device on %s (cudaGetDeviceCount: %s); set train.device=cpu "
                 "for the CPU backend", device, host, cudaGetErrorString(e));
        return 0;
    }
    if (n == 0) MP_ERROR("train.device=%s: no CUDA device on %s; set train.device=cpu for the CPU backend", device, host);
    return n;
#else
    (void)device;
    return 0;
#endif
}
