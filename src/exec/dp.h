/* Data parallelism over the replica communicator (ARCHITECTURE.md §4, DP). Gradients are summed in
 * buckets (one per block, plus the final LayerNorm and the embeddings), each started non-blocking
 * as soon as its backward is done on the step's last micro-batch, so communication overlaps the
 * rest of the backward. With parallel.zero = 1 (ZeRO-1) the optimizer moments are sharded instead:
 * the gradient sum is reduce-scattered in the same buckets (each replica's piece of a bucket summed
 * into its place in the shard, overlapping the backward the same way), each replica updates its
 * shard of the flat parameter buffer and the parameters are all-gathered.
 *
 * Buffers exchanged here are padded to param_padded(total, dp) (params.h) floats so every shard has one size. */
#ifndef MP_DP_H
#define MP_DP_H

#include <mpi.h>
#include <stddef.h>

#include "backend.h"
#include "wait.h"

/* Buffers are the backend's (device) memory; the buckets run through be_bucket_* (MPI on the CPU,
 * NCCL on the collective stream on CUDA). */
typedef struct {
    MPI_Comm comm;
    int size, rank;
    backend_t *be;
    arena_t *arena;
    int zero;
    size_t total;          /* real floats in the parameter buffer */
    size_t shard;          /* padded total / size */
    float *shard_buf;      /* ZeRO-1: receives this replica's shard of the gradient sum (device) */
    int *rs_counts;        /* ZeRO-1's buckets: each started piece's counts per replica, kept to the wait */
    int rs_used, rs_max;   /* pieces started since the last wait, room for */
    double comm_seconds;   /* time spent waiting for buckets after the backward ended */
    float *wire;           /* bf16 buckets on cuda: NCCL's bf16 wire (be_bucket_wire_floats), else NULL */
    size_t wire_floats;
} dp_t;


/* MP_OK or MP_ERR (allocation). bf16: the buckets travel as bf16 (parallel.grad_reduce_dtype,
 * be_buckets_reserve). max_buckets bounds the buckets of one step. */
int dp_init(dp_t *dp, MPI_Comm replica, backend_t *be, arena_t *arena, size_t total, int zero, int bf16,
            int max_buckets);
void dp_free(dp_t *dp);

/* Starts the sum over replicas of grads[off, off+n): in place; with ZeRO-1 a reduce-scatter instead,
 * each replica's part of the range that lies in its shard summed into shard_buf, so the buckets of a
 * step leave the whole shard there (dp_shard_take) and the reduce-scatter overlaps the backward as
 * the all-reduce does. The ranges of a step must cover the buffer once. */
void dp_bucket_start(dp_t *dp, float *grads, size_t off, size_t n);
/* Lets MPI progress the buckets in flight (MPICH moves data only inside MPI calls): called between
 * blocks of the backward. */
void dp_progress(dp_t *dp);
/* Waits for every started bucket. */
void dp_buckets_wait(dp_t *dp);

/* This replica's shard [s0, s1) of the real (unpadded) buffer. */
void dp_shard_range(const dp_t *dp, size_t *s0_p, size_t *s1_p);
/* ZeRO-1: grads (padded length) summed over replicas; this replica's shard of the sum is left at
 * grads[0, shard). */
void dp_reduce_scatter(dp_t *dp, float *grads);
/* ZeRO-1 after the step's buckets (dp_bucket_start, dp_buckets_wait): their shard of the sum moved to
 * grads[0, shard), as dp_reduce_scatter leaves it. */
void dp_shard_take(dp_t *dp, float *grads);
/* ZeRO-1: every replica's shard of params (padded length) gathered into all of params. */
void dp_allgather(dp_t *dp, float *params);

#endif
