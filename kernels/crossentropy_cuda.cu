// Softmax cross-entropy over the vocabulary on the GPU, in place on the logits; per-element math in
// math_softmax.h. Row kernels run one block per row (V is large): CUB's fixed-tree block reductions.
#include <math.h>

#include <cub/block/block_reduce.cuh>

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

__global__ void crossentropy_forward_kernel(float *losses, float *probs_logits, const int *targets, int V)
{
    __shared__ Reduce::TempStorage tmp;
    __shared__ float slot;
    float *x = probs_logits + (size_t)blockIdx.x * V;
    const float logit_t = x[targets[blockIdx.x]]; // read by every thread before the first barrier, so before any write
    float max = -INFINITY;
    for (int j = threadIdx.x; j < V; j += THREADS) max = fmaxf(max, x[j]);
    max = block_all(max, MaxOp(), tmp, &slot);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < V; j += THREADS) {
        x[j] = mp_softmax_exp(x[j], max);
        sum += x[j];
    }
    sum = block_sum(sum, tmp, &slot);
    const float inv = 1.0f / sum;
    for (int j = threadIdx.x; j < V; j += THREADS) x[j] *= inv;
    if (threadIdx.x == 0) losses[blockIdx.x] = mp_xent_loss(max, sum, logit_t);
}

void cu_crossentropy_forward(cu_ctx_t *ctx, float *losses, float *probs_logits, const int *targets, int N, int V)
{
    crossentropy_forward_kernel<<<N, THREADS, 0, ctx->compute>>>(losses, probs_logits, targets, V);
    CUDA_CHECK_LAUNCH();
}

// Element-wise over (N,V); dlogits may alias probs.
__global__ void crossentropy_backward_kernel(float *dlogits, const float *probs, const int *targets, float dloss,
                                             int V, int v0, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const int j = (int)(i % V), t = targets[i / V] - v0;
        dlogits[i] = mp_xent_dlogit(probs[i], j == t, dloss);
    }
}

void cu_crossentropy_backward(cu_ctx_t *ctx, float *dlogits, const float *probs, const int *targets, float dloss,
                              int N, int V, int v0)
{
    const size_t n = (size_t)N * V, blocks = (n + THREADS - 1) / THREADS;
    crossentropy_backward_kernel<<<(unsigned)(blocks < 65536 ? blocks : 65536), THREADS, 0, ctx->compute>>>(
        dlogits, probs, targets, dloss, V, v0, n);
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
