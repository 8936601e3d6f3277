/* Whether a schedule survives NCCL point-to-point (sim_nccl.c): each stage's list lowered into
 * compute, activation and gradient streams with event waits (lower.h, the translation the executor's
 * NCCL path takes its waits from), run with sends and
 * receives that block their stream until the peer's matching call is at the head of its stream, and
 * messages matched by order per pair of ranks. The MPI executor needs less (sends never block,
 * messages matched by tag): a list valid for sim_run may deadlock or cross messages here. */
#ifndef MP_SIM_NCCL_H
#define MP_SIM_NCCL_H

#include "schedule.h"
#include "sim.h"

/* MP_OK when the lists (one per stage) run to the end with every message in its place; else MP_ERR
 * with res->error naming the stage, stream and instruction (only res->error is set). */
int sim_nccl_lists(const instr_list_t *lists, int pp, int m, int v, sim_result_t *res);
int sim_nccl_run(sched_kind_t kind, int pp, int m, int v, sim_result_t *res);

#endif
