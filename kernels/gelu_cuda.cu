// GELU on the GPU; per-element math in math_gelu.h, the same formula the CPU runs.
#include "cuda_check.h"
#include "kernels_cuda.h"
#include "math_gelu.h"

enum { THREADS = 256 };

static unsigned grid_for(size_t n)
{
    const size_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < 65536 ? b : 65536);
}

__global__ void gelu_forward_kernel(float *out, const float *inp, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = mp_gelu(inp[i]);
}

void cu_gelu_forward(cu_ctx_t *ctx, float *out, const float *inp, size_t n)
{
    gelu_forward_kernel<<<grid_for(n), THREADS, 0, ctx->compute>>>(out, inp, n);
    CUDA_CHECK_LAUNCH();
}

// dinp may alias dout: each element is read, then written, by one thread.
__global__ void gelu_backward_kernel(float *dinp, const float *inp, const float *dout, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dinp[i] = mp_gelu_grad(inp[i]) * dout[i];
}

void cu_gelu_backward(cu_ctx_t *ctx, float *dinp, const float *inp, const float *dout, size_t n)
{
    gelu_backward_kernel<<<grid_for(n), THREADS, 0, ctx->compute>>>(dinp, inp, dout, n);
    CUDA_CHECK_LAUNCH();
}
