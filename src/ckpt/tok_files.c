/* The tokenizer an HDF5 token file or checkpoint records, and opening it (contract in tok_files.h):
 * the HDF5 half of the tokenizers, so that the tokenizer room itself needs no HDF5. */
#include "tok_files.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "h5util.h"

int tok_file_vocab(hid_t f, const char *path, int *vocab_p)
{
    char where[4200];
    int vocab = 0;
    snprintf(where, sizeof where, "%s: attribute vocab", path);
    const int have = h5_attr_read(f, "vocab", H5T_NATIVE_INT, &vocab, where);
    if (have == 0) return MP_FAIL("%s has no attribute vocab: not a token file written by `mindpipe prep`?", path);
    if (have != 1) return MP_ERR;
    if (vocab < 1) return MP_FAIL("%s: attribute vocab = %d is less than 1", path, vocab);
    *vocab_p = vocab;
    return MP_OK;
}

int tok_of_data_file(const char *path, tok_ident_t *ident_p, int *vocab_p)
{
    h5_quiet_t q;
    char name[16] = "byte", sha[TOK_SHA256_HEX + 2] = "", where[4200], why[200];
    int vocab = 0, rc = MP_ERR, has_sha = 0;
    h5_quiet_begin(&q);
    const hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        h5_quiet_end(&q);
        return MP_FAIL("%s cannot be opened as an HDF5 token file (written by `mindpipe prep`)", path);
    }
    if (tok_file_vocab(f, path, &vocab) != MP_OK) goto out;
    snprintf(where, sizeof where, "%s (attribute tokenizer)", path);
    if (h5_attr_read_text(f, "tokenizer", name, sizeof name, where) == MP_ERR) goto out; /* absent: byte */
    snprintf(where, sizeof where, "%s (attribute tokenizer_sha256)", path);
    if ((has_sha = h5_attr_read_text(f, "tokenizer_sha256", sha, sizeof sha, where)) == MP_ERR) goto out;
    if (tok_ident_set(ident_p, name, has_sha ? sha : NULL, why, sizeof why) != MP_OK) {
        MP_ERROR("%s: %s", path, why);
        goto out;
    }
    *vocab_p = vocab;
    rc = MP_OK;
out:
    H5Fclose(f);
    h5_quiet_end(&q);
    return rc;
}

/* The bytes a token file of tokenizer `kind` stores as /tokenizer/<dataset> (sp: the serialized
 * SentencePiece model, sp_model; hf: tokenizer.json, hf_json) into a malloc'd *model_p of *n_p bytes.
 * what names them in messages. MP_OK, or MP_ERR naming the file (not a token file, another
 * tokenizer, no such dataset); absent_ok: MP_OK with *model_p NULL when the dataset is absent. */
