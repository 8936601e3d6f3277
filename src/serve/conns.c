/* The connections' deadlines (conns.h). */
#include "conns.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "check.h"

enum { SLOT_FREE, SLOT_PENDING, SLOT_ANSWERING, SLOT_EXPIRED };

struct conn_slot {
    int state, fd;
    int owed;              /* a 408 is owed at the deadline (the first request, or a request line came) */
    double opened, deadline;
    uint32_t peer;         /* the client's IPv4 address (network order; 0: unknown) */
    int over;              /* accepted while max were open: answered 503 */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Ends s's unfinished request (t->mu held): 408 when owed, then shut down both ways; libmicrohttpd's
 * thread reads the end of the stream and closes the socket. */
static void expire(conns_t *t, conn_slot_t *s, const char *why)
{
    if (s->owed) {
        char body[256], msg[512];
        const int nb = snprintf(body, sizeof body, "{\"error\":{\"message\":\"%s: the request was not whole within %g "
                                "seconds\",\"type\":\"timeout_error\"}}", why, t->deadline_s);
        const int n = snprintf(msg, sizeof msg, "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Type: "
                               "application/json\r\nContent-Length: %d\r\n\r\n%s", nb, body);
        /* a small write to a socket with nothing else queued: it fits, or the client is gone (then the
         * shutdown below ends it all the same) */
        (void)send(s->fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    shutdown(s->fd, SHUT_RDWR);
    s->state = SLOT_EXPIRED;
    t->pending--;
}

/* Whether s is a slow request (t->mu held): unfinished CONNS_SLOW_S after its accept or last response. */
static int slow(const conn_slot_t *s, double now)
{
    /* an idle kept-alive connection holds no request (owed = 0) until its next request line */
    return s->state == SLOT_PENDING && s->owed && s->peer && now - s->opened >= CONNS_SLOW_S;
}

/* Each address's slow requests beyond per_client, newest first, answered 408 (t->mu held): the ones
 * it holds keep their slots to their deadline, and one more is cut as soon as it is slow. O(n²) a
 * sweep: n is a few hundred. */
static void sweep_per_client(conns_t *t, double now)
{
    for (int i = 0; i < t->n; i++) {
        if (!slow(&t->slot[i], now)) continue;
        const uint32_t peer = t->slot[i].peer;
        int n = 0;
        for (int k = 0; k < t->n; k++) n += slow(&t->slot[k], now) && t->slot[k].peer == peer;
        while (n-- > t->per_client) {
            conn_slot_t *young = NULL;
            for (int k = 0; k < t->n; k++)
                if (slow(&t->slot[k], now) && t->slot[k].peer == peer && (!young || t->slot[k].opened > young->opened))
                    young = &t->slot[k];
            expire(t, young, "too many slow requests from this address");
            t->slow_evicted++;
        }
    }
}

static void *sweep(void *arg)
{
    conns_t *t = arg;
    pthread_mutex_lock(&t->mu);
    while (!t->stop) {
        const double now = now_s();
        for (int i = 0; i < t->n; i++)
            if (t->slot[i].state == SLOT_PENDING && now >= t->slot[i].deadline) {
                expire(t, &t->slot[i], "deadline");
                t->expired++;
            }
        if (t->per_client > 0) sweep_per_client(t, now);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&t->wake, &t->mu, &ts);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

int conns_init(conns_t *t, int max, int reserve, double deadline_s, int per_client)
{
    memset(t, 0, sizeof *t);
    if (max < 2 || reserve < 1 || reserve >= max || !(deadline_s > 0))
        return MP_FAIL("connections %d, reserve %d, deadline %g s: a bug", max, reserve, deadline_s);
    t->n = max + max / 4;
    if (!(t->slot = calloc((size_t)t->n, sizeof *t->slot))) return MP_FAIL("out of memory");
    t->max = max, t->cap = max - reserve, t->deadline_s = deadline_s, t->per_client = per_client > 0 ? per_client : 0;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->wake, NULL);
    if (pthread_create(&t->sweeper, NULL, sweep, t) != 0) {
        conns_free(t);
        return MP_FAIL("cannot start the connections' sweeper thread");
    }
    t->started = 1;
    return MP_OK;
}

void conns_fini(conns_t *t)
{
    if (!t->started) return;
    pthread_mutex_lock(&t->mu);
    t->stop = 1;
    pthread_cond_signal(&t->wake);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->sweeper, NULL);
    t->started = 0;
}

void conns_free(conns_t *t)
{
    conns_fini(t);
    if (!t->slot) return;
    pthread_cond_destroy(&t->wake);
    pthread_mutex_destroy(&t->mu);
    free(t->slot);
    t->slot = NULL;
}

conn_slot_t *conns_open(conns_t *t, int fd, uint32_t peer)
{
    pthread_mutex_lock(&t->mu);
    const double now = now_s();
    if (t->pending >= t->cap) { /* the oldest unfinished request gives way */
        conn_slot_t *old = NULL;
        for (int i = 0; i < t->n; i++)
            if (t->slot[i].state == SLOT_PENDING && (!old || t->slot[i].opened < old->opened)) old = &t->slot[i];
        if (old) expire(t, old, "evicted for a newer connection (too many unfinished requests)"), t->evicted++;
    }
    conn_slot_t *s = NULL;
    for (int i = 0; i < t->n && !s; i++)
        if (t->slot[i].state == SLOT_FREE) s = &t->slot[i];
    if (s) {
        *s = (conn_slot_t){SLOT_PENDING, fd, 1, now, now + t->deadline_s, peer, t->open >= t->max};
        t->pending++, t->open++;
    }
    pthread_mutex_unlock(&t->mu);
    return s;
}

void conns_close(conns_t *t, conn_slot_t *s)
{
    if (!s) return;
    pthread_mutex_lock(&t->mu);
    if (s->state == SLOT_PENDING) t->pending--;
    s->state = SLOT_FREE;
    t->open--;
    pthread_mutex_unlock(&t->mu);
}

int conns_over(conns_t *t, const conn_slot_t *s)
{
    if (!s) return 1;
    pthread_mutex_lock(&t->mu);
    const int over = s->over;
    pthread_mutex_unlock(&t->mu);
    return over;
}

void conns_started(conns_t *t, conn_slot_t *s)
{
    if (!s) return;
    pthread_mutex_lock(&t->mu);
    s->owed = 1;
    pthread_mutex_unlock(&t->mu);
}

int conns_answer(conns_t *t, conn_slot_t *s)
{
    if (!s) return 0;
    pthread_mutex_lock(&t->mu);
    const int expired = s->state == SLOT_EXPIRED;
    if (s->state == SLOT_PENDING) s->state = SLOT_ANSWERING, t->pending--;
    pthread_mutex_unlock(&t->mu);
    return expired ? -1 : 0;
}

void conns_rearm(conns_t *t, conn_slot_t *s)
{
    if (!s) return;
    pthread_mutex_lock(&t->mu);
    if (s->state == SLOT_ANSWERING) {
        const double now = now_s();
        s->state = SLOT_PENDING, s->owed = 0, s->opened = now, s->deadline = now + t->deadline_s;
        s->over = t->open > t->max; /* its next request is served once the others are under the limit */
        t->pending++;
    }
    pthread_mutex_unlock(&t->mu);
}
