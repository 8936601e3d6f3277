/* The compute backend the model runs on (train.device, DESIGN §8): where its buffers live, which
 * kernels run on them, and how collectives and host copies reach them. The trainer calls be_* for
 * everything that touches model memory, so one code path drives all three:
 *
 *   cpu   the kernels of kernels.h on host memory. Copies between "host" and "device" are no-ops
 *         (the buffers are the same), collectives are MPI through wait.h.
 *   emu   the CPU kernels on a separate "device" region that host code cannot read: the region is
 *         mapped PROT_NONE except inside a be_* call, so a host access the CUDA path would make to
 *         device memory is a segmentation fault here, and every crossing of the boundary is an
 *         explicit be_to_host / be_to_device. This is how the CUDA path's data movement is tested on
 *         machines with no GPU; its results are bitwise those of cpu.
 *   cuda  (CUDA builds) the cu_* kernels on one cudaMalloc'd region, work enqueued on the compute
 *         stream; collectives through NCCL communicators twinned with the grid's MPI ones; data
 *         parallel buckets on the collective stream, ordered by events. Never run by us (docs/GPU.md).
 *
 * Pointers called "device" below are into the backend's region (cpu: ordinary host memory). Host
 * pointers are ordinary memory; be_host_alloc gives pinned memory on cuda. Collective failures and
 * device errors are fatal (MPI_Abort through check.h): they happen inside collective phases. */
#ifndef MP_BACKEND_H
#define MP_BACKEND_H

#include <mpi.h>
#include <stddef.h>

#include "arena.h"
#include "wait.h"

typedef enum { BE_CPU = 0, BE_EMU = 1, BE_CUDA = 2 } be_kind_t;

typedef struct backend_s {
    be_kind_t kind;
    const wait_cfg_t *wait;  /* every MPI wait of the cpu and emu collectives */
    /* the device region (emu, cuda): bump-allocated through the arena */
    char *base;
    size_t capacity;
    int open;                /* emu: nesting depth of be_* calls with the region readable */
    void *cuda;              /* cuda: the backend's CUDA state (backend_cuda.c) */
    MPI_Request *bucket_req; /* cpu: the started gradient buckets */
    int nbuckets, max_buckets;
} backend_t;

/* Name of train.device → kind; MP_OK or MP_ERR (unknown name, message printed). */
int be_kind_parse(const char *name, be_kind_t *kind);

/* Sets up the backend and binds `arena` to it: the arena's allocations then come from the device
 * region (emu, cuda) and are zeroed through the backend. capacity: bytes of the region (emu:
 * reserved address space; cuda: free device memory minus a margin, capped at capacity when > 0).
 * device: the CUDA ordinal (cuda only). precision: 0 fp32, 1 bf16 (products, cuda only).
 * MP_OK or MP_ERR (message printed; nothing left allocated). Not collective. */
int be_init(backend_t *be, be_kind_t kind, arena_t *arena, size_t capacity, int device, int precision,
            const wait_cfg_t *wait);
void be_destroy(backend_t *be);
/* Whether model buffers are host memory (cpu): host code may read them in place. */
static inline int be_host_visible(const backend_t *be) { return be->kind == BE_CPU; }

/* cuda: creates the NCCL twin of comm (collective over comm; rank 0 draws the id). Later collectives
 * on comm go through it. cpu and emu: nothing. Call once per communicator, after be_init. */
void be_comm_add(backend_t *be, MPI_Comm comm);

/* ---- memory ---- */
void be_zero(backend_t *be, void *dev, size_t bytes);
void be_copy(backend_t *be, void *dev_dst, const void *dev_src, size_t bytes);
/* Host <-> device. to_host waits for the work before it (the result is in host memory on return). */
void be_to_device(backend_t *be, void *dev_dst, const void *host_src, size_t bytes);
void be_to_host(backend_t *be, void *host_dst, const void *dev_src, size_t bytes);
/* Host memory for copies that cross to the device often (pinned on cuda), zeroed. NULL when out of
 * memory. */
void *be_host_alloc(backend_t *be, size_t bytes);
void be_host_free(backend_t *be, void *p);
/* Waits until all work enqueued so far is done (cuda: the compute and collective streams). */
void be_sync(backend_t *be);

/* ---- kernels: kernels.h one for one, arguments device pointers ---- */
void be_encoder_forward(backend_t *be, float *out, const int *tokens, const float *wte, const float *wpe, int B,
                        int T, int C, int v0, int vn);
void be_position_forward(backend_t *be, float *out, const float *wpe, int B, int T, int C);
void be_encoder_backward(backend_t *be, float *dwte, float *dwpe, const float *dout, const int *tokens, int B,
                         int T, int C, int v0, int vn);
void be_layernorm_forward(backend_t *be, float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, int N, int C);
void be_layernorm_backward(backend_t *be, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, int N, int C);
void be_matmul_forward(backend_t *be, float *out, const float *inp, const float *w, const float *bias, int N, int C,
                       int OC);
