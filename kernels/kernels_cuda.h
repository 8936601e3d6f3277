/* MindPipe compute kernels on the GPU: kernels.h one-to-one with a cu_ prefix, plus the context they
 * run in and the device-memory arena. Plain C (the trainer's .c files call it); implemented in the
 * kernels/..._cuda.cu files. Dimension letters, layouts and the = / += contract of every function
 * are those of kernels.h; what differs is said here.
 *
 * All tensor pointers are device pointers. Every function takes the context first and only enqueues
 * work on ctx->compute: nothing synchronises except where a result comes back to the host
 * (cu_sumsq, cu_sumsq_each). Reductions are deterministic: per-block partials summed in a fixed order, never float
 * atomics, so a rerun on the same GPU model gives the same bits.
 *
 * Products (matmul_*, attention's four) honour ctx->precision: fp32 runs cublasSgemm*; bf16 rounds
 * both inputs of each product from the fp32 master copies into context scratch and runs
 * cublasGemm(StridedBatched)Ex with CUDA_R_16BF inputs, CUBLAS_COMPUTE_32F accumulation and fp32
 * output (the forward products with a bias: cublasLtMatmul, bias and residual in its epilogue; see
 * CU_BIAS_EPILOGUE). Everything else is fp32 in both modes. matmul_backward rounds each of dout, w
 * and inp once for both its products (the internal contract at the end of this file). */
#ifndef MP_KERNELS_CUDA_H
#define MP_KERNELS_CUDA_H

#include <stddef.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- context ---- */
enum { CU_FP32 = 0, CU_BF16 = 1 };
/* How a bf16 product gets its bf16 operands: ROUND, our kernel rounds both fp32 operands into
 * scratch and cuBLAS multiplies bf16 (the default); CUBLAS, cuBLAS reads the fp32 operands and
 * converts them itself (CUBLAS_COMPUTE_32F_FAST_16BF), saving the scratch pass. The environment
 * variable MP_BF16_GEMM=round|cublas picks one at cu_ctx_init: a measuring switch (docs/GPU.md). */
enum { CU_GEMM_ROUND = 0, CU_GEMM_CUBLAS = 1 };
/* Which fused bf16 attention runs where it fits: FA2, mma.sync fragments in registers
 * (attention_fa2_cuda.cu; the default), or WMMA, the earlier kernels staging through shared memory
 * (attention_flash_cuda.cu), kept as the fallback. MP_ATTENTION=fa2|wmma picks one at cu_ctx_init. */
enum { CU_ATT_FA2 = 0, CU_ATT_WMMA = 1 };
/* How bf16 products hand a result to the kernel after them within one layer: BF16, results that
 * only feed another bf16 product or an element-wise pass (the head's logits and dlogits, the MLP's
 * pre-activation and the input gradient before GELU's derivative) are written in bf16 (the
 * default); FP32, in fp32 as up to the tenth run. MP_BF16_HANDOFF=bf16|fp32 picks one at
 * cu_ctx_init: a measuring switch and the fallback (docs/GPU.md). */
enum { CU_HANDOFF_BF16 = 0, CU_HANDOFF_FP32 = 1 };
/* How a bf16 forward product with a bias (matmul_forward, matmul_residual_forward) adds bias and
 * residual: EPILOGUE, in cuBLASLt's bias epilogue, out = inp·wᵀ + bias (+ res) in one product (the
 * default; only where cu_handoff_bf16, elsewhere PASS); PASS, a kernel first writes out = res + bias
 * and the product accumulates onto it (beta = 1), as up to the tenth run. MP_GEMM_BIAS=epilogue|pass
 * picks one at cu_ctx_init: a measuring switch and the fallback (docs/GPU.md). */
enum { CU_BIAS_EPILOGUE = 0, CU_BIAS_PASS = 1 };

struct cu_lt_plans; /* gemm_lt_cuda.cu: cuBLASLt descriptors and algorithms by shape and alignment */

