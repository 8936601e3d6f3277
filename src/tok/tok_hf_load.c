/* Reading a tokenizer.json (contract in tok_hf.h): jansson parses it, and every key that changes
 * the tokens is checked here, once, so that the encoder (tok_hf_encode.c) trusts its state. */
#include "tok_hf_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "deck.h" /* deck_text_show */
#include "pretok_llama3.h"
#include "publish.h"
#include "sha256.h"

#define HF_FILE_MAX (256u << 20) /* a tokenizer.json of 150k tokens is about 10 MB */

/* ---- tables ---------------------------------------------------------------------------------- */

static uint64_t hf_hash(const unsigned char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

static size_t hf_pow2_above(size_t n)
{
    size_t s = 16;
    while (s < 2 * n) s <<= 1;
    return s;
}

int tok_hf_find(const tok_hf_t *hf, const unsigned char *s, size_t n)
{
    for (size_t i = hf_hash(s, n) & (hf->nslots - 1);; i = (i + 1) & (hf->nslots - 1)) {
        const int32_t id = hf->slots[i];
        if (id < 0) return -1;
        const size_t len = hf->start[id + 1] - hf->start[id];
        if (len == n && !memcmp(hf->bytes + hf->start[id], s, n)) return id;
    }
}

static size_t hf_pair_slot(const tok_hf_t *hf, uint32_t a, uint32_t b)
{
    const uint64_t key = (uint64_t)a << 32 | b;
    return (size_t)((key * 0x9e3779b97f4a7c15ull) >> 20) & (hf->nmerge_slots - 1);
}

const tok_hf_merge_t *tok_hf_merge(const tok_hf_t *hf, uint32_t a, uint32_t b)
{
    for (size_t i = hf_pair_slot(hf, a, b);; i = (i + 1) & (hf->nmerge_slots - 1)) {
        const tok_hf_merge_t *m = &hf->merges[i];
        if (m->rank == UINT32_MAX) return NULL;
        if (m->a == a && m->b == b) return m;
    }
}

/* ---- the byte-level map ------------------------------------------------------------------------ */

/* The byte a character of a ByteLevel vocabulary stands for (bpe_gpt2.h's map), or -1. */
static int hf_level_byte(uint32_t cp)
{
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255)) return (int)cp;
    if (cp < 256 || cp >= 256 + 68) return -1;
    int k = (int)cp - 256; /* the k-th byte, in order, that does not stand for itself */
    for (int byte = 0; byte < 256; byte++) {
        const int self = (byte >= 33 && byte <= 126) || (byte >= 161 && byte <= 172) || byte >= 174;
        if (!self && k-- == 0) return byte;
    }
    return -1;
}

/* A token's string (UTF-8, n bytes, valid: jansson checked) to its bytes in out (room for n): through
 * the byte-level map when byte_level. Returns the length, or -1 when a character is not in the map. */
static long hf_token_bytes(const char *s, size_t n, int byte_level, unsigned char *out)
{
    if (!byte_level) return memcpy(out, s, n), (long)n;
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        const unsigned char c = (unsigned char)s[i];
        uint32_t cp;
        size_t len = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
        cp = len == 1 ? c : c & (0x7f >> len);
        for (size_t k = 1; k < len && i + k < n; k++) cp = cp << 6 | ((unsigned char)s[i + k] & 0x3f);
        const int byte = hf_level_byte(cp);
        if (byte < 0) return -1;
        out[m++] = (unsigned char)byte;
        i += len;
    }
    return (long)m;
}

/* ---- the file's parts ---------------------------------------------------------------------------- */

/* The file's name as messages show it, for the reporting helpers below. */
typedef struct {
    char file[DECK_SHOW];
} hf_ctx_t;

static int hf_bool(const hf_ctx_t *c, json_t *obj, const char *key, const char *where, int def, int *v_p)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return *v_p = def, MP_OK;
    if (!json_is_boolean(v)) return MP_FAIL("tokenizer.json %s: %s.%s is not true or false", c->file, where, key);
    *v_p = json_is_true(v);
    return MP_OK;
}

/* Refuses key unless it is absent, null, or (empty_ok) "". */
static int hf_null(const hf_ctx_t *c, json_t *obj, const char *key, const char *where, int empty_ok)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v) || (empty_ok && json_is_string(v) && !json_string_length(v))) return MP_OK;
    return MP_FAIL("tokenizer.json %s: %s.%s is set: this reader supports only null%s there", c->file, where, key,
                   empty_ok ? " or \"\"" : "");
}

static const char *hf_type(json_t *obj)
{
    json_t *t = json_is_object(obj) ? json_object_get(obj, "type") : NULL;
    return json_is_string(t) ? json_string_value(t) : NULL;
}

static int hf_pre_one(const hf_ctx_t *c, tok_hf_t *hf, json_t *p, int depth);

#define HF_MARK "\xe2\x96\x81" /* U+2581, SentencePiece's space */

/* 1 when obj[key] is the string want. */
static int hf_str_is(json_t *obj, const char *key, const char *want)
{
    json_t *v = json_object_get(obj, key);
    return json_is_string(v) && !strcmp(json_string_value(v), want);
}

/* The normalizer of SentencePiece-style files (tokenizers < 0.14: Llama 2, TinyLlama): Prepend of
 * U+2581 and Replace of ' ' by U+2581, alone or in a Sequence (in either order the stretch becomes
 * U+2581 then its text with each ' ' as U+2581). Anything else is refused naming it. */