static int tok_blob_of_data_file(const char *path, const char *kind, const char *dataset, const char *what,
                                 int absent_ok, unsigned char **model_p, size_t *n_p)
{
    h5_quiet_t q;
    tok_ident_t id;
    int vocab = 0, rc = MP_ERR;
    if (tok_of_data_file(path, &id, &vocab) != MP_OK) return MP_ERR;
    if (strcmp(id.name, kind)) return MP_FAIL("%s holds tokens of tokenizer %s, not %s: it has no %s", path, id.name, kind, what);
    char dpath[64];
    snprintf(dpath, sizeof dpath, "/tokenizer/%s", dataset);
    *model_p = NULL;
    h5_quiet_begin(&q);
    hid_t f = -1, d = -1, s = -1;
    unsigned char *buf = NULL;
    hssize_t n = -1;
    if ((f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT)) < 0) {
        MP_ERROR("%s cannot be opened as an HDF5 token file", path);
        goto out;
    }
    if (absent_ok && H5Lexists(f, "/tokenizer", H5P_DEFAULT) > 0 && H5Lexists(f, dpath, H5P_DEFAULT) == 0) {
        rc = MP_OK; /* *model_p stays NULL */
        goto out;
    }
    if ((d = H5Dopen2(f, dpath, H5P_DEFAULT)) < 0 || (s = H5Dget_space(d)) < 0 || (n = H5Sget_simple_extent_npoints(s)) <= 0) {
        MP_ERROR("%s: its %s (dataset %s) is missing or unreadable", path, what, dpath);
        goto out;
    }
    if ((uint64_t)n > TOK_SP_MODEL_MAX) {
        MP_ERROR("%s: its %s (dataset %s) has %lld bytes, more than %zu MiB: a corrupt file", path, what, dpath,
                 (long long)n, TOK_SP_MODEL_MAX >> 20);
        goto out;
    }
    if (!(buf = malloc((size_t)n))) {
        MP_ERROR("out of memory for %s's %s (%lld bytes)", path, what, (long long)n);
        goto out;
    }
    if (H5Dread(d, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
        MP_ERROR("%s: dataset %s cannot be read", path, dpath);
        goto out;
    }
    *model_p = buf;
    *n_p = (size_t)n;
    buf = NULL;
    rc = MP_OK;
out:
    free(buf);
    if (s >= 0) H5Sclose(s);
    if (d >= 0) H5Dclose(d);
    if (f >= 0) H5Fclose(f);
    h5_quiet_end(&q);
    return rc;
}

/* An sp checkpoint's tokenizer: the model from src, an sp token file (HDF5: its /tokenizer/sp_model)
 * or a SentencePiece .model file, refused unless its SHA-256 is the one the checkpoint recorded. */
static int tok_open_sp(tokenizer_t *tok_p, const tok_ident_t *ident, const char *src, const char *whose)
{
    tok_sp_t *sp = NULL;
    if (!src)
        return MP_FAIL("%s was trained on SentencePiece tokens (tokenizer sp): give --tokenizer-dir its token file or "
                       ".model file", whose);
    h5_quiet_t q;
    h5_quiet_begin(&q);
    const htri_t is_h5 = H5Fis_hdf5(src);
    h5_quiet_end(&q);
    if (is_h5 > 0) {
        unsigned char *model = NULL;
        size_t n = 0;
        if (tok_blob_of_data_file(src, "sp", "sp_model", "SentencePiece model", 0, &model, &n) != MP_OK)
            return MP_FAIL("%s: its tokenizer cannot be read", whose);
        const int rc = tok_sp_load_bytes(&sp, model, n, src);
        free(model);
        if (rc != MP_OK) return MP_ERR;
    } else if (tok_sp_load_file(&sp, src) != MP_OK) {
        return MP_FAIL("%s was trained with tokenizer sp: its model is needed from %s (or give --tokenizer-dir a token "
                       "file or .model file holding it)", whose, src);
    }
    if (strcmp(tok_sp_digest(sp), ident->sha256)) {
        MP_ERROR("%s was trained with tokenizer sp whose model has tokenizer_sha256 %s, but the model in %s has %s: give "
                 "--tokenizer-dir the token file (or .model file) it was trained with", whose, ident->sha256, src,
                 tok_sp_digest(sp));
        tok_sp_free(sp);
        return MP_ERR;
    }
    *tok_p = tok_from_sp(sp);
    return MP_OK;
}

/* An hf token file's tokenizer: its tokenizer.json (/tokenizer/hf_json) and, when stored, its
 * tokenizer_config.json (/tokenizer/hf_config). */
static int tok_hf_of_data_file(const char *path, tok_hf_t **hf_p)
{
    unsigned char *json = NULL, *config = NULL;
    size_t n = 0, n_config = 0;
    int rc = MP_ERR;
    if (tok_blob_of_data_file(path, "hf", "hf_json", "tokenizer.json", 0, &json, &n) == MP_OK &&
        tok_blob_of_data_file(path, "hf", "hf_config", "tokenizer_config.json", 1, &config, &n_config) == MP_OK)
        rc = tok_hf_load_bytes(hf_p, json, n, config, n_config, path);
    free(config);
    free(json);
    return rc;
}

