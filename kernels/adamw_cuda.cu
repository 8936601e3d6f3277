// AdamW on the GPU; per-element math in math_adamw.h, the same update the CPU runs.
#include <math.h>
#include <stdint.h>

#include "cuda_check.h"
#include "kernels_cuda.h"
#include "math_adamw.h"

enum { THREADS = 256 };

__global__ void adamw_kernel(float *param, const float *grad, float *m, float *v, size_t n, float lr, float beta1,
                             float beta2, float eps, float wd, float bc1, float bc2, float grad_scale)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float p = param[i], mm = m[i], vv = v[i]; // registers, then one store each
        mp_adamw(&p, &mm, &vv, grad[i] * grad_scale, lr, beta1, beta2, eps, wd, bc1, bc2);
        param[i] = p;
        m[i] = mm;
        v[i] = vv;
    }
}

void cu_adamw_update(cu_ctx_t *ctx, float *param, const float *grad, float *m, float *v, size_t n, float lr,
                     float beta1, float beta2, float eps, float wd, int t, float grad_scale)
{
    if (n == 0) return; // an empty tensor: a launch of no blocks is an invalid argument
    // Bias corrections on the host with the CPU's expression: both backends see the same constants.
    const float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
    const size_t b = (n + THREADS - 1) / THREADS;
    adamw_kernel<<<(unsigned)(b < 65536 ? b : 65536), THREADS, 0, ctx->compute>>>(param, grad, m, v, n, lr, beta1,
                                                                                   beta2, eps, wd, bc1, bc2,
                                                                                   grad_scale);
    CUDA_CHECK_LAUNCH();
}

// ---- many tensors per launch ----
//
// GPT-2 has 148 parameter tensors, most of them a few thousand floats: one launch each costs more
// in launch gaps and half-empty waves than the update itself. A batch of up to BATCH tensors goes
// in one launch, its table passed by value; each tensor owns a run of blocks and a block finds its
// tensor by binary search, as cu_sumsq_each does. Each element runs mp_adamw on the same operands as
// adamw_kernel, so the bits are cu_adamw_update's whatever the grouping or vector width.

enum { BATCH = 64, VEC_PER_THREAD = 2, TILE = THREADS * 4 * VEC_PER_THREAD };

// Tensor i: elements [off[i], off[i] + n[i]) of each buffer, blocks [b0[i], b0[i+1]) of the launch.
// With vec[i] the first head[i] elements run scalar, then float4s (16-byte aligned in all four
// buffers), then a scalar tail of under 4; without it every element runs scalar.
struct AdamwBatch {
    size_t off[BATCH], n[BATCH];
    float wd[BATCH];
    unsigned b0[BATCH + 1];
    unsigned char head[BATCH], vec[BATCH];
    int count;
};

struct AdamwConst {
    float lr, beta1, beta2, eps, bc1, bc2, grad_scale;
};

__device__ __forceinline__ void adamw_scalar(float *p, const float *g, float *m, float *v, size_t i, float wd,
                                             const AdamwConst &k)
{
    float pp = p[i], mm = m[i], vv = v[i];
    mp_adamw(&pp, &mm, &vv, g[i] * k.grad_scale, k.lr, k.beta1, k.beta2, k.eps, wd, k.bc1, k.bc2);
    p[i] = pp;
    m[i] = mm;
    v[i] = vv;
}

