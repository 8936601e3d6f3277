/* The run context: everything one training (or debug) process owns — the resolved deck, the
 * dataset, the arena, the model and its activations, the run directory's logs. It is the only
 * mutable state of a run and is passed explicitly to whoever needs it. */
#ifndef MP_RUN_H
#define MP_RUN_H

#include "actdump.h"
#include "arena.h"
#include "autosplit.h"
#include "backend.h"
#include "causal.h"
#include "ckpt_files.h"
#include "data.h"
#include "deck.h"
#include "dp.h"
#include "executor.h"
#include "grid.h"
#include "nodelink.h"
#include "model.h"
#include "optim.h"
#include "rundir.h"
#include "runlog.h"
#include "supernet.h"
#include "trace.h"
#include "wait.h"
#include "watchdog.h"

#include "run_opts.h"

typedef struct {
    run_opts_t opts;
    deck_t deck;
    char *deck_text;         /* the resolved deck, as stored in checkpoints */
    int rank, world, threads;
    grid_t grid;
    wait_cfg_t wait;
    optim_cfg_t optim;       /* the learning-rate schedule and AdamW's constants */
    int replica_batch;       /* sequences per step on one replica: train.batch ÷ (dp × sp) */
    int micro_batches;       /* micro-batches per step on one replica: replica_batch ÷ train.micro_batch */
    dp_t dp;                 /* data parallelism over grid.replica (used when replica_size > 1) */
    int dp_on;
    int training;            /* set up by train: a causal supernet runs whole windows (eval, export, search and
                                debug-grads run one subnet at a time) */
    dataset_t data;
    arena_t arena;
    backend_t be;            /* train.device: where the model lives and runs */
    int p2p_nccl;            /* pipeline messages through NCCL: cuda, parallel.p2p resolved (run_gpus.h) */
    char gpu_note[400];      /* cuda: ranks share a GPU, so some collectives are host-staged ("": none) */
    char p2p_note[400];      /* cuda: parallel.p2p=auto chose MPI because a boundary's ranks share a GPU */
    model_t model;
    param_table_t gtab;      /* the whole model's canonical (tp = 1) table: checkpoints are written in it */
    int stage, pp;
    int *gidx;               /* local entry i -> index of the same tensor in gtab */
    nodelink_t link;         /* memory.coordinate: the node's host-link locks (when a block offloads) */
    exec_plan_t plan;        /* the stage's memory plan (memory.device_limit), made before allocating */
    int auto_policy;         /* memory.policy = auto: the deck_policy_t this stage chose (-1: not auto) */
    double auto_bytes, auto_keep_bytes; /* ... its planned peak, and keep's */
    exec_t exec;             /* runs this stage's instruction lists (every pp, pp = 1 included) */
    acts_t acts;
    scratch_t scratch;
    runlog_t log;
    prof_t prof;             /* where the steps' time went (the first step is warm-up, not counted) */
    trace_t trace;           /* the timeline written to trace.json (ev NULL: not recording) */
    actdump_t dump;          /* debug.dump_activations (step -1: off) */
    long step;               /* optimizer steps completed */
    int stop;                /* a stop was requested (signals.h): drain, checkpoint and exit after this step */
    int stop_wanted;         /* ... and is waiting for the end of a supernet window */
    supernet_t sn;           /* supernet.enabled: the subnets and their update state */
    long adam_t;             /* AdamW's 1-based counter of the last update */
    double peak_gflops;
    autosplit_t autosplit;   /* pipeline.layers = auto: what was measured and chosen at start */
    char out_dir[4096];
    char run_id[CKPT_RUN_ID_LEN + 1]; /* this run's id (rundir.h): in every checkpoint it writes; "" until
                                         known (a resume adopts its checkpoint's) */
    rundir_lock_t lock;      /* rank 0: RUN/lock, held from setup to teardown */
    watchdog_t wd;           /* the deadlines of phases that block inside MPI or HDF5, and of a stop (watchdog.h) */
    ckpt_verdicts_t verdicts; /* rank 0: what it learnt of RUN/ckpt's files (resume, pruning) */
    /* live migration (pipeline.replan_every, migrate.h) */
    int mig_warmed;          /* the first step since the start or the last move has run (it is not measured) */
    int mig_steps;           /* steps measured since the last re-plan ... */
    double *mig_busy;        /* ... each one's compute seconds on this stage (pipeline.replan_every entries) */
    int mig_moves;           /* moves made so far */
} run_t;

/* Loads and checks the deck, builds the rank grid, refuses layouts and features this build does
 * not implement, sets threads, loads the dataset and builds the model (initialised from the seed).
 * With out_dir set, rank 0 creates the run directory (ckpt/ inside it) and locks it (refused when
 * another run holds it), refuses a fresh run (no --resume) into a directory holding checkpoints
 * unless --restart moved them aside, removes stale temporaries, sets the run id (a fresh run: a new
 * one in RUN/run_id; a resume: RUN/run_id's, if any), writes deck.ini and opens the logs. Collective over MPI_COMM_WORLD: every rank returns the same status, so no rank is left
 * waiting in a collective for one that failed. MP_OK or MP_ERR (message printed; everything
 * acquired is released). */
int run_setup(run_t *r, const run_opts_t *o, int with_out_dir);
void run_teardown(run_t *r);

