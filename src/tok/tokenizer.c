/* Tokenizers (contract in tokenizer.h): the kind's dispatch, encoding a whole text piece by piece,
 * decoding. */
#include "tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "pretok_gpt2.h"

int tok_kind_parse(const char *name, tok_kind_t *kind_p)
{
    if (!strcmp(name, "bytes")) *kind_p = TOK_BYTES;
    else if (!strcmp(name, "gpt2")) *kind_p = TOK_GPT2;
    else if (!strcmp(name, "sp")) *kind_p = TOK_SP;
    else if (!strncmp(name, "hf:", 3) && name[3]) *kind_p = TOK_HF;
    else return MP_FAIL("--tokenizer '%s': bytes, gpt2, sp or hf:DIR", name);
    return MP_OK;
}

int tok_default_dir(char *dir, size_t n)
{
    const char *env = getenv("MINDPIPE_GPT2_DIR"), *home = getenv("HOME");
    int len;
    if (env && *env) len = snprintf(dir, n, "%s", env);
    else if (home && *home) len = snprintf(dir, n, "%s/.cache/mindpipe/gpt2", home);
    else return MP_FAIL("GPT-2's vocabulary: neither MINDPIPE_GPT2_DIR nor HOME is set: give --tokenizer-dir DIR");
    if (len < 0 || (size_t)len >= n) return MP_FAIL("GPT-2's vocabulary: its directory's path is longer than %zu bytes", n - 1);
    return MP_OK;
}

int tok_open(tokenizer_t *tok_p, tok_kind_t kind, const char *dir)
{
    tokenizer_t tok = {kind, NULL, NULL, NULL};
    if (kind == TOK_SP) return MP_FAIL("tokenizer sp: its model comes from tok_sp.h (tok_from_sp)");
    if (kind == TOK_HF) return MP_FAIL("tokenizer hf: its file comes from tok_open_hf_dir or tok_from_hf");
    if (kind == TOK_GPT2) {
        char def[4096];
        if (!dir) {
            if (tok_default_dir(def, sizeof def) != MP_OK) return MP_ERR;
            dir = def;
        }
        if (bpe_gpt2_load(&tok.bpe, dir) != MP_OK) return MP_ERR;
    }
    *tok_p = tok;
    return MP_OK;
}

tokenizer_t tok_from_sp(tok_sp_t *sp) { return (tokenizer_t){TOK_SP, NULL, sp, NULL}; }
tokenizer_t tok_from_hf(tok_hf_t *hf) { return (tokenizer_t){TOK_HF, NULL, NULL, hf}; }

int tok_open_hf_dir(tokenizer_t *tok_p, const char *dir)
{
    char path[4200];
    struct stat st;
    if (snprintf(path, sizeof path, "%s/tokenizer.json", dir) >= (int)sizeof path)
        return MP_FAIL("hf:%.200s: the directory's path is too long", dir);
    if (!stat(path, &st)) {
        char config[4200];
        tok_hf_t *hf;
        snprintf(config, sizeof config, "%s/tokenizer_config.json", dir);
        if (tok_hf_load(&hf, path, stat(config, &st) ? NULL : config) != MP_OK) return MP_ERR;
        *tok_p = tok_from_hf(hf);
        return MP_OK;
    }
    snprintf(path, sizeof path, "%s/tokenizer.model", dir);
    if (stat(path, &st)) return MP_FAIL("hf:%.200s: neither tokenizer.json nor tokenizer.model is there", dir);
    if (!tok_sp_available())
        return MP_FAIL("hf:%.200s: its tokenizer.model needs SentencePiece, and this mindpipe was built without it", dir);
    tok_sp_t *sp;
    if (tok_sp_load_file(&sp, path) != MP_OK) return MP_ERR;
    *tok_p = tok_from_sp(sp);
    return MP_OK;
}

void tok_close(tokenizer_t *tok)
{
    bpe_gpt2_free(tok->bpe);
    tok->bpe = NULL;
    tok_sp_free(tok->sp);
    tok->sp = NULL;
    tok_hf_free(tok->hf);
    tok->hf = NULL;
}

const char *tok_name(const tokenizer_t *tok)
{
    return tok->kind == TOK_GPT2 ? "gpt2" : tok->kind == TOK_SP ? "sp" : tok->kind == TOK_HF ? "hf" : "byte";
}

int tok_vocab(const tokenizer_t *tok)
{
    if (tok->kind == TOK_HF) return tok_hf_vocab(tok->hf);
    return tok->kind == TOK_GPT2 ? bpe_gpt2_vocab(tok->bpe) : tok->kind == TOK_SP ? tok_sp_vocab(tok->sp) : 256;
}

const char *tok_digest(const tokenizer_t *tok)
{
    if (tok->kind == TOK_HF) return tok_hf_digest(tok->hf);
    return tok->kind == TOK_GPT2 ? bpe_gpt2_digest(tok->bpe) : tok->kind == TOK_SP ? tok_sp_digest(tok->sp) : NULL;
}

const unsigned char *tok_model(const tokenizer_t *tok, size_t *n_p)
{
    if (tok->kind == TOK_HF) return tok_hf_json(tok->hf, n_p);
    return tok->kind == TOK_SP ? tok_sp_model(tok->sp, n_p) : NULL;
}

int tok_eos(const tokenizer_t *tok) { return tok->kind == TOK_HF ? tok_hf_eos(tok->hf) : -1; }

const char *tok_model_dataset(const tokenizer_t *tok)
{
    return tok->kind == TOK_SP ? "sp_model" : tok->kind == TOK_HF ? "hf_json" : NULL;
}

