/* The hf tokenizer's BPE on a tokenizer.json made here (no ByteLevel: characters, and byte_fallback
 * for the others): merges by lowest rank, leftmost of equals ("aaa" is "aa" "a"), through the scan
 * and, past 64 symbols, the heap, which must agree; a character with no token becomes the <0xXX>
 * tokens of its bytes, which decode to those bytes (not to "<0xC3>"); tokenizer_config.json's
 * eos_token names an added token; a truncated file and an unknown eos_token are refused; a vocabulary
 * of 70002 ids encodes and decodes ids above 65535, and an id of 1048576 (past a deck's model.vocab)
 * is refused naming the key. The id equality with the reference library is
 * validation/test_tokenizer_hf.sh's (test_tokenizer_hf_wide.sh's above 65536 ids). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "tap.h"
#include "tok_hf.h"

static char tmpdir[] = "/tmp/test_tok_hf.XXXXXX";
#include "capture.h"

/* vocab: <0x00>..<0xFF> (ids 0..255), a 256, b 257, aa 258, ab 259, aab 260, <|end|> 261 (added). */
static char *make_json(size_t *n_p)
{
    size_t cap = 16384, n = 0;
    char *j = malloc(cap);
    n += (size_t)snprintf(j + n, cap - n, "{\"version\":\"1.0\",\"added_tokens\":[{\"id\":261,\"content\":\"<|end|>\","
                                          "\"special\":true}],\"normalizer\":null,\"pre_tokenizer\":null,"
                                          "\"decoder\":{\"type\":\"ByteFallback\"},\"model\":{\"type\":\"BPE\","
                                          "\"byte_fallback\":true,\"vocab\":{");
    for (int b = 0; b < 256; b++) n += (size_t)snprintf(j + n, cap - n, "\"<0x%02X>\":%d,", b, b);
    n += (size_t)snprintf(j + n, cap - n, "\"a\":256,\"b\":257,\"aa\":258,\"ab\":259,\"aab\":260,\"<|end|>\":261},"
                                          "\"merges\":[\"a a\",[\"a\",\"b\"],\"aa b\"]}}");
    *n_p = n;
    return j;
}

/* vocab: <0x00>..<0xFF>, then f256..f69997 (fillers: ids are dense), a 69998, b 69999, ab 70000 (the
 * merge "a b"), and the added token <|big|> at big_id (70002 ids when it is 70001). */
static char *make_big_json(long big_id, size_t *n_p)
{
    size_t cap = (size_t)2 << 20, n = 0;
    char *j = malloc(cap);
    n += (size_t)snprintf(j + n, cap - n, "{\"version\":\"1.0\",\"added_tokens\":[{\"id\":%ld,\"content\":\"<|big|>\","
                                          "\"special\":true}],\"normalizer\":null,\"pre_tokenizer\":null,"
                                          "\"decoder\":{\"type\":\"ByteFallback\"},\"model\":{\"type\":\"BPE\","
                                          "\"byte_fallback\":true,\"vocab\":{", big_id);
    for (int b = 0; b < 256; b++) n += (size_t)snprintf(j + n, cap - n, "\"<0x%02X>\":%d,", b, b);
    for (int f = 256; f < 69998; f++) n += (size_t)snprintf(j + n, cap - n, "\"f%d\":%d,", f, f);
    n += (size_t)snprintf(j + n, cap - n, "\"a\":69998,\"b\":69999,\"ab\":70000,\"<|big|>\":%ld},"
                                          "\"merges\":[\"a b\"]}}", big_id);
    *n_p = n;
    return j;
}

static int ids_are(const tok_hf_t *hf, const char *text, const uint32_t *want, size_t n_want)
{
    const size_t n = strlen(text);
    uint32_t *ids = malloc((n + 1) * sizeof *ids);
    size_t got = 0;
    const int ok = tok_hf_encode(hf, (const unsigned char *)text, n, ids, &got) == MP_OK && got == n_want &&
                   !memcmp(ids, want, n_want * sizeof *ids);
    free(ids);
    return ok;
}

