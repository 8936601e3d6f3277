/* The executor (ARCHITECTURE.md, "Execution"): runs this stage's instruction lists (schedule.h)
 * for every pipeline depth, pp = 1 included (a one-stage pipeline), and the evaluation's forward
 * passes. Messages are non-blocking MPI (or NCCL on cuda) over the pipeline communicator,
 * overlapped with compute; saved activations live in the stash (stash.h) under its memory policy.
 *
 * It knows the run only through its context (exec_ctx_t): the stage's model shard, the backend, the
 * communicators it needs, trace, profiler, and two documented callbacks: the batch source (fills a
 * micro-batch's tokens) and the bucket-ready hook (model_ready_t: data parallelism starts a
 * bucket's all-reduce there).
 *
 * 2bw (PipeDream-2BW): the lists of consecutive steps join with no flush (sched_build_2bw), and
 * the stage keeps two weight versions: batch t runs forward and backward on W(t−1) (model.params_old)
 * while the next batch's first forwards, issued before batch t's update, run on W(t) (model.params);
 * the update makes W(t+1) = W(t) − lr·∇f(W(t−1)).
 *
 * zb1p (ZB-H1) splits each backward: BACKWARD_B computes the input gradient into a weight-gradient
 * stash (model.h's wstash_t) from a pool sized by the list, BACKWARD_W later the weight gradients
 * from it; the stash slot stays taken from the forward to the W (ARCHITECTURE.md §5). zbv does the
 * same with two chunks per stage in a V; its turn (chunk pp−1 to chunk pp, both on stage pp−1) is a
 * device copy in list order rather than a message (exec_turn_act, exec_turn_grad). dualpipev runs the
 * V too, with fused backwards beside split ones and its overlapped pairs: both receives of a pair
 * are posted before its forward, and the backward's gradient is waited for only after the forward
 * (exec_posted_t), so it arrives while the forward computes.
 *
 * At pp = 1 gpipe, interleaved and zb1p run 1f1b's list: with one stage every schedule is the same
 * arithmetic (backwards in micro-batch order), and 1f1b's needs one stash slot, not m. */
#ifndef MP_EXECUTOR_H
#define MP_EXECUTOR_H

#include <mpi.h>

#include "actdump.h"
#include "backend.h"
#include "balance.h"
#include "lower.h"
#include "model.h"
#include "perf.h"
#include "schedule.h"
#include "sim.h"
#include "stash.h"
#include "trace.h"
#include "wait.h"

/* The batch source: fills a's host inputs and targets with micro-batch mb of batch t (this
 * replica's part of the global batch). */
typedef struct {
    void (*fill)(void *ctx, acts_t *a, long t, int mb);
    void *ctx;
} exec_batch_t;

/* A supernet's window run causally (exec_window): select(t) before each forward and backward of
 * subnet t (the model's views point at its candidates), step(t) after its last backward on this
 * stage (its candidates here take their update; the stage's gradients then hold only t's). */
typedef struct {
    void (*select)(void *ctx, long t);
    void (*step)(void *ctx, long t);
    void *ctx;
} exec_subnets_t;

/* The boundary log (recovery.log, docs/RELIABILITY.md): sent is told every message this stage sends
 * (x: host memory, n floats), before it leaves; in a replay, recv gives what would have been
 * received, and nothing is sent. kind: EXEC_BND_ACT an activation downstream, EXEC_BND_GRAD an input
 * gradient upstream (chunk: the sending chunk; mb: the micro-batch), EXEC_BND_TIED the first
 * stage's part of the tied embedding's gradient (mb, chunk −1; V·C floats, nonzero in the rows of
 * the step's tokens only), EXEC_BND_HEAD the last stage's input to the tied head (mb; chunk: the
 * last), from which a replay of the first stage recomputes the last stage's part of that gradient
 * (model_head_grad) instead of the last stage logging its V·C floats. recv: MP_OK, or MP_ERR
 * (missing or damaged, reported): the replay cannot go on. */
enum { EXEC_BND_ACT, EXEC_BND_GRAD, EXEC_BND_TIED, EXEC_BND_HEAD };
typedef struct {
    void (*sent)(void *ctx, long t, int mb, int chunk, int kind, const float *x, size_t n);
    void (*recv)(void *ctx, long t, int mb, int chunk, int kind, float *x, size_t n);
    void *ctx;
} exec_bnd_t;

