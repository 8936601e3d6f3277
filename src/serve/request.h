/* The untrusted half of the HTTP front end (http.c), without sockets: a completion request's body
 * parsed and checked, and the JSON error every refusal is answered with. fuzz_http feeds both. */
#ifndef MP_REQUEST_H
#define MP_REQUEST_H

#include <stddef.h>

#include "batcher.h"

/* The body body[0..n) of POST /v1/completions into r (r->prompt: room for T ints; the prompt's
 * bytes are its tokens) and *stream_p, for a model of context T and vocabulary V. 0, or 1 after
 * filling why (a sentence for the client, NUL-terminated, possibly cut inside a UTF-8 character).
 * On success: 1 <= nprompt <= T − 1, every token in [0, V), 0 <= max_tokens <= T, temperature 0
 * or in [0.001, 100] (checked as the double given, before it becomes a float), top_k in [0, V]. */
int request_parse(const char *body, size_t n, int T, int V, serve_req_t *r, int *stream_p, char *why, size_t nwhy);

/* {"error": {"message": msg, "type": type}} as compact JSON text (malloc'd; NULL only when out of
 * memory). Bytes of msg that are not UTF-8 (a client's path, a key cut short) become '?': every
 * refusal is answered in JSON. */
char *request_error_json(const char *type, const char *msg);

#endif
