// Token + position embedding on the GPU, vocab-parallel aware. Legend in kernels.h.
#include "cuda_check.h"
#include "kernels_cuda.h"

enum { THREADS = 256, BUCKETS = 64, BUCKET_ROWS = 8 };

static unsigned grid_for(size_t n)
{
    const size_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < 65536 ? b : 65536);
}

__global__ void encoder_forward_kernel(float *out, const int *tokens, const float *wte, const float *wpe, int T,
                                       int C, int v0, int vn, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t bt = i / C;
        const int c = (int)(i % C), tok = tokens[bt] - v0;
        const float e = tok >= 0 && tok < vn ? wte[(size_t)tok * C + c] : 0.0f;
        out[i] = e + (wpe ? wpe[(bt % T) * C + c] : 0.0f);
    }
}

void cu_encoder_forward(cu_ctx_t *ctx, float *out, const int *tokens, const float *wte, const float *wpe, int B,
                        int T, int C, int v0, int vn)
{
    const size_t n = (size_t)B * T * C;
    encoder_forward_kernel<<<grid_for(n), THREADS, 0, ctx->compute>>>(out, tokens, wte, wpe, T, C, v0, vn, n);
    CUDA_CHECK_LAUNCH();
}

__global__ void position_forward_kernel(float *out, const float *wpe, int T, int C, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] += wpe[(i / C) % T * C + i % C];
}

void cu_position_forward(cu_ctx_t *ctx, float *out, const float *wpe, int B, int T, int C)
{
    const size_t n = (size_t)B * T * C;
    position_forward_kernel<<<grid_for(n), THREADS, 0, ctx->compute>>>(out, wpe, T, C, n);
    CUDA_CHECK_LAUNCH();
}

// dwte += without atomics: thread (c, bucket) owns channel c of every vocabulary row whose local
// index is ≡ bucket (mod BUCKETS) and walks all tokens in order, so each (row, channel) sum has one
// owner and the CPU's order. A warp spans 32 channels of one bucket: its branches agree.
__global__ void encoder_dwte_kernel(float *dwte, const float *dout, const int *tokens, int N, int C, int v0, int vn)
{
    const int c = blockIdx.x * 32 + threadIdx.x, bucket = blockIdx.y * BUCKET_ROWS + threadIdx.y;
    if (c >= C) return;
    for (int bt = 0; bt < N; bt++) {
        const int tok = tokens[bt] - v0;
        if (tok >= 0 && tok < vn && tok % BUCKETS == bucket) dwte[(size_t)tok * C + c] += dout[(size_t)bt * C + c];
    }
}

// dwpe (T,C) += Σ_b dout[b, t]: a thread per (t, c), sequences in order.
__global__ void encoder_dwpe_kernel(float *dwpe, const float *dout, int B, int T, int C)
{
    const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; // t·C + c
    if (i >= (size_t)T * C) return;
    float s = dwpe[i];
    for (int b = 0; b < B; b++) s += dout[(size_t)b * T * C + i];
    dwpe[i] = s;
}

void cu_encoder_backward(cu_ctx_t *ctx, float *dwte, float *dwpe, const float *dout, const int *tokens, int B,
                         int T, int C, int v0, int vn)
{
    const dim3 block(32, BUCKET_ROWS), grid((unsigned)((C + 31) / 32), BUCKETS / BUCKET_ROWS);
    encoder_dwte_kernel<<<grid, block, 0, ctx->compute>>>(dwte, dout, tokens, B * T, C, v0, vn);
    CUDA_CHECK_LAUNCH();
    const size_t n = (size_t)T * C;
    encoder_dwpe_kernel<<<(unsigned)((n + THREADS - 1) / THREADS), THREADS, 0, ctx->compute>>>(dwpe, dout, B, T, C);
    CUDA_CHECK_LAUNCH();
}
