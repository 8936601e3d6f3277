/* Token datasets (ARCHITECTURE.md §3, data.h): shards (.bin and HDF5) opened and mapped, the token
 * stream read through windows, the training-window samplers (random, sequential), the fixed
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
#include <glob.h>
#include <hdf5.h>
#include <limits.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "deck.h" /* deck_text_show */
#include "h5util.h"
#include "publish.h"
#include "rng.h"
#include "tok_files.h" /* tok_file_vocab */

/* The validation split prep aims for: enough for a few windows at the usual seq_len (T+1 tokens
 * for T = 4096), when the text is long enough for train to stay at least as large as val. */
#define DATA_VAL_MIN 4097


/* ---- shards ----------------------------------------------------------------------------------- */

/* The largest ratio of tokens' bytes to stored bytes a filtered (compressed) split may claim: deflate
 * tops out near 1032:1. */
#define DATA_MAX_RATIO 1100

/* llm.c's .bin shard: 256 int32 of header, then the tokens. */
#define BIN_HEADER_BYTES 1024
#define BIN_MAGIC_U16 20240520 /* version 1: uint16 tokens (llm.c's gpt-2 writer) */
#define BIN_MAGIC_U32 20240801 /* version 7: uint32 tokens (llm.c's llama-3 writer) */

/* Tokens a scan reads at a time: 1 MiB of uint32, small beside any model. */
#define DATA_SCAN_CHUNK (1u << 18)

/* Token i of little-endian tokens of width bytes at p (the files' byte order, whatever the host's). */
static inline uint32_t data_tok(const unsigned char *p, int width)
{
    if (width == 2) return (uint32_t)p[0] | (uint32_t)p[1] << 8;
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Maps the shard's tokens (file_off, n, width set) read-only from fd. MP_OK, or MP_ERR naming the file. */
static int data_shard_map(data_shard_t *sh, int fd, const char *name)
{
    const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), lo = sh->file_off / page * page;
    const size_t len = (size_t)(sh->file_off - lo + sh->n * (uint64_t)sh->width);
    void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, (off_t)lo);
    if (m == MAP_FAILED) return MP_FAIL("%s: cannot map %zu bytes of tokens: %s", name, len, strerror(errno));
    /* windows are scattered over the file: read ahead no more than the pages a window touches */
    (void)madvise(m, len, MADV_RANDOM);
    sh->map = m, sh->map_len = len, sh->tok = (const unsigned char *)m + (sh->file_off - lo);
    sh->kind = DATA_SHARD_MAP;
    return MP_OK;
}

/* An llm.c .bin shard, open as fd (size bytes), whose first int32 is a known magic. Refused, naming
 * the file: shorter than the header, a version that is not the magic's, a token count < 1, or a
 * file size other than header + count × width (a truncated or overlong shard). */
static int data_bin_open(data_shard_t *sh, int fd, uint64_t size, const char *name)
{
    unsigned char h[12];
    if (size < BIN_HEADER_BYTES)
        return MP_FAIL("%s: %llu bytes, shorter than the %d-byte header of a .bin token shard: truncated", name,
                       (unsigned long long)size, BIN_HEADER_BYTES);
    if (pread(fd, h, sizeof h, 0) != (ssize_t)sizeof h) return MP_FAIL("%s: cannot read the header: %s", name, strerror(errno));
    const int32_t magic = (int32_t)data_tok(h, 4), version = (int32_t)data_tok(h + 4, 4), count = (int32_t)data_tok(h + 8, 4);
    const int want = magic == BIN_MAGIC_U16 ? 1 : 7;
    sh->width = magic == BIN_MAGIC_U16 ? 2 : 4;
    if (version != want)
        return MP_FAIL("%s: .bin shard of magic %d has version %d, expected %d", name, magic, version, want);
    if (count < 1) return MP_FAIL("%s: .bin shard header says %d tokens", name, count);
    const uint64_t need = BIN_HEADER_BYTES + (uint64_t)count * (uint64_t)sh->width;
    if (need != size)
        return MP_FAIL("%s: header says %d tokens of %d bytes (%llu bytes with the header) but the file has %llu "
                       "bytes: %s", name, count, sh->width, (unsigned long long)need, (unsigned long long)size,
                       need > size ? "truncated" : "not a .bin shard of llm.c's layout");
    sh->n = (uint64_t)count, sh->file_off = BIN_HEADER_BYTES, sh->vocab = 0;
    return data_shard_map(sh, fd, name);
}

