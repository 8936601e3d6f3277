/* `mindpipe eval`: the validation loss of a checkpoint (ARCHITECTURE.md §3, §7). */
#ifndef MP_EVAL_H
#define MP_EVAL_H

#include "run_opts.h"

struct train_ops; /* train.h */

/* Loads the weights of checkpoint `ckpt` into the deck's model on this job's layout (any layout:
 * the file holds every tensor at its global shape) and prints on rank 0 its val_loss, the mean
 * next-token loss over the first train.eval_windows windows of the validation split, the number
 * `mindpipe train` logs at that step. A supernet deck evaluates subnet `subnet` ("0,2,1": a
 * candidate per choice block; ops->select chooses it). Returns the process exit code. */
int eval_main(const run_opts_t *opts, const struct train_ops *ops, const char *ckpt, const char *subnet);

#endif
