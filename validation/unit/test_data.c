/* Token datasets (src/data.c): prep of a generated text and the exact tokens and split sizes it
 * writes, the attributes, the training-window sampler (bounds, determinism, spread), validation
 * windows, and every class of bad input refused with a message naming the file. Files live in a
 * mkdtemp directory; stderr is captured to a file to check the messages. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "data.h"
#include "rng.h"
#include "tap.h"

static char tmpdir[] = "/tmp/test_data.XXXXXX";
#include "capture.h"

/* n bytes of pseudo-English (words drawn by the counter-based generator) to path; the bytes too. */
static unsigned char *write_text(const char *path, size_t n)
{
    static const char *const words[] = {"the", "and", "of", "to", "in", "that", "he", "shall", "unto", "for",
                                        "his", "a", "they", "be", "is", "with", "not", "all", "thou", "thy"};
    unsigned char *buf = malloc(n);
    size_t i = 0;
    for (uint64_t k = 0; i < n; k++) {
        const char *w = words[rng_key(7, 9, k, 0) % 20];
        for (const char *c = w; *c && i < n; c++) buf[i++] = (unsigned char)*c;
        if (i < n) buf[i++] = rng_key(7, 9, k, 1) % 13 == 0 ? '\n' : ' ';
    }
    FILE *f = fopen(path, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
    return buf;
}

/* Attribute name of the file's root group as a string (fixed length), in a static buffer. */
static const char *read_attr_string(const char *path, const char *name)
{
    static char text[256];
    text[0] = 0;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    hid_t t = H5Aget_type(a);
    size_t size = H5Tget_size(t);
    if (size < sizeof text) {
        H5Aread(a, t, text);
        text[size] = 0;
    }
    H5Tclose(t);
    H5Aclose(a);
    H5Fclose(f);
    return text;
}

/* A token file written by hand: /train (type ttype, n tokens of value fill, one of them `odd`),
 * /val unless no_val, attribute vocab. */
static void write_tokens_by_hand(const char *path, hid_t ttype, int no_val, int vocab, unsigned odd)
{
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t n = 100;
    uint16_t tok[100];
    for (int i = 0; i < 100; i++) tok[i] = (uint16_t)(i % 50);
    tok[37] = (uint16_t)odd;
    hid_t s = H5Screate_simple(1, &n, NULL);
    for (int k = 0; k < (no_val ? 1 : 2); k++) {
        hid_t d = H5Dcreate2(f, k ? "val" : "train", ttype, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H5Dwrite(d, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, tok);
        H5Dclose(d);
    }
    H5Sclose(s);
    s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, "vocab", H5T_STD_I32LE, s, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT, &vocab);
    H5Aclose(a);
    H5Sclose(s);
    H5Fclose(f);
}

/* data_load must refuse path with a message containing the file name and needle. */
static void expect_load_refused(const char *what, const char *path, const char *needle)
{
    dataset_t ds;
    capture_begin();
    int rc = data_load(&ds, path);
    capture_end();
    const char *base = strrchr(path, '/') + 1;
    int named = strstr(errtext, base) != NULL, has = !needle || strstr(errtext, needle) != NULL;
    int lines = 0;
    for (const char *p = errtext; *p; p++) lines += *p == '\n';
    tap_ok(rc == MP_ERR && named && has && lines == 1, "refused, one line naming the file: %s", what);
    show_errtext();
}

static int count_tmp_files(void)
{
    DIR *dh = opendir(tmpdir);
    int n = 0;
    for (struct dirent *e; (e = readdir(dh));) n += strstr(e->d_name, ".tmp") != NULL;
    closedir(dh);
    return n;
}

/* Token i of split s, read through data_window. */
static int tok_at(const data_split_t *s, size_t i)
{
    int v = -1;
    return data_window(s, i, 1, &v) == MP_OK ? v : -1;
}

static void test_prep_load(void)
{
    const size_t N = 20000;
    unsigned char *text = write_text(tpath("corpus.txt"), N);
    const char *out = tpath("tok.h5");
    tap_ok(data_prep_text(tpath("corpus.txt"), out, 0.1) == MP_OK, "prep of a 20 kB text");
    tap_ok(count_tmp_files() == 0, "prep leaves no temporary file");
    dataset_t ds;
    if (!tap_ok(data_load(&ds, out) == MP_OK, "load the prepared file")) return free(text);
    /* 10% of 20000 is 2000 < 4097: val is raised to 4097, train keeps the rest. */
    tap_ok(ds.n_val == 4097 && ds.n_train == N - 4097, "split sizes: val %zu (>= 4097), train %zu", ds.n_val,
           ds.n_train);
    int same = 1;
    for (size_t i = 0; i < ds.n_train; i++) same &= tok_at(&ds.train, i) == text[i];
    for (size_t i = 0; i < ds.n_val; i++) same &= tok_at(&ds.val, i) == text[ds.n_train + i];
    tap_ok(same, "tokens are the bytes of the text, train first, val the tail");
    tap_ok(ds.vocab == 256 && !strcmp(ds.path, out), "vocab 256 and the path recorded");
    tap_ok(!strcmp(read_attr_string(out, "tokenizer"), "byte"), "attribute tokenizer = byte");
    tap_ok(!strcmp(read_attr_string(out, "source"), "corpus.txt"), "attribute source = basename of the text");

    /* Sampler: offset = rng_key(seed, DATA, step, index) mod (n_train - T), window in bounds. */
    enum { T = 32 };
    int inp[T], tgt[T], inp2[T], tgt2[T], exact = 1, determ = 1, differ = 0;
    for (long step = 0; step < 20; step++)
        for (long i = 0; i < 50; i++) {
            size_t off = rng_key(1337, RNG_STREAM_DATA, (uint64_t)step, (uint64_t)i) % (ds.n_train - T);
            data_train_sample(&ds, 1337, step, i, 50, T, inp, tgt);
            exact &= off + T < ds.n_train;
            for (int t = 0; t < T; t++) exact &= inp[t] == tok_at(&ds.train, off + t) && tgt[t] == tok_at(&ds.train, off + t + 1);
            data_train_sample(&ds, 1337, step, i, 50, T, inp2, tgt2);
            determ &= !memcmp(inp, inp2, sizeof inp) && !memcmp(tgt, tgt2, sizeof tgt);
            data_train_sample(&ds, 1337, step, i + 1, 50, T, inp2, tgt2);
            differ += memcmp(inp, inp2, sizeof inp) != 0;
        }
    tap_ok(exact, "train windows: inp = train[off..off+T), tgt = the next tokens, inside /train");
    tap_ok(determ, "same (seed, step, index): the same window");
    tap_ok(differ >= 990, "different index: a different window (%d of 1000)", differ);
    data_train_sample(&ds, 1338, 0, 0, 50, T, inp2, tgt2);
    data_train_sample(&ds, 1337, 0, 0, 50, T, inp, tgt);
    tap_ok(memcmp(inp, inp2, sizeof inp) != 0, "a different seed draws a different window");

    long nw = data_val_windows(&ds, T);
    int val_ok = nw == (long)((ds.n_val - 1) / T);
    for (long w = 0; w < nw; w++) {
        val_ok &= data_val_sample(&ds, w, T, inp, tgt) == MP_OK;
        for (int t = 0; t < T; t++) val_ok &= inp[t] == tok_at(&ds.val, (size_t)(w * T + t)) && tgt[t] == tok_at(&ds.val, (size_t)(w * T + t + 1));
    }
    tap_ok(val_ok, "val windows: %ld of them at stride T from 0, exact tokens", nw);
    capture_begin();
    int rc = data_val_sample(&ds, nw, T, inp, tgt);
    capture_end();
    tap_ok(rc == MP_ERR && strstr(errtext, "tok.h5"), "a val window past the end is refused");
    data_free(&ds);
    free(text);
}

static void test_prep_splits(void)
{
    dataset_t ds;
    unsigned char *text = write_text(tpath("short.txt"), 1000);
    int ok = data_prep_text(tpath("short.txt"), tpath("short.h5"), 0.1) == MP_OK &&
             data_load(&ds, tpath("short.h5")) == MP_OK;
    tap_ok(ok && ds.n_val == 500 && ds.n_train == 500, "short text: val capped so train stays as large as val");
    if (ok) data_free(&ds);
    free(text);

    text = write_text(tpath("big.txt"), 100000);
    ok = data_prep_text(tpath("big.txt"), tpath("big.h5"), 0.25) == MP_OK && data_load(&ds, tpath("big.h5")) == MP_OK;
    tap_ok(ok && ds.n_val == 25000 && ds.n_train == 75000, "long text: val is val_fraction of it");
    if (ok) data_free(&ds);
    free(text);

    /* prep over an existing file replaces it */
    text = write_text(tpath("short.txt"), 3000);
    ok = data_prep_text(tpath("short.txt"), tpath("big.h5"), 0.1) == MP_OK && data_load(&ds, tpath("big.h5")) == MP_OK;
    tap_ok(ok && ds.n_train + ds.n_val == 3000 && tok_at(&ds.train, 0) == text[0], "prep replaces an existing output file");
    if (ok) data_free(&ds);
    free(text);
}

static void test_prep_errors(void)
{
    capture_begin();
    int rc = data_prep_text(tpath("absent.txt"), tpath("x.h5"), 0.1);
    capture_end();
    tap_ok(rc == MP_ERR && strstr(errtext, "absent.txt") && access(tpath("x.h5"), F_OK) != 0,
           "prep of a missing text names it, writes nothing");
    show_errtext();
    fclose(fopen(tpath("empty.txt"), "w"));
    capture_begin();
    rc = data_prep_text(tpath("empty.txt"), tpath("x.h5"), 0.1);
    capture_end();
    tap_ok(rc == MP_ERR && strstr(errtext, "empty.txt") && strstr(errtext, "empty"), "prep of an empty text names it");
    show_errtext();
    capture_begin();
    rc = data_prep_text(tpath("corpus.txt"), tpath("no/such/dir/x.h5"), 0.1);
    capture_end();
    tap_ok(rc == MP_ERR && strstr(errtext, "x.h5") && count_tmp_files() == 0,
           "prep into a missing directory fails naming the output, no temporary left");
    show_errtext();
}

static void test_load_errors(void)
{
    expect_load_refused("missing file (and says to run prep)", tpath("nope.h5"), "mindpipe prep");
    FILE *f = fopen(tpath("bad.h5"), "w");
    fputs("not hdf5\n", f);
    fclose(f);
    expect_load_refused("not an HDF5 file", tpath("bad.h5"), "not an HDF5 file");
    write_tokens_by_hand(tpath("noval.h5"), H5T_STD_U16LE, 1, 256, 3);
    expect_load_refused("no /val", tpath("noval.h5"), "/val");
    write_tokens_by_hand(tpath("big_token.h5"), H5T_STD_U16LE, 0, 100, 200);
    expect_load_refused("a token >= vocab", tpath("big_token.h5"), "token 200 at index 37 is >= vocab 100");
    write_tokens_by_hand(tpath("int32.h5"), H5T_STD_I32LE, 0, 256, 3);
    expect_load_refused("tokens of the wrong type", tpath("int32.h5"), "uint16");
    /* a split that claims 16 Mi tokens and stores none (chunked, never written: HDF5 would read fill values) */
    hid_t f5 = H5Fcreate(tpath("hollow.h5"), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t n = 1u << 24, chunk = 1024, two = 2;
    hid_t s = H5Screate_simple(1, &n, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE), s2 = H5Screate_simple(1, &two, NULL);
    H5Pset_chunk(dcpl, 1, &chunk);
    H5Dclose(H5Dcreate2(f5, "train", H5T_STD_U16LE, s, H5P_DEFAULT, dcpl, H5P_DEFAULT));
    hid_t dv = H5Dcreate2(f5, "val", H5T_STD_U16LE, s2, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(dv, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, (uint16_t[]){1, 2});
    H5Dclose(dv);
    hid_t sa = H5Screate(H5S_SCALAR), a = H5Acreate2(f5, "vocab", H5T_STD_I32LE, sa, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT, &(int){256});
    H5Aclose(a), H5Sclose(sa), H5Pclose(dcpl), H5Sclose(s), H5Sclose(s2), H5Fclose(f5);
    expect_load_refused("a split claiming more tokens than the file stores", tpath("hollow.h5"),
                        "/train claims 16777216 tokens but the file stores 0 bytes");
    /* vocab written as an int32[2] (found by fuzz_data: H5Aread wrote both elements into one int) */
    write_tokens_by_hand(tpath("vocab_pair.h5"), H5T_STD_U16LE, 0, 256, 3);
    f5 = H5Fopen(tpath("vocab_pair.h5"), H5F_ACC_RDWR, H5P_DEFAULT);
    H5Adelete(f5, "vocab");
    sa = H5Screate_simple(1, &two, NULL);
    a = H5Acreate2(f5, "vocab", H5T_STD_I32LE, sa, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT, (int[]){256, 256});
    H5Aclose(a), H5Sclose(sa), H5Fclose(f5);
    expect_load_refused("vocab an array of two integers", tpath("vocab_pair.h5"), "attribute vocab holds 2 values, not one");
    /* vocab a float: HDF5 would convert 256.7 to 256 and the file would pass for a token file */
    write_tokens_by_hand(tpath("vocab_float.h5"), H5T_STD_U16LE, 0, 256, 3);
    f5 = H5Fopen(tpath("vocab_float.h5"), H5F_ACC_RDWR, H5P_DEFAULT);
    H5Adelete(f5, "vocab");
    sa = H5Screate(H5S_SCALAR);
    a = H5Acreate2(f5, "vocab", H5T_IEEE_F64LE, sa, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_DOUBLE, &(double){256.7});
    H5Aclose(a), H5Sclose(sa), H5Fclose(f5);
    expect_load_refused("vocab a float", tpath("vocab_float.h5"), "attribute vocab is not an integer");
    /* a truncated token file: HDF5 refuses it at open */
    struct stat st;
    stat(tpath("tok.h5"), &st);
    if (truncate(tpath("tok.h5"), st.st_size / 2) != 0) tap_diag("truncate: %s", strerror(errno));
    expect_load_refused("a truncated file", tpath("tok.h5"), NULL);
}

/* A validation split too short for seq_len (issue 15): setup's check warns, naming the file, /val's
 * token count and seq_len (val_loss would otherwise be missing without a word); a /train too
 * short is refused; a split that holds one window passes silently. */
static void test_short_split(void)
{
    free(write_text(tpath("short.txt"), 10000));
    capture_begin();
    int prep = data_prep_text(tpath("short.txt"), tpath("short.h5"), 0.05);
    dataset_t ds;
    int load = prep == MP_OK ? data_load(&ds, tpath("short.h5")) : MP_ERR;
    capture_end();
    if (load != MP_OK) {
        tap_ok(0, "prep and load of short.h5");
        show_errtext();
        return;
    }
    tap_diag("short.h5: /train %zu tokens, /val %zu tokens", ds.n_train, ds.n_val);
    capture_begin();
    int fits = data_check_windows(&ds, 4096);
    capture_end();
    tap_ok(fits == MP_OK && !errtext[0] && data_val_windows(&ds, 4096) == 1, "/val of 4097 tokens, seq_len 4096: one window, no warning");
    capture_begin();
    int warned = data_check_windows(&ds, 4097);
    capture_end();
    tap_ok(warned == MP_OK && strstr(errtext, "warning") && strstr(errtext, "short.h5") &&
               strstr(errtext, "/val has 4097 tokens") && strstr(errtext, "model.seq_len+1 = 4098") &&
               strstr(errtext, "no val_loss"),
           "/val shorter than seq_len+1: a warning naming the file, the split's tokens and seq_len");
    show_errtext();
    capture_begin();
    int refused = data_check_windows(&ds, 6000);
    capture_end();
    tap_ok(refused == MP_ERR && strstr(errtext, "short.h5") && strstr(errtext, "/train has 5903 tokens") &&
               strstr(errtext, "model.seq_len+2 = 6002"),
           "/train shorter than seq_len+2: refused naming the file and both numbers");
    show_errtext();
    data_free(&ds);
}

/* A path of thousands of characters (issue 15): the message keeps its reason and the file's name
 * (the path's middle is what is shortened). */
static void test_long_path_message(void)
{
    char *path = malloc(4000);
    int n = snprintf(path, 4000, "%s", tmpdir);
    for (int k = 0; k < 30; k++) n += snprintf(path + n, 4000 - (size_t)n, "/%099d", k); /* 30 directories */
    snprintf(path + n, 4000 - (size_t)n, "/missing.h5");
    expect_load_refused("a 3000-character path keeps the reason", path, "No such file or directory");
    tap_ok(strstr(errtext, "mindpipe prep") && strlen(errtext) < 1024, "... and the advice, in a short line");
    free(path);
}

/* ---- shards (issue 34): .bin files from validation/write_bin_shards.py, chunked HDF5, orders ---- */

/* Runs the Python writer: PREFIX_000000.bin... (see its usage). 0 on success. */
static int write_shards(const char *prefix, int nshards, int per, int vocab, const char *kind, const char *flaw)
{
    const char *py = getenv("TORCH_PYTHON"), *src = getenv("MP_SRCDIR");
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' '%s/validation/write_bin_shards.py' '%s' %d %d %d %s %s", py && py[0] ? py : "python3",
             src && src[0] ? src : MP_SRCDIR_DEFAULT, prefix, nshards, per, vocab, kind, flaw);
    return system(cmd);
}

/* The writer's token j of the stream. */
static int shard_token(uint64_t j, int vocab) { return (int)((j * 7919 + 13) % (uint64_t)vocab); }

/* Every token of split s (read in windows of 61, crossing shard boundaries) is the writer's. */
static int split_exact(const data_split_t *s, int vocab)
{
    int buf[61], same = 1;
    for (uint64_t off = 0; off < s->tokens; off += 61) {
        const int n = s->tokens - off < 61 ? (int)(s->tokens - off) : 61;
        same &= data_window(s, off, n, buf) == MP_OK;
        for (int i = 0; i < n; i++) same &= buf[i] == shard_token(off + (uint64_t)i, vocab);
    }
    return same;
}

static void test_bin_shards(void)
{
    dataset_t ds;
    char pat[600], val[600];
    snprintf(pat, sizeof pat, "%s", tpath("u16_*.bin"));
    int w = write_shards(tpath("u16"), 3, 1000, 50257, "u16", "");
    int ok = w == 0 && data_load(&ds, pat) == MP_OK;
    if (!tap_ok(ok, "three uint16 .bin shards by glob")) return;
    tap_ok(ds.train.n == 3 && ds.n_train == 3000 && ds.train.shard[1].start == 1000 && ds.train.shard[0].width == 2 &&
               strstr(ds.train.shard[2].path, "u16_000002.bin") && ds.train.shard[0].kind == DATA_SHARD_MAP,
           "sorted, 3000 tokens, mapped, 2 bytes each");
    tap_ok(split_exact(&ds.train, 50257), "every uint16 token read back exactly, windows across shard boundaries");
    tap_ok(ds.val_missing && ds.n_val == 0 && data_val_windows(&ds, 8) == 0, ".bin shards without val_path: no validation split");
    capture_begin();
    int fits = data_check_windows(&ds, 16);
    capture_end();
    tap_ok(fits == MP_OK && strstr(errtext, "data.val_path"), "... and setup's check warns naming data.val_path");
    data_free(&ds);

    snprintf(pat, sizeof pat, "%s", tpath("u32_*.bin"));
    ok = write_shards(tpath("u32"), 2, 700, 100000, "u32", "") == 0 && data_load(&ds, pat) == MP_OK;
    if (!tap_ok(ok, "two uint32 .bin shards by glob")) return;
    int big = 0;
    for (uint64_t j = 0; j < 1400; j++) big += shard_token(j, 100000) >= 65536;
    tap_ok(ds.train.shard[0].width == 4 && split_exact(&ds.train, 100000) && big > 100,
           "every uint32 token read back exactly (%d of them >= 65536)", big);
    int top = 0;
    for (uint64_t j = 0; j < 1400; j++) top = shard_token(j, 100000) > top ? shard_token(j, 100000) : top;
    tap_ok(ds.scanned && (int)ds.max_token == top && ds.vocab == top + 1,
           "the scan finds the largest token (%u) and vocab = it + 1", ds.max_token);
    data_free(&ds);

    /* validation shards by data.val_path */
    snprintf(pat, sizeof pat, "%s", tpath("u16_*.bin"));
    snprintf(val, sizeof val, "%s", tpath("u32_00000[01].bin"));
    const data_opts_t o = {.val_path = val, .order = DATA_ORDER_RANDOM, .scan = 0};
    ok = data_open(&ds, pat, &o) == MP_OK;
    tap_ok(ok && !ds.val_missing && ds.n_val == 1400 && split_exact(&ds.val, 100000) && !ds.scanned,
           "data.val_path: the validation stream is its shards', unscanned when scan = 0");
    if (ok) data_free(&ds);

    write_shards(tpath("magic"), 1, 100, 256, "u16", "--bad-magic");
    expect_load_refused("a .bin shard of the wrong magic", tpath("magic_000000.bin"), "magic is 20240521");
    write_shards(tpath("short"), 1, 100, 256, "u32", "--truncate");
    expect_load_refused("a truncated .bin shard", tpath("short_000000.bin"), "header says 100 tokens of 4 bytes");
    expect_load_refused("a glob matching nothing", tpath("none_*.bin"), "the pattern matches no file");
    write_shards(tpath("bigtok"), 1, 100, 256, "u16", "--big-token");
    ok = data_load(&ds, tpath("bigtok_000000.bin")) == MP_OK;
    tap_ok(ok && ds.max_token == 256 && ds.max_at == 5 && strstr(ds.max_file, "bigtok_000000.bin"),
           "a token >= the model's vocab is found by the scan, with its file and index (run setup refuses it)");
    if (ok) data_free(&ds);
}

/* A chunked, deflated uint32 HDF5 token file is read window by window (not mapped), exactly. */
static void test_chunked_h5(void)
{
    enum { N = 5000 };
    static uint32_t tok[N];
    for (int j = 0; j < N; j++) tok[j] = (uint32_t)shard_token((uint64_t)j, 70000);
    hid_t f = H5Fcreate(tpath("chunked.h5"), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t n = N, chunk = 512;
    hid_t s = H5Screate_simple(1, &n, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, &chunk);
    H5Pset_deflate(dcpl, 4);
    for (int k = 0; k < 2; k++) {
        hid_t d = H5Dcreate2(f, k ? "val" : "train", H5T_STD_U32LE, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        H5Dwrite(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, tok);
        H5Dclose(d);
    }
    hid_t sa = H5Screate(H5S_SCALAR), a = H5Acreate2(f, "vocab", H5T_STD_I32LE, sa, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT, &(int){70000});
    H5Aclose(a), H5Sclose(sa), H5Pclose(dcpl), H5Sclose(s), H5Fclose(f);
    dataset_t ds;
    int ok = data_load(&ds, tpath("chunked.h5")) == MP_OK;
    tap_ok(ok && ds.train.shard[0].kind == DATA_SHARD_H5READ && ds.vocab == 70000 && split_exact(&ds.train, 70000) &&
               split_exact(&ds.val, 70000),
           "chunked deflated uint32 HDF5: read by windows, every token exact");
    if (ok) data_free(&ds);
    ok = data_load(&ds, tpath("short.h5")) == MP_OK; /* prep's, from test_short_split */
    tap_ok(ok && ds.train.shard[0].kind == DATA_SHARD_MAP && ds.val.shard[0].kind == DATA_SHARD_MAP,
           "a contiguous prep file is mapped");
    if (ok) data_free(&ds);
}

/* data.order = sequential: each window once per epoch, epochs in different orders, a pure function. */
static void test_sequential(void)
{
    static const uint64_t sizes[] = {1, 2, 37, 1000, 4099};
    int once = 1, differ = 0;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const uint64_t nw = sizes[k];
        unsigned char *seen = calloc(nw, 1);
        for (uint64_t e = 0; e < 3; e++) {
            memset(seen, 0, nw);
            for (uint64_t i = 0; i < nw; i++) {
                const uint64_t w = data_seq_window(11, e * nw + i, nw);
                once &= w < nw && !seen[w];
                if (w < nw) seen[w] = 1;
                if (nw == 1000 && e == 1) differ += w != data_seq_window(11, i, nw);
            }
        }
        free(seen);
    }
    tap_ok(once, "sequential: every window exactly once in each of 3 epochs (1, 2, 37, 1000, 4099 windows)");
    tap_ok(differ > 900, "... epoch 1 is another permutation than epoch 0 (%d of 1000 differ)", differ);
    dataset_t ds;
    const data_opts_t o = {.order = DATA_ORDER_SEQUENTIAL, .scan = 0};
    if (!tap_ok(data_open(&ds, tpath("u16_*.bin"), &o) == MP_OK, "open shards in sequential order")) return;
    enum { T = 16 };
    int inp[T], tgt[T], exact = 1;
    for (long step = 0; step < 30; step++)
        for (long i = 0; i < 8; i++) {
            const uint64_t w = data_seq_window(5, (uint64_t)step * 8 + (uint64_t)i, (ds.n_train - 1) / T);
            data_train_sample(&ds, 5, step, i, 8, T, inp, tgt);
            for (int t = 0; t < T; t++)
                exact &= inp[t] == shard_token(w * T + (uint64_t)t, 50257) && tgt[t] == shard_token(w * T + (uint64_t)t + 1, 50257);
        }
    tap_ok(exact, "sequential samples: window perm(step*batch + i) * T, exact tokens across shards and epochs");
    data_free(&ds);
}

static void cleanup(void)
{
    DIR *dh = opendir(tmpdir);
    for (struct dirent *e; dh && (e = readdir(dh));)
        if (e->d_name[0] != '.') unlink(tpath(e->d_name));
    if (dh) closedir(dh);
    rmdir(tmpdir);
}

int main(void)
{
    MPI_Init(NULL, NULL);
    if (!mkdtemp(tmpdir)) return perror("mkdtemp"), 1;
    test_prep_load();
    test_prep_splits();
    test_prep_errors();
    test_load_errors();
    test_short_split();
    test_long_path_message();
    test_bin_shards();
    test_chunked_h5();
    test_sequential();
    cleanup();
    MPI_Finalize();
    return tap_done();
}
