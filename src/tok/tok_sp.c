/* SentencePiece as a tokenizer (contract in tok_sp.h): the model's bytes and digest, each id's bytes
 * in one table (so decoding is a lookup, as for the other kinds), encoding line by line with its
 * round-trip check. The C++ lives in sp_shim.cc. */
#include "tok_sp.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "publish.h"
#include "sha256.h"
#include "sp_shim.h"

struct tok_sp {
    sp_shim_t *shim;
    unsigned char *model; /* the serialized model, as stored in the data file */
    size_t n_model;
    char digest[SHA256_HEX];
    int vocab;
    unsigned char *bytes; /* id's bytes: bytes[off[id] .. off[id + 1]) */
    size_t *off;          /* (vocab + 1) */
};

int tok_sp_available(void) { return sp_shim_available(); }

/* The whole file path into a malloc'd *buf_p (*n_p bytes), refused when over max bytes (0: no bound).
 * MP_OK, or MP_ERR (reported, naming it). */
static int tok_sp_read_file(const char *path, const char *what, size_t max, char **buf_p, size_t *n_p)
{
    char why[160];
    uint64_t size = 0;
    const int fd = publish_open_regular(path, O_RDONLY, &size, why, sizeof why); /* a planted FIFO: refused */
    if (fd < 0) return MP_FAIL("%s %s: %s", what, path, why);
    if (max && size > max) {
        close(fd);
        return MP_FAIL("%s %s: %llu bytes, more than %zu MiB: not one", what, path, (unsigned long long)size, max >> 20);
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) return close(fd), MP_FAIL("%s %s: %s", what, path, strerror(errno));
    char *buf = MP_MALLOC((size_t)size + 1);
    if (!buf) return fclose(f), MP_ERR;
    const size_t got = fread(buf, 1, (size_t)size, f);
    const int bad = ferror(f) || got != (size_t)size;
    fclose(f);
    if (bad) {
        free(buf);
        return MP_FAIL("%s %s: read %zu of its %llu bytes", what, path, got, (unsigned long long)size);
    }
    *buf_p = buf;
    *n_p = got;
    return MP_OK;
}

/* Each id's bytes into sp->bytes/sp->off, the table grown as the pieces come. MP_OK, or MP_ERR
 * (reported, naming what). */
static int tok_sp_table(tok_sp_t *sp, const char *what)
{
    char err[512], buf[4096];
    size_t total = 0, cap = 4096, len;
    sp->off = MP_MALLOC(((size_t)sp->vocab + 1) * sizeof *sp->off);
    sp->bytes = MP_MALLOC(cap);
    if (!sp->off || !sp->bytes) return MP_ERR;
    for (int id = 0; id < sp->vocab; id++) {
        sp->off[id] = total;
        if (sp_shim_piece(sp->shim, id, buf, sizeof buf, &len, err, sizeof err) != 0)
            return MP_FAIL("SentencePiece model %s: piece %d: %s", what, id, err);
        if (total + len > cap) {
            unsigned char *grown = realloc(sp->bytes, 2 * cap + len);
            if (!grown) return MP_FAIL("SentencePiece model %s: no memory for its pieces' bytes", what);
            sp->bytes = grown;
            cap = 2 * cap + len;
        }
        memcpy(sp->bytes + total, buf, len);
        total += len;
    }
    sp->off[sp->vocab] = total;
    return MP_OK;
}

/* The protobuf varint at b[*at..n) into *v, *at moved past it. 0, or -1 when it runs past n or
 * beyond 10 bytes (64 bits). */
static int tok_sp_varint(const unsigned char *b, size_t n, size_t *at, uint64_t *v)
{
    *v = 0;
    for (unsigned shift = 0; shift < 70 && *at < n; shift += 7) {
        const unsigned char c = b[(*at)++];
        *v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) return 0;
    }
    return -1;
}

