#include "arena.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"

void arena_init(arena_t *a, size_t limit)
{
    memset(a, 0, sizeof *a);
    a->limit = limit;
}

static void *arena_bytes(arena_t *a, size_t bytes, const char *what)
{
    if (a->limit && a->in_use + bytes > a->limit) {
        MP_ERROR("memory.device_limit exceeded allocating %s: %zu bytes requested, %zu in use, limit %zu",
                 what, bytes, a->in_use, a->limit);
        return NULL;
    }
    size_t rounded = (bytes + 63) / 64 * 64;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (!p) {
        MP_ERROR("out of memory allocating %s (%zu bytes)", what, bytes);
        return NULL;
    }
    memset(p, 0, rounded ? rounded : 64);
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
    free(p);
    a->in_use -= bytes;
    a->count--;
}
