/* train.device = cuda: what the run changes when ranks share a GPU (a node with more ranks than
 * GPUs, such as two ranks on a one-GPU machine for pp = 2). NCCL refuses a communicator with two
 * ranks on one GPU (gpu_share.h). The backend looks after its own collectives (be_comm_add stages a
 * shared communicator's through host memory); what is decided here, once at start, for the run:
 *
 *   parallel.p2p = auto   NCCL pipeline messages, unless the two ranks of some pipeline boundary
 *                         share a GPU: then MPI from pinned host buffers (said once in the log);
 *   parallel.p2p = nccl   refused in that case, naming the two ranks and the GPU;
 *   memory.device_limit   refused when 0 and any two ranks share a GPU: each rank's arena takes
 *                         the free memory less a margin at start (cu_arena_init), which leaves the
 *                         next rank on that GPU nothing.
 *
 * Every rank's GPU is gathered over the world, so every rank decides alike. */
#ifndef MP_RUN_GPUS_H
#define MP_RUN_GPUS_H

#include "gpu_share.h"
#include "run.h"

/* Sets st->p2p_nccl (whether pipeline messages go through NCCL), st->gpu_note and st->p2p_note (log
 * lines, "" when nothing is shared) from every rank's CUDA device `ordinal`. Before be_init (the
 * refusals come before any device memory is taken). Collective over MPI_COMM_WORLD: every rank
 * returns the same status. MP_OK or MP_ERR (message printed). */
int run_gpus_resolve(const deck_t *d, const run_layout_t *lay, run_stage_t *st, int ordinal);

/* What run_gpus_resolve decides once every rank's GPU is known: ids by world rank (lay->world of
 * them), the layout from lay->grid (sizes and strides) and the deck. Not collective; the same on every
 * rank given the same ids (the tests give names made by hand). MP_OK or MP_ERR (message printed). */
int run_gpus_decide(const deck_t *d, const run_layout_t *lay, run_stage_t *st, const gpu_id_t *ids);

#endif
