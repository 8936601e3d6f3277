// Device-memory arena: one cudaMalloc at start-up, then bump allocation. cudaMalloc/cudaFree in the
// step loop would synchronise the device and fragment it; a bump pointer costs nothing, and the
// peak it records is the memory the model really needs (what memory.device_limit is checked against).
#include <string.h>

#include "cuda_check.h"
#include "kernels_cuda.h"

size_t cu_arena_default_margin(size_t total_bytes)
{
    const size_t sixteenth = total_bytes / 16;
    return sixteenth > CU_ARENA_MIN_MARGIN ? sixteenth : CU_ARENA_MIN_MARGIN;
}

int cu_arena_init(cu_arena_t *a, size_t limit, size_t margin)
{
    memset(a, 0, sizeof *a);
    size_t free_b = 0, total_b = 0;
    cudaError_t rc = cudaMemGetInfo(&free_b, &total_b);
    if (rc != cudaSuccess) return KERN_FAIL("cudaMemGetInfo failed: %s", cudaGetErrorString(rc));
    if (margin == 0) margin = cu_arena_default_margin(total_b);
    if (free_b <= margin)
        return KERN_FAIL("device arena: %zu MiB free of %zu MiB, less than the %zu MiB margin left for cuBLAS and NCCL",
                       free_b >> 20, total_b >> 20, margin >> 20);
    size_t cap = free_b - margin;
    if (limit > 0 && limit < cap) cap = limit;
    cap &= ~(size_t)(CU_ARENA_ALIGN - 1);
    rc = cudaMalloc((void **)&a->base, cap);
    if (rc != cudaSuccess) {
        a->base = NULL;
        return KERN_FAIL("device arena: cudaMalloc of %zu MiB failed: %s", cap >> 20, cudaGetErrorString(rc));
    }
    a->capacity = cap;
    return KERN_OK;
}

void *cu_arena_alloc(cu_arena_t *a, size_t bytes, const char *what)
{
    const size_t start = (a->in_use + CU_ARENA_ALIGN - 1) & ~(size_t)(CU_ARENA_ALIGN - 1);
    if (start > a->capacity || bytes > a->capacity - start) {
        KERN_ERROR("device arena: %s needs %zu bytes, %zu of %zu in use (raise memory.device_limit or shrink the "
                 "micro-batch)", what, bytes, a->in_use, a->capacity);
        return NULL;
    }
    a->in_use = start + bytes;
    if (a->in_use > a->peak) a->peak = a->in_use;
    a->count++;
    return a->base + start;
}

size_t cu_arena_mark(const cu_arena_t *a) { return a->in_use; }

void cu_arena_release(cu_arena_t *a, size_t mark)
{
    if (mark > a->in_use) KERN_ABORT("device arena: release to %zu above the %zu bytes in use", mark, a->in_use);
    a->in_use = mark;
}

void cu_arena_destroy(cu_arena_t *a)
{
    if (a->base) CUDA_CHECK(cudaFree(a->base));
    memset(a, 0, sizeof *a);
}

void *cu_host_alloc(size_t bytes, const char *what)
{
    void *p = NULL;
    cudaError_t rc = cudaMallocHost(&p, bytes);
    if (rc != cudaSuccess) {
        KERN_ERROR("pinned host allocation of %zu bytes for %s failed: %s", bytes, what, cudaGetErrorString(rc));
        return NULL;
    }
    return p;
}

void cu_host_free(void *p)
{
    if (p) CUDA_CHECK(cudaFreeHost(p));
}
