/* The NCCL stand-in's core (standin.h): communicators over MPI, the progress thread, descriptor
 * matching, transfers and reductions. No CUDA. */
#include "standin.h"

#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Tags on MPI_COMM_WORLD for the join (far above the application's small tags) and on each
 * communicator's own MPI communicator. */
enum { TAG_JOIN = 32701, TAG_MEMBERS = 32702, TAG_CREATE = 32703 };
enum { TAG_DESC_COLL = 1, TAG_DESC_P2P = 2, TAG_DATA_COLL = 3, TAG_DATA_P2P = 4 };
enum { ST_DESC, ST_WAIT_TURN, ST_DATA, ST_DONE };
enum { MAX_COMMS = 64 };

struct si_comm {
    uint64_t key;
    int rank, nranks, device, world_rank;
    int *world;          /* world rank of each member */
    MPI_Comm mpi;
    int64_t issued;      /* calls numbered by si_issue (host order) */
    int64_t coll_issued; /* of which collectives */
    int64_t *units_issued; /* per peer: point-to-point units */
    int64_t handed, done;  /* calls handed off, done (progress thread) */
    int64_t next_post;     /* hand-off number whose data may be posted next */
    const void *stream;    /* the stream of the calls in flight */
    si_op_t *inflight_group; /* the group they belong to */
    int inflight;
    si_call_t *last_seen;  /* per peer: its last descriptor received */
    int error, aborted;
    double fail_t;
};

/* The ops a hand-off carries, in hand-off order per communicator (ops of one comm in one list). */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t thread;
    int started, stop;
    si_op_t *queue_head, *queue_tail; /* handed off, not yet started */
    si_op_t *active;                  /* started */
    si_comm_t *comms[MAX_COMMS];
    int ncomms;
    uint64_t id_counter;
    double grace;
} g = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

static const char *kind_name[SI_KINDS] = {"ncclAllReduce", "ncclReduceScatter", "ncclAllGather", "ncclBroadcast",
                                          "ncclReduce", "ncclSend", "ncclRecv"};
static const char *dtype_name[SI_DTYPES] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                            "float16", "float32", "float64", "bfloat16"};
static const char *op_name[SI_OPS] = {"sum", "prod", "max", "min", "avg"};

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double env_seconds(const char *name, double dflt)
{
    const char *s = getenv(name);
    if (!s || !*s) return dflt;
    char *end;
    const double v = strtod(s, &end);
    return (*end || v < 0) ? dflt : v;
}

double si_timeout(void) { return env_seconds("NCCL_STANDIN_TIMEOUT", 120.0); }

size_t si_dtype_size(int dt)
{
    static const size_t sz[SI_DTYPES] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
    return dt >= 0 && dt < SI_DTYPES ? sz[dt] : 0;
}

static int is_reducing(int kind) { return kind == SI_ALLREDUCE || kind == SI_REDUCE_SCATTER || kind == SI_REDUCE; }
static int is_p2p(int kind) { return kind == SI_SEND || kind == SI_RECV; }
static int has_root(int kind) { return kind == SI_BROADCAST || kind == SI_REDUCE; }

void si_call_str(const si_call_t *c, char *buf, size_t n)
{
    if (c->kind < 0 || c->kind >= SI_KINDS) {
        snprintf(buf, n, "(unknown call kind %d)", c->kind);
        return;
    }
    int k = snprintf(buf, n, "#%lld %s(count=%llu, %s", (long long)c->call_no, kind_name[c->kind],
                     (unsigned long long)c->count, c->dtype >= 0 && c->dtype < SI_DTYPES ? dtype_name[c->dtype] : "?");
    if (k < 0 || (size_t)k >= n) return;
    if (is_reducing(c->kind)) k += snprintf(buf + k, n - (size_t)k, ", %s", c->op >= 0 && c->op < SI_OPS ? op_name[c->op] : "?");
    if ((size_t)k >= n) return;
    if (has_root(c->kind)) k += snprintf(buf + k, n - (size_t)k, ", root %d", c->root);
    if (is_p2p(c->kind)) k += snprintf(buf + k, n - (size_t)k, ", %s rank %d", c->kind == SI_SEND ? "to" : "from", c->root);
    if ((size_t)k >= n) return;
    if (c->group_n > 1) k += snprintf(buf + k, n - (size_t)k, ", call %d of a group of %d", c->group_i + 1, c->group_n);
    if ((size_t)k >= n) return;
    snprintf(buf + k, n - (size_t)k, ")");
}

/* ---- failure ---- */

