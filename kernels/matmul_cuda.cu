// Dense products on the GPU through cu_gemm (cuBLAS), and in bf16 the forward with a bias through
// cuBLASLt's bias epilogue (gemm_lt_cuda.cu). Legend in kernels.h.
// out (N,OC) = inp (N,C) · w(OC,C)ᵀ: w is read transposed in place, as on the CPU.
#include <stdint.h>

#include "cuda_check.h"
#include "kernels_cuda.h"

enum { THREADS = 256, CHUNK_ROWS = 64 };

static unsigned grid_for(size_t n)
{
    const size_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < 65536 ? b : 65536);
}

// out (N,OC) = res + bias, either may be NULL (then 0): the product then accumulates with beta = 1,
// so bias and residual cost no second pass over out. out may alias res (element-wise).
__global__ void matmul_init_kernel(float *out, const float *res, const float *bias, size_t n, int OC)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = (res ? res[i] : 0.0f) + (bias ? bias[i % (size_t)OC] : 0.0f);
}

// matmul_init_kernel on float4s: OC a multiple of 4 and every operand 16-byte aligned, so a float4
// of out lies in one row and meets 4 consecutive bias elements. The same sum per element.
__global__ void matmul_init4_kernel(float4 *out, const float4 *res, const float4 *bias, size_t n4, int OC4)
{
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        const float4 r = res ? res[i] : zero, b = bias ? bias[i % (size_t)OC4] : zero;
        out[i] = make_float4(r.x + b.x, r.y + b.y, r.z + b.z, r.w + b.w);
    }
}

static void matmul_init(cu_ctx_t *ctx, float *out, const float *res, const float *bias, int N, int OC)
{
    const size_t n = (size_t)N * OC;
    if (n == 0) return;
    if (OC % 4 == 0 && (uintptr_t)out % 16 == 0 && (uintptr_t)res % 16 == 0 && (uintptr_t)bias % 16 == 0)
        matmul_init4_kernel<<<grid_for(n / 4), THREADS, 0, ctx->compute>>>(
            (float4 *)out, (const float4 *)res, (const float4 *)bias, n / 4, OC / 4);
    else
        matmul_init_kernel<<<grid_for(n), THREADS, 0, ctx->compute>>>(out, res, bias, n, OC);
    CUDA_CHECK_LAUNCH();
}

// bf16 with our rounding and bf16 hand-offs, a bias and MP_GEMM_BIAS=epilogue: bias and residual
// in cuBLASLt's epilogue (gemm_lt_cuda.cu), out written once. False when it does not apply or
// cuBLASLt has no algorithm for the call: then the pass path below (matmul_init, beta = 1).
static bool matmul_bias_epilogue(cu_ctx_t *ctx, float *out, const float *res, const float *inp, const float *w,
                                 const float *bias, int N, int C, int OC)
{
    return bias && ctx->gemm_bias == CU_BIAS_EPILOGUE && cu_handoff_bf16(ctx) &&
           cu_matmul_bias_lt(ctx, out, res, inp, w, bias, N, C, OC) == KERN_OK;
}

void cu_matmul_forward(cu_ctx_t *ctx, float *out, const float *inp, const float *w, const float *bias, int N, int C,
                       int OC)
{
    if (matmul_bias_epilogue(ctx, out, NULL, inp, w, bias, N, C, OC)) return;
    if (bias) matmul_init(ctx, out, NULL, bias, N, OC);
    cu_gemm(ctx, 0, 1, N, OC, C, 1.0f, inp, C, 0, w, C, 0, bias ? 1.0f : 0.0f, out, OC, 0, 1);
}

void cu_matmul_residual_forward(cu_ctx_t *ctx, float *out, const float *res, const float *inp, const float *w,
                                const float *bias, int N, int C, int OC)
{
    if (matmul_bias_epilogue(ctx, out, res, inp, w, bias, N, C, OC)) return;
    matmul_init(ctx, out, res, bias, N, OC);
    cu_gemm(ctx, 0, 1, N, OC, C, 1.0f, inp, C, 0, w, C, 0, 1.0f, out, OC, 0, 1);
}

