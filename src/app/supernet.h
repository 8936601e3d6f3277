/* Supernet training, the sequential reference (NASPipe's semantics, ARCHITECTURE.md §4): subnet t
 * (one candidate per choice block, sampled from (seed, t)) trains on batch t; the candidates it
 * activated take an AdamW step right after its backward, each with its own counter and clipped by
 * its own gradient norm (train.grad_clip); the tensors
 * every subnet uses sum their gradients over supernet.window subnets and step once per window,
 * clipped by the sum's norm. */
#ifndef MP_SUPERNET_H
#define MP_SUPERNET_H

#include "params.h"

typedef struct {
    int on, window, ncand;
    unsigned char *choice;   /* per layer: a choice block (model_cfg_t.choice points here) */
    int *sel;                /* per layer: the current subnet's candidate (-1 off the choice blocks) */
    long *count;             /* per layer × candidate: AdamW steps it has taken */
    long shared_t;           /* AdamW steps of the shared tensors (windows completed) */
    int cur_layer;           /* supernet_update: the choice block being stepped */
    float *acc;              /* the window's summed gradients of the shared tensors (model.alloc floats) */
} supernet_t;

/* Candidate of choice block l in subnet t: uniform over ncand, from (seed, t, l) alone, so every rank
 * knows every subnet. */
int supernet_sample(unsigned long long seed, long t, int l, int ncand);

#endif
