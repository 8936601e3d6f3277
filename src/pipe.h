/* The pipeline executor (DESIGN §5): runs this stage's instruction list (schedule.h) for one step
 * with non-blocking p2p over the grid's pp communicator, overlapped with compute. Activations are
 * held in a stash of slots sized by the simulator's peak for this stage (m for gpipe, p − s for
 * 1f1b); micro-batch mb uses slot mb mod slots (backwards run in micro-batch order, so the live
 * micro-batches are always a window no wider than the stash). */
#ifndef MP_PIPE_H
#define MP_PIPE_H

#include "run.h"
#include "schedule.h"

struct pipe_s { /* pipe_t, declared in run.h */
    instr_list_t list;
    acts_t *slots;
    int nslots, m;
    float *gsend;          /* (m, N, C): input gradients in flight to the previous stage */
    MPI_Request *sends;    /* (2m): activation and gradient sends of the step */
    size_t n_act;          /* N·C floats of one activation */
    double idle;           /* seconds blocked in pipeline receives (reset by the caller) */
    double theory;         /* the schedule's bubble under the simulator's cost model (tb = 2 tf) */
};

/* Builds the stage's list and its stash. Collective-free. MP_OK or MP_ERR. */
int pipe_init(pipe_t *p, run_t *r);
void pipe_free(pipe_t *p, run_t *r);

/* Fills micro-batch mb of step t into a (inputs and targets). */
typedef void (*pipe_fill_fn)(run_t *r, acts_t *a, long t, int mb);

/* Runs step t's list up to REDUCE_GRADS (gradients final on this stage, the tied embedding's two
 * parts summed over the embed communicator). Returns the Σ of token losses on the last stage, 0
 * elsewhere. `bucket` is the data-parallel hook (may be NULL), set for the last micro-batch. */
double pipe_step(pipe_t *p, run_t *r, long t, pipe_fill_fn fill, float dloss,
                 void (*bucket)(void *ctx, int layer));

/* Forward only, through every stage, of the micro-batch a filled by fill_val on the first stage;
 * returns the last stage's Σ of the first `valid_rows`·T token losses (0 elsewhere). */
double pipe_forward_only(pipe_t *p, run_t *r, int valid_rows);

#endif
