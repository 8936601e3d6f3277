// The head on the GPU (contract in kernels.h and kernels_cuda.h). In bf16 the (N,V) logits are the
// largest tensor of a step (GPT-2: 16384 × 50304): written by the product, read by the softmax, its
// probabilities written and read again, dlogits written in fp32 and rounded for both products. Kept
// in bf16 in place, they cost one bf16 write, one read forward, one read and write backward.
#include <cuda_bf16.h>

#include "cuda_check.h"
#include "kernels_cuda.h"

static int head_fused(const cu_ctx_t *ctx, int V) { return cu_handoff_bf16(ctx) && V >= 4; }

// The state's two parts: the bf16 logits from the start, the stats (2 floats a row) at the end. For
// V >= 4 they do not overlap: N·V bf16 take N·V/2 floats, at most N·V − 2N.
static __nv_bfloat16 *head_logits(float *store) { return (__nv_bfloat16 *)store; }
static const __nv_bfloat16 *head_logits(const float *store) { return (const __nv_bfloat16 *)store; }
static float *head_stats(float *store, int N, int V) { return store + (size_t)N * V - 2 * (size_t)N; }

void cu_head_forward(cu_ctx_t *ctx, float *losses, float *store, const float *inp, const float *w, const int *targets,
                     int N, int C, int V)
{
    if (!head_fused(ctx, V)) {
        cu_matmul_forward(ctx, store, inp, w, NULL, N, C, V);
        cu_crossentropy_forward(ctx, losses, store, targets, N, V);
        return;
    }
    if (N <= 0) return;
    const size_t n_inp = (size_t)N * C, n_w = (size_t)V * C;
    char *s = (char *)cu_ctx_scratch(ctx, cu_bf16_bytes(n_inp) + cu_bf16_bytes(n_w)); // one request
    __nv_bfloat16 *inp16 = (__nv_bfloat16 *)s, *w16 = (__nv_bfloat16 *)(s + cu_bf16_bytes(n_inp));
    cu_bf16_round(ctx, inp16, inp, n_inp);
    cu_bf16_round(ctx, w16, w, n_w);
    cu_gemm_bf16_out(ctx, 0, 1, N, V, C, 1.0f, inp16, C, w16, C, head_logits(store), V); // inp · wᵀ
    cu_xent16_forward(ctx, losses, head_stats(store, N, V), head_logits(store), targets, N, V);
}

void cu_head_backward(cu_ctx_t *ctx, float *dinp, float *dw, float *store, const float *inp, const float *w,
                      const int *targets, float dloss, int N, int C, int V)
{
    if (!head_fused(ctx, V)) {
        cu_crossentropy_backward(ctx, store, store, targets, dloss, N, V, 0);
        if (dinp || dw) cu_matmul_backward(ctx, dinp, dw, NULL, store, inp, w, N, C, V);
        return;
    }
    if (N <= 0) return;
    cu_xent16_backward(ctx, head_logits(store), head_stats(store, N, V), targets, dloss, N, V);
    cu_matmul_backward_dout16(ctx, dinp, dw, head_logits(store), inp, w, N, C, V); // dlogits · w, dlogitsᵀ · inp
}

void cu_head_backward_weight(cu_ctx_t *ctx, float *dw, const float *store, const float *inp, int N, int C, int V)
{
    if (!dw) return;
    if (!head_fused(ctx, V)) {
        cu_matmul_backward_weight(ctx, dw, NULL, store, inp, N, C, V);
        return;
    }
    if (N <= 0) return;
    cu_matmul_backward_dout16(ctx, NULL, dw, head_logits(store), inp, NULL, N, C, V);
}
