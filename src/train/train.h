/* `mindpipe train` and `mindpipe debug-grads` on one rank (ARCHITECTURE.md §1, §4). */
#ifndef MP_TRAIN_H
#define MP_TRAIN_H

#include "run.h"

/* What one step gave the loop: the mean loss, the gradient norm it logs, and when the step ended
 * for the progress line's rates (NAN: now). */
typedef struct {
    double loss, gnorm, at;
} train_step_t;

/* A room's steps instead of the plain one (the search room's supernet: search/supernet.h): the
 * loop, eval and debug-grads call these, and never name the room. Used while its run_plug_t is
 * active (r->plug); any hook may be NULL (the plain behaviour, or nothing).
 *  - announce: its log lines at the start (collective over the job);
 *  - resume: after the resume set r->step, its own state brought to it;
 *  - step: step t at learning rate lr on the batches src fills (a whole unit may run at its first
 *    step, r->unit); the plain parts it may call are train_step_grads and grad_norm.h's;
 *  - eval_begin, eval_end: around the loop's evaluation;
 *  - report: its lines at the end;
 *  - begin: step t's configuration chosen, before debug-grads' one backward;
 *  - select: eval's choice (--subnet TEXT, NULL when not given): MP_OK or MP_ERR naming what is wrong. */
typedef struct train_ops {
    void (*announce)(run_t *r);
    void (*resume)(run_t *r);
    void (*step)(run_t *r, long t, double lr, const exec_batch_t *src, train_step_t *out);
    void (*eval_begin)(run_t *r);
    void (*eval_end)(run_t *r);
    void (*report)(run_t *r);
    void (*begin)(run_t *r, long t);
    int (*select)(run_t *r, const char *text);
} train_ops_t;

/* Trains per the deck; checkpoints every checkpoint.every steps and at the end; resumes from
 * opts->resume. ops: the steps of opts->plug's room (NULL: none). Returns the process exit code (0
 * on success). */
int train_main(const run_opts_t *opts, const train_ops_t *ops);

/* Writes FILE: a checkpoint of the initial weights plus /grad/<name> (gradients of step 0's mean
 * loss), /batch/inputs and /batch/targets (int32, (batch, T), global sample order) and the /state
 * attribute `loss`. The PyTorch reference (validation/torch_ref.py) checks it. Exit code. */
int train_debug_grads(const run_opts_t *opts, const train_ops_t *ops, const char *out_file);

/* Gradients of step t's mean loss into r->st.model.grads (tied parts added; summed over the replicas
 * unless ZeRO-1 reduce-scatters them later or a plug-in is active, which sums them itself). Returns
 * the mean loss over the global batch. Under 2bw the batch runs on the previous weight version
 * W(t−1). src: the batches (train_batches(r) for the training data). */
double train_step_grads(run_t *r, long t, const exec_batch_t *src);

/* The training data's batches: micro-batch mb of step t on this replica. */
exec_batch_t train_batches(run_t *r);

/* val_loss of the model as it is (ARCHITECTURE.md §3): the mean next-token loss over the first
 * train.eval_windows windows of the validation split; NAN when it has none. Collective over the
 * pipeline. */
double train_val_loss(run_t *r);

#endif
