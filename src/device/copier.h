/* The copy engine of the cpu and emu backends (memory.policy = offload): one thread that copies
 * between "device" and host memory beside compute, in the order copies are started, as a GPU's
 * copy engine runs the offload stream. A copy's ticket says when it is done; waiting blocks the
 * caller on a condition variable (the core is yielded: ranks are oversubscribed here).
 *
 * Ranks of a node share the host link: with a link lock (copier_set_link), the thread holds the
 * lock of a copy's direction for the duration of the copy, so no two ranks of the node move data
 * in the same direction at once while one may swap out as another swaps in (node-coordinated
 * swapping, ARCHITECTURE.md §6). */
#ifndef MP_COPIER_H
#define MP_COPIER_H

#include <stddef.h>

typedef struct copier_s copier_t;

/* The node's link: lock(ctx, dir) / unlock(ctx, dir) around a copy in direction dir (0 device to
 * host, 1 host to device). */
typedef struct {
    void (*lock)(void *ctx, int dir);
    void (*unlock)(void *ctx, int dir);
    void *ctx;
} copier_link_t;

/* A copier with its thread running; NULL (message printed) when the thread cannot start. */
copier_t *copier_create(void);
/* Waits for every copy started, stops the thread and frees the copier. NULL: nothing. */
void copier_destroy(copier_t *c);
void copier_set_link(copier_t *c, const copier_link_t *link);

/* Starts dst (bytes) = src in direction dir after the copies started before; returns its ticket
 * (increasing from 1). The memory must stay valid until the copy is waited for. */
long copier_start(copier_t *c, void *dst, const void *src, size_t bytes, int dir);
/* Returns when the copy of `ticket` (and every one before it) is done; the seconds spent waiting
 * are added to *waited when waited is not NULL. */
void copier_wait(copier_t *c, long ticket, double *waited);
/* Bytes copied so far in each direction and seconds the thread spent copying (the trace's spans
 * come from copier_take_spans). */
void copier_totals(copier_t *c, size_t bytes[2], double *busy);

/* The copies finished since the last call, for the trace: up to max (direction, start, end) in
 * perf_now() seconds. Returns how many were written. */
int copier_take_spans(copier_t *c, int *dir, double *t0, double *t1, int max);

#endif
