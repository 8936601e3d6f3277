/* The NCCL stand-in's ABI: libnccl.so.2 with NCCL's functions over the core (standin.h), loaded in
 * place of NCCL with LD_LIBRARY_PATH (no rebuild of the application). Types and numbering come
 * from NCCL's own nccl.h, so the ABI is NCCL's.
 *
 * A call on `stream` is enqueued, never waited for (the host is not blocked):
 *   1. cudaMemcpyAsync of its input, device → pinned staging (calls that send data);
 *   2. cudaLaunchHostFunc: when the stream gets here, the call is handed to the progress thread
 *      (si_handoff), which carries it over MPI;
 *   3. cuStreamWaitValue32 on the call's flag in mapped pinned memory, which the progress thread
 *      sets when the transfer is complete: the stream does not run past the call before then;
 *   4. cudaMemcpyAsync of the result, pinned staging → device (calls that receive data);
 *   5. an event, after which the staging and the flag are reused.
 * A group (ncclGroupStart/End) does 1 and 2 for every call on every stream it names, hands the
 * group off when the last of its streams gets there, and every stream waits for the whole group.
 * Why this cannot deadlock where NCCL would not: standin.h.
 *
 * Staging is pinned memory carved from a pool made with the first communicator
 * (NCCL_STANDIN_POOL_MB, default 256) and reused by size; only past the pool does a new size take a
 * pinned allocation of its own (in the first step, when it meets each size). Needs stream memory operations (CUDA 11.7 and
 * later enable them by default on Linux), found through cudaGetDriverEntryPointByVersion; without
 * them ncclCommInitRank or the first call fails saying so. */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "standin.h"

_Static_assert(sizeof(ncclUniqueId) >= SI_ID_BYTES, "ncclUniqueId holds the stand-in's id");
_Static_assert((int)ncclFloat32 == SI_FLOAT32 && (int)ncclBfloat16 == SI_BFLOAT16 && (int)ncclInt32 == SI_INT32,
               "NCCL's datatypes");
_Static_assert((int)ncclSum == SI_SUM && (int)ncclMax == SI_MAX && (int)ncclAvg == SI_AVG, "NCCL's reductions");
_Static_assert((int)ncclInvalidUsage == SI_ERR_USAGE && (int)ncclSystemError == SI_ERR_SYSTEM, "NCCL's results");

/* ncclComm_t is an opaque pointer to struct ncclComm: ours wraps the core's communicator. */
struct ncclComm {
    si_comm_t *c;
};

/* ---- pinned staging and flags, reused after their call's event ---- */

typedef struct blk {
    void *p;
    size_t cap;
    struct blk *next;
} blk_t;

enum { NFLAGS = 8192 };

/* One call of ours: the core's op first. */
typedef struct fe_op {
    si_op_t op;
    blk_t *in, *out;       /* staging (NULL where the call has none) */
    const void *src;       /* device input, copied to `in` on the stream */
    void *dst;             /* device buffer the result goes to */
    size_t in_bytes, out_bytes;
    struct fe_group *grp;
    struct fe_op *gnext;   /* in its group, in call order */
} fe_op_t;

/* A hand-off unit: one call, or a group's calls; its streams wait on one flag. */
typedef struct fe_group {
    fe_op_t *first;
    int nstreams, arrived;   /* streams that must reach their host function before the hand-off */
    int pending;             /* calls not done */
    int flag;                /* index into the flag pool */
    cudaStream_t streams[16];
    cudaEvent_t ev[16];
    struct fe_group *next;   /* retire list */
} fe_group_t;

