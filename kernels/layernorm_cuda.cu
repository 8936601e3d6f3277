// LayerNorm on the GPU; per-element math in math_layernorm.h. Legend in kernels.h.
// Rows: one block per row, sums through CUB's block reduction (a fixed tree: reproducible).
// dw/db: per-chunk partials, then the chunks summed in order (no float atomics).
#include <cub/block/block_reduce.cuh>

#include "cuda_check.h"
#include "kernels_cuda.h"
#include "math_layernorm.h"

enum { THREADS = 128, COLS = 256, CHUNK_ROWS = 64 };

typedef cub::BlockReduce<float, THREADS> Reduce;

// Sum over the block, returned to every thread; leaves tmp and slot free for the next call.
static __device__ float block_sum(float v, Reduce::TempStorage &tmp, float *slot)
{
    v = Reduce(tmp).Sum(v);
    if (threadIdx.x == 0) *slot = v;
    __syncthreads();
    v = *slot;
    __syncthreads();
    return v;
}

__global__ void layernorm_forward_kernel(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                         const float *b, int C)
{
    __shared__ Reduce::TempStorage tmp;
    __shared__ float slot;
    const float *x = inp + (size_t)blockIdx.x * C;
    float *y = out + (size_t)blockIdx.x * C;
    float s = 0.0f;
    for (int c = threadIdx.x; c < C; c += THREADS) s += x[c];
    const float m = block_sum(s, tmp, &slot) / C;
    float v = 0.0f; // two passes, as on the CPU: no cancellation in E[x²] − m²
    for (int c = threadIdx.x; c < C; c += THREADS) v += (x[c] - m) * (x[c] - m);
    const float r = mp_ln_rstd(block_sum(v, tmp, &slot) / C);
    for (int c = threadIdx.x; c < C; c += THREADS) y[c] = mp_ln_out(x[c], m, r, w[c], b[c]);
    if (threadIdx.x == 0) {
        mean[blockIdx.x] = m;
        rstd[blockIdx.x] = r;
    }
}

void cu_layernorm_forward(cu_ctx_t *ctx, float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, int N, int C)
{
    layernorm_forward_kernel<<<N, THREADS, 0, ctx->compute>>>(out, mean, rstd, inp, w, b, C);
    CUDA_CHECK_LAUNCH();
}

// dinp (N,C) += per row, from the row means of dn = dy·w and dn·n. Thread j takes columns j,
// j+THREADS, ... in order; up to K of them are kept in registers between the sums and the write
// (K = 0: read again), the same arithmetic either way.
template <int K>
__global__ void __launch_bounds__(THREADS) layernorm_dinp_kernel(float *dinp, const float *dout, const float *inp,
                                                                 const float *w, const float *mean,
                                                                 const float *rstd, int C)
{
    __shared__ Reduce::TempStorage tmp;
    __shared__ float slot;
    const size_t off = (size_t)blockIdx.x * C;
    const float *x = inp + off, *dy = dout + off;
    float *dx = dinp + off;
    const float m = mean[blockIdx.x], r = rstd[blockIdx.x];
    float sdn = 0.0f, sdnn = 0.0f;
    if constexpr (K > 0) {
        float dn[K], n[K];
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int c = threadIdx.x + k * THREADS;
            dn[k] = c < C ? dy[c] * w[c] : 0.0f;
            n[k] = c < C ? mp_ln_norm(x[c], m, r) : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < K; k++) {
            if (threadIdx.x + k * THREADS < C) {
                sdn += dn[k];
                sdnn += dn[k] * n[k];
            }
        }
        sdn = block_sum(sdn, tmp, &slot) / C;
        sdnn = block_sum(sdnn, tmp, &slot) / C;
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int c = threadIdx.x + k * THREADS;
            if (c < C) dx[c] += mp_ln_dx(dn[k], n[k], r, sdn, sdnn);
        }
    } else {
        for (int c = threadIdx.x; c < C; c += THREADS) {
            const float dn = dy[c] * w[c];
            sdn += dn;
            sdnn += dn * mp_ln_norm(x[c], m, r);
        }
        sdn = block_sum(sdn, tmp, &slot) / C;
        sdnn = block_sum(sdnn, tmp, &slot) / C;
        for (int c = threadIdx.x; c < C; c += THREADS)
            dx[c] += mp_ln_dx(dy[c] * w[c], mp_ln_norm(x[c], m, r), r, sdn, sdnn);
    }
}

