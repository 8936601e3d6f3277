// SwiGLU on the GPU, on packed rows [gate (F) | up (F)]; per-element math in math_swiglu.h, the
// CPU's (swiglu_cpu.c). Legend in kernels.h. A thread per output element (row, f) over a
// grid-stride loop; both outputs are assigned (=).
//
// MP_LLAMA_EMU: validation/cuda/llama_emu_test.cc includes this file (see rmsnorm_cuda.cu).
#ifndef MP_LLAMA_EMU
#include "cuda_check.h"
#include "kernels_cuda.h"
#endif
#include "math_swiglu.h"

namespace {

enum { SWIGLU_THREADS = 256, SWIGLU_MAX_BLOCKS = 1 << 16 };

// out (N,F) = silu(gate) · up ; n = N·F.
__global__ void __launch_bounds__(SWIGLU_THREADS) swiglu_forward_kernel(float *out, const float *inp, int F, size_t n)
{
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        const float *g = inp + (e / F) * 2 * F + e % F;
        out[e] = mp_swiglu(g[0], g[F]);
    }
}

// dinp (N,2F) = [dgate | dup] ; n = N·F.
__global__ void __launch_bounds__(SWIGLU_THREADS)
    swiglu_backward_kernel(float *dinp, const float *dout, const float *inp, int F, size_t n)
{
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        const size_t at = (e / F) * 2 * F + e % F;
        float dg, du;
        mp_swiglu_grad(inp[at], inp[at + F], dout[e], &dg, &du);
        dinp[at] = dg;
        dinp[at + F] = du;
    }
}

// Launch shape, shared with the emulation.
unsigned swiglu_blocks(size_t n)
{
    const size_t b = (n + SWIGLU_THREADS - 1) / SWIGLU_THREADS;
    return (unsigned)(b < (size_t)SWIGLU_MAX_BLOCKS ? b : (size_t)SWIGLU_MAX_BLOCKS);
}

} // namespace

#ifndef MP_LLAMA_EMU
void cu_swiglu_forward(cu_ctx_t *ctx, float *out, const float *inp, int N, int F)
{
    const size_t n = (size_t)(N > 0 ? N : 0) * (F > 0 ? F : 0);
    if (n == 0) return;
    swiglu_forward_kernel<<<swiglu_blocks(n), SWIGLU_THREADS, 0, ctx->compute>>>(out, inp, F, n);
    CUDA_CHECK_LAUNCH();
}

void cu_swiglu_backward(cu_ctx_t *ctx, float *dinp, const float *dout, const float *inp, int N, int F)
{
    const size_t n = (size_t)(N > 0 ? N : 0) * (F > 0 ? F : 0);
    if (n == 0) return;
    swiglu_backward_kernel<<<swiglu_blocks(n), SWIGLU_THREADS, 0, ctx->compute>>>(dinp, dout, inp, F, n);
    CUDA_CHECK_LAUNCH();
}
#endif