static int hf_norm_one(const hf_ctx_t *c, tok_hf_t *hf, json_t *p, int depth)
{
    const char *type = hf_type(p);
    if (!type) return MP_FAIL("tokenizer.json %s: a normalizer without a \"type\" string", c->file);
    if (!strcmp(type, "Sequence") && depth == 0) {
        json_t *list = json_object_get(p, "normalizers"), *q;
        size_t i;
        if (!json_is_array(list)) return MP_FAIL("tokenizer.json %s: normalizer Sequence without a normalizers list", c->file);
        json_array_foreach(list, i, q) if (hf_norm_one(c, hf, q, depth + 1) != MP_OK) return MP_ERR;
        return MP_OK;
    }
    if (!strcmp(type, "Prepend")) {
        if (!hf_str_is(p, "prepend", HF_MARK) || hf->prepend != HF_PREPEND_NONE)
            return MP_FAIL("tokenizer.json %s: normalizer Prepend: prepend is not \"" HF_MARK "\" (U+2581), or there are "
                           "two (the only one supported)", c->file);
        hf->prepend = HF_PREPEND_EVERY;
        return MP_OK;
    }
    if (!strcmp(type, "Replace")) {
        json_t *pat = json_object_get(p, "pattern");
        if (!json_is_object(pat) || !hf_str_is(pat, "String", " ") || json_object_size(pat) != 1 ||
            !hf_str_is(p, "content", HF_MARK) || hf->space_mark)
            return MP_FAIL("tokenizer.json %s: normalizer Replace: only pattern {\"String\": \" \"} with content \"" HF_MARK
                           "\" (U+2581), once, is supported", c->file);
        hf->space_mark = 1;
        return MP_OK;
    }
    return MP_FAIL("tokenizer.json %s: normalizer type \"%.40s\" is not supported (null, or Prepend of U+2581 and "
                   "Replace of \" \" by U+2581, alone or in a Sequence)", c->file, type);
}

/* The Metaspace pre-tokenizer (Mistral, re-saved Llama 2): replacement U+2581, split false (the
 * stretch stays one piece), prepend_scheme first, always or never; on its own, without a normalizer. */
static int hf_pre_metaspace(const hf_ctx_t *c, tok_hf_t *hf, json_t *p, int depth)
{
    json_t *split = json_object_get(p, "split"), *rep = json_object_get(p, "str_rep");
    if (depth || hf->normalized)
        return MP_FAIL("tokenizer.json %s: pre_tokenizer Metaspace is supported only alone, with normalizer null", c->file);
    if (!hf_str_is(p, "replacement", HF_MARK) || (rep && !json_is_null(rep) && !hf_str_is(p, "str_rep", HF_MARK)))
        return MP_FAIL("tokenizer.json %s: pre_tokenizer Metaspace: replacement is not \"" HF_MARK "\" (U+2581)", c->file);
    if (!json_is_false(split))
        return MP_FAIL("tokenizer.json %s: pre_tokenizer Metaspace: split is not false (split true, or absent, cuts "
                       "at each U+2581: not supported)", c->file);
    if (hf_str_is(p, "prepend_scheme", "first")) hf->prepend = HF_PREPEND_FIRST;
    else if (hf_str_is(p, "prepend_scheme", "always")) hf->prepend = HF_PREPEND_ALWAYS;
    else if (hf_str_is(p, "prepend_scheme", "never")) hf->prepend = HF_PREPEND_NONE;
    else
        return MP_FAIL("tokenizer.json %s: pre_tokenizer Metaspace: prepend_scheme is not \"first\", \"always\" or "
                       "\"never\" (an older file's add_prefix_space is not read)", c->file);
    hf->space_mark = 1;
    return MP_OK;
}

/* What the normalizer (Prepend, Replace) or Metaspace read above does to a stretch (contract in
 * tok_hf_impl.h): here beside their reading, used by the encoder and by added tokens' normalized
 * contents (hf_added). */
size_t tok_hf_mark(const tok_hf_t *hf, const unsigned char *s, size_t n, size_t from, unsigned char *out)
{
    const int starts = (hf->space_mark && s[0] == ' ') || (n >= 3 && !memcmp(s, HF_MARK, 3));
    size_t m = 0;
    if (hf->prepend == HF_PREPEND_EVERY || (hf->prepend == HF_PREPEND_ALWAYS && !starts) ||
        (hf->prepend == HF_PREPEND_FIRST && !starts && from == 0))
        memcpy(out, HF_MARK, 3), m = 3;
    for (size_t i = 0; i < n; i++)
        if (hf->space_mark && s[i] == ' ') memcpy(out + m, HF_MARK, 3), m += 3;
        else out[m++] = s[i];
    return m;
}

