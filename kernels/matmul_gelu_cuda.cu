// The MLP's GELU beside its products on the GPU: the same contract as kernels/matmul_gelu_cpu.c
// (the forward saves GELU's derivative, the backward multiplies by it), but not fused: a cuBLAS
// product, then one element-wise kernel over its output (in bf16 that kernel also adds the bias).
// The per-element math is math_gelu.h's.
//
// With the bf16 handoff (cu_handoff_bf16: bf16, our rounding, MP_BF16_HANDOFF=bf16) a product whose
// result only feeds the element-wise pass writes it in bf16, into scratch: the forward's
// pre-activation (N,OC), the backward's input gradient dout · w (N,C) before GELU's derivative.
// Written once and read once at 2 bytes an element instead of 4, the pair moves 12 bytes an element
// where the fp32 handoff moves 16. The hidden activation out is kept in bf16 too (kernels_cuda.h:
// cu_mlp_proj_forward, the backward here and cu_mlp_proj_backward_weight read it as it is), the very
// values the products rounded it to before, so no pass rounds it again, forward or backward. dgelu
// and dinp stay fp32, pre + bias is summed in fp32, and the backward's dw and dbias keep their
// bits. The values differ from the fp32 handoff's by one more bf16 rounding of pre and of dout · w
// (2^-9 relative). Every other mode (fp32, MP_BF16_GEMM=cublas, MP_BF16_HANDOFF=fp32) runs the
// code it ran before the handoff existed.
#include <stdint.h>

#include "cuda_check.h"
#include "kernels_cuda.h"
#include "math_gelu.h"

enum { THREADS = 256 };

static unsigned grid_for(size_t n)
{
    const size_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < 65536 ? b : 65536);
}

// In place on pre: out = gelu(pre), pre := gelu'(pre). Each element is read, then written, by one thread.
__global__ void gelu_pair_kernel(float *out, float *pre, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float d;
        out[i] = mp_gelu_pair(pre[i], &d);
        pre[i] = d;
    }
}

// The same with the bias added first (pre + bias, then GELU), four columns a thread: OC % 4 == 0 and
// all three pointers on 16 bytes. n4 counts float4s.
__global__ void bias_gelu_pair4_kernel(float4 *out, float4 *pre, const float4 *bias, size_t n4, int OC4)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < n4; j += (size_t)gridDim.x * blockDim.x) {
        const float4 p = pre[j], b = bias[j % (size_t)OC4];
        float4 o, d;
        o.x = mp_gelu_pair(p.x + b.x, &d.x);
        o.y = mp_gelu_pair(p.y + b.y, &d.y);
        o.z = mp_gelu_pair(p.z + b.z, &d.z);
        o.w = mp_gelu_pair(p.w + b.w, &d.w);
        out[j] = o;
        pre[j] = d;
    }
}

__global__ void bias_gelu_pair_kernel(float *out, float *pre, const float *bias, size_t n, int OC)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float d;
        out[i] = mp_gelu_pair(pre[i] + bias[i % (size_t)OC], &d);
        pre[i] = d;
    }
}

// The bf16 handoff's GELU: pre (bf16, the product's epilogue rounded it) + bias in fp32, then
// out = gelu, dgelu = gelu'. Four columns a thread: the 8-byte load of pre and the 16-byte loads and
// stores of bias, out and dgelu keep every warp access contiguous (eight a thread, for 16-byte loads
// of pre, would give each thread 32 bytes of each output and spread a warp's stores over twice the
// span). OC % 4 == 0, out, dgelu and bias on 16 bytes, pre on 8 (it is scratch: 256). n4 counts
// groups of four. bias NULL adds 0.
__global__ void pre16_gelu_pair4_kernel(cu_bf16x4 *__restrict__ out, float4 *__restrict__ dgelu,
                                        const cu_bf16x4 *__restrict__ pre, const float4 *__restrict__ bias, size_t n4,
                                        int OC4)
{
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < n4; j += (size_t)gridDim.x * blockDim.x) {
        const cu_bf16x4 p = pre[j];
        const float4 b = bias ? bias[j % (size_t)OC4] : zero;
        float4 o, d;
        o.x = mp_gelu_pair(__bfloat162float(p.v[0]) + b.x, &d.x);
        o.y = mp_gelu_pair(__bfloat162float(p.v[1]) + b.y, &d.y);
        o.z = mp_gelu_pair(__bfloat162float(p.v[2]) + b.z, &d.z);
        o.w = mp_gelu_pair(__bfloat162float(p.v[3]) + b.w, &d.w);
        out[j] = cu_bf16x4_round(o); // the hidden activation kept in bf16 (kernels_cuda.h)
        dgelu[j] = d;
    }
}

// The same an element a thread: any OC, any alignment.
__global__ void pre16_gelu_pair_kernel(__nv_bfloat16 *__restrict__ out, float *__restrict__ dgelu,
                                       const __nv_bfloat16 *__restrict__ pre, const float *__restrict__ bias, size_t n,
                                       int OC)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float d;
        out[i] = __float2bfloat16(mp_gelu_pair(__bfloat162float(pre[i]) + (bias ? bias[i % (size_t)OC] : 0.0f), &d));
        dgelu[i] = d;
    }
}

// The bf16 handoff's forward: inp and w rounded as cu_gemm would round them, and the product (beta
// = 0) written as bf16 into scratch, not as fp32 into dgelu; the kernel above adds the bias. One
// scratch request for the three pieces (inp16 | w16 | pre16): a second could free the first. Without
// a bias the same, adding 0: there is no fp32 pre to save either way.
static void matmul_gelu_forward_bf16(cu_ctx_t *ctx, float *out, float *dgelu, const float *inp, const float *w,
                                     const float *bias, int N, int C, int OC)
{
    const size_t n_inp = (size_t)N * C, n_w = (size_t)OC * C, n = (size_t)N * OC;
    if (n == 0) return;
    const size_t at_w = cu_bf16_bytes(n_inp), at_pre = at_w + cu_bf16_bytes(n_w);
    char *s = (char *)cu_ctx_scratch(ctx, at_pre + cu_bf16_bytes(n));
    __nv_bfloat16 *inp16 = (__nv_bfloat16 *)s, *w16 = (__nv_bfloat16 *)(s + at_w);
    __nv_bfloat16 *pre16 = (__nv_bfloat16 *)(s + at_pre);
    cu_bf16_round(ctx, inp16, inp, n_inp);
    cu_bf16_round(ctx, w16, w, n_w);
    cu_gemm_bf16_out(ctx, 0, 1, N, OC, C, 1.0f, inp16, C, w16, C, pre16, OC); // inp · wᵀ
    if (OC % 4 == 0 && ((uintptr_t)out | (uintptr_t)dgelu | (uintptr_t)bias) % 16 == 0)
        pre16_gelu_pair4_kernel<<<grid_for(n / 4), THREADS, 0, ctx->compute>>>(
            (cu_bf16x4 *)out, (float4 *)dgelu, (const cu_bf16x4 *)pre16, (const float4 *)bias, n / 4, OC / 4);
    else
        pre16_gelu_pair_kernel<<<grid_for(n), THREADS, 0, ctx->compute>>>((__nv_bfloat16 *)out, dgelu, pre16, bias,
                                                                          n, OC);
    CUDA_CHECK_LAUNCH();
}