int tok_encode(const tokenizer_t *tok, const unsigned char *text, size_t n, uint32_t *ids, size_t *n_ids_p)
{
    size_t m = 0;
    if (tok->kind == TOK_BYTES) {
        for (; m < n; m++) ids[m] = text[m];
        *n_ids_p = m;
        return MP_OK;
    }
    if (tok->kind == TOK_SP) return tok_sp_encode(tok->sp, text, n, ids, n_ids_p);
    if (tok->kind == TOK_HF) return tok_hf_encode(tok->hf, text, n, ids, n_ids_p);
    for (size_t at = 0; at < n;) {
        const size_t len = pretok_gpt2_next(text + at, n - at);
        const size_t got = bpe_gpt2_encode_piece(tok->bpe, text + at, len, ids + m);
        if (!got) return MP_FAIL("tokenizer gpt2: no memory to merge the piece of %zu bytes at byte %zu", len, at);
        m += got;
        at += len;
    }
    *n_ids_p = m;
    return MP_OK;
}

/* Every byte value, for the bytes tokenizer's tok_token_bytes. */
#define TOK_B4(n) n, n + 1, n + 2, n + 3
#define TOK_B16(n) TOK_B4(n), TOK_B4(n + 4), TOK_B4(n + 8), TOK_B4(n + 12)
#define TOK_B64(n) TOK_B16(n), TOK_B16(n + 16), TOK_B16(n + 32), TOK_B16(n + 48)
static const unsigned char tok_bytes[256] = {TOK_B64(0), TOK_B64(64), TOK_B64(128), TOK_B64(192)};

const unsigned char *tok_token_bytes(const tokenizer_t *tok, int id, size_t *n_p)
{
    if (tok->kind == TOK_GPT2) return bpe_gpt2_token(tok->bpe, id, n_p);
    if (tok->kind == TOK_SP) return tok_sp_token(tok->sp, id, n_p);
    if (tok->kind == TOK_HF) return tok_hf_token(tok->hf, id, n_p);
    if (id < 0 || id > 255) return NULL;
    *n_p = 1;
    return &tok_bytes[id];
}

int tok_decode(const tokenizer_t *tok, const int *ids, size_t n, unsigned char **bytes_p, size_t *n_bytes_p)
{
    size_t total = 0, len;
    for (size_t i = 0; i < n; i++) {
        if (!tok_token_bytes(tok, ids[i], &len))
            return MP_FAIL("tokenizer %s: id %d at index %zu is not below its vocabulary's %d", tok_name(tok), ids[i], i,
                           tok_vocab(tok));
        total += len;
    }
    unsigned char *out = MP_MALLOC(total + 1);
    if (!out) return MP_ERR;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *b = tok_token_bytes(tok, ids[i], &len);
        memcpy(out + at, b, len);
        at += len;
    }
    /* an hf decoder's Strip (or Metaspace's): the text's leading spaces, so many at most */
    size_t cut = 0;
    for (int k = tok->kind == TOK_HF ? tok_hf_strip(tok->hf) : 0; k > 0 && cut < at && out[cut] == ' '; k--) cut++;
    memmove(out, out + cut, at - cut), at -= cut;
    out[at] = 0;
    *bytes_p = out;
    *n_bytes_p = at;
    return MP_OK;
}

/* ---- identities ---------------------------------------------------------------------------------- */

void tok_ident_of(const tokenizer_t *tok, tok_ident_t *ident_p)
{
    const char *digest = tok_digest(tok);
    *ident_p = (tok_ident_t){{0}, {0}};
    snprintf(ident_p->name, sizeof ident_p->name, "%s", tok_name(tok));
    snprintf(ident_p->sha256, sizeof ident_p->sha256, "%s", digest ? digest : "");
}

/* 1 when s is 64 lowercase hex digits. */
static int tok_is_digest(const char *s)
{
    size_t i = 0;
    for (; s[i]; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return i == TOK_SHA256_HEX;
}

int tok_ident_set(tok_ident_t *ident_p, const char *name, const char *sha256, char *why_p, size_t n)
{
    tok_ident_t id = {{0}, {0}};
    if (!strcmp(name, "byte")) {
        if (sha256) return snprintf(why_p, n, "tokenizer \"byte\" has no files, yet a tokenizer_sha256 is given"), MP_ERR;
    } else if (!strcmp(name, "none")) { /* tokens from elsewhere (llm.c .bin shards): no identity recorded */
        if (sha256) return snprintf(why_p, n, "tokenizer \"none\" has no files, yet a tokenizer_sha256 is given"), MP_ERR;
    } else if (!strcmp(name, "gpt2") || !strcmp(name, "sp") || !strcmp(name, "hf")) {
        if (!sha256)
            return snprintf(why_p, n, "tokenizer \"%s\" without tokenizer_sha256 (its vocabulary's or model's digest)",
                            name), MP_ERR;
        if (!tok_is_digest(sha256))
            return snprintf(why_p, n, "tokenizer_sha256 \"%.80s\" is not 64 lowercase hex digits", sha256), MP_ERR;
        snprintf(id.sha256, sizeof id.sha256, "%s", sha256);
    } else {
        return snprintf(why_p, n, "tokenizer \"%.40s\": this build knows \"byte\", \"gpt2\", \"sp\", \"hf\" and \"none\"",
                        name), MP_ERR;
    }
    snprintf(id.name, sizeof id.name, "%s", name);
    *ident_p = id;
    return MP_OK;
}

int tok_ident_same(const tok_ident_t *a, const tok_ident_t *b)
{
    return !strcmp(a->name, b->name) && !strcmp(a->sha256, b->sha256);
}

const char *tok_ident_text(const tok_ident_t *ident, char *buf, size_t n)
{
    if (ident->sha256[0]) snprintf(buf, n, "%s (tokenizer_sha256 %s)", ident->name, ident->sha256);
    else snprintf(buf, n, "%s", ident->name);
    return buf;
}
