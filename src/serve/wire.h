/* The messages between serving processes (ARCHITECTURE.md §10), over ZeroMQ: the front end and the
 * stages form a ring of PUSH/PULL links (front end → stage 0 → … → stage S−1 → front end), each
 * link bound by its receiver on an ipc:// socket in a directory only the job's user can enter, or
 * on TCP with one process per host (links.h). Beside the ring: each primary's state deltas to its
 * standby (PUSH/PULL), the front end's confirmations to the standbys (PUB/SUB), and reports and
 * heartbeats to the front end (PUSH/PULL).
 *
 * ZeroMQ rather than NNG: a PUSH/PULL pipeline with ZMTP heartbeats (ZMQ_HEARTBEAT_*), bounded
 * queues (ZMQ_SNDHWM) and reconnection are built in and kept in Debian 12 (libzmq 4.3.4), and the
 * same sockets speak tcp:// for stages on other nodes; NNG 1.5 has the patterns too but no
 * protocol-level heartbeat (only TCP keep-alive), and fewer users.
 *
 * A message is one frame: the job's secret (WIRE_SECRET_BYTES, compared in constant time; a
 * message without it is dropped), a header, B rows (slot, position, token) and B×width floats
 * (hidden states between stages, logits from the last stage; none from the front end; a delta's
 * cache entries, delta.h). */
#ifndef MP_WIRE_H
#define MP_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#include "check.h"

#define WIRE_SECRET_BYTES 32
#define WIRE_MAGIC 0x4d505356u /* "MPSV" */

