/* A binary min-heap of (rank << 32 | position), the lowest rank first and the leftmost of equals:
 * the order in which byte-level BPE applies its merges. Shared by GPT-2's encoder (bpe_gpt2.c) and
 * tokenizer.json's (tok_hf_encode.c) for pieces too long for their linear scan. */
#ifndef MP_MERGE_HEAP_H
#define MP_MERGE_HEAP_H

#include <stddef.h>
#include <stdint.h>

static inline void merge_heap_push(uint64_t *h, size_t *n, uint64_t v)
{
    size_t i = (*n)++;
    for (; i > 0 && h[(i - 1) / 2] > v; i = (i - 1) / 2) h[i] = h[(i - 1) / 2];
    h[i] = v;
}

/* The smallest entry, removed (*n > 0). */
static inline uint64_t merge_heap_pop(uint64_t *h, size_t *n)
{
    const uint64_t top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (h[c] >= last) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

#endif
