// Softmax cross-entropy over the vocabulary on the GPU, in place on the logits; per-element math in
// math_softmax.h. Row kernels run one block per row (V is large); their reductions are fixed trees.
#include <math.h>
#include <stdint.h>

#include <cub/block/block_reduce.cuh>
#include <cuda_bf16.h>

#include "cuda_check.h"
#include "kernels_cuda.h"
#include "math_softmax.h"

enum { THREADS = 256 };

typedef cub::BlockReduce<float, THREADS> Reduce;

struct MaxOp {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Reduction over the block, returned to every thread; leaves tmp and slot free for the next call.
template <typename Op> static __device__ float block_all(float v, Op op, Reduce::TempStorage &tmp, float *slot)
{
    v = Reduce(tmp).Reduce(v, op);
    if (threadIdx.x == 0) *slot = v;
    __syncthreads();
    v = *slot;
    __syncthreads();
    return v;
}

static __device__ float block_sum(float v, Reduce::TempStorage &tmp, float *slot)
{
    return block_all(v, cuda::std::plus<float>(), tmp, slot);
}

// ---- the fused forward and the backward: one block per row, float4 where rows are 16-byte aligned ----
//
// The forward reads each row twice and writes it once: a first pass keeps a running (max, Σ exp)
// pair per thread, rescaling the sum when the max grows, so the exact row max and its sum-exp come
// out of one read; the second pass writes mp_softmax_exp(x, max) / sum, element for element the
// CPU's formula with the CPU's max. The sum's rounding differs from the CPU's (as any order but the
// CPU's does): per-thread rescaling, then a fixed tree. Element j goes to thread (j / VEC) mod XT
// and the tree is fixed, so the bits depend on V and VEC only, never on scheduling.

enum { XT = 512, XWARPS = XT / 32, UNROLL = 4 };

// A partial row: its max and Σ exp(x − max) over the elements seen; (-inf, 0) when none.
struct MaxSum {
    float m, s;
};

// Two partials as one: the smaller max's sum rescaled to the larger. A side with no elements (s = 0)
// adds 0, without exp(-inf − -inf) = NaN.
static __device__ MaxSum merge(MaxSum a, MaxSum b)
{
    const float m = fmaxf(a.m, b.m);
    const float sa = a.s == 0.0f ? 0.0f : a.s * mp_softmax_exp(a.m, m);
    const float sb = b.s == 0.0f ? 0.0f : b.s * mp_softmax_exp(b.m, m);
    return MaxSum{m, sa + sb};
}

// VEC consecutive elements into a thread's partial: one rescale per group, then exp per element.
template <int VEC> static __device__ MaxSum absorb(MaxSum p, const float *v)
{
    float gm = v[0];
#pragma unroll
    for (int k = 1; k < VEC; k++) gm = fmaxf(gm, v[k]);
    if (gm > p.m) {
        p.s = p.s == 0.0f ? 0.0f : p.s * mp_softmax_exp(p.m, gm);
        p.m = gm;
    }
#pragma unroll
    for (int k = 0; k < VEC; k++) p.s += mp_softmax_exp(v[k], p.m);
    return p;
}

// The block's partials merged by a fixed tree (butterfly in each warp, then warp 0 over the warps'),
// returned to every thread.
static __device__ MaxSum block_maxsum(MaxSum p)
{
    __shared__ MaxSum warp_part[XWARPS];
    __shared__ MaxSum all;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        MaxSum q;
        q.m = __shfl_xor_sync(0xffffffffu, p.m, o);
        q.s = __shfl_xor_sync(0xffffffffu, p.s, o);
        p = merge(p, q);
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) warp_part[warp] = p;
    __syncthreads();
    if (warp == 0) {
        p = lane < XWARPS ? warp_part[lane] : MaxSum{-INFINITY, 0.0f};
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            MaxSum q;
            q.m = __shfl_xor_sync(0xffffffffu, p.m, o);
            q.s = __shfl_xor_sync(0xffffffffu, p.s, o);
            p = merge(p, q);
        }
        if (lane == 0) all = p;
    }
    __syncthreads();
    return all;
}

// VEC floats of a row at element j (j a multiple of VEC, the row VEC·4-byte aligned).
template <int VEC> struct Vec;
template <> struct Vec<1> {
    static __device__ void load(float *v, const float *x) { v[0] = x[0]; }
    static __device__ void store(float *x, const float *v) { x[0] = v[0]; }
};
template <> struct Vec<4> {
    static __device__ void load(float *v, const float *x)
    {
        const float4 q = *reinterpret_cast<const float4 *>(x);
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    }
    static __device__ void store(float *x, const float *v)
    {
        *reinterpret_cast<float4 *>(x) = make_float4(v[0], v[1], v[2], v[3]);
    }
};

