#include "rng.h"

#include <math.h>

uint64_t rng_name_hash(const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 0x100000001b3ull;
    return h;
}

float rng_normal(uint64_t seed, uint64_t name_hash, uint64_t index)
{
    /* Box-Muller on two draws keyed by 2*index and 2*index+1: element i never depends on i-1. */
    float u1 = rng_uniform(rng_key(seed, RNG_STREAM_INIT, name_hash, 2 * index));
    float u2 = rng_uniform(rng_key(seed, RNG_STREAM_INIT, name_hash, 2 * index + 1));
    return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530717958647692f * u2);
}
