// The MLP's GELU beside its products on the GPU: the same contract as kernels/matmul_gelu_cpu.c
// (the forward saves GELU's derivative, the backward multiplies by it), but not fused: a cuBLAS
// product, then one element-wise kernel over its output (in bf16 that kernel also adds the bias).
// The per-element math is math_gelu.h's.
#include <stdint.h>

#include "cuda_check.h"
#include "kernels_cuda.h"
#include "math_gelu.h"

enum { THREADS = 256 };

static unsigned grid_for(size_t n)
{
    const size_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < 65536 ? b : 65536);
}

// In place on pre: out = gelu(pre), pre := gelu'(pre). Each element is read, then written, by one thread.
__global__ void gelu_pair_kernel(float *out, float *pre, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float d;
        out[i] = mp_gelu_pair(pre[i], &d);
        pre[i] = d;
    }
}

// The same with the bias added first (pre + bias, then GELU), four columns a thread: OC % 4 == 0 and
// all three pointers on 16 bytes. n4 counts float4s.
__global__ void bias_gelu_pair4_kernel(float4 *out, float4 *pre, const float4 *bias, size_t n4, int OC4)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < n4; j += (size_t)gridDim.x * blockDim.x) {
        const float4 p = pre[j], b = bias[j % (size_t)OC4];
        float4 o, d;
        o.x = mp_gelu_pair(p.x + b.x, &d.x);
        o.y = mp_gelu_pair(p.y + b.y, &d.y);
        o.z = mp_gelu_pair(p.z + b.z, &d.z);
        o.w = mp_gelu_pair(p.w + b.w, &d.w);
        out[j] = o;
        pre[j] = d;
    }
}

__global__ void bias_gelu_pair_kernel(float *out, float *pre, const float *bias, size_t n, int OC)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float d;
        out[i] = mp_gelu_pair(pre[i] + bias[i % (size_t)OC], &d);
        pre[i] = d;
    }
}

// bf16: the product writes pre alone (beta = 0) and the GELU kernel adds the bias, where fp32 still
// writes the bias into pre first and accumulates onto it (beta = 1): two fewer passes over the
// (N, OC) output. The sum is acc + bias either way, but cuBLAS may choose another algorithm (or
// split-K accumulation onto C) for beta = 1 than for beta = 0, so pre's bits can differ from the
// old bf16 order's; fp32 keeps that order.
void cu_matmul_gelu_forward(cu_ctx_t *ctx, float *out, float *dgelu, const float *inp, const float *w,
                            const float *bias, int N, int C, int OC)
{
    const size_t n = (size_t)N * OC;
    if (ctx->precision != CU_BF16 || !bias) {
        cu_matmul_forward(ctx, dgelu, inp, w, bias, N, C, OC);
        gelu_pair_kernel<<<grid_for(n), THREADS, 0, ctx->compute>>>(out, dgelu, n);
        CUDA_CHECK_LAUNCH();
        return;
    }
    cu_gemm(ctx, 0, 1, N, OC, C, 1.0f, inp, C, 0, w, C, 0, 0.0f, dgelu, OC, 0, 1);
    if (OC % 4 == 0 && ((uintptr_t)out | (uintptr_t)dgelu | (uintptr_t)bias) % 16 == 0)
        bias_gelu_pair4_kernel<<<grid_for(n / 4), THREADS, 0, ctx->compute>>>((float4 *)out, (float4 *)dgelu,
                                                                                (const float4 *)bias, n / 4, OC / 4);
    else
        bias_gelu_pair_kernel<<<grid_for(n), THREADS, 0, ctx->compute>>>(out, dgelu, bias, n, OC);
    CUDA_CHECK_LAUNCH();
}

__global__ void mul_kernel(float *x, const float *y, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] *= y[i];
}

// mul_kernel on float4s (both operands 16-byte aligned), the last n % 4 elements scalar: the same
// product per element, a quarter of the memory instructions.
__global__ void mul4_kernel(float *x, const float *y, size_t n)
{
    const size_t n4 = n / 4, t0 = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    float4 *x4 = reinterpret_cast<float4 *>(x);
    const float4 *y4 = reinterpret_cast<const float4 *>(y);
    for (size_t i = t0; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        float4 a = x4[i];
        const float4 b = y4[i];
        a.x *= b.x, a.y *= b.y, a.z *= b.z, a.w *= b.w;
        x4[i] = a;
    }
    if (t0 < n % 4) x[4 * n4 + t0] *= y[4 * n4 + t0];
}

void cu_matmul_backward_gelu(cu_ctx_t *ctx, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                             const float *w, const float *dgelu, int N, int C, int OC)
{
    cu_matmul_backward(ctx, dinp, dw, dbias, dout, inp, w, N, C, OC);
    if (!dinp) return; // the weight half alone (a split backward's W)
    const size_t n = (size_t)N * C;
    if ((uintptr_t)dinp % 16 == 0 && (uintptr_t)dgelu % 16 == 0)
        mul4_kernel<<<grid_for(n / 4 > 0 ? n / 4 : 1), THREADS, 0, ctx->compute>>>(dinp, dgelu, n);
    else
        mul_kernel<<<grid_for(n), THREADS, 0, ctx->compute>>>(dinp, dgelu, n);
    CUDA_CHECK_LAUNCH();
}
