/* Token datasets (ARCHITECTURE.md §3): loading /train and /val, the training-window sampler, the fixed
 * validation windows and `mindpipe prep` (a text file -> tokens of a tokenizer, tokenizer.h).
 *
 * Legend: T seq_len; a window is T+1 consecutive tokens (T inputs, the T next tokens as targets).
 *
 * HDF5's automatic error printing is switched off around every public entry point (and restored
 * after): each failure is reported once, as our own one-line message naming the file. Messages name
 * it as deck_text_show shows it (escaped, a long path shortened), so the reason after it is never cut. */
#include "data.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "deck.h" /* deck_text_show */
#include "h5util.h"
#include "publish.h"
#include "rng.h"

/* The validation split prep aims for: enough for a few windows at the usual seq_len (T+1 tokens
 * for T = 4096), when the text is long enough for train to stay at least as large as val. */
#define DATA_VAL_MIN 4097


/* ---- loading ---------------------------------------------------------------------------------- */

/* The largest ratio of tokens' bytes to stored bytes a filtered (compressed) split may claim: deflate
 * tops out near 1032:1. */
#define DATA_MAX_RATIO 1100

/* A split's n tokens must be stored in the file: HDF5 reads a dataset's unwritten space as fill
 * values, so a corrupt header could claim 2^40 tokens in a 2 KiB file and have us allocate (and read)
 * them. Unfiltered data stores 2 bytes per token; filtered data is bounded by DATA_MAX_RATIO. */
static int data_check_stored(hid_t d, const char *path, const char *name, hsize_t n)
{
    int nfilters = 0;
    hid_t dcpl = -1;
    H5_TRY(dcpl = H5Dget_create_plist(d), out, path);
    H5_TRY(nfilters = H5Pget_nfilters(dcpl), err_close_plist, path);
    H5Pclose(dcpl);
    const double stored = (double)H5Dget_storage_size(d), need = 2.0 * (double)n;
    if (need > stored * (nfilters ? DATA_MAX_RATIO : 1))
        return MP_FAIL("%s: /%s claims %llu tokens but the file stores %.0f bytes of them: truncated or corrupt", path,
                       name, (unsigned long long)n, stored);
    if (need > (double)(SIZE_MAX / 2)) return MP_FAIL("%s: /%s claims %llu tokens: too many", path, name, (unsigned long long)n);
    return MP_OK;
err_close_plist:
    H5Pclose(dcpl);
out:
    return MP_ERR;
}

/* Reads the 1-D uint16 dataset /name of f into a malloc'd array. MP_OK, or MP_ERR (reported,
 * naming path and the dataset) when it is missing, not 1-D, not 16-bit unsigned, empty, or claims
 * more tokens than the file stores. */
static int data_read_split(hid_t f, const char *path, const char *name, uint16_t **tok_p, size_t *n_p)
{
    int rc = MP_ERR, rank;
    hid_t d = -1, s = -1, t = -1;
    htri_t have;
    hsize_t n = 0;
    uint16_t *tok = NULL;
    H5_TRY(have = H5Lexists(f, name, H5P_DEFAULT), out, path);
    if (!have) return MP_FAIL("%s has no dataset /%s: not a token file written by `mindpipe prep`?", path, name);
    H5_TRY(d = H5Dopen2(f, name, H5P_DEFAULT), out, path);
    H5_TRY(s = H5Dget_space(d), err_close_dset, path);
    H5_TRY(t = H5Dget_type(d), err_close_space, path);
    H5_TRY(rank = H5Sget_simple_extent_ndims(s), err_close_type, path);
    if (rank != 1) {
        MP_ERROR("%s: /%s has rank %d, expected a 1-D array of tokens", path, name, rank);
        goto err_close_type;
    }
    if (H5Tget_class(t) != H5T_INTEGER || H5Tget_size(t) != 2 || H5Tget_sign(t) != H5T_SGN_NONE) {
        MP_ERROR("%s: /%s is not uint16 (tokens are stored as unsigned 16-bit integers)", path, name);
        goto err_close_type;
    }
    H5_TRY(H5Sget_simple_extent_dims(s, &n, NULL), err_close_type, path);
    if (n == 0) {
        MP_ERROR("%s: /%s is empty", path, name);
        goto err_close_type;
    }
    if (data_check_stored(d, path, name, n) != MP_OK) goto err_close_type;
    if (!(tok = MP_MALLOC((size_t)n * sizeof *tok))) goto err_close_type;
    H5_TRY(H5Dread(d, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, tok), err_free_tok, path);
    *tok_p = tok;
    *n_p = (size_t)n;
    tok = NULL; /* handed to the caller */
    rc = MP_OK;
err_free_tok:
    free(tok);
err_close_type:
    H5Tclose(t);
err_close_space:
    H5Sclose(s);
err_close_dset:
    H5Dclose(d);
out:
    return rc;
}