typedef struct {
    int device;             /* CUDA ordinal */
    int precision;          /* CU_FP32 or CU_BF16 (products only); may be changed between calls */
    int bf16_gemm;          /* CU_GEMM_ROUND or CU_GEMM_CUBLAS; may be changed between calls */
    unsigned flash_sizes;   /* head sizes (16 | 32 | 64 | 128 as bits) the WMMA fused attention runs on here */
    unsigned fa2_sizes;     /* the same for the FA2 kernels */
    int attention;          /* CU_ATT_FA2 or CU_ATT_WMMA; may be changed between calls */
    int handoff;            /* CU_HANDOFF_BF16 or CU_HANDOFF_FP32; the same for a forward and its
                               backward (they share saved state in its form) */
    int gemm_bias;          /* CU_BIAS_EPILOGUE or CU_BIAS_PASS; may be changed between calls */
    unsigned long gemm_bias_fallbacks; /* EPILOGUE calls cuBLASLt offered no algorithm for: they
                                          took the PASS path (the selftest reads it) */
    cublasHandle_t blas;    /* bound to `compute` */
    cublasLtHandle_t lt;    /* cuBLASLt, for the bias epilogue; its calls name `compute` */
    void *lt_workspace;     /* device workspace of every cuBLASLt call, allocated by cu_ctx_init */
    size_t lt_workspace_bytes;
    struct cu_lt_plans *lt_plans;
    cudaStream_t compute;   /* every kernel and product */
    cudaStream_t comm;      /* pipeline p2p and data-parallel collectives */
    cudaStream_t offload;   /* host <-> device copies of stashed activations */
    void *scratch;          /* device workspace: bf16 copies of product inputs, reduction partials */
    size_t scratch_bytes;   /* its capacity */
    int scratch_planned;    /* sized by the run's bound (cu_scratch_bound): growing it in step 0 says
                             * the bound is short (an error line; the run goes on) */
    int scratch_frozen;     /* set after step 0: growing it (cudaFree, a device-wide synchronisation
                             * that would wait on other ranks' NCCL calls) is an error */
} cu_ctx_t;

/* Selects `device`, creates the streams, the cuBLAS and cuBLASLt handles and cuBLASLt's workspace.
 * 0, or -1 after a message (no driver, no device, device out of range, an unknown MP_* switch, ...);
 * on failure nothing is left allocated. */
int cu_ctx_init(cu_ctx_t *ctx, int device, int precision);
/* Waits for the streams, frees the scratch and workspace, destroys handles and streams. */
void cu_ctx_destroy(cu_ctx_t *ctx);
/* Allocates the scratch up front (before the arena takes the free memory): bytes for the largest
 * call. 0, or -1 after a message. Without it, scratch grows on first use. */
int cu_ctx_reserve(cu_ctx_t *ctx, size_t bytes);
/* Device scratch of at least `bytes`, valid until the next call that uses scratch. Growing waits for
 * `compute` first (the old block may still be in use); failure to grow is fatal, and so is growing
 * once frozen (the message names `who`, the calling function). */
void *cu_ctx_scratch_for(cu_ctx_t *ctx, size_t bytes, const char *who);
#define cu_ctx_scratch(ctx, bytes) cu_ctx_scratch_for((ctx), (bytes), __func__)
/* The scratch the kernels can ask for when a run's largest calls have B sequences of T tokens, width
 * C, vocabulary V, widest MLP F and NH heads (a tensor-parallel shard asks for less): the largest of
 * every kernel's request at those shapes (products forward and backward, the head, attention's
 * unfused and fused paths, LayerNorm's partials, the embedding's sort, the norm's sums) and an eighth
 * more. For cu_ctx_reserve before the first step. */
size_t cu_scratch_bound(int B, int T, int C, int V, int F, int NH);
/* Blocks until all work enqueued on ctx->compute is done; fatal on a device error. */
void cu_ctx_sync(cu_ctx_t *ctx);
/* Scratch bytes a product call needs in bf16 mode for inputs of n_a and n_b floats (planning aid
 * for cu_ctx_reserve). */
size_t cu_gemm_scratch_bytes(size_t n_a, size_t n_b);

