/* The cuda backend's collectives and data-parallel buckets: NCCL on the twins of the grid's MPI
 * communicators (comm_add), blocking collectives on the compute stream, buckets on the collective
 * stream, ordered by events (backend_cuda.h). A communicator two of whose ranks share a GPU has no
 * twin (NCCL refuses it: gpu_share.h) unless the loaded NCCL is our stand-in; its collectives and
 * buckets are host-staged (backend_staged.h), the code the emu backend runs for all of its own. A
 * communicator of one rank gets no twin and its collectives do nothing (reduce_scatter: a copy). With
 * parallel.grad_reduce_dtype = bf16 an NCCL bucket is rounded into a device wire, summed as
 * ncclBfloat16 and widened back, all on the collective stream (kernels/bf16_wire_cuda.cu). */
#include "config.h"

#include "backend_cuda.h"

#include <stdint.h>
#include <stdlib.h>

#include "backend_staged.h"
#include "check.h"
#include "cuda_check.h"
#include "nccl_grid.h"

void be_cuda_comm_add(backend_t *be, MPI_Comm comm)
{
    bcu_t *b = be->state;
    if (comm == MPI_COMM_NULL) return;
    for (int i = 0; i < b->ncomms; i++)
        if (b->mpi[i] == comm) return;
    if (b->ncomms == BCU_MAX_COMMS) MP_ABORT("more than %d communicators for NCCL", BCU_MAX_COMMS);
    /* every rank of comm gathers the same names and so decides alike */
    int n, a, c;
    MPI_CHECK(MPI_Comm_size(comm, &n));
    gpu_id_t *ids = gpu_share_gather(&b->gpu, comm, be->wait);
    const int shared = gpu_share_find(ids, n, &a, &c);
    free(ids);
    if (shared == MP_ERR) MP_ABORT("out of memory comparing the GPUs of %d ranks", n);
    b->mpi[b->ncomms] = comm;
    b->nccl[b->ncomms] = NULL;
    b->single[b->ncomms] = n == 1;
    /* a communicator of one rank needs none (its collectives are copies or nothing: coll_single);
     * the stand-in takes ranks that share a GPU (gpu_share.h) */
    if (n > 1 && (!shared || gpu_share_nccl_standin())) mp_nccl_comm_create(comm, &b->nccl[b->ncomms]);
    b->ncomms++;
}

void bcu_comms_destroy(bcu_t *b)
{
    for (int i = 0; i < b->ncomms; i++)
        if (b->nccl[i]) mp_nccl_comm_destroy(b->nccl[i]);
    b->ncomms = 0;
}

/* comm's index among those comm_add was given; fatal when it was not. */
static int comm_index(bcu_t *b, MPI_Comm comm)
{
    for (int i = 0; i < b->ncomms; i++)
        if (b->mpi[i] == comm) return i;
    MP_ABORT("a collective on an MPI communicator the cuda backend was not given (be_comm_add was not called for it)");
    return -1;
}

/* The NCCL twin of comm, NULL when its ranks share a GPU (host-staged). */
static ncclComm_t twin(bcu_t *b, MPI_Comm comm) { return b->nccl[comm_index(b, comm)]; }

/* Whether comm has one rank: its collectives are the identity (no NCCL communicator, no staging). */
static int coll_single(bcu_t *b, MPI_Comm comm) { return b->single[comm_index(b, comm)]; }

void be_cuda_allreduce(backend_t *be, float *buf, size_t n, MPI_Op op, MPI_Comm comm, const char *what)
{
    bcu_t *b = be->state;
    if (op != MPI_SUM && op != MPI_MAX) MP_ABORT("be_allreduce: only MPI_SUM and MPI_MAX");
    if (coll_single(b, comm)) return;
    ncclComm_t nc = twin(b, comm);
    if (!nc) {
        be_staged_allreduce(be, buf, n, op, comm, what);
        return;
    }
    NCCL_CHECK(ncclAllReduce(buf, buf, n, ncclFloat32, op == MPI_MAX ? ncclMax : ncclSum, nc, b->ctx.compute));
}

void be_cuda_reduce_scatter(backend_t *be, const float *send, float *recv, size_t count, MPI_Comm comm,
                            const char *what)
{
    bcu_t *b = be->state;
    if (coll_single(b, comm)) {
        if (recv != send) CUDA_CHECK(cudaMemcpyAsync(recv, send, count * sizeof(float), cudaMemcpyDeviceToDevice, b->ctx.compute));
        return;
    }
    ncclComm_t nc = twin(b, comm);
    if (!nc) {
        be_staged_reduce_scatter(be, send, recv, count, comm, what);
        return;
    }
    mp_nccl_reduce_scatter_f32(send, recv, count, nc, b->ctx.compute);
}

void be_cuda_allgather(backend_t *be, float *buf, size_t count, MPI_Comm comm, const char *what)
{
    bcu_t *b = be->state;
    if (coll_single(b, comm)) return;
    ncclComm_t nc = twin(b, comm);
    if (!nc) {
        be_staged_allgather(be, buf, count, comm, what);
        return;
    }
    int rank;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    /* in place: this rank's slice is already where NCCL puts it */
    mp_nccl_allgather_f32(buf + (size_t)rank * count, buf, count, nc, b->ctx.compute);
}

