/* The set-up's agreement: its own file because every phase of the run's set-up (run.c, run_gpus.c)
 * ends in it, and they must not call each other round for it. */
#include "run.h"

#include <mpi.h>

#include "check.h"
#include "wait.h"

int run_agree(int rc)
{
    int bad = rc != MP_OK, any = 0;
    MPI_CHECK(MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    return any ? MP_ERR : MP_OK;
}

int run_agree_wait(const run_layout_t *lay, int rc, const char *what)
{
    int bad = rc != MP_OK;
    wait_allreduce(&lay->wait, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, what);
    return bad ? MP_ERR : MP_OK;
}
