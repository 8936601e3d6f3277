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
 * `keep` leaves every slot where it is. Results never depend on the policy. */
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
};

/* nslots slots (slot0 the stage's own activations, the others acts_create_part(model, B, biggest,
 * final)) for keys 0..nkeys-1. MP_OK or MP_ERR (arena limit; message printed, nothing left). */
int stash_init(stash_t *st, const stash_policy_t *policy, int nslots, int nkeys, acts_t *slot0, const model_t *model,
               int B, int biggest, int final, arena_t *arena, const wait_cfg_t *wait);
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

/* The policy's hooks (no-ops where the policy has none). */
void stash_after_forward(stash_t *st, int key);
void stash_offload(stash_t *st, int key);
void stash_prefetch(stash_t *st, int key);
void stash_before_backward(stash_t *st, int key);

#endif
