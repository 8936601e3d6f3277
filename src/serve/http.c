/* The HTTP/JSON front end (http.h). One thread per connection (libmicrohttpd's), each blocking in
 * batcher_run while its request is in the batch. */
#include "http.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "check.h"
#include "conns.h"
#include "request.h"

typedef struct {
    char *body;
    size_t n;
    int too_large;
} conn_t;

/* Seconds a client is told to wait (Retry-After) with a 503 or 429: the server is busy or its
 * pipeline is failing over, which takes about that long. */
#define HTTP_RETRY_AFTER "1"

static enum MHD_Result respond(struct MHD_Connection *c, unsigned status, const char *type, char *buf, size_t n)
{
    if (!buf) return MHD_NO; /* out of memory: libmicrohttpd closes the connection */
    struct MHD_Response *r = MHD_create_response_from_buffer(n, buf, MHD_RESPMEM_MUST_FREE);
    if (!r) return free(buf), MHD_NO;
    const int retry = status == 503 || status == 429;
    const enum MHD_Result ret = MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type) == MHD_YES &&
                                        (!retry || MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER,
                                                                           HTTP_RETRY_AFTER) == MHD_YES)
                                    ? MHD_queue_response(c, status, r)
                                    : MHD_NO; /* out of memory: the connection is closed */
    MHD_destroy_response(r);
    return ret;
}

/* Answers with a JSON object (taken). */
static enum MHD_Result respond_json(struct MHD_Connection *c, unsigned status, json_t *j)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return respond(c, status, "application/json", s, s ? strlen(s) : 0);
}

static enum MHD_Result respond_error(http_t *h, struct MHD_Connection *c, unsigned status, const char *type,
                                     const char *fmt, ...) MP_PRINTF(5, 6);
static enum MHD_Result respond_error(http_t *h, struct MHD_Connection *c, unsigned status, const char *type,
                                     const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (status < 500) __atomic_add_fetch(&h->bad_requests, 1, __ATOMIC_RELAXED);
    char *body = request_error_json(type, msg);
    return respond(c, status, "application/json", body, body ? strlen(body) : 0);
}

/* Tokens out[0..n) as a JSON string: their bytes when they are UTF-8, else with every byte above
 * 0x7f replaced by U+FFFD (the exact bytes are in "tokens"). */
static json_t *tokens_text(const int *out, int n)
{
    char *s = calloc((size_t)n * 3 + 1, 1);
    if (!s) return NULL;
    for (int i = 0; i < n; i++) s[i] = (char)out[i];
    json_t *j = json_stringn(s, (size_t)n);
    if (!j) {
        size_t k = 0;
        for (int i = 0; i < n; i++)
            if (out[i] < 0x80) s[k++] = (char)out[i];
            else memcpy(s + k, "\xef\xbf\xbd", 3), k += 3;
        j = json_stringn(s, k);
    }
    free(s);
    return j;
}

static json_t *tokens_array(const int *out, int n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++) json_array_append_new(a, json_integer(out[i]));
    return a;
}

/* The text of a completion's tokens out[0..n): byte tokens as tokens_text; gpt2's decoded bytes from
 * byte *from on, up to the last whole character unless final (then all of them), into a JSON string;
 * *from advances past what was taken. */
static json_t *completion_text(const http_t *h, const int *out, int n, size_t *from, int final)
{
    if (!h->tok || h->tok->kind == TOK_BYTES) {
        json_t *j = tokens_text(out + *from, n - (int)*from);
        *from = (size_t)n;
        return j;
    }
    unsigned char *b;
    size_t nb;
    if (tok_decode(h->tok, out, (size_t)n, &b, &nb) != MP_OK) return NULL;
    const size_t end = final ? nb : request_text_whole(b, nb), at = *from < end ? *from : end;
    size_t k;
    char *text = request_text_clean(b + at, end - at, &k);
    json_t *j = text ? json_stringn(text, k) : NULL;
    free(text), free(b);
    *from = end;
    return j;
}

static const char *finish_reason(const serve_req_t *r)
{
    return r->state == REQ_CONTEXT ? "context" : r->state == REQ_STOP ? "stop" : "length";
}

