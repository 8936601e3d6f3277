/* Live migration's arithmetic (pipeline.replan_every; docs/PLAN.md "Live migration"): from the
 * compute time each pipeline stage measured, an estimate of every layer's cost, and the contiguous
 * split that minimises the slowest stage. Pure functions of their arguments (no MPI, no clock):
 * every rank feeds them the same all-reduced figures and gets the same split.
 *
 * Legend: L layers, pp stages. A stage's cost is the sum of its layers' costs, plus the embedding's
 * on stage 0 and the head's (final LayerNorm, LM head, loss) on the last: the placement the model
 * keeps whatever the split. */
#ifndef MP_REBALANCE_H
#define MP_REBALANCE_H

typedef struct {
    int L, pp;
    const int *sizes;         /* (pp) layers per stage now, each ≥ 1, summing to L */
    const double *stage_s;    /* (pp) measured compute seconds per stage (any common unit) */
    const double *w;          /* (L) modelled cost of each layer: only ratios within a stage matter */
    double w_embed, w_head;   /* modelled cost of the embedding (stage 0) and the head (last stage) */
} rebalance_in_t;

/* Each layer's measured cost: its stage's time dealt out over the stage's work in proportion to
 * the modelled costs (cost_p: L; the embedding's and head's shares into embed_p and head_p). A
 * stage whose modelled work is 0 gives its layers cost 0. */
void rebalance_costs(const rebalance_in_t *in, double *cost_p, double *embed_p, double *head_p);

/* The split of L layers into pp contiguous stages of at least one layer each that minimises the
 * slowest stage's cost (dynamic programming, O(pp·L²)); sizes_p gets pp entries. Returns that
 * slowest cost, or -1 when L < pp or on an allocation failure (sizes_p untouched). */
double rebalance_split(int L, int pp, const double *cost, double embed, double head, int *sizes_p);

/* The decision: the best split of the measured costs into sizes_p, the measured slowest stage into
 * *old_p and the predicted slowest stage of the new split into *new_p. Returns the predicted gain
 * 1 − new ÷ old (0 when the split is the current one or nothing was measured; -1 on failure). */
double rebalance_plan(const rebalance_in_t *in, int *sizes_p, double *old_p, double *new_p);

#endif