// dbias, pass 1: partial (R, OC) = column sums of dout over row chunk r (CHUNK_ROWS rows, in order).
// Threads of a block take consecutive columns: coalesced reads of each row.
__global__ void colsum_partial_kernel(float *partial, const float *dout, int N, int OC)
{
    const int o = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y;
    if (o >= OC) return;
    const int i1 = (r + 1) * CHUNK_ROWS < N ? (r + 1) * CHUNK_ROWS : N;
    float s = 0.0f;
    for (int i = r * CHUNK_ROWS; i < i1; i++) s += dout[(size_t)i * OC + o];
    partial[(size_t)r * OC + o] = s;
}

// dbias, pass 2: dbias += the chunk sums in chunk order. No atomics: the same bits every run.
__global__ void colsum_finish_kernel(float *dbias, const float *partial, int R, int OC)
{
    const int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= OC) return;
    float s = 0.0f;
    for (int r = 0; r < R; r++) s += partial[(size_t)r * OC + o];
    dbias[o] += s;
}

static void matmul_dbias(cu_ctx_t *ctx, float *dbias, const float *dout, int N, int OC)
{
    const int R = (N + CHUNK_ROWS - 1) / CHUNK_ROWS;
    if (R > 65535) KERN_ABORT("matmul_backward: %d rows exceed the %d the dbias grid covers", N, 65535 * CHUNK_ROWS);
    float *partial = (float *)cu_ctx_scratch(ctx, (size_t)R * OC * sizeof(float));
    const dim3 grid((unsigned)((OC + THREADS - 1) / THREADS), (unsigned)R);
    colsum_partial_kernel<<<grid, THREADS, 0, ctx->compute>>>(partial, dout, N, OC);
    CUDA_CHECK_LAUNCH();
    colsum_finish_kernel<<<grid.x, THREADS, 0, ctx->compute>>>(dbias, partial, R, OC);
    CUDA_CHECK_LAUNCH();
}

// dout's bf16 copy and the dbias partials in one pass over dout: each thread keeps VEC columns of
// row chunk blockIdx.y and adds the chunk's rows in order from 0, as colsum_partial_kernel does, so
// the partials (and dbias) keep their bits. VEC = 4 needs OC % 4 == 0 and dout on 16 bytes.
// Rows go in batches of ROWS_AHEAD loads before their adds and stores: one latency per batch, not
// per row.
enum { ROUND_THREADS = 64, ROWS_AHEAD = 8 };

template <int VEC> struct vec_of;
template <> struct vec_of<1> {
    typedef float f;
    typedef __nv_bfloat16 h;
    static __device__ __forceinline__ h round(f x) { return __float2bfloat16(x); }
    static __device__ __forceinline__ void add(float *s, f x) { s[0] += x; }
};
template <> struct vec_of<4> {
    typedef float4 f;
    typedef cu_bf16x4 h;
    static __device__ __forceinline__ h round(f x) { return cu_bf16x4_round(x); }
    static __device__ __forceinline__ void add(float *s, f x)
    {
        s[0] += x.x;
        s[1] += x.y;
        s[2] += x.z;
        s[3] += x.w;
    }
};

// The fp32 values a pass of round_colsum_kernel reads, VEC at element i: dout itself, or (the fc
// product's input gradient, cu_gelu_grad_keep) float(p) · g computed on the fly.
template <int VEC> struct fp32_src {
    const float *x;
    __device__ __forceinline__ typename vec_of<VEC>::f load(size_t i) const
    {
        return *(const typename vec_of<VEC>::f *)(x + i);
    }
};
template <int VEC> struct gelu_grad_src;
template <> struct gelu_grad_src<1> {
    const __nv_bfloat16 *p;
    const float *g;
    __device__ __forceinline__ float load(size_t i) const { return __bfloat162float(p[i]) * g[i]; }
};
template <> struct gelu_grad_src<4> {
    const __nv_bfloat16 *p;
    const float *g;
    __device__ __forceinline__ float4 load(size_t i) const
    {
        const cu_bf16x4 a = *(const cu_bf16x4 *)(p + i);
        const float4 b = *(const float4 *)(g + i);
        return make_float4(__bfloat162float(a.v[0]) * b.x, __bfloat162float(a.v[1]) * b.y,
                           __bfloat162float(a.v[2]) * b.z, __bfloat162float(a.v[3]) * b.w);
    }
};

