// The squared norm and a vector add on the GPU.
//
// sumsq: the CPU's chunking (4096 elements per chunk, each chunk in double, chunks added in order)
// with one block per chunk. Inside a chunk CUB's block reduction is a fixed tree, and the chunk sums
// are added by one block in a fixed tree too: the result depends on n only, never on scheduling.
#include <cub/block/block_reduce.cuh>

#include "cuda_check.h"
#include "kernels_cuda.h"

enum { CHUNK = 4096, THREADS = 256 };

typedef cub::BlockReduce<double, THREADS> Reduce;

__global__ void sumsq_chunk_kernel(double *part, const float *x, size_t n)
{
    __shared__ Reduce::TempStorage tmp;
    const size_t i0 = (size_t)blockIdx.x * CHUNK, i1 = i0 + CHUNK < n ? i0 + CHUNK : n;
    double s = 0.0;
    for (size_t i = i0 + threadIdx.x; i < i1; i += THREADS) s += (double)x[i] * x[i];
    s = Reduce(tmp).Sum(s);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

// One block: thread j adds chunks j, j+THREADS, ... in order, then the fixed tree.
__global__ void sumsq_finish_kernel(double *out, const double *part, size_t chunks)
{
    __shared__ Reduce::TempStorage tmp;
    double s = 0.0;
    for (size_t c = threadIdx.x; c < chunks; c += THREADS) s += part[c];
    s = Reduce(tmp).Sum(s);
    if (threadIdx.x == 0) *out = s;
}

void cu_sumsq_async(cu_ctx_t *ctx, double *out_dev, const float *x, size_t n)
{
    const size_t chunks = (n + CHUNK - 1) / CHUNK;
    double *part = (double *)cu_ctx_scratch(ctx, (chunks > 0 ? chunks : 1) * sizeof(double));
    if (chunks > 0) {
        sumsq_chunk_kernel<<<(unsigned)chunks, THREADS, 0, ctx->compute>>>(part, x, n);
        CUDA_CHECK_LAUNCH();
    }
    sumsq_finish_kernel<<<1, THREADS, 0, ctx->compute>>>(out_dev, part, chunks);
    CUDA_CHECK_LAUNCH();
}

double cu_sumsq(cu_ctx_t *ctx, const float *x, size_t n)
{
    // The result rides at the end of the scratch the chunk sums use (grown here if needed).
    const size_t chunks = (n + CHUNK - 1) / CHUNK, slot = chunks > 0 ? chunks : 1;
    double *res = (double *)cu_ctx_scratch(ctx, (slot + 1) * sizeof(double)) + slot, host = 0.0;
    cu_sumsq_async(ctx, res, x, n);
    CUDA_CHECK(cudaMemcpyAsync(&host, res, sizeof host, cudaMemcpyDeviceToHost, ctx->compute));
    CUDA_CHECK(cudaStreamSynchronize(ctx->compute));
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
