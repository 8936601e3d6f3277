// Token + position embedding on the GPU, vocab-parallel aware. Legend in kernels.h.
#include <cub/device/device_radix_sort.cuh>

#include "cuda_check.h"
#include "kernels_cuda.h"

enum { THREADS = 256 };

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

// dwte += without atomics, in the CPU's order: the tokens are sorted by their local row with a
// stable radix sort (equal rows keep their positions' order), so each row's tokens form one run of
// the sorted list, in position order. The block at a run's start owns that row and adds the run's
// dout rows into it one by one, channel by channel: each (row, channel) sum has one owner and the
// CPU's order, so the bits are the CPU's. Tokens outside this rank's slice sort last, on key vn.
__global__ void encoder_sort_keys_kernel(unsigned *key, int *pos, const int *tokens, int N, int v0, int vn)
{
    const int bt = blockIdx.x * blockDim.x + threadIdx.x;
    if (bt >= N) return;
    const int tok = tokens[bt] - v0;
    key[bt] = tok >= 0 && tok < vn ? (unsigned)tok : (unsigned)vn;
    pos[bt] = bt;
}

enum { RUN_UNROLL = 8 };

__global__ void encoder_dwte_kernel(float *dwte, const float *dout, const unsigned *key, const int *pos, int N,
                                    int C, int vn)
{
    const int i0 = blockIdx.x;
    const unsigned row = key[i0];
    if (row == (unsigned)vn || (i0 > 0 && key[i0 - 1] == row)) return; // not a run's start, or no row here
    int i1 = i0 + 1;
    while (i1 < N && key[i1] == row) i1++;
    float *e = dwte + (size_t)row * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = e[c];
        int i = i0;
        // the loads of RUN_UNROLL tokens issued before their additions, which stay in order
        for (; i + RUN_UNROLL <= i1; i += RUN_UNROLL) {
            float d[RUN_UNROLL];
#pragma unroll
            for (int u = 0; u < RUN_UNROLL; u++) d[u] = dout[(size_t)pos[i + u] * C + c];
#pragma unroll
            for (int u = 0; u < RUN_UNROLL; u++) acc += d[u];
        }
        for (; i < i1; i++) acc += dout[(size_t)pos[i] * C + c];
        e[c] = acc;
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
    const int N = B * T;
    if (N > 0 && vn > 0) {
        int end_bit = 1; // the sort looks at the bits that can differ: keys are 0..vn
        while (end_bit < 31 && ((unsigned)vn >> end_bit) != 0) end_bit++;
        size_t temp_bytes = 0;
        CUDA_CHECK(cub::DeviceRadixSort::SortPairs(NULL, temp_bytes, (const unsigned *)NULL, (unsigned *)NULL,
                                                   (const int *)NULL, (int *)NULL, N, 0, end_bit, ctx->compute));
        // scratch: keys and positions in and out (256-byte aligned each), then the sort's own
        const size_t slot = ((size_t)N * 4 + 255) / 256 * 256;
        char *base = (char *)cu_ctx_scratch(ctx, 4 * slot + temp_bytes);
        unsigned *key_in = (unsigned *)base, *key = (unsigned *)(base + slot);
        int *pos_in = (int *)(base + 2 * slot), *pos = (int *)(base + 3 * slot);
        encoder_sort_keys_kernel<<<(unsigned)((N + THREADS - 1) / THREADS), THREADS, 0, ctx->compute>>>(
            key_in, pos_in, tokens, N, v0, vn);
        CUDA_CHECK_LAUNCH();
        CUDA_CHECK(cub::DeviceRadixSort::SortPairs(base + 4 * slot, temp_bytes, key_in, key, pos_in, pos, N, 0,
                                                   end_bit, ctx->compute));
        const int threads = C < THREADS ? (C + 31) / 32 * 32 : THREADS;
        encoder_dwte_kernel<<<(unsigned)N, threads, 0, ctx->compute>>>(dwte, dout, key, pos, N, C, vn);
        CUDA_CHECK_LAUNCH();
    }
    const size_t n = (size_t)T * C;
    encoder_dwpe_kernel<<<(unsigned)((n + THREADS - 1) / THREADS), THREADS, 0, ctx->compute>>>(dwpe, dout, B, T, C);
    CUDA_CHECK_LAUNCH();
}
