/* `mindpipe profile -c DECK --out prof.json` (docs/PLAN.md "Profiles"): the per-layer costs of the
 * deck's model measured on this machine and backend, and a short MPI probe of point-to-point and
 * all-reduce latency and bandwidth over the job's ranks; `mindpipe plan --profile prof.json` plans
 * with them instead of a device kind's modelled compute. */
#ifndef MP_PROFILE_H
#define MP_PROFILE_H

#include "costmodel.h"
#include "deck.h"
#include "model.h"
#include "run_opts.h"
#include "wait.h"

typedef struct {
    cm_costs_t c;                 /* one micro-batch of c.B sequences at tp = 1, on c.cpu_threads threads */
    int layers, dim, seq_len;     /* the model profiled (plan refuses a profile of another shape) */
    int ranks;                    /* ranks of the probe */
    double p2p_lat, p2p_bw;       /* ping-pong between ranks 0 and 1 (0 with one rank) */
    double ar_lat, ar_bw;         /* all-reduce over every rank: latency and n/t at the largest n */
} profile_t;

/* Measures the deck's model (run on every rank of the job; rank 0 writes `out`). Exit status. */
int profile_main(const run_opts_t *o, const char *out);

/* Forward and backward seconds of one micro-batch through a `layers`-layer model of the deck's
 * shape, every block in `mode`, on the CPU backend: the fastest of `reps` timings (1..7) after a
 * warm-up. Used by pipeline.layers = auto at start (autosplit.c). MP_OK or MP_ERR. */
int profile_time_model(const deck_t *d, int layers, block_mode_t mode, int reps, const wait_cfg_t *w, double *fwd,
                       double *bwd);

/* Reads a profile written by profile_main. MP_OK or MP_ERR naming the file and the missing key. */
int profile_load(const char *path, profile_t *p);

#endif
