/* Continuous batching (batcher.h). */
#include "batcher.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "delta.h"
#include "perf.h"

void serve_req_free(serve_req_t *r)
{
    if (r) free(r->prompt), free(r->out), free(r);
}

/* Under mu: r is done (state set by the caller); wakes its waiter, or frees it when its owner has
 * gone (a streaming client that disconnected). */
static void req_finish(batcher_t *b, serve_req_t *r, int state, const char *error)
{
    r->state = state;
    if (error) snprintf(r->error, sizeof r->error, "%s", error);
    r->t_done = perf_now();
    if (state == REQ_FAILED) b->requests_failed++;
    else b->requests_ok++, b->lat[b->nlat++ % BATCHER_LATENCIES] = r->t_done - r->t_submit;
    if (r->abandoned) serve_req_free(r);
    pthread_cond_broadcast(&b->done);
}

/* Under mu: waiting requests into free slots (max_tokens 0 finishes at once). */
static void admit(batcher_t *b)
{
    for (int s = 0; s < b->slots && b->head; s++) {
        if (b->slot[s]) continue;
        serve_req_t *r = b->head;
        b->head = r->next;
        if (!b->head) b->tail = NULL;
        b->queued--;
        if (r->max_tokens == 0) {
            req_finish(b, r, REQ_LENGTH, NULL);
            s--;
            continue;
        }
        r->slot = s, r->pos = 0;
        b->slot[s] = r;
        b->running++;
    }
}

/* Under mu: group g's step rows, one per running request of its slots (s ≡ g mod groups), in slot
 * order. */
static int build_rows(const batcher_t *b, int g, wire_row_t *rows, serve_req_t **who)
{
    int B = 0;
    for (int s = g; s < b->slots; s += b->groups) {
        serve_req_t *r = b->slot[s];
        if (!r) continue;
        /* the token at its position: of the prompt, or one it generated (the last, or an earlier
         * one while a failover replays it) */
        const int tok = r->pos < r->nprompt ? r->prompt[r->pos] : r->out[r->pos - r->nprompt];
        rows[B] = (wire_row_t){s, r->pos, tok};
        who[B++] = r;
    }
    return B;
}

/* Under mu: after feeding position p, a request that has fed every token it knows (its prompt and
 * what it generated) samples the token of p + 1 (keyed by that position, as completion_run does)
 * and stops at max_tokens or when p + 1 is the context's last position. Before that (its prompt, or
 * its tokens replayed after a failover) it moves on to the next position. */
static void advance(batcher_t *b, serve_req_t *r, const float *logits, float *work)
{
    const int p = r->pos;
    if (p < r->nprompt + r->nout - 1) {
        r->pos++;
        return;
    }
    const int sv = r->sample_v > 0 && r->sample_v < b->V ? r->sample_v : b->V;
    const int drawn = sampler_pick(logits, sv, &r->sample, r->request_id, (uint64_t)(p + 1), work);
    const int stop = r->eos >= 0 && drawn == r->eos;
    if (!stop) r->out[r->nout++] = drawn, b->tokens_out++;
    if (b->first_token_due) b->first_token_due = 0, evtrace_event(&b->trace, "first_token", "");
    const int state = stop ? REQ_STOP : r->nout == r->max_tokens ? REQ_LENGTH : p + 1 == b->T - 1 ? REQ_CONTEXT : REQ_RUNNING;
    if (state == REQ_RUNNING) {
        r->pos = p + 1;
        return;
    }
    b->slot[r->slot] = NULL;
    b->running--;
    req_finish(b, r, state, NULL);
}

/* Under mu: the pipeline is down; every running and waiting request fails with why. */
static void fail_all(batcher_t *b, const char *why)
{
    b->down = 1;
    snprintf(b->down_why, sizeof b->down_why, "%s", why);
    for (int s = 0; s < b->slots; s++)
        if (b->slot[s]) req_finish(b, b->slot[s], REQ_FAILED, why), b->slot[s] = NULL;
    b->running = 0;
    for (serve_req_t *r = b->head, *n; r; r = n) n = r->next, req_finish(b, r, REQ_FAILED, why);
    b->head = b->tail = NULL;
    b->queued = 0;
}

/* Not under mu: waits for the reply to one of the steps in flight, into back and logits; MP_OK
 * with its header in *h; STEP_DEAD with why when a serving process died (a failover can repair
 * that); MP_ERR with why (no reply within the deadline, a reply that is not a step's). */
