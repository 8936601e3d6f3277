/* HAMS state deltas (ARCHITECTURE.md §7 serving): after each step a stage primary ships to its
 * standby, without waiting, the keys and values its layers appended for every row of the step;
 * the standby keeps them in order and applies them only once the front end has confirmed the step
 * (its logits came back, so every stage has passed it on), so its cache is always a durable prefix
 * of the primary's. On promotion it reports, per slot, how many positions it holds, and the front
 * end resumes every running request from there instead of replaying its tokens.
 *
 * A delta is one wire message (kind WIRE_DELTA): header step = the front end's step, aux = the step
 * of the delta the primary tried to send before it (0: none yet), so a lost one is a visible gap;
 * B rows (slot, position, token) as the step had them; B × W floats, W = 2 × Σ A over the stage's
 * blocks (per row: block by block, its key row (A) then its value row (A); skip blocks none).
 *
 * Per slot the follower holds len (positions 0..len−1 held, contiguous) and last_step (the step of
 * the last row applied). A row at position p ≤ len sets len = p + 1 (p = 0: a new sequence; p < len:
 * a position fed again after a failover, the same bits); p > len (it missed the sequence's start)
 * leaves the slot holding nothing (len 0) until its next sequence starts.
 *
 * The front end's durable watermark reaches the standby in the deltas themselves: the front end
 * writes it into every step it sends (wire_hdr_t.durable), each primary copies it into that step's
 * delta, and the follower applies what it confirms. So no message flows per step for it; the front
 * end publishes a WIRE_CONFIRM only when it goes idle (the last steps' watermark has no step to ride)
 * and before a failover (the standby drains it before it reports).
 *
 * A primary ships in batches (delta_shipper_t): each step's delta is one frame, handed to ZeroMQ as
 * soon as it is packed, but as a part of a multipart message, which ZeroMQ passes to its I/O thread
 * (and so to the standby, which reads each part as one delta) only when its last part is sent. A
 * batch of k steps thus wakes the primary's I/O thread, the standby's and the standby once, not k
 * times. A batch ends at DELTA_BATCH steps or DELTA_BATCH_MS after its first; the standby lags by
 * that much more, which at a failover means a few more positions fed again, never a wrong one. */
#ifndef MP_DELTA_H
#define MP_DELTA_H

#include <stdint.h>

#include "decoder.h"
#include "wire.h"

/* Floats per delta row for dec's blocks (0: only skip blocks). */
int delta_width(const decoder_t *dec);
/* x (B, delta_width) = the cache entries just written for rows[0..B). */
void delta_pack(const decoder_t *dec, const wire_row_t *rows, int B, float *x);

#define DELTA_BATCH 8
#define DELTA_BATCH_MS 5

typedef struct {
    void *sock;                      /* PUSH to the standby (bound by the primary) */
    zmq_msg_t held;                  /* the last delta packed, not yet sent: it may end the batch */
    int holding, parts;              /* a frame is held; the batch's deltas so far (held included) */
    double t_first;                  /* when the batch's first delta was packed (perf_now) */
    uint64_t chain;                  /* the step of the last delta tried (the next one's aux) */
} delta_shipper_t;

/* A shipper on sock, holding nothing. */
void delta_shipper_init(delta_shipper_t *d, void *sock);
/* Step's delta (its rows, their cache entries just written, its durable watermark) packed in place
 * into a new frame; the frame held before it sent as a batch part. A part ZeroMQ refuses (no
 * standby connected, its queue full) drops the batch begun: the standby sees the gap in the chain.
 * MP_OK or MP_ERR (reported). */
int delta_ship(delta_shipper_t *d, const decoder_t *dec, const unsigned char *secret, const wire_hdr_t *step,
               const wire_row_t *rows);
/* The batch ended (its held frame sent as the last part) when it is due (force: now); *due_ms_p:
 * the milliseconds until the batch still held is due (−1: none held). MP_OK or MP_ERR (a link
 * error, reported). */
int delta_flush(delta_shipper_t *d, int force, int *due_ms_p);
/* Drops what is held. */
void delta_shipper_close(delta_shipper_t *d);

typedef struct {
    int slots, width, T, cap;        /* cap: deltas that may wait for their confirmation */
    int *len;                        /* (S) */
    uint64_t *last_step;             /* (S) */
    int chained;                     /* a delta was received: received holds its step */
    uint64_t received, confirmed, applied; /* last delta received; the front end's watermark; last applied */
    int head, n;                     /* the queue of received, unconfirmed deltas (a ring of cap) */
    wire_hdr_t *qh;                  /* (cap) */
    wire_row_t *qrows;               /* (cap, S) */
    float *qx;                       /* (cap, S, width) */
    uint64_t refused, gaps, deltas_applied;
} delta_follower_t;

/* A follower of dec's stage with room for cap unconfirmed deltas; every slot holds nothing. MP_OK or
 * MP_ERR (out of memory, reported). */
int delta_follower_init(delta_follower_t *f, const decoder_t *dec, int cap);
void delta_follower_free(delta_follower_t *f);

/* A received delta: checked, its watermark (h->durable) applied to what was queued before it, and
 * queued. Refused (MP_ERR, reported, nothing changes) when its width
 * is not this stage's, a row is outside the cache, or its step is not after the last one received
 * (a duplicate or a foreign message). A gap in the chain (aux is not the last step received: a delta
 * was lost) or a full queue is reported, and every slot then holds nothing until its next sequence
 * starts (the deltas received before it are applied as they are confirmed). */
int delta_follower_take(delta_follower_t *f, decoder_t *dec, const wire_hdr_t *h, const wire_row_t *rows,
                        const float *x);
/* The front end's watermark (a WIRE_CONFIRM's step; take applies a delta's durable field the same
 * way): every queued delta of a step ≤ step is applied, in order. */
void delta_follower_confirm(delta_follower_t *f, decoder_t *dec, uint64_t step);

/* The report a promoted standby sends: rows (2 S): for slot s, {s, len, low 31 bits of last_step}
 * and {s, len, the next 31 bits}. report_get reads one back (the front end). */
void delta_report_rows(const delta_follower_t *f, wire_row_t *rows);
/* From report rows (B of them) for S slots and context T: len_p and last_p (S each). MP_OK, or
 * MP_ERR when malformed (reported). */
int delta_report_get(const wire_row_t *rows, int B, int S, int T, int *len_p, uint64_t *last_p);

#endif
