/* The cuda backend: its set-up, memory, host side and kernels, and its table (CUDA builds only; the
 * stream discipline: backend_cuda.h). The region is the device arena's one cudaMalloc. Run on one
 * GPU (docs/GPU.md). */
#include "config.h"

#include "backend_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cuda_check.h"

/* Selects the device and creates the context (streams, cuBLAS) and the kernels' scratch; the region
 * comes later (cuda_region_open), after the NCCL communicators. */
static int cuda_init(backend_t *be, size_t limit, int device, int precision)
{
    bcu_t *b = MP_CALLOC(1, sizeof *b);
    if (!b) return MP_ERR;
    if (cu_ctx_init(&b->ctx, device, precision ? CU_BF16 : CU_FP32) != MP_OK) goto err_free;
    if (gpu_share_id(device, &b->gpu) != MP_OK) goto err_ctx;
    /* bf16 copies of the largest product's inputs, reduction partials: before the arena takes the
     * free memory (cu_ctx_scratch grows on demand from the margin otherwise) */
    if (cu_ctx_reserve(&b->ctx, BCU_SCRATCH_MIN) != MP_OK) goto err_ctx;
    b->limit = limit;
    CUDA_CHECK(cudaMemGetInfo(&b->free_at_init, &(size_t){0}));
    CUDA_CHECK(cudaEventCreateWithFlags(&b->grads_final, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&b->buckets_done, cudaEventDisableTiming));
    be->state = b;
    return MP_OK;
err_ctx:
    cu_ctx_destroy(&b->ctx);
err_free:
    free(b);
    return MP_ERR;
}

/* The region: one cudaMalloc of the free memory (what the communicators and the scratch left) minus a
 * margin for cuBLAS's workspaces and NCCL's buffers, capped at the limit when > 0. */
static int cuda_region_open(backend_t *be)
{
    bcu_t *b = be->state;
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    b->comms_bytes = b->free_at_init > free_b ? b->free_at_init - free_b : 0;
    if (cu_arena_init(&b->arena, b->limit, 0) != MP_OK) return MP_ERR;
    be->base = b->arena.base;
    be->capacity = b->arena.capacity;
    return MP_OK;
}

static void cuda_destroy(backend_t *be)
{
    bcu_t *b = be->state;
    if (!b) return;
    cu_ctx_sync(&b->ctx);
    bcu_p2p_destroy(b);
    bcu_offload_destroy(b);
    bcu_comms_destroy(b);
    bcu_time_destroy(b);
    CUDA_CHECK(cudaEventDestroy(b->grads_final));
    CUDA_CHECK(cudaEventDestroy(b->buckets_done));
    cu_arena_destroy(&b->arena);
    cu_ctx_destroy(&b->ctx);
    free(b);
    be->state = NULL;
}

/* ---- host waits: under the watchdog (wait.h), NCCL's errors polled ---- */

typedef struct {
    bcu_t *b;
    cudaStream_t s;
} bcu_waiter_t;

/* 1 when the stream is done; 0 while it runs and no NCCL communicator has failed; -1 with the reason
 * when one has (ncclCommGetAsyncError) or CUDA reports an error. */
static int bcu_stream_ready(void *ctx, char *why, size_t n)
{
    const bcu_waiter_t *w = ctx;
    const cudaError_t rc = cudaStreamQuery(w->s);
    if (rc == cudaSuccess) return 1;
    if (rc != cudaErrorNotReady) {
        snprintf(why, n, "CUDA error %s: %s", cudaGetErrorName(rc), cudaGetErrorString(rc));
        return -1;
    }
    const bcu_t *b = w->b;
    for (int i = 0; i < b->ncomms + 4; i++) {
        ncclComm_t c = i < b->ncomms ? b->nccl[i] : b->p2p_own[i - b->ncomms];
        ncclResult_t err = ncclSuccess;
        if (!c || ncclCommGetAsyncError(c, &err) != ncclSuccess || err == ncclSuccess || err == ncclInProgress) continue;
        int size = 0;
        (void)ncclCommCount(c, &size);
        snprintf(why, n, "NCCL communicator %s %d (%d ranks) failed: %s (ncclCommGetAsyncError)",
                 i < b->ncomms ? "twin" : "pipeline", i < b->ncomms ? i : i - b->ncomms, size, ncclGetErrorString(err));
        return -1;
    }
    return 0;
}

/* Before the job ends on a failed or overdue wait: every NCCL communicator aborted, so that no
 * kernel of ours keeps waiting on a peer (the process exits right after). */
static void bcu_give_up(void *ctx)
{
    bcu_t *b = ((bcu_waiter_t *)ctx)->b;
    for (int i = 0; i < b->ncomms; i++)
        if (b->nccl[i]) (void)ncclCommAbort(b->nccl[i]), b->nccl[i] = NULL;
    for (int i = 0; i < 4; i++)
        if (b->p2p_own[i]) (void)ncclCommAbort(b->p2p_own[i]), b->p2p_own[i] = NULL;
}

void bcu_wait(backend_t *be, cudaStream_t s, const char *what)
{
    bcu_waiter_t w = {be->state, s};
    if (!be->wait) { /* a backend made without the run's waits: no deadline to keep */
        CUDA_CHECK(cudaStreamSynchronize(s));
        return;
    }
    wait_poll(be->wait, bcu_stream_ready, bcu_give_up, &w, what);
}

/* ---- memory: on the compute stream ---- */

