/* libFuzzer harness for the serving front end's untrusted input (src/serve/request.c): the bytes are
 * the body of POST /v1/completions, parsed and checked by request_parse exactly as http.c does,
 * for a model whose context T and vocabulary V come from the first two bytes (T in [2, 257], V in
 * [1, 256]); every refusal's message goes through request_error_json, as every 4xx does.
 *
 * Besides the sanitizers' checks it asserts the contracts: a refusal has a message and becomes
 * JSON text that parses back to the same type (every error reply is JSON, whatever bytes the
 * client sent); an accepted request is within the model (1 <= nprompt <= T − 1, tokens in [0, V),
 * max_tokens in [0, T], temperature 0 or in [0.001, 100], top_k in [0, V]).
 *
 * Build and run: bash validation/fuzz/run.sh SECONDS build fuzz_http (seeds: corpus_http/, each a
 * 2-byte prefix then a body). */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_http: %s\n", what);
    abort();
}

static void check_error_json(const char *why)
{
    if (!why[0]) fail("a refusal without a message");
    char *text = request_error_json("invalid_request_error", why);
    if (!text) fail("request_error_json gave no JSON");
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    json_t *type = j ? json_object_get(json_object_get(j, "error"), "type") : NULL;
    if (!type || strcmp(json_string_value(type), "invalid_request_error")) fail("the error's JSON does not parse back");
    json_decref(j);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    const int T = 2 + data[0], V = 1 + data[1];
    serve_req_t r;
    memset(&r, 0, sizeof r);
    if (!(r.prompt = malloc((size_t)T * sizeof *r.prompt))) fail("out of memory");
    char why[320];
    int stream = -1;
    why[0] = 0;
    if (request_parse((const char *)data + 2, size - 2, T, V, NULL, &r, &stream, why, sizeof why)) check_error_json(why);
    else {
        if (r.nprompt < 1 || r.nprompt > T - 1) fail("an accepted prompt outside [1, T - 1]");
        for (int i = 0; i < r.nprompt; i++)
            if (r.prompt[i] < 0 || r.prompt[i] >= V) fail("an accepted token outside the vocabulary");
        if (r.max_tokens < 0 || r.max_tokens > T) fail("accepted max_tokens outside [0, T]");
        const float t = r.sample.temperature;
        if (!(t == 0.0f || (t >= 1e-3f && t <= 100.0f))) fail("an accepted temperature outside the range");
        if (r.sample.top_k < 0 || r.sample.top_k > V) fail("an accepted top_k outside [0, V]");
        if (stream != 0 && stream != 1) fail("stream not set on success");
    }
    free(r.prompt);
    return 0;
}
