/* The cuda backend's stash offload (backend.h, BE_OFFLOAD_OPS; CUDA builds only): copies between
 * the region and pinned host memory on the offload stream, each after an event of the compute
 * stream (the forward that wrote the stash is done) and each recording its own event, which the
 * compute stream waits for where the data is first read. The host never blocks. Never run on a
 * GPU by us (docs/GPU.md). */
#include "config.h"

#include "backend_cuda.h"

#include "check.h"
#include "cuda_check.h"

static void off_setup(bcu_t *b)
{
    if (b->off_on) return;
    CUDA_CHECK(cudaEventCreateWithFlags(&b->off_after, cudaEventDisableTiming));
    for (int i = 0; i < BCU_OFFLOAD_EVENTS; i++) CUDA_CHECK(cudaEventCreateWithFlags(&b->off_done[i], cudaEventDisableTiming));
    b->off_on = 1;
}

void bcu_offload_destroy(bcu_t *b)
{
    if (!b->off_on) return;
    CUDA_CHECK(cudaStreamSynchronize(b->ctx.offload));
    CUDA_CHECK(cudaEventDestroy(b->off_after));
    for (int i = 0; i < BCU_OFFLOAD_EVENTS; i++) CUDA_CHECK(cudaEventDestroy(b->off_done[i]));
    b->off_on = 0;
}

long be_cuda_offload_start(backend_t *be, void *dst, const void *src, size_t bytes, int to_host)
{
    bcu_t *b = be->state;
    off_setup(b);
    CUDA_CHECK(cudaEventRecord(b->off_after, b->ctx.compute));
    CUDA_CHECK(cudaStreamWaitEvent(b->ctx.offload, b->off_after, 0));
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                               b->ctx.offload));
    const long t = ++b->off_issued;
    CUDA_CHECK(cudaEventRecord(b->off_done[t % BCU_OFFLOAD_EVENTS], b->ctx.offload));
    return t;
}

void be_cuda_offload_wait(backend_t *be, long ticket, double *waited)
{
    bcu_t *b = be->state;
    if (!b->off_on || ticket <= 0) return;
    /* copies run in order on one stream: the newest recorded event at or after ticket covers it */
    const long t = ticket + BCU_OFFLOAD_EVENTS <= b->off_issued ? b->off_issued : ticket;
    CUDA_CHECK(cudaStreamWaitEvent(b->ctx.compute, b->off_done[t % BCU_OFFLOAD_EVENTS], 0));
}

void be_cuda_offload_fence(backend_t *be, void *dev, size_t bytes, int on) {}

void be_cuda_offload_link(backend_t *be, const copier_link_t *link) {}