/* A split's n tokens of width bytes must be stored in the file: HDF5 reads a dataset's unwritten
 * space as fill values, so a corrupt header could claim 2^40 tokens in a 2 KiB file. Unfiltered
 * data stores width bytes per token; filtered data is bounded by DATA_MAX_RATIO. */
static int data_check_stored(hid_t d, const char *path, const char *name, hsize_t n, int width, int *nfilters_p)
{
    int nfilters = 0;
    hid_t dcpl = -1;
    H5_TRY(dcpl = H5Dget_create_plist(d), out, path);
    H5_TRY(nfilters = H5Pget_nfilters(dcpl), err_close_plist, path);
    H5Pclose(dcpl);
    const double stored = (double)H5Dget_storage_size(d), need = (double)width * (double)n;
    if (need > stored * (nfilters ? DATA_MAX_RATIO : 1))
        return MP_FAIL("%s: /%s claims %llu tokens but the file stores %.0f bytes of them: truncated or corrupt", path,
                       name, (unsigned long long)n, stored);
    if (need > (double)(SIZE_MAX / 2)) return MP_FAIL("%s: /%s claims %llu tokens: too many", path, name, (unsigned long long)n);
    *nfilters_p = nfilters;
    return MP_OK;
err_close_plist:
    H5Pclose(dcpl);
out:
    return MP_ERR;
}

/* Whether dataset d (n tokens of little-endian width bytes, no filters) can be mapped: contiguous,
 * allocated, in a file without a user block (H5Dget_offset counts from HDF5's base address), and
 * inside the file. Sets *off_p to its byte offset. */
static int data_h5_mappable(hid_t f, hid_t d, hid_t t, uint64_t n, int width, const char *path, uint64_t *off_p)
{
    hid_t dcpl = H5Dget_create_plist(d), fcpl = H5Fget_create_plist(f);
    hsize_t ublock = 1;
    const int contiguous = dcpl >= 0 && H5Pget_layout(dcpl) == H5D_CONTIGUOUS;
    if (fcpl >= 0) H5Pget_userblock(fcpl, &ublock);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (fcpl >= 0) H5Pclose(fcpl);
    const int le = H5Tequal(t, width == 2 ? H5T_STD_U16LE : H5T_STD_U32LE) > 0;
    const haddr_t off = contiguous && le && ublock == 0 ? H5Dget_offset(d) : HADDR_UNDEF;
    struct stat st;
    if (off == HADDR_UNDEF || stat(path, &st) != 0 || (uint64_t)off + n * (uint64_t)width > (uint64_t)st.st_size) return 0;
    *off_p = (uint64_t)off;
    return 1;
}

/* The 1-D unsigned 16- or 32-bit dataset /name of the HDF5 file at path, as a shard: mapped when
 * data_h5_mappable, else kept open for window reads. MP_OK, or MP_ERR (reported, naming the file and
 * the dataset) when it is missing, not 1-D, not uint16/uint32, empty, or claims more tokens than
 * the file stores. */
