// The MLP's GELU beside its products on the GPU: the same contract as kernels/matmul_gelu_cpu.c
// (the forward saves GELU's derivative, the backward multiplies by it), but not fused: a cuBLAS
// product, then one element-wise kernel over its output. The per-element math is math_gelu.h's.
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

void cu_matmul_gelu_forward(cu_ctx_t *ctx, float *out, float *dgelu, const float *inp, const float *w,
                            const float *bias, int N, int C, int OC)
{
    cu_matmul_forward(ctx, dgelu, inp, w, bias, N, C, OC);
    const size_t n = (size_t)N * OC;
    gelu_pair_kernel<<<grid_for(n), THREADS, 0, ctx->compute>>>(out, dgelu, n);
    CUDA_CHECK_LAUNCH();
}

__global__ void mul_kernel(float *x, const float *y, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] *= y[i];
}

void cu_matmul_backward_gelu(cu_ctx_t *ctx, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                             const float *w, const float *dgelu, int N, int C, int OC)
{
    cu_matmul_backward(ctx, dinp, dw, dbias, dout, inp, w, N, C, OC);
    if (!dinp) return; // the weight half alone (a split backward's W)
    const size_t n = (size_t)N * C;
    mul_kernel<<<grid_for(n), THREADS, 0, ctx->compute>>>(dinp, dgelu, n);
    CUDA_CHECK_LAUNCH();
}
