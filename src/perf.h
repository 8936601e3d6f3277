/* Wall-clock timers and the machine's measured sgemm peak (the MFU denominator on the CPU). */
#ifndef MP_PERF_H
#define MP_PERF_H

/* Seconds from a monotonic clock. */
double perf_now(void);

/* Measured single-precision GEMM rate in GFLOP/s with the current thread setting: the best of a few
 * n=1024 cblas_sgemm products (about 0.1-0.3 s). MFU = achieved model FLOP/s / this. */
double perf_sgemm_peak_gflops(void);

#endif
