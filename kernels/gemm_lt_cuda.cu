// The bf16 forward products with a bias through cuBLASLt's bias epilogue (cu_matmul_bias_lt):
// D = alpha·op(A)·op(B) + beta·C + bias in one product, where the pass path (matmul_cuda.cu) first
// writes out = res + bias and then accumulates the product onto it with beta = 1.
//
// Row-major to cuBLAS's column-major as in gemm_cuda.cu: out (N,OC) = inp (N,C) · w (OC,C)ᵀ is
// outᵀ (OC,N) = w · inpᵀ, so m = OC, n = N, k = C; A = w, stored (k,m) column-major with ld C and
// read transposed; B = inp, stored (k,n) with ld C, read as is; C and D (m,n) with ld OC. The bias,
// a vector of m, goes to every column of D: to every row of out, as kernels.h adds it.
//
// Descriptors and the heuristic's algorithm are kept per (N, C, OC, residual, in place, alignment of
// C, D and the bias): the same few shapes come back every layer. Only the bias pointer changes
// between calls with one plan; cublasLtMatmul reads the descriptors when it is called.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <cuda_bf16.h>

#include "cuda_check.h"
#include "kernels_cuda.h"

// 32 MiB: what NVIDIA advises for cuBLASLt's workspace on Hopper (Ampere wants less).
#define LT_WORKSPACE_BYTES ((size_t)32 << 20)
enum { LT_PLANS = 32, LT_CANDIDATES = 8 };

typedef struct {
    int used;
    int N, C, OC;
    int has_res;  // beta = 1, C = res
    int oop;      // C and D are different buffers (res != out)
    unsigned align_b, align_c, align_d, align_bias; // align_b: 256 for our scratch copies, less for a kept input
    int ok;       // the heuristic gave an algorithm fit for the call
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, cd; // cd: C and D alike (in place needs the same layout)
    cublasLtMatmulAlgo_t algo;
} lt_plan_t;

struct cu_lt_plans {
    lt_plan_t plan[LT_PLANS];
    int next; // the slot the next new plan takes (round robin once all are used)
};

// The largest power of two up to 256 dividing the address: cuBLASLt assumes 256 unless told.
static unsigned align_of(const void *p)
{
    unsigned a = 256;
    while (a > 1 && (uintptr_t)p % a) a >>= 1;
    return a;
}

static void plan_release(lt_plan_t *p)
{
    if (!p->used) return;
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->cd));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->b));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->a));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->op));
    memset(p, 0, sizeof *p);
}

int cu_lt_init(cu_ctx_t *ctx)
{
    cublasStatus_t st = cublasLtCreate(&ctx->lt);
    if (st != CUBLAS_STATUS_SUCCESS) {
        ctx->lt = NULL;
        return KERN_FAIL("cublasLtCreate failed: %s", mp_cublas_status_name(st));
    }
    cudaError_t rc = cudaMalloc(&ctx->lt_workspace, LT_WORKSPACE_BYTES);
    if (rc != cudaSuccess) {
        ctx->lt_workspace = NULL;
        cublasLtDestroy(ctx->lt);
        ctx->lt = NULL;
        return KERN_FAIL("cannot allocate %zu bytes of cuBLASLt workspace: %s", LT_WORKSPACE_BYTES,
                         cudaGetErrorString(rc));
    }
    ctx->lt_workspace_bytes = LT_WORKSPACE_BYTES;
    ctx->lt_plans = (struct cu_lt_plans *)calloc(1, sizeof *ctx->lt_plans);
    if (!ctx->lt_plans) {
        cudaFree(ctx->lt_workspace);
        cublasLtDestroy(ctx->lt);
        ctx->lt_workspace = NULL;
        ctx->lt_workspace_bytes = 0;
        ctx->lt = NULL;
        return KERN_FAIL("out of host memory for the cuBLASLt plans");
    }
    return KERN_OK;
}

void cu_lt_destroy(cu_ctx_t *ctx)
{
    if (ctx->lt_plans) {
        for (int i = 0; i < LT_PLANS; i++) plan_release(&ctx->lt_plans->plan[i]);
        free(ctx->lt_plans);
        ctx->lt_plans = NULL;
    }
    if (ctx->lt_workspace) CUDA_CHECK(cudaFree(ctx->lt_workspace));
    ctx->lt_workspace = NULL;
    ctx->lt_workspace_bytes = 0;
    if (ctx->lt) CUBLAS_CHECK(cublasLtDestroy(ctx->lt));
    ctx->lt = NULL;
}

