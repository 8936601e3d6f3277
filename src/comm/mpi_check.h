/* MPI's side of error reporting (core/check.h declares MPI_CHECK): the message of a failed MPI
 * call, and the job-wide abort that a fatal error on any rank must end in. */
#ifndef MP_MPI_CHECK_H
#define MP_MPI_CHECK_H

/* Once MPI is up: messages name `rank`, and mp_abortf ends the whole job with MPI_Abort. */
void mpi_check_init(int rank);

/* 1 while MPI is initialised and not finalised, else 0 (commands without CMD_MPI never initialise
 * it: their code paths must then call no MPI function but this one). Callable at any time. */
int mpi_check_up(void);

/* The start-up deadline. main arms SIGALRM (MINDPIPE_INIT_TIMEOUT) before MPI_Init and, for a command
 * that sets up a run (CMD_RUN), keeps it through the run's first agreements (the deck, the grid):
 * blocking MPI calls before any deck deadline exists, where a peer that died after MPI_Init left the
 * others waiting forever (a second kill during a recovery found it: validation/chaos). The run ends
 * it here once its own watchdog holds the start-up (run_layout). Idempotent. */
void mpi_startup_deadline_end(void);

#endif
