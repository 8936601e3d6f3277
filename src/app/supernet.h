/* Supernet training, the sequential reference (NASPipe's semantics, ARCHITECTURE.md §4): subnet t
 * (one candidate per choice block, sampled from (seed, t)) trains on batch t; the candidates it
 * activated take an AdamW step right after its backward, each with its own counter and clipped by
 * its own gradient norm (train.grad_clip); the tensors
 * every subnet uses sum their gradients over supernet.window subnets and step once per window,
 * clipped by the sum's norm. The tied embedding's two gradient parts (embedding, LM head) are
 * summed over the window apart and added at its end, so a pipeline, whose first and last stages
 * hold one part each, gets the same bits. A subnet's logged gradient norm is that of its
 * candidates' gradients (what its own steps clip).
 *
 * Two ways to run a window, the same results: serial (supernet_begin, one executor step per subnet,
 * supernet_update) and causal (supernet_window: several subnets in flight, NASPipe's rule,
 * supernet_causal.c; with parallel.sp > 1 on sp replicas of the pipeline, supernet_sp.c). With
 * parallel.dp > 1 each replica runs its share of every subnet's batch, and a stage sums the
 * subnet's gradients over the replicas just before its candidates step (not the data-parallel
 * buckets; ZeRO-1 refused). */
#ifndef MP_SUPERNET_H
#define MP_SUPERNET_H

#include "deck.h"
#include "params.h"

typedef struct {
    int on, window, ncand;
    unsigned char *choice;   /* per layer: a choice block (model_cfg_t.choice points here) */
    int *sel;                /* per layer: the current subnet's candidate (-1 off the choice blocks) */
    long *count;             /* per layer × candidate: AdamW steps it has taken */
    long shared_t;           /* AdamW steps of the shared tensors (windows completed) */
    int cur_layer;           /* supernet_update: the choice block being stepped */
    float *acc;              /* the window's summed gradients of the shared tensors (model.alloc floats) */
    float *acc_head;         /* ... of the tied LM head's part of d wte (the last stage): the two parts are
                                added once per window, on one rank or between the first and the last stage */
    unsigned char *held;     /* per layer: a block of this rank */
    /* causal (supernet.schedule = causal, run.c decides): the window in flight */
    int causal;
    long t0;                 /* its first subnet */
    int *wsel;               /* window × layers: each subnet's candidates */
    double *wloss, *wgnorm;  /* per subnet: mean loss, norm of its candidates' gradients */
    double *wcn2;            /* window × layers: squared gradient norm of each stepped candidate */
    /* supernet parallelism (parallel.sp > 1, supernet_sp.c): this rank's side of the window */
    float *slots;            /* window × slot_len: a subnet's shared gradients of the stage, kept from its
                                step to its ADD into the running sum */
    size_t slot_len;         /* the stage's shared floats (the tensors with cand < 0, then the LM head's part) */
    long *base;              /* layers × ncand: count at the window's start */
    int *rep;                /* window: the replica that runs each subnet */
    /* supernet.resident = host (supernet_home.c): the candidates' homes and the device's slots */
    struct supernet_home_s *home;
    void *home_window;       /* supernet_causal.c: the window's order of subnets on this stage */
} supernet_t;

/* supernet.resident = host: device slots per choice block for a run of deck d over pp stages (0:
 * every candidate on the device: resident = device, or as many slots as candidates with weights).
 * The same on every rank: the causal lists are built from it. */
int supernet_device_slots(const deck_t *d, int pp);

/* Whether candidate k of deck d has no weights (a skip: heads = 0), so nothing of it is stored,
 * fetched or stepped. */
static inline int supernet_weightless(const deck_t *d, int k) { return shape_is_skip(d->supernet.cands.shape[k]); }

/* Candidate of choice block l in subnet t: uniform over ncand, from (seed, t, l) alone, so every rank
 * knows every subnet. */
int supernet_sample(unsigned long long seed, long t, int l, int ncand);

#endif