void si_fail(si_comm_t *c, int64_t call_no, int err, const char *fmt, ...)
{
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int wr = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &wr);
    char line[2048];
    if (c)
        snprintf(line, sizeof line, "nccl-standin: rank %d (world rank %d), communicator %016llx (%d ranks), call #%lld: %s\n",
                 c->rank, wr, (unsigned long long)c->key, c->nranks, (long long)call_no, msg);
    else
        snprintf(line, sizeof line, "nccl-standin: world rank %d: %s\n", wr, msg);
    fputs(line, stderr);
    fflush(stderr);
    /* NCCL_STANDIN_REPORT: the line appended to that file too (one write, O_APPEND): a launcher that
     * kills every rank at the first abort may drop what the others had written to stderr */
    const char *rep = getenv("NCCL_STANDIN_REPORT");
    if (rep && *rep) {
        const int fd = open(rep, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0644); /* never through a planted link */
        if (fd >= 0) {
            const ssize_t w = write(fd, line, strlen(line));
            (void)w;
            close(fd);
        }
    }
    if (c && !c->error) {
        c->error = err;
        c->fail_t = now_s();
    }
    if (!c) MPI_Abort(MPI_COMM_WORLD, 1);
}

/* ---- ids and communicators ---- */

/* The id: "MPSTANDIN1", the creator's world rank, its pid and a counter (the key is their mix). */
typedef struct {
    char magic[12];
    int32_t creator;
    int32_t pid;
    uint64_t counter;
    uint64_t key;
} id_body_t;

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33, x *= 0xff51afd7ed558ccdULL, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ULL, x ^= x >> 33;
    return x;
}

int si_id_new(unsigned char id[SI_ID_BYTES])
{
    int init = 0;
    MPI_Initialized(&init);
    if (!init) {
        fprintf(stderr, "nccl-standin: ncclGetUniqueId before MPI_Init: the stand-in carries NCCL over MPI\n");
        return SI_ERR_USAGE;
    }
    id_body_t b;
    memset(&b, 0, sizeof b);
    memcpy(b.magic, "MPSTANDIN1", 11);
    MPI_Comm_rank(MPI_COMM_WORLD, &b.creator);
    b.pid = (int32_t)getpid();
    pthread_mutex_lock(&g.lock);
    b.counter = ++g.id_counter;
    pthread_mutex_unlock(&g.lock);
    b.key = mix64(((uint64_t)(uint32_t)b.creator << 32 | (uint32_t)b.pid) ^ mix64(b.counter));
    memset(id, 0, SI_ID_BYTES);
    memcpy(id, &b, sizeof b);
    return SI_OK;
}

/* Waits for req within the deadline, yielding the core; SI_OK or SI_ERR_SYSTEM (message printed). */
static int wait_req(MPI_Request *req, const char *what)
{
    const double t0 = now_s(), limit = si_timeout();
    for (;;) {
        int flag = 0;
        if (MPI_Test(req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
            fprintf(stderr, "nccl-standin: MPI failed while %s\n", what);
            return SI_ERR_SYSTEM;
        }
        if (flag) return SI_OK;
        if (now_s() - t0 > limit) {
            fprintf(stderr, "nccl-standin: no answer within NCCL_STANDIN_TIMEOUT = %.0f s while %s\n", limit, what);
            return SI_ERR_SYSTEM;
        }
        sched_yield();
    }
}

static void *progress_main(void *arg);

static int start_thread(void)
{
    if (g.started) return SI_OK;
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided != MPI_THREAD_MULTIPLE) {
        fprintf(stderr, "nccl-standin: MPI was initialised without MPI_THREAD_MULTIPLE (level %d): the stand-in's "
                        "progress thread calls MPI beside the application's\n", provided);
        return SI_ERR_USAGE;
    }
    g.grace = env_seconds("NCCL_STANDIN_GRACE", 10.0);
    if (pthread_create(&g.thread, NULL, progress_main, NULL) != 0) {
        fprintf(stderr, "nccl-standin: cannot start the progress thread: %s\n", strerror(errno));
        return SI_ERR_SYSTEM;
    }
    g.started = 1;
    return SI_OK;
}

/* The members' world ranks in communicator rank order: each member sends (key, rank) to the
 * id's creator, which answers every member with the list. Blocking on the caller's thread. */
