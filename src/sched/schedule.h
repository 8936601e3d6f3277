/* Pipeline schedules as plain instruction lists (ARCHITECTURE.md §5). A schedule is a pure function
 * (kind, stage, pp, m, v) -> the list of instructions that stage runs in one step; one executor
 * runs the lists with non-blocking p2p, and the simulator (sim.h) runs the same lists with no MPI.
 *
 * Model chunks: the L layers are cut into K = pp·v chunks, placed on the stages by the schedule's
 * placement (sched_place_t below: Megatron's interleaved loop for every schedule so far). Chunk 0
 * embeds (LOAD_BATCH), chunk K-1 computes the loss. Activations of (mb, k) go to chunk k+1, their
 * gradients come back from it.
 *
 * A backward is either one BACKWARD or split in two (the zero-bubble schedules): BACKWARD_B, the
 * input gradient, on the critical path (its SEND_GRAD follows it), and BACKWARD_W, the weight
 * gradient, which may run any time after its B. BACKWARD is B then W fused. Every schedule runs
 * each chunk's B and each chunk's W in micro-batch order 0..m-1: the W's sum the weight gradients
 * in the order one rank accumulates them, so pipelining changes no arithmetic (ARCHITECTURE.md
 * §4); B carries no accumulation across micro-batches, but its order is kept so that a W may run
 * the B's saved gradient in the same order.
 *
 * 2bw's list for one step in isolation is 1f1b's (what `mindpipe sim` shows). Run, 2bw does not
 * flush between steps: sched_build_2bw's lists end a step with the forwards of the next batch's
 * first micro-batches (micro-batch index m + j means the next batch's j), so consecutive steps
 * join into one endless 1F1B stream; the executor keeps two weight versions (PipeDream-2BW). */
#ifndef MP_SCHEDULE_H
#define MP_SCHEDULE_H

typedef enum {
    OP_LOAD_BATCH, OP_FORWARD, OP_BACKWARD, OP_SEND_ACT, OP_RECV_ACT, OP_SEND_GRAD, OP_RECV_GRAD,
    OP_OFFLOAD, OP_PREFETCH, OP_REDUCE_GRADS, OP_OPTIMIZER_STEP,
    /* the split backward of (mb, chunk): B the input gradient (what SEND_GRAD sends), W the weight
     * gradient; the stash of a forward is held until its W (B leaves W what it needs) */
    OP_BACKWARD_B, OP_BACKWARD_W,
    /* BPipe's balance (memlists.h): the evictor sends a stash away (EVICT) and posts its receive
     * back (RECLAIM); the acceptor posts its receive (ACCEPT) and sends it back (RETURN). mb and
     * chunk name the evictor's stash, peer the other stage. */
    OP_EVICT, OP_ACCEPT, OP_RETURN, OP_RECLAIM, OP_COUNT
} op_t;

typedef enum { SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_2BW, SCHED_KINDS } sched_kind_t;

/* parallel.schedule's names, by kind. */
extern const char *const sched_kind_names[SCHED_KINDS];

typedef struct {
    op_t op;
    int mb;      /* micro-batch, -1 for step-level instructions */
    int chunk;   /* global model chunk k in [0, pp·v), -1 for step-level instructions */
    int peer;    /* SEND/RECV: the stage on the other side */
} instr_t;

/* Where a schedule's chunks live: chunk k of K = pp·v on which stage, as which of its local chunks
 * (local chunks count in ascending k, so a stage's layer ranges ascend too).
 *   SCHED_PLACE_LOOP  Megatron's interleaved loop: chunk k on stage k mod pp as local k div pp
 *                     (v = 1: chunk k on stage k). Every boundary sends to the next stage mod pp.
 *   SCHED_PLACE_V     v = 2 in a V: stage s holds chunk s (local 0) and chunk 2pp−1−s (local 1).
 *                     Activations go down the stages through chunks 0..pp−1, turn on stage pp−1
 *                     (chunk pp−1 hands chunk pp its output there, no message) and come back up
 *                     through chunks pp..2pp−1, so the last chunk, with the loss, is on stage 0.
 *                     Every stage holds one early and one late chunk, which evens out both the
 *                     stashes and the work of the first and last stages.
 * Every list carries its placement, so the simulator, the lowering and the executor read chunk
 * k's stage from the list itself; nothing outside this file computes it. */
typedef enum { SCHED_PLACE_LOOP, SCHED_PLACE_V } sched_place_t;

/* Per-stage compute times of one micro-batch (all the stage's chunks together; a chunk takes 1/v
 * of each): forward, input gradient B, weight gradient W. A fused BACKWARD takes tb + tw. The unit
 * model the zero-bubble builders use by default is tf = tb = tw = 1; the fused schedules' unit
 * model (forward 1, backward 2) is the same times. */