/* The bf16 buckets' device wire (dp.c took it from the arena through be_bucket_wire_floats), holding
 * n elements. One serves every NCCL bucket: they run one after another on the collective stream, so
 * a bucket's rounding waits for the widening of the one before. */
static uint16_t *wire(backend_t *be, size_t n)
{
    if (!be->dev_wire || n > be->dev_wire_elems)
        MP_ABORT("a bf16 gradient bucket of %zu elements, but the wire holds %zu (be_bucket_wire)", n, be->dev_wire_elems);
    return be->dev_wire;
}

/* A step's buckets may mix NCCL and host-staged ones (one per communicator): an NCCL bucket leaves
 * its MPI request null, so the staged wait passes over it. */
void be_cuda_bucket_start(backend_t *be, float *buf, size_t n, MPI_Comm comm)
{
    bcu_t *b = be->state;
    if (coll_single(b, comm)) {
        be->bucket_req[be_bucket_claim(be)] = MPI_REQUEST_NULL;
        return;
    }
    ncclComm_t nc = twin(b, comm);
    if (!nc) {
        be_staged_bucket_start(be, buf, n, comm);
        return;
    }
    be->bucket_req[be_bucket_claim(be)] = MPI_REQUEST_NULL;
    CUDA_CHECK(cudaEventRecord(b->grads_final, b->ctx.compute));
    CUDA_CHECK(cudaStreamWaitEvent(b->ctx.comm, b->grads_final, 0));
    if (be->bucket_bf16) {
        uint16_t *w = wire(be, n);
        cu_wire_round(b->ctx.comm, w, buf, n);
        NCCL_CHECK(ncclAllReduce(w, w, n, ncclBfloat16, ncclSum, nc, b->ctx.comm));
        cu_wire_widen(b->ctx.comm, buf, w, n);
        return;
    }
    mp_nccl_allreduce_f32(buf, buf, n, nc, b->ctx.comm);
}

/* ZeRO-1's bucket: NCCL has no reduce-scatter of unequal pieces, so one reduce per rank whose piece is
 * not empty, to that rank, grouped, on the collective stream after the gradients are final. */
void be_cuda_bucket_rs_start(backend_t *be, const float *send, float *recv, const int *counts, MPI_Comm comm)
{
    bcu_t *b = be->state;
    if (coll_single(b, comm)) {
        be->bucket_req[be_bucket_claim(be)] = MPI_REQUEST_NULL;
        if (counts[0] && recv != send)
            CUDA_CHECK(cudaMemcpyAsync(recv, send, (size_t)counts[0] * sizeof(float), cudaMemcpyDeviceToDevice,
                                       b->ctx.compute));
        return;
    }
    ncclComm_t nc = twin(b, comm);
    if (!nc) {
        be_staged_bucket_rs_start(be, send, recv, counts, comm);
        return;
    }
    be->bucket_req[be_bucket_claim(be)] = MPI_REQUEST_NULL;
    int size, me;
    MPI_CHECK(MPI_Comm_size(comm, &size));
    MPI_CHECK(MPI_Comm_rank(comm, &me));
    CUDA_CHECK(cudaEventRecord(b->grads_final, b->ctx.compute));
    CUDA_CHECK(cudaStreamWaitEvent(b->ctx.comm, b->grads_final, 0));
    size_t all = 0;
    for (int r = 0; r < size; r++) all += (size_t)counts[r];
    /* bf16: the bucket rounded into the wire, this rank's piece of the sum after it, then widened */
    uint16_t *w = be->bucket_bf16 ? wire(be, all + (size_t)counts[me]) : NULL;
    if (w) cu_wire_round(b->ctx.comm, w, send, all);
    mp_nccl_group_start();
    size_t at = 0;
    for (int r = 0; r < size; r++) {
        if (counts[r] && w)
            NCCL_CHECK(ncclReduce(w + at, r == me ? w + all : NULL, (size_t)counts[r], ncclBfloat16, ncclSum, r, nc,
                                  b->ctx.comm));
        else if (counts[r])
            NCCL_CHECK(ncclReduce(send + at, r == me ? recv : NULL, (size_t)counts[r], ncclFloat32, ncclSum, r, nc,
                                  b->ctx.comm));
        at += (size_t)counts[r];
    }
    mp_nccl_group_end();
    if (w) cu_wire_widen(b->ctx.comm, recv, w + all, (size_t)counts[me]);
}

/* NCCL progresses on its own stream; MPI progresses the host-staged buckets when asked. */
void be_cuda_buckets_progress(backend_t *be) { be_staged_buckets_progress(be); }

void be_cuda_buckets_wait(backend_t *be, const char *what)
{
    bcu_t *b = be->state;
    be_staged_buckets_wait(be, what); /* the host-staged ones copied back on the compute stream */
    CUDA_CHECK(cudaEventRecord(b->buckets_done, b->ctx.comm));
    CUDA_CHECK(cudaStreamWaitEvent(b->ctx.compute, b->buckets_done, 0));
}
