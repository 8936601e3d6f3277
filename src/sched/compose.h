/* What combines with what, answered in one place (ARCHITECTURE.md §5 "What combines with what").
 * The run features each schedule kind does not run with, each with the reason users read, are one
 * row per kind of one table (compose.c), and the features that do not run with each other one pair
 * each of a second; beside them the kinds' own properties (a split backward, the
 * chunks' placement, a list played out from times or fixed: schedule.c's table, which it reads). The deck's validation, the run's start-up, the executor, the
 * cost model and the planner all ask compose_refused and print its words, so a rule cannot live in
 * one of them only; test_compose walks every kind × policy × feature and checks that they agree. */
#ifndef MP_COMPOSE_H
#define MP_COMPOSE_H

#include <stddef.h>

#include "schedule.h"

/* The run features (bits 1u << f of a feature set): what a schedule may not run with, and what may
 * not run with each other. */
typedef enum {
    COMPOSE_SUPERNET,     /* a supernet: supernet.enabled = 1 (parallel.sp > 1 needs it) */
    COMPOSE_BALANCE,      /* memory.policy = balance at some layer (memory.policy or memory.layers) */
    COMPOSE_NCCL_P2P,     /* the pipeline's messages through NCCL (parallel.p2p resolved to nccl) */
    COMPOSE_CUDA,         /* train.device = cuda */
    COMPOSE_OFFLOAD,      /* memory.policy = offload at some layer */
    COMPOSE_MIGRATION,    /* live migration: pipeline.replan_every > 0 */
    COMPOSE_RECOVERY_LOG, /* recovery.log = 1 */
    COMPOSE_ZERO1,        /* ZeRO-1: parallel.zero = 1 over parallel.dp > 1 */
    COMPOSE_SP,           /* supernet replicas: parallel.sp > 1 */
    COMPOSE_CHUNKS,       /* more than one chunk per stage: interleaved with virtual_stages > 1, or a V */
    COMPOSE_DEVICE_LIMIT, /* memory.device_limit set */
    COMPOSE_DEVICE,       /* a device backend: train.device other than cpu (emu, cuda) */
    COMPOSE_BF16_GRADS,   /* parallel.grad_reduce_dtype = bf16 over parallel.dp > 1 */
    COMPOSE_FEATURES
} compose_feature_t;

/* How each feature is named to users, with the keys that set it: "train.device=cuda", ... */
extern const char *const compose_feature_names[COMPOSE_FEATURES];

/* The kind a stage runs: with one stage every schedule but 2bw is 1f1b's arithmetic (2bw keeps its
 * two weight versions even there). */
sched_kind_t compose_run_kind(sched_kind_t kind, int pp);

/* Whether `kind` over pp stages runs with the features `have` (bits 1u << compose_feature_t), and
 * they with each other. MP_OK, or MP_ERR with why filled by the first rule broken: the kind's row
 * ("parallel.schedule=K with FEATURE: REASON; use ...", features in the enum's order), then the
 * pairs' table in its order ("FEATURE with FEATURE: REASON"). */
int compose_refused(sched_kind_t kind, int pp, unsigned have, char *why, size_t n);

#endif