enum { LN_UNROLL = 8 };

// Pass 1: pw, pb (R, C) = Σ over row chunk r of dy·n and of dy; a thread per column, rows in order
// (LN_UNROLL rows' loads issued before their additions).
__global__ void layernorm_dwdb_partial_kernel(float *pw, float *pb, const float *dout, const float *inp,
                                              const float *mean, const float *rstd, int N, int C)
{
    const int c = blockIdx.x * COLS + threadIdx.x, r = blockIdx.y;
    if (c >= C) return;
    const int i1 = (r + 1) * CHUNK_ROWS < N ? (r + 1) * CHUNK_ROWS : N;
    float sw = 0.0f, sb = 0.0f;
    int i = r * CHUNK_ROWS;
    for (; i + LN_UNROLL <= i1; i += LN_UNROLL) {
        float dy[LN_UNROLL], n[LN_UNROLL];
#pragma unroll
        for (int u = 0; u < LN_UNROLL; u++) {
            dy[u] = dout[(size_t)(i + u) * C + c];
            n[u] = mp_ln_norm(inp[(size_t)(i + u) * C + c], mean[i + u], rstd[i + u]);
        }
#pragma unroll
        for (int u = 0; u < LN_UNROLL; u++) {
            sw += dy[u] * n[u];
            sb += dy[u];
        }
    }
    for (; i < i1; i++) {
        const float dy = dout[(size_t)i * C + c];
        sw += dy * mp_ln_norm(inp[(size_t)i * C + c], mean[i], rstd[i]);
        sb += dy;
    }
    pw[(size_t)r * C + c] = sw;
    pb[(size_t)r * C + c] = sb;
}

// Pass 2: dw, db (C) += the chunk partials in chunk order.
__global__ void layernorm_dwdb_finish_kernel(float *dw, float *db, const float *pw, const float *pb, int R, int C)
{
    const int c = blockIdx.x * COLS + threadIdx.x;
    if (c >= C) return;
    float sw = 0.0f, sb = 0.0f;
    for (int r = 0; r < R; r++) {
        sw += pw[(size_t)r * C + c];
        sb += pb[(size_t)r * C + c];
    }
    dw[c] += sw;
    db[c] += sb;
}

void cu_layernorm_backward(cu_ctx_t *ctx, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, int N, int C)
{
    if (C <= 4 * THREADS)
        layernorm_dinp_kernel<4><<<N, THREADS, 0, ctx->compute>>>(dinp, dout, inp, w, mean, rstd, C);
    else if (C <= 8 * THREADS)
        layernorm_dinp_kernel<8><<<N, THREADS, 0, ctx->compute>>>(dinp, dout, inp, w, mean, rstd, C);
    else
        layernorm_dinp_kernel<0><<<N, THREADS, 0, ctx->compute>>>(dinp, dout, inp, w, mean, rstd, C);
    CUDA_CHECK_LAUNCH();
    const int R = (N + CHUNK_ROWS - 1) / CHUNK_ROWS;
    if (R > 65535) KERN_ABORT("layernorm_backward: %d rows exceed the %d the dw/db grid covers", N, 65535 * CHUNK_ROWS);
    float *pw = (float *)cu_ctx_scratch(ctx, 2 * (size_t)R * C * sizeof(float)), *pb = pw + (size_t)R * C;
    const dim3 grid((unsigned)((C + COLS - 1) / COLS), (unsigned)R);
    layernorm_dwdb_partial_kernel<<<grid, COLS, 0, ctx->compute>>>(pw, pb, dout, inp, mean, rstd, N, C);
    CUDA_CHECK_LAUNCH();
    layernorm_dwdb_finish_kernel<<<grid.x, COLS, 0, ctx->compute>>>(dw, db, pw, pb, R, C);
    CUDA_CHECK_LAUNCH();
}
