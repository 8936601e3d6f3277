/* Lowering (ARCHITECTURE.md §5): one stage's instruction list (schedule.h) → a program of in-order
 * streams with event waits between them. Written once: the executor's NCCL path takes its waits from
 * it and the NCCL simulator (sim_nccl.h) runs it.
 *
 * Every pipeline boundary (stage b to stage b+1 mod pp) has two 2-rank communicators, one for
 * activations and one for gradients, and a stage drives each of its four with a stream of its own,
 * so no communicator is ever used from two streams. Under the V placement (schedule.h) a boundary
 * also carries the way back up (lane 1): its messages go on four more streams (the _V ones), whose
 * communicators the executor will need besides the first lane's, so that again each stream of a
 * stage talks to one peer in one direction. A stage's list becomes these streams (ACT_IN standing
 * for ACT_IN or ACT_IN_V by the message's lane, and so on):
 *   RECV_ACT     on ACT_IN, after COMPUTE so far (the slot it lands in is free)
 *   FORWARD      on COMPUTE, after its RECV_ACT and after the newest SEND_ACT on ACT_OUT (a slot's
 *                output buffer is rewritten only once the send that read it is done). Under V after
 *                its RECV_ACT only: V's activation sends read a copy per key, made on COMPUTE
 *                after the forward (as the gradient sends do), so no forward rewrites what a send
 *                reads. Waiting on the newest send instead, of either lane or its own, deadlocks
 *                zbv under NCCL's blocking sends (found with sim_nccl: a forward waits for a send
 *                whose receive waits for compute behind a forward that waits for the other
 *                lane's send whose receive waits for compute behind the first forward).
 *   SEND_ACT     on ACT_OUT, after COMPUTE so far (its forward)
 *   RECV_GRAD    on GRAD_IN, after COMPUTE so far (the gradient buffer is free)
 *   BACKWARD, BACKWARD_B  on COMPUTE, after its RECV_GRAD
 *   BACKWARD_W   on COMPUTE (after its B, earlier on the same stream)
 *   SEND_GRAD    on GRAD_OUT, after COMPUTE so far (its backward and the copy into the send buffer)
 * A boundary inside a stage (V's turn) has no message: its forward and backward wait on the compute
 * stream's order alone.
 *   OFFLOAD, PREFETCH  on OFFLOAD, after COMPUTE so far
 *   REDUCE_GRADS on COMPUTE, after everything on the message and offload streams.
 * LOAD_BATCH and OPTIMIZER_STEP are host work and lower to nothing.
 *
 * The MPI executor runs the host lowering: the list itself on one in-order host stream. Sends are
 * non-blocking; a receive is posted at its instruction (LK_POST, it takes no time) and the
 * computation that reads it (FORWARD its activation, BACKWARD or BACKWARD_B its gradient) blocks
 * the host until the message is there (the op's wait_*). Where a list puts other work between a
 * receive and its reader (dualpipev's overlapped pairs: both receives, then the forward, then the
 * backward; an offload's PREFETCH), that message arrives while the work runs.
 *
 * Both simulators run these programs through one engine (sim_run_programs, sim.h), differing only in
 * the matching rule: MPI's (a send never blocks; a receive takes its message by tag) or NCCL's (a
 * send and a receive block their streams until they meet; messages matched by order). */
#ifndef MP_LOWER_H
#define MP_LOWER_H

#include "schedule.h"

typedef enum {
    LS_COMPUTE, LS_ACT_IN, LS_ACT_OUT, LS_GRAD_IN, LS_GRAD_OUT, LS_OFFLOAD,
    LS_ACT_IN_V, LS_ACT_OUT_V, LS_GRAD_IN_V, LS_GRAD_OUT_V, /* lane 1: V's way back up */
    LS_STREAMS
} lower_stream_t;

/* LK_POST: the host lowering's receive (above); LK_RECV blocks its stream until the message is there
 * (the device streams' receives, and balance's on the host). */
typedef enum { LK_COMPUTE, LK_SEND, LK_RECV, LK_POST } lower_kind_t;

/* Where a list is lowered to: the host (the MPI executor: every op on one in-order stream, no
 * waits needed) or the device's streams (the NCCL executor: the rules above). */
typedef enum { LOWER_HOST, LOWER_STREAMS } lower_target_t;

typedef struct {
    lower_kind_t kind;
    op_t op;
    int instr;           /* index of the instruction in the list */
    int peer;            /* SEND/RECV: the stage on the other side */
    int chan;            /* SEND/RECV: 0 activations, 1 gradients, 2 balance out, 3 balance back */
    int k, mb;           /* messages: the sending chunk and the micro-batch (their key) */
    int wait_chan;       /* host: the message this computation reads, posted earlier (channel as chan; -1
                            none), and its sending chunk and micro-batch */
    int wait_k, wait_mb;
    int ndeps;           /* event waits: op dep_idx[d] of stream dep_stream[d] must be done first */
    int dep_stream[LS_STREAMS], dep_idx[LS_STREAMS];
} lower_op_t;

typedef struct {
    lower_op_t *ops;
    int n, cap;
} lower_seq_t;

typedef struct {
    lower_target_t target;
    lower_seq_t s[LS_STREAMS];
    int ninstr;
    int *stream_of, *index_of;  /* per instruction: its op's stream and index (-1: lowers to nothing) */
} lower_prog_t;

extern const char *const lower_stream_names[LS_STREAMS];
/* The stream on the other side of a message stream (compute and offload: themselves). */
extern const lower_stream_t lower_partner[LS_STREAMS];

/* Lowers `l` of a pipeline of K chunks whose micro-batch indices are below M (its placement is
 * l->place). MP_OK or MP_ERR (allocation; nothing left allocated). Freed with lower_free. */
int lower_stage(const instr_list_t *l, int K, int M, lower_target_t target, lower_prog_t *out);
/* The stream of stage programs `peer` that holds the partner of a message on stream x. */
lower_stream_t lower_partner_stream(const lower_prog_t *peer, lower_stream_t x);
void lower_free(lower_prog_t *p);

/* The op instruction i lowered to, or NULL (it lowers to nothing). */
const lower_op_t *lower_op_of(const lower_prog_t *p, int instr);

#endif
