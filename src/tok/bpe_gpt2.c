/* GPT-2's byte-level BPE (contract in bpe_gpt2.h): reading encoder.json and vocab.bpe, the two hash
 * tables, the merge loops.
 *
 * Tables: every token's bytes in one blob (off[id]..off[id+1]); a table from bytes to id (the
 * whole-piece check, and reading vocab.bpe); a table from an adjacent pair of ids (a, b) to the id
 * of the token whose bytes are a's then b's, made from every way of cutting every mergeable token in
 * two. That is the rank tiktoken looks up for the pair's bytes, without hashing bytes in the loop:
 * the parts of a piece are always tokens, so a pair of parts is a pair of ids. */
#include "bpe_gpt2.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "publish.h"
#include "deck.h" /* deck_text_show */
#include "merge_heap.h"
#include "sha256.h"

#define BPE_NONE UINT32_MAX    /* the rank of a pair that does not merge */
#define BPE_SHORT 64           /* pieces up to this many bytes merge by scanning; longer ones by a heap */
#define BPE_TOKEN_MAX 256      /* the most bytes a token may have */
#define BPE_FILE_MAX (64u << 20) /* the largest vocabulary file read */
#define BPE_IDS_MAX 65536      /* ids are stored as uint16 */

/* OpenAI's published files: another file is read, with a warning. */
#define GPT2_ENCODER_SHA256 "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
#define GPT2_VOCAB_SHA256 "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"

/* A token in the bytes -> id table, with what a lookup compares first so that most lookups touch one
 * cache line: its first 8 bytes (zero-padded), its length, the hash's high half. len 0: empty. */
typedef struct {
    uint64_t head;
    uint32_t hash;
    uint16_t id, len;
} bpe_slot_t;

struct bpe_gpt2 {
    int n_tokens;           /* V */
    int n_ranked;           /* 256 + merges: the ids text is encoded to */
    size_t longest;         /* the most bytes of a mergeable token */
    uint32_t *off;          /* (V + 1) token id's bytes are blob[off[id] .. off[id + 1]) */
    unsigned char *blob;
    uint16_t byte_id[256];  /* the token of each byte */
    bpe_slot_t *bytes_slot; /* bytes -> id: open addressing */
    size_t bytes_mask;
    uint64_t *pair_slot;    /* (a, b) -> id: (a << 16 | b) << 32 | id per slot, UINT64_MAX empty */
    size_t pair_mask;
    char digest[SHA256_HEX];
};

/* ---- hashing ------------------------------------------------------------------------------------ */

/* A hash of s[0..n): eight bytes at a time, each word multiplied in and folded. */
static inline uint64_t bpe_hash_bytes(const unsigned char *s, size_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull * (n + 1), w;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
    }
    if (i < n) {
        w = 0;
        for (size_t k = 0; i + k < n; k++) w |= (uint64_t)s[i + k] << (8 * k);
        h = (h ^ w) * 0x94d049bb133111ebull;
    }
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ h >> 32;
}

static inline size_t bpe_hash_pair(uint32_t key) { return (size_t)(((uint64_t)key * 0x9e3779b97f4a7c15ull) >> 24); }

/* The first 8 bytes of s[0..n), zero-padded, as one word. */
static inline uint64_t bpe_head(const unsigned char *s, size_t n)
{
    uint64_t w = 0;
    if (n >= 8) memcpy(&w, s, 8);
    else
        for (size_t k = 0; k < n; k++) w |= (uint64_t)s[k] << (8 * k);
    return w;
}

/* The id of the token with bytes s[0..n), or -1. */
static int bpe_find(const bpe_gpt2_t *b, const unsigned char *s, size_t n)
{
    const uint64_t h = bpe_hash_bytes(s, n), head = bpe_head(s, n);
    for (size_t i = h & b->bytes_mask;; i = (i + 1) & b->bytes_mask) {
        const bpe_slot_t *v = &b->bytes_slot[i];
        if (!v->len) return -1;
        if (v->len != n || v->head != head || v->hash != (uint32_t)(h >> 32)) continue;
        if (n <= 8 || !memcmp(b->blob + b->off[v->id] + 8, s + 8, n - 8)) return v->id;
    }
}