/* A .model's top-level fields must cover its bytes exactly, as SentencePiece writes them: fields 1
 * (pieces, repeated) to 5 (denormalizer_spec) of ModelProto, each length-delimited, in that order,
 * each but the pieces at most once. Protobuf itself takes whatever well-formed fields follow as
 * unknown fields, or merges a second field 2-5 into the first, or adds a piece: bytes appended to a
 * model were loaded without a word. The fields' insides are protobuf's to check. MP_OK, or MP_ERR
 * (reported, naming what and the offset of the first byte that is not such a field). */
static int tok_sp_fields_exact(const unsigned char *b, size_t n, const char *what)
{
    size_t at = 0;
    uint64_t last = 0;
    while (at < n) {
        const size_t start = at;
        uint64_t tag, len;
        if (tok_sp_varint(b, n, &at, &tag) != 0)
            return MP_FAIL("SentencePiece model %s: offset %zu: a field's tag runs past the end (%zu bytes)", what,
                           start, n);
        const uint64_t field = tag >> 3, wire = tag & 7;
        if (field < 1 || field > 5 || wire != 2 || field < last || (field == last && field != 1))
            return MP_FAIL("SentencePiece model %s: offset %zu of %zu: field %llu of wire type %llu after field %llu, "
                           "not a field of a model there (fields 1-5, length-delimited, in order): bytes appended "
                           "after its last field?",
                           what, start, n, (unsigned long long)field, (unsigned long long)wire,
                           (unsigned long long)last);
        if (tok_sp_varint(b, n, &at, &len) != 0 || len > n - at)
            return MP_FAIL("SentencePiece model %s: offset %zu: field %llu runs past the end (%zu bytes)", what, start,
                           (unsigned long long)field, n);
        at += (size_t)len;
        last = field;
    }
    return MP_OK;
}

int tok_sp_load_bytes(tok_sp_t **sp_p, const void *model, size_t n, const char *what)
{
    char err[512];
    tok_sp_t *sp = MP_MALLOC(sizeof *sp);
    if (!sp) return MP_ERR;
    memset(sp, 0, sizeof *sp);
    if (sp_shim_load(model, n, &sp->shim, err, sizeof err) != 0) {
        MP_ERROR("SentencePiece model %s: %s", what, err);
        goto err_free;
    }
    /* after protobuf's own parse, so that a broken model keeps protobuf's reason */
    if (tok_sp_fields_exact(model, n, what) != MP_OK) goto err_free;
    sp->vocab = sp_shim_size(sp->shim);
    if (sp->vocab < 1 || sp->vocab > TOK_SP_VOCAB_MAX) {
        MP_ERROR("SentencePiece model %s: %d pieces; the data file's uint16 ids allow at most %d", what, sp->vocab,
                 TOK_SP_VOCAB_MAX);
        goto err_free;
    }
    if (!(sp->model = MP_MALLOC(n ? n : 1))) goto err_free;
    memcpy(sp->model, model, n);
    sp->n_model = n;
    sha256_t h;
    unsigned char raw[SHA256_BYTES];
    sha256_init(&h);
    sha256_update(&h, model, n);
    sha256_final(&h, raw, sp->digest);
    if (tok_sp_table(sp, what) != MP_OK) goto err_free;
    *sp_p = sp;
    return MP_OK;
err_free:
    tok_sp_free(sp);
    return MP_ERR;
}

int tok_sp_load_file(tok_sp_t **sp_p, const char *path)
{
    char *buf;
    size_t n;
    if (tok_sp_read_file(path, "SentencePiece model", TOK_SP_MODEL_MAX, &buf, &n) != MP_OK) return MP_ERR;
    if (!n) return free(buf), MP_FAIL("SentencePiece model %s: an empty file", path);
    const int rc = tok_sp_load_bytes(sp_p, buf, n, path);
    free(buf);
    return rc;
}

