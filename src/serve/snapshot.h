/* A primary's side of a standby's catch-up (ARCHITECTURE.md §10, delta.h): a standby that
 * attaches to a running primary (at start, as the replacement after a failover, or after it lost
 * a delta) says hello (WIRE_HELLO, its generation) on the primary's ring input, and the primary
 * answers on the delta link with a snapshot of every sequence it holds, then goes on with its
 * deltas as before: no gap, since the snapshot is taken after the delta of step `at` and the next
 * delta names `at` as its chain; no double application, since the standby applies both in the order
 * sent and only once the front end has confirmed the snapshot's newest row.
 *
 * The snapshot's header (WIRE_SNAP, width 0) says per slot how many positions n the primary holds
 * contiguously from 0 and the step of the last (delta_state_rows). The rows of those positions
 * follow in chunks (WIRE_CHUNK: slot by slot, positions in order, delta_chunk_rows at most), read
 * from the live cache: a sequence's rows never change while it lives (fed again after a failover
 * they are the same bits), so a chunk sent steps later still holds the snapshot's state. A row
 * processed at position p of a slot ends what the snapshot owes of it at p (p = 0: a new sequence
 * overwrites the cache, so none), before any chunk is read; the standby draws the same line when
 * it applies that row's delta. One chunk goes per step, after the step's send and delta, or per
 * millisecond without steps: a snapshot of any size costs a step at most one chunk's copy
 * (DELTA_CHUNK_BYTES), not a stall.
 *
 * The primary tracks per slot what it holds (len, and last: the step of row len − 1) from the rows
 * it processes; a promoted standby starts from what it held (snap_seed). */
#ifndef MP_SNAPSHOT_H
#define MP_SNAPSHOT_H

#include <stdint.h>

#include "delta.h"

typedef struct {
    int slots, T, chunk_rows;
    int *len;                 /* (S) positions of the slot's sequence held contiguously from 0 */
    uint64_t *last;           /* (S) the step of its row len − 1 */
    int active;               /* a snapshot is being sent */
    uint64_t gen, at;         /* the hello it answers; the chain step it was taken after */
    int *next, *end;          /* (S) positions still to send: [next, end) */
    int cursor;               /* the slot being sent */
    wire_row_t *rows;         /* (max(2S, chunk_rows)) */
    uint64_t snapshots, rows_sent;
} snap_sender_t;

/* A sender for dec's stage, every slot holding nothing. MP_OK or MP_ERR (out of memory, reported). */
int snap_init(snap_sender_t *sn, const decoder_t *dec);
void snap_free(snap_sender_t *sn);
/* What a promoted standby held (len, last: S each). */
void snap_seed(snap_sender_t *sn, const int *len, const uint64_t *last);
/* A step's rows (B of them), just computed, at step: what each slot holds, and where the snapshot
 * being sent stops owing positions. */
void snap_track(snap_sender_t *sn, const wire_row_t *rows, int B, uint64_t step);
/* A hello of generation gen: a new snapshot (any one being sent is dropped), its header shipped now
 * into d's batch after the delta last shipped; durable: the front end's watermark the last step
 * carried. MP_OK or MP_ERR (a link error, reported). */
int snap_begin(snap_sender_t *sn, delta_shipper_t *d, const unsigned char *secret, uint64_t gen, uint64_t durable);
/* 1 while chunks are left to send. */
int snap_pending(const snap_sender_t *sn);
/* The next chunk (up to chunk_rows rows of the slots in order) packed into d's batch. MP_OK or
 * MP_ERR (a link error, reported). */
int snap_ship_chunk(snap_sender_t *sn, delta_shipper_t *d, const decoder_t *dec, const unsigned char *secret,
                    uint64_t durable);

#endif
