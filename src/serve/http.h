/* The serving front end's HTTP/JSON interface (libmicrohttpd, jansson), on loopback unless told
 * otherwise (then with an access token):
 *   POST /v1/completions  {"prompt": str, "max_tokens": int, "temperature": num, "top_k": int,
 *                          "seed": int, "request_id": int, "stream": bool} → 200 {"id", "object":
 *                          "text_completion", "choices": [{"text", "tokens", "finish_reason"}],
 *                          the prompt encoded and the tokens decoded by the checkpoint's tokenizer,
 *                          "usage"}, or with stream server-sent events (one per token step, then
 *                          "data: [DONE]"); bad input → 4xx {"error": {"message", "type"}}; the
 *                          pipeline down → 503.
 *   GET /health           200 {"status": "ok"} or 503 {"status": "down", "reason"}
 *   GET /metrics          Prometheus text: requests, tokens, queue, slots in use, tokens/s,
 *                          latency quantiles, failovers and their duration, failovers resumed
 *                          from standbys' deltas or replayed and the positions fed again.
 * A body over HTTP_MAX_BODY bytes is refused (413, at once when Content-Length says so), a head over
 * HTTP_MAX_HEADER bytes 431; a request not whole within the deadline (from the accept, or from the
 * last response on a kept-alive connection) is answered 408 and closed (conns.h); a connection idle
 * for 10 s is closed; one address's slow requests beyond the per-client limit are answered 408
 * (conns.h); a connection beyond the table's is answered 503, and every 503 carries Retry-After.
 * Every reply the front end composes is JSON; libmicrohttpd answers a few malformed requests itself
 * (docs/SERVING.md, "Limits and what clients see"). */
#ifndef MP_HTTP_H
#define MP_HTTP_H

#include "batcher.h"
#include "conns.h"
#include "tokenizer.h"

#define HTTP_MAX_BODY 65536
#define HTTP_MAX_HEADER 32768     /* the request line and headers, bytes */
#define HTTP_MEMORY_LIMIT 262144  /* libmicrohttpd's per-connection pool: a head beyond it gets its own 431 */
#define HTTP_MAX_CONNS 256
#define HTTP_PER_CLIENT 32
#define HTTP_DEADLINE_S 10.0

/* Where to listen: an IPv4 address (network order) and port (0: any free one), and the access
 * token every request must send as "Authorization: Bearer TOKEN" (NULL: none). The limits: at most
 * max_conns connections (0: HTTP_MAX_CONNS), of which an eighth are kept for requests that arrive
 * whole (conns.h); per_client slow requests from one address (0: no limit; −1: HTTP_PER_CLIENT);
 * deadline_s to send a whole request (0: HTTP_DEADLINE_S). */
typedef struct {
    uint32_t addr;
    int port;
    const char *token;
    int max_conns, per_client;
    double deadline_s;
} http_listen_t;

typedef struct {
    batcher_t *b;
    const char *token;
    struct MHD_Daemon *d;
    conns_t conns;            /* every connection's deadline */
    int port;                 /* the bound port (the one asked, or the one the system chose for 0) */
    int T, V;
    const tokenizer_t *tok;   /* the checkpoint's tokenizer (NULL: byte): prompts encoded, completions decoded */
    uint64_t bad_requests;    /* 4xx answers (atomic) */
    uint64_t served;          /* requests accepted, numbering their ids "cmpl-N" (atomic) */
} http_t;

/* Listens where l says (port 0: any free port; http->port says which) and serves requests through
 * b; with a token, a request without it is answered 401. Prompts are encoded and completions decoded
 * with tok (NULL or byte: a prompt's bytes are its tokens; it must outlive h). MP_OK or MP_ERR
 * (reported). */
int http_start(http_t *h, batcher_t *b, const http_listen_t *l, int T, int V, const tokenizer_t *tok);
void http_stop(http_t *h);

#endif
