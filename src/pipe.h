/* The pipeline executor (DESIGN §5): runs this stage's instruction list (schedule.h) for one step
 * with non-blocking p2p over the grid's pp communicator, overlapped with compute.
 *
 * Activations live in a stash of slots, as many as the most forwards this stage's lists ever have
 * awaiting their backward (the simulator's peak: m for gpipe, p − s for 1f1b); a forward takes a
 * free slot and its backward gives it back. Each slot is sized for the stage's largest model chunk
 * (v chunks per stage under the interleaved schedule, else one).
 *
 * 2bw (PipeDream-2BW): the lists of consecutive steps join with no flush (sched_build_2bw), and
 * the stage keeps two weight versions: batch t runs forward and backward on W(t−1) (model.params_old)
 * while the next batch's first forwards, issued before batch t's update, run on W(t) (model.params);
 * the update makes W(t+1) = W(t) − lr·∇f(W(t−1)). */
#ifndef MP_PIPE_H
#define MP_PIPE_H

#include "run.h"
#include "schedule.h"

struct pipe_s { /* pipe_t, declared in run.h */
    sched_kind_t kind;
    int m, v, K;              /* micro-batches per step, chunks per stage, chunks in all */
    instr_list_t list;        /* one step (gpipe, 1f1b, interleaved) */
    instr_list_t l2bw[2][2];  /* 2bw: [first][drain] (schedule.h) */
    int carried;              /* 2bw: the next batch's first forwards already ran (not drained) */
    double carried_loss;      /* ... and the Σ of their token losses (last stage) */
    model_part_t part[PARAM_MAX_CHUNKS];
    acts_t *slots;
    int nslots, nfree, *free_slots;
    int stash_peak;           /* most slots in use at once so far (metrics: stash_peak) */
    MPI_Request *slot_send;   /* per slot: the activation send still reading it */
    int *slot_of;             /* per key (micro-batch of a batch, chunk): its slot, -1 none */
    float *gsend;             /* per key: the input gradient in flight to the previous stage (host memory
                                 off the cpu backend: MPI sends from there) */
    float *hsend;             /* per slot, off the cpu backend: the host copy of its activation in flight */
    float *hrecv;             /* off the cpu backend: host landing buffer of one receive */
    int nccl;                 /* parallel.p2p resolved to nccl (cuda): messages device to device on the
                                 backend's p2p streams; gsend is then device memory */
    MPI_Request *gsend_req;
    int nkeys;
    size_t n_act;             /* N·C floats of one activation */
    double idle;              /* seconds blocked in pipeline receives (reset by the caller) */
    double theory;            /* the schedule's bubble under the simulator's cost model (tb = 2 tf) */
};

/* Builds the stage's lists and its stash. Collective-free. MP_OK or MP_ERR. */
int pipe_init(pipe_t *p, run_t *r);
void pipe_free(pipe_t *p, run_t *r);

/* Fills micro-batch mb of step t into a (inputs and targets). */
typedef void (*pipe_fill_fn)(run_t *r, acts_t *a, long t, int mb);

/* Runs step t's list up to REDUCE_GRADS (gradients final on this stage, the tied embedding's two
 * parts summed over the embed communicator). Returns the Σ of token losses of batch t on the last
 * stage, 0 elsewhere. `bucket` is the data-parallel hook (may be NULL), set for the last
 * micro-batch. 2bw: drain = 1 ends the step with an empty pipeline (before evaluations,
 * checkpoints and the end); the other schedules always drain. */
double pipe_step(pipe_t *p, run_t *r, long t, pipe_fill_fn fill, float dloss,
                 void (*bucket)(void *ctx, int layer), int drain);

/* Forward only, through every stage and chunk, of the micro-batch the first stage's caller filled
 * into r->acts (slot 0); returns the last stage's Σ of the first `valid_rows`·T token
 * losses (0 elsewhere). Runs on a drained pipeline. */
double pipe_forward_only(pipe_t *p, run_t *r, int valid_rows);

#endif