static struct {
    pthread_mutex_t lock;    /* the pools and the flags' state (the progress thread sets flags) */
    blk_t *free_blks;
    char *pool;              /* pinned staging carved by blk_get */
    size_t pool_bytes, pool_used;
    volatile uint32_t *flags; /* mapped pinned */
    PFN_cuStreamWaitValue32_v11070 wait_value; /* the driver's, found through the runtime: the
                                                 * stand-in links no libcuda, so it loads where
                                                 * there is no driver, as NCCL does */
    CUdeviceptr flags_dev;
    unsigned char flag_used[NFLAGS];
    int next_flag;
    fe_group_t *retire;      /* groups whose streams may still use their staging */
    int depth;               /* ncclGroupStart nesting */
    fe_op_t *group_first, *group_last;
    char last_error[1024];
} fe = {.lock = PTHREAD_MUTEX_INITIALIZER};

static ncclResult_t fail(ncclResult_t rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static ncclResult_t fail(ncclResult_t rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fe.last_error, sizeof fe.last_error, fmt, ap);
    va_end(ap);
    fprintf(stderr, "nccl-standin: %s\n", fe.last_error);
    return rc;
}

#define CU_TRY(call)                                                                                     \
    do {                                                                                                 \
        cudaError_t e_ = (call);                                                                         \
        if (e_ != cudaSuccess)                                                                           \
            return fail(ncclUnhandledCudaError, "%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
    } while (0)

static ncclResult_t flags_init(void)
{
    if (fe.flags) return ncclSuccess;
    enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    void *fn = NULL;
    CU_TRY(cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 11070, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || !fn)
        return fail(ncclSystemError, "the driver has no cuStreamWaitValue32 (the stand-in needs stream memory operations)");
    fe.wait_value = (PFN_cuStreamWaitValue32_v11070)fn;
    void *p = NULL;
    CU_TRY(cudaHostAlloc(&p, NFLAGS * sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable));
    memset(p, 0, NFLAGS * sizeof(uint32_t));
    void *d = NULL;
    CU_TRY(cudaHostGetDevicePointer(&d, p, 0));
    fe.flags = p;
    fe.flags_dev = (CUdeviceptr)d;
    /* the staging pool: NCCL_STANDIN_POOL_MB (default 256) of pinned memory made now, before any call */
    const char *mb = getenv("NCCL_STANDIN_POOL_MB");
    fe.pool_bytes = (size_t)(mb && atol(mb) > 0 ? atol(mb) : 256) << 20;
    void *pool = NULL;
    CU_TRY(cudaHostAlloc(&pool, fe.pool_bytes, cudaHostAllocPortable));
    fe.pool = pool;
    return ncclSuccess;
}

/* Gives back the staging and flags of groups whose streams are past them. */
static void retire(void)
{
    for (fe_group_t **pp = &fe.retire; *pp;) {
        fe_group_t *gr = *pp;
        int past = __atomic_load_n(&gr->pending, __ATOMIC_ACQUIRE) == 0;
        for (int i = 0; past && i < gr->nstreams; i++) past = cudaEventQuery(gr->ev[i]) == cudaSuccess;
        if (!past) {
            pp = &gr->next;
            continue;
        }
        *pp = gr->next;
        pthread_mutex_lock(&fe.lock);
        for (fe_op_t *o = gr->first, *nx; o; o = nx) {
            nx = o->gnext;
            if (o->in) o->in->next = fe.free_blks, fe.free_blks = o->in;
            if (o->out) o->out->next = fe.free_blks, fe.free_blks = o->out;
            free(o);
        }
        fe.flag_used[gr->flag] = 0;
        pthread_mutex_unlock(&fe.lock);
        for (int i = 0; i < gr->nstreams; i++) cudaEventDestroy(gr->ev[i]);
        free(gr);
    }
}

static blk_t *blk_get(size_t bytes)
{
    if (bytes == 0) bytes = 1;
    blk_t **best = NULL;
    for (blk_t **pp = &fe.free_blks; *pp; pp = &(*pp)->next)
        if ((*pp)->cap >= bytes && (!best || (*pp)->cap < (*best)->cap)) best = pp;
    if (best) {
        blk_t *b = *best;
        *best = b->next;
        return b;
    }
    size_t cap = 4096;
    while (cap < bytes) cap *= 2;
    blk_t *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    /* carved from the pool made with the first communicator; past it, a pinned allocation of its
     * own (cudaHostAlloc while streams wait on our flags: only in the first step's new sizes) */
    if (fe.pool_used + cap <= fe.pool_bytes) {
        b->p = fe.pool + fe.pool_used;
        fe.pool_used += cap;
    } else if (cudaHostAlloc(&b->p, cap, cudaHostAllocPortable) != cudaSuccess) {
        free(b);
        return NULL;
    }
    b->cap = cap;
    return b;
}

static int flag_get(void)
{
    for (int i = 0; i < NFLAGS; i++) {
        const int k = (fe.next_flag + i) % NFLAGS;
        if (!fe.flag_used[k]) {
            fe.flag_used[k] = 1;
            fe.next_flag = k + 1;
            fe.flags[k] = 0;
            return k;
        }
    }
    return -1;
}

/* ---- the hand-off: host functions and the progress thread's callback ---- */

static void op_done(si_op_t *op, void *arg)
{
    fe_group_t *gr = arg;
    (void)op;
    if (__atomic_sub_fetch(&gr->pending, 1, __ATOMIC_ACQ_REL) == 0) {
        __sync_synchronize();
        fe.flags[gr->flag] = 1;
        __sync_synchronize();
    }
}

/* On the CUDA callback thread: the last of the group's streams to get here hands it off. */
static void CUDART_CB host_handoff(void *arg)
{
    fe_group_t *gr = arg;
    if (__sync_add_and_fetch(&gr->arrived, 1) < gr->nstreams) return;
    for (fe_op_t *o = gr->first; o; o = o->gnext) o->op.group_next = o->gnext ? &o->gnext->op : NULL;
    si_handoff(&gr->first->op);
}

/* Enqueues a group (or one call) on its streams: steps 1–5 of the header. */
static ncclResult_t enqueue(fe_op_t *first)
{
    retire();
    fe_group_t *gr = calloc(1, sizeof *gr);
    if (!gr) return fail(ncclSystemError, "out of host memory");
    gr->first = first;
    for (fe_op_t *o = first; o; o = o->gnext) {
        o->grp = gr;
        gr->pending++;
        o->op.done_fn = op_done, o->op.done_arg = gr;
        cudaStream_t s = (cudaStream_t)o->op.stream;
        int k = 0;
        while (k < gr->nstreams && gr->streams[k] != s) k++;
        if (k == gr->nstreams) {
            if (k == 16) return fail(ncclInvalidUsage, "a group on more than 16 streams");
            gr->streams[gr->nstreams++] = s;
        }
    }
    pthread_mutex_lock(&fe.lock);
    gr->flag = flag_get();
    pthread_mutex_unlock(&fe.lock);
    if (gr->flag < 0) return fail(ncclSystemError, "more than %d calls in flight", NFLAGS);
    /* 1: inputs to staging, on each call's stream */
    for (fe_op_t *o = first; o; o = o->gnext)
        if (o->in_bytes)
            CU_TRY(cudaMemcpyAsync(o->in->p, o->src, o->in_bytes, cudaMemcpyDeviceToHost, (cudaStream_t)o->op.stream));
    for (int i = 0; i < gr->nstreams; i++) {
        /* 2, 3 */
        CU_TRY(cudaLaunchHostFunc(gr->streams[i], host_handoff, gr));
        CUresult r = fe.wait_value((CUstream)gr->streams[i], fe.flags_dev + (CUdeviceptr)gr->flag * sizeof(uint32_t), 1,
                                   CU_STREAM_WAIT_VALUE_GEQ);
        if (r != CUDA_SUCCESS)
            return fail(ncclUnhandledCudaError, "cuStreamWaitValue32: CUresult %d (the stand-in needs stream memory "
                        "operations)", (int)r);
    }
    /* 4: results back, on each call's stream */
    for (fe_op_t *o = first; o; o = o->gnext)
        if (o->out && o->out_bytes)
            CU_TRY(cudaMemcpyAsync(o->dst, o->out->p, o->out_bytes, cudaMemcpyHostToDevice, (cudaStream_t)o->op.stream));
    /* 5 */
    for (int i = 0; i < gr->nstreams; i++) {
        CU_TRY(cudaEventCreateWithFlags(&gr->ev[i], cudaEventDisableTiming));
        CU_TRY(cudaEventRecord(gr->ev[i], gr->streams[i]));
    }
    gr->next = fe.retire;
    fe.retire = gr;
    return ncclSuccess;
}

/* NCCL_STANDIN_PLANT=R:N: world rank R's N-th call (counted over every communicator of the process)
 * tells its peers a count one larger than it moves, so that the strictness can be shown on the
 * application's own calls (the bring-up's ranks_nccl part): the peers must refuse it. */
static void plant(si_op_t *op)
{
    static long calls;
    static int rank = -2, at_rank = -1;
    static long at_call = -1;
    if (rank == -2) {
        const char *s = getenv("NCCL_STANDIN_PLANT");
        rank = -1;
        if (s && sscanf(s, "%d:%ld", &at_rank, &at_call) == 2) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    }
    if (++calls == at_call && rank == at_rank) {
        op->call.count++;
        fprintf(stderr, "nccl-standin: world rank %d: NCCL_STANDIN_PLANT: call %ld announced with count %llu, one more "
                        "than it moves\n", rank, calls, (unsigned long long)op->call.count);
    }
}

/* A call: staged buffers sized by kind, numbered by the core, then enqueued alone or kept for the
 * group's end. */
static ncclResult_t call(int kind, const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                         int root, ncclComm_t comm, cudaStream_t stream)
{
    if (!comm || !comm->c) return fail(ncclInvalidArgument, "a call on a NULL communicator");
    const size_t es = si_dtype_size((int)dt), n = (size_t)si_comm_size(comm->c);
    if (!es) return fail(ncclInvalidArgument, "datatype %d", (int)dt);
    const int me = si_comm_rank(comm->c);
    size_t in_bytes = 0, out_bytes = 0;
    switch (kind) {
    case SI_ALLREDUCE: in_bytes = out_bytes = count * es; break;
    case SI_REDUCE: in_bytes = count * es, out_bytes = me == root ? count * es : 0; break;
    case SI_REDUCE_SCATTER: in_bytes = count * es * n, out_bytes = count * es; break;
    case SI_ALLGATHER: in_bytes = count * es, out_bytes = count * es * n; break;
    case SI_BROADCAST: in_bytes = me == root ? count * es : 0, out_bytes = count * es; break;
    case SI_SEND: in_bytes = count * es; break;
    case SI_RECV: out_bytes = count * es; break;
    }
    fe_op_t *o = calloc(1, sizeof *o);
    if (!o) return fail(ncclSystemError, "out of host memory");
    o->op.comm = comm->c, o->op.kind = kind, o->op.dtype = (int)dt, o->op.op = (int)op, o->op.root = root;
    o->op.count = count, o->op.stream = stream;
    int rc = si_issue(&o->op);
    if (rc != SI_OK) {
        free(o);
        return (ncclResult_t)rc;
    }
    plant(&o->op);
    if ((in_bytes && !(o->in = blk_get(in_bytes))) || (out_bytes && !(o->out = blk_get(out_bytes)))) {
        free(o);
        return fail(ncclSystemError, "cannot allocate pinned staging of %zu bytes", in_bytes > out_bytes ? in_bytes : out_bytes);
    }
    o->op.in = o->in ? o->in->p : NULL; /* the core reads and writes the staging */
    o->op.out = o->out ? o->out->p : NULL;
    o->src = send, o->dst = recv, o->in_bytes = in_bytes, o->out_bytes = out_bytes;
    if (fe.depth > 0) {
        if (fe.group_last) fe.group_last->gnext = o;
        else fe.group_first = o;
        fe.group_last = o;
        return ncclSuccess;
    }
    return enqueue(o);
}

/* ---- NCCL's API ---- */

/* The mark MindPipe looks for (nccl_grid.c): this NCCL takes ranks that share a GPU. */
int ncclStandinVersion(void) { return 1; }

ncclResult_t ncclGetVersion(int *version)
{
    if (!version) return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (nccl-standin)";
    case ncclSystemError: return "unhandled system error: a deadline passed or MPI failed (nccl-standin; see its message)";
    case ncclInternalError: return "internal error (nccl-standin)";
    case ncclInvalidArgument: return "invalid argument (nccl-standin)";
    case ncclInvalidUsage: return "invalid usage: calls that do not match between ranks, or a communicator misused (nccl-standin; see its message)";
    case ncclRemoteError: return "remote process exited or there was a network error (nccl-standin)";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code (nccl-standin)";
    }
}