/* The id of the token a's bytes then b's make, which is the pair's rank, or BPE_NONE. */
static inline uint32_t bpe_pair(const bpe_gpt2_t *b, uint32_t a, uint32_t c)
{
    const uint32_t key = a << 16 | c;
    for (size_t i = bpe_hash_pair(key) & b->pair_mask;; i = (i + 1) & b->pair_mask) {
        const uint64_t v = b->pair_slot[i];
        if (v == UINT64_MAX) return BPE_NONE;
        if ((uint32_t)(v >> 32) == key) return (uint32_t)v;
    }
}

/* The smallest power of two >= 2 n (at least 64). */
static size_t bpe_table_size(size_t n)
{
    size_t s = 64;
    while (s < 2 * n) s *= 2;
    return s;
}

/* The bytes -> id table over every token. MP_OK, or MP_ERR (reported) when two ids have the same
 * bytes (named by file). */
static int bpe_index_bytes(bpe_gpt2_t *b, const char *file)
{
    const size_t size = bpe_table_size((size_t)b->n_tokens);
    if (!(b->bytes_slot = MP_CALLOC(size, sizeof *b->bytes_slot))) return MP_ERR;
    b->bytes_mask = size - 1;
    for (int id = 0; id < b->n_tokens; id++) {
        const unsigned char *s = b->blob + b->off[id];
        const size_t n = b->off[id + 1] - b->off[id];
        const int twin = bpe_find(b, s, n);
        if (twin >= 0) return MP_FAIL("%s: ids %d and %d are the same token", file, twin, id);
        const uint64_t h = bpe_hash_bytes(s, n);
        size_t i = h & b->bytes_mask;
        while (b->bytes_slot[i].len) i = (i + 1) & b->bytes_mask;
        b->bytes_slot[i] = (bpe_slot_t){bpe_head(s, n), (uint32_t)(h >> 32), (uint16_t)id, (uint16_t)n};
    }
    return MP_OK;
}

/* The pair table: for every mergeable token t and every cut of it into two tokens a, b, (a, b) -> t. */
static int bpe_index_pairs(bpe_gpt2_t *b)
{
    size_t n = 0;
    for (int pass = 0; pass < 2; pass++) { /* count, then fill */
        if (pass) {
            const size_t size = bpe_table_size(n);
            if (!(b->pair_slot = MP_MALLOC(size * sizeof *b->pair_slot))) return MP_ERR;
            memset(b->pair_slot, 0xff, size * sizeof *b->pair_slot);
            b->pair_mask = size - 1;
        }
        for (int t = 256; t < b->n_ranked; t++) {
            const unsigned char *s = b->blob + b->off[t];
            const size_t len = b->off[t + 1] - b->off[t];
            for (size_t cut = 1; cut < len; cut++) {
                const int x = bpe_find(b, s, cut), y = bpe_find(b, s + cut, len - cut);
                if (x < 0 || y < 0 || x >= b->n_ranked || y >= b->n_ranked) continue;
                if (!pass) {
                    n++;
                    continue;
                }
                const uint32_t key = (uint32_t)x << 16 | (uint32_t)y;
                size_t i = bpe_hash_pair(key) & b->pair_mask;
                while (b->pair_slot[i] != UINT64_MAX) i = (i + 1) & b->pair_mask;
                b->pair_slot[i] = (uint64_t)key << 32 | (uint32_t)t;
            }
        }
    }
    return MP_OK;
}

/* ---- the files ---------------------------------------------------------------------------------- */

/* The whole of dir/name into a malloc'd buffer, added to the digest sum; hex_p gets its own SHA-256,
 * path_p (DECK_SHOW bytes) the path as messages show it. */
