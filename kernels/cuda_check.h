/* Return-code checks for CUDA, cuBLAS and NCCL calls. Plain C: included by the .cu files (nvcc) and by
 * src/device/nccl_grid.c, src/device/backend_cuda.c and src/cli/selftest.c (mpicc with CUDA_CPPFLAGS).
 *
 * Contract: a failed call is fatal. The macros report file, line, the call's text and the library's
 * own message through kern_abortf (kern_check.h), whose reporter in a MindPipe run is mp_abortf:
 * MPI_Abort of the whole job, since a GPU error on one rank otherwise leaves its peers waiting in the
 * next collective. Setup code that must survive a failure (cu_ctx_init with no device) tests the
 * return code itself and reports with KERN_FAIL.
 *
 * NCCL_CHECK needs <nccl.h> included first; this header does not pull NCCL into files that do not
 * use it. */
#ifndef MP_CUDA_CHECK_H
#define MP_CUDA_CHECK_H

#include <stddef.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "kern_check.h"

#ifdef __cplusplus
extern "C" {
#endif


/* "CUBLAS_STATUS_NOT_INITIALIZED" etc.; a switch of our own, so messages do not depend on the
 * cuBLAS version having cublasGetStatusName. */
const char *mp_cublas_status_name(cublasStatus_t status);

#ifdef __cplusplus
}
#endif

#define CUDA_CHECK(call)                                                                          \
    do {                                                                                          \
        cudaError_t mp_cuda_rc_ = (call);                                                         \
        if (mp_cuda_rc_ != cudaSuccess)                                                           \
            kern_abortf(__FILE__, __LINE__, "CUDA call failed: %s: %s (%s)", #call,                 \
                      cudaGetErrorString(mp_cuda_rc_), cudaGetErrorName(mp_cuda_rc_));            \
    } while (0)

/* After every kernel launch: catches bad launch configurations at the launch that made them
 * (errors inside a running kernel surface at the next synchronising call). */
#define CUDA_CHECK_LAUNCH()                                                                       \
    do {                                                                                          \
        cudaError_t mp_cuda_rc_ = cudaGetLastError();                                             \
        if (mp_cuda_rc_ != cudaSuccess)                                                           \
            kern_abortf(__FILE__, __LINE__, "CUDA kernel launch failed: %s (%s)",                   \
                      cudaGetErrorString(mp_cuda_rc_), cudaGetErrorName(mp_cuda_rc_));            \
    } while (0)

#define CUBLAS_CHECK(call)                                                                        \
    do {                                                                                          \
        cublasStatus_t mp_cublas_rc_ = (call);                                                    \
        if (mp_cublas_rc_ != CUBLAS_STATUS_SUCCESS)                                               \
            kern_abortf(__FILE__, __LINE__, "cuBLAS call failed: %s: %s", #call,                    \
                      mp_cublas_status_name(mp_cublas_rc_));                                      \
    } while (0)

#define NCCL_CHECK(call)                                                                          \
    do {                                                                                          \
        ncclResult_t mp_nccl_rc_ = (call);                                                        \
        if (mp_nccl_rc_ != ncclSuccess)                                                           \
            kern_abortf(__FILE__, __LINE__, "NCCL call failed: %s: %s (set NCCL_DEBUG=INFO for NCCL's own " \
                      "account)", #call, ncclGetErrorString(mp_nccl_rc_));                        \
    } while (0)

#endif