/* Reports a failed ZeroMQ call (its text, zmq_strerror, file and line) and jumps to label. */
#define ZMQ_TRY(call, label)                                                                   \
    do {                                                                                       \
        if ((call) < 0) {                                                                      \
            MP_ERROR("ZeroMQ: %s failed: %s", #call, zmq_strerror(zmq_errno()));               \
            goto label;                                                                        \
        }                                                                                      \
    } while (0)
/* The same for a call that returns a pointer (NULL on failure). */
#define ZMQ_TRY_PTR(call, label)                                                               \
    do {                                                                                       \
        if (!(call)) {                                                                         \
            MP_ERROR("ZeroMQ: %s failed: %s", #call, zmq_strerror(zmq_errno()));               \
            goto label;                                                                        \
        }                                                                                      \
    } while (0)

/* WIRE_STEP, WIRE_QUIT: round the ring. WIRE_DELTA: a primary's state delta to its standby (delta.h);
 * WIRE_CONFIRM: the front end's durable watermark to every standby; WIRE_REPORT: a promoted
 * standby's state to the front end (delta.h). With processes on several hosts (links.h, tcp):
 * WIRE_HEARTBEAT from every stage process to the front end (step: its role, 0 primary, 1 standby;
 * aux: its stage; durable: a primary's generation, the promotions of its stage it took over at, 0
 * for the first; a standby's host slot, links.h), WIRE_PROMOTE from the front end to all (aux: the
 * stage whose standby takes over; step: the stage's new generation g, whose primary runs in host
 * slot g mod 2: the stage's first primary in slot 0, and each promotion swaps; the stage's older
 * primary, if it still lives, exits; upstream sends to slot g mod 2 only from then on), WIRE_FENCE
 * from the front end to all (aux: a stage; step: its generation), sent when a primary of an older
 * generation is heard again (a host cut off that came back, its WIRE_PROMOTE lost with the
 * connection): that primary exits. The catch-up (snapshot.h): WIRE_HELLO from a standby that
 * (re)attaches to its primary's ring input (aux: its generation), answered on the delta link by
 * WIRE_SNAP (the snapshot's header: per slot the positions held and the step of the last) and
 * WIRE_CHUNK (rows of keys and values of positions the header counted). */
enum { WIRE_STEP = 1, WIRE_QUIT = 2, WIRE_DELTA = 3, WIRE_CONFIRM = 4, WIRE_REPORT = 5, WIRE_HEARTBEAT = 6,
       WIRE_PROMOTE = 7, WIRE_HELLO = 8, WIRE_SNAP = 9, WIRE_CHUNK = 10, WIRE_FENCE = 11 };

typedef struct {
    uint32_t magic, kind;   /* WIRE_MAGIC; WIRE_* */
    uint64_t step;          /* the front end's step counter (a reply carries its request's) */
    int32_t B, width;       /* rows; floats per row that follow (0: none) */
    uint64_t aux;           /* WIRE_STEP: its era, the front end's epoch when it sent it (the first step after
                             * its last failover; a failover's empty steps: their own number), so a
                             * stage can tell a step from before a failover (wire_step_current);
                             * WIRE_DELTA: the step of the delta sent before it (its chain); WIRE_REPORT:
                             * the reporting stage; WIRE_HELLO, WIRE_SNAP, WIRE_CHUNK: the standby's
                             * generation (snapshot.h); else 0 */
    uint64_t durable;       /* WIRE_STEP and the WIRE_DELTA made from it: the front end's durable watermark
                             * (the last step whose logits had come back) when it sent the step, so a
                             * standby learns it from the deltas that flow anyway; else 0 */
} wire_hdr_t;

typedef struct {
    int32_t slot, pos, token;
} wire_row_t;

/* The secret from its 64 hex digits (MP_OK), or MP_ERR naming what is wrong. */
int wire_secret_parse(const char *hex, unsigned char secret[WIRE_SECRET_BYTES]);
/* A new secret from the system's random source and its hex text (65 bytes). MP_OK or MP_ERR. */
int wire_secret_new(unsigned char secret[WIRE_SECRET_BYTES], char hex[2 * WIRE_SECRET_BYTES + 1]);

/* Sends one message on sock. MP_OK or MP_ERR (reported). */
int wire_send(void *sock, const unsigned char *secret, const wire_hdr_t *h, const wire_row_t *rows, const float *x);

/* The same without waiting: 1 sent, 0 dropped because the peer's queue is full or no peer is
 * connected (a standby may be gone or not started yet: a primary never waits for it), MP_ERR. */
int wire_post(void *sock, const unsigned char *secret, const wire_hdr_t *h, const wire_row_t *rows, const float *x);

/* Waits up to timeout_ms (−1: forever) for one message on sock, into rows (max_rows) and x
 * (max_floats). 1: a message; 0: none in time; MP_ERR: a receive error or a malformed message
 * (reported; a message without the secret is dropped and reported, and the wait goes on). */
int wire_recv(void *sock, const unsigned char *secret, int timeout_ms, wire_hdr_t *h, wire_row_t *rows, int max_rows,
              float *x, size_t max_floats);

/* A message in m (zmq_msg_init_size'd here: the caller sends or closes it) with h and rows, whose
 * B × width floats the caller writes at *x_p (packed in place: no copy of its own). MP_OK or MP_ERR. */
int wire_msg_build(zmq_msg_t *m, const unsigned char *secret, const wire_hdr_t *h, const wire_row_t *rows, float **x_p);

/* Sets the options every serving socket has: no linger at close, heartbeats every second with a
 * 5 s timeout (a dead peer's connection is dropped, not waited on forever), reconnection every
 * 20 ms. MP_OK or MP_ERR. */
int wire_socket_opts(void *sock);
/* A PUSH connected to more than one peer (a stage's primary and its standby, which binds only when
 * promoted): messages go only to completed connections (ZMQ_IMMEDIATE). MP_OK or MP_ERR. */
int wire_immediate(void *sock);
/* Several hosts: a PUSH to a stage's two host slots (ep[0], ep[1]; bit s of *linked: connected to
 * ep[s]) follows the stage's generation gen, whose primary runs in slot gen mod 2: the other slot is
 * disconnected (its primary was replaced; cut off but alive, its connection would look open for
 * seconds and swallow steps, then take them again once reconnected) and the primary's connected if
 * it was not (a standby restarted there was promoted). Failures are reported, not fatal: the
 * failover's empty steps find out whether the ring works (batcher.c). who: for the log. */
void wire_retarget(void *push, char (*ep)[300], int *linked, uint64_t gen, const char *who);
/* What a stage process has seen of the front end's eras (wire_step_current): zero-initialised. */
typedef struct {
    uint64_t era; /* the newest era of the steps run */
    int open;     /* an empty step (the ring's ping, ring_ping in batcher.c) has come */
} wire_era_t;
/* 1 if a stage is to run message h (anything but a step, or a step of the newest era seen, which
 * e->era then holds), 0 for a stale step:
 * - a step of an older era: sent before a failover and delivered after steps sent since (a replaced
 *   primary cut off for less than ZeroMQ's 5 s timeout passes on what it held when its link comes back);
 * - a step with rows before the process's first empty step. The front end opens every process's
 *   life with an empty step round the ring (at start, and after the failover that promoted or
 *   started it); a step with rows that comes before it was sent to the process it replaced and
 *   queued by ZeroMQ for the endpoint, which the new process bound.
 * Running a stale step could write a row into a cache slot the front end has given to a new request,
 * or (into a promoted primary) positions past what it holds, which its snapshot and its standby then
 * take for a sequence it missed the start of; its reply would be dropped anyway. */
int wire_step_current(wire_era_t *e, const wire_hdr_t *h);

#endif
