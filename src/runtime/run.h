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
#include "trace.h"
#include "wait.h"
#include "watchdog.h"

#include "run_opts.h"

typedef struct run_plug run_plug_t;

/* What a plug-in (run_plug_t) makes of a step; {0, 1, 0} without one. */
typedef struct {
    int on;                  /* a plug-in is active */
    int window;              /* steps that form one unit (a supernet's window): a stop, and an evaluation that
                                falls inside one, wait for its end */
    int whole;               /* the unit's steps run at once, at its first (their figures read out one per step) */
} run_unit_t;

/* Who this rank is in the job and whom it talks to: the layout, resolved. Read by nearly everyone;
 * written by run_setup only. */
typedef struct {
    int rank, world, threads;
    grid_t grid;
    wait_cfg_t wait;
    int stage, pp;
    int replica_batch;       /* sequences per step on one replica: train.batch ÷ (dp × sp) */
    int micro_batches;       /* micro-batches per step on one replica: replica_batch ÷ train.micro_batch */
} run_layout_t;

/* The run directory and what this process writes into it (besides checkpoints, which run_ckpt writes
 * through rundir's names). */
typedef struct {
    char out_dir[4096];
    char run_id[CKPT_RUN_ID_LEN + 1]; /* this run's id (rundir.h): in every checkpoint it writes; "" until
                                         known (a resume adopts its checkpoint's) */
    char *deck_text;         /* the resolved deck, as stored in checkpoints */
    char *init_keys;         /* --init-from: the model keys the deck took from config.json ("": none; NULL: no
                                --init-from), for the log */
    rundir_lock_t lock;      /* rank 0: RUN/lock, held from setup to teardown */
    runlog_t log;
    trace_t trace;           /* the timeline written to trace.json (ev NULL: not recording) */
    actdump_t dump;          /* debug.dump_activations (step -1: off) */
    ckpt_verdicts_t verdicts; /* rank 0: what it learnt of RUN/ckpt's files (resume, pruning) */
} run_files_t;

/* This rank's stage: the model and everything that runs it (the backend, the memory plan and modes,
 * the executor and its buffers, the data-parallel sums). Live migration rebuilds all of it. */
typedef struct {
    arena_t arena;
    backend_t be;            /* train.device: where the model lives and runs */
    int p2p_nccl;            /* pipeline messages through NCCL: cuda, parallel.p2p resolved (run_gpus.h) */
    char gpu_note[400];      /* cuda: ranks share a GPU, so some collectives are host-staged ("": none) */
    char p2p_note[400];      /* cuda: parallel.p2p=auto chose MPI because a boundary's ranks share a GPU */
    sched_costs_t play;      /* the times zb1p's and zbv's lists are played out with (every rank the same) */
    char play_note[DECK_PATH + 400]; /* which, for the log ("": a schedule with a fixed list) */
    model_t model;
    param_table_t gtab;      /* the whole model's canonical (tp = 1) table: checkpoints are written in it */
    int *gidx;               /* local entry i -> index of the same tensor in gtab */
    nodelink_t link;         /* memory.coordinate: the node's host-link locks (when a block offloads) */
    exec_plan_t plan;        /* the stage's memory plan (memory.device_limit), made before allocating */
    int auto_policy;         /* memory.policy = auto: the policy_t this stage chose (-1: not auto) */
    double auto_bytes, auto_keep_bytes; /* ... its planned peak, and keep's */
    exec_t exec;             /* runs this stage's instruction lists (every pp, pp = 1 included) */
    acts_t acts;
    scratch_t scratch;
    dp_t dp;                 /* data parallelism over grid.replica (used when replica_size > 1) */
    int dp_on;
} run_stage_t;

/* The run: its deck, the three parts above, and the state of the training loop. Functions take the
 * narrowest part that holds what they read (a run_layout_t, a run_stage_t), the whole only when they
 * need several. */
