/* The vPipe planner (ARCHITECTURE.md §6 "Planner", docs/PLAN.md): searches tp × pp × dp, the
 * micro-batch, the schedule (1f1b, zb1p on 1f1b's boundaries, interleaved with v = 2 or 4), ZeRO-1,
 * the stage boundaries and a memory policy per stage, under the device's memory, and ranks what
 * fits by an objective.
 *
 * Stage boundaries (v = 1) come from dynamic programming over the layers, the embedding counted on
 * the first stage and the head on the last: it minimises the slowest stage's time per micro-batch
 * where each stage takes the fastest policy (keep, selective, offload, recompute) whose memory fits,
 * the stash counted for the micro-batches 1F1B keeps on that stage (min(m, pp − s)). Interleaved
 * layouts use balanced chunks. Every candidate's time then comes from cm_evaluate: the simulator
 * over its real instruction lists. Pure: no MPI, no files. */
#ifndef MP_PLANNER_H
#define MP_PLANNER_H

#include "costmodel.h"

typedef enum { PLAN_TIME, PLAN_ENERGY, PLAN_CARBON, PLAN_OBJECTIVES } plan_objective_t;
extern const char *const plan_objective_names[PLAN_OBJECTIVES];

/* The costs of one micro-batch of B sequences at tensor parallelism tp (from the device model or a
 * profile). MP_OK or MP_ERR (the caller cannot make them: the candidate is skipped). */
typedef int (*plan_costs_fn)(void *ctx, int B, int tp, cm_costs_t *c_p);

typedef struct {
    int ranks;                    /* the job's ranks */
    int per_node;                 /* ranks per node (devices per node for a GPU kind) */
    dev_prec_t prec;
    plan_objective_t objective;   /* energy and carbon rank alike (carbon = kWh × grid intensity) */
    int max_mb;                   /* largest micro-batch tried (powers of two up to it, and divisors) */
    int prefetch;                 /* memory.prefetch for offload */
    int threads;                  /* a CPU kind: train.threads (0: the node's cores ÷ ranks) */
    double min_tokens_per_s;      /* a deadline (--tokens N --deadline H): N ÷ 3600·H; 0: none */
} plan_opts_t;

typedef struct {
    cm_layout_t lay;
    cm_result_t res;
    double score;                 /* what the objective ranks: seconds or joules per step */
    int meets;                    /* 1: fast enough for the deadline (or there is none) */
} plan_t;

/* The DP above for v = 1: fills lay->chunk_layers and lay->policy (lay's dp, tp, pp, mb, kind and
 * zero given; m micro-batches). Returns the slowest stage's time per micro-batch, or -1 when no
 * boundaries and policies fit the device memory. */
double plan_partition(const cm_model_t *mo, const cm_costs_t *c, const dev_kind_t *d, cm_layout_t *lay, int m);

/* Whether the search proposes the split kind `kind` over pp stages on device kind d with costs c (1),
 * else 0 with why: what the runtime does not run it with on that kind (compose_refused: a GPU kind
 * runs on cuda with NCCL messages), or costs without a B/W split. */
int plan_split_usable(sched_kind_t kind, int pp, const cm_costs_t *c, const dev_kind_t *d, char *why, size_t n);

/* Whether a result is fast enough for a deadline of min_tokens_per_s (0: no deadline). */
int plan_meets(const cm_result_t *r, double min_tokens_per_s);

/* The `max` best plans that fit, best first (those that meet the deadline before those that do
 * not, each group by the objective), into out (*n_p of them). MP_OK (possibly with none
 * fitting: *n_p = 0) or MP_ERR (allocation). */
int plan_search(const cm_model_t *mo, const dev_kind_t *d, plan_costs_fn costs, void *ctx, const plan_opts_t *o,
                plan_t *out, int max, int *n_p);

#endif