static int data_h5_open(data_shard_t *sh, const char *path, const char *shown, const char *name)
{
    int rank, nfilters = 0, vocab = 0;
    hid_t f = -1, d = -1, s = -1, t = -1;
    htri_t have;
    hsize_t n = 0;
    uint64_t off = 0;
    H5_TRY(f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), out, shown);
    if (tok_file_vocab(f, shown, &vocab) != MP_OK) goto err_close_file;
    H5_TRY(have = H5Lexists(f, name, H5P_DEFAULT), err_close_file, shown);
    if (!have) {
        MP_ERROR("%s has no dataset /%s: not a token file written by `mindpipe prep`?", shown, name);
        goto err_close_file;
    }
    H5_TRY(d = H5Dopen2(f, name, H5P_DEFAULT), err_close_file, shown);
    H5_TRY(s = H5Dget_space(d), err_close_dset, shown);
    H5_TRY(t = H5Dget_type(d), err_close_space, shown);
    H5_TRY(rank = H5Sget_simple_extent_ndims(s), err_close_type, shown);
    if (rank != 1) {
        MP_ERROR("%s: /%s has rank %d, expected a 1-D array of tokens", shown, name, rank);
        goto err_close_type;
    }
    const size_t width = H5Tget_size(t);
    if (H5Tget_class(t) != H5T_INTEGER || (width != 2 && width != 4) || H5Tget_sign(t) != H5T_SGN_NONE) {
        MP_ERROR("%s: /%s is not uint16 or uint32 (tokens are stored as unsigned integers)", shown, name);
        goto err_close_type;
    }
    H5_TRY(H5Sget_simple_extent_dims(s, &n, NULL), err_close_type, shown);
    if (n == 0) {
        MP_ERROR("%s: /%s is empty", shown, name);
        goto err_close_type;
    }
    if (data_check_stored(d, shown, name, n, (int)width, &nfilters) != MP_OK) goto err_close_type;
    if (width == 2 && vocab > 65536) {
        MP_ERROR("%s: attribute vocab = %d is beyond what uint16 /%s can hold (65536)", shown, vocab, name);
        goto err_close_type;
    }
    *sh = (data_shard_t){.width = (int)width, .vocab = vocab, .n = n, .file = -1, .dset = -1, .fd = -1};
    if (!nfilters && data_h5_mappable(f, d, t, n, (int)width, path, &off)) {
        H5Tclose(t), H5Sclose(s), H5Dclose(d);
        H5_TRY(H5Fclose(f), out, shown);
        sh->file_off = off;
        if ((sh->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) return MP_FAIL("%s: %s", shown, strerror(errno));
        if (data_shard_map(sh, sh->fd, shown) == MP_OK) return MP_OK;
        close(sh->fd);
        return MP_ERR;
    }
    H5Tclose(t), H5Sclose(s);
    sh->kind = DATA_SHARD_H5READ, sh->file = f, sh->dset = d; /* closed by data_shard_free */
    return MP_OK;
err_close_type:
    H5Tclose(t);
err_close_space:
    H5Sclose(s);
err_close_dset:
    H5Dclose(d);
err_close_file:
    H5Fclose(f);
out:
    return MP_ERR;
}

static void data_shard_free(data_shard_t *sh)
{
    if (sh->map) munmap(sh->map, sh->map_len);
    if (sh->fd >= 0) close(sh->fd);
    if (sh->kind == DATA_SHARD_H5READ) H5Dclose(sh->dset), H5Fclose(sh->file);
    free(sh->path);
    *sh = (data_shard_t){.fd = -1, .file = -1, .dset = -1};
}

/* One file of a split: an HDF5 file's dataset /name (train or val), or a whole .bin shard (then
 * *bin_p = 1). Errors name the file: missing (with the advice to run prep), neither HDF5 nor a
 * .bin shard (naming the magic found), and those of data_h5_open and data_bin_open. */
static int data_shard_open(data_shard_t *sh, const char *path, const char *name, int *bin_p)
{
    char shown[DECK_SHOW];
    deck_text_show(path, shown, sizeof shown);
    char why[256];
    uint64_t size;
    const int fd = publish_open_regular(path, O_RDONLY, &size, why, sizeof why); /* a planted FIFO: refused */
    if (fd < 0)
        return MP_FAIL("data file %s: %s (make it with `mindpipe prep --text FILE --out DATA.h5`)", shown, why);
    unsigned char m[4] = {0};
    const int got = (int)pread(fd, m, sizeof m, 0);
    const uint32_t magic = got == 4 ? data_tok(m, 4) : 0;
    int rc = MP_ERR;
    char *copy = strdup(path);
    if (!copy) {
        close(fd);
        return MP_FAIL("out of memory opening %s", shown);
    }
    if (magic == BIN_MAGIC_U16 || magic == BIN_MAGIC_U32) {
        *sh = (data_shard_t){.fd = fd, .file = -1, .dset = -1, .bin = 1};
        rc = data_bin_open(sh, fd, size, shown);
        *bin_p = 1;
        if (rc != MP_OK) close(fd);
    } else {
        close(fd);
        htri_t is_h5 = H5Fis_hdf5(path);
        if (is_h5 > 0) rc = data_h5_open(sh, path, shown, name);
        else
            MP_ERROR("%s is not an HDF5 file (make token files with `mindpipe prep`) nor a .bin token shard (its "
                     "magic is %d; a .bin shard's is %d for uint16 or %d for uint32 tokens)", shown,
                     got == 4 ? (int32_t)magic : 0, BIN_MAGIC_U16, BIN_MAGIC_U32);
    }
    if (rc != MP_OK) return free(copy), MP_ERR;
    sh->path = copy;
    return MP_OK;
}

