// One product routed by precision: cublasSgemm* in fp32, cublasGemm*Ex on bf16 copies in bf16.
//
// kernels.h is row-major, cuBLAS column-major. A row-major (m,n) matrix read column-major is its
// transpose, so C = op(A)·op(B) is computed as Cᵀ = op(B)ᵀ·op(A)ᵀ: the operands swap places, the
// dimensions m and n swap, and each operand keeps its own transpose flag.
#include <stdint.h>

#include <cuda_bf16.h>

#include "cuda_check.h"
#include "kernels_cuda.h"

static size_t align256(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

size_t cu_gemm_scratch_bytes(size_t n_a, size_t n_b)
{
    return cu_bf16_bytes(n_a) + cu_bf16_bytes(n_b);
}

size_t cu_bf16_bytes(size_t n) { return align256(n * sizeof(__nv_bfloat16)); }

int cu_gemm_prerounds(const cu_ctx_t *ctx) { return ctx->precision == CU_BF16 && ctx->bf16_gemm == CU_GEMM_ROUND; }

int cu_handoff_bf16(const cu_ctx_t *ctx) { return cu_gemm_prerounds(ctx) && ctx->handoff == CU_HANDOFF_BF16; }

// The last batch item's last stored row ends the span. op(X) is (rows_op, cols_op); stored
// transposed when trans.
size_t cu_gemm_span(int trans, int rows_op, int cols_op, int ld, long long stride, int batch)
{
    const int rows = trans ? cols_op : rows_op, cols = trans ? rows_op : cols_op;
    return (size_t)(batch - 1) * (size_t)stride + (size_t)(rows - 1) * (size_t)ld + (size_t)cols;
}

__global__ void bf16_round_kernel(__nv_bfloat16 *__restrict__ dst, const float *__restrict__ src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16(src[i]); // round to nearest even
}

// 16-byte loads, 8-byte stores: the rounding is bandwidth-bound, and 4-byte loads with 2-byte stores
// leave much of it unused. Each element still goes through __float2bfloat16, so the bits are the
// scalar kernel's. The n % 4 tail goes to the first threads of block 0.
__global__ void bf16_round4_kernel(cu_bf16x4 *__restrict__ dst, const float4 *__restrict__ src, size_t n)
{
    const size_t n4 = n / 4;
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < n4; j += (size_t)gridDim.x * blockDim.x)
        dst[j] = cu_bf16x4_round(src[j]);
    if (blockIdx.x == 0 && threadIdx.x < n % 4) {
        const size_t i = n4 * 4 + threadIdx.x;
        ((__nv_bfloat16 *)dst)[i] = __float2bfloat16(((const float *)src)[i]);
    }
}

void cu_bf16_round(cu_ctx_t *ctx, __nv_bfloat16 *dst, const float *src, size_t n)
{
    if (n == 0) return;
    // The vector kernel needs src on 16 bytes and dst on 8 with the same element phase. Scratch is
    // 256-aligned, so only a src starting off a 4-float boundary (an operand inside a row, as with
    // head sizes not a multiple of 4) falls back: rare and small.
    if ((uintptr_t)src % 16 == 0 && (uintptr_t)dst % 8 == 0) {
        const size_t blocks = (n / 4 + 255) / 256 > 0 ? (n / 4 + 255) / 256 : 1;
        bf16_round4_kernel<<<(unsigned)(blocks < 65536 ? blocks : 65536), 256, 0, ctx->compute>>>(
            (cu_bf16x4 *)dst, (const float4 *)src, n);
    } else {
        const size_t blocks = (n + 255) / 256;
        bf16_round_kernel<<<(unsigned)(blocks < 65536 ? blocks : 65536), 256, 0, ctx->compute>>>(dst, src, n);
    }
    CUDA_CHECK_LAUNCH();
}

