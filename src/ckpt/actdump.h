/* [debug] dump_activations = STEP (ARCHITECTURE.md §7): the residual stream of one micro-batch, layer by
 * layer, written to HDF5 under canonical names so a run can be compared with the PyTorch reference
 * one layer at a time (validation/torch_ref.py --activations).
 *
 * What is kept: micro-batch 0 of data replica 0 in step STEP (the global batch's first micro_batch
 * samples, whatever the layout): /embed (token + position embedding), /h.{l} (block l's output),
 * /lnf (the final LayerNorm's output), each float32 (micro_batch, T, C), and /tokens (int32,
 * (micro_batch, T)). The rank holding each layer captures it after its forward (tensor-parallel rank
 * 0 of its stage: the residual stream is whole on every TP rank) and writes its own datasets into
 * the one file all ranks create: RUN/activations_step_%08d.h5 (temporary name, renamed when whole). */
#ifndef MP_ACTDUMP_H
#define MP_ACTDUMP_H

#include <mpi.h>

#include "model.h"
#include "wait.h"

typedef struct {
    long step;              /* the step dumped; -1: off */
    int capture;            /* this rank captures (data replica 0, tensor-parallel rank 0) */
    int L, B, T, C;
    float *buf;             /* (L + 2) slots of B·T·C floats: embed, h.0 .. h.{L-1}, lnf */
    int *tokens;            /* (B, T) */
    unsigned char *have;    /* L + 3 flags: the slots, then tokens, this rank filled */
} actdump_t;

/* Off (step < 0) allocates nothing. MP_OK or MP_ERR (out of memory). */
int actdump_init(actdump_t *d, long step, int capture, int L, int B, int T, int C);
void actdump_free(actdump_t *d);

/* After the forward of micro-batch mb of step t through part pt of m: keeps what pt computed when
 * (t, mb) is the dumped one. */
void actdump_capture(actdump_t *d, const model_t *m, const model_part_t *pt, const acts_t *a, long t, int mb);

/* Collective over comm once step d->step has run: writes the file in dir (its own agreements wait
 * through w). MP_OK or MP_ERR on every rank. */
int actdump_write(actdump_t *d, MPI_Comm comm, const char *dir, const wait_cfg_t *w);

#endif