static int bpe_read_file(const char *dir, const char *name, sha256_t *sum, char *hex_p, unsigned char **buf_p,
                         size_t *n_p, char *path_p)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    deck_text_show(path, path_p, DECK_SHOW);
    char why[160];
    uint64_t size = 0;
    const int fd = publish_open_regular(path, O_RDONLY, &size, why, sizeof why); /* a planted FIFO: refused */
    if (fd < 0)
        return MP_FAIL("GPT-2 vocabulary file %s: %s%s", path_p, why,
                       errno == ENOENT ? " (bash .ci/deps.sh fetches it; --tokenizer-dir or MINDPIPE_GPT2_DIR say "
                                         "where it is)" : "");
    if (size < 1 || size > BPE_FILE_MAX) {
        close(fd);
        return MP_FAIL("GPT-2 vocabulary file %s: %llu bytes: %s", path_p, (unsigned long long)size,
                       size < 1 ? "empty" : "more than 64 MiB, not a vocabulary file");
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) return close(fd), MP_FAIL("GPT-2 vocabulary file %s: %s", path_p, strerror(errno));
    const size_t n = (size_t)size;
    unsigned char *buf = MP_MALLOC(n + 1);
    if (!buf) return fclose(f), MP_ERR;
    const size_t got = fread(buf, 1, n, f);
    fclose(f);
    if (got != n) return free(buf), MP_FAIL("GPT-2 vocabulary file %s: read %zu of %zu bytes", path_p, got, n);
    buf[n] = 0;
    sha256_t one;
    unsigned char raw[SHA256_BYTES];
    sha256_init(&one);
    sha256_update(&one, buf, n);
    sha256_final(&one, raw, hex_p);
    sha256_update(sum, buf, n);
    *buf_p = buf;
    *n_p = n;
    return MP_OK;
}

/* GPT-2's map from characters back to bytes, filled into map (BPE_CHARS): map[c] is the byte
 * character c stands for, -1 for none. */
#define BPE_CHARS 324
static void bpe_char_map(short *map)
{
    int next = 256;
    for (int c = 0; c < BPE_CHARS; c++) map[c] = -1;
    for (int byte = 0; byte < 256; byte++) {
        const int self = (byte >= 33 && byte <= 126) || (byte >= 161 && byte <= 172) || byte >= 174;
        map[self ? byte : next++] = (short)byte;
    }
}

/* Reading one file: its bytes, where we are, and its name for messages. */
typedef struct {
    const unsigned char *s, *p, *end;
    const char *file; /* as messages show it */
    const char *kind; /* "encoder.json" or "vocab.bpe" */
    const short *map; /* bpe_char_map's */
} bpe_cur_t;

/* Reports what is wrong at the cursor; MP_ERR. */
static int bpe_bad(const bpe_cur_t *c, const char *what)
{
    return MP_FAIL("%s: byte %zu: %s: corrupt, or not GPT-2's %s", c->file, (size_t)(c->p - c->s), what, c->kind);
}

/* One UTF-8 character of the file at c->p (c->p < c->end) into *cp_p, advancing; MP_ERR at a
 * malformed one. (Only U+0000..U+0143 stand for bytes, so longer forms are refused later.) */
static int bpe_utf8(bpe_cur_t *c, uint32_t *cp_p)
{
    const unsigned char *p = c->p;
    if (p[0] < 0x80) return *cp_p = p[0], c->p++, MP_OK;
    const int len = p[0] >= 0xf0 ? 4 : p[0] >= 0xe0 ? 3 : p[0] >= 0xc2 ? 2 : 0;
    if (!len || (size_t)len > (size_t)(c->end - p)) return bpe_bad(c, "malformed UTF-8");
    uint32_t cp = p[0] & (0x7fu >> len);
    for (int i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80) return bpe_bad(c, "malformed UTF-8");
        cp = cp << 6 | (p[i] & 0x3f);
    }
    c->p += len;
    *cp_p = cp;
    return MP_OK;
}

/* The four hex digits of a JSON u-escape at c->p. */
static int bpe_hex4(bpe_cur_t *c, uint32_t *cp_p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++, c->p++) {
        const int h = c->p >= c->end ? -1 : *c->p;
        const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (d < 0) return bpe_bad(c, "a \\u escape without four hex digits");
        v = v << 4 | (uint32_t)d;
    }
    *cp_p = v;
    return MP_OK;
}

/* One character of a JSON string at c->p, escapes decoded (surrogates are left as they are: they
 * stand for no byte). */
