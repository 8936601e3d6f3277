/* A completion request's body, and JSON errors (request.h). */
#include "request.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "completion.h"
#include "sampler.h"

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

/* The temperature as given (a double): refused unless 0 or within the sampler's range, so that
 * 1e-300 (a float 0) is not taken as greedy nor 1e300 (a float inf) reported as inf. */
static int get_temperature(json_t *t, float *temp, char *why, size_t n)
{
    if (!t) return *temp = 1.0f, 0;
    if (!json_is_number(t)) return snprintf(why, n, "temperature must be a number"), 1;
    const double x = json_number_value(t);
    if (!(x == 0.0 || (x >= 1e-3 && x <= 100.0)))
        return snprintf(why, n, "temperature %.10g: must be 0 (greedy) or in [0.001, 100]", x), 1;
    *temp = (float)x;
    return 0;
}

/* The prompt s[0..len) as tokens of tok into r->prompt (room for T). 0, or 1 after filling why. */
static int request_prompt(const tokenizer_t *tok, const char *s, size_t len, int T, serve_req_t *r, char *why, size_t n)
{
    if (!tok || tok->kind == TOK_BYTES) {
        if (len >= (size_t)T) return snprintf(why, n, "the prompt has %zu bytes; the context allows at most %d", len, T - 1), 1;
        for (size_t i = 0; i < len; i++) r->prompt[i] = (unsigned char)s[i];
        r->nprompt = (int)len;
        return 0;
    }
    uint32_t *ids = malloc(TOK_IDS_ROOM(len) * sizeof *ids);
    size_t m = 0;
    if (!ids || tok_encode(tok, (const unsigned char *)s, len, ids, &m) != MP_OK)
        return free(ids), snprintf(why, n, "out of memory encoding the prompt"), 1;
    if (m >= (size_t)T) {
        free(ids);
        return snprintf(why, n, "the prompt has %zu gpt2 tokens; the context allows at most %d", m, T - 1), 1;
    }
    for (size_t i = 0; i < m; i++) r->prompt[i] = (int)ids[i];
    r->nprompt = (int)m;
    free(ids);
    return 0;
}

/* The fields of object o into r and *stream. 0, or 1 after filling why. */
static int request_fields(json_t *o, int T, int V, const tokenizer_t *tok, serve_req_t *r, int *stream, char *why,
                          size_t n)
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
    json_t *p = json_object_get(o, "prompt"), *st = json_object_get(o, "stream");
    if (!p || !json_is_string(p)) return snprintf(why, n, "prompt (a string) is required"), 1;
    if (st && !json_is_boolean(st)) return snprintf(why, n, "stream must be true or false"), 1;
    *stream = st && json_is_true(st);
    float temp;
    long long max_tokens = T < 16 ? T : 16, top_k = 0, seed = 0, rid = 0; /* the default within [0, T] too */
    if (get_temperature(json_object_get(o, "temperature"), &temp, why, n) ||
        get_int(o, "max_tokens", 0, T, &max_tokens, why, n) || get_int(o, "top_k", 0, V, &top_k, why, n) ||
        get_int(o, "seed", 0, INT64_MAX, &seed, why, n) || get_int(o, "request_id", 0, INT64_MAX, &rid, why, n))
        return 1;
    r->sample = (sampler_cfg_t){temp, (int)top_k, (uint64_t)seed};
    const char *bad_sample = sampler_cfg_refusal(&r->sample, V); /* the client's mistake: not in the log */
    if (bad_sample) return snprintf(why, n, "temperature %g, top_k %d: %s", (double)temp, (int)top_k, bad_sample), 1;
    if (request_prompt(tok, json_string_value(p), json_string_length(p), T, r, why, n)) return 1;
    r->max_tokens = (int)max_tokens, r->request_id = (uint64_t)rid;
    const char *bad = completion_refusal(r->prompt, r->nprompt, T, V);
    if (bad) return snprintf(why, n, "%s", bad), 1;
    return 0;
}

int request_parse(const char *body, size_t n, int T, int V, const tokenizer_t *tok, serve_req_t *r, int *stream_p,
                  char *why, size_t nwhy)
{
    json_error_t je;
    json_t *o = json_loadb(body ? body : "", body ? n : 0, JSON_REJECT_DUPLICATES, &je);
    if (!o) return snprintf(why, nwhy, "malformed JSON at line %d column %d: %s", je.line, je.column, je.text), 1;
    int stream = 0;
    const int bad = !json_is_object(o) ? (snprintf(why, nwhy, "the body must be a JSON object"), 1)
                                       : request_fields(o, T, V, tok, r, &stream, why, nwhy);
    json_decref(o);
    if (!bad) *stream_p = stream;
    return bad;
}

size_t request_utf8_len(const unsigned char *s, size_t n)
{
    const unsigned c = s[0];
    size_t k;
    unsigned lo = 0x80, hi = 0xbf;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) k = 2;
    else if (c >= 0xe0 && c <= 0xef) k = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
    else if (c >= 0xf0 && c <= 0xf4) k = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
    else return 0;
    if (n < k || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < k; i++)
        if (s[i] < 0x80 || s[i] > 0xbf) return 0;
    return k;
}

char *request_text_clean(const unsigned char *b, size_t n, size_t *n_p)
{
    char *s = malloc(n * 3 + 1);
    if (!s) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        const size_t len = request_utf8_len(b + i, n - i);
        if (len) memcpy(s + k, b + i, len), k += len, i += len;
        else memcpy(s + k, "\xef\xbf\xbd", 3), k += 3, i++;
    }
    s[k] = 0;
    *n_p = k;
    return s;
}

size_t request_text_whole(const unsigned char *b, size_t n)
{
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        const unsigned c = b[n - back];
        if ((c & 0xc0) == 0x80) continue; /* a continuation byte: its lead is further back */
        const size_t need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
        return need > back ? n - back : n;
    }
    return n;
}

char *request_error_json(const char *type, const char *msg)
{
    const size_t n = strlen(msg);
    char *clean = malloc(n + 1);
    if (!clean) return NULL;
    for (size_t i = 0; i < n;) {
        const size_t k = request_utf8_len((const unsigned char *)msg + i, n - i);
        if (k) memcpy(clean + i, msg + i, k), i += k;
        else clean[i++] = '?';
    }
    clean[n] = 0;
    json_t *j = json_pack("{s:{s:s,s:s}}", "error", "message", clean, "type", type);
    free(clean);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}