/* Reads the integer attribute vocab of the root group. It must be one integer: H5Aread writes
 * every element of the attribute, so an array would overrun the int it is read into. */
static int data_read_vocab(hid_t f, const char *path, int *vocab_p)
{
    int rc = MP_ERR, vocab = 0;
    hid_t a = -1, s = -1, t = -1;
    hssize_t count;
    htri_t have;
    H5_TRY(have = H5Aexists(f, "vocab"), out, path);
    if (!have) return MP_FAIL("%s has no attribute vocab: not a token file written by `mindpipe prep`?", path);
    H5_TRY(a = H5Aopen(f, "vocab", H5P_DEFAULT), out, path);
    H5_TRY(s = H5Aget_space(a), err_close_attr, path);
    H5_TRY(t = H5Aget_type(a), err_close_space, path);
    H5_TRY(count = H5Sget_simple_extent_npoints(s), err_close_type, path);
    if (count != 1 || H5Tget_class(t) != H5T_INTEGER) {
        MP_ERROR("%s: attribute vocab is not one integer (%lld elements%s)", path, (long long)count,
                 H5Tget_class(t) != H5T_INTEGER ? ", not of an integer type" : "");
        goto err_close_type;
    }
    H5_TRY(H5Aread(a, H5T_NATIVE_INT, &vocab), err_close_type, path);
    if (vocab < 1 || vocab > 65536) {
        MP_ERROR("%s: attribute vocab = %d is outside 1..65536", path, vocab);
        goto err_close_type;
    }
    *vocab_p = vocab;
    rc = MP_OK;
err_close_type:
    H5Tclose(t);
err_close_space:
    H5Sclose(s);
err_close_attr:
    H5Aclose(a);
out:
    return rc;
}

/* Every token of a split must be < vocab: a larger one would index past the embedding table. */
static int data_check_tokens(const char *path, const char *name, const uint16_t *tok, size_t n, int vocab)
{
    for (size_t i = 0; i < n; i++)
        if (tok[i] >= vocab)
            return MP_FAIL("%s: /%s token %u at index %zu is >= vocab %d", path, name, (unsigned)tok[i], i, vocab);
    return MP_OK;
}

/* path: the file to read; name: the same as messages show it. */
static int data_load_file(dataset_t *ds_p, const char *path, const char *name)
{
    dataset_t ds = {0};
    hid_t f = -1;
    htri_t is_h5;
    H5_TRY(is_h5 = H5Fis_hdf5(path), out, name);
    if (!is_h5) return MP_FAIL("%s is not an HDF5 file (make token files with `mindpipe prep`)", name);
    H5_TRY(f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), out, name);
    int read = data_read_vocab(f, name, &ds.vocab) == MP_OK &&
               data_read_split(f, name, "train", &ds.train, &ds.n_train) == MP_OK &&
               data_read_split(f, name, "val", &ds.val, &ds.n_val) == MP_OK;
    herr_t closed = H5Fclose(f);
    if (!read) goto err_free_splits;
    H5_TRY(closed, err_free_splits, name);
    if (data_check_tokens(name, "train", ds.train, ds.n_train, ds.vocab) != MP_OK) goto err_free_splits;
    if (data_check_tokens(name, "val", ds.val, ds.n_val, ds.vocab) != MP_OK) goto err_free_splits;
    snprintf(ds.path, sizeof ds.path, "%s", path);
    *ds_p = ds;
    return MP_OK;
err_free_splits:
    data_free(&ds);
out:
    return MP_ERR;
}

int data_load(dataset_t *ds_p, const char *path)
{
    char name[DECK_SHOW];
    deck_text_show(path, name, sizeof name);
    if (access(path, R_OK) != 0)
        return MP_FAIL("data file %s: %s (make it with `mindpipe prep --text FILE --out DATA.h5`)", name,
                       strerror(errno));
    if (strlen(path) >= sizeof ds_p->path)
        return MP_FAIL("data file %s: path longer than %zu characters", name, sizeof ds_p->path - 1);
    h5_quiet_t q;
    h5_quiet_begin(&q);
    int rc = data_load_file(ds_p, path, name);
    h5_quiet_end(&q);
    return rc;
}

void data_free(dataset_t *ds)
{
    free(ds->train);
    free(ds->val);
    ds->train = ds->val = NULL;
    ds->n_train = ds->n_val = 0;
}

/* ---- sampling --------------------------------------------------------------------------------- */

/* Requires n_train > T (run setup refuses shorter data): the offset lies in [0, n_train - T), so
 * the window's last target, train[off + T], is inside the split. */
