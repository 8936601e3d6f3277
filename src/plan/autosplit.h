/* pipeline.layers = auto (docs/PLAN.md "auto at run time"): the planner's stage sizes for the deck,
 * chosen once at start on every rank alike, from this run's own timings of a block and of the
 * embedding and head (rank 0 measures, every rank splits by the same numbers). */
#ifndef MP_AUTOSPLIT_H
#define MP_AUTOSPLIT_H

/* The shortest 2-layer pass the start-up times (seconds): a shorter one is the host's noise. */
#define AUTOSPLIT_MIN_PASS_S 0.02

#include "deck.h"
#include "wait.h"

/* What pipeline.layers = auto chose at start, and the timings it and live migration use. */
typedef struct {
    int on;          /* the deck asked for auto (its split is now in pipeline.layers) */
    int measured;    /* 1: timed at start (auto or pipeline.replan_every, train.device cpu or emu, a
                      * 2-layer pass of at least 20 ms: below, the host's noise would decide) */
    double block_s;  /* measured: one block's forward, backward and policy re-run, one micro-batch */
    double rest_s;   /* measured: the embedding's and head's, one micro-batch */
    double took_s;   /* the measurement's wall time */
    double pass_s;   /* the 2-layer model's forward + backward (0: not timed) */
    double share;    /* auto: the slowest stage's share of the modelled step */
} autosplit_t;

/* For pipeline.layers = auto or pipeline.replan_every > 0: times a 1- and a 2-layer model of the
 * deck's shape on the CPU backend (rank 0; not for train.device = cuda, which this host cannot
 * run) and shares the times over MPI_COMM_WORLD; for auto, writes the planner's split into
 * d->pipeline.chunks. Collective over MPI_COMM_WORLD when the deck asks for either; nothing
 * otherwise. MP_OK or MP_ERR. */
int autosplit_resolve(deck_t *d, const wait_cfg_t *w, int rank, autosplit_t *a);

/* The layers of each of the deck's parallel.pp stages (v = 1) from planner.h's dynamic programming
 * over per-layer times (the embedding's on stage 0, the head's on the last), every stage under the
 * deck's memory policy (keep when auto): the nominal device's modelled times, scaled to a's
 * measured block and rest when a is measured (a may be NULL); *slowest_p gets the slowest stage's
 * share of the model's time in (0, 1]. MP_OK or MP_ERR (allocation). */
int autosplit_layers(const deck_t *d, const autosplit_t *a, int *sizes, double *slowest_p);

/* The cost of each of the deck's layers into w_p (model.layers entries: forward + backward + its
 * policy's re-run forward; a model.blocks shape scales the uniform block's cost by its products'
 * and attention's work, skip costs 0), of the embedding and of the head, in the same units: a's
 * measured seconds when a is measured, else the nominal device's. What live migration
 * (migrate.c) deals measured stage times out by. MP_OK or MP_ERR. */
int autosplit_layer_costs(const deck_t *d, const autosplit_t *a, double *w_p, double *embed_p, double *head_p);

#endif
