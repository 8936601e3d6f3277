/* The gradient norm of a run, the same bits on every layout: the clipping of the plain step
 * (train.c) and of a supernet's candidates and shared tensors (search/supernet.c) both take it here. */
#ifndef MP_GRAD_NORM_H
#define MP_GRAD_NORM_H

#include "run.h"

/* Σ g² over the part [s0, s1) of the flat buffer, held at grads (index 0 = s0), of the entries keep
 * picks (NULL: all). Every canonical tensor is summed apart and the sums added in canonical order at
 * the end, so the bits do not depend on which stage or tensor-parallel rank holds what (a replicated
 * tensor counts on tensor-parallel rank 0 only, the tied wte on the stage with the embedding).
 * Summed over tensor parallelism, over the pipeline when `stages`, and over the data-parallel
 * replicas when `zero` (ZeRO-1: each holds a shard). Collective over those groups. */
double grad_sumsq(run_t *r, const float *grads, size_t s0, size_t s1, int zero, int stages,
                  int (*keep)(const param_entry_t *, void *));

/* The whole buffer, over every stage: grad_sumsq(r, grads, 0, total, 0, 1, keep). */
double grad_sumsq_of(run_t *r, const float *grads, int (*keep)(const param_entry_t *, void *));

#endif
