/* pipeline.layers = auto (docs/PLAN.md "auto at run time"): the planner's stage sizes for the deck,
 * chosen at start on every rank alike (a pure function of the deck). */
#ifndef MP_AUTOSPLIT_H
#define MP_AUTOSPLIT_H

#include "deck.h"

/* The layers of each of the deck's parallel.pp stages (v = 1) from planner.h's dynamic programming
 * over modelled per-layer times (the embedding's on stage 0, the head's on the last), every stage
 * under the deck's memory policy (keep when auto); *slowest_p gets the slowest stage's share of the
 * model's time in (0, 1]. MP_OK or MP_ERR (allocation). */
int autosplit_layers(const deck_t *d, int *sizes, double *slowest_p);

/* The modelled cost (forward + backward + the policy's re-run forward, on the nominal device above)
 * of each of the deck's layers into w_p (model.layers entries: a model.blocks shape scales the
 * uniform block's cost by its products' and attention's work, skip costs 0), of the embedding and
 * of the head: what live migration (migrate.c) deals measured stage times out by. MP_OK or MP_ERR. */
int autosplit_layer_costs(const deck_t *d, double *w_p, double *embed_p, double *head_p);

#endif