/* One (strided-batched) product in the row-major convention of kernels.h, routed by precision:
 * C (m,n) = alpha · op(A) (m,k) · op(B) (k,n) + beta · C for each of `batch` items, A, B, C
 * advancing by stride_a/b/c elements; trans_* nonzero means the stored matrix is transposed
 * (A stored (k,m) with leading dimension lda). Used by matmul and attention. */
void cu_gemm(cu_ctx_t *ctx, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *A, int lda,
             long long stride_a, const float *B, int ldb, long long stride_b, float beta, float *C, int ldc,
             long long stride_c, int batch);

/* ---- token + position embedding ---- */
void cu_encoder_forward(cu_ctx_t *ctx, float *out, const int *tokens, const float *wte, const float *wpe, int B,
                        int T, int C, int v0, int vn);
void cu_position_forward(cu_ctx_t *ctx, float *out, const float *wpe, int B, int T, int C);
/* Same summation order as the CPU (tokens in order per (row, channel)): bitwise equal to it. */
void cu_encoder_backward(cu_ctx_t *ctx, float *dwte, float *dwpe, const float *dout, const int *tokens, int B,
                         int T, int C, int v0, int vn);

/* ---- LayerNorm ---- */
void cu_layernorm_forward(cu_ctx_t *ctx, float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, int N, int C);
/* Uses scratch for the dw/db partials. */
void cu_layernorm_backward(cu_ctx_t *ctx, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, int N, int C);

/* ---- dense product ---- */
void cu_matmul_forward(cu_ctx_t *ctx, float *out, const float *inp, const float *w, const float *bias, int N, int C,
                       int OC);
void cu_matmul_residual_forward(cu_ctx_t *ctx, float *out, const float *res, const float *inp, const float *w,
                                const float *bias, int N, int C, int OC);
/* Uses scratch (bf16 copies, dbias partials). */
void cu_matmul_backward(cu_ctx_t *ctx, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                        const float *w, int N, int C, int OC);
/* Uses scratch (bf16 copies, dbias partials). cu_matmul_backward's weight half: the same calls. */
void cu_matmul_backward_weight(cu_ctx_t *ctx, float *dw, float *dbias, const float *dout, const float *inp, int N,
                               int C, int OC);

/* ---- causal multi-head self-attention ---- */
/* fp32, and bf16 where cu_attention_flash_fits is 0: cuBLAS products over the whole (T,T) block of
 * each head, written to att (zeros above the diagonal), as on the CPU.
 * bf16 where it fits: the fused kernels of attention_flash_cuda.cu, whose att holds not the
 * probabilities but the log-sum-exp of each (b, h, query) row and a copy of out, all backward needs;
 * datt is their scratch. So att is only meaningful to cu_attention_backward there. */
void cu_attention_forward(cu_ctx_t *ctx, float *out, float *att, const float *qkv, int B, int T, int C, int NH);
void cu_attention_backward(cu_ctx_t *ctx, float *dqkv, float *datt, const float *dout, const float *qkv,
                           const float *att, int B, int T, int C, int NH);
/* Grouped-query attention (kernels.h): the two above are these with KVH = NH, the same calls.
 * KVH = NH takes the fused path where it fits, as above; KVH < NH always the cuBLAS products, with
 * att (B,NH,T,T) the probabilities in fp32 and in bf16 alike (dk, dv summed over a group's query
 * heads in head order by the products' beta, no atomics). NH not a positive multiple of KVH stops
 * the job with a message. */
void cu_attention_gqa_forward(cu_ctx_t *ctx, float *out, float *att, const float *qkv, int B, int T, int C, int NH,
                              int KVH);
void cu_attention_gqa_backward(cu_ctx_t *ctx, float *dqkv, float *datt, const float *dout, const float *qkv,
                               const float *att, int B, int T, int C, int NH, int KVH);
