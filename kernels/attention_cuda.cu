// Causal multi-head attention on the GPU. Legend in kernels.h. In bf16, shapes the fused kernels
// take go to attention_flash_cuda.cu instead (cu_attention_flash_fits).
//
// Products are strided-batched over the NH heads of one sequence: q, k, v of head h start h·hs
// floats into each (3C)-wide qkv row, so the head stride is hs and the leading dimension 3C — nothing
// is repacked. One batched call per sequence b (the sequence stride, T·3C, is not a multiple of the
// head stride). Scores are computed for the full (T,T) block; the softmax kernels zero the masked
// upper triangle, so the products that follow read exact zeros there.
#include <math.h>

#include "cuda_check.h"
#include "kernels_cuda.h"
#include "math_softmax.h"

enum { WARPS = 8 };

// Fixed butterfly order: every lane ends with the same, reproducible value.
static __device__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

static __device__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// One warp per row (b, h, i) of att, in place: softmax over keys 0..i, zeros for keys i+1..T-1.
__global__ void softmax_causal_kernel(float *att, int rows, int T)
{
    const int row = blockIdx.x * WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    const int i = row % T;
    float *a = att + (size_t)row * T;
    float max = -INFINITY;
    for (int j = lane; j <= i; j += 32) max = fmaxf(max, a[j]);
    max = warp_max(max);
    float sum = 0.0f;
    for (int j = lane; j <= i; j += 32) {
        const float e = mp_softmax_exp(a[j], max);
        a[j] = e;
        sum += e;
    }
    const float inv = 1.0f / warp_sum(sum);
    for (int j = lane; j < T; j += 32) a[j] = j <= i ? a[j] * inv : 0.0f;
}

// One warp per row, in place on datt: dS = scale · P ∘ (dP − Σ P dP) for keys 0..i, 0 above.
__global__ void softmax_causal_backward_kernel(float *datt, const float *att, int rows, int T, float scale)
{
    const int row = blockIdx.x * WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    const int i = row % T;
    float *dp = datt + (size_t)row * T;
    const float *p = att + (size_t)row * T;
    float dot = 0.0f;
    for (int j = lane; j <= i; j += 32) dot += p[j] * dp[j];
    dot = warp_sum(dot);
    for (int j = lane; j < T; j += 32) dp[j] = j <= i ? scale * mp_softmax_dx(p[j], dp[j], dot) : 0.0f;
}

static unsigned row_blocks(int rows) { return (unsigned)((rows + WARPS - 1) / WARPS); }

void cu_attention_forward(cu_ctx_t *ctx, float *out, float *att, const float *qkv, int B, int T, int C, int NH)
{
    if (cu_attention_flash_fits(ctx, B, T, C, NH)) {
        cu_attention_flash_forward(ctx, out, att, qkv, B, T, C, NH);
        return;
    }
    const int hs = C / NH, ld = 3 * C;
    const long long tt = (long long)T * T;
    const float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++) { // scores S = scale · q kᵀ, per head
        const float *q = qkv + (size_t)b * T * ld, *k = q + C;
        cu_gemm(ctx, 0, 1, T, T, hs, scale, q, ld, hs, k, ld, hs, 0.0f, att + (size_t)b * NH * tt, T, tt, NH);
    }
    const int rows = B * NH * T;
    softmax_causal_kernel<<<row_blocks(rows), WARPS * 32, 0, ctx->compute>>>(att, rows, T);
    CUDA_CHECK_LAUNCH();
    for (int b = 0; b < B; b++) { // out = P v, heads side by side in each C-wide row
        const float *v = qkv + (size_t)b * T * ld + 2 * C;
        cu_gemm(ctx, 0, 0, T, hs, T, 1.0f, att + (size_t)b * NH * tt, T, tt, v, ld, hs, 0.0f, out + (size_t)b * T * C,
                C, hs, NH);
    }
}

void cu_attention_backward(cu_ctx_t *ctx, float *dqkv, float *datt, const float *dout, const float *qkv,
                           const float *att, int B, int T, int C, int NH)
{
    if (cu_attention_flash_fits(ctx, B, T, C, NH)) {
        cu_attention_flash_backward(ctx, dqkv, datt, dout, qkv, att, B, T, C, NH);
        return;
    }
    const int hs = C / NH, ld = 3 * C;
    const long long tt = (long long)T * T;
    const float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++) {
        const float *v = qkv + (size_t)b * T * ld + 2 * C, *dO = dout + (size_t)b * T * C;
        const float *P = att + (size_t)b * NH * tt;
        float *dP = datt + (size_t)b * NH * tt, *dv = dqkv + (size_t)b * T * ld + 2 * C;
        cu_gemm(ctx, 0, 1, T, T, hs, 1.0f, dO, C, hs, v, ld, hs, 0.0f, dP, T, tt, NH); // dP = dO vᵀ
        cu_gemm(ctx, 1, 0, T, hs, T, 1.0f, P, T, tt, dO, C, hs, 0.0f, dv, ld, hs, NH); // dv = Pᵀ dO
    }
    const int rows = B * NH * T;
    softmax_causal_backward_kernel<<<row_blocks(rows), WARPS * 32, 0, ctx->compute>>>(datt, att, rows, T, scale);
    CUDA_CHECK_LAUNCH();
    for (int b = 0; b < B; b++) {
        const float *q = qkv + (size_t)b * T * ld, *k = q + C, *dS = datt + (size_t)b * NH * tt;
        float *dq = dqkv + (size_t)b * T * ld, *dk = dq + C;
        cu_gemm(ctx, 0, 0, T, hs, T, 1.0f, dS, T, tt, k, ld, hs, 0.0f, dq, ld, hs, NH); // dq = dS k
        cu_gemm(ctx, 1, 0, T, hs, T, 1.0f, dS, T, tt, q, ld, hs, 0.0f, dk, ld, hs, NH); // dk = dSᵀ q
    }
}