static int hf_pre_split(const hf_ctx_t *c, tok_hf_t *hf, json_t *p)
{
    json_t *pat = json_object_get(p, "pattern"), *re = json_is_object(pat) ? json_object_get(pat, "Regex") : NULL;
    json_t *beh = json_object_get(p, "behavior");
    int invert;
    if (!json_is_string(re))
        return MP_FAIL("tokenizer.json %s: pre_tokenizer Split: pattern is not {\"Regex\": \"...\"} (a String pattern "
                       "is not supported)", c->file);
    const char *r = json_string_value(re);
    if (!strcmp(r, PRETOK_LLAMA3_PATTERN)) hf->cuts[hf->ncuts++] = HF_CUT_LLAMA3;
    else if (!strcmp(r, PRETOK_QWEN2_PATTERN)) hf->cuts[hf->ncuts++] = HF_CUT_QWEN2;
    else if (!strcmp(r, PRETOK_GPT2_PATTERN)) hf->cuts[hf->ncuts++] = HF_CUT_GPT2;
    else
        return MP_FAIL("tokenizer.json %s: pre_tokenizer Split: pattern.Regex \"%.300s\" is not one this reader knows "
                       "(GPT-2's, Llama-3's and Qwen2's, pretok_llama3.h)", c->file, r);
    if (!json_is_string(beh) || strcmp(json_string_value(beh), "Isolated"))
        return MP_FAIL("tokenizer.json %s: pre_tokenizer Split: behavior is not \"Isolated\" (the only one supported)",
                       c->file);
    if (hf_bool(c, p, "invert", "pre_tokenizer Split", 0, &invert) != MP_OK) return MP_ERR;
    if (invert) return MP_FAIL("tokenizer.json %s: pre_tokenizer Split: invert true is not supported", c->file);
    return MP_OK;
}

static int hf_pre_one(const hf_ctx_t *c, tok_hf_t *hf, json_t *p, int depth)
{
    const char *type = hf_type(p);
    int flag;
    if (!type) return MP_FAIL("tokenizer.json %s: a pre_tokenizer without a \"type\" string", c->file);
    if (hf->ncuts >= TOK_HF_MAX_STEPS || depth > 4)
        return MP_FAIL("tokenizer.json %s: more than %d pre-tokenizers", c->file, TOK_HF_MAX_STEPS);
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(p, "pretokenizers"), *q;
        size_t i;
        if (!json_is_array(list)) return MP_FAIL("tokenizer.json %s: pre_tokenizer Sequence without a pretokenizers list", c->file);
        json_array_foreach(list, i, q) if (hf_pre_one(c, hf, q, depth + 1) != MP_OK) return MP_ERR;
        return MP_OK;
    }
    if (!strcmp(type, "ByteLevel")) {
        if (hf_bool(c, p, "add_prefix_space", "pre_tokenizer ByteLevel", 0, &flag) != MP_OK) return MP_ERR;
        if (flag) return MP_FAIL("tokenizer.json %s: pre_tokenizer ByteLevel: add_prefix_space true is not supported", c->file);
        if (hf_bool(c, p, "use_regex", "pre_tokenizer ByteLevel", 1, &flag) != MP_OK) return MP_ERR;
        if (flag) hf->cuts[hf->ncuts++] = HF_CUT_GPT2;
        hf->byte_level = 1;
        return MP_OK;
    }
    if (!strcmp(type, "Split")) return hf_pre_split(c, hf, p);
    if (!strcmp(type, "Metaspace")) return hf_pre_metaspace(c, hf, p, depth);
    if (!strcmp(type, "Digits")) {
        if (hf_bool(c, p, "individual_digits", "pre_tokenizer Digits", 0, &flag) != MP_OK) return MP_ERR;
        hf->cuts[hf->ncuts++] = flag ? HF_CUT_DIGITS : HF_CUT_DIGIT_RUNS;
        return MP_OK;
    }
    return MP_FAIL("tokenizer.json %s: pre_tokenizer type \"%.60s\" is not supported (ByteLevel, Split, Digits, "
                   "Sequence, Metaspace)", c->file, type);
}

/* ---- the vocabulary --------------------------------------------------------------------------- */

/* The highest id of vocab and added_tokens, checked to be integers in 0..TOK_HF_MAX_VOCAB-1. */
static int hf_max_id(const hf_ctx_t *c, json_t *vocab, json_t *added, int *max_p)
{
    const char *key;
    json_t *v;
    size_t i;
    int max = -1;
    json_object_foreach(vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= TOK_HF_MAX_VOCAB)
            return MP_FAIL("tokenizer.json %s: model.vocab[\"%.60s\"] is not an id in 0..%d (a deck's model.vocab is at "
                           "most %d)", c->file, key, TOK_HF_MAX_VOCAB - 1, TOK_HF_MAX_VOCAB);
        if (json_integer_value(v) > max) max = (int)json_integer_value(v);
    }
    json_array_foreach(added, i, v) {
        json_t *id = json_object_get(v, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= TOK_HF_MAX_VOCAB)
            return MP_FAIL("tokenizer.json %s: added_tokens[%zu].id is not an id in 0..%d (a deck's model.vocab is at most "
                           "%d)", c->file, i, TOK_HF_MAX_VOCAB - 1, TOK_HF_MAX_VOCAB);
        if (json_integer_value(id) > max) max = (int)json_integer_value(id);
    }
    if (max < 0) return MP_FAIL("tokenizer.json %s: model.vocab is empty", c->file);
    *max_p = max;
    return MP_OK;
}

