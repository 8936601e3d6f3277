/* Live migration (pipeline.replan_every; DESIGN.md §6, docs/PLAN.md "Live migration"): at every
 * N-th step boundary the stages compare their measured compute times and, when a better split is
 * predicted to gain more than pipeline.replan_threshold, layers move between stages with their
 * weights, AdamW moments and 2bw's older version, and every rank rebuilds its stage for the new
 * split. Nothing in the arithmetic changes: the run continues bitwise as one without migration. */
#ifndef MP_MIGRATE_H
#define MP_MIGRATE_H

#include "run.h"

/* The migration's own state, kept by the training loop. */
typedef struct {
    int warmed;              /* the first step since the start or the last move has run (it is not measured) */
    int steps;               /* steps measured since the last re-plan ... */
    double *busy;            /* ... each one's compute seconds on this stage (pipeline.replan_every entries) */
    int moves;               /* moves made so far */
} migrate_t;

/* After step r->step's update (its evaluation and checkpoint written): records the step's compute
 * time (the first step since the start or a move is warm-up and is not recorded)
 * and, every pipeline.replan_every steps before the last, re-plans and moves. Collective over
 * MPI_COMM_WORLD (every rank calls it after every step; nothing without pipeline.replan_every).
 * A failure midway aborts the job naming the rank and the phase (the stage is half rebuilt). */
void migrate_after_step(run_t *r, migrate_t *mg);
void migrate_free(migrate_t *mg);

/* The current split (pp entries: layers per stage), as run_stage_chunks gives it. */
void migrate_sizes(const deck_t *d, const run_layout_t *lay, int *sizes_p);

#endif
