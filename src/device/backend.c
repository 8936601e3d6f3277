/* The backends of backend.h. cpu calls the kernels directly; emu opens its region around each call
 * (the kernels and MPI run on it inside, host code outside faults); cuda forwards to backend_cuda.c
 * and the cu_* kernels. */
#include "config.h"

#include "backend.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "kernels.h"

#ifdef MP_HAVE_CUDA
#include "backend_cuda.h"
#include "kernels_cuda.h"
/* cuda: the cu_ twin of the call, then return. */
#define BE_CUDA(be, call)                  \
    do {                                   \
        if ((be)->kind == BE_CUDA) {       \
            cu_ctx_t *cx_ = bcu_ctx(be);   \
            (void)cx_;                     \
            call;                          \
            return;                        \
        }                                  \
    } while (0)
#define BE_CUDA_RET(be, call)                  \
    do {                                       \
        if ((be)->kind == BE_CUDA) {           \
            cu_ctx_t *cx_ = bcu_ctx(be);       \
            (void)cx_;                         \
            return call;                       \
        }                                      \
    } while (0)
#else
#define BE_CUDA(be, call) ((void)0)
#define BE_CUDA_RET(be, call) ((void)0)
#endif

/* emu: the region readable for the duration of a call (nested calls keep it open). */
static void emu_protect(backend_t *be, int prot)
{
    if (mprotect(be->base, be->capacity, prot) != 0) MP_ABORT("mprotect of the emulated device region failed");
}

static void be_open(backend_t *be)
{
    if (be->kind == BE_EMU && be->open++ == 0) emu_protect(be, PROT_READ | PROT_WRITE);
}

static void be_close(backend_t *be)
{
    if (be->kind == BE_EMU && --be->open == 0) emu_protect(be, PROT_NONE);
}

/* A CPU kernel on the backend's memory. */
#define BE_CPU(be, call) \
    do {                 \
        be_open(be);     \
        call;            \
        be_close(be);    \
    } while (0)

int be_kind_parse(const char *name, be_kind_t *kind)
{
    if (!strcmp(name, "cpu")) *kind = BE_CPU;
    else if (!strcmp(name, "emu")) *kind = BE_EMU;
    else if (!strcmp(name, "cuda")) *kind = BE_CUDA;
    else return MP_FAIL("train.device=%s: expected cpu, emu or cuda", name);
    return MP_OK;
}

static void zero_cb(void *ctx, void *p, size_t bytes) { be_zero(ctx, p, bytes); }

/* emu's default region: address space only (MAP_NORESERVE), pages appear as they are touched. */
#define EMU_DEFAULT_CAPACITY ((size_t)8 << 30)

int be_init(backend_t *be, be_kind_t kind, arena_t *arena, size_t capacity, int device, int precision,
            const wait_cfg_t *wait)
{
    memset(be, 0, sizeof *be);
    be->kind = kind;
    be->wait = wait;
    (void)device, (void)precision;
    if (kind == BE_CPU) return MP_OK;
    if (kind == BE_EMU) {
        /* with a limit, the arena's accounting refuses first (the slack covers the 256-byte rounding) */
        size_t cap = capacity ? capacity + ((size_t)1 << 20) : EMU_DEFAULT_CAPACITY;
        cap = (cap + 4095) / 4096 * 4096;
        void *p = mmap(NULL, cap, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) return MP_FAIL("train.device=emu: cannot reserve %zu bytes of address space", cap);
        be->base = p;
        be->capacity = cap;
    } else {
#ifdef MP_HAVE_CUDA
        if (bcu_init(be, device, precision, capacity) != MP_OK) return MP_ERR;
#else
        return MP_FAIL("train.device=cuda: this build has only the CPU backend (configure --with-cuda)");
#endif
    }
    arena_bind_region(arena, be->base, be->capacity, zero_cb, be);
    return MP_OK;
}

void be_destroy(backend_t *be)
{
    free(be->bucket_req);
    be->bucket_req = NULL;
    if (be->kind == BE_EMU && be->base) munmap(be->base, be->capacity);
#ifdef MP_HAVE_CUDA
    if (be->kind == BE_CUDA) bcu_destroy(be);
#endif
    be->base = NULL;
}

