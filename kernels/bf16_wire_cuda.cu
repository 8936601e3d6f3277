// The bf16 wire of data-parallel gradient buckets (parallel.grad_reduce_dtype = bf16): the fp32
// gradients rounded into bf16 before NCCL sums them as bf16, the sum widened back after, both on the
// collective stream the bucket runs on. Rounding is __float2bfloat16's (nearest, ties to even), the
// rounding of the host's wire (src/core/bf16.h), so the two differ only in how the library adds.
#include "cuda_check.h"
#include "kernels_cuda.h"

__global__ void wire_round_kernel(__nv_bfloat16 *__restrict__ dst, const float *__restrict__ src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16(src[i]);
}

__global__ void wire_widen_kernel(float *__restrict__ dst, const __nv_bfloat16 *__restrict__ src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}

static unsigned wire_blocks(size_t n)
{
    const size_t b = (n + 255) / 256;
    return (unsigned)(b < 65536 ? (b ? b : 1) : 65536);
}

void cu_wire_round(cudaStream_t stream, void *wire, const float *src, size_t n)
{
    if (n == 0) return;
    wire_round_kernel<<<wire_blocks(n), 256, 0, stream>>>((__nv_bfloat16 *)wire, src, n);
    CUDA_CHECK_LAUNCH();
}

void cu_wire_widen(cudaStream_t stream, float *dst, const void *wire, size_t n)
{
    if (n == 0) return;
    wire_widen_kernel<<<wire_blocks(n), 256, 0, stream>>>(dst, (const __nv_bfloat16 *)wire, n);
    CUDA_CHECK_LAUNCH();
}