/* An hf checkpoint's tokenizer: from src, an hf token file, a Hugging Face model directory
 * (tok_open_hf_dir) or a tokenizer.json, refused unless its SHA-256 is the one the checkpoint recorded. */
static int tok_open_hf(tokenizer_t *tok_p, const tok_ident_t *ident, const char *src, const char *whose)
{
    if (!src)
        return MP_FAIL("%s was trained on tokens of a Hugging Face tokenizer.json (tokenizer hf): give --tokenizer-dir "
                       "its token file or model directory", whose);
    h5_quiet_t q;
    h5_quiet_begin(&q);
    const htri_t is_h5 = H5Fis_hdf5(src);
    h5_quiet_end(&q);
    tokenizer_t tok;
    tok_hf_t *hf;
    struct stat st;
    if (is_h5 > 0) {
        if (tok_hf_of_data_file(src, &hf) != MP_OK) return MP_FAIL("%s: its tokenizer cannot be read", whose);
        tok = tok_from_hf(hf);
    } else if (!stat(src, &st) && S_ISDIR(st.st_mode)) {
        if (tok_open_hf_dir(&tok, src) != MP_OK) return MP_FAIL("%s: its tokenizer cannot be read", whose);
    } else {
        if (tok_hf_load(&hf, src, NULL) != MP_OK) return MP_FAIL("%s: its tokenizer cannot be read", whose);
        tok = tok_from_hf(hf);
    }
    if (tok.kind != TOK_HF || strcmp(tok_digest(&tok), ident->sha256)) {
        MP_ERROR("%s was trained with tokenizer hf whose tokenizer.json has tokenizer_sha256 %s, but %s has %s %s: give "
                 "--tokenizer-dir the token file or directory it was trained with", whose, ident->sha256, src,
                 tok_name(&tok), tok_digest(&tok) ? tok_digest(&tok) : "");
        tok_close(&tok);
        return MP_ERR;
    }
    *tok_p = tok;
    return MP_OK;
}

int tok_open_ident(tokenizer_t *tok_p, const tok_ident_t *ident, const char *dir, const char *whose)
{
    tokenizer_t tok;
    char def[4096];
    if (!strcmp(ident->name, "sp")) return tok_open_sp(tok_p, ident, dir, whose);
    if (!strcmp(ident->name, "hf")) return tok_open_hf(tok_p, ident, dir, whose);
    if (!strcmp(ident->name, "none"))
        return MP_FAIL("%s was trained on tokens that carry no tokenizer (llm.c .bin shards): generate and serve "
                       "cannot encode or decode text for it", whose);
    const tok_kind_t kind = strcmp(ident->name, "gpt2") ? TOK_BYTES : TOK_GPT2;
    if (kind == TOK_GPT2 && !dir) {
        if (tok_default_dir(def, sizeof def) != MP_OK) return MP_ERR;
        dir = def;
    }
    if (tok_open(&tok, kind, dir) != MP_OK)
        return MP_FAIL("%s was trained with tokenizer gpt2: its vocabulary (encoder.json, vocab.bpe) is needed from "
                       "%s (--tokenizer-dir DIR, or $MINDPIPE_GPT2_DIR)", whose, dir);
    if (kind == TOK_GPT2 && strcmp(tok_digest(&tok), ident->sha256)) {
        MP_ERROR("%s was trained with tokenizer gpt2 whose vocabulary has tokenizer_sha256 %s, but the vocabulary in %s "
                 "has %s: give --tokenizer-dir the files it was trained with", whose, ident->sha256, dir, tok_digest(&tok));
        tok_close(&tok);
        return MP_ERR;
    }
    *tok_p = tok;
    return MP_OK;
}