/* 1 when the fused path runs: bf16, a head size of ctx->flash_sizes or ctx->fa2_sizes (16, 32, 64
 * or 128 where compute capability is 8 or more and the block's shared memory suffices), and att
 * large enough for its contents (T > head size). Which kernels run: ctx->attention's where they
 * take the head size, else the other's. Both keep the same att/datt contract. */
int cu_attention_flash_fits(const cu_ctx_t *ctx, int B, int T, int C, int NH);
/* Once per context, from cu_ctx_init on compute capability 8 and up: lets the fused kernels use
 * their shared memory, and sets *sizes to the head sizes they run on (those whose blocks fit the
 * device's shared memory). 0, or -1 after a message. */
int cu_attention_flash_setup(int device, unsigned *sizes);
void cu_attention_flash_forward(cu_ctx_t *ctx, float *out, float *att, const float *qkv, int B, int T, int C, int NH);
void cu_attention_flash_backward(cu_ctx_t *ctx, float *dqkv, float *datt, const float *dout, const float *qkv,
                                 const float *att, int B, int T, int C, int NH);
/* The FA2 kernels (called by the two above): the set-up as cu_attention_flash_setup's. The forward
 * rounds q, k, v to bf16 head-major planes kept in att past the output's copy where att has room
 * (about 2.5·C <= NH·T), and the backward reads them there instead of rounding qkv again; else
 * both round into context scratch (dO always there). cu_attention_fa2_keep writes those planes
 * alone: the WMMA forward calls it, so that either variant's backward may follow either's forward. */
int cu_attention_fa2_setup(int device, unsigned *sizes);
void cu_attention_fa2_keep(cu_ctx_t *ctx, float *att, const float *qkv, int B, int T, int C, int NH);
void cu_attention_fa2_forward(cu_ctx_t *ctx, float *out, float *att, const float *qkv, int B, int T, int C, int NH);
void cu_attention_fa2_backward(cu_ctx_t *ctx, float *dqkv, float *datt, const float *dout, const float *qkv,
                               const float *att, int B, int T, int C, int NH);

/* ---- GELU ---- */
void cu_gelu_forward(cu_ctx_t *ctx, float *out, const float *inp, size_t n);
void cu_gelu_backward(cu_ctx_t *ctx, float *dinp, const float *inp, const float *dout, size_t n);
/* The product, then one element-wise kernel: not fused on the GPU (kernels.h has the contract). */
void cu_matmul_gelu_forward(cu_ctx_t *ctx, float *out, float *dgelu, const float *inp, const float *w,
                            const float *bias, int N, int C, int OC);
void cu_matmul_backward_gelu(cu_ctx_t *ctx, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                             const float *w, const float *dgelu, int N, int C, int OC);
/* The MLP's projection on the hidden activation matmul_gelu_forward left (kernels.h): under the bf16
 * handoff (cu_handoff_bf16) that activation is kept in bf16, its N·OC values in the first half of
 * the fp32-sized buffer, written once by the GELU kernel and read as they are by these products
 * and by cu_matmul_backward_gelu (no rounding pass over it, the same bf16 values the products
 * rounded before); otherwise fp32 and these are cu_matmul_residual_forward / cu_matmul_forward and
 * cu_matmul_backward_weight. */
void cu_mlp_proj_forward(cu_ctx_t *ctx, float *out, const float *res, const float *inp, const float *w,
                         const float *bias, int N, int C, int OC);
void cu_mlp_proj_backward_weight(cu_ctx_t *ctx, float *dw, float *dbias, const float *dout, const float *inp, int N,
                                 int C, int OC);
/* The hidden activation's form, for tests and tools that fill or read it: n fp32 values into a hidden
 * buffer (dst), and a hidden buffer's n values out as fp32 (dst; not the same buffer as src). */
