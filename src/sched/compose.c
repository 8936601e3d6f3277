/* The capability tables: one row per schedule kind, per feature why it does not run with it (NULL: it
 * does); then the pairs of features that do not run together, each with why. Adding a schedule is
 * adding a row here and in schedule.c's; adding a feature a column, and its pairs. */
#include "compose.h"

#include <stdio.h>

#include "check.h"

const char *const compose_feature_names[COMPOSE_FEATURES] = {
    [COMPOSE_SUPERNET] = "a supernet (supernet.enabled=1, or its replicas: parallel.sp > 1)",
    [COMPOSE_BALANCE] = "memory.policy=balance (memory.policy or memory.layers)",
    [COMPOSE_NCCL_P2P] = "its pipeline messages through NCCL (parallel.p2p=nccl, or auto on cuda)",
    [COMPOSE_CUDA] = "train.device=cuda",
    [COMPOSE_OFFLOAD] = "memory.policy=offload (memory.policy or memory.layers)",
    [COMPOSE_MIGRATION] = "live migration (pipeline.replan_every > 0)",
    [COMPOSE_RECOVERY_LOG] = "recovery.log=1",
    [COMPOSE_ZERO1] = "ZeRO-1 (parallel.zero=1 over more than one replica: parallel.dp > 1 or parallel.sp > 1)",
    [COMPOSE_SP] = "supernet replicas (parallel.sp > 1)",
    [COMPOSE_CHUNKS] = "more than one chunk per stage (parallel.virtual_stages > 1, or a V schedule)",
    [COMPOSE_DEVICE_LIMIT] = "memory.device_limit",
    [COMPOSE_DEVICE] = "a device backend (train.device=emu or cuda)",
    [COMPOSE_BF16_GRADS] = "bf16 gradient sums (parallel.grad_reduce_dtype=bf16 over parallel.dp > 1)",
};

typedef struct {
    const char *no[COMPOSE_FEATURES];
} compose_row_t;

/* The reasons shared by several kinds. */
#define SPLIT_NO_SUPERNET                                                                                              \
    "not run yet: a subnet's selection would have to stay from each backward's input-gradient half (B) to its "       \
    "weight-gradient half (W), which other subnets' work may separate; use 1f1b"
#define SPLIT_NO_BALANCE                                                                                               \
    "the split backward keeps each stash on the device until its weight gradient (W) runs, and balance moves it to "  \
    "the partner stage between forward and backward, its lists bringing it back for a fused backward only; use keep, " \
    "selective, recompute or offload"
#define SPLIT_NO_NCCL                                                                                                  \
    "its messages run through MPI only for now (the split backward's NCCL path is untested); set parallel.p2p=mpi"
#define V_NO_CUDA                                                                                                      \
    "not run on a GPU yet (the V's second lane has no NCCL communicators and its MPI path is unchecked there); use "  \
    "train.device=cpu or emu, or zb1p"

static const compose_row_t rows[SCHED_KINDS] = {
    [SCHED_GPIPE] = {{0}},
    [SCHED_1F1B] = {{0}},
    [SCHED_INTERLEAVED] = {{0}},
    [SCHED_2BW] = {{[COMPOSE_SUPERNET] = "a subnet's candidates update right after its backward, which 2bw's delayed "
                                         "weights do not do; use 1f1b"}},
    [SCHED_ZB1P] = {{[COMPOSE_SUPERNET] = SPLIT_NO_SUPERNET, [COMPOSE_BALANCE] = SPLIT_NO_BALANCE,
                     [COMPOSE_NCCL_P2P] = SPLIT_NO_NCCL}},
    [SCHED_ZBV] = {{[COMPOSE_SUPERNET] = SPLIT_NO_SUPERNET, [COMPOSE_BALANCE] = SPLIT_NO_BALANCE,
                    [COMPOSE_NCCL_P2P] = SPLIT_NO_NCCL, [COMPOSE_CUDA] = V_NO_CUDA}},
    [SCHED_DUALPIPEV] = {{[COMPOSE_SUPERNET] = SPLIT_NO_SUPERNET, [COMPOSE_BALANCE] = SPLIT_NO_BALANCE,
                          [COMPOSE_NCCL_P2P] = SPLIT_NO_NCCL, [COMPOSE_CUDA] = V_NO_CUDA}},
};

/* The features that do not run with each other: a before b in the message, checked in this order. */
#define NO_LOG ". A lost rank cannot be rebuilt from the log here: set recovery.log=0, and a lost rank costs a "   \
               "restart from the newest checkpoint (at most checkpoint.every steps)"
