/* The hf tokenizer's BPE on a tokenizer.json made here (no ByteLevel: characters, and byte_fallback
 * for the others): merges by lowest rank, leftmost of equals ("aaa" is "aa" "a"), through the scan
 * and, past 64 symbols, the heap, which must agree; a character with no token becomes the <0xXX>
 * tokens of its bytes, which decode to those bytes (not to "<0xC3>"); tokenizer_config.json's
 * eos_token names an added token; a truncated file and an unknown eos_token are refused; a vocabulary
 * of 70002 ids encodes and decodes ids above 65535, and an id of 1048576 (past a deck's model.vocab)
 * is refused naming the key. SentencePiece-style files (U+2581 for ' '): Prepend per stretch between
 * added tokens, Metaspace's "first" only at the text's start, fuse_unk, the decoder's U+2581 as ' '
 * and its Strip of one leading ' ', more ids than bytes, and NFC refused naming it. The id equality with the reference library is
 * validation/test_tokenizer_hf.sh's (test_tokenizer_hf_wide.sh's above 65536 ids). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "tap.h"
#include "tok_hf.h"
#include "tokenizer.h"

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

/* SentencePiece's style: <unk> 0, <s> 1, </s> 2 (added), <0x00>..<0xFF> 3..258, U+2581 259, a 260,
 * b 261, U+2581a 262, ab 263 (merges "U+2581 a", "a b"). form: "norm" (normalizer Prepend and Replace,
 * decoder Sequence with Strip), "meta" (Metaspace first, decoder Metaspace), "unk" (norm's without
 * byte_fallback, fuse_unk), "normtok" (norm's with the normalized added tokens "ba" 264 and "b a" 265),
 * "nfc" (normalizer NFC) or "nomark" (norm's with U+2582 for U+2581, and the merge "a b" only). */
static char *make_sp_json(const char *form, size_t *n_p)
{
    static const char *const norm = "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":"
                                    "\"\u2581\"},{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\u2581\"}]}";
    static const char *const seq = "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":"
                                   "\"\u2581\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},"
                                   "{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]}";
    const int meta = !strcmp(form, "meta");
    size_t cap = 16384, n = 0;
    char *j = malloc(cap);
    n += (size_t)snprintf(j + n, cap - n, "{\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true},"
                                          "{\"id\":1,\"content\":\"<s>\",\"special\":true},{\"id\":2,\"content\":"
                                          "\"</s>\",\"special\":true}%s],\"normalizer\":%s,\"pre_tokenizer\":%s,\"decoder\":%s,"
                                          "\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"fuse_unk\":true,"
                                          "\"byte_fallback\":%s,\"vocab\":{\"<unk>\":0,\"<s>\":1,\"</s>\":2,",
                          strcmp(form, "normtok") ? "" : ",{\"id\":264,\"content\":\"ba\",\"normalized\":true},"
                                                         "{\"id\":265,\"content\":\"b a\",\"normalized\":true}",
                          meta ? "null" : !strcmp(form, "nfc") ? "{\"type\":\"NFC\"}" : norm,
                          meta ? "{\"type\":\"Metaspace\",\"replacement\":\"\u2581\",\"prepend_scheme\":\"first\","
                                 "\"split\":false}" : "null",
                          meta ? "{\"type\":\"Metaspace\",\"replacement\":\"\u2581\"}" : seq,
                          strcmp(form, "unk") ? "true" : "false");
    for (int b = 0; b < 256; b++) n += (size_t)snprintf(j + n, cap - n, "\"<0x%02X>\":%d,", b, b + 3);
    const int nomark = !strcmp(form, "nomark");
    n += (size_t)snprintf(j + n, cap - n, "\"%s\":259,\"a\":260,\"b\":261,\"\u2581a\":262,\"ab\":263},"
                                          "\"merges\":[%s\"a b\"]}}", nomark ? "\u2582" : "\u2581", nomark ? "" : "\"\u2581 a\",");
    *n_p = n;
    return j;
}

