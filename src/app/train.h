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

/* val_loss of the model as it is (ARCHITECTURE.md §3): the mean next-token loss over the first
 * train.eval_windows windows of the validation split; NAN when it has none. Collective over the
 * pipeline. */
double train_val_loss(run_t *r);

/* Σ g² over the entries keep(entry, r) picks (NULL: all), every tensor once across TP ranks and
 * stages, added in canonical order (the same bits on every layout). */
double train_grad_sumsq_of(run_t *r, const float *grads, int (*keep)(const param_entry_t *, void *));
/* The same over this stage's tensors alone (summed over tensor parallelism only): equal bits to
 * train_grad_sumsq_of when keep picks tensors of this stage only (the other stages add zeros). */
double train_grad_sumsq_stage(run_t *r, const float *grads, int (*keep)(const param_entry_t *, void *));
/* Over the buffer range [s0, s1) alone, held at grads (index 0 = s0: a candidate in a device slot);
 * stages: summed over the pipeline too, as train_grad_sumsq_of. */
double train_grad_sumsq_range(run_t *r, const float *grads, size_t s0, size_t s1, int stages,
                              int (*keep)(const param_entry_t *, void *));

#endif