void be_matmul_residual_forward(backend_t *be, float *out, const float *res, const float *inp, const float *w,
                                const float *bias, int N, int C, int OC);
void be_matmul_backward(backend_t *be, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                        const float *w, int N, int C, int OC);
void be_attention_forward(backend_t *be, float *out, float *att, const float *qkv, int B, int T, int C, int NH);
void be_attention_backward(backend_t *be, float *dqkv, float *datt, const float *dout, const float *qkv,
                           const float *att, int B, int T, int C, int NH);
void be_gelu_forward(backend_t *be, float *out, const float *inp, size_t n);
void be_gelu_backward(backend_t *be, float *dinp, const float *inp, const float *dout, size_t n);
void be_crossentropy_forward(backend_t *be, float *losses, float *probs_logits, const int *targets, int N, int V);
void be_crossentropy_backward(backend_t *be, float *dlogits, const float *probs, const int *targets, float dloss,
                              int N, int V, int v0);
void be_xent_local_max(backend_t *be, float *max, float *tlogit, const float *logits, const int *targets, int N,
                       int Vl, int v0, int valid);
void be_xent_local_expsum(backend_t *be, float *sum, float *logits, const float *max, int N, int Vl, int valid);
void be_xent_finish(backend_t *be, float *losses, float *probs, const float *max, const float *sum,
                    const float *tlogit, int N, int Vl);
void be_adamw_update(backend_t *be, float *param, const float *grad, float *m, float *v, size_t n, float lr,
                     float beta1, float beta2, float eps, float wd, int t, float grad_scale);
/* Returns Σ x² to the host (waits for the work before it). */
double be_sumsq(backend_t *be, const float *x, size_t n);
void be_vec_add(backend_t *be, float *out, const float *a, const float *b, size_t n);

/* ---- collectives on device buffers ---- */
/* In place, op MPI_SUM or MPI_MAX over comm; ordered after the work before it and before the work
 * after it (cuda: on the compute stream). `what` names it in a timeout. */
void be_allreduce(backend_t *be, float *buf, size_t n, MPI_Op op, MPI_Comm comm, const char *what);
/* A gradient bucket's sum over comm, started now and overlapping the work after it until
 * be_buckets_wait (cpu: MPI_Iallreduce; cuda: NCCL on the collective stream after an event of the
 * compute stream; emu: summed at once, since MPI progresses inside later calls, when the region
 * would be closed). At most `max` buckets between waits (be_buckets_reserve). */
int be_buckets_reserve(backend_t *be, int max);
void be_bucket_start(backend_t *be, float *buf, size_t n, MPI_Comm comm);
/* Lets MPI progress the started buckets (cpu); nothing elsewhere. */
void be_buckets_progress(backend_t *be);
/* Every started bucket is summed before the work after this call (cuda: the compute stream waits on
 * the collective stream's event; the host does not block). */
void be_buckets_wait(backend_t *be, const char *what);
/* ZeRO-1: recv (count) = this rank's slice of Σ send (ranks·count); buf (ranks·count) in place =
 * every rank's slice [r·count, (r+1)·count) of it, gathered. */
void be_reduce_scatter(backend_t *be, const float *send, float *recv, size_t count, MPI_Comm comm, const char *what);
void be_allgather(backend_t *be, float *buf, size_t count, MPI_Comm comm, const char *what);

/* ---- pipeline point-to-point on the device (cuda, parallel.p2p = nccl; the schedule translation
 * and why it cannot deadlock: sim_nccl.h) ----
 * Each pipeline boundary (stage b → b+1 mod pp) has a 2-rank NCCL communicator for activations and
 * one for gradients; this stage drives its four with one stream each. A receive lands in `slot`'s
 * event; the compute stream waits on it at be_p2p_wait, where the data is first read. */
enum { BE_P2P_ACT_IN, BE_P2P_ACT_OUT, BE_P2P_GRAD_IN, BE_P2P_GRAD_OUT, BE_P2P_DIRS };
/* Collective over pp_comm (ascending boundaries, so every rank creates them in one global order).
 * wrap: the last stage sends to the first (interleaved). slots: receive events per direction. */
void be_p2p_setup(backend_t *be, MPI_Comm pp_comm, int pp, int stage, int wrap, int slots);
/* After the compute work enqueued so far: send n floats at buf / receive into buf. */
void be_p2p_send(backend_t *be, int dir, const float *buf, size_t n);
void be_p2p_recv(backend_t *be, int dir, float *buf, size_t n, int slot);
/* The compute stream waits for slot's receive (dir ACT_IN or GRAD_IN). */
void be_p2p_wait(backend_t *be, int dir, int slot);
/* The compute stream waits for everything enqueued so far on dir's stream. */
void be_p2p_fence(backend_t *be, int dir);

#endif
