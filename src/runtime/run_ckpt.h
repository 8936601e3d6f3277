/* A run's state to and from checkpoints (ARCHITECTURE.md §7): staging device memory in host memory,
 * gathering ZeRO-1's sharded moments, the collective write of RUN/ckpt/step_%08ld.h5 with its log
 * line and pruning, and --resume (a path, or auto: the newest checkpoint that verifies). The
 * training loop only decides when; the file format is ckpt/ckpt.h, the directory ckpt/ckpt_files.h. */
#ifndef MP_RUN_CKPT_H
#define MP_RUN_CKPT_H

#include <stddef.h>

#include "run.h"

/* A host copy of n floats of the backend's memory at dev: dev itself when the backend's memory is
 * host-visible (cpu) or dev is NULL, else a staging buffer (aborts when out of host memory). Give
 * it back with run_ckpt_host_release. */
float *run_ckpt_host_copy(run_stage_t *st, const float *dev, size_t n);
/* Frees what run_ckpt_host_copy(r, dev, ...) returned (nothing when that was dev itself). */
void run_ckpt_host_release(run_stage_t *st, float *host, const float *dev);

/* Collective over MPI_COMM_WORLD: the checkpoint of step r->step (weights, 2bw's previous version,
 * moments, state), each rank writing the hyperslabs of its shards, then on rank 0 the log line and
 * pruning to checkpoint.keep. fail_midway: this rank is killed (SIGKILL) halfway through the file
 * (debug.fail_at RANK:STEP:write, decided by the caller). MP_OK or MP_ERR on every rank alike. */
int run_ckpt_write(run_t *r, int fail_midway);

/* Collective over MPI_COMM_WORLD: --resume PATH|auto (nothing without --resume). Reads every
 * rank's shard of the checkpoint into the model and sets r->step and r->adam_t. auto takes the
 * newest checkpoint of RUN/ckpt that verifies, and with no checkpoint there at all starts from
 * step 0 (the first job of a chain); checkpoints of which none verifies are an error. MP_OK or
 * MP_ERR (the model unchanged when the checkpoint was refused). */
int run_ckpt_resume(run_t *r);

/* --init-from hf:DIR on a fresh run: rank 0 checks DIR/model.safetensors against the canonical model
 * (hf_gpt2_check), then every rank loads its own shard (its blocks, its TP part, the vocab padded)
 * into the weights (and 2bw's older version: W(-1) = W(0)); the optimizer stays fresh. Collective;
 * MP_OK or MP_ERR on every rank alike, the weights changed only on MP_OK. No --init-from: MP_OK. */
int run_ckpt_init_from(run_t *r);

/* Collective over MPI_COMM_WORLD: the weights of checkpoint `path` (its /model only: a file without
 * optimizer state will do) into the model, verified like a resume; its step in *step_p. MP_OK or
 * MP_ERR on every rank alike; refused (rank 0 names both) when the checkpoint's tokenizer is not the
 * data file's (r->data_tok; a checkpoint without one is byte). */
int run_ckpt_load_weights(run_t *r, const char *path, long *step_p);

#endif