/* Every id's bytes: vocab's through the byte-level map, added tokens' as they are (they win). */
static int hf_lay_out(const hf_ctx_t *c, tok_hf_t *hf, json_t *vocab, json_t *added)
{
    const int V = hf->vocab;
    const char **text = MP_CALLOC((size_t)V, sizeof *text);
    size_t *len = MP_CALLOC((size_t)V, sizeof *len), total = 0, i;
    char *raw = MP_CALLOC((size_t)V, 1); /* 1: an added token's content, taken as it is */
    int rc = MP_ERR;
    const char *key;
    json_t *v;
    if (!text || !len || !raw) goto err_free;
    json_object_foreach(vocab, key, v) {
        const int id = (int)json_integer_value(v);
        if (text[id]) {
            MP_ERROR("tokenizer.json %s: model.vocab gives id %d to both \"%.60s\" and \"%.60s\"", c->file, id, text[id], key);
            goto err_free;
        }
        text[id] = key, len[id] = strlen(key);
    }
    json_array_foreach(added, i, v) {
        json_t *s = json_object_get(v, "content");
        if (!json_is_string(s) || !json_string_length(s)) {
            MP_ERROR("tokenizer.json %s: added_tokens[%zu].content is not a non-empty string", c->file, i);
            goto err_free;
        }
        const int id = (int)json_integer_value(json_object_get(v, "id"));
        text[id] = json_string_value(s), len[id] = json_string_length(s), raw[id] = 1;
    }
    for (int id = 0; id < V; id++) {
        if (!text[id]) {
            MP_ERROR("tokenizer.json %s: id %d has no token (ids must be 0..%d without gaps)", c->file, id, V - 1);
            goto err_free;
        }
        total += len[id];
    }
    hf->bytes = MP_MALLOC(total + 1);
    hf->start = MP_MALLOC(((size_t)V + 1) * sizeof *hf->start);
    if (!hf->bytes || !hf->start) goto err_free;
    size_t at = 0;
    for (int id = 0; id < V; id++) {
        hf->start[id] = at;
        const long got = hf_token_bytes(text[id], len[id], hf->byte_level && !raw[id], hf->bytes + at);
        if (got < 0) {
            MP_ERROR("tokenizer.json %s: token %d \"%.60s\" has a character outside the ByteLevel byte map", c->file, id,
                     text[id]);
            goto err_free;
        }
        at += (size_t)got;
    }
    hf->start[V] = at;
    rc = MP_OK;
err_free:
    free(raw);
    free(len);
    free(text);
    return rc;
}

/* The table of ids by bytes (the vocabulary's own tokens; an added token is found by the splitter). */
static int hf_index(const hf_ctx_t *c, tok_hf_t *hf, json_t *vocab)
{
    hf->nslots = hf_pow2_above((size_t)hf->vocab);
    hf->slots = MP_MALLOC(hf->nslots * sizeof *hf->slots);
    if (!hf->slots) return MP_ERR;
    memset(hf->slots, 0xff, hf->nslots * sizeof *hf->slots);
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        const int id = (int)json_integer_value(v);
        const unsigned char *s = hf->bytes + hf->start[id];
        const size_t n = hf->start[id + 1] - hf->start[id];
        if (tok_hf_find(hf, s, n) >= 0) continue; /* two ids of the same bytes (an added token's): the first keeps them */
        size_t i = hf_hash(s, n) & (hf->nslots - 1);
        while (hf->slots[i] >= 0) i = (i + 1) & (hf->nslots - 1);
        hf->slots[i] = id;
    }
    (void)c;
    return MP_OK;
}

/* One side of a merge, as its id: s[0..n) through the byte-level map. -1 when it is no token. */
static int hf_side(const tok_hf_t *hf, const char *s, size_t n, unsigned char *scratch)
{
    if (n > hf->start[hf->vocab]) return -1; /* longer than every token together: none (and scratch's room) */
    const long len = hf_token_bytes(s, n, hf->byte_level, scratch);
    return len < 0 ? -1 : tok_hf_find(hf, scratch, (size_t)len);
}

static int hf_merge_add(const hf_ctx_t *c, tok_hf_t *hf, size_t k, const char *a, size_t na, const char *b, size_t nb,
                        unsigned char *scratch)
{
    const int ia = hf_side(hf, a, na, scratch), ib = hf_side(hf, b, nb, scratch);
    if (ia < 0 || ib < 0)
        return MP_FAIL("tokenizer.json %s: model.merges[%zu]: \"%.60s\" is not in model.vocab", c->file, k, ia < 0 ? a : b);
    const size_t la = hf->start[ia + 1] - hf->start[ia], lb = hf->start[ib + 1] - hf->start[ib];
    memcpy(scratch, hf->bytes + hf->start[ia], la);
    memcpy(scratch + la, hf->bytes + hf->start[ib], lb);
    const int m = tok_hf_find(hf, scratch, la + lb);
    if (m < 0) return MP_FAIL("tokenizer.json %s: model.merges[%zu]: \"%.60s%.60s\" is not in model.vocab", c->file, k, a, b);
    size_t i = hf_pair_slot(hf, (uint32_t)ia, (uint32_t)ib);
    for (; hf->merges[i].rank != UINT32_MAX; i = (i + 1) & (hf->nmerge_slots - 1))
        if (hf->merges[i].a == (uint32_t)ia && hf->merges[i].b == (uint32_t)ib) return MP_OK; /* the first one ranks */
    hf->merges[i] = (tok_hf_merge_t){(uint32_t)ia, (uint32_t)ib, (uint32_t)k, (uint32_t)m};
    return MP_OK;
}

