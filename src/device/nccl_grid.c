/* NCCL communicators from MPI communicators, and typed float collectives (see nccl_grid.h). */
#include "nccl_grid.h"

#include "check.h"
#include "cuda_check.h"

void mp_nccl_comm_create(MPI_Comm mpi_comm, ncclComm_t *comm_p)
{
    int rank = 0, size = 0;
    MPI_CHECK(MPI_Comm_rank(mpi_comm, &rank));
    MPI_CHECK(MPI_Comm_size(mpi_comm, &size));
    ncclUniqueId id;
    if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    /* The id is an opaque byte blob: shipped as MPI_BYTE. */
    MPI_CHECK(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, mpi_comm));
    ncclComm_t comm;
    NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank));
    *comm_p = comm;
}

void mp_nccl_comm_destroy(ncclComm_t comm) { NCCL_CHECK(ncclCommDestroy(comm)); }

void mp_nccl_allreduce_f32(const float *send, float *recv, size_t count, ncclComm_t comm, cudaStream_t stream)
{
    NCCL_CHECK(ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comm, stream));
}

void mp_nccl_reduce_scatter_f32(const float *send, float *recv, size_t recv_count, ncclComm_t comm,
                                cudaStream_t stream)
{
    NCCL_CHECK(ncclReduceScatter(send, recv, recv_count, ncclFloat32, ncclSum, comm, stream));
}

void mp_nccl_allgather_f32(const float *send, float *recv, size_t send_count, ncclComm_t comm, cudaStream_t stream)
{
    NCCL_CHECK(ncclAllGather(send, recv, send_count, ncclFloat32, comm, stream));
}

void mp_nccl_send_f32(const float *buf, size_t count, int peer, ncclComm_t comm, cudaStream_t stream)
{
    NCCL_CHECK(ncclSend(buf, count, ncclFloat32, peer, comm, stream));
}

void mp_nccl_recv_f32(float *buf, size_t count, int peer, ncclComm_t comm, cudaStream_t stream)
{
    NCCL_CHECK(ncclRecv(buf, count, ncclFloat32, peer, comm, stream));
}

void mp_nccl_group_start(void) { NCCL_CHECK(ncclGroupStart()); }

void mp_nccl_group_end(void) { NCCL_CHECK(ncclGroupEnd()); }