template <int VEC, class Src>
__global__ void round_colsum_kernel(__nv_bfloat16 *__restrict__ dst, float *__restrict__ partial, Src src, int N,
                                    int OC)
{
    typedef typename vec_of<VEC>::f F;
    typedef typename vec_of<VEC>::h H;
    const int o = (blockIdx.x * blockDim.x + threadIdx.x) * VEC, r = blockIdx.y;
    if (o >= OC) return;
    const int i0 = r * CHUNK_ROWS, i1 = (r + 1) * CHUNK_ROWS < N ? (r + 1) * CHUNK_ROWS : N;
    float s[VEC];
    for (int c = 0; c < VEC; c++) s[c] = 0.0f;
    int i = i0;
    for (; i + ROWS_AHEAD <= i1; i += ROWS_AHEAD) {
        F x[ROWS_AHEAD];
#pragma unroll
        for (int u = 0; u < ROWS_AHEAD; u++) x[u] = src.load((size_t)(i + u) * OC + o);
#pragma unroll
        for (int u = 0; u < ROWS_AHEAD; u++) {
            vec_of<VEC>::add(s, x[u]);
            *(H *)(dst + (size_t)(i + u) * OC + o) = vec_of<VEC>::round(x[u]);
        }
    }
    for (; i < i1; i++) {
        const F x = src.load((size_t)i * OC + o);
        vec_of<VEC>::add(s, x);
        *(H *)(dst + (size_t)i * OC + o) = vec_of<VEC>::round(x);
    }
    for (int c = 0; c < VEC; c++) partial[(size_t)r * OC + o + c] = s[c];
}

// One round_colsum_kernel pass over (N, OC): dst = bf16 of src's values, partial (R, OC) their 64-row
// column sums. vec: OC % 4 == 0 and every operand aligned for the 4-wide source (the caller checks).
template <template <int> class Src, class... A>
static void round_colsum(cu_ctx_t *ctx, __nv_bfloat16 *dst, float *partial, bool vec, int N, int OC, A... src)
{
    const int R = (N + CHUNK_ROWS - 1) / CHUNK_ROWS, groups = vec ? OC / 4 : OC;
    const dim3 grid((unsigned)((groups + ROUND_THREADS - 1) / ROUND_THREADS), (unsigned)R);
    if (vec)
        round_colsum_kernel<4><<<grid, ROUND_THREADS, 0, ctx->compute>>>(dst, partial, Src<4>{src...}, N, OC);
    else
        round_colsum_kernel<1><<<grid, ROUND_THREADS, 0, ctx->compute>>>(dst, partial, Src<1>{src...}, N, OC);
    CUDA_CHECK_LAUNCH();
}

// ---- the fc product's input gradient kept in bf16 (matmul_backward_gelu under the bf16 handoff) ----
//
// fcproj's backward writes d fc = (dout · w) ⊙ gelu' straight in bf16 with the column sums' 64-row
// partials beside, the pass the fc product's backward would otherwise make over it in fp32
// (round_colsum_kernel): the same sums of the same fp32 values in the same order, the same rounding,
// so dw, dinp and dbias keep their bits, and 8 bytes an element fewer move. Layout in the (N,C)
// float buffer: the bf16 values from its start, the partials (R × C floats) from dhidden_at.

static size_t dhidden_at(int N, int C) { return (((size_t)N * C + 1) / 2 + 63) & ~(size_t)63; }

