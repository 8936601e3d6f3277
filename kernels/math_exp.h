/* exp and tanh written out as polynomials, so CPU loops over them vectorise (a call to libm's
 * expf/tanhf does not) and both backends compute the same values.
 *
 * mp_expf: exp(x) = 2^k · exp(r), k = round(x / ln2), r = x − k·ln2 split in two constants (Cody-Waite),
 * exp(r) on |r| ≤ ln2/2 by its degree-7 Taylor polynomial; max relative error 1e-7 (measured
 * against double exp over [-87, 88] in validation/unit/test_kernels). Inputs are clamped
 * to [-87.3, 88.7]: below, the result is a tiny normal number instead of 0 — fine for softmax and
 * GELU, which only ever add 1 to it or divide by a sum that contains exp(0) = 1. */
#ifndef MP_MATH_EXP_H
#define MP_MATH_EXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "hd.h"

MP_HD float mp_expf(float x)
{
    /* Every operation here is done unconditionally and only the clamps are selects: a multiply
     * inside a branch may trap (gcc's default -ftrapping-math), so it cannot be if-converted
     * without AVX-512's masks, and on AVX2 the whole loop stayed scalar. k is clamped in the
     * exponent domain, where NaN fails both tests and lands on -126: the conversion to int32_t
     * below is then in range for every input (a NaN or an out-of-range float converted to int32_t
     * is undefined, and what x86 gives, INT32_MIN, made the shift below shift a negative value).
     * x itself is clamped to [-87.3, 88.7] except that a NaN passes through, so exp(NaN) is NaN.
     * For every other input k and r are those of a plain clamp of x (x·log2e rounds to -126 for
     * x ≤ -87.3 and to 128 for x ≥ 88.7 either way). */
    float t = x * 1.44269504088896341f;
    t = t > -126.0f ? t : -126.0f;
    t = t < 128.0f ? t : 128.0f;
    const float kf = rintf(t);
    float xc = x > -87.3f ? x : -87.3f;
    xc = xc < 88.7f ? xc : 88.7f;
    x = x == x ? xc : x;
    const float r = (x - kf * 0.693359375f) + kf * 2.12194440e-4f; /* ln2 = 0.693359375 - 2.12194440e-4 */
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    /* 2^k as a float: k in [-126, 128] after the clamp (128, from x ≥ 88.38, gives +inf), so the
     * biased exponent is in [1, 255] and the shift is of a non-negative value that fits */
    const uint32_t bits = (uint32_t)((int32_t)kf + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* a·b + c, fused where the target has FMA (every AVX2 and AVX-512 CPU, every GPU): the build's
 * -std=c11 turns gcc's contraction off, so without this an AVX2 loop spends two instructions per
 * polynomial term. Builds without FMA (plain x86-64) keep the unfused form: fmaf would be a libm
 * call there and the loop would stop vectorising. The two differ by one rounding per term. */
#if defined(__CUDA_ARCH__) || defined(__FMA__)
#define MP_FMA(a, b, c) fmaf((a), (b), (c))
#else
#define MP_FMA(a, b, c) ((a) * (b) + (c))
#endif

/* exp(x) for |x| ≤ 20 (and NaN, which stays NaN): tanh's inner exponential, which never needs
 * mp_expf's clamps. 2^k is built by the 1.5·2^23 rounding trick on the float's bits, so no
 * float-to-int conversion exists to be undefined for a NaN; everything is unsigned bit arithmetic.
 * Same polynomial and the same reduction as mp_expf. */
MP_HD float mp_expf_small(float x)
{
    const float magic = 12582912.0f; /* 1.5·2^23: adding it rounds to an integer in the low bits */
    const float km = x * 1.44269504088896341f + magic;
    const float kf = km - magic;
    const float r = MP_FMA(kf, 2.12194440e-4f, MP_FMA(kf, -0.693359375f, x));
    float p = 1.0f / 5040.0f;
    p = MP_FMA(p, r, 1.0f / 720.0f);
    p = MP_FMA(p, r, 1.0f / 120.0f);
    p = MP_FMA(p, r, 1.0f / 24.0f);
    p = MP_FMA(p, r, 1.0f / 6.0f);
    p = MP_FMA(p, r, 0.5f);
    p = MP_FMA(p, r, 1.0f);
    p = MP_FMA(p, r, 1.0f);
    uint32_t kb, magic_bits;
    memcpy(&kb, &km, sizeof kb);
    memcpy(&magic_bits, &magic, sizeof magic_bits);
    const uint32_t bits = (kb - magic_bits + 127u) << 23; /* k + 127 in [98, 156] for |x| ≤ 20 */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* tanh(u) = 1 − 2 / (exp(2u) + 1). u is clamped to [-10, 10] first: there 2/(exp(2u) + 1) is
 * below half an ulp of 1, so the result is exactly ±1 either way, and the exponential never
 * leaves mp_expf_small's range. The clamp is taken into a second variable and a NaN u is kept
 * by a last select: clamping u in place let gcc thread the constant ±1 results into branches,
 * and a loop with branches does not vectorise on AVX2. Absolute error ~1e-7 near 0, which is
 * what GELU's 0.5·x·(1 + tanh) needs. */
MP_HD float mp_tanhf(float u)
{
    float c = u < 10.0f ? u : 10.0f;
    c = c > -10.0f ? c : -10.0f;
    u = u == u ? c : u;
    return 1.0f - 2.0f / (mp_expf_small(2.0f * u) + 1.0f);
}

#endif
