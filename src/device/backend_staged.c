/* Host-staged collectives and buckets: device → host copy, the cpu backend's MPI, host → device
 * copy (see backend_staged.h). */
#include "config.h"

#include "backend_staged.h"

#include <stdlib.h>

#include "backend_cpu.h"
#include "check.h"

/* A started bucket: where its sum goes back, and its host copy (kept for the next step's bucket of
 * the same index). */
typedef struct {
    float *dev;   /* NULL: no staged bucket at this index (cuda: NCCL took it) */
    float *host;
    size_t n, cap; /* floats */
    size_t back;   /* where in host the result copied back to dev starts (a ZeRO-1 bucket's piece) */
} staged_bucket_t;

struct be_staged_s {
    float *buf;   /* the blocking collectives' host copy */
    size_t cap;
    staged_bucket_t *bucket; /* by bucket index (be_bucket_claim's) */
    int nbucket;
};

static struct be_staged_s *staged(backend_t *be)
{
    if (!be->staged && !(be->staged = MP_CALLOC(1, sizeof *be->staged)))
        MP_ABORT("out of memory for the host-staged collectives");
    return be->staged;
}

/* *p holds at least n floats afterwards (grown through the backend; the old contents are not kept). */
static float *host_room(backend_t *be, float **p, size_t *cap, size_t n)
{
    if (n <= *cap) return *p;
    if (*p) be_host_free(be, *p);
    if (!(*p = be_host_alloc(be, n * sizeof(float))))
        MP_ABORT("out of host memory staging a collective of %zu floats through the host", n);
    *cap = n;
    return *p;
}

/* Every call is made by all ranks of comm with the same count: a count of zero skips on all of them. */

void be_staged_allreduce(backend_t *be, float *buf, size_t n, MPI_Op op, MPI_Comm comm, const char *what)
{
    if (n == 0) return;
    struct be_staged_s *s = staged(be);
    float *h = host_room(be, &s->buf, &s->cap, n);
    be_to_host(be, h, buf, n * sizeof(float));
    be_cpu_allreduce(be, h, n, op, comm, what);
    be_to_device(be, buf, h, n * sizeof(float));
}

void be_staged_reduce_scatter(backend_t *be, const float *send, float *recv, size_t count, MPI_Comm comm,
                              const char *what)
{
    if (count == 0) return;
    int ranks;
    MPI_CHECK(MPI_Comm_size(comm, &ranks));
    const size_t all = (size_t)ranks * count;
    struct be_staged_s *s = staged(be);
    float *h = host_room(be, &s->buf, &s->cap, all + count); /* send (all), then recv (count) */
    be_to_host(be, h, send, all * sizeof(float));
    be_cpu_reduce_scatter(be, h, h + all, count, comm, what);
    be_to_device(be, recv, h + all, count * sizeof(float));
}

void be_staged_allgather(backend_t *be, float *buf, size_t count, MPI_Comm comm, const char *what)
{
    if (count == 0) return;
    int rank, ranks;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    MPI_CHECK(MPI_Comm_size(comm, &ranks));
    const size_t all = (size_t)ranks * count, mine = (size_t)rank * count;
    struct be_staged_s *s = staged(be);
    float *h = host_room(be, &s->buf, &s->cap, all);
    /* in place: only this rank's slice goes in; the gather writes every other one */
    be_to_host(be, h + mine, buf + mine, count * sizeof(float));
    be_cpu_allgather(be, h, count, comm, what);
    be_to_device(be, buf, h, all * sizeof(float));
}

/* The record of bucket index i, the array grown to hold it. */
static staged_bucket_t *bucket_at(struct be_staged_s *s, int i)
{
    if (i >= s->nbucket) {
        const int n = i + 1 > 2 * s->nbucket ? i + 1 : 2 * s->nbucket;
        staged_bucket_t *b = realloc(s->bucket, (size_t)n * sizeof *b);
        if (!b) MP_ABORT("out of memory for %d host-staged gradient buckets", n);
        for (int k = s->nbucket; k < n; k++) b[k] = (staged_bucket_t){NULL, NULL, 0, 0, 0};
        s->bucket = b, s->nbucket = n;
    }
    return &s->bucket[i];
}

void be_staged_bucket_start(backend_t *be, float *buf, size_t n, MPI_Comm comm)
{
    struct be_staged_s *s = staged(be);
    const int i = be_bucket_claim(be);
    staged_bucket_t *b = bucket_at(s, i);
    float *h = host_room(be, &b->host, &b->cap, n ? n : 1);
    be_to_host(be, h, buf, n * sizeof(float));
    b->dev = buf, b->n = n, b->back = 0;
    be_cpu_bucket_post(be, i, h, n, comm);
}

void be_staged_bucket_rs_start(backend_t *be, const float *send, float *recv, const int *counts, MPI_Comm comm)
{
    struct be_staged_s *s = staged(be);
    int size, me;
    MPI_CHECK(MPI_Comm_size(comm, &size));
    MPI_CHECK(MPI_Comm_rank(comm, &me));
    size_t all = 0;
    for (int r = 0; r < size; r++) all += (size_t)counts[r];
    const int i = be_bucket_claim(be);
    staged_bucket_t *b = bucket_at(s, i);
    /* the bucket, then this rank's piece of the sum after it */
    float *h = host_room(be, &b->host, &b->cap, all + (size_t)counts[me] + 1);
    be_to_host(be, h, send, all * sizeof(float));
    b->dev = counts[me] ? recv : NULL, b->n = (size_t)counts[me], b->back = all;
    be_cpu_bucket_rs_post(be, i, h, h + all, counts, comm);
}

void be_staged_buckets_progress(backend_t *be) { be_cpu_buckets_progress(be); }

void be_staged_buckets_wait(backend_t *be, const char *what)
{
    const int n = be->nbuckets;
    be_cpu_buckets_wait(be, what); /* every request of the step; cuda's NCCL buckets left theirs null */
    struct be_staged_s *s = be->staged;
    for (int i = 0; s && i < n && i < s->nbucket; i++) {
        staged_bucket_t *b = &s->bucket[i];
        if (!b->dev) continue;
        be_to_device(be, b->dev, b->host + b->back, b->n * sizeof(float));
        b->dev = NULL;
    }
}

void be_staged_free(backend_t *be)
{
    struct be_staged_s *s = be->staged;
    if (!s) return;
    if (s->buf) be_host_free(be, s->buf);
    for (int i = 0; i < s->nbucket; i++)
        if (s->bucket[i].host) be_host_free(be, s->bucket[i].host);
    free(s->bucket);
    free(s);
    be->staged = NULL;
}