// A thread's partial (max, Σ exp) of a row: its element groups g = threadIdx.x, + XT, ... (VEC
// elements at x + g·VEC, loaded as floats by L: Vec for fp32 rows, Vec16 for bf16), UNROLL groups'
// loads issued before their sums: more bytes in flight per thread.
template <int VEC, class L, class T> static __device__ MaxSum thread_maxsum(const T *x, int groups)
{
    MaxSum p{-INFINITY, 0.0f};
    int g = threadIdx.x;
    for (; g + (UNROLL - 1) * XT < groups; g += UNROLL * XT) {
        float v[UNROLL][VEC];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) L::load(v[u], x + (size_t)(g + u * XT) * VEC);
#pragma unroll
        for (int u = 0; u < UNROLL; u++) p = absorb<VEC>(p, v[u]);
    }
    for (; g < groups; g += XT) {
        float v[VEC];
        L::load(v, x + (size_t)g * VEC);
        p = absorb<VEC>(p, v);
    }
    return p;
}

template <int VEC>
__global__ void __launch_bounds__(XT) crossentropy_forward_kernel(float *losses, float *probs_logits,
                                                                  const int *targets, int V)
{
    float *x = probs_logits + (size_t)blockIdx.x * V;
    const int groups = V / VEC; // VEC divides V (the launcher's choice)
    const float logit_t = x[targets[blockIdx.x]]; // read by every thread before the first barrier, so before any write
    const MaxSum row = block_maxsum(thread_maxsum<VEC, Vec<VEC> >(x, groups));
    const float inv = 1.0f / row.s;
    int g = threadIdx.x;
    // loads of a batch before its stores: each element is read and written by the same thread only
    for (; g + (UNROLL - 1) * XT < groups; g += UNROLL * XT) {
        float v[UNROLL][VEC];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) Vec<VEC>::load(v[u], x + (size_t)(g + u * XT) * VEC);
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
#pragma unroll
            for (int k = 0; k < VEC; k++) v[u][k] = mp_softmax_exp(v[u][k], row.m) * inv;
            Vec<VEC>::store(x + (size_t)(g + u * XT) * VEC, v[u]);
        }
    }
    for (; g < groups; g += XT) {
        float v[VEC];
        Vec<VEC>::load(v, x + (size_t)g * VEC);
#pragma unroll
        for (int k = 0; k < VEC; k++) v[k] = mp_softmax_exp(v[k], row.m) * inv;
        Vec<VEC>::store(x + (size_t)g * VEC, v);
    }
    if (threadIdx.x == 0) losses[blockIdx.x] = mp_xent_loss(row.m, row.s, logit_t);
}

// float4 when every row starts on 16 bytes: the buffer does and V is a multiple of 4.
static int rows_vec4(const void *p, int V) { return V % 4 == 0 && (uintptr_t)p % 16 == 0; }

void cu_crossentropy_forward(cu_ctx_t *ctx, float *losses, float *probs_logits, const int *targets, int N, int V)
{
    if (N <= 0) return;
    if (rows_vec4(probs_logits, V))
        crossentropy_forward_kernel<4><<<N, XT, 0, ctx->compute>>>(losses, probs_logits, targets, V);
    else
        crossentropy_forward_kernel<1><<<N, XT, 0, ctx->compute>>>(losses, probs_logits, targets, V);
    CUDA_CHECK_LAUNCH();
}

// One block per row, element-wise; dlogits may alias probs (each element is read before it is
// written, by the thread that writes it).
template <int VEC>
__global__ void __launch_bounds__(THREADS) crossentropy_backward_kernel(float *dlogits, const float *probs,
                                                                         const int *targets, float dloss, int V,
                                                                         int v0)
{
    const size_t row = (size_t)blockIdx.x * V;
    const float *p = probs + row;
    float *d = dlogits + row;
    const int t = targets[blockIdx.x] - v0, groups = V / VEC;
    int g = threadIdx.x;
    for (; g + (UNROLL - 1) * THREADS < groups; g += UNROLL * THREADS) {
        float v[UNROLL][VEC];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) Vec<VEC>::load(v[u], p + (size_t)(g + u * THREADS) * VEC);
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const int j0 = (g + u * THREADS) * VEC;
#pragma unroll
            for (int k = 0; k < VEC; k++) v[u][k] = mp_xent_dlogit(v[u][k], j0 + k == t, dloss);
            Vec<VEC>::store(d + j0, v[u]);
        }
    }
    for (; g < groups; g += THREADS) {
        float v[VEC];
        const int j0 = g * VEC;
        Vec<VEC>::load(v, p + j0);
#pragma unroll
        for (int k = 0; k < VEC; k++) v[k] = mp_xent_dlogit(v[k], j0 + k == t, dloss);
        Vec<VEC>::store(d + j0, v);
    }
}