int tok_sp_train(tok_sp_t **sp_p, const char *text_path, int vocab, const char *model_type)
{
    char err[1024], *text, *model;
    size_t n, n_model;
    if (vocab < TOK_SP_VOCAB_MIN || vocab > TOK_SP_VOCAB_MAX)
        return MP_FAIL("--vocab-size %d: must be in [%d, %d] (%d: the byte pieces and <unk> <s> </s>; %d: the data "
                       "file's ids are uint16)",
                       vocab, TOK_SP_VOCAB_MIN, TOK_SP_VOCAB_MAX, TOK_SP_VOCAB_MIN, TOK_SP_VOCAB_MAX);
    if (strcmp(model_type, "unigram") && strcmp(model_type, "bpe"))
        return MP_FAIL("--sp-model '%s': unigram or bpe", model_type);
    if (tok_sp_read_file(text_path, "text file", 0, &text, &n) != MP_OK) return MP_ERR;
    const int trained = sp_shim_train(text, n, vocab, model_type, &model, &n_model, err, sizeof err);
    free(text);
    if (trained != 0) return MP_FAIL("SentencePiece %s model of %d pieces on %s: %s", model_type, vocab, text_path, err);
    char what[4200];
    snprintf(what, sizeof what, "trained on %s", text_path);
    const int rc = tok_sp_load_bytes(sp_p, model, n_model, what);
    free(model);
    return rc;
}

void tok_sp_free(tok_sp_t *sp)
{
    if (!sp) return;
    free(sp->off);
    free(sp->bytes);
    free(sp->model);
    sp_shim_free(sp->shim);
    free(sp);
}

int tok_sp_vocab(const tok_sp_t *sp) { return sp->vocab; }

const unsigned char *tok_sp_model(const tok_sp_t *sp, size_t *n_p)
{
    *n_p = sp->n_model;
    return sp->model;
}

const char *tok_sp_digest(const tok_sp_t *sp) { return sp->digest; }

const unsigned char *tok_sp_token(const tok_sp_t *sp, int id, size_t *n_p)
{
    if (id < 0 || id >= sp->vocab) return NULL;
    *n_p = sp->off[id + 1] - sp->off[id];
    return sp->bytes + sp->off[id];
}

/* Whether ids[0..n) decode to text[0..len): the check that makes a data file's ids stand for its
 * text exactly. The offset of the first byte that differs in *at_p when they do not. */
static int tok_sp_matches(const tok_sp_t *sp, const int *ids, size_t n, const unsigned char *text, size_t len,
                          size_t *at_p)
{
    size_t at = 0, k;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *b = tok_sp_token(sp, ids[i], &k);
        if (!b) return *at_p = at, 0; /* an id SentencePiece should never give */
        for (size_t j = 0; j < k; j++, at++)
            if (at >= len || b[j] != text[at]) return *at_p = at, 0;
    }
    *at_p = at;
    return at == len;
}

int tok_sp_encode(const tok_sp_t *sp, const unsigned char *text, size_t n, uint32_t *ids, size_t *n_ids_p)
{
    char err[512];
    size_t m = 0, got, bad;
    /* line by line: pieces never hold a newline (training reads lines), so the ids are those of the
     * whole text, and SentencePiece never holds more than one line's lattice */
    int *line_ids = NULL;
    size_t cap = 0;
    for (size_t at = 0; at < n;) {
        const unsigned char *nl = memchr(text + at, '\n', n - at);
        const size_t len = nl ? (size_t)(nl - (text + at)) + 1 : n - at;
        if (len > cap) {
            int *grown = realloc(line_ids, len * sizeof *grown);
            if (!grown) return free(line_ids), MP_FAIL("tokenizer sp: no memory for a line of %zu bytes", len);
            line_ids = grown;
            cap = len;
        }
        if (sp_shim_encode(sp->shim, (const char *)text + at, len, line_ids, cap, &got, err, sizeof err) != 0)
            return free(line_ids), MP_FAIL("tokenizer sp: the line at byte %zu: %s", at, err);
        if (!tok_sp_matches(sp, line_ids, got, text + at, len, &bad))
            return free(line_ids), MP_FAIL("tokenizer sp: the text at byte %zu does not decode back from its tokens "
                                           "(a model that normalizes text, or U+2581, SentencePiece's mark for a "
                                           "space, in the text)",
                                           at + bad);
        for (size_t i = 0; i < got; i++) ids[m + i] = (uint32_t)line_ids[i];
        m += got;
        at += len;
    }
    free(line_ids);
    *n_ids_p = m;
    return MP_OK;
}