/* model.merges: each "a b" (one space) or ["a", "b"]. */
static int hf_merges(const hf_ctx_t *c, tok_hf_t *hf, json_t *merges)
{
    hf->nmerge_slots = hf_pow2_above(json_array_size(merges));
    hf->merges = MP_MALLOC(hf->nmerge_slots * sizeof *hf->merges);
    unsigned char *scratch = MP_MALLOC(2 * hf->start[hf->vocab] + 8); /* a side, or two tokens */
    if (!hf->merges || !scratch) return free(scratch), MP_ERR;
    for (size_t i = 0; i < hf->nmerge_slots; i++) hf->merges[i].rank = UINT32_MAX;
    size_t k;
    json_t *m;
    json_array_foreach(merges, k, m) {
        const char *a, *b;
        size_t na, nb;
        if (json_is_string(m)) {
            a = json_string_value(m);
            const char *sp = strchr(a, ' ');
            if (!sp || strchr(sp + 1, ' ') || sp == a || !sp[1]) {
                free(scratch);
                return MP_FAIL("tokenizer.json %s: model.merges[%zu] \"%.60s\" is not two tokens and one space", c->file, k, a);
            }
            na = (size_t)(sp - a), b = sp + 1, nb = strlen(b);
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0)), na = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1)), nb = json_string_length(json_array_get(m, 1));
        } else {
            free(scratch);
            return MP_FAIL("tokenizer.json %s: model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", c->file, k);
        }
        if (hf_merge_add(c, hf, k, a, na, b, nb, scratch) != MP_OK) return free(scratch), MP_ERR;
    }
    free(scratch);
    return MP_OK;
}

/* added_tokens: their contents for the splitter; single_word, lstrip and rstrip refused. */
static int hf_added(const hf_ctx_t *c, tok_hf_t *hf, json_t *added)
{
    static const char *const refused[] = {"single_word", "lstrip", "rstrip"};
    size_t i;
    json_t *v;
    hf->added = MP_CALLOC(json_array_size(added) + 1, sizeof *hf->added);
    if (!hf->added) return MP_ERR;
    json_array_foreach(added, i, v) {
        for (size_t k = 0; k < 3; k++) {
            int flag;
            if (hf_bool(c, v, refused[k], "added_tokens[]", 0, &flag) != MP_OK) return MP_ERR;
            if (flag) return MP_FAIL("tokenizer.json %s: added_tokens[%zu].%s true is not supported", c->file, i, refused[k]);
        }
        int normalized;
        if (hf_bool(c, v, "normalized", "added_tokens[]", 0, &normalized) != MP_OK) return MP_ERR;
        json_t *s = json_object_get(v, "content");
        tok_hf_added_t *a = &hf->added[hf->nadded++];
        const size_t n = json_string_length(s);
        a->id = (int)json_integer_value(json_object_get(v, "id"));
        /* Without a normalizer a normalized token is found in the text as it is, as the library does.
         * With one, the library finds it in each stretch the normalizer made, by its content as the
         * normalizer makes it: Prepend's U+2581 comes first, so "x" matches only where "▁x" stands
         * (after a ' ' or at a stretch's start). Its id still decodes to the content as written. A
         * normalizer that changes nothing (an empty Sequence) finds it in the text as it is. */
        a->normalized = normalized && hf->normalized && (hf->space_mark || hf->prepend != HF_PREPEND_NONE);
        a->content = MP_MALLOC(a->normalized ? 3 * n + 3 : n);
        if (!a->content) return MP_ERR;
        if (a->normalized) {
            a->n = tok_hf_mark(hf, (const unsigned char *)json_string_value(s), n, 0, a->content);
            hf->norm_first[a->content[0]] = 1;
            hf->nnorm++;
        } else {
            memcpy(a->content, json_string_value(s), n);
            a->n = n;
            hf->added_first[a->content[0]] = 1;
        }
    }
    return MP_OK;
}

/* model: BPE and its options (the vocabulary itself: hf_lay_out, hf_index, hf_merges). */
static int hf_model_options(const hf_ctx_t *c, tok_hf_t *hf, json_t *model)
{
    const char *type = hf_type(model);
    if (!type || strcmp(type, "BPE"))
        return MP_FAIL("tokenizer.json %s: model.type is \"%.40s\": only BPE is supported", c->file, type ? type : "(none)");
    if (hf_null(c, model, "dropout", "model", 0) != MP_OK || hf_null(c, model, "continuing_subword_prefix", "model", 1) != MP_OK ||
        hf_null(c, model, "end_of_word_suffix", "model", 1) != MP_OK ||
        hf_bool(c, model, "ignore_merges", "model", 0, &hf->ignore_merges) != MP_OK ||
        hf_bool(c, model, "byte_fallback", "model", 0, &hf->byte_fallback) != MP_OK ||
        hf_bool(c, model, "fuse_unk", "model", 0, &hf->fuse_unk) != MP_OK)
        return MP_ERR;
    if (!json_is_object(json_object_get(model, "vocab")))
        return MP_FAIL("tokenizer.json %s: model.vocab is not an object of token: id", c->file);
    if (!json_is_array(json_object_get(model, "merges")))
        return MP_FAIL("tokenizer.json %s: model.merges is not a list", c->file);
    return MP_OK;
}