int cu_dhidden_kept(const cu_ctx_t *ctx, int N, int C)
{
    if (!cu_handoff_bf16(ctx) || N <= 0 || C <= 0) return 0;
    const size_t R = ((size_t)N + CHUNK_ROWS - 1) / CHUNK_ROWS;
    return R <= 65535 && dhidden_at(N, C) + R * (size_t)C <= (size_t)N * C;
}

void cu_gelu_grad_keep(cu_ctx_t *ctx, float *dhidden, const __nv_bfloat16 *p, const float *dgelu, int N, int C)
{
    const bool vec = C % 4 == 0 && ((uintptr_t)dhidden | (uintptr_t)dgelu) % 16 == 0 && (uintptr_t)p % 8 == 0;
    round_colsum<gelu_grad_src>(ctx, (__nv_bfloat16 *)dhidden, dhidden + dhidden_at(N, C), vec, N, C, p, dgelu);
}

void cu_mlp_dhidden_from_fp32(cu_ctx_t *ctx, float *dst, const float *src, int N, int C)
{
    if (!cu_dhidden_kept(ctx, N, C)) {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)N * C * sizeof(float), cudaMemcpyDeviceToDevice, ctx->compute));
        return;
    }
    const bool vec = C % 4 == 0 && ((uintptr_t)dst | (uintptr_t)src) % 16 == 0;
    round_colsum<fp32_src>(ctx, (__nv_bfloat16 *)dst, dst + dhidden_at(N, C), vec, N, C, src);
}

// The bf16 backward (cu_gemm_prerounds): dout, w and inp are each rounded once, dout in the same
// pass as the dbias partials, where cu_gemm would round dout for both products and dbias would read
// it a third time. Same operands, same products, same partial order: the bits of the cu_gemm path.
// dinp_bf16 (with dinp NULL): the input gradient dout · w goes out in bf16 into scratch instead,
// for a caller whose next pass reads it once (matmul_backward_gelu); returned, else NULL.
// inp16_in: inp kept in bf16 by its producer (the MLP's hidden activation under the bf16 handoff),
// read as it is for dw; inp is then unused.
// dout_kept: dout is already bf16 (the head's dlogits; the fc product's input gradient as
// cu_gelu_grad_keep left it, with the dbias partials at dhidden_at): no rounding pass over it.
static __nv_bfloat16 *matmul_backward_bf16(cu_ctx_t *ctx, float *dinp, bool dinp_bf16, float *dw, float *dbias,
                                           const float *dout, const float *inp, const __nv_bfloat16 *inp16_in,
                                           const float *w, int N, int C, int OC, bool dout_kept = false)
{
    const int R = dbias ? (N + CHUNK_ROWS - 1) / CHUNK_ROWS : 0;
    if (R > 65535) KERN_ABORT("matmul_backward: %d rows exceed the %d the dbias grid covers", N, 65535 * CHUNK_ROWS);
    const bool grad_in = dinp || dinp_bf16;
    const size_t n_dout = dout_kept ? 0 : (size_t)N * OC, n_w = grad_in ? (size_t)OC * C : 0;
    // The bf16 input gradient (N,C) takes inp's place once the dw product has read it (the stream
    // runs them in order), so the handoff needs no scratch beyond the fp32 path's; with inp kept in
    // bf16 elsewhere, that place holds the input gradient alone.
    const size_t n_inp = (dw && !inp16_in) || dinp_bf16 ? (size_t)N * C : 0;
    // One request for every piece: a second one could grow the scratch and free the first. inp's
    // copy comes before w's so that the weight half alone puts it at the same offset.
    const size_t at_inp = cu_bf16_bytes(n_dout), at_w = at_inp + cu_bf16_bytes(n_inp);
    const size_t at_part = at_w + cu_bf16_bytes(n_w);
    char *s = (char *)cu_ctx_scratch(ctx, at_part + (dout_kept ? 0 : (size_t)R * OC * sizeof(float)));
    __nv_bfloat16 *dout16 = dout_kept ? (__nv_bfloat16 *)dout : (__nv_bfloat16 *)s;
    __nv_bfloat16 *w16 = (__nv_bfloat16 *)(s + at_w), *inp16 = (__nv_bfloat16 *)(s + at_inp);
    float *partial = dout_kept ? (float *)dout + dhidden_at(N, OC) : (float *)(s + at_part);

    if (dout_kept) {
        // rounded, and its partials summed, by cu_gelu_grad_keep
    } else if (dbias) {
        round_colsum<fp32_src>(ctx, dout16, partial, OC % 4 == 0 && (uintptr_t)dout % 16 == 0, N, OC, dout);
    } else {
        cu_bf16_round(ctx, dout16, dout, n_dout);
    }
    if (dinp) {
        cu_bf16_round(ctx, w16, w, n_w);
        cu_gemm_bf16_pre(ctx, 0, 0, N, C, OC, 1.0f, dout16, OC, 0, w16, C, 0, 0.0f, dinp, C, 0, 1); // dout · w
    }
    if (dw) {
        if (!inp16_in) cu_bf16_round(ctx, inp16, inp, n_inp);
        cu_gemm_bf16_pre(ctx, 1, 0, OC, C, N, 1.0f, dout16, OC, 0, inp16_in ? inp16_in : inp16, C, 0, 1.0f, dw, C, 0,
                         1); // doutᵀ · inp
    }
    __nv_bfloat16 *dinp16 = NULL;
    if (dinp_bf16) { // after dw's product: it overwrites inp16
        dinp16 = inp16;
        cu_bf16_round(ctx, w16, w, n_w);
        cu_gemm_bf16_out(ctx, 0, 0, N, C, OC, 1.0f, dout16, OC, w16, C, dinp16, C); // dout · w
    }
    if (dbias) {
        colsum_finish_kernel<<<(unsigned)((OC + THREADS - 1) / THREADS), THREADS, 0, ctx->compute>>>(dbias, partial,
                                                                                                  R, OC);
        CUDA_CHECK_LAUNCH();
    }
    return dinp16;
}

