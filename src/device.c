/* The trainer drives the CPU backend. A CUDA build holds the GPU kernels and their self-test
 * (`mindpipe selftest --device cuda`), and asks the driver about the device before saying anything
 * else, so a job landing on a node without a usable GPU stops at start with the driver's words. */
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
    if (!strcmp(device, "cpu")) {
        if (strcmp(precision, "fp32") != 0)
            return MP_FAIL("train.precision=%s: the CPU backend computes in fp32 only (bf16 is for train.device=cuda)",
                           precision);
        return MP_OK;
    }
#ifdef MP_HAVE_CUDA
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
        return MP_FAIL("train.device=%s: no usable CUDA device on %s (cudaGetDeviceCount: %s); set train.device=cpu "
                       "for the CPU backend", device, host, cudaGetErrorString(e));
    if (n == 0)
        return MP_FAIL("train.device=%s: no CUDA device on %s; set train.device=cpu for the CPU backend", device, host);
    return MP_FAIL("train.device=%s: %d CUDA device(s) on %s, but the trainer does not drive the CUDA kernels yet "
                   "(`mindpipe selftest --device cuda` tests them); set train.device=cpu", device, n, host);
#else
    return MP_FAIL("train.device=%s: this build has only the CPU backend (configure --with-cuda)", device);
#endif
}
