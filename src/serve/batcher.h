/* Continuous batching in the front end (ARCHITECTURE.md §10): requests wait in a queue, take a free
 * cache slot at the next token step and leave when done. Every step sends one row per running
 * request (its next prompt token or its last sampled one) through the stages and samples, from the
 * logits that come back, a token for each request past its prompt. The slots form `groups`
 * groups (the number of stages), each with one step in flight, so every stage has work while the
 * others run theirs (HAMS's pipelining); a request has one row in flight at most.
 *
 * Failover (HAMS): the step whose logits came back last is durable; the front end writes that
 * watermark into every step it sends, and each standby applies its primary's state deltas up to the
 * watermark its deltas carry (delta.h); when the batcher goes idle, and before a failover, it
 * publishes the watermark (WIRE_CONFIRM) instead. When a
 * serving process dies (the supervisor's down_check names it), the batcher pauses, the supervisor
 * replaces it (recover: its standby promoted, or a new process), each promoted standby reports how
 * many positions of every slot it holds, and every running request resumes from the last position
 * all replaced stages hold (its restart point): the front end re-sends the rows after it, the
 * surviving stages compute them again (the same bits in their caches), and replies to steps sent
 * before the failure are dropped by step number (downstream reset). A stage restarted without a
 * standby holds nothing, so then every running request replays its tokens from position 0. Either
 * way no request is lost and no completion changes. A step that does not come back within the deadline
 * with every process alive (a hung stage), or a failover that fails 3 times, marks the pipeline
 * down: its requests and every later one fail (503 at the front end) until a restart. */
#ifndef MP_BATCHER_H
#define MP_BATCHER_H

#include <pthread.h>
#include <stdint.h>

#include "evtrace.h"
#include "sampler.h"
#include "wire.h"

/* REQ_STOP: it drew the tokenizer's end-of-sequence token (not among its tokens) */
enum { REQ_RUNNING = 0, REQ_LENGTH = 1, REQ_CONTEXT = 2, REQ_FAILED = 3, REQ_STOP = 4 };

typedef struct serve_req {
    int *prompt, nprompt, max_tokens;     /* prompt owned by the request */
    sampler_cfg_t sample;
    int sample_v;                         /* draws among tokens [0, sample_v) (the tokenizer's
                                           * vocabulary); 0: all V */
    int eos;                              /* the end-of-sequence id (tok_eos), -1: none */
    uint64_t request_id;                  /* keys the draws with the seed and the position */
    uint64_t serial;                      /* the front end's number for it (its id) */
    int *out, nout;                       /* max_tokens ints */
    int state;                            /* REQ_* */
    char error[256];                      /* REQ_FAILED: why */
    int slot, pos;                        /* its cache slot; the position it feeds next (positions
                                           * below it came back: durable) */
    uint64_t step0;                       /* the step that last carried its position 0 */
    int abandoned;                        /* its owner has gone: freed when it finishes */
    double t_submit, t_done;
    struct serve_req *next;               /* the queue */
} serve_req_t;

#define BATCHER_LATENCIES 1024

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    serve_req_t *head, *tail;             /* waiting */
    int queued;
    serve_req_t **slot;                   /* (S) running in each slot, or NULL */
    int slots, groups, running, T, V; /* slot s is in group s mod groups: one step per group in flight */
    void *zctx, *push, *pull;             /* links to stage 0 and from the last stage */
    unsigned char secret[WIRE_SECRET_BYTES];
    int timeout_ms;
    /* Why the pipeline is broken (a dead stage's pid and signal), or NULL: the supervisor's check,
     * called while a step is awaited. */
    const char *(*down_check)(void *ctx);
    /* Replaces the dead processes: stage k's bit in *promoted_p when its standby took over, in
     * *restarted_p when a new process did; MP_OK or MP_ERR. NULL: no failover, a death takes the
     * pipeline down. */
    int (*recover)(void *ctx, uint64_t *promoted_p, uint64_t *restarted_p);
    void *down_ctx;
    void *pub, *rep;                      /* HAMS: confirmations to the standbys; their reports (or NULL) */
    uint64_t durable;                     /* the last step whose logits came back (the standbys' watermark) */
    uint64_t durable_told;                /* the watermark last sent to the standbys (on a step, or published) */
    int stages;
    int *rep_len;                         /* (stages, S): a promoted standby's positions held per slot */
    uint64_t *rep_last;                   /* (stages, S): the step of its last row per slot */
    evtrace_t trace;                      /* the failover timeline */
    int hb_timeout_ms;                    /* several hosts: a primary silent this long is dead (0: off) */
    double *hb_seen;                      /* (stages, 2 host slots, 2 roles): when each slot's process was last
                                           * heard as a primary (role 0) and as a standby (1) */
    uint64_t *gen;                        /* (stages): promotions of each stage (its primary's generation; it
                                           * runs in host slot gen mod 2, links.h: each promotion swaps) */
    uint64_t fence_told;                  /* the last generation a replaced primary was told of (logged once) */
    char first_ep[2][300];                /* several hosts: stage 0's inputs in host slots 0 and 1 */
    int first_linked;                     /* bit s: this front end's push is connected to first_ep[s] */
    int first_token_due;                  /* a failover ended: the next sampled token is traced */
    uint64_t epoch;                       /* replies to steps below it predate the last failover */
    int recovering;
    int stop, down;
    char down_why[256];
    pthread_t thread;
    int started;
    /* metrics (under mu) */
    uint64_t steps, requests_ok, requests_failed, tokens_out, rows, failovers;
    uint64_t failovers_delta, failovers_replay; /* resumed from standbys' deltas; replayed from position 0 */
    uint64_t refed_positions, replay_positions; /* durable positions fed again; what replays would have fed */
    double failover_last_s, failover_max_s; /* from the death noticed to the ring working again */
    double busy_s, t_start;
    double lat[BATCHER_LATENCIES];
    uint64_t nlat;
} batcher_t;

