/* `mindpipe eval`: the validation loss of a checkpoint (ARCHITECTURE.md §3, §7). */
#ifndef MP_EVAL_H
#define MP_EVAL_H

#include "run_opts.h"

/* Loads the weights of checkpoint `ckpt` into the deck's model on this job's layout (any layout:
 * the file holds every tensor at its global shape) and prints on rank 0 its val_loss, the mean
 * next-token loss over the first train.eval_windows windows of the validation split, the number
 * `mindpipe train` logs at that step. A supernet deck evaluates subnet `subnet` ("0,2,1": a
 * candidate per choice block). Returns the process exit code. */
int eval_main(const run_opts_t *opts, const char *ckpt, const char *subnet);

/* `mindpipe export`: subnet `subnet` of supernet checkpoint `ckpt` (the deck's supernet) as a plain
 * model checkpoint `out`: model.blocks the shapes of its candidates, h.{l}.c{k}.* renamed h.{l}.*,
 * the shared tensors as they are, no optimizer state; prints the model.blocks line that trains it.
 * One rank. Returns the process exit code. */
int export_main(const run_opts_t *opts, const char *ckpt, const char *subnet, const char *out);

#endif
