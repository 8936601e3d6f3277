/* The untrusted half of the HTTP front end (http.c), without sockets: a completion request's body
 * parsed and checked, and the JSON error every refusal is answered with. fuzz_http feeds both. */
#ifndef MP_REQUEST_H
#define MP_REQUEST_H

#include <stddef.h>

#include "batcher.h"
#include "tokenizer.h"

/* The body body[0..n) of POST /v1/completions into r (r->prompt: room for T ints; the prompt encoded
 * by tok: NULL or byte, its bytes are its tokens; gpt2, its BPE tokens) and *stream_p, for a model
 * of context T and vocabulary V. 0, or 1 after
 * filling why (a sentence for the client, NUL-terminated, possibly cut inside a UTF-8 character).
 * On success: 1 <= nprompt <= T − 1, every token in [0, V), 0 <= max_tokens <= T, temperature 0
 * or in [0.001, 100] (checked as the double given, before it becomes a float), top_k in [0, V]. */
int request_parse(const char *body, size_t n, int T, int V, const tokenizer_t *tok, serve_req_t *r, int *stream_p,
                  char *why, size_t nwhy);

/* The length of the valid UTF-8 sequence at s[0..n) (n >= 1), or 0 (RFC 3629: no overlongs, no
 * surrogates, nothing above U+10FFFF). */
size_t request_utf8_len(const unsigned char *s, size_t n);

/* Decoded bytes b[0..n) as UTF-8 text for a client: a malloc'd copy (*n_p bytes, NUL-terminated) in
 * which each byte that starts no valid sequence is U+FFFD. NULL when out of memory. */
char *request_text_clean(const unsigned char *b, size_t n, size_t *n_p);

/* Where b[0..n) stops being whole characters: n, or the start of a UTF-8 sequence at its end still
 * missing bytes (a token may end inside a character; a later token completes it). */
size_t request_text_whole(const unsigned char *b, size_t n);

/* {"error": {"message": msg, "type": type}} as compact JSON text (malloc'd; NULL only when out of
 * memory). Bytes of msg that are not UTF-8 (a client's path, a key cut short) become '?': every
 * refusal is answered in JSON. */
char *request_error_json(const char *type, const char *msg);

#endif
