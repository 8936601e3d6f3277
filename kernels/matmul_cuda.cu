// Dense products on the GPU through cu_gemm (cuBLAS). Legend in kernels.h.
// out (N,OC) = inp (N,C) · w(OC,C)ᵀ: w is read transposed in place, as on the CPU.
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

static void matmul_init(cu_ctx_t *ctx, float *out, const float *res, const float *bias, int N, int OC)
{
    const size_t n = (size_t)N * OC;
    matmul_init_kernel<<<grid_for(n), THREADS, 0, ctx->compute>>>(out, res, bias, n, OC);
    CUDA_CHECK_LAUNCH();
}

void cu_matmul_forward(cu_ctx_t *ctx, float *out, const float *inp, const float *w, const float *bias, int N, int C,
                       int OC)
{
    if (bias) matmul_init(ctx, out, NULL, bias, N, OC);
    cu_gemm(ctx, 0, 1, N, OC, C, 1.0f, inp, C, 0, w, C, 0, bias ? 1.0f : 0.0f, out, OC, 0, 1);
}

void cu_matmul_residual_forward(cu_ctx_t *ctx, float *out, const float *res, const float *inp, const float *w,
                                const float *bias, int N, int C, int OC)
{
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

void cu_matmul_backward(cu_ctx_t *ctx, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                        const float *w, int N, int C, int OC)
{
    if (dinp) cu_gemm(ctx, 0, 0, N, C, OC, 1.0f, dout, OC, 0, w, C, 0, 0.0f, dinp, C, 0, 1); // dout · w
    cu_matmul_backward_weight(ctx, dw, dbias, dout, inp, N, C, OC);
}

void cu_matmul_backward_weight(cu_ctx_t *ctx, float *dw, float *dbias, const float *dout, const float *inp, int N,
                               int C, int OC)
{
    if (dw) cu_gemm(ctx, 1, 0, OC, C, N, 1.0f, dout, OC, 0, inp, C, 0, 1.0f, dw, C, 0, 1); // doutᵀ · inp
    if (dbias) matmul_dbias(ctx, dbias, dout, N, OC);
}
