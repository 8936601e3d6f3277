/* SwiGLU on the CPU; per-element math in math_swiglu.h. Legend in kernels.h. */
#include "kernels.h"
#include "math_swiglu.h"

void swiglu_forward(float *out, const float *inp, int N, int F)
{
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *g = inp + (size_t)i * 2 * F, *u = g + F;
        float *h = out + (size_t)i * F;
#pragma omp simd
        for (int f = 0; f < F; f++) h[f] = mp_swiglu(g[f], u[f]);
    }
}

void swiglu_backward(float *dinp, const float *dout, const float *inp, int N, int F)
{
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *g = inp + (size_t)i * 2 * F, *u = g + F, *dh = dout + (size_t)i * F;
        float *dg = dinp + (size_t)i * 2 * F, *du = dg + F;
#pragma omp simd
        for (int f = 0; f < F; f++) mp_swiglu_grad(g[f], u[f], dh[f], &dg[f], &du[f]);
    }
}