static int join(const id_body_t *b, int nranks, int rank, int *world)
{
    int me;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    long long mine[3] = {(long long)b->key, rank, me};
    if (me != b->creator) {
        MPI_Request q[2];
        MPI_Isend(mine, 3, MPI_LONG_LONG, b->creator, TAG_JOIN, MPI_COMM_WORLD, &q[0]);
        MPI_Irecv(world, nranks, MPI_INT, b->creator, TAG_MEMBERS, MPI_COMM_WORLD, &q[1]);
        for (int i = 0; i < 2; i++)
            if (wait_req(&q[i], "joining a communicator (its creator did not answer)") != SI_OK) return SI_ERR_SYSTEM;
        return SI_OK;
    }
    for (int r = 0; r < nranks; r++) world[r] = -1;
    world[rank] = me;
    for (int got = 1; got < nranks;) {
        long long in[3];
        MPI_Request q;
        MPI_Irecv(in, 3, MPI_LONG_LONG, MPI_ANY_SOURCE, TAG_JOIN, MPI_COMM_WORLD, &q);
        if (wait_req(&q, "creating a communicator (a member did not join)") != SI_OK) return SI_ERR_SYSTEM;
        if ((uint64_t)in[0] != b->key || in[1] < 0 || in[1] >= nranks || world[in[1]] != -1) {
            fprintf(stderr, "nccl-standin: world rank %lld joined communicator %016llx as rank %lld of %d, which is "
                            "not this communicator or a rank already taken (ncclCommInitRank calls in different "
                            "orders on different ranks?)\n", in[2], (unsigned long long)b->key, in[1], nranks);
            return SI_ERR_USAGE;
        }
        world[in[1]] = (int)in[2];
        got++;
    }
    for (int r = 0; r < nranks; r++) {
        if (r == rank) continue;
        MPI_Request q;
        MPI_Isend(world, nranks, MPI_INT, world[r], TAG_MEMBERS, MPI_COMM_WORLD, &q);
        if (wait_req(&q, "sending a communicator's members") != SI_OK) return SI_ERR_SYSTEM;
    }
    return SI_OK;
}

int si_comm_init(const unsigned char id[SI_ID_BYTES], int nranks, int rank, int device, si_comm_t **comm_p)
{
    id_body_t b;
    memcpy(&b, id, sizeof b);
    if (memcmp(b.magic, "MPSTANDIN1", 11) != 0) {
        fprintf(stderr, "nccl-standin: ncclCommInitRank: the unique id was not made by the stand-in's ncclGetUniqueId\n");
        return SI_ERR_ARG;
    }
    if (nranks < 1 || rank < 0 || rank >= nranks) {
        fprintf(stderr, "nccl-standin: ncclCommInitRank: rank %d of %d ranks\n", rank, nranks);
        return SI_ERR_ARG;
    }
    int rc = start_thread();
    if (rc != SI_OK) return rc;
    si_comm_t *c = calloc(1, sizeof *c);
    if (!c || !(c->world = calloc((size_t)nranks, sizeof *c->world)) ||
        !(c->units_issued = calloc((size_t)nranks, sizeof *c->units_issued)) ||
        !(c->last_seen = calloc((size_t)nranks, sizeof *c->last_seen))) {
        if (c) free(c->world), free(c->units_issued), free(c);
        return SI_ERR_SYSTEM;
    }
    c->key = b.key, c->rank = rank, c->nranks = nranks, c->device = device, c->next_post = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &c->world_rank);
    if ((rc = join(&b, nranks, rank, c->world)) != SI_OK) goto err;
    MPI_Group all, mine;
    MPI_Comm_group(MPI_COMM_WORLD, &all);
    MPI_Group_incl(all, nranks, c->world, &mine);
    /* collective over the members only, in communicator rank order */
    if (MPI_Comm_create_group(MPI_COMM_WORLD, mine, TAG_CREATE, &c->mpi) != MPI_SUCCESS) {
        rc = SI_ERR_SYSTEM;
        goto err;
    }
    MPI_Group_free(&mine);
    MPI_Group_free(&all);
    pthread_mutex_lock(&g.lock);
    if (g.ncomms == MAX_COMMS) {
        pthread_mutex_unlock(&g.lock);
        fprintf(stderr, "nccl-standin: more than %d communicators at once\n", MAX_COMMS);
        MPI_Comm_free(&c->mpi);
        rc = SI_ERR_USAGE;
        goto err;
    }
    g.comms[g.ncomms++] = c;
    pthread_mutex_unlock(&g.lock);
    *comm_p = c;
    return SI_OK;
err:
    free(c->last_seen), free(c->units_issued), free(c->world), free(c);
    return rc;
}

static void comm_forget(si_comm_t *c)
{
    pthread_mutex_lock(&g.lock);
    for (int i = 0; i < g.ncomms; i++)
        if (g.comms[i] == c) g.comms[i] = g.comms[--g.ncomms];
    pthread_mutex_unlock(&g.lock);
    if (c->mpi != MPI_COMM_NULL) MPI_Comm_free(&c->mpi);
    free(c->last_seen), free(c->units_issued), free(c->world), free(c);
}