/* ---- splits ----------------------------------------------------------------------------------- */

/* The files of pattern: itself when it has no glob characters (a missing file is then reported by
 * data_shard_open), else glob(3)'s matches, sorted. Refused, naming the pattern, if none match. */
static int data_glob(const char *pattern, glob_t *g)
{
    char shown[DECK_SHOW];
    deck_text_show(pattern, shown, sizeof shown);
    const int flags = strpbrk(pattern, "*?[") ? 0 : GLOB_NOCHECK;
    const int rc = glob(pattern, flags, NULL, g);
    if (rc == GLOB_NOMATCH) return MP_FAIL("data %s: the pattern matches no file", shown);
    if (rc != 0) return MP_FAIL("data %s: cannot expand the pattern (glob error %d)", shown, rc);
    return MP_OK;
}

static void data_split_free(data_split_t *s)
{
    for (int i = 0; i < s->n; i++) data_shard_free(&s->shard[i]);
    free(s->shard);
    *s = (data_split_t){0};
}

/* The split `name` (train or val) of the files pattern names, in sorted order. *bin_p = 1 when
 * one of them is a .bin shard. Errors: data_glob's and data_shard_open's; on error s is empty. */
static int data_split_open(data_split_t *s, const char *pattern, const char *name, int *bin_p)
{
    glob_t g;
    if (data_glob(pattern, &g) != MP_OK) return MP_ERR;
    *s = (data_split_t){0};
    if (!(s->shard = calloc(g.gl_pathc, sizeof *s->shard))) {
        globfree(&g);
        return MP_FAIL("out of memory for %zu shards of %s", g.gl_pathc, pattern);
    }
    for (size_t i = 0; i < g.gl_pathc; i++) {
        data_shard_t *sh = &s->shard[s->n];
        if (data_shard_open(sh, g.gl_pathv[i], name, bin_p) != MP_OK) {
            globfree(&g);
            data_split_free(s);
            return MP_ERR;
        }
        sh->start = s->tokens;
        s->tokens += sh->n;
        s->n++;
    }
    globfree(&g);
    return MP_OK;
}

/* Tokens [at, at+n) of shard sh into out (as uint32). MAP shards are read with pread from fd when
 * fd >= 0 (a scan: no mapped page stays resident), else from the mapping. MP_OK, or MP_ERR naming
 * the file. */
static int data_shard_read(const data_shard_t *sh, uint64_t at, size_t n, uint32_t *out, int fd)
{
    if (sh->kind == DATA_SHARD_H5READ) {
        hsize_t start = at, count = n;
        hid_t fs = H5Dget_space(sh->dset), ms = H5Screate_simple(1, &count, NULL);
        herr_t e = fs < 0 || ms < 0 ? -1 : H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL);
        if (e >= 0) e = H5Dread(sh->dset, H5T_NATIVE_UINT32, ms, fs, H5P_DEFAULT, out);
        if (ms >= 0) H5Sclose(ms);
        if (fs >= 0) H5Sclose(fs);
        return e < 0 ? MP_FAIL("%s: cannot read tokens %llu..%llu", sh->path, (unsigned long long)at,
                               (unsigned long long)(at + n)) : MP_OK;
    }
    const unsigned char *p = sh->tok + at * (uint64_t)sh->width;
    if (fd >= 0) {
        unsigned char *b = (unsigned char *)out; /* decoded in place, from the end down, below */
        const size_t bytes = n * (size_t)sh->width;
        if (pread(fd, b, bytes, (off_t)(sh->file_off + at * (uint64_t)sh->width)) != (ssize_t)bytes)
            return MP_FAIL("%s: cannot read tokens %llu..%llu: %s", sh->path, (unsigned long long)at,
                           (unsigned long long)(at + n), strerror(errno));
        p = b;
    }
    for (size_t i = n; i-- > 0;) out[i] = data_tok(p + i * (size_t)sh->width, sh->width);
    return MP_OK;
}

/* Reads every token of s once (pread or HDF5 reads of DATA_SCAN_CHUNK tokens: resident memory stays
 * one chunk). Refuses, naming the file, a token >= its HDF5 file's vocab; records the largest token. */