static int bpe_json_char(bpe_cur_t *c, uint32_t *cp_p)
{
    if (*c->p < 0x20) return bpe_bad(c, "a control character in a string");
    if (*c->p != '\\') return bpe_utf8(c, cp_p);
    if (++c->p >= c->end) return bpe_bad(c, "an unfinished escape");
    static const char plain[] = "\"\\/bfnrt", means[] = "\"\\/\b\f\n\r\t";
    const char *e = *c->p ? strchr(plain, *c->p) : NULL;
    if (e) return *cp_p = (unsigned char)means[e - plain], c->p++, MP_OK;
    if (*c->p != 'u') return bpe_bad(c, "an unknown escape");
    c->p++;
    return bpe_hex4(c, cp_p);
}

/* Characters at c->p up to the delimiter stop (not consumed), through GPT-2's map, as bytes into
 * out (BPE_TOKEN_MAX); their count in *n_p (at least one). stop '"' reads a JSON string's inside. */
static int bpe_token_text(bpe_cur_t *c, int stop, unsigned char *out, size_t *n_p)
{
    size_t n = 0;
    while (c->p < c->end && *c->p != stop && !(stop == ' ' && *c->p == '\n')) {
        uint32_t cp;
        if ((stop == '"' ? bpe_json_char(c, &cp) : bpe_utf8(c, &cp)) != MP_OK) return MP_ERR;
        const int byte = cp < BPE_CHARS ? c->map[cp] : -1;
        if (byte < 0) return bpe_bad(c, "a character that stands for no byte");
        if (n == BPE_TOKEN_MAX) return bpe_bad(c, "a token longer than 256 bytes");
        out[n++] = (unsigned char)byte;
    }
    if (!n) return bpe_bad(c, "an empty token");
    *n_p = n;
    return MP_OK;
}

static void bpe_skip_space(bpe_cur_t *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t')) c->p++;
}

/* Skips white space, then consumes ch or reports what was expected. */
static int bpe_expect(bpe_cur_t *c, int ch, const char *what)
{
    bpe_skip_space(c);
    if (c->p >= c->end || *c->p != ch) return bpe_bad(c, what);
    c->p++;
    return MP_OK;
}

/* A token id: decimal digits, below BPE_IDS_MAX. */
static int bpe_json_id(bpe_cur_t *c, long *id_p)
{
    bpe_skip_space(c);
    long v = 0;
    const unsigned char *from = c->p;
    if (c->end - c->p > 1 && c->p[0] == '0' && c->p[1] >= '0' && c->p[1] <= '9')
        return bpe_bad(c, "an id with a leading zero (JSON has none)");
    for (; c->p < c->end && *c->p >= '0' && *c->p <= '9'; c->p++)
        if ((v = v * 10 + (*c->p - '0')) >= BPE_IDS_MAX) return bpe_bad(c, "an id of 65536 or more");
    if (c->p == from) return bpe_bad(c, "expected an id (digits)");
    *id_p = v;
    return MP_OK;
}

/* The tokens, laid out by id into b->off and b->blob from what encoder.json gave: len[id] bytes at
 * text + start[id] for ids 0..count-1, every one of them present. */
static int bpe_lay_out(bpe_gpt2_t *b, const unsigned char *text, const uint32_t *start, const uint16_t *len, int count)
{
    size_t total = 0;
    for (int id = 0; id < count; id++) total += len[id];
    if (!(b->off = MP_MALLOC(((size_t)count + 1) * sizeof *b->off)) || !(b->blob = MP_MALLOC(total))) return MP_ERR;
    b->n_tokens = count;
    b->off[0] = 0;
    for (int id = 0; id < count; id++) {
        memcpy(b->blob + b->off[id], text + start[id], len[id]);
        b->off[id + 1] = b->off[id] + len[id];
    }
    return MP_OK;
}

