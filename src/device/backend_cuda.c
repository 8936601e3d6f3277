/* The cuda backend: the region is the device arena's one cudaMalloc; every kernel, copy and
 * tensor-parallel all-reduce is enqueued on the compute stream, so their order is program order
 * without host synchronisation. Data-parallel buckets run on the collective stream: each starts
 * after an event recorded on the compute stream (its gradients are final there) and the compute
 * stream waits on the collective stream's event before the optimizer reads them. The host blocks
 * only where a value comes back (be_to_host, be_sumsq). Never run on a GPU by us (docs/GPU.md). */
#include "config.h"

#include "backend_cuda.h"

#include <stdlib.h>
#include <string.h>

#include <nccl.h>

#include "check.h"
#include "cuda_check.h"
#include "nccl_grid.h"

enum { BCU_MAX_COMMS = 16 };

typedef struct {
    cu_ctx_t ctx;
    cu_arena_t arena;
    MPI_Comm mpi[BCU_MAX_COMMS];
    ncclComm_t nccl[BCU_MAX_COMMS];
    int ncomms;
    cudaEvent_t grads_final;  /* compute stream: the bucket's gradients are written */
    cudaEvent_t buckets_done; /* collective stream: every started bucket is summed */
    /* pipeline point-to-point (bcu_p2p_setup): per direction a stream, the boundary's 2-rank
     * communicators (and their MPI twins), the peer's rank in it, receive events per slot, the
     * event after the newest call */
    int p2p_on, p2p_slots;
    cudaStream_t p2p_stream[BE_P2P_DIRS];
    ncclComm_t p2p_comm[BE_P2P_DIRS];
    MPI_Comm p2p_mpi[2];      /* the boundaries before and after this stage */
    ncclComm_t p2p_own[4];    /* created here: [before act, before grad, after act, after grad] */
    int p2p_peer[BE_P2P_DIRS];
    cudaEvent_t *p2p_recv_ev[BE_P2P_DIRS];
    cudaEvent_t p2p_last[BE_P2P_DIRS];
    cudaEvent_t compute_now;
} bcu_t;

static bcu_t *bcu(backend_t *be) { return be->cuda; }

cu_ctx_t *bcu_ctx(backend_t *be) { return &bcu(be)->ctx; }

int bcu_init(backend_t *be, int device, int precision, size_t limit)
{
    bcu_t *b = MP_CALLOC(1, sizeof *b);
    if (!b) return MP_ERR;
    if (cu_ctx_init(&b->ctx, device, precision ? CU_BF16 : CU_FP32) != MP_OK) goto err_free;
    /* bf16 copies of the largest product's inputs, reduction partials: before the arena takes the
     * free memory (cu_ctx_scratch grows on demand from the margin otherwise) */
    if (cu_ctx_reserve(&b->ctx, (size_t)64 << 20) != MP_OK) goto err_ctx;
    if (cu_arena_init(&b->arena, limit, 0) != MP_OK) goto err_ctx;
    CUDA_CHECK(cudaEventCreateWithFlags(&b->grads_final, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&b->buckets_done, cudaEventDisableTiming));
    be->cuda = b;
    be->base = b->arena.base;
    be->capacity = b->arena.capacity;
    return MP_OK;
err_ctx:
    cu_ctx_destroy(&b->ctx);
err_free:
    free(b);
    return MP_ERR;
}

void bcu_destroy(backend_t *be)
{
    bcu_t *b = bcu(be);
    if (!b) return;
    cu_ctx_sync(&b->ctx);
    if (b->p2p_on) {
        for (int d = 0; d < BE_P2P_DIRS; d++) {
            CUDA_CHECK(cudaStreamSynchronize(b->p2p_stream[d]));
            for (int i = 0; b->p2p_recv_ev[d] && i < b->p2p_slots; i++) CUDA_CHECK(cudaEventDestroy(b->p2p_recv_ev[d][i]));
            free(b->p2p_recv_ev[d]);
            CUDA_CHECK(cudaEventDestroy(b->p2p_last[d]));
            CUDA_CHECK(cudaStreamDestroy(b->p2p_stream[d]));
        }
        for (int i = 0; i < 4; i++)
            if (b->p2p_own[i]) mp_nccl_comm_destroy(b->p2p_own[i]);
        for (int i = 0; i < 2; i++)
            if (b->p2p_mpi[i] != MPI_COMM_NULL) MPI_Comm_free(&b->p2p_mpi[i]);
        CUDA_CHECK(cudaEventDestroy(b->compute_now));
    }
    for (int i = 0; i < b->ncomms; i++) mp_nccl_comm_destroy(b->nccl[i]);
    CUDA_CHECK(cudaEventDestroy(b->grads_final));
    CUDA_CHECK(cudaEventDestroy(b->buckets_done));
    cu_arena_destroy(&b->arena);
    cu_ctx_destroy(&b->ctx);
    free(b);
    be->cuda = NULL;
}