static json_t *completion_json(const http_t *h, const serve_req_t *r)
{
    char id[64];
    size_t from = 0;
    snprintf(id, sizeof id, "cmpl-%llu", (unsigned long long)r->serial);
    return json_pack("{s:s,s:s,s:[{s:i,s:o,s:o,s:s}],s:{s:i,s:i,s:i}}", "id", id, "object", "text_completion", "choices",
                     "index", 0, "text", completion_text(h, r->out, r->nout, &from, 1), "tokens", tokens_array(r->out, r->nout),
                     "finish_reason", finish_reason(r), "usage", "prompt_tokens", r->nprompt,
                     "completion_tokens", r->nout, "total_tokens", r->nprompt + r->nout);
}

/* A streamed completion (server-sent events): one event per token step, its token; the last
 * carries finish_reason (or the error), then "data: [DONE]". A reader slower than the batcher
 * finds several new tokens at once and still gets one event each (so what a client sees does not
 * depend on how fast it reads). An event's "text", with gpt2, is the decoded bytes of whole
 * characters not yet sent (a character split across tokens goes out with the event of its last
 * byte; the last event carries whatever is left, invalid bytes as U+FFFD). */
typedef struct {
    http_t *h;
    serve_req_t *r;
    int sent, done;
    size_t text_sent;   /* tokens' text already sent: tokens (byte) or decoded bytes (gpt2) */
    char *ev;
    size_t len, off;
} stream_t;

/* The next event's text into st->ev (malloc'd), waiting for tokens; 0 after [DONE]. */
static int stream_next(stream_t *st)
{
    serve_req_t *r = st->r;
    if (st->done) return 0;
    int state;
    const int made = batcher_wait(st->h->b, r, st->sent, &state);
    const int n = made > st->sent ? st->sent + 1 : made; /* one token step an event */
    json_t *j;
    char id[64];
    snprintf(id, sizeof id, "cmpl-%llu", (unsigned long long)r->serial);
    const int ended = n == made && (state == REQ_LENGTH || state == REQ_CONTEXT || state == REQ_STOP);
    const char *reason = state == REQ_CONTEXT ? "context" : state == REQ_STOP ? "stop" : "length";
    if (n > st->sent) {
        j = json_pack("{s:s,s:s,s:[{s:i,s:o,s:o,s:o}]}", "id", id, "object", "text_completion", "choices", "index", 0, "text",
                      completion_text(st->h, r->out, n, &st->text_sent, ended), "tokens", tokens_array(r->out + st->sent, n - st->sent),
                      "finish_reason", ended ? json_string(reason) : json_null());
        st->sent = n;
        st->done = ended;
    } else if (state == REQ_FAILED) {
        j = json_pack("{s:{s:s,s:s}}", "error", "message", r->error, "type", "server_error");
        st->done = 1;
    } else {
        j = json_pack("{s:s,s:s,s:[{s:i,s:s,s:[],s:s}]}", "id", id, "object", "text_completion", "choices", "index", 0,
                      "text", "", "tokens", "finish_reason", reason);
        st->done = 1;
    }
    char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!body) return -1;
    const size_t need = strlen(body) + 32;
    free(st->ev);
    if (!(st->ev = malloc(need))) return free(body), -1;
    st->len = (size_t)snprintf(st->ev, need, "data: %s\n\n%s", body, st->done ? "data: [DONE]\n\n" : "");
    st->off = 0;
    free(body);
    return 1;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    stream_t *st = cls;
    (void)pos;
    if (st->off == st->len) {
        const int rc = stream_next(st);
        if (rc <= 0) return rc == 0 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
    }
    const size_t n = st->len - st->off < max ? st->len - st->off : max;
    memcpy(buf, st->ev + st->off, n);
    st->off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls)
{
    stream_t *st = cls;
    batcher_release(st->h->b, st->r);
    free(st->ev), free(st);
}

