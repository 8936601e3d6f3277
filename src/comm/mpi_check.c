#include "mpi_check.h"

#include <mpi.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

int mpi_check_up(void)
{
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    return up && !down;
}

static void mpi_check_abort_job(void)
{
    if (!mpi_check_up()) return;
    /* Hydra kills every rank and stops forwarding output as soon as it hears of the abort: give
     * it a moment to forward the message first (without it, about half the hung-peer timeouts
     * on this machine ended with no message at all) */
    const struct timespec pause = {0, 200 * 1000 * 1000};
    nanosleep(&pause, NULL);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

void mpi_startup_deadline_end(void) { alarm(0); }

void mpi_check_init(int rank)
{
    mp_check_set_rank(rank);
    mp_check_set_abort(mpi_check_abort_job);
}

void mp_mpi_fail(const char *file, int line, const char *what, int rc)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "code %d", rc);
    mp_abortf(file, line, "MPI call failed: %s: %s", what, msg);
}
