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
#include "run.h"
#include "train.h"

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
    /* the training loop's step (supernet_plug.c): a causal window runs at its first subnet, and each
     * subnet's step reads out its share of the window's time and pipeline idle */
    double wstart, wtime, widle;
} supernet_t;

/* The supernet as the run's plug-in and the training loop's steps (supernet_plug.c): what a command
 * that may run a supernet deck offers (run_opts_t.plug and the train_ops_t argument). */
extern const run_plug_t supernet_plug;
extern const train_ops_t supernet_train_ops;

/* The run's supernet (r->plug_state while supernet_plug is active, or after supernet_layers). */
static inline supernet_t *supernet_of(const run_t *r) { return (supernet_t *)r->plug_state; }

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

/* supernet_layers: the state (r->plug_state) and the choice blocks, before the model; supernet_init:
 * the window's gradient buffer, after it; supernet_free: both, whatever part was made (then
 * r->plug_state is NULL); supernet_begin: subnet t selected; supernet_update: its candidates' AdamW
 * steps and, at a window's end, the shared tensors' (returns the subnet's gradient norm);
 * supernet_resume: the counters of the subnets before r->step, replayed from the sampler. */
int supernet_layers(run_t *r);
int supernet_init(run_t *r);
void supernet_free(run_t *r);
void supernet_begin(run_t *r, long t);
double supernet_update(run_t *r, long t, double lr);
void supernet_resume(run_t *r);
/* Causal (sn->causal): runs the window of subnets t0 .. t0 + window − 1 through the pipeline with
 * NASPipe's causal lists, each subnet's candidates stepping on their stage right after its backward,
 * then the shared tensors' window step; sn->wloss and wgnorm get each subnet's loss and norm. */
void supernet_window(run_t *r, long t0, const exec_batch_t *src);
/* The two halves of the update (supernet.c; both ways of running use them): subnet t's candidates
 * (stage_only: this rank's blocks, norms over tensor parallelism only; else every layer, norms
 * collective over the pipeline too) and its shared gradients into the window's sums, after summing
 * the stage's gradients over the data-parallel replicas (collective over them); cn2 gets each
 * layer's squared candidate norm (0 where none stepped). Then the window's end. */
void supernet_subnet_step(run_t *r, long t, const int *sel, double lr, int stage_only, double *cn2);
/* Data parallelism: the subnet's gradients (and the LM head's part) summed over the stage's data-
 * parallel peers before anything reads them (collective over grid.comm[GRID_DP]; nothing at dp = 1). */
void supernet_replica_sum(const run_layout_t *lay, run_stage_t *st);
/* supernet_subnet_step's first half alone: the candidates' steps (and counters), not the shared sums. */
void supernet_subnet_cands(run_t *r, const int *sel, double lr, int stage_only, double *cn2);
void supernet_window_end(run_t *r, long t);
/* The causal lists' description of the window in sn->wsel (layer0: pp + 1 entries and weightless:
 * ncand entries, filled here; c_p points into both and into r). */
void supernet_window_cfg(const run_t *r, causal_cfg_t *c_p, int *layer0, unsigned char *weightless);
/* Supernet parallelism (parallel.sp > 1, supernet_sp.c): the window of subnets sn->t0 .. + window − 1
 * in sn->wsel through this rank's list of the sp × pp ranks' (causal_sp.h), the shared tensors'
 * window step included; each subnet's loss in r->st.exec.sub_loss and its candidates' squared norms in
 * sn->wcn2 on the ranks of its replica (zeros elsewhere). Aborts the job on an allocation failure. */
void supernet_sp_window(run_t *r, const exec_batch_t *src);
/* Host-resident candidates (supernet.resident = host, supernet_home.c; all no-ops without): homes in
 * host memory and the device's slots (init after the model; free). acquire: before a subnet's first
 * forward on the stage, its candidates in slots (waiting for copies in flight, fetching what was not
 * prefetched) and pinned, then model_select (without homes: model_select alone); release: after its
 * step (written: it changed them), unpinned and written home; prefetch: candidates of n subnets
 * (sels, stride floats apart, in the order they come) into the slots no subnet in flight pins;
 * flush: every copy done (the homes current); forget: the slots emptied (after a checkpoint is read
 * into the homes). buf: the homes (0 weights, 1 first moments, 2 second) or NULL. */
int supernet_home_init(run_t *r);
void supernet_home_free(run_t *r);
void supernet_home_acquire(run_t *r, const int *sel);
void supernet_home_release(run_t *r, const int *sel, int written);
void supernet_home_prefetch(run_t *r, const int *sels, int n, int stride);
void supernet_home_flush(run_t *r);
void supernet_home_forget(run_t *r);
float *supernet_home_buf(run_t *r, int which);
/* Bytes of parameters, gradients and moments: the device's (0) and with every candidate on it (1);
 * of the candidates: in the device's slots (2) and all of them (3). The log lines at the start
 * (announce: collective over the job) and at the end (report). */
void supernet_home_sizes(const run_stage_t *st, size_t sizes[4]);
void supernet_home_announce(run_t *r);
void supernet_home_report(run_t *r);
/* The local block of layer l (-1: another stage's), and candidate k's first tensor in the buffer. */
int supernet_local_block(const model_t *m, int l);
const param_entry_t *supernet_first_entry(const model_t *m, int b, int k);
/* Why a supernet runs one executor step per subnet on this layout instead of windows of causal lists
 * (NULL: it runs windows). */
const char *supernet_serial_why(const deck_t *d, const run_stage_t *st);
/* --subnet "0,2,1": a candidate index per choice block, in layer order, into sel (per layer, -1 off
 * the choice blocks). MP_OK, or MP_ERR naming what is wrong. */
int supernet_parse_subnet(run_t *r, const char *text, int *sel);

#endif