const __nv_bfloat16 *cu_matmul_backward_bf16_dinp(cu_ctx_t *ctx, float *dw, float *dbias, const float *dout,
                                                  const float *inp, const __nv_bfloat16 *inp16, const float *w,
                                                  int N, int C, int OC)
{
    return matmul_backward_bf16(ctx, NULL, true, dw, dbias, dout, inp, inp16, w, N, C, OC);
}

void cu_matmul_backward_weight_pre(cu_ctx_t *ctx, float *dw, float *dbias, const float *dout,
                                   const __nv_bfloat16 *inp16, int N, int C, int OC)
{
    if (!dw) { // dbias alone: the fp32 path's kernels (they never read the input)
        cu_matmul_backward_weight(ctx, NULL, dbias, dout, NULL, N, C, OC);
        return;
    }
    matmul_backward_bf16(ctx, NULL, false, dw, dbias, dout, NULL, inp16, NULL, N, C, OC);
}

void cu_matmul_backward(cu_ctx_t *ctx, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                        const float *w, int N, int C, int OC)
{
    if (cu_gemm_prerounds(ctx) && (dinp || dw)) {
        matmul_backward_bf16(ctx, dinp, false, dw, dbias, dout, inp, NULL, w, N, C, OC);
        return;
    }
    if (dinp) cu_gemm(ctx, 0, 0, N, C, OC, 1.0f, dout, OC, 0, w, C, 0, 0.0f, dinp, C, 0, 1); // dout · w
    cu_matmul_backward_weight(ctx, dw, dbias, dout, inp, N, C, OC);
}

