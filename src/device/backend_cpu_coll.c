/* The cpu backend's collectives and data-parallel buckets: MPI on host buffers, every wait through
 * wait.h (bounded by the deck's timeouts). The host-staged collectives (backend_staged.c: emu, and
 * cuda where ranks share a GPU) run these same calls on host copies of device buffers; with bf16
 * buckets (parallel.grad_reduce_dtype) they round those copies into a host wire of their own. */
#include "config.h"

#include "backend_cpu.h"

#include <stdint.h>
#include <stdlib.h>

#include "bf16.h"
#include "check.h"

void be_cpu_allreduce(backend_t *be, float *buf, size_t n, MPI_Op op, MPI_Comm comm, const char *what)
{
    if (n > INT32_MAX) MP_ABORT("%s: %zu elements, more than one MPI call takes", what, n);
    wait_allreduce(be->wait, buf, (int)n, MPI_FLOAT, op, comm, what);
}

void be_cpu_reduce_scatter(backend_t *be, const float *send, float *recv, size_t count, MPI_Comm comm,
                           const char *what)
{
    MPI_Request r;
    MPI_CHECK(MPI_Ireduce_scatter_block(send, recv, (int)count, MPI_FLOAT, MPI_SUM, comm, &r));
    wait_all_over(be->wait, 1, &r, comm, what);
}

void be_cpu_allgather(backend_t *be, float *buf, size_t count, MPI_Comm comm, const char *what)
{
    MPI_Request r;
    MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)count, MPI_FLOAT, comm, &r));
    wait_all_over(be->wait, 1, &r, comm, what);
}

/* ---- bf16 buckets (parallel.grad_reduce_dtype = bf16) ----
 * A bucket index's wire: its bf16 form (kept for the next step's bucket of that index), and where the
 * widened sum goes at the wait. MPI has no bf16 type: the wire travels as MPI_UINT16_T under our own
 * sum, which widens both sides, adds in fp32 and rounds: a + b rounds as b + a, so the operation is
 * commutative, and MPICH then gives every rank the same bits. */
typedef struct {
    uint16_t *buf;
    size_t cap;  /* bf16 elements */
    float *dst;  /* NULL: nothing to widen at the wait */
    size_t n;    /* elements widened into dst */
    size_t back; /* where in buf they start */
} wire_bucket_t;

struct be_wire_s {
    wire_bucket_t *bucket;
    int nbucket;
    MPI_Op sum;
};

static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++) b[i] = mp_bf16_round(mp_bf16_widen(a[i]) + mp_bf16_widen(b[i]));
}

/* Bucket index i's wire, holding at least n elements (its old contents not kept). */
static wire_bucket_t *wire_at(backend_t *be, int i, size_t n)
{
    struct be_wire_s *w = be->wire;
    if (!w) {
        if (!(w = be->wire = MP_CALLOC(1, sizeof *w))) MP_ABORT("out of memory for the bf16 gradient buckets");
        MPI_CHECK(MPI_Op_create(bf16_sum, 1, &w->sum));
    }
    if (i >= w->nbucket) {
        const int m = i + 1 > 2 * w->nbucket ? i + 1 : 2 * w->nbucket;
        wire_bucket_t *b = realloc(w->bucket, (size_t)m * sizeof *b);
        if (!b) MP_ABORT("out of memory for %d bf16 gradient buckets", m);
        for (int k = w->nbucket; k < m; k++) b[k] = (wire_bucket_t){NULL, 0, NULL, 0, 0};
        w->bucket = b, w->nbucket = m;
    }
    wire_bucket_t *b = &w->bucket[i];
    if (n > b->cap) {
        free(b->buf);
        if (!(b->buf = malloc((n ? n : 1) * sizeof *b->buf)))
            MP_ABORT("out of host memory for a bf16 gradient bucket of %zu elements", n);
        b->cap = n;
    }
    return b;
}