/* The front end's endpoints: the ring's two ends (push: stage 0's input; pull: bound here, the
 * last stage's output); HAMS's confirmation PUB and report PULL (bound here; NULL: no standbys);
 * the failover trace file (NULL: none). */
typedef struct {
    const char *to_first, *from_last, *confirm, *report, *trace;
    const char *to_first2;  /* several hosts: stage 0's standby input, connected to as well (or NULL) */
    int hb_timeout_ms;      /* several hosts: heartbeats (beat.h) tell who lives (0: off) */
} batcher_links_t;

/* groups: steps in flight at once (the stages; at most slots). Connects to the ring, sends an empty step round the ring and waits up to ready_ms for it (every stage has
 * loaded its weights and its links work), and starts the batching thread. MP_OK or MP_ERR
 * (reported, naming a stage that died while starting). */
int batcher_start(batcher_t *b, int slots, int groups, int T, int V, const batcher_links_t *links,
                  const unsigned char *secret, int timeout_ms, int ready_ms, const char *(*down_check)(void *),
                  int (*recover)(void *, uint64_t *, uint64_t *), void *down_ctx);
/* Several hosts (heartbeats on), called from the batching thread (down_check, recover): takes the
 * heartbeats that arrived; the first stage whose primary has been silent past the timeout, with
 * why (n bytes), or −1. */
int batcher_heartbeats(batcher_t *b, char *why, size_t n);
/* Promotes stage k's standby (the process in the host slot that is not the primary's) by message
 * (WIRE_PROMOTE naming stage and generation, which also stops a primary that still lives, and
 * makes upstream send to the new primary's slot only: stage 0's upstream is retargeted here); the
 * slots swap roles, and a standby started later in the old primary's slot (jobs/slurm/serve.sbatch)
 * is promoted by the next failover once its heartbeats are heard. MP_OK, or MP_ERR when no standby
 * has been heard within the timeout (reported). */
int batcher_promote(batcher_t *b, int k);

/* Stops the thread, tells the stages to quit, fails what is left and closes the links. */
void batcher_stop(batcher_t *b);

/* Marks the pipeline down: running and waiting requests fail with why. */
void batcher_mark_down(batcher_t *b, const char *why);

/* Queues r (its prompt checked by the caller) and waits until it finishes or fails. */
void batcher_run(batcher_t *b, serve_req_t *r);

/* For streaming: queues r and returns at once; batcher_wait then blocks until r has more than
 * `have` tokens or has finished, and returns its token count (r->out[0..count) stay as they are)
 * with its state (REQ_*) in *state_p. */
void batcher_submit(batcher_t *b, serve_req_t *r);
int batcher_wait(batcher_t *b, serve_req_t *r, int have, int *state_p);
/* The owner of a submitted r is done with it (its client may have gone): freed now if it has
 * finished, else when it does. r, its prompt and out must come from malloc. */
void batcher_release(batcher_t *b, serve_req_t *r);
/* Frees r, r->prompt and r->out. */
void serve_req_free(serve_req_t *r);

#endif
