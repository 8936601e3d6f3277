/* The NCCL stand-in's core: communicators, calls, their matching between ranks, and the transfers,
 * carried over MPI by one progress thread per process. No CUDA here: standin_nccl.c puts NCCL's ABI
 * and stream semantics on top (device → pinned staging → this core → staging → device), and
 * validation/nccl_standin/standin_test.c drives the core with host buffers on our GPU-less machines.
 *
 * Why: NCCL refuses two ranks of one communicator on one GPU, and a lent GPU machine has one, so
 * NCCL paths with several ranks cannot run anywhere we can reach. The stand-in behaves like NCCL
 * where it matters and is stricter where NCCL would hang (docs/GPU.md "The NCCL stand-in").
 *
 * ---- What a call does ----
 * A call is handed off (si_handoff) when its stream reaches it; on the CUDA side that is a host
 * function enqueued after the copy of its input to pinned memory, followed on the stream by a wait
 * for the call's completion flag and the copy of its result back. The progress thread then:
 *   1. exchanges the call's descriptor (si_call_t) with every rank it involves: for a collective
 *      every other rank of the communicator (the k-th collective of each rank meets the k-th of
 *      every other), for a send or receive the peer (a group's, or a lone call's, point-to-point
 *      calls with one peer form one "unit"; the k-th unit of A with B meets the k-th unit of B with
 *      A, mirrored: A's sends to B are B's receives from A). MPI's non-overtaking rule on one tag of
 *      the communicator's own MPI communicator gives the k-th with the k-th.
 *   2. compares them: kind, count, datatype, reduction, root, the group's shape, and the order in
 *      which other communicators' calls were in flight. Any difference ends the run (si_fail):
 *      a message naming this rank, the communicator, the call number and both sides' calls.
 *   3. posts the data transfers (non-blocking) in call order per communicator, and reduces what it
 *      received in rank order 0..n-1 (so every rank gets the same bits, whatever the arrival order).
 *   4. marks the call done (its callback sets the stream's flag).
 * Every phase runs under a deadline (NCCL_STANDIN_TIMEOUT seconds, default 120): past it, the
 * message names what was awaited and from which ranks, and the last call seen from each of them.
 *
 * ---- Why it cannot deadlock where NCCL would not ----
 * It adds no dependency NCCL does not have. (a) A call starts when its stream reaches it, as an
 * NCCL kernel does, and its stream passes it only when its transfer is complete, as an NCCL kernel
 * holds its stream. (b) The progress thread never blocks on one call: every handed-off call of
 * every communicator progresses at once through MPI_Test, so calls on different streams and
 * communicators proceed independently, as NCCL kernels do when the GPU has room for all of them.
 * (c) Within a communicator data transfers are posted in call order, as NCCL's proxy runs a
 * communicator's operations in issue order. (d) Host functions only append to a queue under a
 * mutex; they never wait, so one stream's hand-off never delays another's. (e) The host thread
 * never waits for a call, as with NCCL (only for communicator creation and destruction, which are
 * blocking in NCCL too). What remains is a hang NCCL has and the stand-in does not: two
 * communicators' kernels in flight on one device, started in different orders on different ranks
 * (NCCL's kernels can then wait for each other's SMs); the stand-in reports that order instead of
 * completing it (step 2). It needs MPI_THREAD_MULTIPLE: the progress thread calls MPI beside the
 * application's own thread.
 *
 * Stricter than NCCL (each ends the run with a message, never a hang):
 *   - every rank issues the same sequence of collectives (kind, count, datatype, op, root);
 *   - a send meets a receive of the same count and type, a group meets a group of the same shape;
 *   - a communicator's calls handed off from two streams while one is in flight;
 *   - two communicators in flight in different orders on two ranks that share both;
 *   - a call never met within the deadline. */
#ifndef MP_NCCL_STANDIN_H
#define MP_NCCL_STANDIN_H

#include <stddef.h>
#include <stdint.h>

/* Kinds, datatypes and reductions numbered as NCCL numbers them (nccl.h), so the ABI layer passes
 * them through. */
enum { SI_ALLREDUCE, SI_REDUCE_SCATTER, SI_ALLGATHER, SI_BROADCAST, SI_REDUCE, SI_SEND, SI_RECV, SI_KINDS };
enum { SI_INT8, SI_UINT8, SI_INT32, SI_UINT32, SI_INT64, SI_UINT64, SI_FLOAT16, SI_FLOAT32, SI_FLOAT64,
       SI_BFLOAT16, SI_DTYPES };
enum { SI_SUM, SI_PROD, SI_MAX, SI_MIN, SI_AVG, SI_OPS };
/* Errors as NCCL's ncclResult_t numbers them. */
enum { SI_OK = 0, SI_ERR_SYSTEM = 2, SI_ERR_INTERNAL = 3, SI_ERR_ARG = 4, SI_ERR_USAGE = 5, SI_ERR_REMOTE = 6 };

