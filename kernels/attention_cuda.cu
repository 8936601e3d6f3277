// Causal attention on the GPU, multi-head (GPT-2) and grouped-query (Llama): one code path, as on
// the CPU (attention_cpu.c). Legend in kernels.h. In bf16, multi-head shapes the fused kernels take
// go to attention_flash_cuda.cu instead (cu_attention_flash_fits); grouped-query attention with
// KVH < NH always runs here.
//
// The row is [q (NH·hs) | k (KVH·hs) | v (KVH·hs)], ld = C + 2·KVH·hs floats (KVH = NH: 3C), and
// query head h reads kv head h / G, G = NH / KVH. Products are strided-batched over heads of one
// sequence, reading q, k, v in place (nothing is repacked): for the query heads h = g·G + j of one
// position j in their groups (g = 0..KVH-1), q and the (T,T) blocks of att advance by G heads and
// k, v by one, so one batched call of KVH items covers them; G calls per sequence and product.
// KVH = NH is G = 1: one call per sequence with head strides hs and T·T, the multi-head calls
// exactly. dk and dv sum over a group's query heads: the call for j = 0 assigns (beta 0), those for
// j = 1..G-1 add in that order (beta 1), so the sum runs in head order and does not vary between
// runs. One batched call per sequence b (the sequence stride, T·ld, is not a multiple of the head
// stride). Scores are computed for the full (T,T) block; the softmax kernels zero the masked upper
// triangle, so the products that follow read exact zeros there.
//
// MP_ATT_EMU: validation/cuda/gqa_emu_test.cc includes this file into a host program with its own
// cu_gemm, launch loop and context, and runs the host code and the softmax kernels on the CPU.
#include <math.h>

#ifndef MP_ATT_EMU
#include "cuda_check.h"
#include "kernels_cuda.h"
// A kernel launch on the compute stream (the emulation runs the kernel on CPU threads instead).
#define ATT_LAUNCH(kernel, grid, block, ctx, ...)                     \
    do {                                                              \
        kernel<<<(grid), (block), 0, (ctx)->compute>>>(__VA_ARGS__); \
        CUDA_CHECK_LAUNCH();                                          \
    } while (0)
#endif
#include "kern_check.h"
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

// NH a positive multiple of KVH, or the job stops naming the shape (C % NH is the caller's, as for
// the multi-head kernels).
static void gqa_check(const char *who, int C, int NH, int KVH)
{
    if (KVH <= 0 || NH <= 0 || NH % KVH)
        KERN_ABORT("%s: %d query heads (C = %d) in groups over %d key/value heads: the query heads must be a "
                   "positive multiple of the key/value heads", who, NH, C, KVH);
}

void cu_attention_gqa_forward(cu_ctx_t *ctx, float *out, float *att, const float *qkv, int B, int T, int C, int NH,
                              int KVH)
{
    gqa_check("attention_gqa_forward", C, NH, KVH);
    if (KVH == NH && cu_attention_flash_fits(ctx, B, T, C, NH)) {
        cu_attention_flash_forward(ctx, out, att, qkv, B, T, C, NH);
        return;
    }
    const int hs = C / NH, G = NH / KVH, ld = C + 2 * KVH * hs;
    const long long tt = (long long)T * T;
    const float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++) // scores S = scale · q kᵀ, per head
        for (int j = 0; j < G; j++) {
            const float *q = qkv + (size_t)b * T * ld + (size_t)j * hs, *k = qkv + (size_t)b * T * ld + C;
            cu_gemm(ctx, 0, 1, T, T, hs, scale, q, ld, (long long)G * hs, k, ld, hs, 0.0f,
                    att + (size_t)b * NH * tt + (size_t)j * tt, T, G * tt, KVH);
        }
    const int rows = B * NH * T;
    ATT_LAUNCH(softmax_causal_kernel, row_blocks(rows), WARPS * 32, ctx, att, rows, T);
    for (int b = 0; b < B; b++) // out = P v, heads side by side in each C-wide row
        for (int j = 0; j < G; j++) {
            const float *v = qkv + (size_t)b * T * ld + C + (size_t)KVH * hs;
            cu_gemm(ctx, 0, 0, T, hs, T, 1.0f, att + (size_t)b * NH * tt + (size_t)j * tt, T, G * tt, v, ld, hs, 0.0f,
                    out + (size_t)b * T * C + (size_t)j * hs, C, (long long)G * hs, KVH);
        }
}

void cu_attention_gqa_backward(cu_ctx_t *ctx, float *dqkv, float *datt, const float *dout, const float *qkv,
                               const float *att, int B, int T, int C, int NH, int KVH)
{
    gqa_check("attention_gqa_backward", C, NH, KVH);
    if (KVH == NH && cu_attention_flash_fits(ctx, B, T, C, NH)) {
        cu_attention_flash_backward(ctx, dqkv, datt, dout, qkv, att, B, T, C, NH);
        return;
    }
    const int hs = C / NH, G = NH / KVH, ld = C + 2 * KVH * hs;
    const long long tt = (long long)T * T, gs = (long long)G * hs;
    const float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++) {
        const float *v = qkv + (size_t)b * T * ld + C + (size_t)KVH * hs;
        float *dv = dqkv + (size_t)b * T * ld + C + (size_t)KVH * hs;
        for (int j = 0; j < G; j++) {
            const float *dO = dout + (size_t)b * T * C + (size_t)j * hs;
            const float *P = att + (size_t)b * NH * tt + (size_t)j * tt;
            float *dP = datt + (size_t)b * NH * tt + (size_t)j * tt;
            cu_gemm(ctx, 0, 1, T, T, hs, 1.0f, dO, C, gs, v, ld, hs, 0.0f, dP, T, G * tt, KVH); // dP = dO vᵀ
            cu_gemm(ctx, 1, 0, T, hs, T, 1.0f, P, T, G * tt, dO, C, gs, j ? 1.0f : 0.0f, dv, ld, hs, KVH); // dv (+)= Pᵀ dO
        }
    }
    const int rows = B * NH * T;
    ATT_LAUNCH(softmax_causal_backward_kernel, row_blocks(rows), WARPS * 32, ctx, datt, att, rows, T, scale);
    for (int b = 0; b < B; b++) {
        const float *k = qkv + (size_t)b * T * ld + C;
        float *dk = dqkv + (size_t)b * T * ld + C;
        for (int j = 0; j < G; j++) {
            const float *q = qkv + (size_t)b * T * ld + (size_t)j * hs;
            const float *dS = datt + (size_t)b * NH * tt + (size_t)j * tt;
            float *dq = dqkv + (size_t)b * T * ld + (size_t)j * hs;
            cu_gemm(ctx, 0, 0, T, hs, T, 1.0f, dS, T, G * tt, k, ld, hs, 0.0f, dq, ld, gs, KVH); // dq = dS k
            cu_gemm(ctx, 1, 0, T, hs, T, 1.0f, dS, T, G * tt, q, ld, gs, j ? 1.0f : 0.0f, dk, ld, hs, KVH); // dk (+)= dSᵀ q
        }
    }
}

void cu_attention_forward(cu_ctx_t *ctx, float *out, float *att, const float *qkv, int B, int T, int C, int NH)
{
    cu_attention_gqa_forward(ctx, out, att, qkv, B, T, C, NH, NH);
}

void cu_attention_backward(cu_ctx_t *ctx, float *dqkv, float *datt, const float *dout, const float *qkv,
                           const float *att, int B, int T, int C, int NH)
{
    cu_attention_gqa_backward(ctx, dqkv, datt, dout, qkv, att, B, T, C, NH, NH);
}