static void wire_round(uint16_t *dst, const float *src, size_t n)
{
    for (size_t k = 0; k < n; k++) dst[k] = mp_bf16_round(src[k]);
}

/* The waited-for buckets [0, n): their sums widened to where they go. */
static void wire_widen(backend_t *be, int n)
{
    struct be_wire_s *w = be->wire;
    for (int i = 0; w && i < n && i < w->nbucket; i++) {
        wire_bucket_t *b = &w->bucket[i];
        if (!b->dst) continue;
        for (size_t k = 0; k < b->n; k++) b->dst[k] = mp_bf16_widen(b->buf[b->back + k]);
        b->dst = NULL;
    }
}

void be_cpu_wire_free(backend_t *be)
{
    struct be_wire_s *w = be->wire;
    if (!w) return;
    for (int i = 0; i < w->nbucket; i++) free(w->bucket[i].buf);
    free(w->bucket);
    MPI_CHECK(MPI_Op_free(&w->sum));
    free(w);
    be->wire = NULL;
}

void be_cpu_bucket_post(backend_t *be, int i, float *buf, size_t n, MPI_Comm comm)
{
    if (n > INT32_MAX) MP_ABORT("a gradient bucket of %zu elements, more than one MPI call takes", n);
    be->bucket_comm = comm; /* every bucket of a step goes over the same communicator (replica) */
    if (be->bucket_bf16) {
        wire_bucket_t *b = wire_at(be, i, n);
        wire_round(b->buf, buf, n);
        b->dst = buf, b->n = n, b->back = 0;
        MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, b->buf, (int)n, MPI_UINT16_T, be->wire->sum, comm, &be->bucket_req[i]));
        return;
    }
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, comm, &be->bucket_req[i]));
}

void be_cpu_bucket_start(backend_t *be, float *buf, size_t n, MPI_Comm comm)
{
    be_cpu_bucket_post(be, be_bucket_claim(be), buf, n, comm);
}

void be_cpu_bucket_rs_post(backend_t *be, int i, const float *send, float *recv, const int *counts, MPI_Comm comm)
{
    be->bucket_comm = comm;
    if (be->bucket_bf16) {
        int size, me;
        MPI_CHECK(MPI_Comm_size(comm, &size));
        MPI_CHECK(MPI_Comm_rank(comm, &me));
        size_t all = 0;
        for (int r = 0; r < size; r++) all += (size_t)counts[r];
        /* the bucket, then this rank's piece of the sum after it */
        wire_bucket_t *b = wire_at(be, i, all + (size_t)counts[me]);
        wire_round(b->buf, send, all);
        b->dst = counts[me] ? recv : NULL, b->n = (size_t)counts[me], b->back = all;
        MPI_CHECK(MPI_Ireduce_scatter(b->buf, b->buf + all, counts, MPI_UINT16_T, be->wire->sum, comm,
                                      &be->bucket_req[i]));
        return;
    }
    MPI_CHECK(MPI_Ireduce_scatter(send, recv, counts, MPI_FLOAT, MPI_SUM, comm, &be->bucket_req[i]));
}

void be_cpu_bucket_rs_start(backend_t *be, const float *send, float *recv, const int *counts, MPI_Comm comm)
{
    be_cpu_bucket_rs_post(be, be_bucket_claim(be), send, recv, counts, comm);
}

void be_cpu_buckets_progress(backend_t *be)
{
    for (int i = 0; i < be->nbuckets; i++) {
        int done;
        MPI_CHECK(MPI_Test(&be->bucket_req[i], &done, MPI_STATUS_IGNORE));
    }
}

void be_cpu_buckets_wait(backend_t *be, const char *what)
{
    const int n = be->nbuckets;
    be->nbuckets = 0;
    wait_all_over(be->wait, n, be->bucket_req, n ? be->bucket_comm : MPI_COMM_NULL, what);
    wire_widen(be, n);
}