void bcu_comm_add(backend_t *be, MPI_Comm comm)
{
    bcu_t *b = bcu(be);
    for (int i = 0; i < b->ncomms; i++)
        if (b->mpi[i] == comm) return;
    if (b->ncomms == BCU_MAX_COMMS) MP_ABORT("more than %d NCCL communicators", BCU_MAX_COMMS);
    b->mpi[b->ncomms] = comm;
    mp_nccl_comm_create(comm, &b->nccl[b->ncomms]);
    b->ncomms++;
}

/* The NCCL twin of comm; fatal when the grid did not create one. */
static ncclComm_t twin(bcu_t *b, MPI_Comm comm)
{
    for (int i = 0; i < b->ncomms; i++)
        if (b->mpi[i] == comm) return b->nccl[i];
    MP_ABORT("no NCCL communicator for this MPI communicator (be_comm_add was not called for it)");
    return NULL;
}

void bcu_copy(backend_t *be, void *dst, const void *src, size_t bytes, int dir)
{
    bcu_t *b = bcu(be);
    static const enum cudaMemcpyKind kind[3] = {cudaMemcpyDeviceToDevice, cudaMemcpyHostToDevice,
                                                cudaMemcpyDeviceToHost};
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind[dir], b->ctx.compute));
    /* host → device: the source may be reused by the caller at once; device → host: the value is
     * wanted now */
    if (dir != 0) CUDA_CHECK(cudaStreamSynchronize(b->ctx.compute));
}

void bcu_zero(backend_t *be, void *dev, size_t bytes)
{
    CUDA_CHECK(cudaMemsetAsync(dev, 0, bytes, bcu(be)->ctx.compute));
}

void *bcu_host_alloc(backend_t *be, size_t bytes)
{
    (void)be;
    void *p = cu_host_alloc(bytes ? bytes : 1, "pinned host buffer");
    if (p) memset(p, 0, bytes);
    return p;
}

void bcu_host_free(backend_t *be, void *p)
{
    (void)be;
    if (p) cu_host_free(p);
}

void bcu_sync(backend_t *be)
{
    bcu_t *b = bcu(be);
    CUDA_CHECK(cudaStreamSynchronize(b->ctx.compute));
    CUDA_CHECK(cudaStreamSynchronize(b->ctx.comm));
}

void bcu_allreduce(backend_t *be, float *buf, size_t n, MPI_Op op, MPI_Comm comm)
{
    bcu_t *b = bcu(be);
    if (op != MPI_SUM && op != MPI_MAX) MP_ABORT("be_allreduce: only MPI_SUM and MPI_MAX");
    NCCL_CHECK(ncclAllReduce(buf, buf, n, ncclFloat32, op == MPI_MAX ? ncclMax : ncclSum, twin(b, comm),
                             b->ctx.compute));
}

void bcu_bucket_start(backend_t *be, float *buf, size_t n, MPI_Comm comm)
{
    bcu_t *b = bcu(be);
    CUDA_CHECK(cudaEventRecord(b->grads_final, b->ctx.compute));
    CUDA_CHECK(cudaStreamWaitEvent(b->ctx.comm, b->grads_final, 0));
    mp_nccl_allreduce_f32(buf, buf, n, twin(b, comm), b->ctx.comm);
}

void bcu_buckets_wait(backend_t *be)
{
    bcu_t *b = bcu(be);
    CUDA_CHECK(cudaEventRecord(b->buckets_done, b->ctx.comm));
    CUDA_CHECK(cudaStreamWaitEvent(b->ctx.compute, b->buckets_done, 0));
}

void bcu_reduce_scatter(backend_t *be, const float *send, float *recv, size_t count, MPI_Comm comm)
{
    bcu_t *b = bcu(be);
    mp_nccl_reduce_scatter_f32(send, recv, count, twin(b, comm), b->ctx.compute);
}

void bcu_allgather(backend_t *be, float *buf, size_t count, MPI_Comm comm)
{
    bcu_t *b = bcu(be);
    int rank;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    /* in place: this rank's slice is already where NCCL puts it */
    mp_nccl_allgather_f32(buf + (size_t)rank * count, buf, count, twin(b, comm), b->ctx.compute);
}

/* ---- pipeline point-to-point ---- */

/* The 2-rank MPI communicator of boundary bnd (stage bnd, then stage bnd+1 mod pp) out of pp_comm. */
static MPI_Comm boundary_comm(MPI_Comm pp_comm, int pp, int bnd)
{
    MPI_Group all, two;
    const int ranks[2] = {bnd, (bnd + 1) % pp};
    MPI_Comm c;
    MPI_CHECK(MPI_Comm_group(pp_comm, &all));
    MPI_CHECK(MPI_Group_incl(all, 2, ranks, &two));
    MPI_CHECK(MPI_Comm_create_group(pp_comm, two, bnd, &c)); /* collective over the two only */
    MPI_CHECK(MPI_Group_free(&two));
    MPI_CHECK(MPI_Group_free(&all));
    return c;
}