void cu_gemm_bf16_pre(cu_ctx_t *ctx, int trans_a, int trans_b, int m, int n, int k, float alpha,
                      const __nv_bfloat16 *A, int lda, long long stride_a, const __nv_bfloat16 *B, int ldb,
                      long long stride_b, float beta, float *C, int ldc, long long stride_c, int batch)
{
    const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (batch == 1)
        CUBLAS_CHECK(cublasGemmEx(ctx->blas, op_b, op_a, n, m, k, &alpha, B, CUDA_R_16BF, ldb, A, CUDA_R_16BF, lda,
                                  &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    else
        CUBLAS_CHECK(cublasGemmStridedBatchedEx(ctx->blas, op_b, op_a, n, m, k, &alpha, B, CUDA_R_16BF, ldb, stride_b,
                                                A, CUDA_R_16BF, lda, stride_a, &beta, C, CUDA_R_32F, ldc, stride_c,
                                                batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// cu_gemm_bf16_pre with a bf16 C (beta = 0, one product): the output is rounded once, by cuBLAS's
// epilogue, where an fp32 C would be written and read again at twice the bytes by a later pass
// that only wants bf16 or reads it once.
void cu_gemm_bf16_out(cu_ctx_t *ctx, int trans_a, int trans_b, int m, int n, int k, float alpha,
                      const __nv_bfloat16 *A, int lda, const __nv_bfloat16 *B, int ldb, __nv_bfloat16 *C, int ldc)
{
    const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const float beta = 0.0f;
    CUBLAS_CHECK(cublasGemmEx(ctx->blas, op_b, op_a, n, m, k, &alpha, B, CUDA_R_16BF, ldb, A, CUDA_R_16BF, lda, &beta,
                              C, CUDA_R_16BF, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// The bf16 path: the spans of A and B are rounded into scratch and read with the same leading
// dimensions and strides, so no operand needs repacking (q and k read out of qkv in place).
static void gemm_bf16(cu_ctx_t *ctx, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *A,
                      int lda, long long stride_a, const float *B, int ldb, long long stride_b, float beta, float *C,
                      int ldc, long long stride_c, int batch)
{
    const size_t na = cu_gemm_span(trans_a, m, k, lda, stride_a, batch);
    const size_t nb = cu_gemm_span(trans_b, k, n, ldb, stride_b, batch);
    char *s = (char *)cu_ctx_scratch(ctx, cu_gemm_scratch_bytes(na, nb));
    __nv_bfloat16 *a16 = (__nv_bfloat16 *)s, *b16 = (__nv_bfloat16 *)(s + cu_bf16_bytes(na));
    cu_bf16_round(ctx, a16, A, na);
    cu_bf16_round(ctx, b16, B, nb);
    cu_gemm_bf16_pre(ctx, trans_a, trans_b, m, n, k, alpha, a16, lda, stride_a, b16, ldb, stride_b, beta, C, ldc,
                     stride_c, batch);
}

// cuBLAS converts the fp32 operands to bf16 itself, inside the product's own loads: no scratch pass.
static void gemm_fast_bf16(cu_ctx_t *ctx, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k,
                           float alpha, const float *A, int lda, long long stride_a, const float *B, int ldb,
                           long long stride_b, float beta, float *C, int ldc, long long stride_c, int batch)
{
    if (batch == 1)
        CUBLAS_CHECK(cublasGemmEx(ctx->blas, op_b, op_a, n, m, k, &alpha, B, CUDA_R_32F, ldb, A, CUDA_R_32F, lda, &beta,
                                  C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_GEMM_DEFAULT));
    else
        CUBLAS_CHECK(cublasGemmStridedBatchedEx(ctx->blas, op_b, op_a, n, m, k, &alpha, B, CUDA_R_32F, ldb, stride_b, A,
                                                CUDA_R_32F, lda, stride_a, &beta, C, CUDA_R_32F, ldc, stride_c, batch,
                                                CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_GEMM_DEFAULT));
}

void cu_gemm(cu_ctx_t *ctx, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *A, int lda,
             long long stride_a, const float *B, int ldb, long long stride_b, float beta, float *C, int ldc,
             long long stride_c, int batch)
{
    const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (ctx->precision == CU_BF16 && ctx->bf16_gemm == CU_GEMM_CUBLAS)
        gemm_fast_bf16(ctx, op_a, op_b, m, n, k, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc, stride_c,
                       batch);
    else if (ctx->precision == CU_BF16)
        gemm_bf16(ctx, trans_a, trans_b, m, n, k, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc, stride_c,
                  batch);
    else if (batch == 1)
        CUBLAS_CHECK(cublasSgemm(ctx->blas, op_b, op_a, n, m, k, &alpha, B, ldb, A, lda, &beta, C, ldc));
    else
        CUBLAS_CHECK(cublasSgemmStridedBatched(ctx->blas, op_b, op_a, n, m, k, &alpha, B, ldb, stride_b, A, lda,
                                               stride_a, &beta, C, ldc, stride_c, batch));
}