void data_train_sample(const dataset_t *ds, uint64_t seed, long step, long index, int T, int *inp, int *tgt)
{
    const uint16_t *w = ds->train + rng_key(seed, RNG_STREAM_DATA, (uint64_t)step, (uint64_t)index) %
                                        (uint64_t)(ds->n_train - (size_t)T);
    for (int t = 0; t < T; t++) {
        inp[t] = w[t];
        tgt[t] = w[t + 1];
    }
}

/* Window w needs tokens [w*T, w*T + T]: w*T + T + 1 <= n_val, so there are (n_val - 1) / T. */
long data_val_windows(const dataset_t *ds, int T)
{
    if (T <= 0 || ds->n_val < 1) return 0;
    return (long)((ds->n_val - 1) / (size_t)T);
}

int data_check_windows(const dataset_t *ds, int T)
{
    char name[DECK_SHOW];
    deck_text_show(ds->path, name, sizeof name);
    if (T < 1 || ds->n_train < (size_t)T + 2)
        return MP_FAIL("%s: /train has %zu tokens, fewer than model.seq_len+2 = %lld: no training window", name,
                       ds->n_train, (long long)T + 2);
    if (data_val_windows(ds, T) < 1)
        MP_WARN("%s: /val has %zu tokens, fewer than model.seq_len+1 = %lld: no validation window, so no val_loss "
                "is computed (metrics lines carry none); prep a longer text or a larger --val-fraction", name,
                ds->n_val, (long long)T + 1);
    return MP_OK;
}

int data_val_sample(const dataset_t *ds, long w, int T, int *inp, int *tgt)
{
    if (w < 0 || w >= data_val_windows(ds, T)) {
        char name[DECK_SHOW];
        deck_text_show(ds->path, name, sizeof name);
        return MP_FAIL("%s: validation window %ld does not fit in /val (%zu tokens, T=%d)", name, w, ds->n_val, T);
    }
    const uint16_t *v = ds->val + (size_t)w * (size_t)T;
    for (int t = 0; t < T; t++) {
        inp[t] = v[t];
        tgt[t] = v[t + 1];
    }
    return MP_OK;
}

/* ---- prep ------------------------------------------------------------------------------------- */

