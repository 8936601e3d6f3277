#include "perf.h"

#include <cblas.h>
#include <stdlib.h>
#include <time.h>

#include "check.h"

const char *const prof_names[PROF_COUNT] = {"matmul", "attention", "layernorm_gelu_embedding", "cross_entropy",
                                             "optimizer"};

double perf_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
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