/* unk_token and the byte fallback's <0xXX> tokens, once the vocabulary is laid out. */
static int hf_unknowns(const hf_ctx_t *c, tok_hf_t *hf, json_t *model)
{
    json_t *unk = json_object_get(model, "unk_token");
    hf->unk = -1;
    if (json_is_string(unk)) {
        hf->unk = tok_hf_find(hf, (const unsigned char *)json_string_value(unk), json_string_length(unk));
        if (hf->unk < 0) return MP_FAIL("tokenizer.json %s: model.unk_token \"%.60s\" is not in model.vocab", c->file,
                                        json_string_value(unk));
    } else if (unk && !json_is_null(unk)) {
        return MP_FAIL("tokenizer.json %s: model.unk_token is neither a string nor null", c->file);
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        hf->fallback[b] = hf->byte_fallback ? tok_hf_find(hf, (const unsigned char *)name, 6) : -1;
        if (hf->byte_fallback && hf->fallback[b] < 0)
            return MP_FAIL("tokenizer.json %s: model.byte_fallback is true but %s is not in model.vocab", c->file, name);
    }
    if (!hf->byte_fallback) return MP_OK;
    /* <0xXX> decodes to its byte (the ByteFallback decoder), not to its six characters */
    if (!(hf->fallback_byte = MP_MALLOC((size_t)hf->vocab * sizeof *hf->fallback_byte))) return MP_ERR;
    for (int id = 0; id < hf->vocab; id++) hf->fallback_byte[id] = -1;
    for (int b = 0; b < 256; b++) hf->fallback_byte[hf->fallback[b]] = (int16_t)b;
    return MP_OK;
}

/* The decoder of SentencePiece-style files: Sequence [Replace "\u2581" by " ", ByteFallback, Fuse,
 * Strip " " (start n, stop 0)], in that order, each but Replace optional; n leading spaces of the text
 * go (after Fuse the text is one token). */
static int hf_decoder_seq(const hf_ctx_t *c, tok_hf_t *hf, json_t *list)
{
    static const char *const order[] = {"Replace", "ByteFallback", "Fuse", "Strip"};
    size_t i, at = 0;
    json_t *q;
    json_array_foreach(list, i, q) {
        const char *type = hf_type(q);
        while (at < 4 && type && strcmp(type, order[at])) at++;
        if (at == 4)
            return MP_FAIL("tokenizer.json %s: decoder Sequence: decoders[%zu] \"%.40s\" is not supported there (Replace, "
                           "ByteFallback, Fuse, Strip, in that order)", c->file, i, type ? type : "(none)");
        json_t *pat = json_object_get(q, "pattern"), *start = json_object_get(q, "start");
        if (at == 0 && (!json_is_object(pat) || !hf_str_is(pat, "String", HF_MARK) || !hf_str_is(q, "content", " ")))
            return MP_FAIL("tokenizer.json %s: decoder Sequence: decoders[%zu] Replace is not of \"" HF_MARK "\" by \" \"",
                           c->file, i);
        if (at == 3 && (!hf_str_is(q, "content", " ") || !json_is_integer(start) || json_integer_value(start) < 0 ||
                        json_integer_value(start) > 16 || json_integer_value(json_object_get(q, "stop")) != 0 || i == 0 ||
                        strcmp(hf_type(json_array_get(list, i - 1)), "Fuse")))
            return MP_FAIL("tokenizer.json %s: decoder Sequence: decoders[%zu] Strip: only content \" \", start 0..16, stop 0, "
                           "after Fuse, is supported", c->file, i);
        if (at == 0) hf->dec_bytes = (unsigned char *)""; /* marked: laid out by hf_dec_lay_out */
        if (at == 3) hf->strip = (int)json_integer_value(start);
        at++;
    }
    if (!hf->dec_bytes) return MP_FAIL("tokenizer.json %s: decoder Sequence without Replace of \"" HF_MARK "\" by \" \"", c->file);
    return MP_OK;
}

static int hf_decoder(const hf_ctx_t *c, tok_hf_t *hf, json_t *dec)
{
    const char *type = hf_type(dec);
    if (!dec || json_is_null(dec)) return MP_OK;
    if (type && !strcmp(type, "ByteLevel") && hf->byte_level) return MP_OK;
    if (type && !hf->byte_level && (!strcmp(type, "ByteFallback") || !strcmp(type, "Fuse"))) return MP_OK;
    if (type && !hf->byte_level && !strcmp(type, "Sequence") && json_is_array(json_object_get(dec, "decoders")))
        return hf_decoder_seq(c, hf, json_object_get(dec, "decoders"));
    if (type && !hf->byte_level && !strcmp(type, "Metaspace")) { /* U+2581 as ' ', the first token's leading one gone */
        if (!hf_str_is(dec, "replacement", HF_MARK))
            return MP_FAIL("tokenizer.json %s: decoder Metaspace: replacement is not \"" HF_MARK "\" (U+2581)", c->file);
        hf->dec_bytes = (unsigned char *)"", hf->strip = 1;
        return MP_OK;
    }
    return MP_FAIL("tokenizer.json %s: decoder type \"%.40s\" is not supported here (ByteLevel with a ByteLevel "
                   "pre-tokenizer; else null, ByteFallback, Fuse, Metaspace or a Sequence of Replace, ByteFallback, Fuse "
                   "and Strip)", c->file, type ? type : "(none)");
}

