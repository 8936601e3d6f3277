/* What combines with what, answered in one place (ARCHITECTURE.md §5 "What combines with what").
 * The run features each schedule kind does not run with, each with the reason users read, are one
 * row per kind of one table (compose.c), beside the kinds' own properties (a split backward, the
 * chunks' placement, a list played out from times or fixed: schedule.c's table, which it reads). The deck's validation, the run's start-up, the executor, the
 * cost model and the planner all ask compose_refused and print its words, so a rule cannot live in
 * one of them only; test_compose walks every kind × policy × feature and checks that they agree. */
#ifndef MP_COMPOSE_H
#define MP_COMPOSE_H

#include <stddef.h>

#include "schedule.h"

/* The run features a schedule may not run with (bits 1u << f of a feature set). */
typedef enum {
    COMPOSE_SUPERNET, /* a supernet: supernet.enabled = 1 (parallel.sp > 1 needs it) */
    COMPOSE_BALANCE,  /* memory.policy = balance at some layer (memory.policy or memory.layers) */
    COMPOSE_NCCL_P2P, /* the pipeline's messages through NCCL (parallel.p2p resolved to nccl) */
    COMPOSE_CUDA,     /* train.device = cuda */
    COMPOSE_FEATURES
} compose_feature_t;

/* How each feature is named to users, in the deck's words: "train.device=cuda", ... */
extern const char *const compose_feature_names[COMPOSE_FEATURES];

/* The kind a stage runs: with one stage every schedule but 2bw is 1f1b's arithmetic (2bw keeps its
 * two weight versions even there). */
sched_kind_t compose_run_kind(sched_kind_t kind, int pp);

/* Whether `kind` over pp stages runs with the features `have` (bits 1u << compose_feature_t). MP_OK,
 * or MP_ERR with why filled: "parallel.schedule=K with FEATURE: REASON; use ..." (the first feature,
 * in the enum's order, that it does not run with). */
int compose_refused(sched_kind_t kind, int pp, unsigned have, char *why, size_t n);

#endif