int si_comm_destroy(si_comm_t *c)
{
    const double t0 = now_s(), limit = si_timeout();
    for (;;) {
        /* every call issued, not only those handed off: a stream may still be on its way to one,
         * whose host function would then hand off a call of a freed communicator */
        pthread_mutex_lock(&g.lock);
        const int busy = c->issued != c->done;
        pthread_mutex_unlock(&g.lock);
        if (!busy || c->error) break;
        if (now_s() - t0 > limit) {
            si_fail(c, c->handed, SI_ERR_SYSTEM, "ncclCommDestroy: calls still in flight after NCCL_STANDIN_TIMEOUT = %.0f s",
                    limit);
            return SI_ERR_SYSTEM;
        }
        sched_yield();
    }
    if (c->error) return si_comm_abort(c);
    comm_forget(c);
    return SI_OK;
}

/* Releases an op's resources; its done callback runs. Called with g.lock held. */
static void op_finish(si_op_t *op)
{
    si_comm_t *c = op->comm;
    free(op->gather), op->gather = NULL;
    free(op->reqs), op->reqs = NULL;
    free(op->peer_calls), op->peer_calls = NULL;
    op->state = ST_DONE;
    c->done++;
    if (--c->inflight == 0) c->stream = NULL, c->inflight_group = NULL;
    op->done = 1;
    if (op->done_fn) op->done_fn(op, op->done_arg);
}

int si_comm_abort(si_comm_t *c)
{
    pthread_mutex_lock(&g.lock);
    c->aborted = 1;
    /* drop this communicator's ops (their MPI requests are left to MPI: the run is ending) */
    si_op_t **pp = &g.active;
    while (*pp) {
        si_op_t *op = *pp;
        if (op->comm == c) {
            *pp = op->next;
            /* MPI may still write into its buffers: left allocated (the run is ending) */
            op->gather = op->reqs = NULL, op->peer_calls = NULL;
            op_finish(op);
        } else {
            pp = &op->next;
        }
    }
    pp = &g.queue_head;
    g.queue_tail = NULL;
    while (*pp) {
        si_op_t *op = *pp;
        if (op->comm == c) {
            *pp = op->next;
            op_finish(op);
        } else {
            g.queue_tail = op;
            pp = &op->next;
        }
    }
    for (int i = 0; i < g.ncomms; i++)
        if (g.comms[i] == c) g.comms[i] = g.comms[--g.ncomms];
    pthread_mutex_unlock(&g.lock);
    /* neither it nor its MPI communicator is freed: its peers may still be in its calls, and a
     * stream on its way to one of its calls will hand it off (si_handoff releases it at once) */
    return SI_OK;
}

int si_comm_error(const si_comm_t *c) { return c->error; }
int si_comm_rank(const si_comm_t *c) { return c->rank; }
int si_comm_size(const si_comm_t *c) { return c->nranks; }
int si_comm_device(const si_comm_t *c) { return c->device; }

/* ---- issue and hand-off ---- */

int si_issue(si_op_t *op)
{
    si_comm_t *c = op->comm;
    if (!c) return SI_ERR_ARG;
    if (op->kind < 0 || op->kind >= SI_KINDS || !si_dtype_size(op->dtype) || (is_reducing(op->kind) && (op->op < 0 || op->op >= SI_OPS))) {
        fprintf(stderr, "nccl-standin: rank %d: an unknown call kind, datatype (%d) or reduction (%d)\n", c->rank,
                op->dtype, op->op);
        return SI_ERR_ARG;
    }
    if ((has_root(op->kind) || is_p2p(op->kind)) && (op->root < 0 || op->root >= c->nranks)) {
        fprintf(stderr, "nccl-standin: rank %d: %s names rank %d of a communicator of %d\n", c->rank, kind_name[op->kind],
                op->root, c->nranks);
        return SI_ERR_ARG;
    }
    if (is_p2p(op->kind) && op->root == c->rank) {
        fprintf(stderr, "nccl-standin: rank %d: %s to itself\n", c->rank, kind_name[op->kind]);
        return SI_ERR_USAGE;
    }
    if (c->error || c->aborted) return c->error ? c->error : SI_ERR_USAGE;
    memset(&op->call, 0, sizeof op->call);
    op->call.kind = op->kind, op->call.dtype = op->dtype, op->call.op = is_reducing(op->kind) ? op->op : 0;
    op->call.root = op->root, op->call.count = op->count, op->call.rank = c->rank;
    op->call.call_no = ++c->issued;
    op->state = ST_DESC, op->done = 0, op->group_next = NULL, op->next = NULL;
    op->gather = op->reqs = NULL, op->peer_calls = NULL, op->nreq = 0;
    return SI_OK;
}

/* The group's shape into every op's descriptor: its size, each op's place, and per point-to-point
 * op the unit it forms with its peer (every send to and receive from that peer in the group). */
