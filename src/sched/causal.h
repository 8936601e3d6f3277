/* NASPipe's causal synchronous parallelism as instruction lists (ARCHITECTURE.md §4, §5): the
 * subnets of one supernet window run through the pipeline as micro-batches, several at once.
 * Subnet j may run its forward on a stage only when no earlier subnet that has not yet finished
 * there (its backward, and with it its candidates' update) activates a candidate of that stage
 * that j also activates; the first eligible subnet in index order runs. Backwards run in subnet
 * order on every stage, so the shared gradients sum in the sequential reference's order. The
 * builder plays the rule out against unit costs (forward 1, backward 2, messages free), like the
 * simulator, and writes down each stage's order. After a subnet's last backward on a stage comes an
 * OPTIMIZER_STEP whose mb is that backward's: the subnet's candidates of the stage step there, and
 * the next conflicting forward on the stage comes after it. */
#ifndef MP_CAUSAL_H
#define MP_CAUSAL_H

#include "schedule.h"

typedef struct {
    int pp, n;               /* stages; subnets in the window (the micro-batches) */
    int layers, ncand;       /* the supernet's layers and candidates per choice block */
    const int *layer0;       /* pp + 1 entries: stage s holds layers [layer0[s], layer0[s + 1]) */
    const int *sel;          /* n × layers: subnet j's candidate of layer l (-1: not a choice block) */
    const unsigned char *weightless; /* ncand: candidate k holds no weights (skip: never conflicts) */
    int in_flight;           /* most forwards awaiting their backward per stage (0: 1F1B's pp − s) */
    int per;                 /* micro-batches per subnet (0 or 1: one); list micro-batch j·per + k is
                                subnet j's k-th, and the micro-batches of one subnet never conflict */
    int serial;              /* every two subnets conflict: one subnet at a time through the pipeline,
                                the baseline the causal lists are measured against */
    int subnets_cap;         /* most subnets in flight on a stage, from their first forward there to
                                their step (0: no cap): a device with that many slots per choice
                                block holds their candidates (supernet.resident = host) */
} causal_cfg_t;

typedef struct {
    double makespan;         /* in forward times */
    double sequential;       /* the same subnets one at a time through the pipeline: 3·pp per subnet
                                (per = 1; else 0: build with serial = 1 for it) */
    int stalls;              /* times a stage idled with a forward ready but blocked by a conflict */
} causal_result_t;

/* Whether subnets i and j activate a common candidate (with weights) on stage s. */
int causal_conflict(const causal_cfg_t *c, int s, int i, int j);

/* Every stage's list of the window (lists[0..pp)), and the played-out timeline in *res. MP_OK, or
 * MP_ERR (allocation; nothing left allocated). Free with sim_free_lists. */
int causal_build(const causal_cfg_t *c, instr_list_t *lists, causal_result_t *res);

#endif