enum { STEP_DEAD = 2 };

static int step_wait(batcher_t *b, wire_hdr_t *h, wire_row_t *back, float *logits, char *why, size_t nwhy)
{
    /* 50 ms polls: a dead process is noticed within about that (the failover's detection time) */
    for (int waited = 0; waited < b->timeout_ms; waited += 50) {
        const int got = wire_recv(b->pull, b->secret, 50, h, back, b->slots, logits, (size_t)b->slots * b->V);
        if (got < 0) return snprintf(why, nwhy, "a malformed reply from the last stage"), MP_ERR;
        if (got == 1)
            return h->kind == WIRE_STEP && h->width == b->V ? MP_OK
                   : (snprintf(why, nwhy, "the last stage answered with %d rows of %d floats", h->B, h->width), MP_ERR);
        const char *dead = b->down_check ? b->down_check(b->down_ctx) : NULL;
        if (dead) return snprintf(why, nwhy, "%s", dead), STEP_DEAD;
    }
    return snprintf(why, nwhy, "no stage answered within %d ms", b->timeout_ms), MP_ERR;
}

/* Not under mu: one step through the ring and its reply; replies to earlier steps (in flight when
 * a stage died) are dropped. MP_OK, STEP_DEAD or MP_ERR as step_wait. */
static int step_roundtrip(batcher_t *b, uint64_t step, const wire_row_t *rows, int B, wire_row_t *back, float *logits,
                          char *why, size_t nwhy)
{
    wire_hdr_t h = {WIRE_MAGIC, WIRE_STEP, step, B, 0, step, 0}; /* an empty step of a failover: its own era */
    if (wire_send(b->push, b->secret, &h, rows, NULL) != MP_OK) return snprintf(why, nwhy, "sending a step to stage 0 failed"), MP_ERR;
    do {
        const int rc = step_wait(b, &h, back, logits, why, nwhy);
        if (rc != MP_OK) return rc;
    } while (h.step < step);
    if (h.step != step || h.B != B)
        return snprintf(why, nwhy, "the last stage answered step %llu with %d rows (expected step %llu, %d rows)",
                        (unsigned long long)h.step, h.B, (unsigned long long)step, B), MP_ERR;
    return MP_OK;
}

/* Not under mu: an empty step round the ring, up to b->timeout_ms. On one machine one step, number
 * *step_p. On several hosts a message to a peer not yet connected is dropped (links.h), so a new
 * one goes every 100 ms, numbered on from *step_p, until one comes back; *step_p is then the last
 * number sent (the caller skips past it). MP_OK, STEP_DEAD or MP_ERR as step_wait. */
static int ring_ping(batcher_t *b, uint64_t *step_p, wire_row_t *back, float *logits, char *why, size_t nwhy)
{
    if (!b->hb_timeout_ms) return step_roundtrip(b, *step_p, back, 0, back, logits, why, nwhy);
    const uint64_t first = *step_p;
    wire_hdr_t h;
    for (int waited = 0; waited < b->timeout_ms; (*step_p)++) {
        h = (wire_hdr_t){WIRE_MAGIC, WIRE_STEP, *step_p, 0, 0, *step_p, 0};
        if (wire_post(b->push, b->secret, &h, NULL, NULL) < 0) return snprintf(why, nwhy, "sending to stage 0 failed"), MP_ERR;
        for (int t = 0; t < 100; t += 50, waited += 50) {
            const int got = wire_recv(b->pull, b->secret, 50, &h, back, b->slots, logits, (size_t)b->slots * b->V);
            if (got < 0) return snprintf(why, nwhy, "a malformed reply from the last stage"), MP_ERR;
            if (got == 1 && h.kind == WIRE_STEP && h.B == 0 && h.step >= first) return MP_OK;
        }
    }
    return snprintf(why, nwhy, "no empty step came round the ring within %d ms", b->timeout_ms), MP_ERR;
}

/* The batching thread's buffers: per group, its rows in flight and their requests. */
typedef struct {
    wire_row_t *rows, *back;     /* (groups, S), (S) */
    serve_req_t **who;           /* (groups, S) */
    int *B, *inflight;           /* (groups) */
    uint64_t *step;              /* (groups): the step id each group has in flight */
    float *logits, *work;        /* (S, V), (2V) */
} loop_bufs_t;

static int loop_bufs_alloc(loop_bufs_t *l, const batcher_t *b)
{
    const size_t G = (size_t)b->groups, S = (size_t)b->slots;
    l->rows = malloc(G * S * sizeof *l->rows), l->back = malloc(S * sizeof *l->back);
    l->who = malloc(G * S * sizeof *l->who);
    l->B = calloc(G, sizeof *l->B), l->inflight = calloc(G, sizeof *l->inflight), l->step = calloc(G, sizeof *l->step);
    l->logits = malloc(S * (size_t)b->V * sizeof(float)), l->work = malloc(2 * (size_t)b->V * sizeof(float));
    return l->rows && l->back && l->who && l->B && l->inflight && l->step && l->logits && l->work ? MP_OK : MP_ERR;
}

static void loop_bufs_free(loop_bufs_t *l)
{
    free(l->rows), free(l->back), free(l->who), free(l->B), free(l->inflight), free(l->step), free(l->logits), free(l->work);
}

/* Under mu (released while sending): a step for every group with running requests and nothing in
 * flight. The number of groups in flight, or MP_ERR (a send failed; why filled). */
static int send_ready_groups(batcher_t *b, loop_bufs_t *l, char *why, size_t nwhy)
{
    int n = 0;
    for (int g = 0; g < b->groups; g++) {
        if (!l->inflight[g]) {
            wire_row_t *rows = l->rows + (size_t)g * b->slots;
            l->B[g] = build_rows(b, g, rows, l->who + (size_t)g * b->slots);
            if (!l->B[g]) continue;
            l->step[g] = b->steps++;
            for (int i = 0; i < l->B[g]; i++)
                if (rows[i].pos == 0) l->who[(size_t)g * b->slots + i]->step0 = l->step[g];
            wire_hdr_t h = {WIRE_MAGIC, WIRE_STEP, l->step[g], l->B[g], 0, b->epoch, b->durable};
            b->durable_told = b->durable; /* its deltas carry the watermark to the standbys */
            pthread_mutex_unlock(&b->mu);
            /* several hosts: never wait on a dead stage 0 (a dropped step is re-sent by the failover
             * the heartbeats will start) */
            const int rc = b->hb_timeout_ms ? (wire_post(b->push, b->secret, &h, rows, NULL) < 0 ? MP_ERR : MP_OK)
                                            : wire_send(b->push, b->secret, &h, rows, NULL);
            pthread_mutex_lock(&b->mu);
            if (rc != MP_OK) return snprintf(why, nwhy, "sending a step to stage 0 failed"), MP_ERR;
            l->inflight[g] = 1;
        }
        n++;
    }
    return n;
}

/* The watermark published to every standby (WIRE_CONFIRM; dropped if none listens), when it is newer
 * than the one last sent (force: anyway). Used where no step will carry it: the batcher idle, a
 * failover starting. */
static void confirm_publish(batcher_t *b, int force)
{
    if (!b->pub || (!force && b->durable <= b->durable_told)) return;
    const wire_hdr_t c = {WIRE_MAGIC, WIRE_CONFIRM, b->durable, 0, 0, 0, 0};
    if (wire_post(b->pub, b->secret, &c, NULL, NULL) < 0) MP_WARN("serving: a confirmation could not be sent");
    b->durable_told = b->durable;
}

/* Under mu: the reply h to group g's step: every row's request advances. MP_OK, or MP_ERR when
 * it matches no step in flight. */
static int take_reply(batcher_t *b, loop_bufs_t *l, const wire_hdr_t *h, char *why, size_t nwhy)
{
    if (h->step < b->epoch) return MP_OK; /* sent before a failover: its rows are replayed */
    int g = 0;
    while (g < b->groups && !(l->inflight[g] && l->step[g] == h->step)) g++;
    if (g == b->groups || h->B != l->B[g])
        return snprintf(why, nwhy, "the last stage answered step %llu (%d rows), which is not in flight",
                        (unsigned long long)h->step, h->B), MP_ERR;
    l->inflight[g] = 0;
    b->rows += (uint64_t)h->B;
    for (int i = 0; i < h->B; i++) advance(b, l->who[(size_t)g * b->slots + i], l->logits + (size_t)i * b->V, l->work);
    pthread_cond_broadcast(&b->done); /* streaming clients: new tokens */
    /* every stage has passed this step on: its standbys may apply it. Replies come back in the order
     * sent (one ring, FIFO links), so every step before it has come back or predates a failover. */
    if (h->step > b->durable) b->durable = h->step;
    return MP_OK;
}

/* A heartbeat (beat.h): when its stage's slot was last heard in its role. A primary's carries its
 * generation (its slot: gen mod 2). One of an older generation than its stage's was replaced but
 * lives (its host was cut off and came back; the WIRE_PROMOTE that would have stopped it went with
 * the dropped connection): it is not taken for the stage's primary, and is told again
 * (WIRE_FENCE), until it exits. A standby's carries its slot. */
static void heartbeat_take(batcher_t *b, const wire_hdr_t *h)
{
    if (!b->hb_seen || h->aux >= (uint64_t)b->stages || h->step >= 2) return;
    const uint64_t k = h->aux;
    if (h->step == 0 && h->durable < b->gen[k]) {
        const wire_hdr_t f = {WIRE_MAGIC, WIRE_FENCE, b->gen[k], 0, 0, k, 0};
        if (wire_post(b->pub, b->secret, &f, NULL, NULL) == 1 && b->fence_told < b->gen[k])
            MP_WARN("serving: a replaced primary of stage %d (generation %llu) is heard again; told to exit", (int)k,
                    (unsigned long long)h->durable);
        b->fence_told = b->gen[k];
        return;
    }
    if (h->step == 0 && h->durable == b->gen[k]) b->hb_seen[4 * k + 2 * (b->gen[k] % 2)] = perf_now();
    if (h->step == 1 && h->durable < 2) b->hb_seen[4 * k + 2 * h->durable + 1] = perf_now();
}

/* Not under mu: the reports of the standbys promoted (bits of want), each within 5 s, into
 * b->rep_len and b->rep_last; *durable_p lowered to the oldest durable step reported. The stages
 * that reported. */
static uint64_t collect_reports(batcher_t *b, uint64_t want, uint64_t *durable_p)
{
    const int S = b->slots;
    uint64_t got = 0;
    wire_hdr_t h;
    wire_row_t *rows = malloc(2 * (size_t)S * sizeof *rows);
    for (int waited = 0; rows && b->rep && (got & want) != want && waited < 5000; waited += 50) {
        const int rc = wire_recv(b->rep, b->secret, 50, &h, rows, 2 * S, NULL, 0);
        if (rc <= 0) continue;
        const int k = (int)h.aux;
        if (h.kind == WIRE_HEARTBEAT) {
            heartbeat_take(b, &h);
            continue;
        }
        if (h.kind != WIRE_REPORT || h.aux >= (uint64_t)b->stages || !(want >> k & 1)) {
            MP_WARN("serving: refused a standby report (kind %u, stage %llu) nobody asked for", h.kind, (unsigned long long)h.aux);
            continue;
        }
        if (delta_report_get(rows, h.B, S, b->T, b->rep_len + (size_t)k * S, b->rep_last + (size_t)k * S) != MP_OK) continue;
        got |= 1ull << k;
        *durable_p = h.step < *durable_p ? h.step : *durable_p;
        char args[96];
        snprintf(args, sizeof args, "\"stage\": %d, \"durable_step\": %llu", k, (unsigned long long)h.step);
        evtrace_event(&b->trace, "report", args);
    }
    free(rows);
    for (int k = 0; k < b->stages; k++) /* stopped, or stalled: named, so the operator finds it */
        if ((want >> k & 1) && !(got >> k & 1))
            MP_WARN("serving: the promoted standby of stage %d did not report within 5 s: stage %d replays (if it "
                    "does not answer either, the pipeline goes down naming no stage)", k, k);
    return got & want;
}

/* Under mu: every running request's restart point: the positions that every replaced stage holds
 * (a promoted standby's report, when it holds the request's current sequence: its slot's last row
 * is not older than the request's position 0; a new process holds none). Returns the positions
 * fed again; *replay_p: what replaying from 0 would have fed. */
static uint64_t resume_points(batcher_t *b, uint64_t promoted, uint64_t reported, uint64_t restarted, uint64_t *replay_p)
{
    uint64_t refed = 0, replay = 0;
    const int S = b->slots;
    for (int s = 0; s < S; s++) {
        serve_req_t *r = b->slot[s];
        if (!r) continue;
        int p = r->pos;
        if (restarted || (promoted & ~reported)) p = 0;
        for (int k = 0; k < b->stages && p > 0; k++) {
            if (!(promoted >> k & 1)) continue;
            const int len = b->rep_len[(size_t)k * S + s];
            const int held = b->rep_last[(size_t)k * S + s] >= r->step0 ? len : 0;
            p = held < p ? held : p;
        }
        refed += (uint64_t)(r->pos - p), replay += (uint64_t)r->pos;
        r->pos = p;
    }
    *replay_p = replay;
    return refed;
}

/* Under mu (released while processes are replaced): a serving process died (why). The batcher
 * pauses; the supervisor replaces the dead (standbys promoted, or new processes); the promoted
 * standbys report their durable state; an empty step goes round the ring; every running request
 * resumes from its restart point (resume_points), replayed steps' replies are dropped by number.
 * Up to 3 attempts. MP_OK, or MP_ERR (why filled). */
static int failover(batcher_t *b, loop_bufs_t *l, char *why, size_t nwhy)
{
    const double t0 = perf_now();
    uint64_t promoted = 0, restarted = 0, reported = 0, durable = UINT64_MAX;
    int rc = MP_ERR;
    MP_WARN("serving: %s; failing over", why);
    char args[400];
    snprintf(args, sizeof args, "\"why\": \"%.300s\"", why);
    evtrace_event(&b->trace, "detect", args);
    confirm_publish(b, 1); /* before the promotion: the standbys apply all that is durable before reporting */
    for (int attempt = 0; attempt < 3 && rc != MP_OK; attempt++) {
        b->recovering = 1;
        uint64_t epoch = b->steps, pr = 0, rs = 0;
        pthread_mutex_unlock(&b->mu);
        rc = b->recover(b->down_ctx, &pr, &rs);
        if (rc == MP_OK) {
            snprintf(args, sizeof args, "\"promoted\": %llu, \"restarted\": %llu", (unsigned long long)pr, (unsigned long long)rs);
            evtrace_event(&b->trace, "recovered", args);
            reported = (reported & ~(pr | rs)) | collect_reports(b, pr, &durable);
            promoted = (promoted & ~rs) | pr, restarted |= rs;
            rc = ring_ping(b, &epoch, l->back, l->logits, why, nwhy);
        } else snprintf(why, nwhy, "replacing a serving process failed");
        pthread_mutex_lock(&b->mu);
        b->steps = b->epoch = epoch + 1; /* replies to anything sent before are dropped */
        if (rc == STEP_DEAD) MP_WARN("serving: %s during the failover; again", why);
    }
    b->recovering = 0;
    if (rc != MP_OK) return MP_ERR;
    for (int g = 0; g < b->groups; g++) l->inflight[g] = 0;
    uint64_t replay;
    const uint64_t refed = resume_points(b, promoted, reported, restarted, &replay);
    const int delta = !restarted && promoted == reported;
    b->failovers++;
    delta ? b->failovers_delta++ : b->failovers_replay++;
    b->refed_positions += refed, b->replay_positions += replay;
    b->failover_last_s = perf_now() - t0;
    b->failover_max_s = b->failover_last_s > b->failover_max_s ? b->failover_last_s : b->failover_max_s;
    b->first_token_due = b->running > 0;
    snprintf(args, sizeof args, "\"resume\": \"%s\", \"running\": %d, \"refed\": %llu, \"replay\": %llu",
             delta ? "delta" : "replay", b->running, (unsigned long long)refed, (unsigned long long)replay);
    evtrace_event(&b->trace, "resume", args);
    if (delta)
        MP_WARN("serving: failed over in %.3f s; resumed from delta at step %llu: %d running requests feed %llu durable "
                "positions again (a replay would feed %llu)", b->failover_last_s, (unsigned long long)durable,
                b->running, (unsigned long long)refed, (unsigned long long)replay);
    else
        MP_WARN("serving: failed over in %.3f s; %d running requests replay their tokens (%llu positions)",
                b->failover_last_s, b->running, (unsigned long long)refed);
    return MP_OK;
}

/* The batching loop: up to `groups` steps in flight (one per group of slots), so with S stages
 * every stage has work (HAMS's pipelining); a request has at most one row in flight, since its
 * next token needs the logits of its last. */
