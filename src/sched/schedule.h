/* Pipeline schedules as plain instruction lists (ARCHITECTURE.md §5). A schedule is a pure function
 * (kind, stage, pp, m, v) -> the list of instructions that stage runs in one step (instr.h); one
 * executor runs the lists with non-blocking p2p, and the simulator (sim.h) runs the same lists with
 * no MPI.
 *
 * Model chunks: the L layers are cut into K = pp·v chunks, placed on the stages by the kind's
 * placement (instr.h: the interleaved loop, or zbv's and dualpipev's V). Chunk 0 embeds
 * (LOAD_BATCH), chunk K-1 computes the loss. Activations of (mb, k) go to chunk k+1, their
 * gradients come back from it.
 *
 * Every schedule runs each chunk's B's and each chunk's W's in micro-batch order 0..m-1 (a fused
 * BACKWARD is both): the W's sum the weight gradients in the order one rank accumulates them, so
 * pipelining changes no arithmetic (ARCHITECTURE.md §4); B carries no accumulation across
 * micro-batches, but its order is kept so that the W's read the B's results in the same order.
 *
 * 2bw's list for one step in isolation is 1f1b's (what `mindpipe sim` shows). Run, 2bw does not
 * flush between steps: sched_build_2bw's lists end a step with the forwards of the next batch's
 * first micro-batches (micro-batch index m + j means the next batch's j), so consecutive steps
 * join into one endless 1F1B stream; the executor keeps two weight versions (PipeDream-2BW).
 *
 * The zero-bubble kinds split the backward (zerobubble.h): zb1p (the Zero Bubble paper's ZB-H1:
 * 1F1B's memory, W's moved into the cool-down's bubble), zbv (ZB-V: the V placement, 1F1B's
 * memory) and dualpipev (DeepSeek's DualPipeV: the V placement with overlapped forward-backward
 * pairs). All three run (the executor's split backward; under zbv and dualpipev the executor places
 * the V and the turn, chunk pp−1 to chunk pp on stage pp−1, is a copy there; a dualpipev pair's
 * gradient receive is posted before its forward and waited for after it). */
#ifndef MP_SCHEDULE_H
#define MP_SCHEDULE_H

#include "instr.h"

typedef enum {
    SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_2BW, SCHED_ZB1P, SCHED_ZBV, SCHED_DUALPIPEV, SCHED_KINDS
} sched_kind_t;

/* parallel.schedule's names, by kind. */
extern const char *const sched_kind_names[SCHED_KINDS];

/* "gpipe" | "1f1b" | "interleaved" | "2bw" | "zb1p" | "zbv" | "dualpipev" -> kind; MP_OK or MP_ERR
 * (unknown name). */
int sched_kind_parse(const char *name, sched_kind_t *kind_p);

/* The placement of a kind's chunks. */
sched_place_t sched_kind_place(sched_kind_t kind);
/* Whether a kind's lists split the backward into BACKWARD_B and BACKWARD_W (the zero-bubble ones). */
int sched_kind_split(sched_kind_t kind);
/* Whether a kind's lists are played out from times (zb1p, zbv: zerobubble.h); the rest, dualpipev
 * among them, have one fixed order whatever the times. */
int sched_kind_played(sched_kind_t kind);
/* The weight versions a stage keeps under the kind: 2 for 2bw (W(t) and W(t−1): its checkpoints
 * carry /model_prev, every step drains under recovery.log), else 1. */
int sched_kind_versions(sched_kind_t kind);
/* The chunks per stage a kind runs with when none are asked for: 2 for the V kinds (their only
 * one), else 1. */
int sched_kind_default_v(sched_kind_t kind);
/* Chunk k's stage and local index under the kind's placement, and the inverse: what the runtime
 * calls (the deck names the kind, never the placement). */
int sched_chunk_stage(sched_kind_t kind, int k, int pp);
int sched_chunk_local(sched_kind_t kind, int k, int pp);
int sched_stage_chunk(sched_kind_t kind, int stage, int local, int pp);

/* Whether (kind, pp, m, v) is a schedule we can build; on MP_ERR, why (naming the rule). */
int sched_check(sched_kind_t kind, int pp, int m, int v, char *why, int why_len);

/* The instruction list of `stage` for one step. MP_OK or MP_ERR (bad arguments: see sched_check,
 * or allocation). The list is freed with sched_free. */
int sched_build(instr_list_t *out, sched_kind_t kind, int stage, int pp, int m, int v);
/* The same for the given times (NULL: sched_costs_unit), which only the builders that play the
 * pipeline out read (zb1p, zbv); the others' lists are fixed. */
int sched_build_costs(instr_list_t *out, sched_kind_t kind, int stage, int pp, int m, int v, const sched_costs_t *costs);

/* 2bw's list of `stage` for one step of a run without flushes. first: the previous step did not
 * run this batch's first forwards (the run's first step, or after a drained one); drain: end the
 * step with an empty pipeline (no forwards of the next batch: before an evaluation, a checkpoint
 * or the end of the run). first = drain = 1 gives 1f1b's list. MP_OK or MP_ERR. */
int sched_build_2bw(instr_list_t *out, int stage, int pp, int m, int first, int drain);

#endif
