/* Stop requests from the batch system (ARCHITECTURE.md §7): SIGUSR1 (Slurm's --signal=B:USR1@T) and SIGTERM
 * (scancel, preemption, PBS's kill before the wall-time) ask the run to checkpoint at the next step
 * boundary and exit with MP_EXIT_REQUEUE, so the job script can requeue and resume with
 * `--resume auto`. A second signal does not hurry it: a checkpoint half-written is worth nothing. */
#ifndef MP_SIGNALS_H
#define MP_SIGNALS_H

/* Exit status of a run that stopped on request after writing a checkpoint (EX_TEMPFAIL). */
#define MP_EXIT_REQUEUE 75

/* Installs the handlers (idempotent). */
void signals_install(void);
/* The signal number received since install (0 none). */
int signals_pending(void);

#endif
