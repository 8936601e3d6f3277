/* SwiGLU per element (Llama's MLP: down(silu(gate(x)) · up(x))): h = silu(g)·u with
 * silu(g) = g·σ(g). Backward: dg = dh·u·silu'(g), du = dh·silu(g), where
 * silu'(g) = σ(g)·(1 + g·(1 − σ(g))). σ goes through mp_expf (no libm call, so the CPU loops
 * vectorise and both backends get the same values); its clamp keeps σ finite for any g:
 * σ(−100) is a tiny normal number instead of 0, σ(100) is 1. */
#ifndef MP_MATH_SWIGLU_H
#define MP_MATH_SWIGLU_H

#include "hd.h"
#include "math_exp.h"

MP_HD float mp_sigmoid(float g) { return 1.0f / (1.0f + mp_expf(-g)); }

MP_HD float mp_swiglu(float g, float u)
{
    const float sg = mp_sigmoid(g);
    return g * sg * u;
}

/* *dg, *du for one element, from one σ. */
MP_HD void mp_swiglu_grad(float g, float u, float dh, float *dg, float *du)
{
    const float sg = mp_sigmoid(g);
    *dg = dh * u * (sg * (1.0f + g * (1.0f - sg)));
    *du = dh * (g * sg);
}

#endif