typedef struct {
    model_t *model;            /* this stage's shard: its chunks, parameters, gradients */
    backend_t *be;
    arena_t *arena;            /* stash slots and device message buffers */
    acts_t *acts;              /* the stage's own activations: stash slot 0, and the evaluation's */
    scratch_t *scratch;
    const wait_cfg_t *wait;
    MPI_Comm pp_comm;          /* this pipeline's stages, ranked by stage */
    MPI_Comm embed_comm;       /* first and last stage (the tied embedding); MPI_COMM_NULL elsewhere */
    int stage, pp;
    int stage_rank[SIM_MAX_STAGES]; /* world rank of each stage of this pipeline: timeouts name it */
    sched_kind_t kind;
    sched_costs_t play;        /* the times zb1p's and zbv's lists are played out with (all zero: unit) */
    int m;                     /* micro-batches per step on this replica (causal: per window) */
    int per;                   /* supernet run causally: micro-batches per subnet, m = window × per; 0 otherwise */
    int supernet;              /* the tied embedding's two parts stay apart: the supernet sums them per window */
    int nccl;                  /* pipeline messages through NCCL (cuda, parallel.p2p resolved) */
    const stash_policy_t *policy;  /* NULL: keep, or offload when a block of the stage offloads */
    int prefetch;              /* offload: PREFETCH this many instructions before the backward */
    int balance;               /* BPipe's balance between stages s and pp−1−s (every stage alike) */
    int balance_keep;          /* ... stashes an evictor keeps on its device (<= 0: the default) */
    size_t partner_mov;        /* ... the partner's movable bytes (the acceptor's plan; bal_init checks it) */
    trace_t *trace;            /* the timeline (ev NULL: not recording) */
    prof_t *prof;              /* kernel timers of the steps, or NULL */
    actdump_t *dump;           /* debug.dump_activations, or NULL */
} exec_ctx_t;

/* A pipeline receive (MPI) posted at its RECV instruction and finished by the computation that reads
 * it (lower.h's host lowering): FORWARD its activation, BACKWARD or BACKWARD_B its gradient. A list
 * reads each receive before it posts the next of its kind, so one of each is pending at most. */
typedef struct {
    MPI_Request req;          /* MPI_REQUEST_NULL: none pending */
    float *dev, *land;        /* where the reader wants it, and where MPI puts it (dev on the cpu backend) */
    int key;                  /* the stash key of its reader */
    long t;
    int mb;
    const char *what;         /* the trace span's name */
    char where[160];          /* what a timeout names */
} exec_posted_t;

typedef struct {
    exec_ctx_t c;
    int v, K;                 /* chunks per stage, chunks in all */
    instr_list_t list;        /* one step (gpipe, 1f1b, interleaved) */
    instr_list_t l2bw[2][2];  /* 2bw: [first][drain] (schedule.h) */
    lower_prog_t prog, prog2bw[2][2]; /* nccl: the lists lowered to streams (lower.h): the event waits */
    int carried;              /* 2bw: the next batch's first forwards already ran (not drained) */
    double carried_loss;      /* ... and the Σ of their token losses (last stage) */
    model_part_t part[PARAM_MAX_CHUNKS];
    stash_t stash;
    wstash_t *ws;             /* split backward (zb1p): the weight-gradient stashes, B to W (sched_list_peak_w) */
    int *ws_key;              /* ... per wstash, the key whose W it awaits (-1: free) */
    int nws;
    bal_t bal;                /* balance: this stage's side of its pair */
    int nguest;               /* ... the guest buffers an acceptor needs (sched_balance_guest_peak) */
    int nkeys;
    float *gsend;             /* per key: the input gradient in flight to the previous stage (host memory
                                 off the cpu backend: MPI sends from there); NULL at pp = 1 */
    float *hsend;             /* per slot, off the cpu backend: the host copy of its activation in flight */
    float *hrecv;             /* off the cpu backend: host landing buffers of one activation and one gradient */
    exec_posted_t posted[2];  /* the pending receive of an activation [0] and of a gradient [1] */
    float *turn;              /* V placement, the stage holding the turn (chunks pp−1 and pp): per
                                 micro-batch, chunk pp's input gradient waiting for chunk pp−1's B
                                 (device memory; NULL elsewhere) */
    MPI_Request *gsend_req;
    size_t n_act;             /* N·C floats of one activation */
    double idle;              /* seconds blocked in pipeline receives (reset by the caller) */
    double busy;              /* seconds in FORWARD and BACKWARD (or BACKWARD_B and _W) instructions: the
                                 stage's compute, which live migration compares across stages (reset by
                                 the caller) */
    double theory;            /* the schedule's bubble under the simulator's cost model */
    long span_step;           /* the instruction running: the model's own spans are marked with it */
    int span_mb;
    double *sub_loss;         /* causal: per subnet of the window, the Σ of its token losses (last stage) */
    const exec_bnd_t *bnd;    /* the boundary log (NULL: none), and whether this is a replay (exec_set_bnd) */
    int replay;
    unsigned char live[SIM_MAX_STAGES]; /* a replay: the stages that replay too, whose messages go live */
    float *head_sum;          /* a replay of the first stage: the last stage's part of the tied gradient,
                                 recomputed micro-batch by micro-batch (V·C floats, host) */
    float *head_in;           /* ... and the logged input of one micro-batch's head (N·C floats) */
    float *bnd_host;          /* off the cpu backend: the host copy a logged tensor of device memory (the
                                 tied part, a head input) is read from, and a replay adds the tied sum in */
    size_t bnd_host_n;        /* ... its floats */
} exec_t;

/* The stage's memory plan (memory.device_limit): every byte the arena will hold, from the lists and
 * the sizes, before any of it is allocated. The arena counts the bytes requested, so a run's peak
 * equals total exactly. */