__global__ void __launch_bounds__(THREADS) adamw_each_kernel(float *param, const float *grad, float *m, float *v,
                                                             const AdamwBatch b, const AdamwConst k)
{
    const unsigned blk = blockIdx.x;
    const int lo = cu_batch_owner(b.b0, b.count, blk);
    const size_t n = b.n[lo], j = blk - b.b0[lo];
    const float wd = b.wd[lo];
    float *p = param + b.off[lo], *mm = m + b.off[lo], *vv = v + b.off[lo];
    const float *g = grad + b.off[lo];
    if (!b.vec[lo]) {
        const size_t i1 = (j + 1) * TILE < n ? (j + 1) * TILE : n;
        for (size_t i = j * TILE + threadIdx.x; i < i1; i += THREADS) adamw_scalar(p, g, mm, vv, i, wd, k);
        return;
    }
    const size_t h = b.head[lo], nv = (n - h) / 4; // float4s after the head
    if (j == 0 && threadIdx.x < h) adamw_scalar(p, g, mm, vv, threadIdx.x, wd, k);
    if (blk + 1 == b.b0[lo + 1]) { // the tensor's last block: the tail past the float4s
        const size_t i = h + 4 * nv + threadIdx.x;
        if (i < n) adamw_scalar(p, g, mm, vv, i, wd, k);
    }
    float4 *p4 = reinterpret_cast<float4 *>(p + h), *m4 = reinterpret_cast<float4 *>(mm + h);
    float4 *v4 = reinterpret_cast<float4 *>(vv + h);
    const float4 *g4 = reinterpret_cast<const float4 *>(g + h);
    const size_t q0 = j * (TILE / 4) + threadIdx.x;
    // every load of the thread issued before the arithmetic: 2 × 4 float4s in flight
    float4 rp[VEC_PER_THREAD], rg[VEC_PER_THREAD], rm[VEC_PER_THREAD], rv[VEC_PER_THREAD];
#pragma unroll
    for (int u = 0; u < VEC_PER_THREAD; u++) {
        const size_t q = q0 + (size_t)u * THREADS;
        if (q < nv) rp[u] = p4[q], rg[u] = g4[q], rm[u] = m4[q], rv[u] = v4[q];
    }
#pragma unroll
    for (int u = 0; u < VEC_PER_THREAD; u++) {
        const size_t q = q0 + (size_t)u * THREADS;
        if (q >= nv) continue;
        float *P = &rp[u].x, *M = &rm[u].x, *V = &rv[u].x;
        const float *G = &rg[u].x;
#pragma unroll
        for (int c = 0; c < 4; c++)
            mp_adamw(&P[c], &M[c], &V[c], G[c] * k.grad_scale, k.lr, k.beta1, k.beta2, k.eps, wd, k.bc1, k.bc2);
        p4[q] = rp[u];
        m4[q] = rm[u];
        v4[q] = rv[u];
    }
}

void cu_adamw_each(cu_ctx_t *ctx, float *param, const float *grad, float *m, float *v, const size_t *off,
                   const size_t *n, const float *wd, int count, float lr, float beta1, float beta2, float eps, int t,
                   float grad_scale)
{
    // bias corrections as cu_adamw_update computes them
    const AdamwConst k = {lr, beta1, beta2, eps, 1.0f - powf(beta1, (float)t), 1.0f - powf(beta2, (float)t),
                          grad_scale};
    for (int i0 = 0; i0 < count; i0 += BATCH) {
        AdamwBatch b;
        b.count = count - i0 < BATCH ? count - i0 : BATCH;
        b.b0[0] = 0;
        for (int i = 0; i < b.count; i++) {
            const size_t o = off[i0 + i], len = n[i0 + i];
            // elements before the first 16-byte boundary: the same count in all four buffers, or no float4s
            const size_t mis = ((uintptr_t)(param + o) / 4) % 4;
            const int same = ((uintptr_t)(grad + o) / 4) % 4 == mis && ((uintptr_t)(m + o) / 4) % 4 == mis &&
                             ((uintptr_t)(v + o) / 4) % 4 == mis;
            const size_t head = (4 - mis) % 4 < len ? (4 - mis) % 4 : len;
            b.off[i] = o, b.n[i] = len, b.wd[i] = wd[i0 + i];
            b.vec[i] = (unsigned char)(same && (uintptr_t)(param + o) % 4 == 0), b.head[i] = (unsigned char)head;
            const size_t body = b.vec[i] ? len - head : len, blocks = (body + TILE - 1) / TILE;
            // a vector tensor shorter than its head still needs block 0
            const size_t own = len > 0 && blocks == 0 ? 1 : blocks;
            if ((size_t)b.b0[i] + own > 0x7fffffffu) KERN_ABORT("cu_adamw_each: %zu floats in one batch", len);
            b.b0[i + 1] = b.b0[i] + (unsigned)own;
        }
        for (int i = b.count; i < BATCH; i++)
            b.off[i] = 0, b.n[i] = 0, b.wd[i] = 0.0f, b.vec[i] = 0, b.head[i] = 0, b.b0[i + 1] = b.b0[b.count];
        if (b.b0[b.count] > 0) {
            adamw_each_kernel<<<b.b0[b.count], THREADS, 0, ctx->compute>>>(param, grad, m, v, b, k);
            CUDA_CHECK_LAUNCH();
        }
    }
}
