/* NCCL communicators built from MPI communicators, and typed collectives on them (CUDA build only).
 *
 * Every count is in ELEMENTS of float (never bytes), like NCCL's own API with ncclFloat32. Calls only
 * enqueue on `stream`; buffers are device pointers. Failures are fatal (NCCL_CHECK → MPI_Abort):
 * these run inside collective phases, where one rank returning an error leaves its peers hanging. */
#ifndef MP_NCCL_GRID_H
#define MP_NCCL_GRID_H

#include <stddef.h>

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

/* Collective over mpi_comm: rank 0 of it draws the unique id, MPI_Bcast shares it, every rank joins
 * with ncclCommInitRank on the current CUDA device (select it first: one GPU per rank). The NCCL
 * rank equals the MPI rank in mpi_comm. Sets *comm_p. */
void mp_nccl_comm_create(MPI_Comm mpi_comm, ncclComm_t *comm_p);
/* Collective too (ncclCommDestroy waits for the peers' pending work). */
void mp_nccl_comm_destroy(ncclComm_t comm);

/* recv (count) = Σ over ranks of send (count); send == recv is in place. */
void mp_nccl_allreduce_f32(const float *send, float *recv, size_t count, ncclComm_t comm, cudaStream_t stream);
/* recv (recv_count) = rank r's slice [r·recv_count, (r+1)·recv_count) of Σ send (ranks·recv_count). */
void mp_nccl_reduce_scatter_f32(const float *send, float *recv, size_t recv_count, ncclComm_t comm,
                                cudaStream_t stream);
/* recv (ranks·send_count) = every rank's send (send_count), in rank order. */
void mp_nccl_allgather_f32(const float *send, float *recv, size_t send_count, ncclComm_t comm, cudaStream_t stream);

/* Pipeline point-to-point. A send must meet the matching recv on `peer`; when a rank both sends and
 * receives in one step, bracket the pair with mp_nccl_group_start/end or the two can deadlock. */
void mp_nccl_send_f32(const float *buf, size_t count, int peer, ncclComm_t comm, cudaStream_t stream);
void mp_nccl_recv_f32(float *buf, size_t count, int peer, ncclComm_t comm, cudaStream_t stream);
void mp_nccl_group_start(void);
void mp_nccl_group_end(void);

#endif