void cu_crossentropy_backward(cu_ctx_t *ctx, float *dlogits, const float *probs, const int *targets, float dloss,
                              int N, int V, int v0)
{
    if (N <= 0) return;
    if (rows_vec4(dlogits, V) && rows_vec4(probs, V))
        crossentropy_backward_kernel<4><<<N, THREADS, 0, ctx->compute>>>(dlogits, probs, targets, dloss, V, v0);
    else
        crossentropy_backward_kernel<1><<<N, THREADS, 0, ctx->compute>>>(dlogits, probs, targets, dloss, V, v0);
    CUDA_CHECK_LAUNCH();
}

// ---- bf16 rows for the fused head (head_cuda.cu): the logits stay in bf16 between forward and
// backward, read once by each, at half the bytes of fp32 ----
//
// The forward keeps no probabilities: it writes each row's max and 1/Σexp (stats, 2 floats a row)
// and the backward recomputes p = exp(x − max) / Σ from the same bf16 logit, the formula of the
// fp32 forward's probabilities, then overwrites the logit with its dlogit in bf16 (the next reader
// is the bf16 product, which would round it anyway).

// VEC bf16 of a row at element j (j a multiple of VEC; VEC = 8 needs the row on 16 bytes).
template <int VEC> struct Vec16;
template <> struct Vec16<1> {
    static __device__ void load(float *v, const __nv_bfloat16 *x) { v[0] = __bfloat162float(x[0]); }
    static __device__ void store(__nv_bfloat16 *x, const float *v) { x[0] = __float2bfloat16(v[0]); }
};
template <> struct Vec16<8> {
    union Pack {
        uint4 u;
        __nv_bfloat162 h[4];
    };
    static __device__ void load(float *v, const __nv_bfloat16 *x)
    {
        Pack p;
        p.u = *reinterpret_cast<const uint4 *>(x);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float2 f = __bfloat1622float2(p.h[k]);
            v[2 * k] = f.x, v[2 * k + 1] = f.y;
        }
    }
    static __device__ void store(__nv_bfloat16 *x, const float *v)
    {
        Pack p;
#pragma unroll
        for (int k = 0; k < 4; k++) p.h[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
        *reinterpret_cast<uint4 *>(x) = p.u;
    }
};

template <int VEC>
__global__ void __launch_bounds__(XT) xent16_forward_kernel(float *losses, float *stats,
                                                            const __nv_bfloat16 *logits, const int *targets, int V)
{
    const __nv_bfloat16 *x = logits + (size_t)blockIdx.x * V;
    const int groups = V / VEC;
    const MaxSum row = block_maxsum(thread_maxsum<VEC, Vec16<VEC> >(x, groups));
    if (threadIdx.x == 0) {
        losses[blockIdx.x] = mp_xent_loss(row.m, row.s, __bfloat162float(x[targets[blockIdx.x]]));
        stats[2 * (size_t)blockIdx.x] = row.m;
        stats[2 * (size_t)blockIdx.x + 1] = 1.0f / row.s;
    }
}

template <int VEC>
__global__ void __launch_bounds__(THREADS) xent16_backward_kernel(__nv_bfloat16 *logits, const float *stats,
                                                                   const int *targets, float dloss, int V)
{
    __nv_bfloat16 *x = logits + (size_t)blockIdx.x * V;
    const float m = stats[2 * (size_t)blockIdx.x], inv = stats[2 * (size_t)blockIdx.x + 1];
    const int t = targets[blockIdx.x], groups = V / VEC;
    int g = threadIdx.x;
    // each element read, then written, by one thread: in place is safe
    for (; g + (UNROLL - 1) * THREADS < groups; g += UNROLL * THREADS) {
        float v[UNROLL][VEC];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) Vec16<VEC>::load(v[u], x + (size_t)(g + u * THREADS) * VEC);
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const int j0 = (g + u * THREADS) * VEC;
#pragma unroll
            for (int k = 0; k < VEC; k++) v[u][k] = mp_xent_dlogit(mp_softmax_exp(v[u][k], m) * inv, j0 + k == t, dloss);
            Vec16<VEC>::store(x + j0, v[u]);
        }
    }
    for (; g < groups; g += THREADS) {
        float v[VEC];
        const int j0 = g * VEC;
        Vec16<VEC>::load(v, x + j0);
#pragma unroll
        for (int k = 0; k < VEC; k++) v[k] = mp_xent_dlogit(mp_softmax_exp(v[k], m) * inv, j0 + k == t, dloss);
        Vec16<VEC>::store(x + j0, v);
    }
}

