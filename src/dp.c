#include "dp.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "perf.h"

size_t dp_padded(size_t total, int shards)
{
    size_t q = 16 * (size_t)shards;
    return (total + q - 1) / q * q;
}

int dp_init(dp_t *dp, MPI_Comm replica, const wait_cfg_t *w, size_t total, int zero, int max_buckets)
{
    dp->comm = replica;
    MPI_CHECK(MPI_Comm_size(replica, &dp->size));
    MPI_CHECK(MPI_Comm_rank(replica, &dp->rank));
    dp->wait = w;
    dp->zero = zero;
    dp->total = total;
    dp->shard = dp_padded(total, dp->size) / (size_t)dp->size;
    dp->nreq = 0;
    dp->maxreq = max_buckets;
    dp->comm_seconds = 0.0;
    dp->req = MP_CALLOC((size_t)max_buckets, sizeof *dp->req);
    dp->shard_buf = zero ? MP_MALLOC(dp->shard * sizeof(float)) : NULL;
    if (!dp->req || (zero && !dp->shard_buf)) {
        dp_free(dp);
        return MP_ERR;
    }
    return MP_OK;
}

void dp_free(dp_t *dp)
{
    free(dp->req);
    free(dp->shard_buf);
    dp->req = NULL;
    dp->shard_buf = NULL;
}

void dp_bucket_start(dp_t *dp, float *grads, size_t off, size_t n)
{
    if (dp->nreq == dp->maxreq) MP_ABORT("more gradient buckets than planned (%d)", dp->maxreq);
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, grads + off, (int)n, MPI_FLOAT, MPI_SUM, dp->comm, &dp->req[dp->nreq++]));
}

void dp_progress(dp_t *dp)
{
    for (int i = 0; i < dp->nreq; i++) {
        int done;
        MPI_Status st;
        MPI_CHECK(MPI_Test(&dp->req[i], &done, &st));
    }
}

void dp_buckets_wait(dp_t *dp)
{
    double t0 = perf_now();
    wait_all(dp->wait, dp->nreq, dp->req, "the data-parallel gradient all-reduce");
    dp->comm_seconds += perf_now() - t0;
    dp->nreq = 0;
}

void dp_shard_range(const dp_t *dp, size_t *s0_p, size_t *s1_p)
{
    size_t s0 = (size_t)dp->rank * dp->shard, s1 = s0 + dp->shard;
    *s0_p = s0 < dp->total ? s0 : dp->total;
    *s1_p = s1 < dp->total ? s1 : dp->total;
}

void dp_reduce_scatter(dp_t *dp, float *grads)
{
    MPI_Request r;
    double t0 = perf_now();
    MPI_CHECK(MPI_Ireduce_scatter_block(grads, dp->shard_buf, (int)dp->shard, MPI_FLOAT, MPI_SUM, dp->comm, &r));
    wait_all(dp->wait, 1, &r, "the ZeRO-1 gradient reduce-scatter");
    memcpy(grads, dp->shard_buf, dp->shard * sizeof(float));
    dp->comm_seconds += perf_now() - t0;
}

void dp_allgather(dp_t *dp, float *params)
{
    MPI_Request r;
    MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, params, (int)dp->shard, MPI_FLOAT, dp->comm, &r));
    wait_all(dp->wait, 1, &r, "the ZeRO-1 parameter all-gather");
}
