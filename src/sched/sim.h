/* The schedule simulator (ARCHITECTURE.md §5): runs every stage's instruction list (schedule.h), lowered
 * (lower.h), against a cost model, with no MPI. It proves a schedule free of deadlock (some stage can always advance
 * until all are done) and its messages matched (every SEND has exactly one RECV on the named peer,
 * for the same micro-batch and chunk), checks that each (micro-batch, chunk) runs its forward, its
 * B and its W exactly once on its stage (a BACKWARD is B and W), W after its B, B's and W's each in
 * micro-batch order per chunk, and computes the timeline: makespan, bubble and peak stashed
 * activations per stage. `mindpipe sim` and `mindpipe plan` use it. */
#ifndef MP_SIM_H
#define MP_SIM_H

#include "check.h"
#include "lower.h"
#include "schedule.h"

#define SIM_MAX_STAGES 64

/* The unit cost model every caller uses unless it has measured costs: a backward takes twice its
 * forward (the executor's bubble theory, `mindpipe sim`); split, B and W take one forward each. */
#define SIM_COST_TF 1.0
#define SIM_COST_TB 2.0

typedef struct {
    double makespan;                 /* time of the last instruction's end (the step starts at 0) */
    double busy;                     /* compute time of one stage: m·(tf + tb + tw) */
    double bubble;                   /* 1 − busy / makespan */
    double span;                     /* the longest stage's span: from its first forward, B or W to the
                                        end of its last */
    double span_bubble;              /* 1 − busy / span: the Zero Bubble paper's bubble rate, which does
                                        not count a stage's wait for its first input (at least the
                                        forwards of the chunks before it) */
    int peak_stash[SIM_MAX_STAGES];  /* most forwards awaiting their W (or fused backward), per stage: the
                                        stash slots (sched_list_peak) */
    int peak_stash_b[SIM_MAX_STAGES]; /* most forwards awaiting their B (sched_list_peak_b) */
    double peak_units[SIM_MAX_STAGES]; /* peak_stash in stage-activation units: one unit is one
                                          micro-batch's activations of all the stage's layers, so a
                                          chunk's stash weighs 1/v (V: 1/2; its layers split evenly) */
    double peak_units_max;           /* the most of peak_units over the stages: what a device must hold */
    char error[256];                 /* why the schedule is invalid ("" when it is valid) */
} sim_result_t;

/* The split times of a fused model: forward tf, backward tb halved into B and W (so a BACKWARD
 * still takes tb and the unit model 1, 2 gives B = W = 1). */
sched_costs_t sim_costs_fused(double tf, double tb);

/* Simulates one step of (kind, pp, m, v) with forward time tf and backward time tb per stage (a
 * chunk takes 1/v of them; a split backward's B and W tb/2 each, sim_costs_fused); the lists are
 * built for those times. Messages are free. MP_OK when valid, else MP_ERR with res->error. */
int sim_run(sched_kind_t kind, int pp, int m, int v, double tf, double tb, sim_result_t *res);
/* The same with the three times given (NULL: unit, 1, 1, 1). */
int sim_run_costs(sched_kind_t kind, int pp, int m, int v, const sched_costs_t *unit, sim_result_t *res);

/* The same on given lists (one per stage), e.g. hand-written ones in tests. */
int sim_run_lists(const instr_list_t *lists, int pp, int m, int v, double tf, double tb, sim_result_t *res);
int sim_run_lists_costs(const instr_list_t *lists, int pp, int m, int v, const sched_costs_t *unit, sim_result_t *res);

/* How messages meet (lower.h): MPI's tags (a send never blocks its stream, a receive takes the
 * message of its chunk and micro-batch whatever the order) or NCCL's order (a send and a receive
 * block their streams until they meet, and must be each other's message). */
typedef enum { SIM_MATCH_TAG, SIM_MATCH_ORDER } sim_match_t;

/* The one engine of both simulators: the lowered programs (one per stage, of `lists`) run under
 * `rule`, compute ops costing unit's times over v (forward tf, BACKWARD tb + tw, BACKWARD_B tb,
 * BACKWARD_W tw), messages free. Sets res->makespan and res->span; MP_ERR with res->error on a
 * deadlock or (order rule) a crossed message. */
int sim_run_programs(const instr_list_t *lists, const lower_prog_t *progs, int pp, int v, sim_match_t rule,
                     const sched_costs_t *unit, sim_result_t *res);
/* The lists checked (each forward, B and W once, in order, messages to the right stages),
 * lowered to `target` and run under `rule`; fills all of res. sim_run_lists is the MPI executor's
 * case (host, tags); sim_nccl_lists the NCCL executor's (streams, order). */
int sim_lower_and_run(const instr_list_t *lists, int pp, int m, int v, lower_target_t target, sim_match_t rule,
                      const sched_costs_t *unit, sim_result_t *res);

/* Per-instruction costs (the planner's, costmodel.h): a compute op's seconds (FORWARD, BACKWARD,
 * REDUCE_GRADS, OFFLOAD, PREFETCH, ... as lowered) and a message's seconds on the wire (asked of
 * its SEND instruction on the sending stage), both pure functions of (ctx, stage, instruction). */
typedef struct {
    double (*compute)(const void *ctx, int stage, const instr_t *in);
    double (*wire)(const void *ctx, int stage, const instr_t *in);
    const void *ctx;
} sim_costs_t;

/* sim_lower_and_run with those costs instead of tf/tb and free messages; res->busy and res->bubble
 * keep the uniform model's meaning (0 here): the caller knows its costs. */
int sim_run_costed(const instr_list_t *lists, int pp, int m, int v, lower_target_t target, sim_match_t rule,
                   const sim_costs_t *costs, sim_result_t *res);

/* Every stage's list of (kind, pp, m, v) (res cleared; on MP_ERR res->error says why and nothing is
 * left allocated); freed with sim_free_lists(lists, pp). The zero-bubble kinds are built for the
 * unit times, or for `unit` with sim_build_lists_costs. */
int sim_build_lists(instr_list_t *lists, sched_kind_t kind, int pp, int m, int v, sim_result_t *res);
int sim_build_lists_costs(instr_list_t *lists, sched_kind_t kind, int pp, int m, int v, const sched_costs_t *unit,
                          sim_result_t *res);
void sim_free_lists(instr_list_t *lists, int n);

/* Formats why a schedule is invalid into res->error; returns MP_ERR (for the simulators). */
int sim_fail(sim_result_t *res, const char *fmt, ...) MP_PRINTF(2, 3);

#endif
