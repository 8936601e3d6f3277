/* GELU on the CPU; per-element math in math_gelu.h. (The residual add is fused into the
 * projection products: matmul_residual_forward.) */
#include "kernels.h"
#include "math_gelu.h"

void gelu_forward(float *out, const float *inp, size_t n)
{
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = mp_gelu(inp[i]);
}

void gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) dinp[i] = mp_gelu_grad(inp[i]) * dout[i];
}
