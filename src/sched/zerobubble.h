/* The zero-bubble schedules' builders (schedule.h's zb1p, zbv, dualpipev; ARCHITECTURE.md §5). They
 * split each backward into B (input gradient, on the critical path) and W (weight gradient, free
 * to move) and use W's to fill what would be bubbles.
 *
 * zb1p and zbv are played out: a greedy list scheduler in the spirit of the Zero Bubble paper's
 * heuristic (Qi et al. 2023, §3.1) simulates the pipeline against per-chunk times (sched_costs_t
 * over v) with free messages, and each stage, whenever it is free, takes
 *   a forward, if one's input is there, the stage holds fewer than `limit` stashes (forward to W)
 *     and its forwards lead its B's by fewer than `warm` (of the ready ones, the latest chunk's:
 *     nearest the loss);
 *   else a B whose gradient is there (the oldest micro-batch; of two, the later chunk);
 *   else a W whose B has run (the oldest micro-batch; of two, the earlier chunk);
 *   else it waits for the next time anything ends.
 * Ties between stages free at once go to the lower stage; the play, and so every list, is a pure
 * function of (kind, pp, m, costs). What each stage did, in order, is its list.
 *   zb1p  the loop placement (v = 1), warm = pp − s (1F1B's warm-up), limit = pp (1F1B's peak,
 *         that of its stage 0): ZB-H1. With unit times the bubble is (pp−1)·(tf + tb − tw)
 *         (pp−1 units), a third of 1F1B's, the least any list can have with 1F1B's memory.
 *   zbv   the V placement (v = 2), no warm-up bound, limit = 2pp chunk stashes (pp stage units,
 *         1F1B's peak). With unit times it reaches the bound of the last stage's first input
 *         (pp−1 half-stage forwards) for most (pp, m): 128 of pp 2..8 × m 1..24, not for m < pp
 *         nor for pp < m <= pp + 3 at pp >= 3. For some times a stage fills its limit with
 *         first-arm forwards and the play
 *         cannot move; it is then played again with the last stash kept for the second arm.
 * dualpipev is DeepSeek's DualPipeV order written down (its eight phases per stage: forwards of the
 * first arm, of both, B-W-F triples, the steady overlapped F&B pairs, the cool-down's B's with
 * the second half split, W's), with a fused BACKWARD where DualPipeV does not defer the weight
 * gradient. An overlapped pair is one set of messages around two consecutive computations:
 * RECV_ACT, RECV_GRAD, FORWARD, BACKWARD, SEND_ACT, SEND_GRAD. Its overlap is the backward's
 * gradient arriving while the forward computes: MPI's receives are posted at their RECV and waited
 * for by their reader (lower.h's host lowering, the executor's exec_posted_t), so the forward starts
 * once its activation is there; the two computations run one after the other. */
#ifndef MP_ZEROBUBBLE_H
#define MP_ZEROBUBBLE_H

#include "schedule.h"

/* The list of `stage` (zb1p, zbv or dualpipev; (pp, m) already passed sched_check with v = 1 or 2)
 * for the times `c`. MP_OK, or MP_ERR (allocation; or a greedy play that cannot move, a bug, said
 * so; nothing left allocated). */
int zb_build(instr_list_t *out, sched_kind_t kind, int stage, int pp, int m, const sched_costs_t *c);

#endif
