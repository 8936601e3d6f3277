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
#include "completion.h"

typedef struct {
    char *body;
    size_t n;
    int too_large;
} conn_t;

static enum MHD_Result respond(struct MHD_Connection *c, unsigned status, const char *type, char *buf, size_t n)
{
    if (!buf) return MHD_NO; /* out of memory: libmicrohttpd closes the connection */
    struct MHD_Response *r = MHD_create_response_from_buffer(n, buf, MHD_RESPMEM_MUST_FREE);
    if (!r) return free(buf), MHD_NO;
    const enum MHD_Result ret = MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type) == MHD_YES
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
    return respond_json(c, status, json_pack("{s:{s:s,s:s}}", "error", "message", msg, "type", type));
}

/* An optional integer field into *v, within [lo, hi]. 0, or 1 after filling why. */
static int get_int(json_t *o, const char *key, long long lo, long long hi, long long *v, char *why, size_t n)
{
    json_t *x = json_object_get(o, key);
    if (!x) return 0;
    if (!json_is_integer(x)) return snprintf(why, n, "%s must be an integer", key), 1;
    const long long y = json_integer_value(x);
    if (y < lo || y > hi) return snprintf(why, n, "%s = %lld: must be in [%lld, %lld]", key, y, lo, hi), 1;
    *v = y;
    return 0;
}

/* The request's fields into r (prompt copied as byte tokens) and *stream. 0, or 1 after filling
 * why. */