/* RUN/exit_status (rank 0; after the run directory is claimed): the run's exit status and why, one
 * line ("- running", "0 done ...", "75 stopped ...", "1 failed ..."). Hydra's mpiexec does not
 * always pass on the ranks' status when it was itself signalled (ARCHITECTURE.md §7): batch scripts
 * can read it here. MP_OK or MP_ERR naming the file. */
int run_exit_status(const run_t *r, const char *text);

/* The model chunks of pipeline stage `stage`: chunk c holds blocks [layer0s[c], layer0s[c] +
 * nlayers_s[c]). The model is cut into K = pp × v chunks (v = deck_chunks_per_stage) of the sizes
 * pipeline.layers lists, or L/K each with the remainder on the first; stage s holds chunks
 * s, s + pp, s + 2pp, ... Returns v. */
int run_stage_chunks(const deck_t *d, int stage, int *layer0s, int *nlayers_s);


/* Live migration (migrate.c): this rank's stage rebuilt for the split the deck's pipeline.layers
 * now gives (model, memory modes and plan, activations, scratch, 2bw's second version, data
 * parallelism, executor: everything set-up built for the old split, freed newest first), its
 * state taken from host buffers laid out by the new table: state[0] weights, [1] 2bw's older
 * weights (NULL without 2bw), [2] and [3] the AdamW moments (tab.total floats each; gradients start
 * at zero, as every step starts them). Collective over the data-parallel replicas and the node.
 * MP_OK, or MP_ERR (message printed) leaving the stage unusable: the caller aborts the job. */
int run_stage_rebuild(run_t *r, float *const state[4]);

/* Every rank agrees on a step's status: MP_ERR on all ranks if any rank failed (a rank that
 * failed has printed why). Blocking collective over MPI_COMM_WORLD: setup and teardown only. */
int run_agree(int rc);

/* The supernet (supernet.h; nothing without supernet.enabled). supernet_layers: the choice blocks,
 * before the model; supernet_init: the window's gradient buffer, after it; supernet_begin: subnet t
 * selected; supernet_update: its candidates' AdamW steps and, at a window's end, the shared
 * tensors' (returns the subnet's gradient norm); supernet_resume: the counters of the subnets
 * before r->step, replayed from the sampler. */
int supernet_layers(run_t *r);
int supernet_init(run_t *r);
void supernet_free(run_t *r);
void supernet_begin(run_t *r, long t);
double supernet_update(run_t *r, long t, double lr);
void supernet_resume(run_t *r);
/* Causal (r->sn.causal): runs the window of subnets t0 .. t0 + window − 1 through the pipeline with
 * NASPipe's causal lists, each subnet's candidates stepping on their stage right after its backward,
 * then the shared tensors' window step; r->sn.wloss and wgnorm get each subnet's loss and norm. */
void supernet_window(run_t *r, long t0, const exec_batch_t *src);
/* The two halves of the update (supernet.c; both ways of running use them): subnet t's candidates
 * (stage_only: this rank's blocks, norms over tensor parallelism only; else every layer, norms
 * collective over the pipeline too) and its shared gradients into the window's sums, after summing
 * the stage's gradients over the data-parallel replicas (collective over them); cn2 gets each
 * layer's squared candidate norm (0 where none stepped). Then the window's end. */
void supernet_subnet_step(run_t *r, long t, const int *sel, double lr, int stage_only, double *cn2);
/* Data parallelism: the subnet's gradients (and the LM head's part) summed over the stage's data-
 * parallel peers before anything reads them (collective over grid.comm[GRID_DP]; nothing at dp = 1). */
void supernet_replica_sum(run_t *r);
/* supernet_subnet_step's first half alone: the candidates' steps (and counters), not the shared sums. */
void supernet_subnet_cands(run_t *r, const int *sel, double lr, int stage_only, double *cn2);
/* The causal lists' description of the window in r->sn.wsel (layer0: pp + 1 entries and weightless:
 * ncand entries, filled here; c_p points into both and into r). */
void supernet_window_cfg(const run_t *r, causal_cfg_t *c_p, int *layer0, unsigned char *weightless);
/* Supernet parallelism (parallel.sp > 1, supernet_sp.c): the window of subnets r->sn.t0 .. + window − 1
 * in r->sn.wsel through this rank's list of the sp × pp ranks' (causal_sp.h), the shared tensors'
 * window step included; each subnet's loss in r->exec.sub_loss and its candidates' squared norms in
 * r->sn.wcn2 on the ranks of its replica (zeros elsewhere). Aborts the job on an allocation failure. */
void supernet_sp_window(run_t *r, const exec_batch_t *src);
void supernet_window_end(run_t *r, long t);
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
void supernet_home_sizes(const run_t *r, size_t sizes[4]);
void supernet_home_announce(run_t *r);
void supernet_home_report(run_t *r);
/* The local block of layer l (-1: another stage's), and candidate k's first tensor in the buffer. */
int supernet_local_block(const model_t *m, int l);
const param_entry_t *supernet_first_entry(const model_t *m, int b, int k);
/* Why a supernet runs one executor step per subnet on this layout instead of windows of causal lists
 * (NULL: it runs windows). */
const char *run_supernet_serial_why(const run_t *r);
/* Whether a block of this stage offloads its stash (memory.policy = offload). */
int run_stage_offloads(const run_t *r);
/* --subnet "0,2,1": a candidate index per choice block, in layer order, into sel (per layer, -1 off
 * the choice blocks). MP_OK, or MP_ERR naming what is wrong. */
int supernet_parse_subnet(run_t *r, const char *text, int *sel);

#endif
