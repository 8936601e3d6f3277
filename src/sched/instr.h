/* Instruction lists, the language of every schedule (ARCHITECTURE.md §5), and where their chunks
 * live. schedule.h's builders write them, the simulators (sim.h) prove them, the lowering (lower.h)
 * turns them into streams, the executor runs them. This file knows no schedule: it is what the
 * builders share (schedule.c's fixed ones, zerobubble.c's played-out ones, causal.c's).
 *
 * A backward is either one BACKWARD or split in two (the zero-bubble schedules): BACKWARD_B, the
 * input gradient, on the critical path (its SEND_GRAD follows it), and BACKWARD_W, the weight
 * gradient, which may run any time after its B. BACKWARD is B then W fused. */
#ifndef MP_INSTR_H
#define MP_INSTR_H

#include <stddef.h>

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

extern const char *const op_names[OP_COUNT];

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
 * k's stage from the list itself; nothing but these functions computes it. */
typedef enum { SCHED_PLACE_LOOP, SCHED_PLACE_V } sched_place_t;

typedef struct {
    instr_t *ins;
    int n, cap;
    sched_place_t place; /* of the chunks its instructions name ({0}: the loop) */
} instr_list_t;

/* Per-stage compute times of one micro-batch (all the stage's chunks together; a chunk takes 1/v
 * of each): forward, input gradient B, weight gradient W. A fused BACKWARD takes tb + tw. The unit
 * model is tf = tb = tw = 1: the fused schedules' unit model (forward 1, backward 2) split evenly. */
typedef struct {
    double tf, tb, tw;
} sched_costs_t;

extern const sched_costs_t sched_costs_unit; /* 1, 1, 1 */

/* The times' syntax of parallel.schedule_costs and `mindpipe sim --costs`: "unit" -> 0, 0, 0 (the
 * builders' unit times, sched_costs_unit), or "TF,TB,TW", three finite times > 0. MP_OK, or MP_ERR
 * with why filled (what the text is not). */
int sched_costs_parse(const char *text, sched_costs_t *c, char *why, size_t nwhy);

/* Chunk k's stage and local index under `place` with pp stages, and the inverse (the global chunk
 * that is local chunk `local` of `stage`). Pure arithmetic: arguments in range are the caller's. */
int sched_place_stage(sched_place_t place, int k, int pp);
int sched_place_local(sched_place_t place, int k, int pp);
int sched_place_chunk(sched_place_t place, int stage, int local, int pp);
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
/* Most (micro-batch, chunk) between their BACKWARD_B and their BACKWARD_W at once: the weight-gradient
 * stashes (model.h's wstash_t) the executor holds beside the stash slots; 0 for a fused list. */
int sched_list_peak_w(const instr_list_t *l);

/* Appends one instruction. MP_OK or MP_ERR (allocation, reported; l keeps what it had). */
int sched_emit(instr_list_t *l, op_t op, int mb, int chunk, int peer);
/* (micro-batch mb, chunk k of K) with its messages, peers where l->place puts the neighbour chunks
 * (a boundary inside the stage has none): forward with its receive (or LOAD_BATCH) before and its
 * send after; its backward (`op`: BACKWARD, or BACKWARD_B for a split one) with its gradient's
 * receive before and send after; the step's end (REDUCE_GRADS, OPTIMIZER_STEP). MP_OK or MP_ERR
 * (allocation). */
int sched_emit_forward(instr_list_t *l, int mb, int k, int K, int pp);
int sched_emit_backward(instr_list_t *l, int mb, int k, int K, int pp);
int sched_emit_backward_op(instr_list_t *l, op_t op, int mb, int k, int K, int pp);
int sched_emit_step_end(instr_list_t *l);
/* Their halves, for a builder that puts two computations between one set of messages (dualpipev's
 * overlapped pairs): what comes before a forward (LOAD_BATCH, RECV_ACT or nothing) and after it
 * (SEND_ACT or nothing), before a backward (RECV_GRAD or nothing) and after it (SEND_GRAD or
 * nothing). MP_OK or MP_ERR (allocation). */
int sched_emit_forward_recv(instr_list_t *l, int mb, int k, int pp);
int sched_emit_forward_send(instr_list_t *l, int mb, int k, int K, int pp);
int sched_emit_backward_recv(instr_list_t *l, int mb, int k, int K, int pp);
int sched_emit_backward_send(instr_list_t *l, int mb, int k, int pp);
/* Supernet (causal.h): the step of the subnet whose last micro-batch on this stage is mb, right after
 * its backward (OPTIMIZER_STEP with mb >= 0; chunk = stage). */
int sched_emit_subnet_step(instr_list_t *l, int mb, int stage);

/* Ends a list being built with the step's end: *out gets it (MP_OK), or when rc or an append failed
 * nothing is left allocated (MP_ERR). */
int sched_finish(instr_list_t *l, int rc, instr_list_t *out);
void sched_free(instr_list_t *l);

#endif