// Descriptors for the key in p (filled by the caller) and the heuristic's first algorithm that fits:
// its workspace within ours, and when C and D differ, one that writes out of place.
static void plan_build(cu_ctx_t *ctx, lt_plan_t *p, const float *bias)
{
    const int32_t op_a = CUBLAS_OP_T, op_b = CUBLAS_OP_N, bias_type = CUDA_R_32F;
    const uint32_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    const void *bias_ptr = bias;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F)); // fp32 alpha, beta
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    // The bias's type defaults to D's (fp32 here); said explicitly all the same.
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type));
    // The heuristic does not read the bias but takes its alignment from the pointer.
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof bias_ptr));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, (uint64_t)p->C, (uint64_t)p->OC, p->C));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, (uint64_t)p->C, (uint64_t)p->N, p->C));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->cd, CUDA_R_32F, (uint64_t)p->OC, (uint64_t)p->N, p->OC));
    p->used = 1;

    // A is a bf16 copy at a 256-aligned scratch offset (the default alignment holds); B too, or a
    // kept bf16 input (cu_matmul_bias_lt_pre) whose alignment the key carries.
    cublasLtMatmulPreference_t pref;
    const uint64_t ws = ctx->lt_workspace_bytes;
    const uint32_t align_b = p->align_b, align_c = p->align_c, align_d = p->align_d;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof align_b));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof align_c));
    CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof align_d));
    cublasLtMatmulHeuristicResult_t found[LT_CANDIDATES];
    int count = 0;
    memset(found, 0, sizeof found);
    // NOT_SUPPORTED (no heuristic for this configuration) and the like leave ok = 0: the pass path.
    if (cublasLtMatmulAlgoGetHeuristic(ctx->lt, p->op, p->a, p->b, p->cd, p->cd, pref, LT_CANDIDATES, found,
                                       &count) != CUBLAS_STATUS_SUCCESS)
        count = 0;
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    for (int i = 0; i < count && !p->ok; i++) {
        if (found[i].state != CUBLAS_STATUS_SUCCESS || found[i].workspaceSize > ctx->lt_workspace_bytes) continue;
        if (p->oop) {
            int32_t oop = 0;
            size_t written = 0;
            if (cublasLtMatmulAlgoCapGetAttribute(&found[i].algo, CUBLASLT_ALGO_CAP_OUT_OF_PLACE_RESULT_SUPPORT, &oop,
                                                  sizeof oop, &written) != CUBLAS_STATUS_SUCCESS ||
                !oop)
                continue;
        }
        p->algo = found[i].algo;
        p->ok = 1;
    }
}

static lt_plan_t *plan_for(cu_ctx_t *ctx, int N, int C, int OC, int has_res, int oop, unsigned align_b,
                           unsigned align_c, unsigned align_d, unsigned align_bias, const float *bias)
{
    struct cu_lt_plans *t = ctx->lt_plans;
    for (int i = 0; i < LT_PLANS; i++) {
        lt_plan_t *p = &t->plan[i];
        if (p->used && p->N == N && p->C == C && p->OC == OC && p->has_res == has_res && p->oop == oop &&
            p->align_b == align_b && p->align_c == align_c && p->align_d == align_d && p->align_bias == align_bias)
            return p;
    }
    lt_plan_t *p = &t->plan[t->next];
    t->next = (t->next + 1) % LT_PLANS;
    plan_release(p);
    p->N = N;
    p->C = C;
    p->OC = OC;
    p->has_res = has_res;
    p->oop = oop;
    p->align_b = align_b;
    p->align_c = align_c;
    p->align_d = align_d;
    p->align_bias = align_bias;
    plan_build(ctx, p, bias);
    return p;
}

// The plan for this call, its bias pointer set; NULL (the caller takes the pass path) for an empty
// product or when cuBLASLt offers no algorithm (counted). inp16 NULL: B will be our 256-aligned copy.
static lt_plan_t *usable_plan(cu_ctx_t *ctx, float *out, const float *res, const __nv_bfloat16 *inp16,
                              const float *bias, int N, int C, int OC)
{
    if (N <= 0 || C <= 0 || OC <= 0) return NULL; // the pass path does empty products
    // No residual: C is D itself, never read (beta = 0).
    const float *c = res ? res : out;
    lt_plan_t *p = plan_for(ctx, N, C, OC, res != NULL, c != out, inp16 ? align_of(inp16) : 256, align_of(c),
                            align_of(out), align_of(bias), bias);
    if (!p->ok) {
        ctx->gemm_bias_fallbacks++;
        return NULL;
    }
    const void *bias_ptr = bias;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof bias_ptr));
    return p;
}

static void lt_run(cu_ctx_t *ctx, const lt_plan_t *p, float *out, const float *res, const __nv_bfloat16 *inp16,
                   const __nv_bfloat16 *w16)
{
    const float alpha = 1.0f, beta = res ? 1.0f : 0.0f;
    CUBLAS_CHECK(cublasLtMatmul(ctx->lt, p->op, &alpha, w16, p->a, inp16, p->b, &beta, res ? res : out, p->cd, out,
                                p->cd, &p->algo, ctx->lt_workspace, ctx->lt_workspace_bytes, ctx->compute));
}

int cu_matmul_bias_lt(cu_ctx_t *ctx, float *out, const float *res, const float *inp, const float *w,
                      const float *bias, int N, int C, int OC)
{
    const lt_plan_t *p = usable_plan(ctx, out, res, NULL, bias, N, C, OC);
    if (!p) return KERN_ERR;
    // Both copies from one request (a second could grow the scratch and free the first), at
    // cu_gemm's offsets for this product: cu_gemm_scratch_bytes plans for it.
    const size_t n_inp = (size_t)N * C, n_w = (size_t)OC * C;
    char *s = (char *)cu_ctx_scratch(ctx, cu_gemm_scratch_bytes(n_inp, n_w));
    __nv_bfloat16 *inp16 = (__nv_bfloat16 *)s, *w16 = (__nv_bfloat16 *)(s + cu_bf16_bytes(n_inp));
    cu_bf16_round(ctx, inp16, inp, n_inp);
    cu_bf16_round(ctx, w16, w, n_w);
    lt_run(ctx, p, out, res, inp16, w16);
    return KERN_OK;
}

int cu_matmul_bias_lt_pre(cu_ctx_t *ctx, float *out, const float *res, const __nv_bfloat16 *inp16, const float *w,
                          const float *bias, int N, int C, int OC)
{
    const lt_plan_t *p = usable_plan(ctx, out, res, inp16, bias, N, C, OC);
    if (!p) return KERN_ERR;
    const size_t n_w = (size_t)OC * C;
    __nv_bfloat16 *w16 = (__nv_bfloat16 *)cu_ctx_scratch(ctx, cu_bf16_bytes(n_w));
    cu_bf16_round(ctx, w16, w, n_w);
    lt_run(ctx, p, out, res, inp16, w16);
    return KERN_OK;
}