typedef struct run_s {
    run_opts_t opts;
    deck_t deck;
    optim_cfg_t optim;       /* the learning-rate schedule and AdamW's constants */
    run_layout_t lay;
    run_files_t files;
    run_stage_t st;
    int training;            /* set up by train: a causal supernet runs whole windows (eval, export, search and
                                debug-grads run one subnet at a time) */
    dataset_t data;
    tok_ident_t data_tok;    /* the tokenizer that made data's tokens (tok_of_data_file): checkpoints carry it */
    prof_t prof;             /* where the steps' time went (the first step is warm-up, not counted) */
    long step;               /* optimizer steps completed */
    int stop;                /* a stop was requested (signals.h): drain, checkpoint and exit after this step */
    const run_plug_t *plug;  /* the active plug-in (NULL: plain steps) and its state, which only its room reads */
    void *plug_state;
    run_unit_t unit;
    long adam_t;             /* AdamW's 1-based counter of the last update */
    double peak_gflops;
    autosplit_t autosplit;   /* pipeline.layers = auto: what was measured and chosen at start */
    watchdog_t wd;           /* the deadlines of phases that block inside MPI or HDF5, and of a stop (watchdog.h) */
    struct recovery_s *rec;  /* recovery.log: the boundary log and a replay's readers (recovery.h; NULL: none) */
} run_t;

/* A plug-in changes what a step is: the search room's supernet (search/supernet.h) is one. The
 * run's set-up and the checkpoint plumbing call it through this table and never by name; the
 * training loop calls the room's step operations (train.h's train_ops_t). run_opts_t.plug offers one;
 * run_setup makes it active (r->plug) when `wants` says the deck is its, and refuses a deck it
 * wants when none is offered. With one active, the step sums its gradients over the data-parallel
 * replicas itself (the buckets are off). Hooks may be NULL. */
struct run_plug {
    const char *name;        /* in errors: "supernet" */
    int (*wants)(const deck_t *d);
    /* set-up, in this order: the model's configuration (before the model: the plug-in's state in
     * r->plug_state, r->unit), its buffers (after the model, before the memory plan: they are fixed
     * memory), and their end (whatever part was made) */
    int (*model_cfg)(run_t *r, model_cfg_t *cfg);
    int (*init)(run_t *r);
    void (*free)(run_t *r);
    /* parameters whose homes are in host memory: home(which) gives them (0 weights, 1 and 2 AdamW's
     * moments; NULL: none), flush finishes every copy to them, forget drops the device's copies (a
     * checkpoint was read into the homes) */
    float *(*home)(run_t *r, int which);
    void (*home_flush)(run_t *r);
    void (*home_forget)(run_t *r);
};

/* The plug-in's homes (NULL without), and its flush and forget (nothing without). */
float *run_home(run_t *r, int which);
void run_home_flush(run_t *r);
void run_home_forget(run_t *r);

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


/* The model chunks of pipeline stage `stage`: chunk c holds blocks [layer0s[c], layer0s[c] +
 * nlayers_s[c]). The model is cut into K = pp × v chunks (v = deck_chunks_per_stage) of the sizes
 * pipeline.layers lists, or L/K each with the remainder on the first; stage s holds the chunks its
 * schedule places there (sched_stage_chunk: s, s + pp, s + 2pp, ... for every schedule the
 * executor runs). Returns v. */
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
/* The same through lay->wait (wait.h): a peer lost or stopped ends it at parallel.timeout, through
 * the loss handler armed there (recovery.h) or an abort naming `what`, never a wait without end. For
 * the agreements after the layout is known whose peers may be lost by then (the recovery's end). */
int run_agree_wait(const run_layout_t *lay, int rc, const char *what);

/* Whether a block of this stage offloads its stash (memory.policy = offload). */
int run_stage_offloads(const run_stage_t *st);
/* Layer l's memory policy: memory.layers' letter, else memory.policy (auto counts as keep: the memory
 * plan replaces it per stage before anything is allocated). */
policy_t run_layer_policy(const deck_t *d, int l);

#endif