void cu_mlp_hidden_from_fp32(cu_ctx_t *ctx, float *dst, const float *src, size_t n);
void cu_mlp_hidden_to_fp32(cu_ctx_t *ctx, float *dst, const float *src, size_t n);
/* The fc product's backward on the input gradient matmul_backward_gelu left (kernels.h): under the
 * bf16 handoff, where it fits (cu_dhidden_kept), that gradient is kept in bf16 with its column
 * sums' 64-row partials beside (the first half of the (N,C) buffer, then the partials), written by
 * matmul_backward_gelu in the pass that applies GELU's derivative; these read it as it is (the same
 * bits as rounding and summing an fp32 copy). Otherwise fp32 and these are cu_matmul_backward and
 * cu_matmul_backward_weight. N, C: the gradient's shape, the product's (N, OC). */
int cu_dhidden_kept(const cu_ctx_t *ctx, int N, int C);
void cu_mlp_fc_backward(cu_ctx_t *ctx, float *dinp, float *dw, float *dbias, const float *dhidden, const float *inp,
                        const float *w, int N, int C, int OC);
void cu_mlp_fc_backward_weight(cu_ctx_t *ctx, float *dw, float *dbias, const float *dhidden, const float *inp, int N,
                               int C, int OC);
/* That gradient's form for tests and tools: (N,C) fp32 values into a gradient buffer, and out as fp32. */
void cu_mlp_dhidden_from_fp32(cu_ctx_t *ctx, float *dst, const float *src, int N, int C);
void cu_mlp_dhidden_to_fp32(cu_ctx_t *ctx, float *dst, const float *src, int N, int C);

/* ---- the Llama family's layers (rmsnorm_cuda.cu, rope_cuda.cu, swiglu_cuda.cu): fp32, the
 * per-element math of math_rmsnorm.h, math_rope.h and math_swiglu.h ---- */
void cu_rmsnorm_forward(cu_ctx_t *ctx, float *out, float *rstd, const float *inp, const float *w, int N, int C,
                        float eps);
/* Uses scratch for the dw partials (64-row chunks, summed in a fixed order). */
void cu_rmsnorm_backward(cu_ctx_t *ctx, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                         const float *rstd, int N, int C);
/* cs: the host's rope_table_init table copied to the device, (Tmax, hs) with Tmax >= pos0 + T. */
void cu_rope_forward(cu_ctx_t *ctx, float *qkv, const float *cs, int pos0, int B, int T, int NH, int KVH, int hs);
void cu_rope_backward(cu_ctx_t *ctx, float *dqkv, const float *cs, int pos0, int B, int T, int NH, int KVH, int hs);
void cu_swiglu_forward(cu_ctx_t *ctx, float *out, const float *inp, int N, int F);
void cu_swiglu_backward(cu_ctx_t *ctx, float *dinp, const float *dout, const float *inp, int N, int F);

/* ---- softmax cross-entropy ---- */
void cu_crossentropy_forward(cu_ctx_t *ctx, float *losses, float *probs_logits, const int *targets, int N, int V);
void cu_crossentropy_backward(cu_ctx_t *ctx, float *dlogits, const float *probs, const int *targets, float dloss,
                              int N, int V, int v0);
/* The head (kernels.h). With bf16 products, our rounding and MP_BF16_HANDOFF=bf16
 * (cu_handoff_bf16) and V >= 4: the product writes the logits in bf16 into the first N·V/2 floats
 * of store, the cross-entropy reads them once and leaves each row's max and 1/Σexp in store's last
 * 2N floats; the backward turns the logits into bf16 dlogits in place and the two products read
 * them as they are (no fp32 logits, probabilities or dlogits, no rounding pass over them).
 * Otherwise the kernels.h composition (matmul_forward, crossentropy_forward, ...), the same calls. */
void cu_head_forward(cu_ctx_t *ctx, float *losses, float *store, const float *inp, const float *w, const int *targets,
                     int N, int C, int V);
void cu_head_backward(cu_ctx_t *ctx, float *dinp, float *dw, float *store, const float *inp, const float *w,
                      const int *targets, float dloss, int N, int C, int V);
void cu_head_backward_weight(cu_ctx_t *ctx, float *dw, const float *store, const float *inp, int N, int C, int V);
void cu_xent_local_max(cu_ctx_t *ctx, float *max, float *tlogit, const float *logits, const int *targets, int N,
                       int Vl, int v0, int valid);