static void *batcher_main(void *arg)
{
    batcher_t *b = arg;
    loop_bufs_t l;
    const int ok = loop_bufs_alloc(&l, b) == MP_OK;
    char why[256];
    pthread_mutex_lock(&b->mu);
    if (!ok) fail_all(b, "the front end is out of memory");
    while (!b->stop) {
        if (!b->down) admit(b);
        const int n = b->down ? 0 : send_ready_groups(b, &l, why, sizeof why);
        if (n < 0) {
            MP_ERROR("serving pipeline down: %s", why);
            fail_all(b, why);
            continue;
        }
        if (!n) { /* idle: a dead process is replaced now, not when the next request finds it */
            /* the last steps' watermark: no step will carry it; again every idle turn (100 ms), for a
             * standby that attached since (its snapshot's rows wait for it, snapshot.h) */
            confirm_publish(b, 1);
            struct timespec t;
            clock_gettime(CLOCK_REALTIME, &t);
            t.tv_nsec += 100000000L;
            if (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
            pthread_cond_timedwait(&b->work, &b->mu, &t);
            pthread_mutex_unlock(&b->mu);
            const char *dead = b->down || !b->recover || !b->down_check ? NULL : b->down_check(b->down_ctx);
            pthread_mutex_lock(&b->mu);
            if (dead) {
                snprintf(why, sizeof why, "%s", dead);
                if (failover(b, &l, why, sizeof why) != MP_OK) MP_ERROR("serving pipeline down: %s", why), fail_all(b, why);
            }
            continue;
        }
        pthread_mutex_unlock(&b->mu);
        wire_hdr_t h;
        const double t0 = perf_now();
        int rc = step_wait(b, &h, l.back, l.logits, why, sizeof why);
        pthread_mutex_lock(&b->mu);
        b->busy_s += perf_now() - t0;
        if (rc == MP_OK) rc = take_reply(b, &l, &h, why, sizeof why);
        if (rc == STEP_DEAD && b->recover) rc = failover(b, &l, why, sizeof why);
        if (rc != MP_OK) {
            MP_ERROR("serving pipeline down: %s", why);
            fail_all(b, why);
            for (int g = 0; g < b->groups; g++) l.inflight[g] = 0;
        }
    }
    pthread_mutex_unlock(&b->mu);
    loop_bufs_free(&l);
    return NULL;
}

int batcher_heartbeats(batcher_t *b, char *why, size_t n)
{
    wire_hdr_t h;
    wire_row_t row;
    while (b->rep && wire_recv(b->rep, b->secret, 0, &h, &row, 1, NULL, 0) == 1)
        if (h.kind == WIRE_HEARTBEAT) heartbeat_take(b, &h);
        else MP_WARN("serving: dropped a message of kind %u on the report link outside a failover", h.kind);
    const double now = perf_now();
    for (int k = 0; k < b->stages; k++) {
        /* the primary's slot heard as a primary; a process restarted there beats as a standby */
        const int slot = (int)(b->gen[k] % 2);
        const double seen = b->hb_seen[4 * k + 2 * slot];
        if (now - seen > 1e-3 * b->hb_timeout_ms) {
            snprintf(why, n, "stage %d's primary missed its heartbeats for %.0f ms (host slot %d)", k, 1e3 * (now - seen),
                     slot);
            return k;
        }
    }
    return -1;
}

int batcher_promote(batcher_t *b, int k)
{
    const double now = perf_now();
    const int to = (int)((b->gen[k] + 1) % 2);
    double *seen = b->hb_seen + 4 * k;
    if (now - seen[2 * to + 1] > 1e-3 * b->hb_timeout_ms)
        return MP_FAIL("serving: stage %d has no standby heard from within %d ms to take over", k, b->hb_timeout_ms);
    const wire_hdr_t h = {WIRE_MAGIC, WIRE_PROMOTE, b->gen[k] + 1, 0, 0, (uint64_t)k, 0};
    if (wire_post(b->pub, b->secret, &h, NULL, NULL) != 1) return MP_FAIL("serving: the promotion of stage %d's standby was not sent", k);
    MP_WARN("serving: the standby of stage %d takes over (promoted by message), host slot %d", k, to);
    /* it beats as the primary now; the old primary's slot has no standby until a new one beats there */
    b->gen[k]++;
    seen[2 * to] = now, seen[2 * to + 1] = seen[2 * (1 - to)] = seen[2 * (1 - to) + 1] = -1e9;
    /* no step goes to the old primary: one cut off but alive would hold them (its connection looks
     * open until ZeroMQ's heartbeat times out, 5 s), and take them again once reconnected */
    if (k == 0 && b->first_ep[0][0]) wire_retarget(b->push, b->first_ep, &b->first_linked, b->gen[0], "the front end");
    return MP_OK;
}

/* HAMS's two sockets, bound here (links->confirm NULL: no standbys, none), and the report arrays. */
static int batcher_hams_open(batcher_t *b, const batcher_links_t *links)
{
    if (!links->confirm) return MP_OK;
    const size_t n = (size_t)b->stages * (size_t)b->slots;
    b->hb_timeout_ms = links->hb_timeout_ms;
    if (!(b->hb_seen = calloc(4 * (size_t)b->stages, sizeof *b->hb_seen)) ||
        !(b->gen = calloc((size_t)b->stages, sizeof *b->gen)))
        return MP_FAIL("out of memory");
    if (!(b->rep_len = calloc(n, sizeof *b->rep_len)) || !(b->rep_last = calloc(n, sizeof *b->rep_last)))
        return MP_FAIL("out of memory for the standbys' reports");
    ZMQ_TRY_PTR(b->pub = zmq_socket(b->zctx, ZMQ_PUB), err);
    ZMQ_TRY_PTR(b->rep = zmq_socket(b->zctx, ZMQ_PULL), err);
    if (wire_socket_opts(b->pub) != MP_OK || wire_socket_opts(b->rep) != MP_OK) goto err;
    ZMQ_TRY(zmq_bind(b->pub, links->confirm), err);
    ZMQ_TRY(zmq_bind(b->rep, links->report), err);
    return MP_OK;
err:
    return MP_ERR;
}

int batcher_start(batcher_t *b, int slots, int groups, int T, int V, const batcher_links_t *links,
                  const unsigned char *secret, int timeout_ms, int ready_ms, const char *(*down_check)(void *),
                  int (*recover)(void *, uint64_t *, uint64_t *), void *down_ctx)
{
    const char *to_first = links->to_first, *from_last = links->from_last;
    memset(b, 0, sizeof *b);
    b->slots = slots, b->T = T, b->V = V, b->timeout_ms = timeout_ms;
    b->stages = groups;
    b->groups = groups < 1 ? 1 : groups > slots ? slots : groups;
    b->down_check = down_check, b->recover = recover, b->down_ctx = down_ctx;
    b->t_start = perf_now();
    memcpy(b->secret, secret, WIRE_SECRET_BYTES);
    if (!(b->slot = calloc((size_t)slots, sizeof *b->slot))) return MP_FAIL("out of memory for %d slots", slots);
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->work, NULL);
    pthread_cond_init(&b->done, NULL);
    ZMQ_TRY_PTR(b->zctx = zmq_ctx_new(), err);
    ZMQ_TRY_PTR(b->push = zmq_socket(b->zctx, ZMQ_PUSH), err);
    ZMQ_TRY_PTR(b->pull = zmq_socket(b->zctx, ZMQ_PULL), err);
    if (wire_socket_opts(b->push) != MP_OK || wire_socket_opts(b->pull) != MP_OK) goto err;
    ZMQ_TRY(zmq_bind(b->pull, from_last), err);
    if (links->to_first2 && wire_immediate(b->push) != MP_OK) goto err;
    ZMQ_TRY(zmq_connect(b->push, to_first), err);
    if (links->to_first2) ZMQ_TRY(zmq_connect(b->push, links->to_first2), err);
    if (links->to_first2) { /* several hosts: both of stage 0's host slots, until a promotion (wire_retarget) */
        snprintf(b->first_ep[0], sizeof b->first_ep[0], "%s", to_first);
        snprintf(b->first_ep[1], sizeof b->first_ep[1], "%s", links->to_first2);
        b->first_linked = 3;
    }
    if (batcher_hams_open(b, links) != MP_OK || evtrace_open(&b->trace, links->trace) != MP_OK) goto err;
    char why[256];
    b->timeout_ms = ready_ms;
    uint64_t first = 0;
    wire_row_t *back = malloc((size_t)slots * sizeof *back);
    float *logits = malloc((size_t)slots * (size_t)V * sizeof(float));
    const int ready = back && logits ? ring_ping(b, &first, back, logits, why, sizeof why) : MP_ERR;
    free(back), free(logits);
    if (ready != MP_OK) { /* no failover: nothing started */
        MP_ERROR("the serving stages did not start: %s", why);
        goto err;
    }
    b->timeout_ms = timeout_ms;
    b->steps = b->epoch = first + 1;
    for (int k = 0; b->hb_seen && k < b->stages; k++) b->hb_seen[4 * k] = perf_now(); /* they answered */
    if (pthread_create(&b->thread, NULL, batcher_main, b) != 0) {
        MP_ERROR("pthread_create for the batching thread failed");
        goto err;
    }
    b->started = 1;
    return MP_OK;
err:
    batcher_stop(b);
    return MP_ERR;
}

void batcher_stop(batcher_t *b)
{
    if (!b->slot) return; /* never started, or stopped already */
    if (b->started) {
        pthread_mutex_lock(&b->mu);
        b->stop = 1;
        pthread_cond_broadcast(&b->work);
        pthread_mutex_unlock(&b->mu);
        pthread_join(b->thread, NULL);
        b->started = 0;
    }
    pthread_mutex_lock(&b->mu);
    if (!b->down) fail_all(b, "the server is stopping");
    pthread_mutex_unlock(&b->mu);
    if (b->push) { /* every stage quits when the message reaches it, passing it on first */
        wire_hdr_t h = {WIRE_MAGIC, WIRE_QUIT, 0, 0, 0, 0, 0};
        if (b->pub) wire_post(b->pub, b->secret, &h, NULL, NULL); /* and every standby */
        if (b->hb_timeout_ms) wire_post(b->push, b->secret, &h, NULL, NULL); /* never waits on a dead stage 0 */
        else wire_send(b->push, b->secret, &h, NULL, NULL);
        zmq_close(b->push);
    }
    if (b->pull) zmq_close(b->pull);
    if (b->pub) zmq_close(b->pub);
    if (b->rep) zmq_close(b->rep);
    if (b->zctx) zmq_ctx_term(b->zctx);
    evtrace_close(&b->trace);
    free(b->slot), free(b->rep_len), free(b->rep_last), free(b->hb_seen), free(b->gen);
    b->push = b->pull = b->pub = b->rep = b->zctx = NULL, b->slot = NULL, b->rep_len = NULL, b->rep_last = NULL;
    b->hb_seen = NULL, b->gen = NULL;
}