const char *ncclGetLastError(ncclComm_t comm)
{
    (void)comm;
    return fe.last_error;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
    if (!uniqueId) return ncclInvalidArgument;
    memset(uniqueId, 0, sizeof *uniqueId);
    return (ncclResult_t)si_id_new((unsigned char *)uniqueId->internal);
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    if (!comm) return ncclInvalidArgument;
    int dev = 0;
    CU_TRY(cudaGetDevice(&dev));
    CU_TRY(cudaFree(NULL)); /* the context exists before the mapped flags */
    ncclResult_t r = flags_init();
    if (r != ncclSuccess) return r;
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!c) return ncclSystemError;
    const int rc = si_comm_init((const unsigned char *)commId.internal, nranks, rank, dev, &c->c);
    if (rc != SI_OK) {
        free(c);
        return (ncclResult_t)rc;
    }
    *comm = c;
    return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t *config)
{
    (void)config; /* blocking creation, as the default config */
    return ncclCommInitRank(comm, nranks, commId, rank);
}

ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist)
{
    (void)comm, (void)ndev, (void)devlist;
    return fail(ncclInvalidUsage, "ncclCommInitAll (one process driving several GPUs) is not in the stand-in");
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config)
{
    (void)comm, (void)color, (void)key, (void)newcomm, (void)config;
    return fail(ncclInvalidUsage, "ncclCommSplit is not in the stand-in (MindPipe does not call it)");
}

ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    (void)comm;
    return ncclSuccess; /* ncclCommDestroy waits */
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (!comm) return ncclSuccess;
    const int rc = si_comm_destroy(comm->c);
    free(comm);
    return (ncclResult_t)rc;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    if (!comm) return ncclSuccess;
    si_comm_abort(comm->c); /* releases the streams waiting on its calls */
    free(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    if (!comm || !asyncError) return ncclInvalidArgument;
    *asyncError = (ncclResult_t)si_comm_error(comm->c);
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    if (!comm || !count) return ncclInvalidArgument;
    *count = si_comm_size(comm->c);
    return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
    if (!comm || !device) return ncclInvalidArgument;
    *device = si_comm_device(comm->c);
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    if (!comm || !rank) return ncclInvalidArgument;
    *rank = si_comm_rank(comm->c);
    return ncclSuccess;
}

ncclResult_t ncclGroupStart(void)
{
    fe.depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
    if (fe.depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    if (--fe.depth > 0) return ncclSuccess;
    fe_op_t *first = fe.group_first;
    fe.group_first = fe.group_last = NULL;
    if (!first) return ncclSuccess;
    return enqueue(first);
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream)
{
    return call(SI_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, 0, comm, stream);
}

ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream)
{
    return call(SI_REDUCE, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    return call(SI_REDUCE_SCATTER, sendbuff, recvbuff, recvcount, datatype, op, 0, comm, stream);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream)
{
    return call(SI_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, comm, stream);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream)
{
    return call(SI_BROADCAST, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream);
}

ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
    return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream)
{
    return call(SI_SEND, sendbuff, NULL, count, datatype, ncclSum, peer, comm, stream);
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream)
{
    return call(SI_RECV, NULL, recvbuff, count, datatype, ncclSum, peer, comm, stream);
}
