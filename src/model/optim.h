/* AdamW with linear warmup and cosine decay, and global-norm gradient clipping (ARCHITECTURE.md §3).
 * validation/torch_ref.py re-implements exactly these formulas. */
#ifndef MP_OPTIM_H
#define MP_OPTIM_H

#include "backend.h"
#include "deck.h"
#include "params.h"

/* The optimizer's configuration: the learning-rate schedule and AdamW's constants ([train]). */
typedef struct {
    double lr, min_lr;       /* peak learning rate (after warmup) and the end of the cosine decay */
    long warmup, steps;      /* linear warmup steps; the schedule spans steps */
    double grad_clip;        /* clip the global gradient norm to this; 0 = off */
    float beta1, beta2, eps; /* AdamW, as its kernel takes them */
    float weight_decay;      /* decoupled, on the entries whose decay flag is set */
} optim_cfg_t;

/* The deck's [train] optimizer keys as an optim_cfg_t. */
optim_cfg_t optim_cfg_from_deck(const deck_t *d);

/* Learning rate of 0-based step t: linear warmup lr·(t+1)/warmup for t < warmup, then cosine from
 * lr to min_lr over the remaining steps. */
double optim_lr(const optim_cfg_t *c, long t);

/* Scale that brings the gradient norm down to grad_clip (1 when not clipping). */
float optim_clip_scale(double grad_norm, double grad_clip);

/* One AdamW step, 1-based adam_t, on the part [s0, s1) of the flat parameter buffer (weight decay
 * only where the entry's decay flag is set). params, grads, m and v point at that part (index 0 =
 * s0): with s0 = 0, s1 = tab->total it is the whole model; with ZeRO-1 it is this replica's shard;
 * a supernet candidate's range may lie anywhere (a device slot). */
void optim_step(backend_t *be, const param_table_t *tab, float *params, const float *grads, float *m, float *v,
                    const optim_cfg_t *c, float lr, long adam_t, float grad_scale, size_t s0, size_t s1);

#endif