/* encoder.json's entries "TOKEN": id, read in file order into tmp, then laid out by id. */
static int bpe_read_encoder(bpe_gpt2_t *b, bpe_cur_t *c)
{
    int rc = MP_ERR, count = 0;
    uint32_t *start = MP_MALLOC(BPE_IDS_MAX * sizeof *start);
    uint16_t *len = MP_CALLOC(BPE_IDS_MAX, sizeof *len); /* 0: not seen */
    unsigned char *tmp = MP_MALLOC((size_t)(c->end - c->s)); /* a token's bytes are fewer than its text's */
    size_t used = 0;
    if (!start || !len || !tmp || bpe_expect(c, '{', "expected '{'") != MP_OK) goto out;
    for (;;) {
        size_t n;
        long id;
        if (bpe_expect(c, '"', "expected a token (a string)") != MP_OK || bpe_token_text(c, '"', tmp + used, &n) != MP_OK ||
            bpe_expect(c, '"', "an unterminated string") != MP_OK || bpe_expect(c, ':', "expected ':'") != MP_OK ||
            bpe_json_id(c, &id) != MP_OK)
            goto out;
        if (len[id]) {
            bpe_bad(c, "an id given twice");
            goto out;
        }
        start[id] = (uint32_t)used, len[id] = (uint16_t)n, used += n, count++;
        bpe_skip_space(c);
        if (c->p < c->end && *c->p == ',') c->p++;
        else if (bpe_expect(c, '}', "expected ',' or '}'") != MP_OK) goto out;
        else break;
    }
    bpe_skip_space(c);
    if (c->p != c->end) {
        bpe_bad(c, "text after the object");
        goto out;
    }
    for (int id = 0; id < count; id++)
        if (!len[id]) {
            MP_ERROR("%s: %d tokens, but none has id %d (ids must be 0..%d): corrupt, or not GPT-2's encoder.json",
                     c->file, count, id, count - 1);
            goto out;
        }
    rc = bpe_lay_out(b, tmp, start, len, count);
out:
    free(tmp);
    free(len);
    free(start);
    return rc;
}

/* vocab.bpe: the header, then merge k on line k + 2 must make token 256 + k out of tokens made
 * before it; the one-byte tokens must have ids below 256. Sets n_ranked and longest. */
static int bpe_read_merges(bpe_gpt2_t *b, bpe_cur_t *c, const char *encoder_file)
{
    if (c->end - c->p < 8 || memcmp(c->p, "#version", 8)) return bpe_bad(c, "expected the line \"#version: ...\" first");
    while (c->p < c->end && *c->p != '\n') c->p++;
    c->p += c->p < c->end;
    for (int v = 0; v < 256; v++) {
        const int id = bpe_find(b, &(unsigned char){(unsigned char)v}, 1);
        if (id < 0 || id >= 256)
            return MP_FAIL("%s: byte 0x%02x %s: corrupt, or not GPT-2's encoder.json", encoder_file, v,
                           id < 0 ? "has no token" : "has an id of 256 or more");
    }
    int k = 0;
    for (; c->p < c->end; k++) {
        unsigned char ab[2 * BPE_TOKEN_MAX];
        size_t na, nb;
        if (bpe_token_text(c, ' ', ab, &na) != MP_OK) return MP_ERR;
        if (c->p >= c->end || *c->p != ' ') return bpe_bad(c, "expected \"A B\" (a merge)");
        c->p++;
        if (bpe_token_text(c, '\n', ab + na, &nb) != MP_OK) return MP_ERR;
        c->p += c->p < c->end; /* the newline; the last line may lack it */
        const int x = bpe_find(b, ab, na), y = bpe_find(b, ab + na, nb), t = bpe_find(b, ab, na + nb);
        if (x < 0 || y < 0 || t < 0)
            return MP_FAIL("%s: line %d: merge %d's %s is not a token of %s: corrupt, or not GPT-2's vocab.bpe", c->file,
                           k + 2, k, x < 0 ? "left part" : y < 0 ? "right part" : "result", encoder_file);
        if (t != 256 + k || x >= t || y >= t)
            return MP_FAIL("%s: line %d: merge %d makes token %d out of %d and %d, expected token %d out of tokens "
                           "below it: corrupt, or not the vocab.bpe of %s", c->file, k + 2, k, t, x, y, 256 + k, encoder_file);
    }
    if (!k) return bpe_bad(c, "no merges");
    b->n_ranked = 256 + k;
    /* the ids no merge makes are special tokens, written <|...|>: any other is a merge that is missing */
    for (int id = b->n_ranked; id < b->n_tokens; id++) {
        const unsigned char *t = b->blob + b->off[id];
        const size_t n = b->off[id + 1] - b->off[id];
        if (n < 4 || memcmp(t, "<|", 2) || memcmp(t + n - 2, "|>", 2))
            return MP_FAIL("%s: token %d of %s is made by no merge (there are %d) and is not a special token "
                           "<|...|>: truncated, or not the vocab.bpe of %s", c->file, id, encoder_file, k, encoder_file);
    }
    for (int id = 0; id < b->n_ranked; id++)
        if (b->off[id + 1] - b->off[id] > b->longest) b->longest = b->off[id + 1] - b->off[id];
    return MP_OK;
}