typedef struct {
    int nslots, npool;   /* stash slots (the lists' peak); movable buffers (their device peak) */
    size_t fixed;        /* what the caller holds outside the executor: model, 2bw's version, ZeRO shard */
    size_t slot0, slot;  /* bytes of the stage's own activations, and of each further slot */
    size_t mov;          /* bytes of one movable buffer (0: nothing offloads) */
    int nguest;          /* balance: guests an acceptor holds in a step */
    size_t guests;       /* ... their arena bytes (cpu; elsewhere host memory) */
    size_t stash;        /* slot0 + (nslots − 1)·slot + npool·mov + guests */
    int nwstash;         /* split backward: the weight-gradient stashes (the list's peak between B and W) */
    size_t wstash_each;  /* ... bytes of each: the most any chunk of the stage needs (model_wstash_bytes) */
    size_t wstash;       /* nwstash·wstash_each */
    size_t scratch;      /* backward temporaries and the recompute workspace */
    size_t messages;     /* device gradient send buffers */
    size_t total;        /* fixed + stash + wstash + scratch + messages */
} exec_plan_t;

/* The run features of a stage's context that a schedule may not run with (bits 1u << compose_feature_t,
 * compose.h): a supernet, balance, NCCL as resolved at start (not under the stand-in, gpu_share.h). The
 * executor refuses what compose_refused refuses for them before building its lists. */
unsigned exec_compose_have(const exec_ctx_t *c);

/* The plan of the stage of ctx (ctx.acts may be NULL: B is its micro-batch) with `fixed` bytes
 * already planned elsewhere. MP_OK or MP_ERR (an invalid schedule: message printed). */
int exec_plan(const exec_ctx_t *ctx, int B, size_t fixed, exec_plan_t *p);

/* Builds the stage's lists, its stash and message buffers. Collective-free. MP_OK or MP_ERR
 * (message printed). */
int exec_init(exec_t *e, const exec_ctx_t *ctx);

/* The boundary log from now on (NULL: none). replay: the steps run without the stages that do not
 * replay, their messages taken from bnd->recv and none sent to them; live (pp flags, NULL: none) marks
 * the stages that replay too (a lost node's neighbouring stages), with which messages and the tied
 * embedding's sum go as in the step (MPI pipeline messages only: not NCCL's, nor the balance
 * policy's stash transfers; 2bw drains every step under the log, so its steps replay alike). */
void exec_set_bnd(exec_t *e, const exec_bnd_t *bnd, int replay, const unsigned char *live);
void exec_free(exec_t *e);

/* Runs step t's list up to REDUCE_GRADS: gradients final on this stage (zeroed first, the tied
 * embedding's two parts added, and summed over the embed communicator). Returns the Σ of token
 * losses of batch t on the last stage, 0 elsewhere. dloss = 1 / tokens of the global batch.
 * ready: the bucket hook (NULL: none), called during each chunk's backward of the last
 * micro-batch. 2bw: drain = 1 ends the step with an empty pipeline (before evaluations,
 * checkpoints and the end); the other schedules always drain. */
double exec_step(exec_t *e, long t, float dloss, const exec_batch_t *src, const model_ready_t *ready, int drain);

/* A supernet's window: subnets t .. t + m/per − 1 through this stage's causal list (causal.h; the
 * caller builds it per window, every rank alike), micro-batch j·per + k of the list being subnet
 * t + j's k-th. Subnets' losses land in e->sub_loss (last stage); no tied-embedding sum. */
void exec_window(exec_t *e, long t, const instr_list_t *list, float dloss, const exec_batch_t *src,
                 const exec_subnets_t *subs);

/* The same window run one instruction at a time by a caller that interleaves its own (supernet
 * parallelism, supernet_sp.c: messages between replicas): exec_window_begin zeroes the subnets'
 * losses and the gradients; exec_window_instr runs one pipeline instruction of this stage (LOAD_BATCH,
 * FORWARD, BACKWARD, SEND/RECV_ACT, SEND/RECV_GRAD with peer = the stage; OPTIMIZER_STEP with mb =
 * the subnet's last micro-batch: subs->step) exactly as exec_window would; exec_window_end waits
 * for the window's pipeline sends (its REDUCE_GRADS). */
void exec_window_begin(exec_t *e);
void exec_window_instr(exec_t *e, long t, const instr_t *in, float dloss, const exec_batch_t *src,
                       const exec_subnets_t *subs);
void exec_window_end(exec_t *e, long t);

/* Forward only, through every stage and chunk, of the micro-batch the caller filled into
 * ctx.acts on the first stage (no timers); returns the last stage's Σ of the first
 * valid_rows·T token losses (0 elsewhere). Runs on a drained pipeline. */
double exec_forward_only(exec_t *e, int valid_rows);

/* Most movable buffers in use at once so far (offload). */
static inline int exec_pool_peak(const exec_t *e) { return e->stash.pool_peak; }

/* Most stash slots in use at once so far. */
static inline int exec_stash_peak(const exec_t *e) { return e->stash.peak; }

#endif
