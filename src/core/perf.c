#include "perf.h"

#include <time.h>

const char *const prof_names[PROF_COUNT] = {"matmul", "attention", "layernorm_gelu_embedding", "cross_entropy",
                                             "optimizer"};

double perf_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double perf_thread_cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
