#include "wait.h"

#include <sched.h>
#include <stdio.h>
#include <unistd.h>

#include "check.h"
#include "perf.h"
#include "publish.h"

int wait_node_oversubscribed(int node_ranks) { return node_ranks > sysconf(_SC_NPROCESSORS_ONLN); }

void wait_cfg_init(wait_cfg_t *w, deck_wait_t mode, double timeout, int node_ranks)
{
    w->yield = mode == DECK_WAIT_YIELD || (mode == DECK_WAIT_AUTO && wait_node_oversubscribed(node_ranks));
    w->timeout = timeout;
    w->who = w->status = NULL;
    w->lost = NULL, w->lost_ctx = NULL;
    w->stopping = NULL, w->stop_timeout = 0;
}

/* The world ranks of comm other than this one, as "rank 3" or "ranks 1, 2 and 5" (at most 16 named),
 * into out (n bytes); "" for MPI_COMM_NULL. */
static void wait_peers(MPI_Comm comm, char *out, size_t n)
{
    char list[384] = "";
    int size = 0, me = 0, count = 0;
    out[0] = 0;
    if (comm == MPI_COMM_NULL || MPI_Comm_size(comm, &size) != MPI_SUCCESS || MPI_Comm_rank(comm, &me) != MPI_SUCCESS)
        return;
    MPI_Group g, world;
    if (MPI_Comm_group(comm, &g) != MPI_SUCCESS) return;
    if (MPI_Comm_group(MPI_COMM_WORLD, &world) == MPI_SUCCESS) {
        size_t o = 0;
        for (int i = 0; i < size && o < sizeof list; i++) {
            int wr = MPI_UNDEFINED;
            if (i == me || MPI_Group_translate_ranks(g, 1, &i, world, &wr) != MPI_SUCCESS) continue;
            const int last = i == size - 1 || (i == size - 2 && me == size - 1);
            if (++count > 16) {
                snprintf(list + o, sizeof list - o, ", ... (%d in all)", size - 1);
                break;
            }
            o += (size_t)snprintf(list + o, sizeof list - o, "%s%d", count == 1 ? "" : last ? " and " : ", ", wr);
        }
        MPI_Group_free(&world);
    }
    MPI_Group_free(&g);
    if (count) snprintf(out, n, "%s %s", count == 1 ? "rank" : "ranks", list);
}

/* A peer's death reported by MPI (its error handler returns errors): recovery.log's handler first,
 * as at a timeout; else the usual report and abort. */
static void wait_failed(const wait_cfg_t *w, const char *what, int rc)
{
    if (w->lost) {
        char err[MPI_MAX_ERROR_STRING], msg[1400];
        int len = 0;
        if (MPI_Error_string(rc, err, &len) != MPI_SUCCESS) snprintf(err, sizeof err, "MPI error %d", rc);
        snprintf(msg, sizeof msg, "MPI failed waiting for %s (%s): a peer rank is dead", what, err);
        w->lost(w->lost_ctx, msg);
    }
}

/* RUN/exit_status says "1 aborted: WHO: msg" (when the run has one), give_up runs, the job ends. */
MP_NORETURN static void wait_abort(const wait_cfg_t *w, const char *msg, void (*give_up)(void *ctx), void *ctx)
{
    if (w->status && w->status[0]) {
        char text[1700];
        snprintf(text, sizeof text, "1 aborted: %s: %s\n", w->who ? w->who : "a rank", msg);
        publish_text(w->status, text); /* a failure is reported; the abort goes on */
    }
    if (give_up) give_up(ctx);
    MP_ABORT("%s", msg);
}

/* Past the deadline: RUN/exit_status says so (when the run has one), then the job ends. */
MP_NORETURN static void wait_timed_out(const wait_cfg_t *w, MPI_Comm comm, const char *what, double limit,
                                       void (*give_up)(void *ctx), void *ctx)
{
    char peers[512], msg[1400];
    /* the stop's deadline is the shorter one (wait.h): say which ended the wait */
    const char *key = limit == w->timeout ? "parallel.timeout" : "half of train.stop_grace, a stop being requested";
    wait_peers(comm, peers, sizeof peers);
    int size = 0;
    if (comm != MPI_COMM_NULL) MPI_Comm_size(comm, &size);
    if (!peers[0]) /* point-to-point: `what` names the peer */
        snprintf(msg, sizeof msg, "waited more than %s = %g s for %s: a peer rank is dead or hung", key, limit, what);
    else if (size == 2)
        snprintf(msg, sizeof msg, "waited more than %s = %g s for %s: its peer %s did not take part "
                 "(dead or hung)", key, limit, what, peers);
    else
        snprintf(msg, sizeof msg, "waited more than %s = %g s for %s: one or more of its peers (%s) did "
                 "not take part (dead or hung)", key, limit, what, peers);
    if (w->lost) w->lost(w->lost_ctx, msg);
    wait_abort(w, msg, give_up, ctx);
}

void wait_all_over(const wait_cfg_t *w, int n, MPI_Request *reqs, MPI_Comm comm, const char *what)
{
    const double t0 = perf_now();
    int first = 0; /* requests before this one have completed */
    for (long polls = 0;; polls++) {
        while (first < n) {
            int done = 0;
            MPI_Status st;
            const int rc = MPI_Test(&reqs[first], &done, &st);
            if (rc != MPI_SUCCESS) wait_failed(w, what, rc);
            MPI_CHECK(rc);
            if (!done) break;
            first++;
        }
        if (first == n) return;
        if (w->yield) sched_yield();
        if ((polls & 1023) == 0) {
            double limit = w->timeout;
            if (w->lost && w->stopping && w->stop_timeout > 0 && (limit <= 0 || w->stop_timeout < limit) && w->stopping())
                limit = w->stop_timeout;
            if (limit > 0 && perf_now() - t0 > limit) wait_timed_out(w, comm, what, limit, NULL, NULL);
        }
    }
}

void wait_poll(const wait_cfg_t *w, int (*ready)(void *ctx, char *why, size_t n), void (*give_up)(void *ctx),
               void *ctx, const char *what)
{
    const double t0 = perf_now();
    for (long polls = 0;; polls++) {
        char why[600] = "";
        const int rc = ready(ctx, why, sizeof why);
        if (rc > 0) return;
        if (rc < 0) {
            char msg[1400];
            snprintf(msg, sizeof msg, "while waiting for %s: %s", what, why);
            wait_abort(w, msg, give_up, ctx);
        }
        if (w->yield) sched_yield();
        if ((polls & 255) == 0 && w->timeout > 0 && perf_now() - t0 > w->timeout)
            wait_timed_out(w, MPI_COMM_NULL, what, w->timeout, give_up, ctx);
    }
}

void wait_all(const wait_cfg_t *w, int n, MPI_Request *reqs, const char *what)
{
    wait_all_over(w, n, reqs, MPI_COMM_NULL, what);
}

void wait_allreduce(const wait_cfg_t *w, void *buf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                    const char *what)
{
    MPI_Request r;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, count, type, op, comm, &r));
    wait_all_over(w, 1, &r, comm, what);
}

void wait_allreduce_sum(const wait_cfg_t *w, void *buf, int count, MPI_Datatype type, MPI_Comm comm,
                        const char *what)
{
    wait_allreduce(w, buf, count, type, MPI_SUM, comm, what);
}

void wait_barrier(const wait_cfg_t *w, MPI_Comm comm, const char *what)
{
    MPI_Request r;
    MPI_CHECK(MPI_Ibarrier(comm, &r));
    wait_all_over(w, 1, &r, comm, what);
}