/* The decoder's bytes of every token (hf->dec_bytes marked by hf_decoder): U+2581 as ' '. */
static int hf_dec_lay_out(tok_hf_t *hf)
{
    unsigned char *bytes = MP_MALLOC(hf->start[hf->vocab] + 1);
    size_t *start = MP_MALLOC(((size_t)hf->vocab + 1) * sizeof *start);
    if (!bytes || !start) return free(bytes), free(start), MP_ERR;
    hf->dec_bytes = bytes, hf->dec_start = start;
    size_t at = 0;
    for (int id = 0; id < hf->vocab; id++) {
        hf->dec_start[id] = at;
        for (size_t i = hf->start[id]; i < hf->start[id + 1];) {
            const int mark = hf->start[id + 1] - i >= 3 && !memcmp(hf->bytes + i, HF_MARK, 3);
            hf->dec_bytes[at++] = mark ? ' ' : hf->bytes[i];
            i += mark ? 3 : 1;
        }
    }
    hf->dec_start[hf->vocab] = at;
    return MP_OK;
}

static int hf_parse(const hf_ctx_t *c, tok_hf_t *hf, json_t *root)
{
    json_t *model = json_object_get(root, "model"), *added = json_object_get(root, "added_tokens");
    json_t *norm = json_object_get(root, "normalizer"), *pre = json_object_get(root, "pre_tokenizer");
    if (!json_is_object(root)) return MP_FAIL("tokenizer.json %s: not a JSON object", c->file);
    if (!json_is_object(model)) return MP_FAIL("tokenizer.json %s: no \"model\" object", c->file);
    if (added && !json_is_null(added) && !json_is_array(added))
        return MP_FAIL("tokenizer.json %s: added_tokens is not a list", c->file);
    if (!json_is_array(added)) added = NULL;
    json_t *none = json_array();
    if (!none) return MP_FAIL("out of memory");
    if (!added) added = none;
    int rc = MP_ERR, max;
    hf->normalized = norm && !json_is_null(norm);
    if (hf->normalized && hf_norm_one(c, hf, norm, 0) != MP_OK) goto out;
    if (pre && !json_is_null(pre) && hf_pre_one(c, hf, pre, 0) != MP_OK) goto out;
    if (hf->normalized && hf->byte_level) {
        MP_ERROR("tokenizer.json %s: a normalizer with pre_tokenizer ByteLevel is not supported", c->file);
        goto out;
    }
    if (hf_model_options(c, hf, model) != MP_OK || hf_max_id(c, json_object_get(model, "vocab"), added, &max) != MP_OK)
        goto out;
    hf->vocab = max + 1;
    if (hf_lay_out(c, hf, json_object_get(model, "vocab"), added) != MP_OK ||
        hf_index(c, hf, json_object_get(model, "vocab")) != MP_OK || hf_merges(c, hf, json_object_get(model, "merges")) != MP_OK ||
        hf_added(c, hf, added) != MP_OK || hf_unknowns(c, hf, model) != MP_OK ||
        hf_decoder(c, hf, json_object_get(root, "decoder")) != MP_OK || (hf->dec_bytes && hf_dec_lay_out(hf) != MP_OK))
        goto out;
    /* a ' ' or the prefix one symbol, not three <0xXX>: no more ids than TOK_HF_IDS_ROOM */
    if ((hf->space_mark || hf->prepend != HF_PREPEND_NONE) && tok_hf_find(hf, (const unsigned char *)HF_MARK, 3) < 0) {
        MP_ERROR("tokenizer.json %s: the normalizer or Metaspace writes U+2581 (\"" HF_MARK "\"), which is not in "
                 "model.vocab", c->file);
        goto out;
    }
    rc = MP_OK;
out:
    json_decref(none);
    return rc;
}

/* tokenizer_config.json's eos_token into hf->eos: a string or {"content": "..."} naming an added
 * token or a vocabulary entry; absent or null: -1. */
static int hf_config_eos(tok_hf_t *hf, const unsigned char *config, size_t n, const char *file)
{
    json_error_t err;
    json_t *root = json_loadb((const char *)config, n, 0, &err), *eos;
    hf->eos = -1;
    if (!root) return MP_FAIL("tokenizer_config.json beside %s: not JSON: line %d column %d: %s", file, err.line, err.column, err.text);
    eos = json_is_object(root) ? json_object_get(root, "eos_token") : NULL;
    if (json_is_object(eos)) eos = json_object_get(eos, "content");
    int rc = MP_OK;
    if (json_is_string(eos)) {
        const char *name = json_string_value(eos);
        const size_t len = json_string_length(eos);
        for (size_t i = 0; i < hf->nadded && hf->eos < 0; i++)
            if (hf->added[i].n == len && !memcmp(hf->added[i].content, name, len)) hf->eos = hf->added[i].id;
        if (hf->eos < 0) hf->eos = tok_hf_find(hf, (const unsigned char *)name, len);
        if (hf->eos < 0)
            rc = MP_FAIL("tokenizer_config.json beside %s: eos_token \"%.60s\" is no token of the tokenizer.json", file, name);
    } else if (eos && !json_is_null(eos)) {
        rc = MP_FAIL("tokenizer_config.json beside %s: eos_token is neither a string, {\"content\": ...} nor null", file);
    }
    json_decref(root);
    return rc;
}

