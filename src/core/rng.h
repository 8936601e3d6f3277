/* Counter-based randomness (ARCHITECTURE.md §3): every random number is a pure function of global indices
 * (seed, stream, a, b), never of the rank or of call order, so every layout draws the same numbers
 * and a resumed run draws what an uninterrupted one would have.
 *
 * The mixer is splitmix64's finaliser; validation/torch_ref.py re-implements rng_key exactly
 * (the data sampler is checked against it). Do not change it without changing that file. */
#ifndef MP_RNG_H
#define MP_RNG_H

#include <stdint.h>

enum { RNG_STREAM_DATA = 1, RNG_STREAM_INIT = 2, RNG_STREAM_DROPOUT = 3, RNG_STREAM_SUBNET = 4, RNG_STREAM_SEARCH = 5,
       RNG_STREAM_SAMPLE = 6 /* serving: a generated token, keyed by (request id, position) */,
       RNG_STREAM_ORDER = 7 /* data.order = sequential: the epoch's permutation, keyed by (epoch, round|x) */ };

static inline uint64_t rng_mix(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* One 64-bit draw keyed by (seed, stream, a, b). */
static inline uint64_t rng_key(uint64_t seed, uint64_t stream, uint64_t a, uint64_t b)
{
    return rng_mix(rng_mix(rng_mix(rng_mix(seed) ^ stream) ^ a) ^ b);
}

/* Uniform in (0, 1): 24 random bits, never 0 or 1. */
static inline float rng_uniform(uint64_t bits) { return ((float)(bits >> 40) + 0.5f) / 16777216.0f; }

/* FNV-1a 64-bit hash of a canonical tensor name: the init stream of a tensor. */
uint64_t rng_name_hash(const char *name);

/* Standard normal for element `index` of the tensor whose name hashes to `name_hash`. */
float rng_normal(uint64_t seed, uint64_t name_hash, uint64_t index);

#endif