/* A vocabulary file that reads well but is not OpenAI's is used, and said so. */
static void bpe_warn_other(const char *file, const char *sha, const char *gpt2_sha)
{
    if (strcmp(sha, gpt2_sha))
        MP_WARN("%s is not GPT-2's published file (SHA-256 %s, GPT-2's is %s): its tokens are not GPT-2's; the token "
                "file records this vocabulary's digest", file, sha, gpt2_sha);
}

int bpe_gpt2_load(bpe_gpt2_t **bpe_p, const char *dir)
{
    int rc = MP_ERR;
    unsigned char *enc = NULL, *voc = NULL, raw[SHA256_BYTES];
    size_t n_enc = 0, n_voc = 0;
    char enc_file[DECK_SHOW], voc_file[DECK_SHOW], enc_sha[SHA256_HEX], voc_sha[SHA256_HEX];
    sha256_t sum;
    sha256_init(&sum);
    bpe_gpt2_t *b = MP_CALLOC(1, sizeof *b);
    if (!b) return MP_ERR;
    if (bpe_read_file(dir, "encoder.json", &sum, enc_sha, &enc, &n_enc, enc_file) != MP_OK ||
        bpe_read_file(dir, "vocab.bpe", &sum, voc_sha, &voc, &n_voc, voc_file) != MP_OK)
        goto err_free;
    short map[BPE_CHARS];
    bpe_char_map(map);
    bpe_cur_t ce = {enc, enc, enc + n_enc, enc_file, "encoder.json", map};
    bpe_cur_t cv = {voc, voc, voc + n_voc, voc_file, "vocab.bpe", map};
    if (bpe_read_encoder(b, &ce) != MP_OK || bpe_index_bytes(b, enc_file) != MP_OK ||
        bpe_read_merges(b, &cv, enc_file) != MP_OK || bpe_index_pairs(b) != MP_OK)
        goto err_free;
    for (int v = 0; v < 256; v++) b->byte_id[v] = (uint16_t)bpe_find(b, &(unsigned char){(unsigned char)v}, 1);
    sha256_final(&sum, raw, b->digest);
    bpe_warn_other(enc_file, enc_sha, GPT2_ENCODER_SHA256);
    bpe_warn_other(voc_file, voc_sha, GPT2_VOCAB_SHA256);
    *bpe_p = b;
    b = NULL;
    rc = MP_OK;
err_free:
    bpe_gpt2_free(b);
    free(voc);
    free(enc);
    return rc;
}

void bpe_gpt2_free(bpe_gpt2_t *b)
{
    if (!b) return;
    free(b->pair_slot);
    free(b->bytes_slot);
    free(b->blob);
    free(b->off);
    free(b);
}

int bpe_gpt2_vocab(const bpe_gpt2_t *b) { return b->n_tokens; }

const char *bpe_gpt2_digest(const bpe_gpt2_t *b) { return b->digest; }

const unsigned char *bpe_gpt2_token(const bpe_gpt2_t *b, int id, size_t *n_p)
{
    if (id < 0 || id >= b->n_tokens) return NULL;
    *n_p = b->off[id + 1] - b->off[id];
    return b->blob + b->off[id];
}

/* ---- merging ------------------------------------------------------------------------------------ */

/* A short piece: the parts in out[0..m), the rank of each adjacent pair in rank[0..m-1); the lowest
 * rank merges (the first of equals), its two neighbours' ranks are looked up again. */