static int parse_request(const http_t *h, json_t *o, serve_req_t *r, int *stream, char *why, size_t n)
{
    static const char *const known[] = {"prompt", "max_tokens", "temperature", "top_k", "seed", "request_id", "stream",
                                        "model", NULL};
    const char *key;
    json_t *val;
    json_object_foreach(o, key, val) {
        int k = 0;
        while (known[k] && strcmp(known[k], key)) k++;
        if (!known[k]) return snprintf(why, n, "unknown field \"%.64s\"", key), 1;
    }
    json_t *p = json_object_get(o, "prompt"), *t = json_object_get(o, "temperature"), *st = json_object_get(o, "stream");
    if (!p || !json_is_string(p)) return snprintf(why, n, "prompt (a string) is required"), 1;
    if (st && !json_is_boolean(st)) return snprintf(why, n, "stream must be true or false"), 1;
    *stream = st && json_is_true(st);
    if (t && !json_is_number(t)) return snprintf(why, n, "temperature must be a number"), 1;
    long long max_tokens = 16, top_k = 0, seed = 0, rid = 0;
    if (get_int(o, "max_tokens", 0, h->T, &max_tokens, why, n) || get_int(o, "top_k", 0, h->V, &top_k, why, n) ||
        get_int(o, "seed", 0, INT64_MAX, &seed, why, n) || get_int(o, "request_id", 0, INT64_MAX, &rid, why, n))
        return 1;
    r->sample = (sampler_cfg_t){t ? (float)json_number_value(t) : 1.0f, (int)top_k, (uint64_t)seed};
    const char *bad_sample = sampler_cfg_refusal(&r->sample, h->V); /* the client's mistake: not in the log */
    if (bad_sample) return snprintf(why, n, "temperature %g: %s", (double)r->sample.temperature, bad_sample), 1;
    const size_t len = json_string_length(p);
    const char *s = json_string_value(p);
    if (len >= (size_t)h->T) return snprintf(why, n, "the prompt has %zu bytes; the context allows at most %d", len, h->T - 1), 1;
    r->nprompt = (int)len, r->max_tokens = (int)max_tokens, r->request_id = (uint64_t)rid;
    for (size_t i = 0; i < len; i++) r->prompt[i] = (unsigned char)s[i];
    const char *bad = completion_refusal(r->prompt, r->nprompt, h->T, h->V);
    if (bad) return snprintf(why, n, "%s", bad), 1;
    return 0;
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

static const char *finish_reason(const serve_req_t *r) { return r->state == REQ_CONTEXT ? "context" : "length"; }

static json_t *completion_json(const serve_req_t *r)
{
    char id[64];
    snprintf(id, sizeof id, "cmpl-%llu", (unsigned long long)r->serial);
    return json_pack("{s:s,s:s,s:[{s:i,s:o,s:o,s:s}],s:{s:i,s:i,s:i}}", "id", id, "object", "text_completion", "choices",
                     "index", 0, "text", tokens_text(r->out, r->nout), "tokens", tokens_array(r->out, r->nout),
                     "finish_reason", finish_reason(r), "usage", "prompt_tokens", r->nprompt,
                     "completion_tokens", r->nout, "total_tokens", r->nprompt + r->nout);
}

/* A streamed completion (server-sent events): one event per batch of new tokens, as the batcher
 * makes them; the last carries finish_reason (or the error), then "data: [DONE]". */
typedef struct {
    http_t *h;
    serve_req_t *r;
    int sent, done;
    char *ev;
    size_t len, off;
} stream_t;

/* The next event's text into st->ev (malloc'd), waiting for tokens; 0 after [DONE]. */
static int stream_next(stream_t *st)
{
    serve_req_t *r = st->r;
    if (st->done) return 0;
    int state;
    const int n = batcher_wait(st->h->b, r, st->sent, &state);
    json_t *j;
    char id[64];
    snprintf(id, sizeof id, "cmpl-%llu", (unsigned long long)r->serial);
    const int ended = state == REQ_LENGTH || state == REQ_CONTEXT;
    const char *reason = state == REQ_CONTEXT ? "context" : "length";
    if (n > st->sent) {
        j = json_pack("{s:s,s:s,s:[{s:i,s:o,s:o,s:o}]}", "id", id, "object", "text_completion", "choices", "index", 0, "text",
                      tokens_text(r->out + st->sent, n - st->sent), "tokens", tokens_array(r->out + st->sent, n - st->sent),
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
    json_error_t je;
    json_t *o = json_loadb(cn->body ? cn->body : "", cn->n, JSON_REJECT_DUPLICATES, &je);
    if (!o) return respond_error(h, c, 400, "invalid_request_error", "malformed JSON at line %d column %d: %s", je.line, je.column, je.text);
    if (!json_is_object(o)) {
        json_decref(o);
        return respond_error(h, c, 400, "invalid_request_error", "the body must be a JSON object");
    }
    /* on the heap: a streamed request outlives this call (batcher_release frees it) */
    serve_req_t *r = calloc(1, sizeof *r);
    char why[320];
    int stream = 0, bad = 1;
    if (r && (r->prompt = malloc((size_t)h->T * sizeof *r->prompt)) && (r->out = malloc(((size_t)h->T + 1) * sizeof *r->out)))
        bad = parse_request(h, o, r, &stream, why, sizeof why);
    else snprintf(why, sizeof why, "out of memory");
    json_decref(o);
    if (bad) {
        const enum MHD_Result ret = respond_error(h, c, r && r->out ? 400 : 500, "invalid_request_error", "%s", why);
        serve_req_free(r);
        return ret;
    }
    if (stream) return stream_start(h, c, r);
    r->serial = __atomic_add_fetch(&h->served, 1, __ATOMIC_RELAXED);
    batcher_run(h->b, r);
    const enum MHD_Result ret = r->state == REQ_FAILED ? respond_error(h, c, 503, "server_error", "%s", r->error)
                                                       : respond_json(c, 200, completion_json(r));
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

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *data, size_t *size, void **con_cls)
{
    http_t *h = cls;
    (void)version;
    conn_t *cn = *con_cls;
    if (!cn) { /* the headers: the body, if any, comes in the calls that follow */
        if (!(cn = calloc(1, sizeof *cn))) return MHD_NO;
        *con_cls = cn;
        return MHD_YES;
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
    (void)cls, (void)c, (void)why;
    conn_t *cn = *con_cls;
    if (cn) free(cn->body), free(cn);
    *con_cls = NULL;
}

int http_start(http_t *h, batcher_t *b, const http_listen_t *l, int T, int V)
{
    memset(h, 0, sizeof *h);
    h->b = b, h->T = T, h->V = V, h->token = l->token;
    const int port = l->port;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = l->addr;
    h->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL,
                            NULL, on_request, h, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&a, MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned)10, MHD_OPTION_CONNECTION_LIMIT, (unsigned)64, MHD_OPTION_NOTIFY_COMPLETED,
                            on_completed, h, MHD_OPTION_END);
    if (!h->d) return MP_FAIL("libmicrohttpd: MHD_start_daemon on port %d failed (port in use?)", port);
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
    if (h->d) MHD_stop_daemon(h->d);
    h->d = NULL;
}