enum { SI_ID_BYTES = 128, SI_MAX_SEEN = 16 };

/* A call's descriptor, as exchanged between ranks (plain bytes: every rank runs the same binary). */
typedef struct {
    int32_t kind, dtype, op, root;  /* root: the root (broadcast, reduce) or the peer (send, recv) */
    uint64_t count;                 /* elements: per rank's input, as NCCL counts them */
    int64_t call_no;                /* this communicator's call number on this rank, from 1 */
    int32_t group_n, group_i;       /* the group's size and this call's place in it (1, 0 alone) */
    int32_t unit_sends, unit_recvs; /* point-to-point: the unit's sends to and receives from the peer */
    uint64_t unit_send_elems, unit_recv_elems;
    int32_t rank, nseen;            /* the sender's rank in the communicator; entries in seen[] */
    /* every other communicator of this process at hand-off: its key, calls handed off, calls done */
    struct { uint64_t key; int64_t handed, done; } seen[SI_MAX_SEEN];
} si_call_t;

typedef struct si_comm si_comm_t;
typedef struct si_op si_op_t;

/* Called by the progress thread when an op is done (or, after si_comm_abort, dropped). */
typedef void (*si_done_fn)(si_op_t *op, void *arg);

/* One call in flight. The caller fills kind .. done_arg and the buffers; the core the rest. in:
 * this rank's input (allreduce, reduce, reduce_scatter: count·ranks for reduce_scatter, else count;
 * allgather, broadcast at the root, send: count); out: the result (allreduce, broadcast, reduce at
 * the root: count; reduce_scatter: count; allgather: count·ranks; recv: count). Host memory, kept
 * untouched until done. */
struct si_op {
    si_comm_t *comm;
    int kind, dtype, op, root;
    size_t count;
    const void *in;
    void *out;
    const void *stream; /* which stream issued it (only compared) */
    si_done_fn done_fn;
    void *done_arg;
    /* set by the core */
    si_call_t call;
    int group_n, group_i;
    si_op_t *group_next; /* the rest of its group, handed off together */
    int state;
    int64_t hand_no;     /* the communicator's hand-off number */
    double t_start;
    void *gather;        /* n · count elements received for a reduction */
    int nreq;
    void *reqs;          /* MPI_Request[] */
    si_call_t *peer_calls;
    si_op_t *next;       /* the progress thread's lists */
    volatile int done;
};

/* The size of an element of datatype dt, 0 for an unknown one. */
size_t si_dtype_size(int dt);
/* "ncclAllReduce(count=1024, float32, sum)" and the like, into buf. */
void si_call_str(const si_call_t *c, char *buf, size_t n);

/* A new id (ncclGetUniqueId): unique across the job, names the creating process. */
int si_id_new(unsigned char id[SI_ID_BYTES]);
/* Joins the communicator of id as rank `rank` of `nranks` (ncclCommInitRank): blocking, collective
 * over its ranks, within the deadline; MPI must be initialised with MPI_THREAD_MULTIPLE. device:
 * recorded for ncclCommCuDevice. SI_OK with *comm_p, or an error (message printed). */
int si_comm_init(const unsigned char id[SI_ID_BYTES], int nranks, int rank, int device, si_comm_t **comm_p);
/* Waits for its calls (within the deadline) and frees it (ncclCommDestroy). */
int si_comm_destroy(si_comm_t *c);
/* Drops its calls, releases their streams (done callbacks run with the data undefined) and frees it
 * without waiting for the peers (ncclCommAbort). */
int si_comm_abort(si_comm_t *c);
/* The asynchronous error: SI_OK, or the error that ended a call (ncclCommGetAsyncError). */
int si_comm_error(const si_comm_t *c);
int si_comm_rank(const si_comm_t *c);
int si_comm_size(const si_comm_t *c);
int si_comm_device(const si_comm_t *c);
/* Checks an op's arguments and numbers it (the host's issue order): SI_OK, or SI_ERR_ARG /
 * SI_ERR_USAGE with the reason printed. */
int si_issue(si_op_t *op);
/* Hands off a group of ops (first, linked by group_next; one op alone is a group of one) to the
 * progress thread. Safe from a CUDA host function: takes a mutex briefly, never blocks longer. */
void si_handoff(si_op_t *first);

/* The deadline in seconds (NCCL_STANDIN_TIMEOUT, default 120). */
double si_timeout(void);
/* Ends the run: prints "nccl-standin: rank R (world W), communicator K (n ranks), call #N: ..." (to
 * stderr, and appended to the file NCCL_STANDIN_REPORT names, if set) and
 * marks the communicator failed; after NCCL_STANDIN_GRACE seconds (default 10) that the application
 * did not use to abort it (ncclCommAbort) or end the run, calls MPI_Abort. */
void si_fail(si_comm_t *c, int64_t call_no, int err, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif
