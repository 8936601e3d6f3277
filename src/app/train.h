/* `mindpipe train` and `mindpipe debug-grads` on one rank (ARCHITECTURE.md §1, §4). */
#ifndef MP_TRAIN_H
#define MP_TRAIN_H

#include "run.h"

/* Trains per the deck; checkpoints every checkpoint.every steps and at the end; resumes from
 * opts->resume. Returns the process exit code (0 on success). */
int train_main(const run_opts_t *opts);

/* Writes FILE: a checkpoint of the initial weights plus /grad/<name> (gradients of step 0's mean
 * loss), /batch/inputs and /batch/targets (int32, (batch, T), global sample order) and the /state
 * attribute `loss`. The PyTorch reference (validation/torch_ref.py) checks it. Exit code. */
int train_debug_grads(const run_opts_t *opts, const char *out_file);

#endif