// 16-byte groups of 8 when every row starts on 16 bytes: the buffer does and V is a multiple of 8.
static int rows_vec8(const void *p, int V) { return V % 8 == 0 && (uintptr_t)p % 16 == 0; }

void cu_xent16_forward(cu_ctx_t *ctx, float *losses, float *stats, const __nv_bfloat16 *logits, const int *targets,
                       int N, int V)
{
    if (N <= 0) return;
    if (rows_vec8(logits, V))
        xent16_forward_kernel<8><<<N, XT, 0, ctx->compute>>>(losses, stats, logits, targets, V);
    else
        xent16_forward_kernel<1><<<N, XT, 0, ctx->compute>>>(losses, stats, logits, targets, V);
    CUDA_CHECK_LAUNCH();
}

void cu_xent16_backward(cu_ctx_t *ctx, __nv_bfloat16 *logits, const float *stats, const int *targets, float dloss,
                        int N, int V)
{
    if (N <= 0) return;
    if (rows_vec8(logits, V))
        xent16_backward_kernel<8><<<N, THREADS, 0, ctx->compute>>>(logits, stats, targets, dloss, V);
    else
        xent16_backward_kernel<1><<<N, THREADS, 0, ctx->compute>>>(logits, stats, targets, dloss, V);
    CUDA_CHECK_LAUNCH();
}

// ---- vocab-parallel forward, in three steps around the caller's all-reduces (kernels.h) ----

__global__ void xent_local_max_kernel(float *max, float *tlogit, const float *logits, const int *targets, int Vl,
                                      int v0, int valid)
{
    __shared__ Reduce::TempStorage tmp;
    __shared__ float slot;
    const float *x = logits + (size_t)blockIdx.x * Vl;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < valid; j += THREADS) m = fmaxf(m, x[j]);
    m = block_all(m, MaxOp(), tmp, &slot);
    if (threadIdx.x == 0) {
        const int t = targets[blockIdx.x] - v0;
        max[blockIdx.x] = m;
        tlogit[blockIdx.x] = t >= 0 && t < valid ? x[t] : 0.0f;
    }
}

void cu_xent_local_max(cu_ctx_t *ctx, float *max, float *tlogit, const float *logits, const int *targets, int N,
                       int Vl, int v0, int valid)
{
    xent_local_max_kernel<<<N, THREADS, 0, ctx->compute>>>(max, tlogit, logits, targets, Vl, v0, valid);
    CUDA_CHECK_LAUNCH();
}

__global__ void xent_local_expsum_kernel(float *sum, float *logits, const float *max, int Vl, int valid)
{
    __shared__ Reduce::TempStorage tmp;
    __shared__ float slot;
    float *x = logits + (size_t)blockIdx.x * Vl;
    const float m = max[blockIdx.x];
    float s = 0.0f;
    for (int j = threadIdx.x; j < Vl; j += THREADS) {
        const float e = j < valid ? mp_softmax_exp(x[j], m) : 0.0f; // padding columns: probability 0
        x[j] = e;
        s += e;
    }
    s = block_sum(s, tmp, &slot);
    if (threadIdx.x == 0) sum[blockIdx.x] = s;
}

void cu_xent_local_expsum(cu_ctx_t *ctx, float *sum, float *logits, const float *max, int N, int Vl, int valid)
{
    xent_local_expsum_kernel<<<N, THREADS, 0, ctx->compute>>>(sum, logits, max, Vl, valid);
    CUDA_CHECK_LAUNCH();
}

__global__ void xent_finish_kernel(float *losses, float *probs, const float *max, const float *sum,
                                   const float *tlogit, int Vl)
{
    const int i = blockIdx.x;
    float *x = probs + (size_t)i * Vl;
    const float inv = 1.0f / sum[i];
    for (int j = threadIdx.x; j < Vl; j += THREADS) x[j] *= inv;
    if (threadIdx.x == 0) losses[i] = mp_xent_loss(max[i], sum[i], tlogit[i]);
}

void cu_xent_finish(cu_ctx_t *ctx, float *losses, float *probs, const float *max, const float *sum,
                    const float *tlogit, int N, int Vl)
{
    xent_finish_kernel<<<N, THREADS, 0, ctx->compute>>>(losses, probs, max, sum, tlogit, Vl);
    CUDA_CHECK_LAUNCH();
}
