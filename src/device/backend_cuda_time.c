/* The cuda backend's kernel timing (debug.kernel_times, ktime.h; CUDA builds only). A kernel call
 * only enqueues work, so the host clock around it would time the enqueueing: instead a pair of events
 * is recorded on the compute stream around it, and cudaEventElapsedTime gives the GPU time between
 * them once they have completed. Pairs come from a fixed pool; the host waits for the pool's last
 * event only when the pool is full and at flush, never per call, so timing does not serialise the
 * host with the GPU. Every kernel of be_kernels.h runs on the compute stream (backend_cuda.h), so
 * a pair brackets exactly that call's work. */
#include "config.h"

#include "backend_cuda.h"

#include <stdlib.h>

#include "check.h"
#include "cuda_check.h"

/* The pool, at the first timed call (a run that does not time makes no events). */
static void bcu_time_pool(bcu_t *b)
{
    b->time_ev = MP_CALLOC(2 * (size_t)BCU_TIME_PAIRS, sizeof *b->time_ev);
    b->time_kernel = MP_CALLOC(BCU_TIME_PAIRS, sizeof *b->time_kernel);
    if (!b->time_ev || !b->time_kernel) MP_ABORT("out of memory for debug.kernel_times' CUDA events");
    for (int i = 0; i < 2 * BCU_TIME_PAIRS; i++) CUDA_CHECK(cudaEventCreate(&b->time_ev[i]));
}

/* Adds every recorded pair into be->kt: waits for the newest end event (the stream runs them in
 * order, so every earlier one is complete too). */
static void bcu_time_harvest(backend_t *be)
{
    bcu_t *b = be->state;
    if (b->time_n == 0) return;
    CUDA_CHECK(cudaEventSynchronize(b->time_ev[2 * (b->time_n - 1) + 1]));
    for (int i = 0; i < b->time_n; i++) {
        float ms = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, b->time_ev[2 * i], b->time_ev[2 * i + 1]));
        be->kt.seconds[b->time_kernel[i]] += 1e-3 * (double)ms;
        be->kt.calls[b->time_kernel[i]]++;
    }
    b->time_n = 0;
}

void bcu_time_begin(backend_t *be, int kernel)
{
    bcu_t *b = be->state;
    if (!b->time_ev) bcu_time_pool(b);
    if (b->time_n == BCU_TIME_PAIRS) bcu_time_harvest(be);
    CUDA_CHECK(cudaEventRecord(b->time_ev[2 * b->time_n], b->ctx.compute));
}

void bcu_time_end(backend_t *be, int kernel)
{
    bcu_t *b = be->state;
    CUDA_CHECK(cudaEventRecord(b->time_ev[2 * b->time_n + 1], b->ctx.compute));
    b->time_kernel[b->time_n++] = kernel;
}

void bcu_time_flush(backend_t *be) { bcu_time_harvest(be); }

void bcu_time_destroy(bcu_t *b)
{
    if (b->time_ev)
        for (int i = 0; i < 2 * BCU_TIME_PAIRS; i++) CUDA_CHECK(cudaEventDestroy(b->time_ev[i]));
    free(b->time_ev);
    free(b->time_kernel);
    b->time_ev = NULL, b->time_kernel = NULL, b->time_n = 0;
}