void cu_xent_local_expsum(cu_ctx_t *ctx, float *sum, float *logits, const float *max, int N, int Vl, int valid);
void cu_xent_finish(cu_ctx_t *ctx, float *losses, float *probs, const float *max, const float *sum,
                    const float *tlogit, int N, int Vl);

/* ---- optimizer and reductions ---- */
void cu_adamw_update(cu_ctx_t *ctx, float *param, const float *grad, float *m, float *v, size_t n, float lr,
                     float beta1, float beta2, float eps, float wd, int t, float grad_scale);
/* cu_adamw_update on each of count tensors of the flat buffers (kernels.h adamw_each), the same bits,
 * in a few launches: off, n and wd are host arrays, copied into each launch's arguments. */
void cu_adamw_each(cu_ctx_t *ctx, float *param, const float *grad, float *m, float *v, const size_t *off,
                   const size_t *n, const float *wd, int count, float lr, float beta1, float beta2, float eps, int t,
                   float grad_scale);
/* Σ x², 4096-element chunks in double, chunks summed by a fixed tree: returns the value to the host
 * (synchronises ctx->compute). Uses scratch. */
double cu_sumsq(cu_ctx_t *ctx, const float *x, size_t n);
/* out[i] (host) = cu_sumsq(x[i] (device), n[i]) for i < count, the same bits, with one wait for the
 * host: two launches per batch of tensors and one copy back. x and n are host arrays. Uses scratch. */
void cu_sumsq_each(cu_ctx_t *ctx, double *out, const float *const *x, const size_t *n, int count);
void cu_vec_add(cu_ctx_t *ctx, float *out, const float *a, const float *b, size_t n);

/* ---- device-memory arena: one cudaMalloc, bump allocation ---- */
#define CU_ARENA_ALIGN 256                      /* bytes: cuBLAS and vector loads like this */
/* Left free for cuBLAS's workspace, NCCL's communicators (made after the arena: NCCL 2.28's
 * ncclCommInitRank failed on an H200 when only 1 GiB was left) and scratch: the larger of 4 GiB and
 * a sixteenth of the device's memory. */
#define CU_ARENA_MIN_MARGIN ((size_t)4 << 30)
size_t cu_arena_default_margin(size_t total_bytes);

typedef struct {
    char *base;       /* device memory */
    size_t capacity;  /* bytes */
    size_t in_use;    /* bytes handed out (with alignment padding) */
    size_t peak;      /* high-water mark of in_use */
    int count;        /* allocations since init */
} cu_arena_t;

/* Capacity = free device memory (cudaMemGetInfo) − margin (0 = cu_arena_default_margin), capped at
 * limit when limit > 0. 0, or -1 after a message. */
int cu_arena_init(cu_arena_t *a, size_t limit, size_t margin);
/* 256-byte aligned, uninitialised. NULL after a message naming `what`, the request and the
 * capacity when it does not fit. */
void *cu_arena_alloc(cu_arena_t *a, size_t bytes, const char *what);
/* Stack discipline for activations: release returns everything allocated after the mark. */
size_t cu_arena_mark(const cu_arena_t *a);
void cu_arena_release(cu_arena_t *a, size_t mark);
void cu_arena_destroy(cu_arena_t *a);

/* Pinned host memory (cudaMallocHost) for asynchronous copies; NULL after a message. */
void *cu_host_alloc(size_t bytes, const char *what);
void cu_host_free(void *p);

/* The bf16 gradient buckets' wire on `stream` (bf16_wire_cuda.cu), wire being n bf16 elements:
 * wire[i] = bf16(src[i]) rounded as cu_bf16_round, and dst[i] = wire[i] widened (exact), i < n. */
void cu_wire_round(cudaStream_t stream, void *wire, const float *src, size_t n);
void cu_wire_widen(cudaStream_t stream, float *dst, const void *wire, size_t n);

#ifdef __cplusplus
}
#endif