static enum MHD_Result stream_start(http_t *h, struct MHD_Connection *c, serve_req_t *r)
{
    stream_t *st = calloc(1, sizeof *st);
    if (!st) return serve_req_free(r), MHD_NO;
    st->h = h, st->r = r;
    r->serial = __atomic_add_fetch(&h->served, 1, __ATOMIC_RELAXED);
    batcher_submit(h->b, r);
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, st, stream_free);
    if (!resp) return stream_free(st), MHD_NO;
    const enum MHD_Result ret =
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream") == MHD_YES &&
                MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache") == MHD_YES
            ? MHD_queue_response(c, 200, resp)
            : MHD_NO; /* out of memory: the connection is closed, stream_free runs with the response */
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result completions(http_t *h, struct MHD_Connection *c, conn_t *cn)
{
    if (cn->too_large) return respond_error(h, c, 413, "invalid_request_error", "the body is over %d bytes", HTTP_MAX_BODY);
    /* on the heap: a streamed request outlives this call (batcher_release frees it) */
    serve_req_t *r = calloc(1, sizeof *r);
    char why[320];
    int stream = 0, bad = 1;
    if (r && (r->prompt = malloc((size_t)h->T * sizeof *r->prompt)) && (r->out = malloc(((size_t)h->T + 1) * sizeof *r->out)))
        bad = request_parse(cn->body, cn->n, h->T, h->V, h->tok, r, &stream, why, sizeof why);
    else snprintf(why, sizeof why, "out of memory");
    if (!bad && h->tok && h->tok->kind != TOK_BYTES) r->sample_v = tok_vocab(h->tok);
    if (r) r->eos = h->tok ? tok_eos(h->tok) : -1;
    if (bad) {
        const enum MHD_Result ret = respond_error(h, c, r && r->out ? 400 : 500, "invalid_request_error", "%s", why);
        serve_req_free(r);
        return ret;
    }
    if (stream) return stream_start(h, c, r);
    r->serial = __atomic_add_fetch(&h->served, 1, __ATOMIC_RELAXED);
    batcher_run(h->b, r);
    const enum MHD_Result ret = r->state == REQ_FAILED ? respond_error(h, c, 503, "server_error", "%s", r->error)
                                                       : respond_json(c, 200, completion_json(h, r));
    serve_req_free(r);
    return ret;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static enum MHD_Result metrics(http_t *h, struct MHD_Connection *c)
{
    batcher_t *b = h->b;
    double lat[BATCHER_LATENCIES];
    pthread_mutex_lock(&b->mu);
    const uint64_t nl = b->nlat < BATCHER_LATENCIES ? b->nlat : BATCHER_LATENCIES;
    memcpy(lat, b->lat, nl * sizeof *lat);
    const uint64_t ok = b->requests_ok, failed = b->requests_failed, toks = b->tokens_out, steps = b->steps;
    const uint64_t failovers = b->failovers, fo_delta = b->failovers_delta, fo_replay = b->failovers_replay;
    const uint64_t refed = b->refed_positions, replay = b->replay_positions;
    const double fo_last = b->failover_last_s, fo_max = b->failover_max_s;
    const int queued = b->queued, running = b->running, down = b->down;
    const double busy = b->busy_s;
    pthread_mutex_unlock(&b->mu);
    qsort(lat, nl, sizeof *lat, cmp_double);
    char *s = malloc(4096);
    if (!s) return MHD_NO;
    int n = snprintf(s, 4096,
                     "# TYPE mindpipe_requests_total counter\nmindpipe_requests_total{result=\"ok\"} %llu\n"
                     "mindpipe_requests_total{result=\"failed\"} %llu\nmindpipe_requests_total{result=\"bad_request\"} %llu\n"
                     "# TYPE mindpipe_tokens_generated_total counter\nmindpipe_tokens_generated_total %llu\n"
                     "# TYPE mindpipe_steps_total counter\nmindpipe_steps_total %llu\n"
                     "# TYPE mindpipe_queue_length gauge\nmindpipe_queue_length %d\n"
                     "# TYPE mindpipe_running_sequences gauge\nmindpipe_running_sequences %d\n"
                     "# TYPE mindpipe_tokens_per_second gauge\nmindpipe_tokens_per_second %.3f\n"
                     "# TYPE mindpipe_failovers_total counter\nmindpipe_failovers_total %llu\n"
                     "# TYPE mindpipe_failover_seconds gauge\nmindpipe_failover_seconds{which=\"last\"} %.6f\n"
                     "mindpipe_failover_seconds{which=\"max\"} %.6f\n"
                     "# TYPE mindpipe_failovers_resumed_total counter\n"
                     "mindpipe_failovers_resumed_total{from=\"delta\"} %llu\nmindpipe_failovers_resumed_total{from=\"replay\"} %llu\n"
                     "# TYPE mindpipe_failover_positions_total counter\n"
                     "mindpipe_failover_positions_total{which=\"refed\"} %llu\nmindpipe_failover_positions_total{which=\"replay\"} %llu\n"
                     "# TYPE mindpipe_up gauge\nmindpipe_up %d\n"
                     "# TYPE mindpipe_request_latency_seconds summary\n",
                     (unsigned long long)ok, (unsigned long long)failed,
                     (unsigned long long)__atomic_load_n(&h->bad_requests, __ATOMIC_RELAXED), (unsigned long long)toks,
                     (unsigned long long)steps, queued, running, busy > 0 ? toks / busy : 0.0, (unsigned long long)failovers,
                     fo_last, fo_max, (unsigned long long)fo_delta, (unsigned long long)fo_replay,
                     (unsigned long long)refed, (unsigned long long)replay, !down);
    static const double qs[] = {0.5, 0.9, 0.99};
    for (int i = 0; i < 3 && nl; i++)
        n += snprintf(s + n, 4096 - (size_t)n, "mindpipe_request_latency_seconds{quantile=\"%g\"} %.6f\n", qs[i],
                      lat[(size_t)(qs[i] * (double)(nl - 1) + 0.5)]);
    n += snprintf(s + n, 4096 - (size_t)n, "mindpipe_request_latency_seconds_count %llu\n", (unsigned long long)nl);
    return respond(c, 200, "text/plain; version=0.0.4", s, (size_t)n);
}

static enum MHD_Result health(http_t *h, struct MHD_Connection *c)
{
    pthread_mutex_lock(&h->b->mu);
    json_t *j = h->b->down ? json_pack("{s:s,s:s}", "status", "down", "reason", h->b->down_why) : json_pack("{s:s}", "status", "ok");
    const int down = h->b->down;
    pthread_mutex_unlock(&h->b->mu);
    return respond_json(c, down ? 503 : 200, j);
}

/* Does the Authorization header carry "Bearer token"? Compared in constant time over the token's
 * length: the time taken says nothing of how much of a guess was right. */
static int token_ok(const char *token, const char *header)
{
    static const char bearer[] = "Bearer ";
    if (!header || strncmp(header, bearer, sizeof bearer - 1)) return 0;
    header += sizeof bearer - 1;
    const size_t n = strlen(token);
    if (strlen(header) != n) return 0;
    unsigned char d = 0;
    for (size_t i = 0; i < n; i++) d |= (unsigned char)(header[i] ^ token[i]);
    return d == 0;
}

static conn_slot_t *slot_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* The request's head, before its body: refused at once when it is too large or announces a body
 * over the limit (no need to read it). MHD_YES with nothing queued: read on. */
static enum MHD_Result on_head(http_t *h, struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    const int big_head = ci && ci->header_size > HTTP_MAX_HEADER;
    /* libmicrohttpd has parsed it already (digits only, no overflow: else it answered itself) */
    const int big_body = cl && strtoull(cl, NULL, 10) > HTTP_MAX_BODY;
    if (!big_head && !big_body) return MHD_YES;
    if (conns_answer(&h->conns, slot_of(c)) < 0) return MHD_NO;
    if (big_head)
        return respond_error(h, c, 431, "invalid_request_error", "the request line and headers have %zu bytes; at most %d",
                             ci->header_size, HTTP_MAX_HEADER);
    return respond_error(h, c, 413, "invalid_request_error", "Content-Length %s: the body is over %d bytes", cl, HTTP_MAX_BODY);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *data, size_t *size, void **con_cls)
{
    http_t *h = cls;
    (void)version;
    conn_t *cn = *con_cls;
    if (!cn) { /* the headers: the body, if any, comes in the calls that follow */
        if (!(cn = calloc(1, sizeof *cn))) return MHD_NO;
        *con_cls = cn;
        return on_head(h, c);
    }
    if (*size) {
        if (cn->n + *size > HTTP_MAX_BODY) cn->too_large = 1; /* read on and drop: then 413 */
        else {
            char *nb = realloc(cn->body, cn->n + *size + 1);
            if (!nb) return MHD_NO;
            memcpy(nb + cn->n, data, *size);
            cn->body = nb, cn->n += *size;
        }
        *size = 0;
        return MHD_YES;
    }
    /* the request is whole: its deadline ends here, unless it passed (then a 408 went out) */
    conn_slot_t *slot = slot_of(c);
    if (conns_answer(&h->conns, slot) < 0) return MHD_NO;
    /* a connection accepted beyond the limit (libmicrohttpd takes a quarter more): busy, not a silent close */
    if (conns_over(&h->conns, slot))
        return respond_error(h, c, 503, "server_busy", "every one of the server's %d connections is taken: retry "
                             "after " HTTP_RETRY_AFTER " s", h->conns.max);
    if (h->token && !token_ok(h->token, MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION)))
        return respond_error(h, c, 401, "authentication_error", "send the server's access token as Authorization: Bearer TOKEN");
    const int post = !strcmp(method, "POST"), get = !strcmp(method, "GET");
    if (!strcmp(url, "/v1/completions"))
        return post ? completions(h, c, cn) : respond_error(h, c, 405, "invalid_request_error", "%s: use POST", url);
    if (!strcmp(url, "/health") || !strcmp(url, "/metrics")) {
        if (!get) return respond_error(h, c, 405, "invalid_request_error", "%s: use GET", url);
        return url[1] == 'h' ? health(h, c) : metrics(h, c);
    }
    return respond_error(h, c, 404, "invalid_request_error", "no such path %.200s (POST /v1/completions, GET /health, GET /metrics)", url);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode why)
{
    http_t *h = cls;
    conn_t *cn = *con_cls;
    if (cn) free(cn->body), free(cn);
    *con_cls = NULL;
    if (why == MHD_REQUEST_TERMINATED_COMPLETED_OK) conns_rearm(&h->conns, slot_of(c)); /* kept alive: the next request's deadline */
}

