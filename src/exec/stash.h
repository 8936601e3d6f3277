/* The stash: the activations a micro-batch's forward saves for its backward, one slot per
 * (micro-batch key, chunk) in flight, and the memory policy that decides where a saved slot lives
 * between the two (ARCHITECTURE.md, "Memory policies").
 *
 * Slots: as many as the most forwards the stage's lists ever have awaiting their backward
 * (sched_list_peak). Slot 0 is the stage's own activations (every block it holds); the others are
 * sized for its largest chunk, with the head where the stage has it. A forward takes a free slot
 * (stash_take) and its backward gives it back (stash_give). A slot may still be read by an
 * activation send in flight (its reader request): taking it waits for that send.
 *
 * The policy is a table of hooks the executor calls at fixed points of every micro-batch:
 *   after_forward    the forward of key has filled its slot (the policy may move it away)
 *   offload          OP_OFFLOAD(key): start moving the slot off the device
 *   prefetch         OP_PREFETCH(key): start bringing it back
 *   before_backward  the backward of key reads the slot next: it must be whole and in place
 * `keep` leaves every slot where it is. `offload` moves each slot's movable region (the blocks
 * under MODE_OFFLOAD, model.h) to host memory at OFFLOAD and back at PREFETCH, on the backend's
 * copy engine (be_offload_*), waiting only where the backward first reads it. Results never depend
 * on the policy.
 *
 * The movable regions live in a pool of device buffers, fewer than the slots: as many as the
 * lists ever have on the device at once (sched_list_device_peak). A key takes one for its forward
 * and gives it up at OFFLOAD (the buffer is reusable once that copy is done: a forward that
 * takes it waits for the copy; a prefetch into it is ordered after the copy by the copy engine),
 * and takes one again at PREFETCH until its backward ends. On emu a buffer whose stash is on the
 * host is fenced (be_offload_fence): a kernel that reads an offloaded stash faults. */
#ifndef MP_STASH_H
#define MP_STASH_H

#include <mpi.h>

#include "model.h"
#include "wait.h"

typedef struct stash_s stash_t;

typedef struct {
    const char *name;
    void (*after_forward)(stash_t *st, int key, acts_t *a);
    void (*offload)(stash_t *st, int key, acts_t *a);
    void (*prefetch)(stash_t *st, int key, acts_t *a);
    void (*before_backward)(stash_t *st, int key, acts_t *a);
} stash_policy_t;

extern const stash_policy_t stash_policy_keep;
extern const stash_policy_t stash_policy_offload;

/* What moved, per step (the caller resets it): bytes each way, and the seconds a backward waited
 * for its prefetch or a forward for a buffer's offload (the exposed transfer wait; cpu and emu,
 * where the host waits; on cuda the compute stream waits and this stays 0). */
typedef struct {
    double offloaded, prefetched;  /* to and from host memory */
    double evicted, accepted;      /* balance: sent to the acceptor; held for an evictor */
    double wait_s;
} stash_moved_t;

struct stash_s {
    const stash_policy_t *policy;
    acts_t *slots;
    int nslots, nfree, *free_slots;
    int peak;                 /* most slots in use at once so far (metrics: stash_peak) */
    MPI_Request *reader;      /* per slot: the activation send still reading it */
    int *slot_of;             /* per key: its slot, -1 none */
    int nkeys;
    arena_t *arena;
    const wait_cfg_t *wait;
    /* the movable regions (none when mov_bytes is 0) */
    backend_t *be;
    size_t mov_bytes;         /* one region, rounded to whole pages (emu fences pages) */
    int npool, pool_used, pool_peak;
    float **pool;             /* page-aligned device buffers */
    void **pool_alloc;        /* the arena allocations behind them */
    long *pool_ticket;        /* the offload copy still reading the buffer (0: none) */
    int *pool_key;            /* the key holding it, -1 free */
    float **host;             /* per slot: the host copy of its movable region */
    int *pool_of;             /* per key: its buffer, -1 none */
    long *pref;               /* per key: its prefetch's ticket, 0 none */
    stash_moved_t moved;
};

/* nslots slots (slot0 the stage's own activations, the others acts_create_part(model, B, biggest,
 * final)) for keys 0..nkeys-1. MP_OK or MP_ERR (arena limit; message printed, nothing left). */
int stash_init(stash_t *st, const stash_policy_t *policy, int nslots, int nkeys, acts_t *slot0, const model_t *model,
               int B, int biggest, int final, arena_t *arena, const wait_cfg_t *wait);
/* The movable regions: npool device buffers and a host copy per slot. MP_OK or MP_ERR (arena limit
 * or host memory; message printed). No-op when the slots have no movable region. */
int stash_init_movable(stash_t *st, backend_t *be, int npool);
/* The evaluation's activations a with a movable buffer bound for a forward-only pass, and given
 * back after it; no-ops without movable regions. Only on a drained pipeline. */
void stash_bind_eval(stash_t *st, acts_t *a);
void stash_unbind_eval(stash_t *st, acts_t *a);
void stash_free(stash_t *st);

/* A free slot for key (its pending reader waited for). Aborts when none is free: the schedule
 * needs more slots than its lists' peak, a bug. */
acts_t *stash_take(stash_t *st, int key);
/* key's slot, or NULL when it has none. */
acts_t *stash_get(const stash_t *st, int key);
/* Where the send that reads key's slot keeps its request. */
MPI_Request *stash_reader(stash_t *st, int key);
void stash_give(stash_t *st, int key);
/* Waits for every slot's reader (a flushed pipeline). */
void stash_wait_readers(stash_t *st, const char *what);

/* The movable buffer pool, for the balance transfers (balance.h): a free buffer for key (waiting,
 * when for_write, for whatever still reads it), and key's buffer given back. */
int stash_pool_take(stash_t *st, int key, int for_write);
void stash_pool_release(stash_t *st, int key);

/* Device bytes the stash holds for micro-batches in flight now: their slots and movable buffers
 * (the timeline's memory graph). */
double stash_bytes_in_use(const stash_t *st);
/* Before key's forward: its movable region gets a device buffer (a no-op without one). */
void stash_before_forward(stash_t *st, int key);
/* The policy's hooks (no-ops where the policy has none). */
void stash_after_forward(stash_t *st, int key);
void stash_offload(stash_t *st, int key);
void stash_prefetch(stash_t *st, int key);
void stash_before_backward(stash_t *st, int key);

#endif