static size_t bpe_merge_short(const bpe_gpt2_t *b, const unsigned char *s, size_t n, uint32_t *out)
{
    uint32_t rank[BPE_SHORT];
    for (size_t i = 0; i < n; i++) out[i] = b->byte_id[s[i]];
    for (size_t i = 0; i + 1 < n; i++) rank[i] = bpe_pair(b, out[i], out[i + 1]);
    size_t m = n;
    for (;;) {
        uint32_t best = BPE_NONE;
        size_t at = 0;
        for (size_t i = 0; i + 1 < m; i++)
            if (rank[i] < best) best = rank[i], at = i;
        if (best == BPE_NONE) break;
        out[at] = (uint32_t)best; /* the pair's rank is the id of the token it makes */
        m--;
        memmove(out + at + 1, out + at + 2, (m - at - 1) * sizeof *out);
        if (at + 2 < m) memmove(rank + at + 1, rank + at + 2, (m - at - 2) * sizeof *rank);
        rank[at] = at + 1 < m ? bpe_pair(b, out[at], out[at + 1]) : BPE_NONE;
        if (at) rank[at - 1] = bpe_pair(b, out[at - 1], out[at]);
    }
    return m;
}

/* A long piece, the same merges in O(n log n): parts are a linked list by their first byte's
 * position p (out[p] its token, nxt[p] the next part's position, n at the end), rank[p] the rank of
 * the pair starting at p (BPE_NONE also marks a merged-away part), and the heap holds (rank, p)
 * entries, stale ones skipped when popped (their rank is no longer rank[p]: a pair that starts at p
 * only grows, and a longer token has another id). */
static size_t bpe_merge_long(const bpe_gpt2_t *b, const unsigned char *s, size_t n, uint32_t *out)
{
    uint32_t *nxt = MP_MALLOC(n * sizeof *nxt), *prv = MP_MALLOC(n * sizeof *prv), *rank = MP_MALLOC(n * sizeof *rank);
    uint64_t *heap = MP_MALLOC(3 * n * sizeof *heap); /* n - 1 pairs, then at most 2 per merge */
    size_t m = 0, nh = 0;
    if (!nxt || !prv || !rank || !heap) goto out;
    for (size_t i = 0; i < n; i++) out[i] = b->byte_id[s[i]], nxt[i] = (uint32_t)(i + 1), prv[i] = (uint32_t)i - 1;
    for (size_t i = 0; i < n; i++) {
        rank[i] = i + 1 < n ? bpe_pair(b, out[i], out[i + 1]) : BPE_NONE;
        if (rank[i] != BPE_NONE) merge_heap_push(heap, &nh, (uint64_t)rank[i] << 32 | i);
    }
    while (nh) {
        const uint64_t top = merge_heap_pop(heap, &nh);
        const uint32_t r = (uint32_t)(top >> 32), p = (uint32_t)top;
        if (rank[p] != r) continue;
        const uint32_t q = nxt[p];
        out[p] = (uint32_t)r;
        rank[q] = BPE_NONE;
        nxt[p] = nxt[q];
        if (nxt[p] < n) prv[nxt[p]] = p;
        rank[p] = nxt[p] < n ? bpe_pair(b, out[p], out[nxt[p]]) : BPE_NONE;
        if (rank[p] != BPE_NONE) merge_heap_push(heap, &nh, (uint64_t)rank[p] << 32 | p);
        if (p) {
            const uint32_t l = prv[p];
            rank[l] = bpe_pair(b, out[l], out[p]);
            if (rank[l] != BPE_NONE) merge_heap_push(heap, &nh, (uint64_t)rank[l] << 32 | l);
        }
    }
    for (size_t p = 0; p < n; p = nxt[p]) out[m++] = out[p]; /* m <= p: in place */
out:
    free(heap);
    free(rank);
    free(prv);
    free(nxt);
    return m;
}

size_t bpe_gpt2_encode_piece(const bpe_gpt2_t *b, const unsigned char *s, size_t n, uint32_t *out)
{
    if (n == 1) return out[0] = b->byte_id[s[0]], 1;
    if (n <= b->longest) { /* a piece that is a token is that token, as in tiktoken */
        const int whole = bpe_find(b, s, n);
        if (whole >= 0 && whole < b->n_ranked) return out[0] = (uint32_t)whole, 1;
    }
    return n <= BPE_SHORT ? bpe_merge_short(b, s, n, out) : bpe_merge_long(b, s, n, out);
}