#define MOVED_ONCE                                                                                                     \
    "their host buffers, copy engine and partner plans are built once at start; use keep, selective or recompute, " \
    "or set pipeline.replan_every=0"
#define REPLICA_LISTS "it rewrites lists the supernet replicas do not run (set parallel.sp=1, or keep, selective or recompute)"

static const struct {
    compose_feature_t a, b;
    const char *why;
} pairs[] = {
    {COMPOSE_OFFLOAD, COMPOSE_BALANCE,
     "both move the stash's movable region, one to host memory and one to another stage; give each layer one of them"},
    {COMPOSE_SUPERNET, COMPOSE_ZERO1,
     "ZeRO-1 shards the AdamW moments over the replicas and updates a shard of the flat buffer per step, but a "
     "supernet steps each candidate whole, with its own step counter, right after its subnet's backward, and the "
     "shared tensors once per window; set parallel.zero=0"},
    {COMPOSE_SUPERNET, COMPOSE_BF16_GRADS,
     "a supernet sums its replicas' gradients itself, in fp32 (the LM head's part of d wte apart), not through the "
     "buckets that travel as bf16; set parallel.grad_reduce_dtype=fp32"},
    {COMPOSE_SP, COMPOSE_CHUNKS, "the replicas' lists run one chunk per stage; set parallel.virtual_stages=1 or 1f1b"},
    {COMPOSE_SP, COMPOSE_OFFLOAD, REPLICA_LISTS},
    {COMPOSE_SP, COMPOSE_BALANCE, REPLICA_LISTS},
    {COMPOSE_RECOVERY_LOG, COMPOSE_BALANCE,
     "a stage's stashes live on its partner stage during the step, so a lost stage's replay would need the "
     "partner's copies, which no log holds" NO_LOG},
    {COMPOSE_RECOVERY_LOG, COMPOSE_MIGRATION,
     "a move re-lays the stages' buffers between two steps, so the log of the steps before a move does not replay "
     "on the split after it" NO_LOG},
    {COMPOSE_RECOVERY_LOG, COMPOSE_SUPERNET,
     "its window's gradient sums and each candidate's step counter cross the step boundary, outside every logged "
     "message" NO_LOG},
    {COMPOSE_MIGRATION, COMPOSE_CHUNKS,
     "live migration moves the boundaries of one chunk per stage; more chunks are not migrated (set "
     "pipeline.replan_every=0)"},
    {COMPOSE_MIGRATION, COMPOSE_SUPERNET,
     "a supernet's candidates, their counters and the window's sums are not migrated; set pipeline.replan_every=0"},
    {COMPOSE_MIGRATION, COMPOSE_OFFLOAD, MOVED_ONCE},
    {COMPOSE_MIGRATION, COMPOSE_BALANCE, MOVED_ONCE},
    {COMPOSE_MIGRATION, COMPOSE_DEVICE_LIMIT,
     "the new split's memory plan is not part of the decision, so a move could overrun the limit; set "
     "memory.device_limit=0 or pipeline.replan_every=0"},
    {COMPOSE_MIGRATION, COMPOSE_ZERO1,
     "ZeRO-1's moment shards are cut from the stage's flat buffer, which a move re-lays; set parallel.zero=0 or "
     "pipeline.replan_every=0"},
    {COMPOSE_MIGRATION, COMPOSE_DEVICE,
     "live migration is built and tested on the cpu backend only; set train.device=cpu or pipeline.replan_every=0"},
};

sched_kind_t compose_run_kind(sched_kind_t kind, int pp) { return pp == 1 && kind != SCHED_2BW ? SCHED_1F1B : kind; }

int compose_refused(sched_kind_t kind, int pp, unsigned have, char *why, size_t n)
{
    if ((int)kind < 0 || kind >= SCHED_KINDS) return snprintf(why, n, "unknown schedule kind %d", (int)kind), MP_ERR;
    const compose_row_t *r = &rows[compose_run_kind(kind, pp)];
    for (int f = 0; f < COMPOSE_FEATURES; f++)
        if ((have >> f & 1u) && r->no[f])
            return snprintf(why, n, "parallel.schedule=%s with %s: %s", sched_kind_names[kind], compose_feature_names[f],
                            r->no[f]),
                   MP_ERR;
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        if ((have >> pairs[i].a & 1u) && (have >> pairs[i].b & 1u))
            return snprintf(why, n, "%s with %s: %s", compose_feature_names[pairs[i].a],
                            compose_feature_names[pairs[i].b], pairs[i].why),
                   MP_ERR;
    return MP_OK;
}
