/* bfloat16 on the host: fp32's sign, exponent and top 7 mantissa bits. Rounding is to nearest, ties
 * to even, as CUDA's __float2bfloat16 and the NCCL stand-in round; a NaN stays a (quiet) NaN rather
 * than rounding up into an infinity. Widening is exact. */
#ifndef MP_BF16_H
#define MP_BF16_H

#include <stdint.h>
#include <string.h>

static inline uint16_t mp_bf16_round(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float mp_bf16_widen(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif
