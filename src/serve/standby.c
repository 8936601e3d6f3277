/* A standby following its primary (standby.h). */
#include "standby.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "beat.h"
#include "delta.h"
#include "perf.h"

/* Deltas that may wait for their confirmation: only the steps between this stage and the front
 * end's receipt of their logits, at most one per group of slots (the stages) in flight, so a few
 * are enough; more means the confirmations stopped, and the standby resynchronises. Each holds
 * slots × 2 × Σ A floats (e.g. 8 slots of 12 blocks of width 768: 590 KB). */
#define STANDBY_QUEUE 32
/* A hello not answered by a snapshot within this is sent again (with a new generation): the
 * primary may have answered before this standby's delta link was connected (ZeroMQ drops it). */
#define STANDBY_HELLO_MS 300

/* Set by SIGUSR1 in whichever thread takes it: MPI's and ZeroMQ's threads exist before any mask
 * could be set, so a signal blocked in this thread alone would reach them instead. */
static volatile sig_atomic_t promoted;

static void on_promote(int sig)
{
    (void)sig;
    promoted = 1;
}

int standby_arm(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_promote;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR1, &sa, NULL) != 0) return MP_FAIL("sigaction for SIGUSR1: %s", strerror(errno));
    return MP_OK;
}

typedef struct {
    void *deltas, *confirms, *hello;
    wire_row_t *rows;      /* (max(2S, rows_max)): a delta's or chunk's rows, a header, the report */
    float *x;              /* (rows_max, width) */
    delta_follower_t f;
    uint64_t hellos;       /* hellos sent: the next one's generation */
    double t_hello;        /* when the last left */
    int told;              /* the log says it follows (since the last hello) */
    uint64_t gen;          /* the generation its promotion by message gave (several hosts) */
    uint64_t next_gen;     /* the next stage's generation, from the promotions heard (several hosts) */
} follow_t;

/* Rows a message to a standby holds at most. */
static int follow_rows(const follow_t *w) { return w->f.rows_max > 2 * w->f.slots ? w->f.rows_max : 2 * w->f.slots; }

/* A hello to the primary (its generation: this process and a count, never 0): the follower forgets
 * what it held and waits for the snapshot that answers it. */
static void follow_hello(follow_t *w, const stage_cfg_t *s)
{
    const uint64_t gen = (uint64_t)getpid() << 32 | ++w->hellos;
    const wire_hdr_t h = {WIRE_MAGIC, WIRE_HELLO, 0, 0, 0, gen, 0};
    if (wire_post(w->hello, s->secret, &h, NULL, NULL) < 0) MP_WARN("standby of stage %d: a hello failed", s->stage);
    delta_follower_hello(&w->f, gen);
    w->t_hello = perf_now(), w->told = 0;
}

/* One message from sock if there is one (waiting up to timeout_ms): a delta, a confirmation, a
 * promotion. 1: one taken (or refused: reported, never applied); 0: none; MP_ERR: the front end
 * said quit. */