int main(void)
{
    if (!mkdtemp(tmpdir)) return perror("mkdtemp"), 1;
    size_t n;
    char *json = make_json(&n);
    tok_hf_t *hf = NULL;
    const char *cfg = "{\"eos_token\": {\"content\": \"<|end|>\"}}";
    int rc = tok_hf_load_bytes(&hf, (const unsigned char *)json, n, (const unsigned char *)cfg, strlen(cfg), "made.json");
    if (!tap_ok(rc == MP_OK && hf, "a tokenizer.json of 262 tokens, merges in both forms, loads")) return tap_done();
    tap_ok(tok_hf_vocab(hf) == 262 && tok_hf_eos(hf) == 261, "vocab 262, eos_token <|end|> is 261 (got %d, %d)",
           tok_hf_vocab(hf), tok_hf_eos(hf));
    tap_ok(ids_are(hf, "aaa", (const uint32_t[]){258, 256}, 2), "\"aaa\": the leftmost (a, a) merges first: aa a");
    tap_ok(ids_are(hf, "aab", (const uint32_t[]){260}, 1), "\"aab\": (a, a) before (a, b), then (aa, b): aab");
    tap_ok(ids_are(hf, "\xc3\xa9<|end|>b", (const uint32_t[]){0xc3, 0xa9, 261, 257}, 4),
           "\"\\u00e9<|end|>b\": byte fallback <0xC3> <0xA9>, the added token, b");
    size_t nb;
    const unsigned char *b = tok_hf_token(hf, 0xc3, &nb);
    tap_ok(b && nb == 1 && b[0] == 0xc3, "<0xC3> decodes to the byte 0xC3");
    /* the heap (past 64 symbols) against the scan: 1001 a's are 500 aa and one a; "aab" x 40 */
    char text[1400];
    uint32_t want[600];
    memset(text, 'a', 1001), text[1001] = 0;
    for (int i = 0; i < 500; i++) want[i] = 258;
    want[500] = 256;
    tap_ok(ids_are(hf, text, want, 501), "1001 a's (the heap): 500 aa then a");
    for (int i = 0; i < 40; i++) memcpy(text + 3 * i, "aab", 3), want[i] = 260;
    text[120] = 0;
    tap_ok(ids_are(hf, text, want, 40), "\"aab\" x 40 (the heap): 40 aab");
    tok_hf_free(hf);
    capture_begin();
    rc = tok_hf_load_bytes(&hf, (const unsigned char *)json, n - 5, NULL, 0, "cut.json");
    capture_end();
    tap_ok(rc == MP_ERR && strstr(errtext, "cut.json: not JSON"), "a truncated tokenizer.json is refused naming it");
    show_errtext();
    const char *bad = "{\"eos_token\": \"</s>\"}";
    capture_begin();
    rc = tok_hf_load_bytes(&hf, (const unsigned char *)json, n, (const unsigned char *)bad, strlen(bad), "made.json");
    capture_end();
    tap_ok(rc == MP_ERR && strstr(errtext, "eos_token \"</s>\" is no token"), "an eos_token that is no token is refused");
    show_errtext();
    free(json);

    /* above uint16: ids 65536 and more encode, and decode */
    json = make_big_json(70001, &n);
    rc = tok_hf_load_bytes(&hf, (const unsigned char *)json, n, NULL, 0, "big.json");
    free(json);
    if (tap_ok(rc == MP_OK && hf && tok_hf_vocab(hf) == 70002, "a tokenizer.json of 70002 ids loads (vocab %d)",
               rc == MP_OK ? tok_hf_vocab(hf) : -1)) {
        tap_ok(ids_are(hf, "abb<|big|>a", (const uint32_t[]){70000, 69999, 70001, 69998}, 4),
               "\"abb<|big|>a\": ab b <|big|> a, ids 70000 69999 70001 69998");
        b = tok_hf_token(hf, 70001, &nb);
        tap_ok(b && nb == 7 && !memcmp(b, "<|big|>", 7), "id 70001 decodes to <|big|>");
        tok_hf_free(hf);
    }
    json = make_big_json(1048576, &n);
    capture_begin();
    rc = tok_hf_load_bytes(&hf, (const unsigned char *)json, n, NULL, 0, "huge.json");
    capture_end();
    free(json);
    tap_ok(rc == MP_ERR && strstr(errtext, "huge.json: model.vocab[\"<|big|>\"] is not an id in 0..1048575") &&
               strstr(errtext, "model.vocab is at most 1048576"),
           "an id of 1048576 (beyond a deck's model.vocab) is refused naming the key");
    show_errtext();
    rmdir(tmpdir);
    return tap_done();
}
