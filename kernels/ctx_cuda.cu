// The GPU context: device, streams, cuBLAS and cuBLASLt handles and the scratch workspace every cu_
// call shares.
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "kernels_cuda.h"

const char *mp_cublas_status_name(cublasStatus_t status)
{
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE (bad dimension or leading dimension)";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH (feature absent on this GPU)";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "unknown cublasStatus_t";
    }
}

// Reports a failed setup call; true when it failed.
static bool setup_failed(cudaError_t rc, const char *what)
{
    if (rc == cudaSuccess) return false;
    KERN_ERROR("CUDA setup failed: %s: %s", what, cudaGetErrorString(rc));
    return true;
}

// Checks the return code, not the count: without a driver cudaGetDeviceCount returns
// cudaErrorInsufficientDriver (or cudaErrorNoDevice) and leaves the count untouched.
static int ctx_pick_device(int device)
{
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) return KERN_FAIL("no usable CUDA device: %s", cudaGetErrorString(rc));
    if (n < 1) return KERN_FAIL("no usable CUDA device: the driver reports none");
    if (device < 0 || device >= n)
        return KERN_FAIL("CUDA device %d does not exist: this node has %d (ordinals 0..%d)", device, n, n - 1);
    if (setup_failed(cudaSetDevice(device), "cudaSetDevice")) return KERN_ERR;
    return KERN_OK;
}

