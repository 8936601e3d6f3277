/* The MPI probe: what a message and an all-reduce cost on this job's ranks, for the planner's
 * profile (src/plan/profile.c). Here because it is MPI and nothing else. */
#ifndef MP_PROBE_H
#define MP_PROBE_H

#include "wait.h"

#define PROBE_REPS_MAX 16

typedef struct {
    int ranks;                    /* ranks of the probe */
    double p2p_lat, p2p_bw;       /* ranks 0 and 1: seconds for a small message, bytes/s for a large one */
    double ar_lat, ar_bw;         /* the world's all-reduce: the same */
} probe_t;

/* Measures p (zeros for one rank). Collective over MPI_COMM_WORLD; every wait has w's deadline. */
void probe_run(const wait_cfg_t *w, int reps, probe_t *p);

#endif