void be_comm_add(backend_t *be, MPI_Comm comm)
{
#ifdef MP_HAVE_CUDA
    if (be->kind == BE_CUDA && comm != MPI_COMM_NULL) bcu_comm_add(be, comm);
#else
    (void)be, (void)comm;
#endif
}

/* ---- memory ---- */

void be_zero(backend_t *be, void *dev, size_t bytes)
{
    BE_CUDA(be, bcu_zero(be, dev, bytes));
    BE_CPU(be, memset(dev, 0, bytes));
}

void be_copy(backend_t *be, void *dev_dst, const void *dev_src, size_t bytes)
{
    BE_CUDA(be, bcu_copy(be, dev_dst, dev_src, bytes, 0));
    BE_CPU(be, memmove(dev_dst, dev_src, bytes));
}

void be_to_device(backend_t *be, void *dev_dst, const void *host_src, size_t bytes)
{
    BE_CUDA(be, bcu_copy(be, dev_dst, host_src, bytes, 1));
    if (dev_dst == host_src) return; /* cpu: the same buffer */
    BE_CPU(be, memcpy(dev_dst, host_src, bytes));
}

void be_to_host(backend_t *be, void *host_dst, const void *dev_src, size_t bytes)
{
    BE_CUDA(be, bcu_copy(be, host_dst, dev_src, bytes, 2));
    if (host_dst == dev_src) return;
    BE_CPU(be, memcpy(host_dst, dev_src, bytes));
}

void *be_host_alloc(backend_t *be, size_t bytes)
{
    BE_CUDA_RET(be, bcu_host_alloc(be, bytes));
    return mem_zalloc(bytes);
}

void be_host_free(backend_t *be, void *p)
{
    BE_CUDA(be, bcu_host_free(be, p));
    free(p);
}

void be_sync(backend_t *be) { BE_CUDA(be, bcu_sync(be)); }

/* ---- kernels ---- */

void be_encoder_forward(backend_t *be, float *out, const int *tokens, const float *wte, const float *wpe, int B,
                        int T, int C, int v0, int vn)
{
    BE_CUDA(be, cu_encoder_forward(cx_, out, tokens, wte, wpe, B, T, C, v0, vn));
    BE_CPU(be, encoder_forward(out, tokens, wte, wpe, B, T, C, v0, vn));
}

void be_position_forward(backend_t *be, float *out, const float *wpe, int B, int T, int C)
{
    BE_CUDA(be, cu_position_forward(cx_, out, wpe, B, T, C));
    BE_CPU(be, position_forward(out, wpe, B, T, C));
}

void be_encoder_backward(backend_t *be, float *dwte, float *dwpe, const float *dout, const int *tokens, int B,
                         int T, int C, int v0, int vn)
{
    BE_CUDA(be, cu_encoder_backward(cx_, dwte, dwpe, dout, tokens, B, T, C, v0, vn));
    BE_CPU(be, encoder_backward(dwte, dwpe, dout, tokens, B, T, C, v0, vn));
}

void be_layernorm_forward(backend_t *be, float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, int N, int C)
{
    BE_CUDA(be, cu_layernorm_forward(cx_, out, mean, rstd, inp, w, b, N, C));
    BE_CPU(be, layernorm_forward(out, mean, rstd, inp, w, b, N, C));
}

void be_layernorm_backward(backend_t *be, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, int N, int C)
{
    BE_CUDA(be, cu_layernorm_backward(cx_, dinp, dw, db, dout, inp, w, mean, rstd, N, C));
    BE_CPU(be, layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C));
}

void be_matmul_forward(backend_t *be, float *out, const float *inp, const float *w, const float *bias, int N, int C,
                       int OC)
{
    BE_CUDA(be, cu_matmul_forward(cx_, out, inp, w, bias, N, C, OC));
    BE_CPU(be, matmul_forward(out, inp, w, bias, N, C, OC));
}

void be_matmul_residual_forward(backend_t *be, float *out, const float *res, const float *inp, const float *w,
                                const float *bias, int N, int C, int OC)
{
    BE_CUDA(be, cu_matmul_residual_forward(cx_, out, res, inp, w, bias, N, C, OC));
    BE_CPU(be, matmul_residual_forward(out, res, inp, w, bias, N, C, OC));
}

void be_matmul_backward(backend_t *be, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                        const float *w, int N, int C, int OC)
{
    BE_CUDA(be, cu_matmul_backward(cx_, dinp, dw, dbias, dout, inp, w, N, C, OC));
    BE_CPU(be, matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC));
}

