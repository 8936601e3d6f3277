#include "dp.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "params.h"
#include "perf.h"

/* The most floats one all-reduce carries (16 MiB): MPICH takes a temporary buffer of the message's
 * size from malloc for every all-reduce, and glibc maps anything over 32 MiB fresh from the kernel
 * each time, so a 154 MB embedding bucket paid a page fault per 4 KiB (main.c keeps the smaller
 * ones in the heap). Measured with 2 ranks here: 43 MB of gradients in 8 buckets all-reduced at
 * 0.3 GB/s with glibc's defaults, 3.6 GB/s with the heap kept. */
#define DP_PIECE ((size_t)4 << 20)

int dp_init(dp_t *dp, MPI_Comm replica, backend_t *be, arena_t *arena, size_t total, int zero, int bf16,
            int max_buckets)
{
    dp->comm = replica;
    MPI_CHECK(MPI_Comm_size(replica, &dp->size));
    MPI_CHECK(MPI_Comm_rank(replica, &dp->rank));
    dp->be = be;
    dp->arena = arena;
    dp->zero = zero;
    dp->total = total;
    dp->shard = param_padded(total, dp->size) / (size_t)dp->size;
    dp->comm_seconds = 0.0;
    dp->shard_buf = NULL;
    /* dp_bucket_start cuts a range into pieces of DP_PIECE floats at most */
    if (be_buckets_reserve(be, max_buckets + (int)(total / DP_PIECE) + 1, bf16) != MP_OK) return MP_ERR;
    dp->rs_counts = NULL, dp->rs_used = 0, dp->rs_max = 0;
    dp->wire = NULL;
    dp->wire_floats = be_bucket_wire_floats(be, total < DP_PIECE ? total : DP_PIECE);
    if (dp->wire_floats) {
        if (!(dp->wire = arena_floats(arena, dp->wire_floats, "the bf16 gradient buckets' wire"))) return MP_ERR;
        be_bucket_wire(be, dp->wire, dp->wire_floats);
    }
    if (zero && !(dp->shard_buf = arena_floats(arena, dp->shard, "ZeRO-1 gradient shard"))) return MP_ERR;
    if (zero) {
        dp->rs_max = max_buckets + (int)(total / DP_PIECE) + 1;
        if (!(dp->rs_counts = MP_CALLOC((size_t)dp->rs_max * (size_t)dp->size, sizeof *dp->rs_counts))) return MP_ERR;
    }
    return MP_OK;
}

void dp_free(dp_t *dp)
{
    if (dp->shard_buf) arena_free(dp->arena, dp->shard_buf, dp->shard * sizeof(float));
    dp->shard_buf = NULL;
    if (dp->wire) arena_free(dp->arena, dp->wire, dp->wire_floats * sizeof(float));
    dp->wire = NULL;
    be_bucket_wire(dp->be, NULL, 0);
    free(dp->rs_counts);
    dp->rs_counts = NULL;
}

/* ZeRO-1: the reduce-scatter of grads[a, b): replica r keeps the sum of [a, b) ∩ its shard, written at
 * its place in shard_buf. */
static void dp_rs_piece(dp_t *dp, const float *grads, size_t a, size_t b)
{
    if (dp->rs_used == dp->rs_max) MP_ABORT("ZeRO-1: more than %d gradient pieces in one step", dp->rs_max);
    int *counts = dp->rs_counts + (size_t)dp->rs_used++ * (size_t)dp->size;
    for (int r = 0; r < dp->size; r++) {
        const size_t s0 = (size_t)r * dp->shard, s1 = s0 + dp->shard;
        const size_t lo = a > s0 ? a : s0, hi = b < s1 ? b : s1;
        counts[r] = hi > lo ? (int)(hi - lo) : 0;
    }
    const size_t mine = (size_t)dp->rank * dp->shard;
    float *recv = dp->shard_buf + (a > mine ? a - mine : 0);
    be_bucket_rs_start(dp->be, grads + a, recv, counts, dp->comm);
}

void dp_bucket_start(dp_t *dp, float *grads, size_t off, size_t n)
{
    for (size_t at = 0; at < n; at += DP_PIECE) {
        const size_t len = n - at < DP_PIECE ? n - at : DP_PIECE;
        if (dp->zero) dp_rs_piece(dp, grads, off + at, off + at + len);
        else be_bucket_start(dp->be, grads + off + at, len, dp->comm);
    }
}

void dp_progress(dp_t *dp) { be_buckets_progress(dp->be); }

void dp_buckets_wait(dp_t *dp)
{
    double t0 = perf_now();
    be_buckets_wait(dp->be, dp->zero ? "the ZeRO-1 gradient reduce-scatter" : "the data-parallel gradient all-reduce");
    dp->rs_used = 0;
    dp->comm_seconds += perf_now() - t0;
}

void dp_shard_take(dp_t *dp, float *grads) { be_copy(dp->be, grads, dp->shard_buf, dp->shard * sizeof(float)); }

void dp_shard_range(const dp_t *dp, size_t *s0_p, size_t *s1_p)
{
    size_t s0 = (size_t)dp->rank * dp->shard, s1 = s0 + dp->shard;
    *s0_p = s0 < dp->total ? s0 : dp->total;
    *s1_p = s1 < dp->total ? s1 : dp->total;
}

void dp_reduce_scatter(dp_t *dp, float *grads)
{
    double t0 = perf_now();
    be_reduce_scatter(dp->be, grads, dp->shard_buf, dp->shard, dp->comm, "the ZeRO-1 gradient reduce-scatter");
    be_copy(dp->be, grads, dp->shard_buf, dp->shard * sizeof(float));
    dp->comm_seconds += perf_now() - t0;
}

void dp_allgather(dp_t *dp, float *params)
{
    be_allgather(dp->be, params, dp->shard, dp->comm, "the ZeRO-1 parameter all-gather");
}