void bcu_p2p_setup(backend_t *be, MPI_Comm pp_comm, int pp, int stage, int wrap, int slots)
{
    bcu_t *b = bcu(be);
    b->p2p_mpi[0] = b->p2p_mpi[1] = MPI_COMM_NULL;
    const int before = (stage + pp - 1) % pp, after = stage;
    const int has_before = stage > 0 || wrap, has_after = stage < pp - 1 || wrap;
    /* ascending boundary index on every rank: one global order for the blocking creations */
    int order[2] = {before, after}, have[2] = {has_before, has_after};
    if (before > after) order[0] = after, order[1] = before, have[0] = has_after, have[1] = has_before;
    for (int i = 0; i < 2; i++) {
        if (!have[i]) continue;
        const int side = order[i] == before ? 0 : 1; /* pp >= 2: the two boundaries differ */
        b->p2p_mpi[side] = boundary_comm(pp_comm, pp, order[i]);
        mp_nccl_comm_create(b->p2p_mpi[side], &b->p2p_own[2 * side]);     /* activations */
        mp_nccl_comm_create(b->p2p_mpi[side], &b->p2p_own[2 * side + 1]); /* gradients */
    }
    /* before: this stage is rank 1 (receives activations, sends gradients); after: rank 0 */
    b->p2p_comm[BE_P2P_ACT_IN] = b->p2p_own[0], b->p2p_peer[BE_P2P_ACT_IN] = 0;
    b->p2p_comm[BE_P2P_GRAD_OUT] = b->p2p_own[1], b->p2p_peer[BE_P2P_GRAD_OUT] = 0;
    b->p2p_comm[BE_P2P_ACT_OUT] = b->p2p_own[2], b->p2p_peer[BE_P2P_ACT_OUT] = 1;
    b->p2p_comm[BE_P2P_GRAD_IN] = b->p2p_own[3], b->p2p_peer[BE_P2P_GRAD_IN] = 1;
    b->p2p_slots = slots;
    for (int d = 0; d < BE_P2P_DIRS; d++) {
        CUDA_CHECK(cudaStreamCreateWithFlags(&b->p2p_stream[d], cudaStreamNonBlocking));
        CUDA_CHECK(cudaEventCreateWithFlags(&b->p2p_last[d], cudaEventDisableTiming));
        CUDA_CHECK(cudaEventRecord(b->p2p_last[d], b->p2p_stream[d]));
        b->p2p_recv_ev[d] = NULL;
        if (d != BE_P2P_ACT_IN && d != BE_P2P_GRAD_IN) continue;
        if (!(b->p2p_recv_ev[d] = MP_CALLOC((size_t)slots, sizeof(cudaEvent_t))))
            MP_ABORT("out of memory for pipeline receive events");
        for (int i = 0; i < slots; i++) CUDA_CHECK(cudaEventCreateWithFlags(&b->p2p_recv_ev[d][i], cudaEventDisableTiming));
    }
    CUDA_CHECK(cudaEventCreateWithFlags(&b->compute_now, cudaEventDisableTiming));
    b->p2p_on = 1;
}

/* dir's stream waits for the compute work enqueued so far. */
static cudaStream_t p2p_after_compute(bcu_t *b, int dir)
{
    if (!b->p2p_on || !b->p2p_comm[dir]) MP_ABORT("pipeline point-to-point in direction %d was not set up", dir);
    CUDA_CHECK(cudaEventRecord(b->compute_now, b->ctx.compute));
    CUDA_CHECK(cudaStreamWaitEvent(b->p2p_stream[dir], b->compute_now, 0));
    return b->p2p_stream[dir];
}

void bcu_p2p_send(backend_t *be, int dir, const float *buf, size_t n)
{
    bcu_t *b = bcu(be);
    cudaStream_t s = p2p_after_compute(b, dir);
    mp_nccl_send_f32(buf, n, b->p2p_peer[dir], b->p2p_comm[dir], s);
    CUDA_CHECK(cudaEventRecord(b->p2p_last[dir], s));
}

void bcu_p2p_recv(backend_t *be, int dir, float *buf, size_t n, int slot)
{
    bcu_t *b = bcu(be);
    if (slot < 0 || slot >= b->p2p_slots) MP_ABORT("pipeline receive slot %d out of range", slot);
    cudaStream_t s = p2p_after_compute(b, dir);
    mp_nccl_recv_f32(buf, n, b->p2p_peer[dir], b->p2p_comm[dir], s);
    CUDA_CHECK(cudaEventRecord(b->p2p_recv_ev[dir][slot], s));
    CUDA_CHECK(cudaEventRecord(b->p2p_last[dir], s));
}

void bcu_p2p_wait(backend_t *be, int dir, int slot)
{
    bcu_t *b = bcu(be);
    CUDA_CHECK(cudaStreamWaitEvent(b->ctx.compute, b->p2p_recv_ev[dir][slot], 0));
}

void bcu_p2p_fence(backend_t *be, int dir)
{
    bcu_t *b = bcu(be);
    if (b->p2p_comm[dir]) CUDA_CHECK(cudaStreamWaitEvent(b->ctx.compute, b->p2p_last[dir], 0));
}
