// One product routed by precision: cublasSgemm* in fp32, cublasGemm*Ex on bf16 copies in bf16.
//
// kernels.h is row-major, cuBLAS column-major. A row-major (m,n) matrix read column-major is its
// transpose, so C = op(A)·op(B) is computed as Cᵀ = op(B)ᵀ·op(A)ᵀ: the operands swap places, the
// dimensions m and n swap, and each operand keeps its own transpose flag.
#include <cuda_bf16.h>

#include "cuda_check.h"
#include "kernels_cuda.h"

static size_t align256(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

size_t cu_gemm_scratch_bytes(size_t n_a, size_t n_b)
{
    return align256(n_a * sizeof(__nv_bfloat16)) + align256(n_b * sizeof(__nv_bfloat16));
}

// Elements spanned by one operand: the last batch item's last stored row ends the span. op(X) is
// (rows_op, cols_op); stored transposed when trans.
static size_t operand_span(int trans, int rows_op, int cols_op, int ld, long long stride, int batch)
{
    const int rows = trans ? cols_op : rows_op, cols = trans ? rows_op : cols_op;
    return (size_t)(batch - 1) * (size_t)stride + (size_t)(rows - 1) * (size_t)ld + (size_t)cols;
}

__global__ void bf16_round_kernel(__nv_bfloat16 *dst, const float *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16(src[i]); // round to nearest even
}

static void bf16_round(cu_ctx_t *ctx, __nv_bfloat16 *dst, const float *src, size_t n)
{
    const size_t blocks = (n + 255) / 256;
    bf16_round_kernel<<<(unsigned)(blocks < 65536 ? blocks : 65536), 256, 0, ctx->compute>>>(dst, src, n);
    CUDA_CHECK_LAUNCH();
}

// The bf16 path: the spans of A and B are rounded into scratch and read with the same leading
// dimensions and strides, so no operand needs repacking (q and k read out of qkv in place).
static void gemm_bf16(cu_ctx_t *ctx, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k,
                      float alpha, const float *A, int lda, long long stride_a, const float *B, int ldb,
                      long long stride_b, float beta, float *C, int ldc, long long stride_c, int batch)
{
    const size_t na = operand_span(op_a == CUBLAS_OP_T, m, k, lda, stride_a, batch);
    const size_t nb = operand_span(op_b == CUBLAS_OP_T, k, n, ldb, stride_b, batch);
    char *s = (char *)cu_ctx_scratch(ctx, cu_gemm_scratch_bytes(na, nb));
    __nv_bfloat16 *a16 = (__nv_bfloat16 *)s, *b16 = (__nv_bfloat16 *)(s + align256(na * sizeof(__nv_bfloat16)));
    bf16_round(ctx, a16, A, na);
    bf16_round(ctx, b16, B, nb);
    if (batch == 1)
        CUBLAS_CHECK(cublasGemmEx(ctx->blas, op_b, op_a, n, m, k, &alpha, b16, CUDA_R_16BF, ldb, a16, CUDA_R_16BF,
                                  lda, &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    else
        CUBLAS_CHECK(cublasGemmStridedBatchedEx(ctx->blas, op_b, op_a, n, m, k, &alpha, b16, CUDA_R_16BF, ldb,
                                                stride_b, a16, CUDA_R_16BF, lda, stride_a, &beta, C, CUDA_R_32F,
                                                ldc, stride_c, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
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
        gemm_bf16(ctx, op_a, op_b, m, n, k, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc, stride_c, batch);
    else if (batch == 1)
        CUBLAS_CHECK(cublasSgemm(ctx->blas, op_b, op_a, n, m, k, &alpha, B, ldb, A, lda, &beta, C, ldc));
    else
        CUBLAS_CHECK(cublasSgemmStridedBatched(ctx->blas, op_b, op_a, n, m, k, &alpha, B, ldb, stride_b, A, lda,
                                               stride_a, &beta, C, ldc, stride_c, batch));
}
