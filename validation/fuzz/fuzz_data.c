/* libFuzzer harness for the token data reader (src/data/data.c): each input is turned into a token
 * file, which data_load opens; when it loads, validation windows and a few training windows are read
 * for a few sequence lengths, every token checked against vocab, and data_check_windows is asked.
 *
 * The input describes the file instead of being its bytes, because libhdf5 (1.10 in Debian 12) does
 * not survive corrupt metadata: within a few hundred mutations of a real file it segfaults inside
 * H5Aexists / H5O__msg_iterate_real, a fault of the library no caller can guard against. Written
 * through HDF5's own API, every file is well formed, and the fuzzer explores what our reader must
 * judge: the vocab attribute (absent, of another type or shape, any value), /train and /val (absent,
 * a group, another element type or byte order, scalar or 2-D, contiguous, chunked or compressed, a
 * claimed extent larger than what was written) and any token values.
 *
 * Input layout (bytes past the end read as 0): vocab kind, vocab value (4 bytes); then per split
 * kind, type, rank, layout, written fraction, length (2 bytes); the rest are the tokens, cycled.
 * MP_FUZZ_RAW=1 writes the input as the file's bytes instead (for hunting libhdf5 faults; the
 * corpus' .h5 files are seeds for it): not run in CI.
 *
 * Build and run: bash validation/fuzz/run.sh SECONDS build fuzz_data. */
#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "data.h"

static char data_path[64];
static int raw_mode;

typedef struct {
    const uint8_t *p;
    size_t n, at;
} src_t;

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_data: %s\n", what);
    abort();
}

static void remove_data(void) { unlink(data_path); }

static unsigned take(src_t *s) { return s->at < s->n ? s->p[s->at++] : 0; }
static uint32_t take32(src_t *s)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v = v << 8 | take(s);
    return v;
}

/* The vocab attribute: absent, int32 (a prep-like 256 or any value), float64, a string, an int32[2]. */
static void write_vocab(hid_t f, src_t *s)
{
    const unsigned kind = take(s) % 6;
    const uint32_t raw = take32(s);
    const int value = kind == 1 ? 256 : (int)raw;
    const double dvalue = (double)(int)raw;
    const int pair[2] = {value, value};
    hsize_t two = 2;
    if (kind == 0) return;
    hid_t sp = kind == 5 ? H5Screate_simple(1, &two, NULL) : H5Screate(H5S_SCALAR), t = -1, a = -1;
    if (kind == 3) t = H5Tcopy(H5T_IEEE_F64LE);
    else if (kind == 4) t = H5Tcopy(H5T_C_S1), H5Tset_size(t, 4);
    else t = H5Tcopy(H5T_STD_I32LE);
    a = H5Acreate2(f, "vocab", t, sp, H5P_DEFAULT, H5P_DEFAULT);
    if (kind == 3) H5Awrite(a, H5T_NATIVE_DOUBLE, &dvalue);
    else if (kind == 4) H5Awrite(a, t, "256");
    else H5Awrite(a, H5T_NATIVE_INT, kind == 5 ? pair : &value);
    H5Aclose(a), H5Tclose(t), H5Sclose(sp);
}

/* One split: absent, a group, or a dataset of some type, rank and layout holding tokens from s. */
static void write_split(hid_t f, const char *name, src_t *s)
{
    const hid_t types[] = {H5T_STD_U16LE, H5T_STD_U16LE, H5T_STD_U16BE, H5T_STD_I16LE,
                           H5T_STD_U8LE, H5T_STD_U32LE, H5T_IEEE_F32LE}; /* run-time ids: not static */
    const unsigned kind = take(s) % 8, type = take(s) % 7, rank = take(s) % 4, layout = take(s) % 3;
    const unsigned written = take(s) % 3;
    hsize_t n = take(s) << 8;
    n |= take(s);
    if (kind == 0) return;
    if (kind == 1) {
        hid_t g = H5Gcreate2(f, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (g >= 0) H5Gclose(g);
        return;
    }
    hsize_t dims[2] = {n, 3}, chunk[2] = {64, 3};
    const int r = rank == 0 ? 0 : rank == 3 ? 2 : 1; /* 1-D twice as often */
    hid_t sp = r ? H5Screate_simple(r, dims, NULL) : H5Screate(H5S_SCALAR);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (r && layout && n) {
        H5Pset_chunk(dcpl, r, chunk);
        if (layout == 2) H5Pset_deflate(dcpl, 1);
    }
    hid_t d = H5Dcreate2(f, name, types[type], sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    const size_t count = r ? (size_t)n * (r == 2 ? 3 : 1) : 1;
    /* chunked layouts may be left unwritten (fill values) or be written in full */
    if (d >= 0 && count && (written || !(r && layout && n))) {
        uint16_t *tok = malloc(count * sizeof *tok);
        if (!tok) fail("out of memory");
        const size_t rest = s->n > s->at ? s->n - s->at : 0;
        for (size_t i = 0; i < count; i++) {
            /* tokens: the rest of the input, cycled (small values most of the time, to pass vocab) */
            const size_t k = rest ? s->at + (2 * i) % rest : 0;
            const unsigned lo = rest ? s->p[k] : 0, hi = rest && k + 1 < s->n ? s->p[k + 1] : 0;
            tok[i] = (uint16_t)(written == 2 ? lo | hi << 8 : lo);
        }
        H5Dwrite(d, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, tok);
        free(tok);
    }
    if (d >= 0) H5Dclose(d);
    H5Pclose(dcpl), H5Sclose(sp);
}

static int write_described(const uint8_t *data, size_t size)
{
    src_t s = {data, size, 0};
    hid_t f = H5Fcreate(data_path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) fail("cannot create the data file");
    write_vocab(f, &s);
    const size_t header = s.at;
    write_split(f, "train", &s);
    s.at = header + 7; /* both splits read their 7 header bytes from fixed places; tokens follow */
    write_split(f, "val", &s);
    return H5Fclose(f) < 0 ? -1 : 0;
}

/* Reads windows of T tokens: every token must be below vocab, every counted window must be served. */
static void read_windows(const dataset_t *ds, int T, int *inp, int *tgt)
{
    const long nval = data_val_windows(ds, T);
    if (nval < 0 || (nval > 0 && (size_t)nval * (size_t)T + 1 > ds->n_val)) fail("data_val_windows past /val");
    for (long w = 0; w < nval && w < 64; w++) {
        if (data_val_sample(ds, w, T, inp, tgt) != MP_OK) fail("a counted validation window was refused");
        for (int t = 0; t < T; t++)
            if (inp[t] < 0 || inp[t] >= ds->vocab || tgt[t] < 0 || tgt[t] >= ds->vocab) fail("val token >= vocab");
    }
    if (data_val_sample(ds, nval, T, inp, tgt) == MP_OK) fail("a window past /val was served");
    if (data_check_windows(ds, T) != MP_OK) return; /* setup refuses the run before any sampling */
    for (long i = 0; i < 8; i++) {
        data_train_sample(ds, 1337, 3, i, 8, T, inp, tgt);
        for (int t = 0; t < T; t++)
            if (inp[t] < 0 || inp[t] >= ds->vocab || tgt[t] < 0 || tgt[t] >= ds->vocab) fail("train token >= vocab");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const int seq_lens[] = {1, 7, 64, 300};
    static int inp[300], tgt[300];
    if (!data_path[0]) {
        int fd;
        snprintf(data_path, sizeof data_path, "/tmp/fuzz_data.%ld.XXXXXX", (long)getpid());
        if ((fd = mkstemp(data_path)) < 0) fail("mkstemp");
        close(fd);
        atexit(remove_data);
        H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
        raw_mode = getenv("MP_FUZZ_RAW") && !strcmp(getenv("MP_FUZZ_RAW"), "1");
    }
    if (raw_mode) {
        FILE *f = fopen(data_path, "wb");
        if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) fail("cannot write the data file");
    } else if (write_described(data, size) != 0) {
        return 0;
    }
    dataset_t ds;
    const int loaded = data_load(&ds, data_path);
    H5garbage_collect(); /* HDF5's free lists would otherwise keep every input's metadata: RSS only grows */
    if (loaded != MP_OK) return 0;
    if (!ds.train.n || !ds.val.n || !ds.n_train || !ds.n_val || ds.vocab < 1) fail("data_load accepted an empty split");
    for (size_t k = 0; k < sizeof seq_lens / sizeof seq_lens[0]; k++) read_windows(&ds, seq_lens[k], inp, tgt);
    data_free(&ds);
    return 0;
}
