#include "arena.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"

void *mem_zalloc(size_t bytes)
{
    const size_t huge = (size_t)2 << 20;
    const int big = bytes >= 2 * huge;
    const size_t align = big ? huge : 64, rounded = (bytes + align - 1) / align * align;
    void *p = aligned_alloc(align, rounded ? rounded : align);
    if (!p) return NULL;
    if (big) madvise(p, rounded, MADV_HUGEPAGE); /* advice only: without THP it is a no-op */
    memset(p, 0, rounded ? rounded : align);
    return p;
}

void arena_init(arena_t *a, size_t limit)
{
    memset(a, 0, sizeof *a);
    a->limit = limit;
}

void arena_bind_region(arena_t *a, void *base, size_t capacity, void (*zero)(void *ctx, void *p, size_t bytes),
                       void *zero_ctx)
{
    a->base = base;
    a->capacity = capacity;
    a->top = 0;
    a->zero = zero;
    a->zero_ctx = zero_ctx;
}

enum { REGION_ALIGN = 256 }; /* cuBLAS and vector loads like it */

static size_t region_round(size_t bytes) { return (bytes + REGION_ALIGN - 1) / REGION_ALIGN * REGION_ALIGN; }

static void *region_bytes(arena_t *a, size_t bytes, const char *what)
{
    const size_t r = region_round(bytes);
    if (r > a->capacity - a->top) {
        MP_ERROR("device memory exhausted allocating %s: %zu bytes requested, %zu of the %zu-byte region in use",
                 what, bytes, a->top, a->capacity);
        return NULL;
    }
    void *p = a->base + a->top;
    a->top += r;
    if (bytes) a->zero(a->zero_ctx, p, bytes);
    return p;
}

static void *arena_bytes(arena_t *a, size_t bytes, const char *what)
{
    if (a->limit && a->in_use + bytes > a->limit) {
        MP_ERROR("memory.device_limit exceeded allocating %s: %zu bytes requested, %zu in use, limit %zu",
                 what, bytes, a->in_use, a->limit);
        return NULL;
    }
    void *p = a->base ? region_bytes(a, bytes, what) : mem_zalloc(bytes);
    if (!p && a->base) return NULL;
    if (!p) {
        MP_ERROR("out of memory allocating %s (%zu bytes)", what, bytes);
        return NULL;
    }
    a->in_use += bytes;
    a->count++;
    if (a->in_use > a->peak) a->peak = a->in_use;
    return p;
}

float *arena_floats(arena_t *a, size_t n, const char *what) { return arena_bytes(a, n * sizeof(float), what); }

int *arena_ints(arena_t *a, size_t n, const char *what) { return arena_bytes(a, n * sizeof(int), what); }

void arena_free(arena_t *a, void *p, size_t bytes)
{
    if (!p) return;
    if (a->base) {
        if ((char *)p + region_round(bytes) == a->base + a->top) a->top -= region_round(bytes);
    } else {
        free(p);
    }
    a->in_use -= bytes;
    a->count--;
}
