/* MPI's side of error reporting (core/check.h declares MPI_CHECK): the message of a failed MPI
 * call, and the job-wide abort that a fatal error on any rank must end in. */
#ifndef MP_MPI_CHECK_H
#define MP_MPI_CHECK_H

/* Once MPI is up: messages name `rank`, and mp_abortf ends the whole job with MPI_Abort. */
void mpi_check_init(int rank);

/* 1 while MPI is initialised and not finalised, else 0 (commands without CMD_MPI never initialise
 * it: their code paths must then call no MPI function but this one). Callable at any time. */
int mpi_check_up(void);

#endif