static void group_shape(si_op_t *first)
{
    int n = 0;
    for (si_op_t *o = first; o; o = o->group_next) n++;
    int i = 0;
    for (si_op_t *o = first; o; o = o->group_next, i++) {
        o->call.group_n = n, o->call.group_i = i;
        if (!is_p2p(o->kind)) continue;
        for (si_op_t *p = first; p; p = p->group_next) {
            if (!is_p2p(p->kind) || p->comm != o->comm || p->root != o->root) continue;
            if (p->kind == SI_SEND) o->call.unit_sends++, o->call.unit_send_elems += p->count;
            else o->call.unit_recvs++, o->call.unit_recv_elems += p->count;
        }
    }
}

void si_handoff(si_op_t *first)
{
    group_shape(first);
    pthread_mutex_lock(&g.lock);
    if (first->comm->aborted) { /* released, data undefined: the application is ending the run */
        for (si_op_t *o = first, *nx; o; o = nx) {
            nx = o->group_next;
            o->comm->handed++, o->comm->inflight++;
            op_finish(o);
        }
        pthread_mutex_unlock(&g.lock);
        return;
    }
    const double t = now_s();
    for (si_op_t *o = first; o; o = o->group_next) {
        si_comm_t *c = o->comm;
        /* what the other communicators had handed off and done when this call started */
        int k = 0;
        for (int i = 0; i < g.ncomms && k < SI_MAX_SEEN; i++) {
            const si_comm_t *x = g.comms[i];
            if (x == c) continue;
            o->call.seen[k].key = x->key, o->call.seen[k].handed = x->handed, o->call.seen[k].done = x->done;
            k++;
        }
        o->call.nseen = k;
        if (c->inflight > 0 && c->stream != o->stream && c->inflight_group != first && !c->error)
            si_fail(c, o->call.call_no, SI_ERR_USAGE,
                    "%s handed off on stream %p while call #%lld of this communicator is in flight on stream %p: "
                    "a communicator used from two streams at once (order the streams with an event, or give each "
                    "stream its own communicator)", kind_name[o->kind], o->stream, (long long)c->done + 1, c->stream);
        c->stream = o->stream, c->inflight_group = first;
        c->inflight++;
        o->hand_no = ++c->handed;
        o->t_start = t;
    }
    /* one FIFO: the thread starts them in hand-off order */
    for (si_op_t *o = first; o; o = o->group_next) {
        o->next = NULL;
        if (g.queue_tail) g.queue_tail->next = o;
        else g.queue_head = o;
        g.queue_tail = o;
    }
    pthread_cond_signal(&g.wake);
    pthread_mutex_unlock(&g.lock);
}

/* ---- the progress thread: descriptors ---- */

/* The ranks a call exchanges descriptors and data with. */
static int peers_of(const si_op_t *op, int *peers)
{
    const si_comm_t *c = op->comm;
    if (is_p2p(op->kind)) {
        peers[0] = op->root;
        return 1;
    }
    int n = 0;
    for (int r = 0; r < c->nranks; r++)
        if (r != c->rank) peers[n++] = r;
    return n;
}

static int post_descriptors(si_op_t *op)
{
    si_comm_t *c = op->comm;
    int *peers = malloc((size_t)c->nranks * sizeof *peers);
    if (!peers) return SI_ERR_SYSTEM;
    const int np = peers_of(op, peers);
    MPI_Request *q = calloc((size_t)(2 * np + 1), sizeof *q);
    op->peer_calls = calloc((size_t)(np + 1), sizeof *op->peer_calls);
    if (!q || !op->peer_calls) {
        free(peers), free(q);
        return SI_ERR_SYSTEM;
    }
    const int tag = is_p2p(op->kind) ? TAG_DESC_P2P : TAG_DESC_COLL;
    /* every call sends its own; a point-to-point call carries its unit's shape (group_shape) */
    for (int i = 0; i < np; i++) {
        MPI_Irecv(&op->peer_calls[i], (int)sizeof(si_call_t), MPI_BYTE, peers[i], tag, c->mpi, &q[2 * i]);
        MPI_Isend(&op->call, (int)sizeof(si_call_t), MPI_BYTE, peers[i], tag, c->mpi, &q[2 * i + 1]);
    }
    free(peers);
    op->reqs = q;
    op->nreq = 2 * np;
    return SI_OK;
}

