// The squared norm and a vector add on the GPU.
//
// sumsq: the CPU's chunking (4096 elements per chunk, each chunk in double) with one block per
// chunk. Inside a chunk thread j adds elements j, j+THREADS, ... in order and CUB's block reduction
// (a fixed tree) adds the threads; a tensor's chunk sums are added by one block, thread j taking
// chunks j, j+THREADS, ... in order, then the fixed tree. The result depends on n only, never on
// scheduling, nor on how many tensors share the launches.
//
// cu_sumsq_each runs a batch of up to BATCH tensors in two launches: one block per chunk of any of
// them (the block finds its tensor in the batch's table, passed by value), then one block per
// tensor over its chunks. Every tensor's sum comes out of the same arithmetic as alone.
#include <cub/block/block_reduce.cuh>

#include "cuda_check.h"
#include "kernels_cuda.h"

enum { CHUNK = 4096, THREADS = 256, PER_THREAD = CHUNK / THREADS, BATCH = 64 };

typedef cub::BlockReduce<double, THREADS> Reduce;

// A batch: tensor i is x[i] (n[i] elements), its chunks are the batch's [c0[i], c0[i+1]).
struct SumsqBatch {
    const float *x[BATCH];
    size_t n[BATCH];
    unsigned c0[BATCH + 1];
    int count;
};

__global__ void __launch_bounds__(THREADS) sumsq_chunk_kernel(double *part, const SumsqBatch b)
{
    __shared__ Reduce::TempStorage tmp;
    const unsigned c = blockIdx.x;
    const int lo = cu_batch_owner(b.c0, b.count, c);
    const float *x = b.x[lo];
    const size_t n = b.n[lo], i0 = (size_t)(c - b.c0[lo]) * CHUNK;
    double s = 0.0;
    if (i0 + CHUNK <= n) {
        // a whole chunk: every load issued before the additions, which stay in element order
        float v[PER_THREAD];
#pragma unroll
        for (int k = 0; k < PER_THREAD; k++) v[k] = x[i0 + threadIdx.x + (size_t)k * THREADS];
#pragma unroll
        for (int k = 0; k < PER_THREAD; k++) s += (double)v[k] * v[k];
    } else {
        for (size_t i = i0 + threadIdx.x; i < n; i += THREADS) s += (double)x[i] * x[i];
    }
    s = Reduce(tmp).Sum(s);
    if (threadIdx.x == 0) part[c] = s;
}

// One block per tensor of the batch: thread j adds its chunks j, j+THREADS, ... in order, then the
// fixed tree.
__global__ void __launch_bounds__(THREADS) sumsq_finish_kernel(double *out, const double *part, const SumsqBatch b)
{
    __shared__ Reduce::TempStorage tmp;
    const int t = blockIdx.x;
    double s = 0.0;
    for (unsigned c = b.c0[t] + threadIdx.x; c < b.c0[t + 1]; c += THREADS) s += part[c];
    s = Reduce(tmp).Sum(s);
    if (threadIdx.x == 0) out[t] = s;
}

void cu_sumsq_each(cu_ctx_t *ctx, double *out, const float *const *x, const size_t *n, int count)
{
    if (count <= 0) return;
    // scratch: the sums of every tensor, then the chunk sums of the largest batch
    size_t most = 0;
    for (int i0 = 0; i0 < count; i0 += BATCH) {
        size_t chunks = 0;
        for (int i = i0; i < count && i < i0 + BATCH; i++) chunks += (n[i] + CHUNK - 1) / CHUNK;
        most = chunks > most ? chunks : most;
    }
    if (most > 0xffffffffu) KERN_ABORT("cu_sumsq_each: %zu chunks in one batch", most);
    double *res = (double *)cu_ctx_scratch(ctx, ((size_t)count + most) * sizeof(double)), *part = res + count;
    for (int i0 = 0; i0 < count; i0 += BATCH) {
        SumsqBatch b;
        b.count = count - i0 < BATCH ? count - i0 : BATCH;
        b.c0[0] = 0;
        for (int i = 0; i < b.count; i++) {
            b.x[i] = x[i0 + i], b.n[i] = n[i0 + i];
            b.c0[i + 1] = b.c0[i] + (unsigned)((n[i0 + i] + CHUNK - 1) / CHUNK);
        }
        for (int i = b.count; i < BATCH; i++) b.x[i] = NULL, b.n[i] = 0, b.c0[i + 1] = b.c0[b.count];
        if (b.c0[b.count] > 0) {
            sumsq_chunk_kernel<<<b.c0[b.count], THREADS, 0, ctx->compute>>>(part, b);
            CUDA_CHECK_LAUNCH();
        }
        // the next batch's chunks overwrite part only after this kernel has read it: one stream
        sumsq_finish_kernel<<<(unsigned)b.count, THREADS, 0, ctx->compute>>>(res + i0, part, b);
        CUDA_CHECK_LAUNCH();
    }
    CUDA_CHECK(cudaMemcpyAsync(out, res, (size_t)count * sizeof(double), cudaMemcpyDeviceToHost, ctx->compute));
    CUDA_CHECK(cudaStreamSynchronize(ctx->compute));
}

double cu_sumsq(cu_ctx_t *ctx, const float *x, size_t n)
{
    double host = 0.0;
    cu_sumsq_each(ctx, &host, &x, &n, 1);
    return host;
}

__global__ void vec_add_kernel(float *out, const float *a, const float *b, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = a[i] + b[i];
}

void cu_vec_add(cu_ctx_t *ctx, float *out, const float *a, const float *b, size_t n)
{
    const size_t blocks = (n + THREADS - 1) / THREADS;
    vec_add_kernel<<<(unsigned)(blocks < 65536 ? blocks : 65536), THREADS, 0, ctx->compute>>>(out, a, b, n);
    CUDA_CHECK_LAUNCH();
}