static int data_split_scan(dataset_t *ds, const data_split_t *s, const char *name)
{
    uint32_t *buf = MP_MALLOC(DATA_SCAN_CHUNK * sizeof *buf);
    if (!buf) return MP_ERR;
    int rc = MP_OK;
    for (int k = 0; k < s->n && rc == MP_OK; k++) {
        const data_shard_t *sh = &s->shard[k];
        int fd = sh->kind == DATA_SHARD_MAP ? open(sh->path, O_RDONLY | O_CLOEXEC) : -1;
        if (sh->kind == DATA_SHARD_MAP && fd < 0) rc = MP_FAIL("%s: %s", sh->path, strerror(errno));
        for (uint64_t at = 0; at < sh->n && rc == MP_OK; at += DATA_SCAN_CHUNK) {
            const size_t n = sh->n - at < DATA_SCAN_CHUNK ? (size_t)(sh->n - at) : DATA_SCAN_CHUNK;
            if ((rc = data_shard_read(sh, at, n, buf, fd)) != MP_OK) break;
            for (size_t i = 0; i < n; i++) {
                if (sh->vocab && buf[i] >= (uint32_t)sh->vocab) {
                    rc = MP_FAIL("%s: /%s token %u at index %llu is >= vocab %d", sh->path, name, (unsigned)buf[i],
                                 (unsigned long long)(at + i), sh->vocab);
                    break;
                }
                if (buf[i] > ds->max_token || !ds->max_file)
                    ds->max_token = buf[i], ds->max_file = sh->path, ds->max_at = at + i;
            }
        }
        if (fd >= 0) close(fd);
    }
    free(buf);
    return rc;
}

int data_window(const data_split_t *s, uint64_t off, int n, int *out)
{
    int lo = 0, hi = s->n - 1; /* the last shard starting at or before off */
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (s->shard[mid].start <= off) lo = mid;
        else hi = mid - 1;
    }
    for (int k = lo; n > 0; k++) {
        const data_shard_t *sh = &s->shard[k];
        const uint64_t at = off - sh->start;
        const int m = sh->n - at < (uint64_t)n ? (int)(sh->n - at) : n;
        if (sh->kind == DATA_SHARD_MAP) {
            for (int i = 0; i < m; i++) out[i] = (int)data_tok(sh->tok + (at + (uint64_t)i) * (uint64_t)sh->width, sh->width);
        } else {
            h5_quiet_t q;
            h5_quiet_begin(&q);
            const int rc = data_shard_read(sh, at, (size_t)m, (uint32_t *)out, -1);
            h5_quiet_end(&q);
            if (rc != MP_OK) return MP_ERR;
        }
        out += m, n -= m, off += (uint64_t)m;
    }
    return MP_OK;
}

/* ---- the dataset ------------------------------------------------------------------------------ */

/* data_open with HDF5's error printing already off. */
static int data_open_quiet(dataset_t *ds_p, const char *path, const data_opts_t *o)
{
    dataset_t ds = {.order = o->order};
    int bin = 0, val_bin = 0;
    snprintf(ds.path, sizeof ds.path, "%s", path);
    if (data_split_open(&ds.train, path, "train", &bin) != MP_OK) return MP_ERR;
    if (o->val_path && o->val_path[0]) {
        if (data_split_open(&ds.val, o->val_path, "val", &val_bin) != MP_OK) goto err_free_train;
    } else if (bin) {
        ds.val_missing = 1; /* a .bin shard has no validation part of its own */
    } else if (data_split_open(&ds.val, path, "val", &val_bin) != MP_OK) {
        goto err_free_train;
    }
    for (int k = 0; k < ds.train.n; k++) ds.vocab = ds.train.shard[k].vocab > ds.vocab ? ds.train.shard[k].vocab : ds.vocab;
    for (int k = 0; k < ds.val.n; k++) ds.vocab = ds.val.shard[k].vocab > ds.vocab ? ds.val.shard[k].vocab : ds.vocab;
    if (o->scan) {
        if (data_split_scan(&ds, &ds.train, "train") != MP_OK || data_split_scan(&ds, &ds.val, "val") != MP_OK)
            goto err_free_val;
        ds.scanned = 1;
        if (ds.max_token >= (unsigned)ds.vocab) ds.vocab = (int)(ds.max_token < INT_MAX ? ds.max_token + 1 : INT_MAX);
    }
    ds.n_train = (size_t)ds.train.tokens, ds.n_val = (size_t)ds.val.tokens;
    *ds_p = ds;
    return MP_OK;
err_free_val:
    data_split_free(&ds.val);
err_free_train:
    data_split_free(&ds.train);
    return MP_ERR;
}