void cu_matmul_backward_weight(cu_ctx_t *ctx, float *dw, float *dbias, const float *dout, const float *inp, int N,
                               int C, int OC)
{
    if (cu_gemm_prerounds(ctx) && dw) {
        matmul_backward_bf16(ctx, NULL, false, dw, dbias, dout, inp, NULL, NULL, N, C, OC);
        return;
    }
    if (dw) cu_gemm(ctx, 1, 0, OC, C, N, 1.0f, dout, OC, 0, inp, C, 0, 1.0f, dw, C, 0, 1); // doutᵀ · inp
    if (dbias) matmul_dbias(ctx, dbias, dout, N, OC);
}

// ---- the MLP's projection on its kept hidden activation (kernels_cuda.h) ----

void cu_mlp_proj_forward(cu_ctx_t *ctx, float *out, const float *res, const float *inp, const float *w,
                         const float *bias, int N, int C, int OC)
{
    if (!cu_handoff_bf16(ctx)) {
        if (res) cu_matmul_residual_forward(ctx, out, res, inp, w, bias, N, C, OC);
        else cu_matmul_forward(ctx, out, inp, w, bias, N, C, OC);
        return;
    }
    const __nv_bfloat16 *inp16 = (const __nv_bfloat16 *)inp; // the GELU kernel's bf16 (kernels_cuda.h)
    if (bias && ctx->gemm_bias == CU_BIAS_EPILOGUE &&
        cu_matmul_bias_lt_pre(ctx, out, res, inp16, w, bias, N, C, OC) == KERN_OK)
        return;
    // the pass path: res + bias first, the product accumulated onto them (beta 1), or alone (beta 0)
    const bool init = res || bias;
    if (init) matmul_init(ctx, out, res, bias, N, OC);
    const size_t n_w = (size_t)OC * C;
    __nv_bfloat16 *w16 = (__nv_bfloat16 *)cu_ctx_scratch(ctx, cu_bf16_bytes(n_w));
    cu_bf16_round(ctx, w16, w, n_w);
    cu_gemm_bf16_pre(ctx, 0, 1, N, OC, C, 1.0f, inp16, C, 0, w16, C, 0, init ? 1.0f : 0.0f, out, OC, 0, 1);
}

void cu_mlp_proj_backward_weight(cu_ctx_t *ctx, float *dw, float *dbias, const float *dout, const float *inp, int N,
                                 int C, int OC)
{
    if (!cu_handoff_bf16(ctx)) {
        cu_matmul_backward_weight(ctx, dw, dbias, dout, inp, N, C, OC);
        return;
    }
    cu_matmul_backward_weight_pre(ctx, dw, dbias, dout, (const __nv_bfloat16 *)inp, N, C, OC);
}

// ---- the fc product's backward on its kept input gradient (kernels_cuda.h) ----

void cu_mlp_fc_backward(cu_ctx_t *ctx, float *dinp, float *dw, float *dbias, const float *dhidden, const float *inp,
                        const float *w, int N, int C, int OC)
{
    if (!cu_dhidden_kept(ctx, N, OC)) {
        cu_matmul_backward(ctx, dinp, dw, dbias, dhidden, inp, w, N, C, OC);
        return;
    }
    matmul_backward_bf16(ctx, dinp, false, dw, dbias, dhidden, inp, NULL, w, N, C, OC, true);
}

void cu_mlp_fc_backward_weight(cu_ctx_t *ctx, float *dw, float *dbias, const float *dhidden, const float *inp, int N,
                               int C, int OC)
{
    if (!cu_dhidden_kept(ctx, N, OC)) {
        cu_matmul_backward_weight(ctx, dw, dbias, dhidden, inp, N, C, OC);
        return;
    }
    matmul_backward_bf16(ctx, NULL, false, dw, dbias, dhidden, inp, NULL, NULL, N, C, OC, true);
}

void cu_matmul_backward_dout16(cu_ctx_t *ctx, float *dinp, float *dw, const __nv_bfloat16 *dout16, const float *inp,
                               const float *w, int N, int C, int OC)
{
    if (dinp || dw) matmul_backward_bf16(ctx, dinp, false, dw, NULL, (const float *)dout16, inp, NULL, w, N, C, OC, true);
}
