/* train.device and train.precision: which backend runs the model (ARCHITECTURE.md §8). */
#ifndef MP_DEVICE_H
#define MP_DEVICE_H

#include "deck.h"

/* MP_OK when this build can run the deck's device and precision (whether the node has a GPU is
 * device_count's question); otherwise a message naming the key, what is missing and what to set
 * instead, and MP_ERR. Not collective. */
int device_check(deck_device_t device, deck_precision_t precision);
/* CUDA devices this rank sees (ranks take device node_rank mod count); 0 after a message naming
 * the host and the driver's words when there is none (or in a build without CUDA). */
int device_count(void);

/* Measured single-precision GEMM rate in GFLOP/s with the current thread setting: the best of a few
 * n=1024 cblas_sgemm products (about 0.1-0.3 s). MFU = achieved model FLOP/s / this. */
double perf_sgemm_peak_gflops(void);

/* Routes the kernels' error reports (kernels/kern_check.h) to mp_errorf / mp_abortf (named rank, job
 * abort). Once at start, after mpi_check_init. */
void device_report_init(void);

#endif