int data_open(dataset_t *ds_p, const char *path, const data_opts_t *o)
{
    if (strlen(path) >= sizeof ds_p->path) {
        char name[DECK_SHOW];
        deck_text_show(path, name, sizeof name);
        return MP_FAIL("data file %s: path longer than %zu characters", name, sizeof ds_p->path - 1);
    }
    h5_quiet_t q;
    h5_quiet_begin(&q);
    int rc = data_open_quiet(ds_p, path, o);
    h5_quiet_end(&q);
    return rc;
}

int data_load(dataset_t *ds_p, const char *path)
{
    const data_opts_t o = {.val_path = NULL, .order = DATA_ORDER_RANDOM, .scan = 1};
    return data_open(ds_p, path, &o);
}

void data_free(dataset_t *ds)
{
    data_split_free(&ds->train);
    data_split_free(&ds->val);
    ds->n_train = ds->n_val = 0;
    ds->max_file = NULL;
}

/* ---- sampling --------------------------------------------------------------------------------- */

/* The sequential order's permutation of [0, nwin) for (seed, epoch): a 4-round Feistel network on
 * 2h bits (4^h >= nwin), round keys from rng_key, walked until it lands below nwin (cycle walking:
 * a bijection of [0, 4^h) restricted this way is a bijection of [0, nwin); under 4 rounds of walking
 * on average, as 4^h < 4·nwin). No table: a step's samples cost O(1) each whatever the data's size. */
static uint64_t data_perm(uint64_t seed, uint64_t epoch, uint64_t k, uint64_t nwin)
{
    int h = 1;
    while (h < 32 && (1ull << (2 * h)) < nwin) h++;
    const uint64_t mask = (1ull << h) - 1;
    uint64_t x = k;
    do {
        uint64_t l = x >> h, r = x & mask;
        for (uint64_t round = 0; round < 4; round++) {
            const uint64_t f = rng_key(seed, RNG_STREAM_ORDER, epoch, round << 32 | r) & mask;
            const uint64_t nl = r;
            r = l ^ f, l = nl;
        }
        x = l << h | r;
    } while (x >= nwin);
    return x;
}

uint64_t data_seq_window(uint64_t seed, uint64_t g, uint64_t nwin)
{
    return data_perm(seed, g / nwin, g % nwin, nwin);
}

/* Requires n_train >= T+2 (run setup refuses shorter data): a random offset lies in
 * [0, n_train - T), a sequential window w < (n_train-1)/T ends at w*T+T < n_train. */
void data_train_sample(const dataset_t *ds, uint64_t seed, long step, long index, long batch, int T, int *inp, int *tgt)
{
    uint64_t off;
    if (ds->order == DATA_ORDER_SEQUENTIAL) {
        const uint64_t g = (uint64_t)step * (uint64_t)batch + (uint64_t)index;
        off = data_seq_window(seed, g, (uint64_t)(ds->n_train - 1) / (uint64_t)T) * (uint64_t)T;
    } else {
        off = rng_key(seed, RNG_STREAM_DATA, (uint64_t)step, (uint64_t)index) % (uint64_t)(ds->n_train - (size_t)T);
    }
    /* tgt: the same window one token on */
    if (data_window(&ds->train, off, T, inp) != MP_OK || data_window(&ds->train, off + 1, T, tgt) != MP_OK)
        MP_ABORT("training sample %ld of step %ld: the data could not be read (above)", index, step);
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
    if (ds->val_missing)
        MP_WARN("%s: .bin shards carry no validation split: set data.val_path to the validation shards (a glob) "
                "for val_loss; this run computes none", name);
    else if (data_val_windows(ds, T) < 1)
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
    const uint64_t off = (uint64_t)w * (uint64_t)T;
    if (data_window(&ds->val, off, T, inp) != MP_OK || data_window(&ds->val, off + 1, T, tgt) != MP_OK) return MP_ERR;
    return MP_OK;
}

/* ---- prep ------------------------------------------------------------------------------------- */