/* Compares this rank's call with a peer's; fails the communicator on a difference. */
static int check_pair(si_op_t *op, const si_call_t *them)
{
    si_comm_t *c = op->comm;
    const si_call_t *me = &op->call;
    const int peer = them->rank;
    c->last_seen[peer] = *them;
    char a[256], b[256];
    si_call_str(me, a, sizeof a);
    si_call_str(them, b, sizeof b);
    int bad = 0;
    if (is_p2p(me->kind)) {
        bad = !is_p2p(them->kind) || them->root != c->rank || me->unit_sends != them->unit_recvs ||
              me->unit_recvs != them->unit_sends || me->unit_send_elems != them->unit_recv_elems ||
              me->unit_recv_elems != them->unit_send_elems || me->dtype != them->dtype;
        if (bad) {
            si_fail(c, me->call_no, SI_ERR_USAGE,
                    "point-to-point calls do not match: this rank's %s (%d sends of %llu elements to rank %d, %d "
                    "receives of %llu from it) meets rank %d's %s (%d sends of %llu elements, %d receives of %llu)",
                    a, me->unit_sends, (unsigned long long)me->unit_send_elems, peer, me->unit_recvs,
                    (unsigned long long)me->unit_recv_elems, peer, b, them->unit_sends,
                    (unsigned long long)them->unit_send_elems, them->unit_recvs, (unsigned long long)them->unit_recv_elems);
            return SI_ERR_USAGE;
        }
    } else {
        bad = them->kind != me->kind || them->count != me->count || them->dtype != me->dtype || them->op != me->op ||
              (has_root(me->kind) && them->root != me->root) || them->group_n != me->group_n ||
              them->group_i != me->group_i;
        if (bad) {
            si_fail(c, me->call_no, SI_ERR_USAGE, "collectives do not match: this rank's %s meets rank %d's %s", a, peer, b);
            return SI_ERR_USAGE;
        }
    }
    /* the order of other communicators' calls: a call of communicator X in flight here when this one
     * started, which the peer (also in X) starts only after this one */
    for (int i = 0; i < me->nseen; i++)
        for (int j = 0; j < them->nseen; j++) {
            if (me->seen[i].key != them->seen[j].key) continue;
            const int64_t mine_h = me->seen[i].handed, mine_d = me->seen[i].done, their_h = them->seen[j].handed;
            if (mine_h > their_h && mine_h > mine_d) {
                const int64_t k = (their_h > mine_d ? their_h : mine_d) + 1;
                si_fail(c, me->call_no, SI_ERR_USAGE,
                        "two communicators in flight in different orders: communicator %016llx's call #%lld was in "
                        "flight on this rank when it started %s, and rank %d started that call before communicator "
                        "%016llx's call #%lld (NCCL's kernels can wait on each other here: issue the two "
                        "communicators' calls in one order on every rank, or order their streams)",
                        (unsigned long long)me->seen[i].key, (long long)k, a, peer, (unsigned long long)me->seen[i].key,
                        (long long)k);
                return SI_ERR_USAGE;
            }
        }
    return SI_OK;
}

/* ---- the progress thread: data ---- */

static int post_data(si_op_t *op)
{
    si_comm_t *c = op->comm;
    const size_t es = si_dtype_size(op->dtype), n = c->nranks, cnt = op->count, bytes = cnt * es;
    MPI_Request *q = calloc(2 * n + 2, sizeof *q);
    if (!q) return SI_ERR_SYSTEM;
    free(op->reqs);
    op->reqs = q;
    op->nreq = 0;
    const int me = c->rank;
    if (bytes > (size_t)0x7fffffff) {
        si_fail(c, op->call.call_no, SI_ERR_USAGE, "a message of %zu bytes: over the stand-in's 2 GiB", bytes);
        return SI_ERR_USAGE;
    }
    const int b = (int)bytes;
    const char *in = op->in;
    char *out = op->out;
    switch (op->kind) {
    case SI_SEND: MPI_Isend(in, b, MPI_BYTE, op->root, TAG_DATA_P2P, c->mpi, &q[op->nreq++]); break;
    case SI_RECV: MPI_Irecv(out, b, MPI_BYTE, op->root, TAG_DATA_P2P, c->mpi, &q[op->nreq++]); break;
    case SI_ALLREDUCE:
    case SI_REDUCE:
    case SI_REDUCE_SCATTER: {
        /* every rank's contribution to what this rank keeps, reduced here in rank order */
        const int to_all = op->kind == SI_ALLREDUCE, to_root = op->kind == SI_REDUCE;
        if (!(op->gather = malloc(n * bytes + 1))) return SI_ERR_SYSTEM;
        char *gat = op->gather;
        const int keep = !to_root || me == op->root;
        for (int r = 0; r < (int)n; r++) {
            const char *mine_for_r = op->kind == SI_REDUCE_SCATTER ? in + (size_t)r * bytes : in;
            if (r == me) {
                if (keep) memcpy(gat + (size_t)r * bytes, mine_for_r, bytes);
                continue;
            }
            if (keep) MPI_Irecv(gat + (size_t)r * bytes, b, MPI_BYTE, r, TAG_DATA_COLL, c->mpi, &q[op->nreq++]);
            if (to_all || op->kind == SI_REDUCE_SCATTER || r == op->root)
                MPI_Isend(mine_for_r, b, MPI_BYTE, r, TAG_DATA_COLL, c->mpi, &q[op->nreq++]);
        }
        break;
    }
    case SI_ALLGATHER:
        for (int r = 0; r < (int)n; r++) {
            if (r == me) {
                if (out + (size_t)r * bytes != in) memmove(out + (size_t)r * bytes, in, bytes);
                continue;
            }
            MPI_Irecv(out + (size_t)r * bytes, b, MPI_BYTE, r, TAG_DATA_COLL, c->mpi, &q[op->nreq++]);
            MPI_Isend(in, b, MPI_BYTE, r, TAG_DATA_COLL, c->mpi, &q[op->nreq++]);
        }
        break;
    case SI_BROADCAST:
        if (me == op->root) {
            if (out != in) memmove(out, in, bytes);
            for (int r = 0; r < (int)n; r++)
                if (r != me) MPI_Isend(in, b, MPI_BYTE, r, TAG_DATA_COLL, c->mpi, &q[op->nreq++]);
        } else {
            MPI_Irecv(out, b, MPI_BYTE, op->root, TAG_DATA_COLL, c->mpi, &q[op->nreq++]);
        }
        break;
    }
    return SI_OK;
}

