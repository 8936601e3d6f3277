/* Deadlines for what a rank cannot time out itself (ARCHITECTURE.md §7). MindPipe's own waits poll
 * with a deadline (wait.h), but HDF5's collective calls block inside MPI-IO, so a rank whose peer
 * failed or stopped in a checkpoint would wait there forever, deaf to SIGTERM. A watchdog thread
 * holds the deadline of the phase the rank is in: past it, the rank reports the phase, the deadline's
 * deck key and itself, and aborts the job (MPI_Abort: the launcher ends every rank, the batch job can
 * requeue and resume). It also bounds a stop: train.stop_grace seconds after a stop signal a rank
 * still short of its exit leaves with status 75, without a checkpoint, the newest one untouched. */
#ifndef MP_WATCHDOG_H
#define MP_WATCHDOG_H

#include <pthread.h>

typedef struct {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int running, quit;
    char who[96];            /* "rank 3 (dp 1, pp 1)": how messages name this rank */
    char phase[256];         /* armed: what this rank is doing ("" nothing) */
    const char *key;         /* the deck key holding the deadline (a static string) */
    double limit, since;     /* seconds allowed; when the phase began (perf_now) */
    double stop_grace;       /* seconds from a stop signal to the exit; 0: unbounded */
    int stop_code;           /* exit status then */
    double stop_seen;        /* when the watchdog first saw the stop signal; 0: not yet */
    char status[4300];       /* RUN/exit_status, written when the watchdog ends the rank ("" not yet) */
} watchdog_t;

/* Starts the thread (one per process). who names this rank in messages; stop_grace as
 * train.stop_grace; stop_code the exit status when the grace runs out. MP_OK or MP_ERR. */
int watchdog_start(watchdog_t *w, const char *who, double stop_grace, int stop_code);

/* This rank enters phase (copied) and must leave it within limit seconds, the value of deck key key
 * (a static string); limit 0 arms nothing. Replaces any phase armed before. */
void watchdog_arm(watchdog_t *w, const char *phase, const char *key, double limit);

/* The phase is over. */
void watchdog_disarm(watchdog_t *w);

/* The run directory's exit_status file (rundir_exit_status): the watchdog writes it too when it ends
 * this rank (set once the directory exists). */
void watchdog_status_file(watchdog_t *w, const char *path);

/* Stops and joins the thread (safe on a watchdog never started). */
void watchdog_end(watchdog_t *w);

#endif