/* Reads the whole of path into a malloc'd buffer. Errors name the file (missing, unreadable, empty). */
static int data_read_text(const char *path, unsigned char **buf_p, size_t *n_p)
{
    char name[DECK_SHOW];
    deck_text_show(path, name, sizeof name);
    char why[256];
    uint64_t size;
    const int fd = publish_open_regular(path, O_RDONLY, &size, why, sizeof why); /* a planted FIFO: refused */
    if (fd < 0) return MP_FAIL("text file %s: %s", name, why);
    FILE *fp = fdopen(fd, "rb");
    if (!fp) return close(fd), MP_FAIL("text file %s: %s", name, strerror(errno));
    size_t n = (size_t)size;
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



/* 1-D dataset name = tok[0..n) on f (contiguous layout), of file type `type` (H5T_STD_U16LE or
 * H5T_STD_U32LE: HDF5 narrows the ids, which all fit, to uint16 on the way). */
static int data_write_split(hid_t f, const char *fname, const char *name, hid_t type, const uint32_t *tok, size_t n)
{
    int rc = MP_ERR;
    hid_t s = -1, d = -1;
    hsize_t dims = n;
    H5_TRY(s = H5Screate_simple(1, &dims, NULL), out, fname);
    H5_TRY(d = H5Dcreate2(f, name, type, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), err_close_space, fname);
    H5_TRY(H5Dwrite(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, tok), err_close_dset, fname);
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
    htri_t have;
    H5_TRY(have = H5Lexists(f, "tokenizer", H5P_DEFAULT), out, fname); /* hf writes two datasets there */
    if (have) H5_TRY(g = H5Gopen2(f, "tokenizer", H5P_DEFAULT), out, fname);
    else H5_TRY(g = H5Gcreate2(f, "tokenizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), out, fname);
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

/* Writes the token file (both splits, the attributes of tokenizer tk and, for sp and hf, its model) to fname
 * and closes it. The splits are uint16 when tk has at most 65536 ids (every file bytes, gpt2 and sp
 * write, and hf's of such a vocabulary, byte for byte as before uint32 ids), else uint32 (data_h5_open
 * reads both). */
static int data_write_tokens(const char *fname, const uint32_t *tok, size_t n, size_t n_val, const char *source,
                             const tokenizer_t *tk)
{
    hid_t f = -1;
    const char *digest = tok_digest(tk);
    const hid_t type = tok_vocab(tk) <= 65536 ? H5T_STD_U16LE : H5T_STD_U32LE;
    H5_TRY(f = H5Fcreate(fname, H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT), out, fname);
    if (data_write_split(f, fname, "train", type, tok, n - n_val) != MP_OK) goto err_close_file;
    if (data_write_split(f, fname, "val", type, tok + (n - n_val), n_val) != MP_OK) goto err_close_file;
    if (h5_attr_write(f, "vocab", H5T_STD_I32LE, H5T_NATIVE_INT, &(int){tok_vocab(tk)}, fname) != MP_OK) goto err_close_file;
    if (h5_attr_write_string(f, "tokenizer", tok_name(tk), fname) != MP_OK) goto err_close_file;
    if (h5_attr_write_string(f, "source", source, fname) != MP_OK) goto err_close_file;
    if (digest && h5_attr_write_string(f, "tokenizer_sha256", digest, fname) != MP_OK) goto err_close_file;
    size_t n_model;
    const unsigned char *model = tok_model(tk, &n_model);
    if (model && data_write_model(f, fname, tok_model_dataset(tk), model, n_model) != MP_OK) goto err_close_file;
    /* hf: tokenizer_config.json too, when read, for its eos_token (generate and serve stop there) */
    if (tk->kind == TOK_HF && (model = tok_hf_config(tk->hf, &n_model)) &&
        data_write_model(f, fname, "hf_config", model, n_model) != MP_OK)
        goto err_close_file;
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
    const tokenizer_t bytes = {TOK_BYTES, NULL, NULL, NULL};
    if (!tk) tk = &bytes;
    unsigned char *text;
    size_t n_text, n;
    if (data_read_text(text_path, &text, &n_text) != MP_OK) return MP_ERR;
    int rc = MP_ERR;
    uint32_t *tok = MP_MALLOC(TOK_IDS_ROOM(n_text) * sizeof *tok);
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