/* bf16 and fp16 to float and back (round to nearest even; NaN kept a NaN). */
static float bf16_f(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint16_t f_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

/* out (count) = op over r = 0..n-1 of gather[r] (count each), left to right: the same bits on every
 * rank. Half types accumulate in float and round once. */
#define REDUCE_LOOP(T, ACC, LOAD, STORE)                                                  \
    for (size_t i = 0; i < cnt; i++) {                                                    \
        ACC a = LOAD(((const T *)gat)[i]);                                                \
        for (size_t r = 1; r < n; r++) {                                                  \
            const ACC x = LOAD(((const T *)(gat + r * bytes))[i]);                        \
            switch (op) {                                                                 \
            case SI_PROD: a = a * x; break;                                               \
            case SI_MAX: a = x > a ? x : a; break;                                        \
            case SI_MIN: a = x < a ? x : a; break;                                        \
            default: a = a + x; break;                                                    \
            }                                                                             \
        }                                                                                 \
        if (op == SI_AVG) a = a / (ACC)n;                                                 \
        ((T *)out)[i] = STORE(a);                                                         \
    }
#define AS_IS(x) (x)
static void reduce_into(void *out, const char *gat, size_t n, size_t cnt, int dtype, int op)
{
    const size_t bytes = cnt * si_dtype_size(dtype);
    switch (dtype) {
    case SI_INT8: REDUCE_LOOP(int8_t, int64_t, AS_IS, (int8_t)) break;
    case SI_UINT8: REDUCE_LOOP(uint8_t, uint64_t, AS_IS, (uint8_t)) break;
    case SI_INT32: REDUCE_LOOP(int32_t, int64_t, AS_IS, (int32_t)) break;
    case SI_UINT32: REDUCE_LOOP(uint32_t, uint64_t, AS_IS, (uint32_t)) break;
    case SI_INT64: REDUCE_LOOP(uint64_t, uint64_t, AS_IS, AS_IS) break; /* wraps, as two's complement */
    case SI_UINT64: REDUCE_LOOP(uint64_t, uint64_t, AS_IS, AS_IS) break;
    case SI_FLOAT16: REDUCE_LOOP(_Float16, float, (float), (_Float16)) break;
    case SI_FLOAT32: REDUCE_LOOP(float, float, AS_IS, AS_IS) break;
    case SI_FLOAT64: REDUCE_LOOP(double, double, AS_IS, AS_IS) break;
    case SI_BFLOAT16: REDUCE_LOOP(uint16_t, float, bf16_f, f_bf16) break;
    }
}

static void op_reduce(si_op_t *op)
{
    const si_comm_t *c = op->comm;
    if (!op->gather || (op->kind == SI_REDUCE && c->rank != op->root)) return;
    reduce_into(op->out, op->gather, (size_t)c->nranks, op->count, op->dtype, op->op);
}

/* ---- the progress thread ---- */

/* Tests every request of op; 1 when all are complete. */
static int reqs_done(si_op_t *op)
{
    MPI_Request *q = op->reqs;
    int all = 1;
    for (int i = 0; i < op->nreq; i++) {
        int flag = 0;
        if (q[i] == MPI_REQUEST_NULL) continue;
        if (MPI_Test(&q[i], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
            si_fail(op->comm, op->call.call_no, SI_ERR_SYSTEM, "MPI failed in %s", kind_name[op->kind]);
            return 0;
        }
        all &= flag;
    }
    return all;
}

/* What op still waits for, for the deadline's message. */
static void waiting_for(const si_op_t *op, char *buf, size_t n)
{
    const si_comm_t *c = op->comm;
    char mine[256], last[256];
    si_call_str(&op->call, mine, sizeof mine);
    const char *phase = op->state == ST_DESC ? "the peers' matching calls" :
                        op->state == ST_WAIT_TURN ? "an earlier call of this communicator to start its transfer" :
                                                    "the data";
    int k = snprintf(buf, n, "%s waited more than NCCL_STANDIN_TIMEOUT = %.0f s for %s;", mine, si_timeout(), phase);
    int peers[1024];
    const int np = c->nranks <= 1024 ? peers_of(op, peers) : 0;
    if (op->state == ST_DESC) { /* whose call never came: their descriptor's receive is pending */
        const MPI_Request *q = op->reqs;
        k += snprintf(buf + k, n - (size_t)k, " no matching call from rank(s)");
        for (int i = 0; i < np && (size_t)k < n; i++)
            if (q[2 * i] != MPI_REQUEST_NULL) k += snprintf(buf + k, n - (size_t)k, " %d", peers[i]);
        if ((size_t)k < n) k += snprintf(buf + k, n - (size_t)k, ";");
    }
    for (int i = 0; i < np && k > 0 && (size_t)k < n; i++) {
        const si_call_t *s = &c->last_seen[peers[i]];
        if (s->call_no) si_call_str(s, last, sizeof last);
        else snprintf(last, sizeof last, "none");
        k += snprintf(buf + k, n - (size_t)k, " rank %d's last call seen: %s;", peers[i], last);
    }
}

/* One pass over the started ops: 1 when anything moved. Called with g.lock held (MPI calls with it
 * held do not block). A failed communicator's ops stay until the application aborts it, or past
 * NCCL_STANDIN_GRACE the run is ended here. */
static int progress_pass(void)
{
    int moved = 0;
    const double t = now_s(), limit = si_timeout();
    for (si_op_t **pp = &g.active; *pp;) {
        si_op_t *op = *pp;
        si_comm_t *c = op->comm;
        if (c->error) {
            if (g.grace >= 0 && t - c->fail_t > g.grace) {
                fprintf(stderr, "nccl-standin: rank %d (world rank %d): communicator %016llx failed %.0f s ago and "
                                "was not aborted (ncclCommAbort): ending the run\n", c->rank, c->world_rank,
                        (unsigned long long)c->key, g.grace);
                fflush(stderr);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            pp = &op->next;
            continue;
        }
        if (op->state == ST_DESC && reqs_done(op)) {
            int ok = 1;
            for (int i = 0; i < op->nreq / 2 && ok; i++) ok = check_pair(op, &op->peer_calls[i]) == SI_OK;
            if (!ok) continue; /* c->error is set: the next pass holds it */
            op->state = ST_WAIT_TURN, moved = 1;
        }
        /* data in hand-off order per communicator, so MPI's order on one tag pairs the k-th with the k-th */
        if (op->state == ST_WAIT_TURN && op->hand_no == c->next_post) {
            if (post_data(op) != SI_OK) {
                if (!c->error) si_fail(c, op->call.call_no, SI_ERR_SYSTEM, "out of memory for a transfer");
                continue;
            }
            c->next_post++;
            op->state = ST_DATA, moved = 1;
        }
        if (op->state == ST_DATA && reqs_done(op)) {
            op_reduce(op);
            *pp = op->next;
            op_finish(op);
            moved = 1;
            continue;
        }
        if (t - op->t_start > limit && !c->error) {
            char why[4096];
            waiting_for(op, why, sizeof why);
            si_fail(c, op->call.call_no, SI_ERR_SYSTEM, "%s", why);
        }
        pp = &op->next;
    }
    return moved;
}

/* Starts what was handed off (descriptors posted) and progresses everything; sleeps on the
 * condition variable when nothing is in flight, yields the core between passes otherwise. */
static void *progress_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g.lock);
    while (!g.stop) {
        while (g.queue_head) {
            si_op_t *op = g.queue_head;
            g.queue_head = op->next;
            if (!g.queue_head) g.queue_tail = NULL;
            op->next = NULL;
            if (post_descriptors(op) != SI_OK && !op->comm->error)
                si_fail(op->comm, op->call.call_no, SI_ERR_SYSTEM, "out of memory for a call's descriptors");
            si_op_t **tail = &g.active; /* appended: the active list keeps hand-off order */
            while (*tail) tail = &(*tail)->next;
            *tail = op;
        }
        if (!g.active) {
            pthread_cond_wait(&g.wake, &g.lock);
            continue;
        }
        const int moved = progress_pass();
        pthread_mutex_unlock(&g.lock);
        if (!moved) {
            /* yield the core (MPI tests spin otherwise); a short sleep once nothing moved for a while
             * keeps an oversubscribed node responsive */
            static const struct timespec nap = {0, 20000};
            sched_yield();
            nanosleep(&nap, NULL);
        }
        pthread_mutex_lock(&g.lock);
    }
    pthread_mutex_unlock(&g.lock);
    return NULL;
}