/* Accepted and closed connections (closed: before libmicrohttpd closes the socket). */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode code)
{
    http_t *h = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ai = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        uint32_t peer = 0;
        if (ai && ai->client_addr && ai->client_addr->sa_family == AF_INET)
            peer = ((const struct sockaddr_in *)(const void *)ai->client_addr)->sin_addr.s_addr;
        *socket_context = ci ? conns_open(&h->conns, ci->connect_fd, peer) : NULL;
    } else {
        conns_close(&h->conns, *socket_context);
        *socket_context = NULL;
    }
}

/* The request line has come: a 408 is owed if the deadline passes now. */
static void *on_request_line(void *cls, const char *uri, struct MHD_Connection *c)
{
    http_t *h = cls;
    (void)uri;
    conns_started(&h->conns, slot_of(c));
    return NULL;
}

int http_start(http_t *h, batcher_t *b, const http_listen_t *l, int T, int V, const tokenizer_t *tok)
{
    memset(h, 0, sizeof *h);
    h->b = b, h->T = T, h->V = V, h->token = l->token, h->tok = tok;
    const int port = l->port;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = l->addr;
    const int max = l->max_conns ? l->max_conns : HTTP_MAX_CONNS;
    const double deadline = l->deadline_s > 0 ? l->deadline_s : HTTP_DEADLINE_S;
    const int per_client = l->per_client < 0 ? HTTP_PER_CLIENT : l->per_client;
    if (conns_init(&h->conns, max, max / 8 > 0 ? max / 8 : 1, deadline, per_client) != MP_OK) return MP_ERR;
    /* MHD_USE_POLL: poll, not select, in each connection's thread (no FD_SETSIZE bound). No
     * per-address connection limit in libmicrohttpd: it closes the connection over it with no reply,
     * and behind a gateway every request comes from one address (conns.h bounds slow requests per
     * address instead). A quarter more connections than the table: those get a 503 with
     * Retry-After, not a close. */
    h->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG,
                            0, NULL, NULL, on_request, h, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&a,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)(max + max / 4),
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_MEMORY_LIMIT,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
                            MHD_OPTION_URI_LOG_CALLBACK, on_request_line, h, MHD_OPTION_END);
    if (!h->d) {
        conns_free(&h->conns);
        return MP_FAIL("libmicrohttpd: MHD_start_daemon on port %d failed (port in use?)", port);
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_LISTEN_FD);
    struct sockaddr_in got;
    socklen_t len = sizeof got;
    if (!info || getsockname(info->listen_fd, (struct sockaddr *)&got, &len) != 0) {
        http_stop(h);
        return MP_FAIL("libmicrohttpd: the listening socket's port is unknown");
    }
    h->port = ntohs(got.sin_port);
    return MP_OK;
}

void http_stop(http_t *h)
{
    conns_fini(&h->conns); /* no sweep while libmicrohttpd closes the connections */
    if (h->d) MHD_stop_daemon(h->d);
    h->d = NULL;
    conns_free(&h->conns);
}
