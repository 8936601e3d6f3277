/* The cuda backend's collectives and data-parallel buckets: NCCL on the twins of the grid's MPI
 * communicators (comm_add). Blocking collectives on the compute stream; buckets on the collective
 * stream, ordered by events (backend_cuda.h). */
#include "config.h"

#include "backend_cuda.h"

#include "check.h"
#include "cuda_check.h"
#include "nccl_grid.h"

void be_cuda_comm_add(backend_t *be, MPI_Comm comm)
{
    bcu_t *b = be->state;
    if (comm == MPI_COMM_NULL) return;
    for (int i = 0; i < b->ncomms; i++)
        if (b->mpi[i] == comm) return;
    if (b->ncomms == BCU_MAX_COMMS) MP_ABORT("more than %d NCCL communicators", BCU_MAX_COMMS);
    b->mpi[b->ncomms] = comm;
    mp_nccl_comm_create(comm, &b->nccl[b->ncomms]);
    b->ncomms++;
}

void bcu_comms_destroy(bcu_t *b)
{
    for (int i = 0; i < b->ncomms; i++) mp_nccl_comm_destroy(b->nccl[i]);
    b->ncomms = 0;
}

/* The NCCL twin of comm; fatal when the grid did not create one. */
static ncclComm_t twin(bcu_t *b, MPI_Comm comm)
{
    for (int i = 0; i < b->ncomms; i++)
        if (b->mpi[i] == comm) return b->nccl[i];
    MP_ABORT("no NCCL communicator for this MPI communicator (be_comm_add was not called for it)");
    return NULL;
}

void be_cuda_allreduce(backend_t *be, float *buf, size_t n, MPI_Op op, MPI_Comm comm, const char *what)
{
    bcu_t *b = be->state;
    if (op != MPI_SUM && op != MPI_MAX) MP_ABORT("be_allreduce: only MPI_SUM and MPI_MAX");
    NCCL_CHECK(ncclAllReduce(buf, buf, n, ncclFloat32, op == MPI_MAX ? ncclMax : ncclSum, twin(b, comm),
                             b->ctx.compute));
}

void be_cuda_reduce_scatter(backend_t *be, const float *send, float *recv, size_t count, MPI_Comm comm,
                            const char *what)
{
    bcu_t *b = be->state;
    mp_nccl_reduce_scatter_f32(send, recv, count, twin(b, comm), b->ctx.compute);
}

void be_cuda_allgather(backend_t *be, float *buf, size_t count, MPI_Comm comm, const char *what)
{
    bcu_t *b = be->state;
    int rank;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    /* in place: this rank's slice is already where NCCL puts it */
    mp_nccl_allgather_f32(buf + (size_t)rank * count, buf, count, twin(b, comm), b->ctx.compute);
}

void be_cuda_bucket_start(backend_t *be, float *buf, size_t n, MPI_Comm comm)
{
    bcu_t *b = be->state;
    be_bucket_claim(be);
    CUDA_CHECK(cudaEventRecord(b->grads_final, b->ctx.compute));
    CUDA_CHECK(cudaStreamWaitEvent(b->ctx.comm, b->grads_final, 0));
    mp_nccl_allreduce_f32(buf, buf, n, twin(b, comm), b->ctx.comm);
}

/* NCCL progresses on its own stream. */
void be_cuda_buckets_progress(backend_t *be) {}

void be_cuda_buckets_wait(backend_t *be, const char *what)
{
    bcu_t *b = be->state;
    be->nbuckets = 0;
    CUDA_CHECK(cudaEventRecord(b->buckets_done, b->ctx.comm));
    CUDA_CHECK(cudaStreamWaitEvent(b->ctx.compute, b->buckets_done, 0));
}