/* Reads the whole of path into a malloc'd buffer. Errors name the file (missing, unreadable, empty). */
static int data_read_text(const char *path, unsigned char **buf_p, size_t *n_p)
{
    char name[DECK_SHOW];
    deck_text_show(path, name, sizeof name);
    FILE *fp = fopen(path, "rb");
    if (!fp) return MP_FAIL("text file %s: %s", name, strerror(errno));
    struct stat st;
    if (fstat(fileno(fp), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(fp);
        return MP_FAIL("text file %s is not a regular file", name);
    }
    size_t n = (size_t)st.st_size;
    if (n < 2) {
        fclose(fp);
        return MP_FAIL("text file %s is %s: nothing to split into train and val", name, n ? "one byte" : "empty");
    }
    unsigned char *buf = MP_MALLOC(n);
    if (!buf) {
        fclose(fp);
        return MP_ERR;
    }
    size_t got = fread(buf, 1, n, fp);
    int err = ferror(fp);
    fclose(fp);
    if (got != n || err) {
        free(buf);
        return MP_FAIL("text file %s: read %zu of %zu bytes", name, got, n);
    }
    *buf_p = buf;
    *n_p = n;
    return MP_OK;
}



/* 1-D uint16 dataset name = tok[0..n) on f (contiguous layout). */
static int data_write_split(hid_t f, const char *fname, const char *name, const uint16_t *tok, size_t n)
{
    int rc = MP_ERR;
    hid_t s = -1, d = -1;
    hsize_t dims = n;
    H5_TRY(s = H5Screate_simple(1, &dims, NULL), out, fname);
    H5_TRY(d = H5Dcreate2(f, name, H5T_STD_U16LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), err_close_space, fname);
    H5_TRY(H5Dwrite(d, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, tok), err_close_dset, fname);
    rc = MP_OK;
err_close_dset:
    H5Dclose(d);
err_close_space:
    H5Sclose(s);
out:
    return rc;
}

/* Writes bytes model[0..n) as the uint8 dataset /tokenizer/<name> of f, so that the tokenizer can be
 * rebuilt from the data file alone. MP_OK, or MP_ERR (reported, naming fname). */
static int data_write_model(hid_t f, const char *fname, const char *name, const unsigned char *model, size_t n)
{
    int rc = MP_ERR;
    hid_t g = -1, s = -1, d = -1;
    hsize_t dims = n;
    H5_TRY(g = H5Gcreate2(f, "tokenizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), out, fname);
    H5_TRY(s = H5Screate_simple(1, &dims, NULL), err_close_group, fname);
    H5_TRY(d = H5Dcreate2(g, name, H5T_STD_U8LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), err_close_space, fname);
    H5_TRY(H5Dwrite(d, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, model), err_close_dset, fname);
    rc = MP_OK;
err_close_dset:
    H5Dclose(d);
err_close_space:
    H5Sclose(s);
err_close_group:
    H5Gclose(g);
out:
    return rc;
}

/* Writes the token file (both splits, the attributes of tokenizer tk and, for sp, its model) to fname
 * and closes it. */
static int data_write_tokens(const char *fname, const uint16_t *tok, size_t n, size_t n_val, const char *source,
                             const tokenizer_t *tk)
{
    hid_t f = -1;
    const char *digest = tok_digest(tk);
    H5_TRY(f = H5Fcreate(fname, H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT), out, fname);
    if (data_write_split(f, fname, "train", tok, n - n_val) != MP_OK) goto err_close_file;
    if (data_write_split(f, fname, "val", tok + (n - n_val), n_val) != MP_OK) goto err_close_file;
    if (h5_attr_write(f, "vocab", H5T_STD_I32LE, H5T_NATIVE_INT, &(int){tok_vocab(tk)}, fname) != MP_OK) goto err_close_file;
    if (h5_attr_write_string(f, "tokenizer", tok_name(tk), fname) != MP_OK) goto err_close_file;
    if (h5_attr_write_string(f, "source", source, fname) != MP_OK) goto err_close_file;
    if (digest && h5_attr_write_string(f, "tokenizer_sha256", digest, fname) != MP_OK) goto err_close_file;
    size_t n_model;
    const unsigned char *model = tok_model(tk, &n_model);
    if (model && data_write_model(f, fname, "sp_model", model, n_model) != MP_OK) goto err_close_file;
    H5_TRY(H5Fclose(f), out, fname);
    return MP_OK;
err_close_file:
    H5Fclose(f);
out:
    return MP_ERR;
}



/* Val: the last max(val_fraction*n, DATA_VAL_MIN) tokens, but never more than train keeps. */
static size_t data_val_count(size_t n, double val_fraction)
{
    double want = val_fraction > 0 ? val_fraction * (double)n : 0.0;
    size_t n_val = want >= (double)n ? n : (size_t)(want + 0.5);
    if (n_val < DATA_VAL_MIN) n_val = DATA_VAL_MIN;
    if (n_val > n / 2) n_val = n / 2;
    return n_val ? n_val : 1;
}

int data_prep_text(const char *text_path, const char *out_path, double val_fraction)
{
    return data_prep_tokenized(text_path, out_path, val_fraction, NULL);
}

int data_prep_tokenized(const char *text_path, const char *out_path, double val_fraction, const tokenizer_t *tk)
{
    const tokenizer_t bytes = {TOK_BYTES, NULL, NULL};
    if (!tk) tk = &bytes;
    unsigned char *text;
    size_t n_text, n;
    if (data_read_text(text_path, &text, &n_text) != MP_OK) return MP_ERR;
    int rc = MP_ERR;
    uint16_t *tok = MP_MALLOC(n_text * sizeof *tok); /* no token is shorter than a byte */
    if (!tok) goto err_free_tok;
    if (tok_encode(tk, text, n_text, tok, &n) != MP_OK) {
        MP_ERROR("text file %s: not tokenized (above: why)", text_path);
        goto err_free_tok;
    }
    if (n < 2) {
        char name[DECK_SHOW];
        deck_text_show(text_path, name, sizeof name);
        MP_ERROR("text file %s makes one %s token: nothing to split into train and val", name, tok_name(tk));
        goto err_free_tok;
    }
    size_t n_val = data_val_count(n, val_fraction);

    char tmp[4200], dir[4096], base[4096];
    /* a private temporary: two jobs may prepare the same dataset at once */
    if (publish_tmp_name_pid(out_path, tmp, sizeof tmp) != MP_OK || publish_tmp_prepare(tmp) != MP_OK) goto err_free_tok;
    publish_dir_name(out_path, dir, sizeof dir);
    snprintf(base, sizeof base, "%s", text_path);
    const char *source = basename(base);

    if (access(dir, W_OK) != 0) {
        MP_ERROR("cannot write %s: directory %s: %s", out_path, dir, strerror(errno));
        goto err_free_tok;
    }
    h5_quiet_t q;
    h5_quiet_begin(&q);
    int wrote = data_write_tokens(tmp, tok, n, n_val, source, tk);
    h5_quiet_end(&q);
    if (wrote == MP_OK) rc = publish_commit(tmp, out_path);
    else publish_discard(tmp);
err_free_tok:
    free(tok);
    free(text);
    return rc;
}