void be_attention_forward(backend_t *be, float *out, float *att, const float *qkv, int B, int T, int C, int NH)
{
    BE_CUDA(be, cu_attention_forward(cx_, out, att, qkv, B, T, C, NH));
    BE_CPU(be, attention_forward(out, att, qkv, B, T, C, NH));
}

void be_attention_backward(backend_t *be, float *dqkv, float *datt, const float *dout, const float *qkv,
                           const float *att, int B, int T, int C, int NH)
{
    BE_CUDA(be, cu_attention_backward(cx_, dqkv, datt, dout, qkv, att, B, T, C, NH));
    BE_CPU(be, attention_backward(dqkv, datt, dout, qkv, att, B, T, C, NH));
}

void be_gelu_forward(backend_t *be, float *out, const float *inp, size_t n)
{
    BE_CUDA(be, cu_gelu_forward(cx_, out, inp, n));
    BE_CPU(be, gelu_forward(out, inp, n));
}

void be_gelu_backward(backend_t *be, float *dinp, const float *inp, const float *dout, size_t n)
{
    BE_CUDA(be, cu_gelu_backward(cx_, dinp, inp, dout, n));
    BE_CPU(be, gelu_backward(dinp, inp, dout, n));
}

void be_crossentropy_forward(backend_t *be, float *losses, float *probs_logits, const int *targets, int N, int V)
{
    BE_CUDA(be, cu_crossentropy_forward(cx_, losses, probs_logits, targets, N, V));
    BE_CPU(be, crossentropy_forward(losses, probs_logits, targets, N, V));
}

void be_crossentropy_backward(backend_t *be, float *dlogits, const float *probs, const int *targets, float dloss,
                              int N, int V, int v0)
{
    BE_CUDA(be, cu_crossentropy_backward(cx_, dlogits, probs, targets, dloss, N, V, v0));
    BE_CPU(be, crossentropy_backward(dlogits, probs, targets, dloss, N, V, v0));
}

void be_xent_local_max(backend_t *be, float *max, float *tlogit, const float *logits, const int *targets, int N,
                       int Vl, int v0, int valid)
{
    BE_CUDA(be, cu_xent_local_max(cx_, max, tlogit, logits, targets, N, Vl, v0, valid));
    BE_CPU(be, xent_local_max(max, tlogit, logits, targets, N, Vl, v0, valid));
}

void be_xent_local_expsum(backend_t *be, float *sum, float *logits, const float *max, int N, int Vl, int valid)
{
    BE_CUDA(be, cu_xent_local_expsum(cx_, sum, logits, max, N, Vl, valid));
    BE_CPU(be, xent_local_expsum(sum, logits, max, N, Vl, valid));
}

void be_xent_finish(backend_t *be, float *losses, float *probs, const float *max, const float *sum,
                    const float *tlogit, int N, int Vl)
{
    BE_CUDA(be, cu_xent_finish(cx_, losses, probs, max, sum, tlogit, N, Vl));
    BE_CPU(be, xent_finish(losses, probs, max, sum, tlogit, N, Vl));
}

void be_adamw_update(backend_t *be, float *param, const float *grad, float *m, float *v, size_t n, float lr,
                     float beta1, float beta2, float eps, float wd, int t, float grad_scale)
{
    BE_CUDA(be, cu_adamw_update(cx_, param, grad, m, v, n, lr, beta1, beta2, eps, wd, t, grad_scale));
    BE_CPU(be, adamw_update(param, grad, m, v, n, lr, beta1, beta2, eps, wd, t, grad_scale));
}

double be_sumsq(backend_t *be, const float *x, size_t n)
{
    BE_CUDA_RET(be, cu_sumsq(cx_, x, n));
    double s;
    BE_CPU(be, s = sumsq(x, n));
    return s;
}

void be_vec_add(backend_t *be, float *out, const float *a, const float *b, size_t n)
{
    BE_CUDA(be, cu_vec_add(cx_, out, a, b, n));
    BE_CPU(be, vec_add(out, a, b, n));
}

/* ---- collectives ---- */