int cu_ctx_init(cu_ctx_t *ctx, int device, int precision)
{
    cublasStatus_t st;
    memset(ctx, 0, sizeof *ctx);
    if (precision != CU_FP32 && precision != CU_BF16)
        return KERN_FAIL("unknown precision %d (0 fp32, 1 bf16)", precision);
    const char *gemm = getenv("MP_BF16_GEMM");
    if (gemm && *gemm && strcmp(gemm, "round") && strcmp(gemm, "cublas"))
        return KERN_FAIL("MP_BF16_GEMM=%s: round or cublas", gemm);
    const char *attn = getenv("MP_ATTENTION");
    if (attn && *attn && strcmp(attn, "fa2") && strcmp(attn, "wmma"))
        return KERN_FAIL("MP_ATTENTION=%s: fa2 or wmma", attn);
    const char *handoff = getenv("MP_BF16_HANDOFF");
    if (handoff && *handoff && strcmp(handoff, "bf16") && strcmp(handoff, "fp32"))
        return KERN_FAIL("MP_BF16_HANDOFF=%s: bf16 or fp32", handoff);
    const char *bias = getenv("MP_GEMM_BIAS");
    if (bias && *bias && strcmp(bias, "epilogue") && strcmp(bias, "pass"))
        return KERN_FAIL("MP_GEMM_BIAS=%s: epilogue or pass", bias);
    if (ctx_pick_device(device) != KERN_OK) return KERN_ERR;
    ctx->device = device;
    ctx->precision = precision;
    ctx->bf16_gemm = gemm && !strcmp(gemm, "cublas") ? CU_GEMM_CUBLAS : CU_GEMM_ROUND;
    ctx->attention = attn && !strcmp(attn, "wmma") ? CU_ATT_WMMA : CU_ATT_FA2;
    ctx->handoff = handoff && !strcmp(handoff, "fp32") ? CU_HANDOFF_FP32 : CU_HANDOFF_BF16;
    ctx->gemm_bias = bias && !strcmp(bias, "pass") ? CU_BIAS_PASS : CU_BIAS_EPILOGUE;
    int major = 0;
    if (setup_failed(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "compute capability"))
        goto err;
    if (major >= 8 && (cu_attention_flash_setup(device, &ctx->flash_sizes) != KERN_OK || // bf16 tensor cores
                       cu_attention_fa2_setup(device, &ctx->fa2_sizes) != KERN_OK))
        goto err;
    // Non-blocking: the legacy default stream must not serialise compute against communication.
    if (setup_failed(cudaStreamCreateWithFlags(&ctx->compute, cudaStreamNonBlocking), "compute stream"))
        goto err;
    if (setup_failed(cudaStreamCreateWithFlags(&ctx->comm, cudaStreamNonBlocking), "comm stream")) goto err_compute;
    if (setup_failed(cudaStreamCreateWithFlags(&ctx->offload, cudaStreamNonBlocking), "offload stream"))
        goto err_comm;
    st = cublasCreate(&ctx->blas);
    if (st != CUBLAS_STATUS_SUCCESS) {
        KERN_ERROR("cublasCreate failed: %s", mp_cublas_status_name(st));
        goto err_offload;
    }
    // Default math: fp32 products stay fp32 (no TF32) unless NVIDIA_TF32_OVERRIDE=1 is set.
    if (cublasSetStream(ctx->blas, ctx->compute) != CUBLAS_STATUS_SUCCESS ||
        cublasSetMathMode(ctx->blas, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS) {
        KERN_ERROR("cuBLAS handle setup failed");
        goto err_blas;
    }
    if (cu_lt_init(ctx) != KERN_OK) goto err_blas;
    return KERN_OK;
err_blas:
    cublasDestroy(ctx->blas);
err_offload:
    cudaStreamDestroy(ctx->offload);
err_comm:
    cudaStreamDestroy(ctx->comm);
err_compute:
    cudaStreamDestroy(ctx->compute);
err:
    memset(ctx, 0, sizeof *ctx);
    return KERN_ERR;
}

void cu_ctx_destroy(cu_ctx_t *ctx)
{
    if (!ctx->blas) return;
    CUDA_CHECK(cudaDeviceSynchronize());
    if (ctx->scratch) CUDA_CHECK(cudaFree(ctx->scratch));
    cu_lt_destroy(ctx);
    CUBLAS_CHECK(cublasDestroy(ctx->blas));
    CUDA_CHECK(cudaStreamDestroy(ctx->offload));
    CUDA_CHECK(cudaStreamDestroy(ctx->comm));
    CUDA_CHECK(cudaStreamDestroy(ctx->compute));
    memset(ctx, 0, sizeof *ctx);
}

int cu_ctx_reserve(cu_ctx_t *ctx, size_t bytes)
{
    if (bytes <= ctx->scratch_bytes) return KERN_OK;
    CUDA_CHECK(cudaStreamSynchronize(ctx->compute));
    if (ctx->scratch) CUDA_CHECK(cudaFree(ctx->scratch));
    ctx->scratch = NULL;
    ctx->scratch_bytes = 0;
    cudaError_t rc = cudaMalloc(&ctx->scratch, bytes);
    if (rc != cudaSuccess) {
        ctx->scratch = NULL;
        return KERN_FAIL("cannot allocate %zu bytes of CUDA scratch: %s", bytes, cudaGetErrorString(rc));
    }
    ctx->scratch_bytes = bytes;
    return KERN_OK;
}

void *cu_ctx_scratch_for(cu_ctx_t *ctx, size_t bytes, const char *who)
{
    if (bytes > ctx->scratch_bytes && ctx->scratch_frozen)
        KERN_ABORT("CUDA scratch would grow after step 0, from %zu to %zu bytes, for %s: the scratch is sized before "
                   "the first step (cu_scratch_bound) because growing it frees memory, which waits for the whole "
                   "device, NCCL calls of other ranks included; raise cu_scratch_bound for this kernel",
                   ctx->scratch_bytes, bytes, who);
    if (bytes > ctx->scratch_bytes && ctx->scratch_planned)
        KERN_ERROR("CUDA scratch grew in the first step from %zu to %zu bytes for %s: cu_scratch_bound is short of "
                   "this kernel's request (growing waits for the whole device; with NCCL calls of other ranks in "
                   "flight that can deadlock)", ctx->scratch_bytes, bytes, who);
    if (bytes > ctx->scratch_bytes && cu_ctx_reserve(ctx, bytes) != KERN_OK)
        KERN_ABORT("CUDA scratch of %zu bytes does not fit: reserve it with cu_ctx_reserve before the arena, "
                 "or give the arena a larger margin", bytes);
    return ctx->scratch;
}

void cu_ctx_sync(cu_ctx_t *ctx) { CUDA_CHECK(cudaStreamSynchronize(ctx->compute)); }

static size_t bf16_bytes(size_t n) { return (n * 2 + 255) / 256 * 256; }

size_t cu_scratch_bound(int B, int T, int C, int V, int F, int NH)
{
    const size_t b = (size_t)B, t = (size_t)T, c = (size_t)C, v = (size_t)V, f = (size_t)F, nh = (size_t)NH;
    const size_t n = b * t;
    size_t most = 0;
    // products inp (N, K) · w (OC, K): the bf16 copies of inp, w and the output or its gradient, and
    // the bias gradient's column partials (at most N rows of OC)
    const size_t prod[5][2] = {{c, 3 * c}, {c, c}, {c, f}, {f, c}, {c, v}};
    for (int i = 0; i < 5; i++) {
        const size_t k = prod[i][0], oc = prod[i][1];
        const size_t need = bf16_bytes(n * oc) + bf16_bytes(n * k) + bf16_bytes(oc * k) + n * oc * sizeof(float);
        most = need > most ? need : most;
    }
    // attention: the unfused products read (B, NH, T, T) and spans of qkv (N, 3C); the fused one
    // four planes of (N, C)
    const size_t att = bf16_bytes(b * nh * t * t) + 2 * bf16_bytes(3 * n * c), fa2 = 4 * bf16_bytes(n * c);
    most = att > most ? att : most;
    most = fa2 > most ? fa2 : most;
    // LayerNorm's backward partials, the embedding's sort (keys, positions and cub's temporaries)
    const size_t ln = 2 * n * c * sizeof(float), enc = 4 * ((n * 4 + 255) / 256 * 256) + 16 * n + ((size_t)1 << 20);
    most = ln > most ? ln : most;
    most = enc > most ? enc : most;
    return most + most / 8;
}
