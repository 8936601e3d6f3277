/* Every wait in MindPipe goes through here (ARCHITECTURE.md §2). MPICH busy-polls: on a node with more
 * ranks than cores a blocking call starves the rank that would satisfy it (135 ms per small
 * all-reduce at 16 ranks on 2 cores, measured). So collectives are started non-blocking and waited
 * on by polling MPI_Testall, yielding the core between polls when parallel.wait = yield (auto:
 * when ranks on the node exceed its cores). A wait longer than parallel.timeout is a dead or hung
 * peer: the job is aborted with a message naming the rank and what it waited for. */
#ifndef MP_WAIT_H
#define MP_WAIT_H

#include <mpi.h>

#include "deck.h"

typedef struct {
    int yield;          /* sched_yield between polls */
    double timeout;     /* seconds; 0 = none */
    const char *who;    /* how the timeout's status line names this rank (NULL: "a rank") */
    const char *status; /* RUN/exit_status, written "1 aborted: ..." at a timeout (NULL or "": none) */
    /* recovery.log: called at a timeout instead of the abort, with its message (a survivor writes its
     * state and exits; if it returns, the abort goes on). NULL: none. */
    void (*lost)(void *ctx, const char *msg);
    void *lost_ctx;
    /* ... and while stopping() says a stop was requested, a wait is a lost peer's after stop_timeout
     * seconds (< parallel.timeout): under -disable-auto-cleanup Hydra signals the survivors of a dead
     * rank (SIGUSR1, a stop request), whose stop must end in a snapshot before train.stop_grace
     * ends it without one. NULL: none. */
    int (*stopping)(void);
    double stop_timeout;
} wait_cfg_t;

/* Whether a node with node_ranks ranks has more of them than cores (MPICH then spins against itself). */
int wait_node_oversubscribed(int node_ranks);

/* From parallel.wait, parallel.timeout and the ranks/cores of this node (auto: yield when the node
 * is oversubscribed); who and status unset. */
void wait_cfg_init(wait_cfg_t *w, deck_wait_t mode, double timeout, int node_ranks);

/* Waits for n requests of one collective over comm; `what` names it in the timeout message, which also
 * names comm's other ranks (by world rank: "its peer rank 1", or "one or more of its peers (ranks 1, 2
 * and 3)"). On timeout, w->lost (if set) is called; then w->status (if set) gets "1 aborted: WHO:
 * MESSAGE" and the job is aborted. */
void wait_all_over(const wait_cfg_t *w, int n, MPI_Request *reqs, MPI_Comm comm, const char *what);

/* Polls ready(ctx) until it returns 1, as wait_all_over polls MPI (yielding the core, the same
 * deadline, status line and abort): 0 is not yet, -1 a failure whose reason ready wrote into why
 * (n bytes), which ends the job naming `what` and it. Before either abort give_up(ctx) runs when
 * set (the cuda backend aborts its NCCL communicators there, so that no kernel waits on a peer).
 * For waits that are not MPI requests: a device stream under NCCL collectives. */
void wait_poll(const wait_cfg_t *w, int (*ready)(void *ctx, char *why, size_t n), void (*give_up)(void *ctx),
               void *ctx, const char *what);
/* wait_all_over for point-to-point requests (or several communicators'): `what` names the peer. */
void wait_all(const wait_cfg_t *w, int n, MPI_Request *reqs, const char *what);

/* In-place all-reduce with op of count elements of type over comm, through wait_all. */
void wait_allreduce(const wait_cfg_t *w, void *buf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                    const char *what);

/* In-place all-reduce (sum) of count elements of type over comm, through wait_all. */
void wait_allreduce_sum(const wait_cfg_t *w, void *buf, int count, MPI_Datatype type, MPI_Comm comm,
                        const char *what);

/* Barrier through wait_all. */
void wait_barrier(const wait_cfg_t *w, MPI_Comm comm, const char *what);

#endif
