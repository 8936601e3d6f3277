#include "nodelink.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "check.h"
#include "mpi_check.h"

int nodelink_init(nodelink_t *l, MPI_Comm node)
{
    memset(l, 0, sizeof *l);
    int rank;
    MPI_CHECK(MPI_Comm_rank(node, &rank));
    const MPI_Aint bytes = rank == 0 ? (MPI_Aint)(2 * sizeof(pthread_mutex_t)) : 0;
    void *base;
    MPI_CHECK(MPI_Win_allocate_shared(bytes, 1, MPI_INFO_NULL, node, &base, &l->win));
    MPI_Aint size;
    int unit;
    MPI_CHECK(MPI_Win_shared_query(l->win, 0, &size, &unit, &l->locks));
    int rc = 0;
    if (rank == 0) {
        pthread_mutexattr_t a;
        pthread_mutexattr_init(&a);
        rc |= pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
        rc |= pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
        for (int d = 0; d < 2; d++) rc |= pthread_mutex_init((pthread_mutex_t *)l->locks + d, &a);
        pthread_mutexattr_destroy(&a);
    }
    MPI_CHECK(MPI_Bcast(&rc, 1, MPI_INT, 0, node)); /* and every rank sees the locks initialised */
    if (rc) {
        MPI_Win_free(&l->win);
        return MP_FAIL("memory.coordinate: cannot create the node's process-shared link locks");
    }
    l->on = 1;
    return MP_OK;
}

void nodelink_free(nodelink_t *l)
{
    if (!l->on) return;
    MPI_CHECK(MPI_Win_free(&l->win));
    l->on = 0;
}

void nodelink_lock(void *ctx, int dir)
{
    nodelink_t *l = ctx;
    pthread_mutex_t *mu = (pthread_mutex_t *)l->locks + dir;
    int rc = pthread_mutex_lock(mu);
    if (rc == EOWNERDEAD) rc = pthread_mutex_consistent(mu); /* its owner died mid-copy: the link is free */
    if (rc) MP_ABORT("memory.coordinate: cannot take the node's host-link lock (error %d)", rc);
}

void nodelink_unlock(void *ctx, int dir)
{
    nodelink_t *l = ctx;
    pthread_mutex_unlock((pthread_mutex_t *)l->locks + dir);
}
