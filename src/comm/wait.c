#include "wait.h"

#include <sched.h>
#include <unistd.h>

#include "check.h"
#include "perf.h"

int wait_node_oversubscribed(int node_ranks) { return node_ranks > sysconf(_SC_NPROCESSORS_ONLN); }

void wait_cfg_init(wait_cfg_t *w, deck_wait_t mode, double timeout, int node_ranks)
{
    w->yield = mode == DECK_WAIT_YIELD || (mode == DECK_WAIT_AUTO && wait_node_oversubscribed(node_ranks));
    w->timeout = timeout;
}

void wait_all(const wait_cfg_t *w, int n, MPI_Request *reqs, const char *what)
{
    const double t0 = perf_now();
    int first = 0; /* requests before this one have completed */
    for (long polls = 0;; polls++) {
        while (first < n) {
            int done = 0;
            MPI_Status st;
            MPI_CHECK(MPI_Test(&reqs[first], &done, &st));
            if (!done) break;
            first++;
        }
        if (first == n) return;
        if (w->yield) sched_yield();
        if (w->timeout > 0 && (polls & 1023) == 0 && perf_now() - t0 > w->timeout)
            MP_ABORT("waited more than parallel.timeout = %g s for %s: a peer rank is dead or hung", w->timeout,
                     what);
    }
}

void wait_allreduce(const wait_cfg_t *w, void *buf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                    const char *what)
{
    MPI_Request r;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, count, type, op, comm, &r));
    wait_all(w, 1, &r, what);
}

void wait_allreduce_sum(const wait_cfg_t *w, void *buf, int count, MPI_Datatype type, MPI_Comm comm,
                        const char *what)
{
    wait_allreduce(w, buf, count, type, MPI_SUM, comm, what);
}

void wait_barrier(const wait_cfg_t *w, MPI_Comm comm, const char *what)
{
    MPI_Request r;
    MPI_CHECK(MPI_Ibarrier(comm, &r));
    wait_all(w, 1, &r, what);
}
