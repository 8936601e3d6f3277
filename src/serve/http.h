/* The serving front end's HTTP/JSON interface (libmicrohttpd, jansson), on loopback unless told
 * otherwise (then with an access token):
 *   POST /v1/completions  {"prompt": str, "max_tokens": int, "temperature": num, "top_k": int,
 *                          "seed": int, "request_id": int, "stream": bool} → 200 {"id", "object":
 *                          "text_completion", "choices": [{"text", "tokens", "finish_reason"}],
 *                          "usage"}, or with stream server-sent events (one per token step, then
 *                          "data: [DONE]"); bad input → 4xx {"error": {"message", "type"}}; the
 *                          pipeline down → 503.
 *   GET /health           200 {"status": "ok"} or 503 {"status": "down", "reason"}
 *   GET /metrics          Prometheus text: requests, tokens, queue, slots in use, tokens/s,
 *                          latency quantiles, failovers and their duration, failovers resumed
 *                          from standbys' deltas or replayed and the positions fed again.
 * A body over HTTP_MAX_BODY bytes is refused (413); a connection idle for 10 s is closed (a client
 * that never finishes sending holds one connection thread that long, never the batch). */
#ifndef MP_HTTP_H
#define MP_HTTP_H

#include "batcher.h"

#define HTTP_MAX_BODY 65536

/* Where to listen: an IPv4 address (network order) and port (0: any free one), and the access
 * token every request must send as "Authorization: Bearer TOKEN" (NULL: none). */
typedef struct {
    uint32_t addr;
    int port;
    const char *token;
} http_listen_t;

typedef struct {
    batcher_t *b;
    const char *token;
    struct MHD_Daemon *d;
    int port;                 /* the bound port (the one asked, or the one the system chose for 0) */
    int T, V;
    uint64_t bad_requests;    /* 4xx answers (atomic) */
    uint64_t served;          /* requests accepted, numbering their ids "cmpl-N" (atomic) */
} http_t;

/* Listens where l says (port 0: any free port; http->port says which) and serves requests through
 * b; with a token, a request without it is answered 401. MP_OK or MP_ERR (reported). */
int http_start(http_t *h, batcher_t *b, const http_listen_t *l, int T, int V);
void http_stop(http_t *h);

#endif
