/* Continuous batching in the front end (ARCHITECTURE.md §7): requests wait in a queue, take a free
 * cache slot at the next token step and leave when done. Every step sends one row per running
 * request (its next prompt token or its last sampled one) through the stages and samples, from the
 * logits that come back, a token for each request past its prompt. The slots form `groups`
 * groups (the number of stages), each with one step in flight, so every stage has work while the
 * others run theirs (HAMS's pipelining); a request has one row in flight at most.
 *
 * Failover: when a serving process dies (the supervisor's down_check names it), the supervisor
 * replaces it (recover) and every running request replays its known tokens (prompt and generated)
 * from position 0, rebuilding every stage's cache by the same computation: no request is lost and
 * no completion changes. This recomputes state instead of shipping it to a standby as HAMS does;
 * standbys only save the replacement's start-up. A step that does not come back within the deadline
 * with every process alive (a hung stage), or a failover that fails 3 times, marks the pipeline
 * down: its requests and every later one fail (503 at the front end) until a restart. */
#ifndef MP_BATCHER_H
#define MP_BATCHER_H

#include <pthread.h>
#include <stdint.h>

#include "sampler.h"
#include "wire.h"

enum { REQ_RUNNING = 0, REQ_LENGTH = 1, REQ_CONTEXT = 2, REQ_FAILED = 3 };

typedef struct serve_req {
    int *prompt, nprompt, max_tokens;     /* prompt owned by the request */
    sampler_cfg_t sample;
    uint64_t request_id;                  /* keys the draws with the seed and the position */
    uint64_t serial;                      /* the front end's number for it (its id) */
    int *out, nout;                       /* max_tokens ints */
    int state;                            /* REQ_* */
    char error[256];                      /* REQ_FAILED: why */
    int slot, pos;                        /* its cache slot; the position it feeds next */
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
    /* Replaces the dead processes (a standby promoted, or a new one started); MP_OK or MP_ERR. NULL:
     * no failover, a death takes the pipeline down. */
    int (*recover)(void *ctx);
    void *down_ctx;
    uint64_t epoch;                       /* replies to steps below it predate the last failover */
    int recovering;
    int stop, down;
    char down_why[256];
    pthread_t thread;
    int started;
    /* metrics (under mu) */
    uint64_t steps, requests_ok, requests_failed, tokens_out, rows, failovers;
    double failover_last_s, failover_max_s; /* from the death noticed to the ring working again */
    double busy_s, t_start;
    double lat[BATCHER_LATENCIES];
    uint64_t nlat;
} batcher_t;

/* groups: steps in flight at once (the stages; at most slots). Connects to the ring's two endpoints (push: stage 0's input; pull: bound here, the last stage's
 * output), sends an empty step round the ring and waits up to ready_ms for it (every stage has
 * loaded its weights and its links work), and starts the batching thread. MP_OK or MP_ERR
 * (reported, naming a stage that died while starting). */
int batcher_start(batcher_t *b, int slots, int groups, int T, int V, const char *to_first, const char *from_last,
                  const unsigned char *secret, int timeout_ms, int ready_ms, const char *(*down_check)(void *),
                  int (*recover)(void *), void *down_ctx);
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
