/* GELU, tanh approximation (GPT-2): gelu(x) = 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))). */
#ifndef MP_MATH_GELU_H
#define MP_MATH_GELU_H

#include "hd.h"
#include "math_exp.h"

#define MP_GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define MP_GELU_A 0.044715f

MP_HD float mp_gelu(float x)
{
    float u = MP_GELU_K * (x + MP_GELU_A * x * x * x);
    return 0.5f * x * (1.0f + mp_tanhf(u));
}

/* d gelu / dx */
MP_HD float mp_gelu_grad(float x)
{
    float u = MP_GELU_K * (x + MP_GELU_A * x * x * x);
    float th = mp_tanhf(u);
    float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * MP_GELU_K * (1.0f + 3.0f * MP_GELU_A * x * x);
}

#endif