// Without the bf16 handoff, bf16 (MP_BF16_GEMM=cublas, MP_BF16_HANDOFF=fp32): the product writes
// pre alone into dgelu (beta = 0) and the GELU kernel adds the bias, where fp32 still writes the
// bias into pre first and accumulates onto it (beta = 1): two fewer passes over the (N, OC) output.
// The sum is acc + bias either way, but cuBLAS may choose another algorithm (or split-K
// accumulation onto C) for beta = 1 than for beta = 0, so pre's bits can differ from the old bf16
// order's; fp32 keeps that order.
void cu_matmul_gelu_forward(cu_ctx_t *ctx, float *out, float *dgelu, const float *inp, const float *w,
                            const float *bias, int N, int C, int OC)
{
    if (cu_handoff_bf16(ctx)) {
        matmul_gelu_forward_bf16(ctx, out, dgelu, inp, w, bias, N, C, OC);
        return;
    }
    const size_t n = (size_t)N * OC;
    if (ctx->precision != CU_BF16 || !bias) {
        cu_matmul_forward(ctx, dgelu, inp, w, bias, N, C, OC);
        gelu_pair_kernel<<<grid_for(n), THREADS, 0, ctx->compute>>>(out, dgelu, n);
        CUDA_CHECK_LAUNCH();
        return;
    }
    cu_gemm(ctx, 0, 1, N, OC, C, 1.0f, inp, C, 0, w, C, 0, 0.0f, dgelu, OC, 0, 1);
    if (OC % 4 == 0 && ((uintptr_t)out | (uintptr_t)dgelu | (uintptr_t)bias) % 16 == 0)
        bias_gelu_pair4_kernel<<<grid_for(n / 4), THREADS, 0, ctx->compute>>>((float4 *)out, (float4 *)dgelu,
                                                                                (const float4 *)bias, n / 4, OC / 4);
    else
        bias_gelu_pair_kernel<<<grid_for(n), THREADS, 0, ctx->compute>>>(out, dgelu, bias, n, OC);
    CUDA_CHECK_LAUNCH();
}

__global__ void mul_kernel(float *x, const float *y, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] *= y[i];
}

// mul_kernel on float4s (both operands 16-byte aligned), the last n % 4 elements scalar: the same
// product per element, a quarter of the memory instructions.
__global__ void mul4_kernel(float *x, const float *y, size_t n)
{
    const size_t n4 = n / 4, t0 = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    float4 *x4 = reinterpret_cast<float4 *>(x);
    const float4 *y4 = reinterpret_cast<const float4 *>(y);
    for (size_t i = t0; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        float4 a = x4[i];
        const float4 b = y4[i];
        a.x *= b.x, a.y *= b.y, a.z *= b.z, a.w *= b.w;
        x4[i] = a;
    }
    if (t0 < n % 4) x[4 * n4 + t0] *= y[4 * n4 + t0];
}

// The bf16 handoff's GELU backward: dinp = float(p) · dgelu, p the input gradient in bf16 (scratch).
// Four a thread (an 8-byte load of p, float4s of dgelu and dinp: both on 16 bytes, p on 8 as
// scratch), the last n % 4 scalar. dinp and dgelu carry no __restrict__: each element is read and
// written by one thread, so the kernel stays right should a caller pass the same buffer.
__global__ void bf16_mul4_kernel(float *dinp, const __nv_bfloat16 *__restrict__ p, const float *dgelu, size_t n)
{
    const size_t n4 = n / 4, t0 = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    const cu_bf16x4 *p4 = reinterpret_cast<const cu_bf16x4 *>(p);
    const float4 *g4 = reinterpret_cast<const float4 *>(dgelu);
    float4 *x4 = reinterpret_cast<float4 *>(dinp);
    for (size_t i = t0; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        const cu_bf16x4 a = p4[i];
        const float4 g = g4[i];
        x4[i] = make_float4(__bfloat162float(a.v[0]) * g.x, __bfloat162float(a.v[1]) * g.y,
                            __bfloat162float(a.v[2]) * g.z, __bfloat162float(a.v[3]) * g.w);
    }
    if (t0 < n % 4) dinp[4 * n4 + t0] = __bfloat162float(p[4 * n4 + t0]) * dgelu[4 * n4 + t0];
}

__global__ void bf16_mul_kernel(float *dinp, const __nv_bfloat16 *__restrict__ p, const float *dgelu, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dinp[i] = __bfloat162float(p[i]) * dgelu[i];
}

