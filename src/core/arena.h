/* Per-rank device-memory arena (ARCHITECTURE.md §6). Every model allocation (parameters, gradients, optimizer
 * moments, activations, scratch) goes through it. On the CPU backend the memory is ordinary host
 * memory, but the capacity (memory.device_limit) and the peak accounting are real: a stage can be
 * put under memory pressure in a test, and the peak is what the progress line reports. */
#ifndef MP_ARENA_H
#define MP_ARENA_H

#include <stddef.h>

typedef struct {
    size_t limit;   /* bytes; 0 = unlimited */
    size_t in_use;  /* bytes currently allocated */
    size_t peak;    /* high-water mark of in_use */
    int count;      /* live allocations */
    /* Region mode (arena_bind_region: the emu and cuda backends): allocations are bumped from
     * [base, base + capacity) at `top`, zeroed through `zero`; a free gives memory back only when
     * it is the newest block (model memory lives as long as the run; frees come at teardown). */
    char *base;
    size_t capacity, top;
    void (*zero)(void *ctx, void *p, size_t bytes);
    void *zero_ctx;
} arena_t;

/* Zeroed, 64-byte aligned host memory, free()d as usual. Blocks of 4 MiB and more are 2 MiB aligned
 * and advised to use transparent huge pages: first touch then faults once per 2 MiB, not per 4 KiB
 * (on a VM, faulting in a 124M model's 1.5 GB of optimizer state and checkpoint buffers page by page
 * costs seconds). NULL when out of memory. */
void *mem_zalloc(size_t bytes);

void arena_init(arena_t *a, size_t limit);
/* From now on allocations come from the region [base, base + capacity), 256-byte aligned, zeroed by
 * zero(ctx, p, bytes). Call before the first allocation. */
void arena_bind_region(arena_t *a, void *base, size_t capacity, void (*zero)(void *ctx, void *p, size_t bytes),
                       void *zero_ctx);
/* 64-byte aligned, zeroed floats. NULL (after a message naming `what`, the request and the limit)
 * when the limit would be exceeded or the allocation fails. */
float *arena_floats(arena_t *a, size_t n, const char *what);
/* Same for ints. */
int *arena_ints(arena_t *a, size_t n, const char *what);
/* Returns memory from arena_floats/arena_ints; n must be the count it was allocated with. */
void arena_free(arena_t *a, void *p, size_t bytes);

#endif
