/* HAMS state deltas (ARCHITECTURE.md §10): after each step a stage primary ships to its
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
/* The reverse: the cache entries of rows[0..B) = x (B, delta_width). */
void delta_unpack(decoder_t *dec, const wire_row_t *rows, int B, const float *x);
/* Rows a snapshot's chunk holds at most (snapshot.h): as many as fit DELTA_CHUNK_BYTES, at least 1,
 * at most every position of every slot. The primary and its standby compute the same. */
#define DELTA_CHUNK_BYTES 65536
int delta_chunk_rows(const decoder_t *dec);

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
/* A new frame (header h, rows; its h->B × h->width floats for the caller to write at *x_p) added to
 * the batch; the frame held before it sent as a batch part (dropped with the batch begun when
 * ZeroMQ refuses it, as below). The chain is the caller's. MP_OK or MP_ERR (reported). */
int delta_ship_frame(delta_shipper_t *d, const unsigned char *secret, const wire_hdr_t *h, const wire_row_t *rows,
                     float **x_p);
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

/* The catch-up (snapshot.h): a standby that (re)attaches sends a hello (WIRE_HELLO, its generation)
 * and waits (want_gen), dropping deltas, for the answer on the delta link: the snapshot's header
 * (WIRE_SNAP: per slot the positions n its primary holds and the step of the last, after the
 * delta of step `at`, its chain) and then chunks (WIRE_CHUNK: rows of those positions, slot by slot,
 * in order) between the deltas that follow. The header sets each slot's sequence (len = n) with
 * positions [miss_lo, miss_hi) = [0, n) owed by the chunks; the chunks queue with the deltas, stamped
 * with the snapshot's newest row step (stamp), and apply in order once it is confirmed, so the
 * durable-prefix rule holds for them too. A delta row at position p of a slot still owed rows takes
 * positions ≥ p from the deltas (miss_hi = p; p = 0, a new sequence, owes nothing), exactly as the
 * primary stops sending them. A slot holds (held) miss_lo positions while it is owed any, else len.
 * A chunk that skips a position (one was lost) leaves its slot the prefix before it and asks for a
 * new snapshot (resync), as a gap in the deltas' chain and a full queue do. */
typedef struct {
    int slots, width, T, cap;        /* cap: deltas that may wait for their confirmation */
    int rows_max;                    /* rows a queued message holds at most: max(S, delta_chunk_rows) */
    int *len;                        /* (S) */
    uint64_t *last_step;             /* (S) */
    int *miss_lo, *miss_hi;          /* (S) positions a snapshot still owes */
    int chained;                     /* a delta was received: received holds its step */
    uint64_t received, confirmed, applied; /* last delta received; the front end's watermark; last applied */
    int head, n;                     /* the queue of received, unconfirmed deltas (a ring of cap) */
    wire_hdr_t *qh;                  /* (cap) */
    wire_row_t *qrows;               /* (cap, rows_max) */
    float *qx;                       /* (cap, rows_max, width) */
    uint64_t want_gen;               /* the hello waiting for its snapshot (0: none) */
    uint64_t snap_gen, snap_at, snap_stamp; /* the snapshot taken: its hello, its chain step, its newest row */
    int snap_open, caught_up, resync; /* a header taken; its rows all applied; a new snapshot is wanted */
    uint64_t refused, gaps, deltas_applied, snap_rows, ignored;
} delta_follower_t;

/* A follower of dec's stage with room for cap unconfirmed deltas; every slot holds nothing. MP_OK or
 * MP_ERR (out of memory, reported). */
int delta_follower_init(delta_follower_t *f, const decoder_t *dec, int cap);
void delta_follower_free(delta_follower_t *f);

/* A received delta, snapshot header or chunk: checked, its watermark (h->durable) applied to what
 * was queued before it, and queued. Refused (MP_ERR, reported, nothing changes) when its width is
 * not this stage's, a row is outside the cache, a delta's step is not after the last one received (a
 * duplicate or a foreign message), or a header is malformed. Ignored (MP_OK, counted): deltas while
 * a hello waits for its snapshot, a header answering another hello than the last, chunks of another
 * snapshot. A gap in the chain (aux is not the last step received: a delta was lost) or a full queue
 * is reported, every slot then holds nothing, and a new snapshot is wanted (resync). */
int delta_follower_take(delta_follower_t *f, decoder_t *dec, const wire_hdr_t *h, const wire_row_t *rows,
                        const float *x);
/* The front end's watermark (a WIRE_CONFIRM's step; take applies a delta's durable field the same
 * way): every queued delta or chunk of a step ≤ step is applied, in order. */
void delta_follower_confirm(delta_follower_t *f, decoder_t *dec, uint64_t step);
/* A hello of generation gen was sent: the follower forgets everything and waits for its snapshot. */
void delta_follower_hello(delta_follower_t *f, uint64_t gen);
/* The positions slot s holds contiguously from 0, durable (what a report says). */
int delta_follower_held(const delta_follower_t *f, int s);

/* Per slot s positions len[s] and the step last[s] of the last, as rows (2 S): {s, len, low 31 bits
 * of last} and {s, len, the next 31 bits} (a promoted standby's report, a snapshot's header). */
void delta_state_rows(int S, const int *len, const uint64_t *last, wire_row_t *rows);
/* The report a promoted standby sends: delta_state_rows of what it holds. */
void delta_report_rows(const delta_follower_t *f, wire_row_t *rows);
/* From report rows (B of them) for S slots and context T: len_p and last_p (S each). MP_OK, or
 * MP_ERR when malformed (reported). */
int delta_report_get(const wire_row_t *rows, int B, int S, int T, int *len_p, uint64_t *last_p);

#endif
