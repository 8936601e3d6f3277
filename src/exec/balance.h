/* BPipe's activation balancing between pipeline stages (ARCHITECTURE.md §6, memory.policy =
 * balance): under 1F1B stage s keeps up to pp − s micro-batches stashed, the last stage one. An
 * evictor (s < pp/2) sends the stashes its list marks (EVICT) to its acceptor pp − 1 − s, which
 * holds them in device buffers of its arena (ACCEPT) and sends them back (RETURN) before the
 * evictor's backward needs them (RECLAIM). Every transfer is non-blocking MPI on the pipeline
 * communicator, with tags of its own; a receive is waited for only where its data is first read
 * (the acceptor's RETURN, the evictor's backward). What moves is the stash's movable region (the
 * blocks under MODE_BALANCE).
 *
 * Every send leaves from host memory the sender owns: the evictor copies the stash to the slot's
 * host copy and frees its device buffer at EVICT; the acceptor copies a guest to a host buffer and
 * frees the guest at RETURN. So a device buffer never waits for the peer to post its receive, a
 * moment no single list knows, and the simulator's sends that never block are the executor's: a
 * guest's device buffer lives from ACCEPT to RETURN (sched_balance_guest_peak). The acceptor holds
 * its guests in its arena on the cpu and emu backends; on cuda MPI moves host memory, so there the
 * guests stay in the pinned host buffers (device-to-device guests need NCCL transfers: not built).
 *
 * Results never depend on it: the bytes that come back are the bytes that left. */
#ifndef MP_BALANCE_H
#define MP_BALANCE_H

#include <mpi.h>

#include "stash.h"

typedef enum { BAL_NONE, BAL_EVICTOR, BAL_ACCEPTOR } bal_role_t;

typedef struct {
    bal_role_t role;
    int peer;                 /* the partner stage */
    MPI_Comm comm;
    int tag0;                 /* first tag of the balance messages (above the pipeline's own) */
    size_t bytes;             /* one evicted region: the evictor's movable bytes */
    int nkeys;
    /* evictor */
    MPI_Request *reclaim_req; /* per key: its stash on the way back */
    int *staged;              /* ... it lands in the slot's host copy first (off the cpu backend) */
    MPI_Request *evict_req;   /* per slot: the send away from the slot's host copy */
    /* acceptor: device guests (cpu, emu), from ACCEPT to RETURN */
    int nguest;
    float **guest;
    void **guest_alloc;
    int *guest_key;           /* per guest: its key, -1 free */
    /* ... and one host buffer per ACCEPT of a step, in order: the send back leaves from it (on
     * cuda the guest itself lives there) */
    int naccept, next;
    void **hbuf;
    int *host_of;             /* per key: its host buffer, -1 none */
    int *guest_of;            /* per key: its device guest, -1 none */
    MPI_Request *recv_req, *send_req; /* per host buffer */
    size_t host_bytes;        /* host memory held for guests (metrics) */
    stash_t *st;
    const wait_cfg_t *wait;
} bal_t;

/* The partner's roles and buffers: on an acceptor nguest device guests (its list's guest peak) and
 * naccept host buffers (its list's ACCEPTs). Exchanges the region size with the partner (both must
 * call it). MP_OK or MP_ERR. */
int bal_init(bal_t *b, stash_t *st, MPI_Comm pp_comm, int stage, int pp, int nguest, int naccept, int tag0,
             const wait_cfg_t *wait);
void bal_free(bal_t *b);
/* Arena bytes bal_init allocates on a cpu acceptor for nguest guests of `bytes` each (the memory
 * plan; off the cpu backend guests are host memory and this is not counted). */
size_t bal_guest_bytes(size_t bytes, int nguest);

void bal_evict(bal_t *b, int key);     /* EVICT: the stash of key leaves for the acceptor */
void bal_reclaim(bal_t *b, int key);   /* RECLAIM: its receive back is posted */
void bal_ready(bal_t *b, int key);     /* before key's backward: it is back */
void bal_accept(bal_t *b, int key);    /* ACCEPT: a guest buffer receives it */
void bal_return(bal_t *b, int key);    /* RETURN: it goes back */
/* Device bytes the acceptor's guests hold now (the timeline's stash counter). */
double bal_guest_bytes_in_use(const bal_t *b);
/* The end of a step: every balance message of this stage done. */
void bal_drain(bal_t *b);

#endif
