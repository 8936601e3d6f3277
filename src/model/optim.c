#include "optim.h"

#include <math.h>
#include <stdlib.h>

#include "backend.h"
#include "check.h"

optim_cfg_t optim_cfg_from_deck(const deck_t *d)
{
    return (optim_cfg_t){.lr = d->train.lr, .min_lr = d->train.min_lr, .warmup = d->train.warmup,
                         .steps = d->train.steps, .grad_clip = d->train.grad_clip, .beta1 = (float)d->train.beta1,
                         .beta2 = (float)d->train.beta2, .eps = (float)d->train.eps,
                         .weight_decay = (float)d->train.weight_decay};
}

double optim_lr(const optim_cfg_t *c, long t)
{
    const double lr = c->lr, min_lr = c->min_lr;
    const long warmup = c->warmup, steps = c->steps;
    if (warmup > 0 && t < warmup) return lr * (double)(t + 1) / (double)warmup;
    if (steps <= warmup) return lr;
    double p = (double)(t - warmup) / (double)(steps - warmup);
    if (p > 1.0) p = 1.0; /* a run extended past its deck's steps stays at min_lr */
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + cos(M_PI * p));
}

float optim_clip_scale(double grad_norm, double grad_clip)
{
    if (grad_clip > 0.0 && grad_norm > grad_clip) return (float)(grad_clip / grad_norm);
    return 1.0f;
}

void optim_step(backend_t *be, const param_table_t *tab, float *params, const float *grads, float *m, float *v,
                const optim_cfg_t *c, float lr, long adam_t, float grad_scale, size_t s0, size_t s1)
{
    /* the tensors' ranges listed first and updated in one call: a device backend launches a few
     * kernels for the model, not one per tensor; each tensor gets the bits it got alone */
    size_t *off = MP_CALLOC((size_t)tab->count + 1, sizeof *off), *len = MP_CALLOC((size_t)tab->count + 1, sizeof *len);
    float *wd = MP_CALLOC((size_t)tab->count + 1, sizeof *wd);
    if (!off || !len || !wd) MP_ABORT("out of memory in the optimizer step");
    int k = 0;
    for (int i = 0; i < tab->count; i++) {
        const param_entry_t *e = &tab->entries[i];
        size_t lo = e->offset > s0 ? e->offset : s0, hi = e->offset + e->numel < s1 ? e->offset + e->numel : s1;
        if (lo >= hi) continue;
        off[k] = lo - s0, len[k] = hi - lo, wd[k++] = e->decay ? c->weight_decay : 0.0f;
    }
    if (k > 0)
        be_adamw_each(be, params, grads, m, v, off, len, wd, k, lr, c->beta1, c->beta2, c->eps, (int)adam_t,
                      grad_scale);
    free(off), free(len), free(wd);
}
