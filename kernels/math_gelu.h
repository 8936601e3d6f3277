/* GELU, tanh approximation (GPT-2): gelu(x) = 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))).
 * The forward of training evaluates the value and the derivative together (mp_gelu_pair: one tanh)
 * and saves the derivative, so the backward multiplies by it instead of evaluating a second tanh.
 * mp_gelu and mp_gelu_grad are built from the same two pieces: every path gives the same bits. */
#ifndef MP_MATH_GELU_H
#define MP_MATH_GELU_H

#include "hd.h"
#include "math_exp.h"

#define MP_GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define MP_GELU_A 0.044715f

/* tanh of GELU's inner argument: the expensive part, shared by the value and the derivative. */
MP_HD float mp_gelu_tanh(float x) { return mp_tanhf(MP_GELU_K * (x + MP_GELU_A * x * x * x)); }

MP_HD float mp_gelu_value(float x, float th) { return 0.5f * x * (1.0f + th); }

MP_HD float mp_gelu_deriv(float x, float th)
{
    float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * MP_GELU_K * (1.0f + 3.0f * MP_GELU_A * x * x);
}

MP_HD float mp_gelu(float x) { return mp_gelu_value(x, mp_gelu_tanh(x)); }

/* d gelu / dx */
MP_HD float mp_gelu_grad(float x) { return mp_gelu_deriv(x, mp_gelu_tanh(x)); }

/* gelu(x), and *grad = gelu'(x), with one tanh. */
MP_HD float mp_gelu_pair(float x, float *grad)
{
    const float th = mp_gelu_tanh(x);
    *grad = mp_gelu_deriv(x, th);
    return mp_gelu_value(x, th);
}

#endif
