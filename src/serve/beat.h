/* Heartbeats and fencing for stage processes on several hosts (links.h, tcp; ARCHITECTURE.md §10):
 * the front end cannot reap a process on another node, so every stage process sends it a
 * heartbeat (WIRE_HEARTBEAT: role and stage) every few tens of milliseconds, and one that misses
 * them is taken for dead. A primary taken for dead that still lives (a stalled host) must not go on
 * computing beside its promoted standby: it listens to the front end's PUB and exits when that
 * promotes its stage's standby (WIRE_PROMOTE), or, if that message was lost with a connection
 * dropped while its host was cut off, when the front end hears its heartbeat again and tells it
 * that its stage has a newer generation (WIRE_FENCE). A primary whose next stage is promoted sends
 * to the new primary's host slot only (next_gen, wire_retarget). On one machine (every_ms 0) all of
 * this is off: the front end reaps its children instead. */
#ifndef MP_BEAT_H
#define MP_BEAT_H

#include "stage.h"

typedef struct {
    void *hb, *fence;          /* PUSH to the front end's reports; SUB to its confirmations (primary) */
    int stage, role, slot, every_ms;
    uint64_t gen;              /* a primary's generation (stage_cfg_t), in its heartbeats */
    uint64_t next_gen;         /* the next stage's generation as this process last heard it (WIRE_PROMOTE):
                                * the caller sends to its host slot next_gen mod 2 only (wire_retarget) */
    double last;               /* when the last heartbeat left */
    const unsigned char *secret;
} beat_t;

/* Heartbeats from stage s->stage in role (0 primary, 1 standby) every s->heartbeat_ms, and for a
 * primary the fence. MP_OK or MP_ERR (reported). */
int beat_open(beat_t *b, void *zctx, const stage_cfg_t *s, int role);
/* A heartbeat if one is due (dropped when the front end's queue is full). */
void beat_tick(beat_t *b);
/* 1 when the front end has promoted this stage's standby or named a newer generation of this stage
 * (so this primary must stop), else 0; raises next_gen when the next stage's standby was promoted. */
int beat_fenced(beat_t *b);
void beat_close(beat_t *b);

#endif