void be_allreduce(backend_t *be, float *buf, size_t n, MPI_Op op, MPI_Comm comm, const char *what)
{
    BE_CUDA(be, bcu_allreduce(be, buf, n, op, comm));
    if (n > INT32_MAX) MP_ABORT("%s: %zu elements, more than one MPI call takes", what, n);
    BE_CPU(be, wait_allreduce(be->wait, buf, (int)n, MPI_FLOAT, op, comm, what));
}

int be_buckets_reserve(backend_t *be, int max)
{
    free(be->bucket_req);
    be->bucket_req = MP_CALLOC((size_t)(max > 0 ? max : 1), sizeof *be->bucket_req);
    be->max_buckets = max;
    be->nbuckets = 0;
    return be->bucket_req ? MP_OK : MP_ERR;
}

void be_bucket_start(backend_t *be, float *buf, size_t n, MPI_Comm comm)
{
    if (be->kind == BE_EMU) { /* MPI would touch the region in later calls, where it is closed */
        be_allreduce(be, buf, n, MPI_SUM, comm, "a data-parallel gradient bucket");
        return;
    }
    if (be->nbuckets == be->max_buckets) MP_ABORT("more gradient buckets than planned (%d)", be->max_buckets);
    be->nbuckets++;
    BE_CUDA(be, bcu_bucket_start(be, buf, n, comm));
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, comm, &be->bucket_req[be->nbuckets - 1]));
}

void be_buckets_progress(backend_t *be)
{
    if (be->kind != BE_CPU) return;
    for (int i = 0; i < be->nbuckets; i++) {
        int done;
        MPI_CHECK(MPI_Test(&be->bucket_req[i], &done, MPI_STATUS_IGNORE));
    }
}

void be_buckets_wait(backend_t *be, const char *what)
{
    const int n = be->nbuckets;
    be->nbuckets = 0;
    BE_CUDA(be, bcu_buckets_wait(be));
    if (be->kind == BE_CPU) wait_all(be->wait, n, be->bucket_req, what);
}

void be_reduce_scatter(backend_t *be, const float *send, float *recv, size_t count, MPI_Comm comm, const char *what)
{
    BE_CUDA(be, bcu_reduce_scatter(be, send, recv, count, comm));
    MPI_Request r;
    be_open(be);
    MPI_CHECK(MPI_Ireduce_scatter_block(send, recv, (int)count, MPI_FLOAT, MPI_SUM, comm, &r));
    wait_all(be->wait, 1, &r, what);
    be_close(be);
}

void be_allgather(backend_t *be, float *buf, size_t count, MPI_Comm comm, const char *what)
{
    BE_CUDA(be, bcu_allgather(be, buf, count, comm));
    MPI_Request r;
    be_open(be);
    MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)count, MPI_FLOAT, comm, &r));
    wait_all(be->wait, 1, &r, what);
    be_close(be);
}

/* ---- pipeline point-to-point on the device: cuda only (run.c refuses parallel.p2p=nccl elsewhere) ---- */

#ifdef MP_HAVE_CUDA
#define BE_P2P(be, call) BE_CUDA(be, call); MP_ABORT("NCCL point-to-point needs train.device=cuda")
#else
#define BE_P2P(be, call) (void)(be); MP_ABORT("NCCL point-to-point needs a CUDA build and train.device=cuda")
#endif

void be_p2p_setup(backend_t *be, MPI_Comm pp_comm, int pp, int stage, int wrap, int slots)
{
    (void)pp_comm, (void)pp, (void)stage, (void)wrap, (void)slots;
    BE_P2P(be, bcu_p2p_setup(be, pp_comm, pp, stage, wrap, slots));
}

void be_p2p_send(backend_t *be, int dir, const float *buf, size_t n)
{
    (void)dir, (void)buf, (void)n;
    BE_P2P(be, bcu_p2p_send(be, dir, buf, n));
}

void be_p2p_recv(backend_t *be, int dir, float *buf, size_t n, int slot)
{
    (void)dir, (void)buf, (void)n, (void)slot;
    BE_P2P(be, bcu_p2p_recv(be, dir, buf, n, slot));
}

void be_p2p_wait(backend_t *be, int dir, int slot)
{
    (void)dir, (void)slot;
    BE_P2P(be, bcu_p2p_wait(be, dir, slot));
}

void be_p2p_fence(backend_t *be, int dir)
{
    (void)dir;
    BE_P2P(be, bcu_p2p_fence(be, dir));
}