static int follow_one(follow_t *w, decoder_t *dec, const stage_cfg_t *s, void *sock, int timeout_ms)
{
    wire_hdr_t h;
    const int got = wire_recv(sock, s->secret, timeout_ms, &h, w->rows, follow_rows(w), w->x,
                              (size_t)w->f.rows_max * (size_t)(w->f.width ? w->f.width : 1));
    if (got == MP_ERR) return 1; /* a malformed message (reported) is dropped; the link still works */
    if (got == 0) return 0;
    if (sock == w->deltas && (h.kind == WIRE_DELTA || h.kind == WIRE_SNAP || h.kind == WIRE_CHUNK))
        delta_follower_take(&w->f, dec, &h, w->rows, w->x);
    else if (sock == w->confirms && h.kind == WIRE_PROMOTE && h.aux == (uint64_t)s->stage && h.step % 2 == (uint64_t)s->slot)
        promoted = 1, w->gen = h.step;
    else if (sock == w->confirms && h.kind == WIRE_PROMOTE) { /* another stage's, or this stage's other slot's */
        if (h.aux == (uint64_t)s->stage + 1 && h.step > w->next_gen) w->next_gen = h.step;
    }
    else if (sock == w->confirms && h.kind == WIRE_FENCE) {
    } /* for primaries */
    else if (sock == w->confirms && h.kind == WIRE_QUIT) return MP_ERR; /* the front end stops */
    else if (sock == w->confirms && h.kind == WIRE_CONFIRM && h.B == 0) delta_follower_confirm(&w->f, dec, h.step);
    else w->f.refused++, MP_WARN("standby of stage %d: refused a message of kind %u on its %s link", s->stage, h.kind,
                                  sock == w->deltas ? "delta" : "confirmation");
    if (!w->told && w->f.caught_up && (w->f.deltas_applied || w->f.snap_rows)) {
        /* in the log for operators (and tests): it holds durable state now, its snapshot all applied */
        int n = 0, seqs = 0;
        for (int k = 0; k < w->f.slots; k++) n += delta_follower_held(&w->f, k), seqs += delta_follower_held(&w->f, k) > 0;
        fprintf(stderr, "mindpipe: serving: the standby of stage %d (pid %d) follows its primary from step %llu "
                "(caught up: it holds %d positions of %d sequences, %llu from its snapshot)\n", s->stage, (int)getpid(),
                (unsigned long long)w->f.applied, n, seqs,
                (unsigned long long)w->f.snap_rows);
        w->told = 1;
    }
    return 1;
}

/* Both links until nothing arrives for 5 ms (at most 100 ms): what the front end confirmed before
 * it promoted this standby is applied. */
static void follow_drain(follow_t *w, decoder_t *dec, const stage_cfg_t *s)
{
    for (int spent = 0; spent < 100; spent += 5) {
        const int a = follow_one(w, dec, s, w->deltas, 0), b = follow_one(w, dec, s, w->confirms, 5);
        if (!a && !b) break;
    }
}

/* Blocks until a message arrives (or the heartbeat is due, or, on one machine, 200 ms pass to look
 * for the front end's death), then takes every message queued on both links before blocking again:
 * a batch of deltas (delta.h) wakes it once. SIGUSR1 ends the wait at once (EINTR). */
static int follow_loop(follow_t *w, decoder_t *dec, const stage_cfg_t *s, beat_t *beat)
{
    const pid_t parent = getppid();
    const int wait_ms = s->heartbeat_ms ? s->heartbeat_ms : 200;
    for (;;) {
        beat_tick(beat);
        if (w->f.resync || (w->f.want_gen && perf_now() - w->t_hello > 1e-3 * STANDBY_HELLO_MS)) follow_hello(w, s);
        zmq_pollitem_t it[2] = {{w->deltas, 0, ZMQ_POLLIN, 0}, {w->confirms, 0, ZMQ_POLLIN, 0}};
        const int r = zmq_poll(it, 2, w->f.want_gen && wait_ms > STANDBY_HELLO_MS / 3 ? STANDBY_HELLO_MS / 3 : wait_ms);
        if (r < 0 && zmq_errno() != EINTR) return MP_FAIL("ZeroMQ: zmq_poll failed: %s", zmq_strerror(zmq_errno()));
        /* each link until it is empty (one refused receive each: an empty one costs a poll(2)) */
        while (r > 0 && !promoted && follow_one(w, dec, s, w->deltas, 0) > 0) {
        }
        for (int c = r > 0; c > 0 && !promoted;)
            if ((c = follow_one(w, dec, s, w->confirms, 0)) < 0)
                return MP_FAIL("standby of stage %d: the front end stopped; exiting", s->stage);
        if (promoted) return MP_OK;
        if (!s->heartbeat_ms && r == 0 && getppid() != parent)
            return MP_FAIL("standby of stage %d: the front end (pid %d) is gone; exiting", s->stage, (int)parent);
    }
}

