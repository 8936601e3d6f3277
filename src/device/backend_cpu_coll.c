/* The cpu backend's collectives and data-parallel buckets: MPI on host buffers, every wait through
 * wait.h (bounded by the deck's timeouts). The host-staged collectives (backend_staged.c: emu, and
 * cuda where ranks share a GPU) run these same calls on host copies of device buffers. */
#include "config.h"

#include "backend_cpu.h"

#include <stdint.h>

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

void be_cpu_bucket_post(backend_t *be, int i, float *buf, size_t n, MPI_Comm comm)
{
    if (n > INT32_MAX) MP_ABORT("a gradient bucket of %zu elements, more than one MPI call takes", n);
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, comm, &be->bucket_req[i]));
    be->bucket_comm = comm; /* every bucket of a step goes over the same communicator (replica) */
}

void be_cpu_bucket_start(backend_t *be, float *buf, size_t n, MPI_Comm comm)
{
    be_cpu_bucket_post(be, be_bucket_claim(be), buf, n, comm);
}

void be_cpu_bucket_rs_post(backend_t *be, int i, const float *send, float *recv, const int *counts, MPI_Comm comm)
{
    MPI_CHECK(MPI_Ireduce_scatter(send, recv, counts, MPI_FLOAT, MPI_SUM, comm, &be->bucket_req[i]));
    be->bucket_comm = comm;
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
}