int tok_hf_load_bytes(tok_hf_t **hf_p, const unsigned char *json, size_t n, const unsigned char *config,
                      size_t n_config, const char *whose)
{
    hf_ctx_t c;
    deck_text_show(whose, c.file, sizeof c.file);
    json_error_t err;
    json_t *root = json_loadb((const char *)json, n, JSON_REJECT_DUPLICATES, &err);
    if (!root) return MP_FAIL("tokenizer.json %s: not JSON: line %d column %d: %s", c.file, err.line, err.column, err.text);
    tok_hf_t *hf = MP_CALLOC(1, sizeof *hf);
    if (!hf) return json_decref(root), MP_ERR;
    hf->eos = -1;
    hf->json = MP_MALLOC(n ? n : 1);
    if (config) hf->config = MP_MALLOC(n_config ? n_config : 1);
    if (!hf->json || (config && !hf->config) || hf_parse(&c, hf, root) != MP_OK ||
        (config && hf_config_eos(hf, config, n_config, c.file) != MP_OK)) {
        json_decref(root);
        tok_hf_free(hf);
        return MP_ERR;
    }
    json_decref(root);
    memcpy(hf->json, json, n);
    hf->json_n = n;
    if (config) memcpy(hf->config, config, n_config), hf->config_n = n_config;
    sha256_t sum;
    unsigned char raw[SHA256_BYTES];
    sha256_init(&sum);
    sha256_update(&sum, json, n);
    sha256_final(&sum, raw, hf->digest);
    *hf_p = hf;
    return MP_OK;
}

/* The whole of the file at path into a malloc'd *buf_p (*n_p bytes); what names it in messages. */
static int hf_slurp(const char *path, const char *what, unsigned char **buf_p, size_t *n_p)
{
    char show[DECK_SHOW], why[160];
    deck_text_show(path, show, sizeof show);
    uint64_t size = 0;
    const int fd = publish_open_regular(path, O_RDONLY, &size, why, sizeof why); /* a FIFO: refused */
    if (fd < 0) return MP_FAIL("%s %s: %s", what, show, why);
    if (size < 2 || size > HF_FILE_MAX) {
        close(fd);
        return MP_FAIL("%s %s: %llu bytes: %s", what, show, (unsigned long long)size,
                       size < 2 ? "too short for a tokenizer" : "more than 256 MiB, not a tokenizer file");
    }
    unsigned char *buf = MP_MALLOC((size_t)size);
    if (!buf) return close(fd), MP_ERR;
    size_t got = 0;
    while (got < size) {
        const ssize_t r = read(fd, buf + got, (size_t)size - got);
        if (r <= 0) {
            if (r < 0 && errno == EINTR) continue;
            close(fd);
            free(buf);
            return MP_FAIL("%s %s: read %zu of %llu bytes%s%s", what, show, got, (unsigned long long)size,
                           r < 0 ? ": " : "", r < 0 ? strerror(errno) : "");
        }
        got += (size_t)r;
    }
    close(fd);
    *buf_p = buf, *n_p = got;
    return MP_OK;
}

int tok_hf_load(tok_hf_t **hf_p, const char *path, const char *config_path)
{
    unsigned char *json = NULL, *config = NULL;
    size_t n = 0, n_config = 0;
    int rc = MP_ERR;
    if (hf_slurp(path, "tokenizer.json", &json, &n) == MP_OK &&
        (!config_path || hf_slurp(config_path, "tokenizer_config.json", &config, &n_config) == MP_OK))
        rc = tok_hf_load_bytes(hf_p, json, n, config, n_config, path);
    free(config);
    free(json);
    return rc;
}

void tok_hf_free(tok_hf_t *hf)
{
    if (!hf) return;
    for (size_t i = 0; i < hf->nadded; i++) free(hf->added[i].content);
    free(hf->added);
    free(hf->merges);
    free(hf->slots);
    free(hf->start);
    free(hf->bytes);
    free(hf->json);
    free(hf->config);
    free(hf->fallback_byte);
    if (hf->dec_start) free(hf->dec_bytes); /* else unset, or only marked */
    free(hf->dec_start);
    free(hf);
}

int tok_hf_vocab(const tok_hf_t *hf) { return hf->vocab; }
const char *tok_hf_digest(const tok_hf_t *hf) { return hf->digest; }

const unsigned char *tok_hf_json(const tok_hf_t *hf, size_t *n_p)
{
    *n_p = hf->json_n;
    return hf->json;
}

const unsigned char *tok_hf_config(const tok_hf_t *hf, size_t *n_p)
{
    *n_p = hf->config_n;
    return hf->config;
}

int tok_hf_eos(const tok_hf_t *hf) { return hf->eos; }
int tok_hf_strip(const tok_hf_t *hf) { return hf->strip; }

const unsigned char *tok_hf_token(const tok_hf_t *hf, int id, size_t *n_p)
{
    static const unsigned char every_byte[256] = {
#define B4(n) n, n + 1, n + 2, n + 3
#define B16(n) B4(n), B4(n + 4), B4(n + 8), B4(n + 12)
#define B64(n) B16(n), B16(n + 16), B16(n + 32), B16(n + 48)
        B64(0), B64(64), B64(128), B64(192)
#undef B64
#undef B16
#undef B4
    };
    if (id < 0 || id >= hf->vocab) return NULL;
    if (hf->fallback_byte && hf->fallback_byte[id] >= 0) return *n_p = 1, &every_byte[hf->fallback_byte[id]];
    if (hf->dec_start) return *n_p = hf->dec_start[id + 1] - hf->dec_start[id], hf->dec_bytes + hf->dec_start[id];
    *n_p = hf->start[id + 1] - hf->start[id];
    return hf->bytes + hf->start[id];
}