/* ---- internal to the .cu files: bf16 products on operands rounded beforehand ----
 * A caller that feeds one fp32 tensor to several products (matmul_backward's dout: dinp = dout·w
 * and dw += doutᵀ·inp) rounds it once and hands the bf16 copy to each. Contract:
 *  - only when cu_gemm_prerounds(ctx): bf16 precision with our rounding (CU_GEMM_ROUND); fp32 and
 *    CU_GEMM_CUBLAS go through cu_gemm as before;
 *  - the copy covers the operand's whole span (cu_gemm_span, the elements cu_gemm would round) and
 *    keeps its leading dimension and stride, so cu_gemm_bf16_pre gives cu_gemm's bits;
 *  - every piece a call needs (bf16 copies, reduction partials) comes from ONE cu_ctx_scratch
 *    request, split at cu_bf16_bytes offsets (256-aligned, as cuBLAS and the vector kernels want):
 *    growing the scratch frees the old block, so a pointer from an earlier request may dangle;
 *  - cu_gemm itself uses the scratch, so no cu_gemm call may sit between the rounding and the
 *    cu_gemm_bf16_pre calls that read it. */
#ifdef __CUDACC__
#include <cuda_bf16.h>

/* Bytes one bf16 copy of n elements takes in scratch, rounded up to 256. */
size_t cu_bf16_bytes(size_t n);
/* Nonzero when products round their operands with our kernel (bf16, CU_GEMM_ROUND). */
int cu_gemm_prerounds(const cu_ctx_t *ctx);
/* Nonzero when bf16 products hand results on in bf16 (cu_gemm_prerounds and CU_HANDOFF_BF16). */
int cu_handoff_bf16(const cu_ctx_t *ctx);
/* Elements one operand of cu_gemm spans: op(X) is (rows_op, cols_op), stored transposed when trans. */
size_t cu_gemm_span(int trans, int rows_op, int cols_op, int ld, long long stride, int batch);
/* dst[i] = bf16(src[i]), round to nearest even (__float2bfloat16), i < n; any src offset. */
void cu_bf16_round(cu_ctx_t *ctx, __nv_bfloat16 *dst, const float *src, size_t n);
/* cu_gemm's bf16 product on operands already rounded (same arguments, bf16 A and B). */
void cu_gemm_bf16_pre(cu_ctx_t *ctx, int trans_a, int trans_b, int m, int n, int k, float alpha,
                      const __nv_bfloat16 *A, int lda, long long stride_a, const __nv_bfloat16 *B, int ldb,
                      long long stride_b, float beta, float *C, int ldc, long long stride_c, int batch);

/* cu_gemm_bf16_pre's product (batch 1, beta 0) written as bf16: C = bf16(alpha · op(A)·op(B)), the
 * fp32 accumulator rounded to nearest even once. */
void cu_gemm_bf16_out(cu_ctx_t *ctx, int trans_a, int trans_b, int m, int n, int k, float alpha,
                      const __nv_bfloat16 *A, int lda, const __nv_bfloat16 *B, int ldb, __nv_bfloat16 *C, int ldc);

/* The fused head's cross-entropy on bf16 logits (N,V) (head_cuda.cu): forward, losses (N) = and
 * stats (2N: each row's max, then 1/Σexp(x − max)) = ; backward, logits := dlogits in bf16, in place,
 * from the stats the forward left. */
void cu_xent16_forward(cu_ctx_t *ctx, float *losses, float *stats, const __nv_bfloat16 *logits, const int *targets,
                       int N, int V);
void cu_xent16_backward(cu_ctx_t *ctx, __nv_bfloat16 *logits, const float *stats, const int *targets, float dloss,
                        int N, int V);

/* cu_matmul_backward with its input gradient handed on in bf16, for cu_matmul_backward_gelu under
 * cu_handoff_bf16 (the caller checks; cu_gemm_prerounds at least): dw and dbias as
 * cu_matmul_backward, the same bits; dout · w (N,C) written as bf16 into scratch and returned, valid
 * until the next call that uses scratch. */