// The bf16 handoff's backward: matmul_cuda.cu's bf16 backward (dout rounded once with the dbias
// partials, dw and dbias as cu_matmul_backward's) hands dout · w back in bf16, in scratch, where
// the fp32 handoff writes it as fp32 into dinp and multiplies it there, a read and a write more.
// The product lives in scratch: the kernel launched here reads it before any other call can take it.
static void matmul_backward_gelu_bf16(cu_ctx_t *ctx, float *dinp, float *dw, float *dbias, const float *dout,
                                      const float *inp, const float *w, const float *dgelu, int N, int C, int OC)
{
    const __nv_bfloat16 *p =
        cu_matmul_backward_bf16_dinp(ctx, dw, dbias, dout, NULL, (const __nv_bfloat16 *)inp, w, N, C, OC);
    const size_t n = (size_t)N * C;
    if (n == 0) return;
    if (cu_dhidden_kept(ctx, N, C)) { // dinp in bf16 with its column sums' partials, for cu_mlp_fc_backward
        cu_gelu_grad_keep(ctx, dinp, p, dgelu, N, C);
        return;
    }
    if ((uintptr_t)dinp % 16 == 0 && (uintptr_t)dgelu % 16 == 0)
        bf16_mul4_kernel<<<grid_for(n / 4 > 0 ? n / 4 : 1), THREADS, 0, ctx->compute>>>(dinp, p, dgelu, n);
    else
        bf16_mul_kernel<<<grid_for(n), THREADS, 0, ctx->compute>>>(dinp, p, dgelu, n);
    CUDA_CHECK_LAUNCH();
}

void cu_matmul_backward_gelu(cu_ctx_t *ctx, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                             const float *w, const float *dgelu, int N, int C, int OC)
{
    if (cu_handoff_bf16(ctx)) { // inp: the hidden activation kept in bf16 by the forward
        if (dinp) matmul_backward_gelu_bf16(ctx, dinp, dw, dbias, dout, inp, w, dgelu, N, C, OC);
        else cu_mlp_proj_backward_weight(ctx, dw, dbias, dout, inp, N, C, OC); // the weight half alone
        return;
    }
    cu_matmul_backward(ctx, dinp, dw, dbias, dout, inp, w, N, C, OC);
    if (!dinp) return; // the weight half alone (a split backward's W)
    const size_t n = (size_t)N * C;
    if ((uintptr_t)dinp % 16 == 0 && (uintptr_t)dgelu % 16 == 0)
        mul4_kernel<<<grid_for(n / 4 > 0 ? n / 4 : 1), THREADS, 0, ctx->compute>>>(dinp, dgelu, n);
    else
        mul_kernel<<<grid_for(n), THREADS, 0, ctx->compute>>>(dinp, dgelu, n);
    CUDA_CHECK_LAUNCH();
}

// ---- the hidden activation's form, for tests and tools (kernels_cuda.h) ----

__global__ void bf16_widen_kernel(float *__restrict__ dst, const __nv_bfloat16 *__restrict__ src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}

void cu_mlp_hidden_from_fp32(cu_ctx_t *ctx, float *dst, const float *src, size_t n)
{
    if (cu_handoff_bf16(ctx)) cu_bf16_round(ctx, (__nv_bfloat16 *)dst, src, n);
    else CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, ctx->compute));
}

// n values out as fp32: widened from bf16 where the buffer holds them so, else copied.
static void widen_or_copy(cu_ctx_t *ctx, float *dst, const float *src, size_t n, bool bf16)
{
    if (n == 0) return;
    if (!bf16) {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, ctx->compute));
        return;
    }
    bf16_widen_kernel<<<grid_for(n), THREADS, 0, ctx->compute>>>(dst, (const __nv_bfloat16 *)src, n);
    CUDA_CHECK_LAUNCH();
}

void cu_mlp_hidden_to_fp32(cu_ctx_t *ctx, float *dst, const float *src, size_t n)
{
    widen_or_copy(ctx, dst, src, n, cu_handoff_bf16(ctx));
}

void cu_mlp_dhidden_to_fp32(cu_ctx_t *ctx, float *dst, const float *src, int N, int C)
{
    widen_or_copy(ctx, dst, src, (size_t)N * C, cu_dhidden_kept(ctx, N, C));
}