static void cuda_copy(backend_t *be, void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind)
{
    bcu_t *b = be->state;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, b->ctx.compute));
    /* host → device: the source may be reused by the caller at once; device → host: the value is
     * wanted now */
    if (kind != cudaMemcpyDeviceToDevice)
        bcu_wait(be, b->ctx.compute, kind == cudaMemcpyDeviceToHost ? "the device's work before a copy to the host"
                                                                    : "a copy to the device");
}

void be_cuda_zero(backend_t *be, void *dev, size_t bytes)
{
    bcu_t *b = be->state;
    CUDA_CHECK(cudaMemsetAsync(dev, 0, bytes, b->ctx.compute));
}

void be_cuda_copy(backend_t *be, void *dev_dst, const void *dev_src, size_t bytes)
{
    cuda_copy(be, dev_dst, dev_src, bytes, cudaMemcpyDeviceToDevice);
}

void be_cuda_to_device(backend_t *be, void *dev_dst, const void *host_src, size_t bytes)
{
    cuda_copy(be, dev_dst, host_src, bytes, cudaMemcpyHostToDevice);
}

void be_cuda_to_host(backend_t *be, void *host_dst, const void *dev_src, size_t bytes)
{
    cuda_copy(be, host_dst, dev_src, bytes, cudaMemcpyDeviceToHost);
}

/* ---- the host side ---- */

void *be_cuda_host_alloc(backend_t *be, size_t bytes)
{
    void *p = cu_host_alloc(bytes ? bytes : 1, "pinned host buffer");
    if (p) memset(p, 0, bytes);
    return p;
}

void be_cuda_host_free(backend_t *be, void *p)
{
    if (p) cu_host_free(p);
}

void be_cuda_sync(backend_t *be)
{
    bcu_t *b = be->state;
    bcu_wait(be, b->ctx.compute, "the device's work (compute stream)");
    bcu_wait(be, b->ctx.comm, "the data-parallel buckets (collective stream)");
}

void be_cuda_scratch_plan(backend_t *be, const be_shape_t *sh)
{
    bcu_t *b = be->state;
    size_t bytes = cu_scratch_bound(sh->B, sh->T, sh->C, sh->V, sh->F, sh->NH);
    if (bytes < BCU_SCRATCH_MIN) bytes = BCU_SCRATCH_MIN;
    if (cu_ctx_reserve(&b->ctx, bytes) != KERN_OK)
        MP_ABORT("the kernels' CUDA scratch of %zu MiB (for micro-batches of %d x %d tokens, width %d, vocabulary %d, "
                 "MLP %d, %d heads) does not fit beside the arena: lower memory.device_limit", bytes >> 20, sh->B,
                 sh->T, sh->C, sh->V, sh->F, sh->NH);
    b->ctx.scratch_planned = 1;
}

void be_cuda_scratch_freeze(backend_t *be) { ((bcu_t *)be->state)->ctx.scratch_frozen = 1; }

/* The GPU's PCI bus id, for NVML's energy counter (be_gpu_bus_id): NVML and CUDA may number devices
 * differently, the bus id is the same in both. */
static int cuda_gpu_bus_id(backend_t *be, char *buf, size_t n)
{
    bcu_t *b = be->state;
    CUDA_CHECK(cudaDeviceGetPCIBusId(buf, (int)n, b->ctx.device));
    return 1;
}

/* ---- kernels: each line of be_kernels.h calls its kernels_cuda.h twin, whose type it must name ---- */

static cu_ctx_t *cuda_ctx(backend_t *be) { return &((bcu_t *)be->state)->ctx; }

#define CUDA_KERNEL_CHECK(ret, name, params)                                                 \
    _Static_assert(_Generic(&cu_##name, ret (*)(cu_ctx_t *, BE_ARGS params): 1, default: 0), \
                   "cu_" #name ": be_kernels.h differs from kernels_cuda.h");
#define CUDA_KERNEL(ret, name, params, args) \
    CUDA_KERNEL_CHECK(ret, name, params)     \
    static ret cuda_##name(backend_t *be, BE_ARGS params) { cu_##name(cuda_ctx(be), BE_ARGS args); }
#define CUDA_KERNEL_R(ret, name, params, args) \
    CUDA_KERNEL_CHECK(ret, name, params)       \
    static ret cuda_##name(backend_t *be, BE_ARGS params) { return cu_##name(cuda_ctx(be), BE_ARGS args); }
BE_KERNELS(CUDA_KERNEL, CUDA_KERNEL_R)

/* The fused kernels' own condition (bf16, the head sizes set up on this device, the shape). */
static int cuda_attention_fused(const backend_t *be, int B, int T, int C, int NH)
{
    return cu_attention_flash_fits(&((const bcu_t *)be->state)->ctx, B, T, C, NH);
}

/* ---- the table ---- */

#define CUDA_OP_ENTRY(ret, name, params, args) .name = be_cuda_##name,
#define CUDA_KERNEL_ENTRY(ret, name, params, args) .name = cuda_##name,
const be_ops_t be_ops_cuda = {
    .device = "cuda",
    .init = cuda_init,
    .region_open = cuda_region_open,
    .destroy = cuda_destroy,
    .time_begin = bcu_time_begin,
    .time_end = bcu_time_end,
    .time_flush = bcu_time_flush,
    .timer = "cuda events",
    .gpu_bus_id = cuda_gpu_bus_id,
    .attention_fused = cuda_attention_fused,
    BE_OPS(CUDA_OP_ENTRY, CUDA_OP_ENTRY)
    BE_KERNELS(CUDA_KERNEL_ENTRY, CUDA_KERNEL_ENTRY)
};