const __nv_bfloat16 *cu_matmul_backward_bf16_dinp(cu_ctx_t *ctx, float *dw, float *dbias, const float *dout,
                                                  const float *inp, const __nv_bfloat16 *inp16, const float *w,
                                                  int N, int C, int OC);
/* matmul_backward_gelu's input gradient kept (cu_dhidden_kept): dhidden (N,C) := bf16(float(p) · dgelu)
 * with the 64-row column partials of the fp32 products, as cu_mlp_fc_backward reads them. */
void cu_gelu_grad_keep(cu_ctx_t *ctx, float *dhidden, const __nv_bfloat16 *p, const float *dgelu, int N, int C);
/* cu_matmul_backward (no dbias) on a dout already in bf16 (the fused head's dlogits): the same
 * products, on w and inp rounded as that call rounds them. */
void cu_matmul_backward_dout16(cu_ctx_t *ctx, float *dinp, float *dw, const __nv_bfloat16 *dout16, const float *inp,
                               const float *w, int N, int C, int OC);
/* cu_matmul_backward_weight on an input kept in bf16 (inp16, the MLP's hidden activation under the
 * bf16 handoff): the same products and dbias order, no rounding pass over the input. */
void cu_matmul_backward_weight_pre(cu_ctx_t *ctx, float *dw, float *dbias, const float *dout,
                                   const __nv_bfloat16 *inp16, int N, int C, int OC);
/* ---- cuBLASLt (gemm_lt_cuda.cu) ---- */
/* cu_ctx_init's part: the handle, the workspace, an empty plan table. 0, or -1 after a message with
 * nothing left allocated. */
int cu_lt_init(cu_ctx_t *ctx);
/* cu_ctx_destroy's part (after the device is idle). Safe on a context cu_lt_init did not finish. */
void cu_lt_destroy(cu_ctx_t *ctx);
/* out (N,OC) = inp (N,C) · w (OC,C)ᵀ + bias (+ res where res is not NULL) in one cuBLASLt product
 * with the bias epilogue: inp and w rounded to bf16 into ONE scratch request (cu_gemm's offsets),
 * fp32 accumulation, res read as C with beta = 1, bias (fp32, length OC) added to every row, out
 * written once. out and res are the same buffer (in place) or do not overlap. Only for bf16 with
 * our rounding (cu_gemm_prerounds). KERN_OK when enqueued; KERN_ERR with nothing enqueued when a
 * dimension is 0, or when cuBLASLt offers no algorithm for this shape and these alignments (then
 * ctx->gemm_bias_fallbacks counts it): the caller takes the pass path. */
int cu_matmul_bias_lt(cu_ctx_t *ctx, float *out, const float *res, const float *inp, const float *w,
                      const float *bias, int N, int C, int OC);
/* The same with inp already in bf16 (a kept input, any alignment cuBLASLt accepts): w alone rounded. */
int cu_matmul_bias_lt_pre(cu_ctx_t *ctx, float *out, const float *res, const __nv_bfloat16 *inp16, const float *w,
                          const float *bias, int N, int C, int OC);

/* Four bf16 for one 8-byte store. */
struct __align__(8) cu_bf16x4 {
    __nv_bfloat16 v[4];
};
/* Element by element through __float2bfloat16: the scalar rounding's bits. */
static __device__ __forceinline__ cu_bf16x4 cu_bf16x4_round(float4 x)
{
    cu_bf16x4 r;
    r.v[0] = __float2bfloat16(x.x);
    r.v[1] = __float2bfloat16(x.y);
    r.v[2] = __float2bfloat16(x.z);
    r.v[3] = __float2bfloat16(x.w);
    return r;
}

/* The kernels over many tensors at once (cu_sumsq_each, cu_adamw_each) give tensor i the blocks
 * [first[i], first[i+1]) of one launch: the tensor owning block blk, the last i with first[i] <= blk
 * (an empty tensor owns no block), by binary search over count entries. */
static __device__ __forceinline__ int cu_batch_owner(const unsigned *first, int count, unsigned blk)
{
    int lo = 0, hi = count - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (first[mid] <= blk) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}
#endif

#endif
