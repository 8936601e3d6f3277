/* The cuda backend's half of backend.h (CUDA builds only; backend.c forwards to it). */
#ifndef MP_BACKEND_CUDA_H
#define MP_BACKEND_CUDA_H

#include "backend.h"
#include "kernels_cuda.h"

/* Selects the device, creates the context (streams, cuBLAS) and the region: one cudaMalloc of the
 * free memory minus a margin, capped at limit when > 0. MP_OK or MP_ERR (message printed). */
int bcu_init(backend_t *be, int device, int precision, size_t limit);
void bcu_destroy(backend_t *be);
cu_ctx_t *bcu_ctx(backend_t *be);
/* The NCCL twin of comm (collective over comm). */
void bcu_comm_add(backend_t *be, MPI_Comm comm);

/* dir: 0 device→device, 1 host→device, 2 device→host (waits for it). On the compute stream. */
void bcu_copy(backend_t *be, void *dst, const void *src, size_t bytes, int dir);
void bcu_zero(backend_t *be, void *dev, size_t bytes);
void *bcu_host_alloc(backend_t *be, size_t bytes);
void bcu_host_free(backend_t *be, void *p);
void bcu_sync(backend_t *be);

void bcu_allreduce(backend_t *be, float *buf, size_t n, MPI_Op op, MPI_Comm comm);
void bcu_bucket_start(backend_t *be, float *buf, size_t n, MPI_Comm comm);
void bcu_buckets_wait(backend_t *be);
void bcu_reduce_scatter(backend_t *be, const float *send, float *recv, size_t count, MPI_Comm comm);
void bcu_allgather(backend_t *be, float *buf, size_t count, MPI_Comm comm);

void bcu_p2p_setup(backend_t *be, MPI_Comm pp_comm, int pp, int stage, int wrap, int slots);
void bcu_p2p_send(backend_t *be, int dir, const float *buf, size_t n);
void bcu_p2p_recv(backend_t *be, int dir, float *buf, size_t n, int slot);
void bcu_p2p_wait(backend_t *be, int dir, int slot);
void bcu_p2p_fence(backend_t *be, int dir);

#endif