/* The report to the front end; its socket lingers up to 2 s so the message leaves after close. */
static int follow_report(follow_t *w, const stage_cfg_t *s, void *zctx)
{
    void *rep = NULL;
    const int linger = 2000;
    int rc = MP_ERR;
    ZMQ_TRY_PTR(rep = zmq_socket(zctx, ZMQ_PUSH), out);
    if (wire_socket_opts(rep) != MP_OK) goto out;
    ZMQ_TRY(zmq_setsockopt(rep, ZMQ_LINGER, &linger, sizeof linger), out);
    ZMQ_TRY(zmq_connect(rep, s->report_ep), out);
    delta_report_rows(&w->f, w->rows);
    const wire_hdr_t h = {WIRE_MAGIC, WIRE_REPORT, w->f.applied, 2 * s->slots, 0, (uint64_t)s->stage, 0};
    rc = wire_send(rep, s->secret, &h, w->rows, NULL);
out:
    if (rep) zmq_close(rep);
    return rc;
}

int standby_follow(decoder_t *dec, const stage_cfg_t *s, void *zctx, snap_sender_t *sn, uint64_t *gen_p,
                   uint64_t *next_gen_p)
{
    follow_t w = {0};
    int rc = MP_ERR;
    if (delta_follower_init(&w.f, dec, STANDBY_QUEUE) != MP_OK) return MP_ERR;
    w.rows = malloc((size_t)follow_rows(&w) * sizeof *w.rows);
    w.x = malloc((size_t)w.f.rows_max * (size_t)(w.f.width ? w.f.width : 1) * sizeof(float));
    if (!w.rows || !w.x) {
        MP_ERROR("standby of stage %d: out of memory", s->stage);
        goto out;
    }
    ZMQ_TRY_PTR(w.deltas = zmq_socket(zctx, ZMQ_PULL), out);
    ZMQ_TRY_PTR(w.confirms = zmq_socket(zctx, ZMQ_SUB), out);
    ZMQ_TRY_PTR(w.hello = zmq_socket(zctx, ZMQ_PUSH), out);
    if (wire_socket_opts(w.deltas) != MP_OK || wire_socket_opts(w.confirms) != MP_OK || wire_socket_opts(w.hello) != MP_OK)
        goto out;
    ZMQ_TRY(zmq_setsockopt(w.confirms, ZMQ_SUBSCRIBE, "", 0), out);
    ZMQ_TRY(zmq_connect(w.deltas, s->delta_ep), out);
    ZMQ_TRY(zmq_connect(w.confirms, s->confirm_ep), out);
    ZMQ_TRY(zmq_connect(w.hello, s->hello_ep), out);
    follow_hello(&w, s);
    beat_t beat;
    if (beat_open(&beat, zctx, s, 1) != MP_OK) goto out;
    rc = follow_loop(&w, dec, s, &beat);
    beat_close(&beat);
    if (rc != MP_OK) goto out;
    follow_drain(&w, dec, s);
    MP_WARN("serving: the standby of stage %d resumes from its deltas at durable step %llu (%llu deltas applied, %llu "
            "positions from snapshots, %llu refused, %llu gaps)", s->stage, (unsigned long long)w.f.applied,
            (unsigned long long)w.f.deltas_applied, (unsigned long long)w.f.snap_rows, (unsigned long long)w.f.refused,
            (unsigned long long)w.f.gaps);
    rc = follow_report(&w, s, zctx);
    *gen_p = w.gen, *next_gen_p = w.next_gen;
    if (rc == MP_OK && sn) { /* what it holds is what the next standby's snapshot gets */
        int *held = malloc((size_t)s->slots * sizeof *held);
        if (!held) rc = MP_FAIL("standby of stage %d: out of memory", s->stage);
        for (int k = 0; held && k < s->slots; k++) held[k] = delta_follower_held(&w.f, k);
        if (held) snap_seed(sn, held, w.f.last_step);
        free(held);
    }
out:
    if (w.hello) zmq_close(w.hello); /* before the promoted process binds the input it connected to */
    if (w.deltas) zmq_close(w.deltas);
    if (w.confirms) zmq_close(w.confirms);
    free(w.rows), free(w.x);
    delta_follower_free(&w.f);
    return rc;
}
