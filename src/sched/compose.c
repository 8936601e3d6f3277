/* The capability table: one row per schedule kind, per feature why it does not run with it (NULL: it
 * does). Adding a schedule is adding a row here and in schedule.c's; adding a feature a column. */
#include "compose.h"

#include <stdio.h>

#include "check.h"

const char *const compose_feature_names[COMPOSE_FEATURES] = {
    [COMPOSE_SUPERNET] = "a supernet (supernet.enabled=1, or its replicas: parallel.sp > 1)",
    [COMPOSE_BALANCE] = "memory.policy=balance (memory.policy or memory.layers)",
    [COMPOSE_NCCL_P2P] = "its pipeline messages through NCCL (parallel.p2p=nccl, or auto on cuda)",
    [COMPOSE_CUDA] = "train.device=cuda",
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
    return MP_OK;
}