typedef struct {
    double tf, tb, tw;
} sched_costs_t;

extern const sched_costs_t sched_costs_unit; /* 1, 1, 1 */

typedef struct {
    instr_t *ins;
    int n, cap;
    sched_place_t place; /* of the chunks its instructions name ({0}: the loop) */
} instr_list_t;

extern const char *const op_names[OP_COUNT];

/* "gpipe" | "1f1b" | "interleaved" | "2bw" -> kind; MP_OK or MP_ERR (unknown name). */
int sched_kind_parse(const char *name, sched_kind_t *kind_p);

/* The placement of a kind's chunks. */
sched_place_t sched_kind_place(sched_kind_t kind);
/* Chunk k's stage and local index under `place` with pp stages, and the inverse (the global chunk
 * that is local chunk `local` of `stage`). Pure arithmetic: arguments in range are the caller's. */
int sched_place_stage(sched_place_t place, int k, int pp);
int sched_place_local(sched_place_t place, int k, int pp);
int sched_place_chunk(sched_place_t place, int stage, int local, int pp);
/* The same by schedule kind: what the runtime calls (the deck names the kind, never the placement). */
int sched_chunk_stage(sched_kind_t kind, int k, int pp);
int sched_chunk_local(sched_kind_t kind, int k, int pp);
int sched_stage_chunk(sched_kind_t kind, int stage, int local, int pp);
/* Whether the boundary between chunk k and k+1 is crossed without a message (both chunks on one
 * stage by design, not a pipeline of one stage: pp = 1 under the loop still sends to itself). */
int sched_place_edge_local(sched_place_t place, int k, int pp);
/* The lane of the boundary between chunk k and k+1 of K: 0 where the chunks go down the stages (the
 * loop's every boundary, V's first arm), 1 on V's way back up. The lowering gives each lane its own
 * message streams (lower.h): one boundary of two stages carries both lanes under V, each way. */
int sched_place_lane(sched_place_t place, int k, int K);

/* Most forwards awaiting their backward at any point of `l` (the stash slots it needs), starting
 * with `carried` already stashed (2bw: the next batch's forwards a previous step ran). A stash is
 * held from its FORWARD to its W (BACKWARD_W, or the fused BACKWARD). The one definition of a
 * list's stash peak: the simulator and the executor both use it. */
int sched_list_peak(const instr_list_t *l, int carried);
/* The same counting each stash only until its B (BACKWARD_B or BACKWARD): the forwards whose whole
 * activations the input gradient still needs. Between B and W a stash keeps only what W reads
 * (each weight's input and output gradient); how much that is depends on the model. */
int sched_list_peak_b(const instr_list_t *l, int carried);

/* Whether (kind, pp, m, v) is a schedule we can build; on MP_ERR, why (naming the rule). */
int sched_check(sched_kind_t kind, int pp, int m, int v, char *why, int why_len);

/* The instruction list of `stage` for one step. MP_OK or MP_ERR (bad arguments: see sched_check,
 * or allocation). The list is freed with sched_free. */
int sched_build(instr_list_t *out, sched_kind_t kind, int stage, int pp, int m, int v);
/* The same for the given times (NULL: sched_costs_unit), which only the builders that play the
 * pipeline out read (the zero-bubble kinds); the others' lists are fixed. */
int sched_build_costs(instr_list_t *out, sched_kind_t kind, int stage, int pp, int m, int v, const sched_costs_t *costs);
void sched_free(instr_list_t *l);

/* 2bw's list of `stage` for one step of a run without flushes. first: the previous step did not
 * run this batch's first forwards (the run's first step, or after a drained one); drain: end the
 * step with an empty pipeline (no forwards of the next batch: before an evaluation, a checkpoint
 * or the end of the run). first = drain = 1 gives 1f1b's list. MP_OK or MP_ERR. */
int sched_build_2bw(instr_list_t *out, int stage, int pp, int m, int first, int drain);

/* For builders of other schedules (causal.h): (micro-batch mb, chunk k of K) forward with its
 * receive (or LOAD_BATCH) before and its send after; its backward likewise; the step's end
 * (REDUCE_GRADS, OPTIMIZER_STEP). MP_OK or MP_ERR (allocation). */
int sched_emit_forward(instr_list_t *l, int mb, int k, int K, int pp);
int sched_emit_backward(instr_list_t *l, int mb, int k, int K, int pp);
int sched_emit_step_end(instr_list_t *l);
/* Supernet (causal.h): the step of the subnet whose last micro-batch on this stage is mb, right after
 * its backward (OPTIMIZER_STEP with mb >= 0; chunk = stage). */
int sched_emit_subnet_step(instr_list_t *l, int mb, int stage);

#endif