void batcher_mark_down(batcher_t *b, const char *why)
{
    pthread_mutex_lock(&b->mu);
    if (!b->down) {
        MP_ERROR("serving pipeline down: %s", why);
        fail_all(b, why);
    }
    pthread_mutex_unlock(&b->mu);
}

void batcher_submit(batcher_t *b, serve_req_t *r)
{
    r->state = REQ_RUNNING, r->nout = 0, r->next = NULL, r->abandoned = 0, r->t_submit = perf_now();
    pthread_mutex_lock(&b->mu);
    if (b->down || b->stop) {
        req_finish(b, r, REQ_FAILED, b->down ? b->down_why : "the server is stopping");
    } else {
        if (b->tail) b->tail->next = r;
        else b->head = r;
        b->tail = r;
        b->queued++;
        pthread_cond_signal(&b->work);
    }
    pthread_mutex_unlock(&b->mu);
}

int batcher_wait(batcher_t *b, serve_req_t *r, int have, int *state_p)
{
    pthread_mutex_lock(&b->mu);
    while (r->state == REQ_RUNNING && r->nout <= have) pthread_cond_wait(&b->done, &b->mu);
    const int n = r->nout;
    *state_p = r->state;
    pthread_mutex_unlock(&b->mu);
    return n;
}

void batcher_release(batcher_t *b, serve_req_t *r)
{
    pthread_mutex_lock(&b->mu);
    const int running = r->state == REQ_RUNNING;
    if (running) r->abandoned = 1; /* req_finish frees it */
    pthread_mutex_unlock(&b->mu);
    if (!running) serve_req_free(r);
}

void batcher_run(batcher_t *b, serve_req_t *r)
{
    int state;
    batcher_submit(b, r);
    batcher_wait(b, r, r->max_tokens, &state);
}
