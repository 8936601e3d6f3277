/* train.device = cuda asks the driver before any model memory is set up, so a job landing on a node
 * without a usable GPU stops at start with the driver's words. */
#include "config.h"

#include "device.h"

#include <cblas.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "kern_check.h"
#include "perf.h"

#ifdef MP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

int device_check(deck_device_t device, deck_precision_t precision)
{
    if (device != DECK_DEVICE_CUDA) {
        if (precision != DECK_PRECISION_FP32)
            return MP_FAIL("train.precision=%s: train.device=%s computes in fp32 only (bf16 is for train.device=cuda)",
                           deck_precision_names[precision], deck_device_names[device]);
        return MP_OK;
    }
#ifdef MP_HAVE_CUDA
    return MP_OK; /* the driver is asked once, when the backend starts (device_count) */
#else
    return MP_FAIL("train.device=cuda: this build has only the CPU backend (configure --with-cuda)");
#endif
}

int device_count(void)
{
#ifdef MP_HAVE_CUDA
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        MP_ERROR("train.device=cuda: no usable CUDA device on %s (cudaGetDeviceCount: %s); set train.device=cpu "
                 "for the CPU backend", host, cudaGetErrorString(e));
        return 0;
    }
    if (n == 0) MP_ERROR("train.device=cuda: no CUDA device on %s; set train.device=cpu for the CPU backend", host);
    return n;
#else
    return 0;
#endif
}

double perf_sgemm_peak_gflops(void)
{
    const int n = 1024;
    float *a = MP_MALLOC(sizeof(float) * n * n * 3);
    if (!a) return 0.0;
    float *b = a + (size_t)n * n, *c = b + (size_t)n * n;
    for (size_t i = 0; i < (size_t)n * n; i++) a[i] = b[i] = (float)(i % 7) * 0.01f;
    double best = 0.0;
    for (int rep = 0; rep < 6; rep++) { /* first products warm the pool and the caches */
        double t0 = perf_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double dt = perf_now() - t0;
        double gf = 2.0 * n * n * (double)n / dt * 1e-9;
        if (gf > best) best = gf;
    }
    free(a);
    return best;
}

/* The kernels' errors (kern_check.h) reported as every other error of the run. */
static void device_kern_report(int fatal, const char *file, int line, const char *msg)
{
    if (fatal) mp_abortf(file, line, "%s", msg);
    mp_errorf(file, line, "%s", msg);
}

void device_report_init(void) { kern_set_reporter(device_kern_report); }
