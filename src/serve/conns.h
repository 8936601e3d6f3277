/* The front end's connections and their deadlines (http.c): a slow client cannot hold a connection
 * for long, nor take every connection.
 *
 * Each connection has from its accept (and, kept alive, from the end of each response) `deadline_s`
 * seconds to send a whole request, head and body. A sweeper thread looks every 100 ms; a
 * connection past its deadline is answered 408 with a JSON error written straight to its socket
 * (libmicrohttpd 0.9.75 has no way to queue a response from another thread, and none is queued:
 * its request is unfinished) and shut down, so that libmicrohttpd's thread reads the end and closes
 * it. A kept-alive connection that has not begun its next request is shut down without a 408.
 * Unfinished requests take at most `max - reserve` connections: a new connection beyond that
 * evicts the oldest unfinished one (the same 408), so that /health and quick requests always find
 * one of the `reserve` connections left. One address holds at most `per_client` slow requests (not
 * whole CONNS_SLOW_S after the accept): the sweeper answers its newest ones beyond that 408 too.
 * Requests being served are never counted, so a gateway that sends every request from one address
 * is limited by the connections alone. A connection accepted while max are open is over the limit
 * (conns_over): it has a deadline like the others, and the front end answers its request 503 with
 * Retry-After (libmicrohttpd accepts max + max/4). */
#ifndef MP_CONNS_H
#define MP_CONNS_H

#include <pthread.h>
#include <stdint.h>

typedef struct conn_slot conn_slot_t;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t wake;
    pthread_t sweeper;
    int stop, started;
    conn_slot_t *slot;        /* (n) */
    int n;                    /* slots: max and a quarter more (the overflow, answered 503) */
    int max, cap;             /* connections served at most; unfinished requests at most (max − reserve) */
    int open;                 /* slots in use */
    int pending;              /* connections whose request is unfinished */
    int per_client;           /* slow requests one address may hold (0: no limit) */
    double deadline_s;
    uint64_t expired, evicted; /* connections closed at their deadline, evicted for a newer one */
    uint64_t slow_evicted;    /* slow requests answered 408 over their address's per_client */
} conns_t;

/* A request not whole this long after its connection's accept (or its last response) is slow: it
 * counts against its address's per_client. Short enough that a slow client holds no more than
 * per_client connections for a second; long enough for a whole request over a real network. */
#define CONNS_SLOW_S 0.3

/* A table of max connections, unfinished requests in at most max − reserve of them, each with
 * deadline_s seconds, at most per_client slow ones from one address (0: no limit); starts the
 * sweeper. MP_OK or MP_ERR (reported). */
int conns_init(conns_t *t, int max, int reserve, double deadline_s, int per_client);
/* Stops the sweeper (before libmicrohttpd closes the connections) and frees the table. */
void conns_fini(conns_t *t);
void conns_free(conns_t *t);

/* A connection from peer (an IPv4 address, network order; 0: unknown) accepted on socket fd
 * (libmicrohttpd's notify STARTED): its slot, or NULL when even the overflow is full (libmicrohttpd's
 * limit, max + max/4, makes that impossible). */
conn_slot_t *conns_open(conns_t *t, int fd, uint32_t peer);
/* Whether s was accepted while max connections were open (NULL: no slot): its request is answered
 * 503 with Retry-After. */
int conns_over(conns_t *t, const conn_slot_t *s);
/* Closed (notify CLOSED, before libmicrohttpd closes the socket): the slot is free again. */
void conns_close(conns_t *t, conn_slot_t *s);
/* The request line has come (a 408 is then owed at the deadline). */
void conns_started(conns_t *t, conn_slot_t *s);
/* The request is whole, or is being answered early: its deadline ends. 0, or −1 when the deadline
 * already passed (a 408 went out: the caller answers nothing and closes). */
int conns_answer(conns_t *t, conn_slot_t *s);
/* The response is sent: a kept-alive connection has deadline_s for its next request. */
void conns_rearm(conns_t *t, conn_slot_t *s);

#endif