static int ids_are(const tok_hf_t *hf, const char *text, const uint32_t *want, size_t n_want)
{
    const size_t n = strlen(text);
    uint32_t *ids = malloc(TOK_HF_IDS_ROOM(n) * sizeof *ids);
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

    /* SentencePiece's style */
    json = make_sp_json("norm", &n);
    rc = tok_hf_load_bytes(&hf, (const unsigned char *)json, n, NULL, 0, "norm.json");
    free(json);
    if (tap_ok(rc == MP_OK, "a SentencePiece-style tokenizer.json (normalizer Prepend and Replace) loads")) {
        tap_ok(ids_are(hf, "a b", (const uint32_t[]){262, 259, 261}, 3), "\"a b\": \u2581a \u2581 b");
        tap_ok(ids_are(hf, "b", (const uint32_t[]){259, 261}, 2), "\"b\": \u2581 b, two ids for one byte");
        tap_ok(ids_are(hf, "ab<s>ab", (const uint32_t[]){262, 261, 1, 262, 261}, 5),
               "\"ab<s>ab\": Prepend before each stretch: \u2581a b <s> \u2581a b");
        tap_ok(ids_are(hf, "<s>\xc3\xa9", (const uint32_t[]){1, 259, 0xc3 + 3, 0xa9 + 3}, 4),
               "\"<s>\\u00e9\": <s> \u2581 <0xC3> <0xA9>");
        tokenizer_t t = tok_from_hf(hf);
        unsigned char *text_b = NULL;
        size_t nt = 0;
        rc = tok_decode(&t, (const int[]){262, 259, 261, 1, 259, 0xc3 + 3, 0xa9 + 3}, 7, &text_b, &nt);
        tap_ok(rc == MP_OK && nt == 9 && !memcmp(text_b, "a b<s> \xc3\xa9", 9),
               "decoded: \u2581 as ' ', <0xXX> as bytes, the one leading ' ' stripped: 'a b<s> \\u00e9' (got '%s')",
               text_b ? (char *)text_b : "");
        free(text_b);
        rc = tok_decode(&t, (const int[]){259, 259, 261}, 3, &text_b, &nt);
        tap_ok(rc == MP_OK && nt == 2 && !memcmp(text_b, " b", 2), "\u2581 \u2581 b decodes to ' b': Strip takes one ' '");
        free(text_b);
        tok_close(&t);
    }
    /* normalized added tokens beside the normalizer: found in each normalized stretch by their
     * normalized contents ("\u2581ba", "\u2581b\u2581a"), after the raw ones (<s>); the tokenizers
     * library's AddedVocabulary */
    json = make_sp_json("normtok", &n);
    rc = tok_hf_load_bytes(&hf, (const unsigned char *)json, n, NULL, 0, "normtok.json");
    free(json);
    if (tap_ok(rc == MP_OK, "normalized added tokens beside a normalizer load")) {
        tap_ok(ids_are(hf, "ba", (const uint32_t[]){264}, 1), "\"ba\": the token (\u2581ba)");
        tap_ok(ids_are(hf, "a b a", (const uint32_t[]){262, 265}, 2), "\"a b a\": \u2581a, then \u2581b\u2581a");
        tap_ok(ids_are(hf, "a ba<s>ba", (const uint32_t[]){262, 264, 1, 264}, 4),
               "\"a ba<s>ba\": \u2581a ba <s> ba (each stretch prefixed, then split)");
        tap_ok(ids_are(hf, "b a ba", (const uint32_t[]){265, 264}, 2), "\"b a ba\": leftmost first: b a, then ba");
        tap_ok(ids_are(hf, "aba", (const uint32_t[]){262, 261, 260}, 3), "\"aba\": no \u2581ba in \u2581aba: \u2581a b a");
        /* the npm reference gives 264 264: it takes a leftover piece equal to a token's raw content
         * as that token; the Rust library (and this reader) merge it as text */
        tap_ok(ids_are(hf, "baba", (const uint32_t[]){264, 261, 260}, 3), "\"baba\": ba, then the text b a");
        tok_hf_free(hf);
    }
    json = make_sp_json("meta", &n);
    rc = tok_hf_load_bytes(&hf, (const unsigned char *)json, n, NULL, 0, "meta.json");
    free(json);
    if (tap_ok(rc == MP_OK, "a SentencePiece-style tokenizer.json (Metaspace, prepend_scheme first) loads")) {
        tap_ok(ids_are(hf, "ab<s>ab", (const uint32_t[]){262, 261, 1, 263}, 4),
               "\"ab<s>ab\": Metaspace first: \u2581a b <s> ab (no \u2581 after the added token)");
        tap_ok(ids_are(hf, "<s>ab", (const uint32_t[]){1, 263}, 2), "\"<s>ab\": <s> ab (the stretch is not at byte 0)");
        tap_ok(ids_are(hf, " a", (const uint32_t[]){262}, 1), "\" a\": \u2581a (it starts with one: none prepended)");
        tokenizer_t t = tok_from_hf(hf);
        unsigned char *text_b = NULL;
        size_t nt = 0;
        rc = tok_decode(&t, (const int[]){262, 261, 1, 263}, 4, &text_b, &nt);
        tap_ok(rc == MP_OK && nt == 7 && !memcmp(text_b, "ab<s>ab", 7), "decoder Metaspace: 'ab<s>ab' back");
        free(text_b);
        tok_close(&t);
    }
    json = make_sp_json("unk", &n);
    rc = tok_hf_load_bytes(&hf, (const unsigned char *)json, n, NULL, 0, "unk.json");
    free(json);
    if (tap_ok(rc == MP_OK, "without byte_fallback, with fuse_unk, loads")) {
        tap_ok(ids_are(hf, "a\xc3\xa9\xc3\xa9" "b\xc3\xa9", (const uint32_t[]){262, 0, 261, 0}, 4),
               "\"a\\u00e9\\u00e9b\\u00e9\": \u2581a <unk> b <unk> (two unknown characters, one <unk>)");
        tok_hf_free(hf);
    }
    json = make_sp_json("nfc", &n);
    capture_begin();
    rc = tok_hf_load_bytes(&hf, (const unsigned char *)json, n, NULL, 0, "nfc.json");
    capture_end();
    free(json);
    tap_ok(rc == MP_ERR && strstr(errtext, "nfc.json: normalizer type \"NFC\" is not supported"),
           "normalizer NFC is refused naming it");
    show_errtext();
    json = make_sp_json("nomark", &n);
    capture_begin();
    rc = tok_hf_load_bytes(&hf, (const unsigned char *)json, n, NULL, 0, "nomark.json");
    capture_end();
    free(json);
    tap_ok(rc == MP_ERR && strstr(errtext, "nomark.json: the normalizer or Metaspace writes U+2581"),
           "a normalizer without U+2581 in the vocabulary is refused (each ' ' would be three ids)");
    show_errtext();
    rmdir(tmpdir);
    return tap_done();
}
