/* The boundary log (src/ckpt/bndlog.c): a log of several steps x micro-batches x both directions and
 * chunks plus scalars, from random bits (NaNs included), read back bitwise after close; the last
 * complete step is the last marked one, and an unmarked step is refused as not complete; a reopen
 * keeps the marked steps before the resume step; prune refuses older steps and keeps the step in
 * flight readable, in a smaller file; another run id, rank or format refused naming the file and the
 * key, the file left as it was; a torn log of this rank in a resume's way moved aside to NAME.damaged
 * (never over an earlier one) and a new log started; a fresh open (a rank resuming from a checkpoint)
 * moves the old log, whole, torn or another run's, to NAME.old unopened; a flipped byte in a tensor's or the scalars' data caught by its
 * checksum, the caller's buffer untouched; entries forged in a sound file (moved from another step
 * or kind, copied from another rank's log, integers, 2-D, short, no checksum or a string as one)
 * refused naming the file, the entry and what is wrong; truncated files refused without a crash; puts while
 * paused return (no deadlock) and the writer stays out of HDF5 meanwhile; a full queue makes put
 * wait and loses nothing; write errors (a file size limit, a directory in the way of the prune's
 * temporary, a log directory under a regular file) reported by the next call and by close; a
 * writer killed mid-step leaves every marked step readable; a gradient logged by rows (only rows not
 * all +0.0, a −0.0 kept) read back bitwise, a forged or mis-sized rows entry refused; close records
 * the counters in the file. Files live in a
 * mkdtemp directory. */
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bndlog.h"
#include "check.h"
#include "h5util.h"
#include "tap.h"

static char tmpdir[] = "/tmp/test_bndlog.XXXXXX";
#include "capture.h"

static const char *RUN = "0123456789abcdef0123456789abcdef";

/* ---- deterministic random entries ---- */

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Random 32-bit patterns (NaNs, infinities, subnormals among them): the log must keep bits. */
static void fill(float *x, size_t n, long step, int mb, int chunk, int kind)
{
    uint64_t seed = mix64(((uint64_t)step << 32) ^ ((uint64_t)mb << 16) ^ ((uint64_t)chunk << 8) ^ (uint64_t)kind);
    for (size_t i = 0; i < n; i++) {
        uint32_t bits = (uint32_t)mix64(seed + i);
        memcpy(&x[i], &bits, sizeof bits);
    }
}

static void fill_scalars(double *v, int n, long step)
{
    for (int i = 0; i < n; i++) {
        uint64_t bits = mix64(0xabcdefull + (uint64_t)step * 131 + (uint64_t)i);
        memcpy(&v[i], &bits, sizeof bits);
    }
}

static size_t numel(int mb) { return 1000 + 17 * (size_t)mb; }

enum { MBS = 3, NSCAL = 3 };

/* Puts every entry of step: micro-batches 0..MBS-1 in both directions on chunk 0, micro-batch 0 on
 * chunk 1 too, and NSCAL scalars. Returns how many calls failed; *bytes_p += what was put. */
static int put_step(bndlog_t *b, long step, size_t *bytes_p)
{
    int bad = 0;
    float x[2000];
    double v[NSCAL];
    for (int mb = 0; mb < MBS; mb++)
        for (int chunk = 0; chunk < (mb == 0 ? 2 : 1); chunk++)
            for (int kind = BND_ACT; kind <= BND_GRAD; kind++) {
                fill(x, numel(mb), step, mb, chunk, kind);
                bad += bndlog_put(b, step, mb, chunk, kind, x, numel(mb)) != MP_OK;
                *bytes_p += numel(mb) * sizeof(float);
            }
    fill_scalars(v, NSCAL, step);
    bad += bndlog_put_scalars(b, step, v, NSCAL) != MP_OK;
    *bytes_p += NSCAL * sizeof(double);
    return bad;
}

enum { ENTRIES_PER_STEP = MBS * 2 + 2 + 1 };

/* Reads back every entry of step and compares bits; returns the number of failures. */
static int check_step(bndlog_reader_t *r, long step)
{
    int bad = 0;
    float x[2000], y[2000];
    double v[NSCAL], w[NSCAL];
    for (int mb = 0; mb < MBS; mb++)
        for (int chunk = 0; chunk < (mb == 0 ? 2 : 1); chunk++)
            for (int kind = BND_ACT; kind <= BND_GRAD; kind++) {
                fill(x, numel(mb), step, mb, chunk, kind);
                memset(y, 0, sizeof y);
                bad += bndlog_get(r, step, mb, chunk, kind, numel(mb), y) != MP_OK ||
                       memcmp(x, y, numel(mb) * sizeof(float)) != 0;
            }
    fill_scalars(v, NSCAL, step);
    bad += bndlog_get_scalars(r, step, NSCAL, w) != MP_OK || memcmp(v, w, sizeof v) != 0;
    return bad;
}

/* ---- files ---- */

static bndlog_cfg_t cfg_of(const char *dir, int rank, long first, size_t maxq)
{
    return (bndlog_cfg_t){.dir = dir, .run_id = RUN, .rank = rank, .stage = 1, .pp = 4, .first_step = first,
                          .max_queue_bytes = maxq};
}

static const char *log_file(const char *dir, int rank)
{
    static char path[4][1024];
    static int k = 0;
    k = (k + 1) % 4;
    bndlog_path(dir, rank, path[k], sizeof path[k]);
    return path[k];
}

static char *slurp(const char *path, size_t *len_p)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc(len > 0 ? (size_t)len : 1);
    *len_p = fread(buf, 1, (size_t)len, f);
    fclose(f);
    return buf;
}

static int copy_file(const char *from, const char *to)
{
    size_t len;
    char *buf = slurp(from, &len);
    FILE *f = buf ? fopen(to, "wb") : NULL;
    int ok = f && fwrite(buf, 1, len, f) == len;
    if (f) fclose(f);
    free(buf);
    return ok ? 0 : -1;
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* XORs one byte at skip bytes into dataset dname's data (contiguous: H5Dget_offset). */
static int flip_byte(const char *path, const char *dname, size_t skip)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = f >= 0 ? H5Dopen2(f, dname, H5P_DEFAULT) : -1;
    haddr_t off = d >= 0 ? H5Dget_offset(d) : HADDR_UNDEF;
    if (d >= 0) H5Dclose(d);
    if (f >= 0) H5Fclose(f);
    if (off == HADDR_UNDEF) return -1;
    int fd = open(path, O_RDWR);
    unsigned char b;
    int ok = fd >= 0 && pread(fd, &b, 1, (off_t)(off + skip)) == 1;
    b ^= 0x40;
    ok = ok && pwrite(fd, &b, 1, (off_t)(off + skip)) == 1;
    if (fd >= 0) close(fd);
    return ok ? 0 : -1;
}

static int has(const char *needle) { return strstr(errtext, needle) != NULL; }

/* How a refusal names the format after this one's. */
static char fmt_next[64];

/* ---- the cases ---- */

/* Steps 0..2 marked, step 3 put but never marked; checks reading, refusals and the counters. */
static void test_round_trip(const char *dir)
{
    bndlog_t *b = NULL;
    bndlog_cfg_t c = cfg_of(dir, 3, 0, 1 << 20);
    size_t bytes = 0;
    int bad = 0;
    tap_ok(bndlog_open(&c, &b) == MP_OK && file_size(log_file(dir, 3)) > 0, "open: a new log at %s",
           log_file(dir, 3));
    if (!b) return;
    for (long s = 0; s < 4; s++) {
        bad += put_step(b, s, &bytes);
        if (s < 3) bad += bndlog_step_done(b, s) != MP_OK;
    }
    tap_ok(bad == 0, "4 steps x %d entries put, steps 0..2 marked", ENTRIES_PER_STEP);
    capture_begin();
    int r1 = bndlog_step_done(b, 5), r2 = bndlog_put(b, 1, 0, 0, BND_ACT, (const float[1]){0}, 1);
    int r3 = bndlog_prune(b, 4);
    capture_end();
    show_errtext();
    tap_ok(r1 == MP_ERR && r2 == MP_ERR && r3 == MP_ERR && has("step 3 is next") && has("already marked"),
           "step_done out of order, a put for a marked step and a prune past the marks are refused");
    tap_ok(bndlog_sync(b) == MP_OK, "sync: the writer handled everything");
    bndlog_stats_t st;
    bndlog_stats(b, &st);
    tap_ok(st.entries == 4 * ENTRIES_PER_STEP && st.bytes == bytes && st.steps == 3 && st.writer_s > 0,
           "stats: %ld entries (%d expected), %zu bytes (%zu), %ld steps marked, writer %.4f s", st.entries,
           4 * ENTRIES_PER_STEP, st.bytes, bytes, st.steps, st.writer_s);
    tap_ok(bndlog_close(b) == MP_OK, "close");

    bndlog_reader_t *r = NULL;
    bndlog_info_t info = {0};
    int ok = bndlog_read_open(log_file(dir, 3), RUN, 3, &r) == MP_OK;
    if (ok) bndlog_read_info(r, &info);
    tap_ok(ok && info.rank == 3 && info.stage == 1 && info.pp == 4 && info.first_step == 0 && info.last_step == 2 &&
               bndlog_last_step(r) == 2,
           "read_open: rank %d stage %d of %d, complete steps %ld..%ld (0..2: the last marked)", info.rank,
           info.stage, info.pp, info.first_step, info.last_step);
    if (!ok) return;
    bad = 0;
    for (long s = 0; s < 3; s++) bad += check_step(r, s);
    tap_ok(bad == 0, "every tensor and scalar of steps 0..2 read back bitwise (%d failures)", bad);
    float y[1000];
    for (int i = 0; i < 1000; i++) y[i] = 7.0f;
    capture_begin();
    int g1 = bndlog_get(r, 3, 0, 0, BND_ACT, 1000, y);
    int g2 = bndlog_get(r, 1, 7, 0, BND_GRAD, 1000, y);
    int g3 = bndlog_get(r, 1, 0, 0, BND_ACT, 999, y);
    capture_end();
    show_errtext();
    tap_ok(g1 == MP_ERR && has(log_file(dir, 3)) && has("step 3, micro-batch 0, chunk 0, activations: the step is "
                                                        "not complete"),
           "step 3 (put, never marked) is refused as not complete, naming the file");
    tap_ok(g2 == MP_ERR && has("step 1, micro-batch 7, chunk 0, gradients: missing"),
           "a micro-batch never logged is refused as missing");
    tap_ok(g3 == MP_ERR && has("holds 1000 floats") && has("999"), "a read of the wrong length is refused");
    int untouched = 1;
    for (int i = 0; i < 1000; i++) untouched &= y[i] == 7.0f;
    tap_ok(untouched, "the refused reads left the caller's buffer untouched");
    bndlog_read_close(r);
}

/* Reopening this run's log at step 3 keeps steps 0..2 (step 3's unmarked entries are dropped and
 * logged again); then prune at 6 with step 6 in flight. */
static void test_reopen_prune(const char *dir)
{
    bndlog_t *b = NULL;
    bndlog_cfg_t c = cfg_of(dir, 3, 3, 1 << 20);
    size_t bytes = 0;
    int bad = 0;
    tap_ok(bndlog_open(&c, &b) == MP_OK, "reopen this run's log at step 3");
    if (!b) return;
    for (long s = 3; s < 6; s++) bad += put_step(b, s, &bytes) + (bndlog_step_done(b, s) != MP_OK);
    bad += bndlog_sync(b) != MP_OK;
    long before = file_size(log_file(dir, 3));
    bad += put_step(b, 6, &bytes); /* in flight: queued before the prune, marked after it */
    bad += bndlog_prune(b, 6) != MP_OK;
    bad += bndlog_step_done(b, 6) != MP_OK;
    bad += bndlog_close(b) != MP_OK;
    long after = file_size(log_file(dir, 3));
    tap_ok(bad == 0, "steps 3..6 logged and marked, pruned below 6 with step 6 in flight, closed");
    tap_ok(after > 0 && after < before / 3, "the pruned file is smaller: %ld bytes, %ld before", after, before);

    bndlog_reader_t *r = NULL;
    bndlog_info_t info = {0};
    if (!tap_ok(bndlog_read_open(log_file(dir, 3), RUN, 3, &r) == MP_OK, "read_open after the prune")) return;
    bndlog_read_info(r, &info);
    tap_ok(info.first_step == 6 && info.last_step == 6, "complete steps %ld..%ld (6..6 expected)", info.first_step,
           info.last_step);
    tap_ok(check_step(r, 6) == 0, "step 6 (copied into the new file) read back bitwise");
    float y[1000];
    capture_begin();
    int g = 0;
    for (long s = 0; s < 6; s++) g += bndlog_get(r, s, 0, 0, BND_ACT, 1000, y) == MP_ERR;
    capture_end();
    tap_ok(g == 6 && has("step 5, micro-batch 0, chunk 0, activations: pruned (the log starts at step 6)"),
           "steps 0..5 refused as pruned");
    bndlog_read_close(r);
}

/* Before the prune: steps 0..5 readable after the reopen. Separate log (rank 4) so the order of
 * cases does not matter. */
static void test_reopen_keeps(const char *dir)
{
    bndlog_t *b = NULL;
    bndlog_cfg_t c = cfg_of(dir, 4, 0, 1 << 20);
    size_t bytes = 0;
    int bad = bndlog_open(&c, &b) != MP_OK;
    for (long s = 0; s < 3 && !bad; s++) bad += put_step(b, s, &bytes) + (bndlog_step_done(b, s) != MP_OK);
    if (!bad) bad += put_step(b, 3, &bytes) + (bndlog_close(b) != MP_OK); /* step 3 unmarked */
    c.first_step = 3;
    bad += bndlog_open(&c, &b) != MP_OK;
    if (!bad) bad += put_step(b, 3, &bytes) + (bndlog_step_done(b, 3) != MP_OK) + (bndlog_close(b) != MP_OK);
    tap_ok(bad == 0, "a log of steps 0..2 plus an unmarked step 3; reopened at 3, step 3 logged again and marked");
    bndlog_reader_t *r = NULL;
    if (bndlog_read_open(log_file(dir, 4), RUN, 4, &r) != MP_OK) {
        tap_ok(0, "read the reopened log");
        return;
    }
    bad = 0;
    for (long s = 0; s < 4; s++) bad += check_step(r, s);
    tap_ok(bad == 0 && bndlog_last_step(r) == 3, "steps 0..3 all read back bitwise after the reopen (last %ld)",
           bndlog_last_step(r));
    bndlog_read_close(r);
    /* a reopen at a step past the log's end (a gap) starts afresh, saying so */
    c.first_step = 9;
    capture_begin();
    bad = bndlog_open(&c, &b) != MP_OK || bndlog_close(b) != MP_OK;
    capture_end();
    show_errtext();
    bad += bndlog_read_open(log_file(dir, 4), RUN, 4, &r) != MP_OK;
    bndlog_info_t info = {0};
    if (!bad) bndlog_read_info(r, &info);
    if (!bad) bndlog_read_close(r);
    tap_ok(!bad && info.first_step == 9 && info.last_step == 8 && has("steps 0..3 of stage 1 of 4 dropped"),
           "a reopen at step 9 (steps 4..8 never logged) starts an empty log at 9, with a warning");
}

/* Another run id, rank or format: refused by the reader and by open, naming the file and the key. */
static void test_foreign(const char *dir)
{
    const char *path = log_file(dir, 3);
    bndlog_reader_t *r = NULL;
    capture_begin();
    int r1 = bndlog_read_open(path, "ffffffffffffffffffffffffffffffff", 3, &r);
    capture_end();
    show_errtext();
    tap_ok(r1 == MP_ERR && has(path) && has("run_id is 0123456789abcdef0123456789abcdef"),
           "read_open with another run id: refused naming the file and run_id");
    capture_begin();
    int r2 = bndlog_read_open(path, RUN, 5, &r);
    capture_end();
    tap_ok(r2 == MP_ERR && has(path) && has("rank is 3, expected 5"), "read_open expecting another rank: refused");

    size_t len0 = 0, len1 = 0;
    char *before = slurp(path, &len0);
    bndlog_cfg_t c = cfg_of(dir, 3, 7, 1 << 20);
    c.run_id = "ffffffffffffffffffffffffffffffff";
    bndlog_t *b = NULL;
    capture_begin();
    int r3 = bndlog_open(&c, &b);
    capture_end();
    show_errtext();
    char *after = slurp(path, &len1);
    tap_ok(r3 == MP_ERR && has(path) && has("run_id") && len0 == len1 && before && after &&
               memcmp(before, after, len0) == 0,
           "open for writing by another run: refused naming the file and run_id, the file untouched");
    free(before);
    free(after);

    /* another format version, written into a copy */
    char *other = strdup(tpath("format2.h5"));
    int ok = copy_file(path, other) == 0;
    hid_t f = ok ? H5Fopen(other, H5F_ACC_RDWR, H5P_DEFAULT) : -1;
    hid_t a = f >= 0 ? H5Aopen(f, "bndlog_format", H5P_DEFAULT) : -1;
    int two = BNDLOG_FORMAT + 1;
    ok = a >= 0 && H5Awrite(a, H5T_NATIVE_INT, &two) >= 0;
    if (a >= 0) H5Aclose(a);
    if (f >= 0) H5Fclose(f);
    capture_begin();
    int r4 = ok ? bndlog_read_open(other, RUN, 3, &r) : MP_OK;
    capture_end();
    show_errtext();
    tap_ok(r4 == MP_ERR && has(other) && has(fmt_next), "another format version: refused naming the key");
    free(other);

    /* the identity's attributes through h5util.h's readers: one missing, a number for run_id */
    static const struct {
        const char *file, *attr, *want;
        int as_int;
    } cases[] = {
        {"norank.h5", "rank", "no attribute rank: not a boundary log", 0},
        {"norunid.h5", "run_id", "no attribute run_id: not a boundary log", 0},
        {"intrunid.h5", "run_id", "attribute run_id is not a string", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        other = strdup(tpath(cases[i].file));
        ok = copy_file(path, other) == 0;
        f = ok ? H5Fopen(other, H5F_ACC_RDWR, H5P_DEFAULT) : -1;
        ok = f >= 0 && H5Adelete(f, cases[i].attr) >= 0;
        if (ok && cases[i].as_int) {
            hid_t s = H5Screate(H5S_SCALAR);
            a = H5Acreate2(f, cases[i].attr, H5T_STD_I32LE, s, H5P_DEFAULT, H5P_DEFAULT);
            ok = a >= 0 && H5Awrite(a, H5T_NATIVE_INT, &two) >= 0;
            if (a >= 0) H5Aclose(a);
            H5Sclose(s);
        }
        if (f >= 0) H5Fclose(f);
        capture_begin();
        int r5 = ok ? bndlog_read_open(other, RUN, 3, &r) : MP_OK;
        capture_end();
        show_errtext();
        tap_ok(r5 == MP_ERR && has(other) && has(cases[i].want), "%s %s: refused naming the file and the attribute",
               cases[i].attr, cases[i].as_int ? "an integer" : "missing");
        free(other);
    }
}

/* A torn log of this rank (a kill inside its flush) in the way of a resume's open: moved aside to
 * NAME.damaged with its bytes as they were (NAME.damaged.2 the next time: never over the first),
 * and a new log starts at the resume step. A whole log of another format is still refused and left
 * where it is. */
static void test_open_damaged(const char *dir)
{
    const char *path = strdup(log_file(dir, 2));
    char aside[1200], aside2[1200];
    snprintf(aside, sizeof aside, "%s.damaged", path);
    snprintf(aside2, sizeof aside2, "%s.damaged.2", path);
    bndlog_t *b = NULL;
    bndlog_cfg_t c = cfg_of(dir, 2, 0, 1 << 20);
    size_t bytes = 0;
    int bad = bndlog_open(&c, &b) != MP_OK;
    for (long s = 0; !bad && s < 2; s++) bad += put_step(b, s, &bytes) + (bndlog_step_done(b, s) != MP_OK);
    bad += !b || bndlog_close(b) != MP_OK;
    bad += truncate(path, file_size(path) / 2) != 0;
    size_t len0 = 0, len1 = 0;
    char *torn = slurp(path, &len0);
    tap_ok(bad == 0 && torn, "a log of steps 0..1 written, then cut to half its size (%zu bytes)", len0);

    c.first_step = 2;
    b = NULL;
    capture_begin();
    int r1 = bndlog_open(&c, &b);
    capture_end();
    show_errtext();
    char *kept = slurp(aside, &len1);
    tap_ok(r1 == MP_OK && has(path) && has(aside) && has("logs anew") && kept && len1 == len0 &&
               memcmp(torn, kept, len0) == 0,
           "open at step 2 over it: it goes to NAME.damaged byte for byte, the warning names both");
    free(torn);
    free(kept);
    bad = !b || put_step(b, 2, &bytes) != 0 || bndlog_step_done(b, 2) != MP_OK || bndlog_close(b) != MP_OK;
    bndlog_reader_t *r = NULL;
    bndlog_info_t info = {0};
    int ok = !bad && bndlog_read_open(path, RUN, 2, &r) == MP_OK;
    if (ok) bndlog_read_info(r, &info);
    ok = ok && info.first_step == 2 && info.last_step == 2 && check_step(r, 2) == 0;
    if (r) bndlog_read_close(r);
    tap_ok(ok, "the new log starts at step 2 and reads step 2 back bitwise (first %ld, last %ld)", info.first_step,
           info.last_step);

    b = NULL;
    int cut = truncate(path, 100);
    capture_begin();
    int r2 = cut == 0 ? bndlog_open(&c, &b) : MP_ERR;
    capture_end();
    if (b) bndlog_close(b);
    kept = slurp(aside, &len1);
    tap_ok(r2 == MP_OK && has(aside2) && file_size(aside2) == 100 && kept && len1 == len0,
           "torn again: to NAME.damaged.2, the first NAME.damaged untouched");
    free(kept);

    /* a whole log of another format: not damaged, refused, left in place */
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t a = f >= 0 ? H5Aopen(f, "bndlog_format", H5P_DEFAULT) : -1;
    int other = BNDLOG_FORMAT + 1;
    ok = a >= 0 && H5Awrite(a, H5T_NATIVE_INT, &other) >= 0;
    if (a >= 0) H5Aclose(a);
    if (f >= 0) H5Fclose(f);
    char *before = slurp(path, &len0);
    b = NULL;
    capture_begin();
    int r3 = ok ? bndlog_open(&c, &b) : MP_OK;
    capture_end();
    show_errtext();
    char *after = slurp(path, &len1);
    struct stat st;
    tap_ok(r3 == MP_ERR && has(fmt_next) && !has("logs anew") && before && after && len0 == len1 &&
               memcmp(before, after, len0) == 0 && lstat(aside2, &st) == 0 && file_size(aside2) == 100,
           "another format's log: refused naming the key, left in place, nothing moved aside");
    free(before);
    free(after);
    free((char *)path);
}

/* A byte flipped inside a tensor's and inside the scalars' data is caught by the checksum. */
static void test_flip(const char *dir)
{
    bndlog_t *b = NULL;
    bndlog_cfg_t c = cfg_of(dir, 0, 0, 1 << 20);
    size_t bytes = 0;
    int bad = bndlog_open(&c, &b) != MP_OK;
    for (long s = 0; s < 2 && !bad; s++) bad += put_step(b, s, &bytes) + (bndlog_step_done(b, s) != MP_OK);
    if (b) bad += bndlog_close(b) != MP_OK;
    char *flipped = strdup(tpath("flipped.h5"));
    bad += copy_file(log_file(dir, 0), flipped) != 0;
    bad += flip_byte(flipped, "step_00000001/act_mb1_c0", 4 * 300 + 2) != 0;
    bad += flip_byte(flipped, "step_00000001/scalars", 9) != 0;
    tap_ok(bad == 0, "a 2-step log written and copied; a byte flipped in step 1's activations of micro-batch 1 "
                     "and in its scalars");
    bndlog_reader_t *r = NULL;
    if (bndlog_read_open(flipped, RUN, 0, &r) != MP_OK) {
        tap_ok(0, "the flipped copy opens (its metadata is intact)");
        free(flipped);
        return;
    }
    float y[1017];
    double v[NSCAL] = {1, 2, 3};
    for (int i = 0; i < 1017; i++) y[i] = -1.0f;
    capture_begin();
    int g1 = bndlog_get(r, 1, 1, 0, BND_ACT, numel(1), y);
    int g2 = bndlog_get_scalars(r, 1, NSCAL, v);
    capture_end();
    show_errtext();
    int untouched = v[0] == 1 && v[1] == 2 && v[2] == 3;
    for (int i = 0; i < 1017; i++) untouched &= y[i] == -1.0f;
    tap_ok(g1 == MP_ERR && has(flipped) && has("step 1, micro-batch 1, chunk 0, activations: checksum mismatch"),
           "the flipped tensor is refused by its checksum, naming file, step, micro-batch, chunk and kind");
    tap_ok(g2 == MP_ERR && has("step 1, scalars: checksum mismatch"), "the flipped scalars are refused too");
    tap_ok(untouched, "the caller's buffers are untouched");
    float x[1017];
    fill(x, numel(1), 1, 1, 0, BND_GRAD);
    tap_ok(bndlog_get(r, 1, 1, 0, BND_GRAD, numel(1), y) == MP_OK && memcmp(x, y, numel(1) * sizeof(float)) == 0 &&
               check_step(r, 0) == 0,
           "the other entries still read back bitwise");
    bndlog_read_close(r);
    free(flipped);
}

/* Writes a dataset named name in group g: n values of type t (ndims 1, or 2 as n x 1) from buf,
 * with a uint64 checksum attribute when sum is non-NULL. 0 on success. */
static int dataset_plant(hid_t g, const char *name, hid_t t, int ndims, hsize_t n, const void *buf,
                         const uint64_t *sum)
{
    hsize_t dims[2] = {n, 1};
    hid_t sp = H5Screate_simple(ndims, dims, NULL);
    hid_t d = sp >= 0 ? H5Dcreate2(g, name, t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT) : -1;
    int ok = d >= 0 && H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0;
    if (ok && sum) ok = h5_attr_write(d, "checksum", H5T_STD_U64LE, H5T_NATIVE_UINT64, sum, "plant") == MP_OK;
    if (d >= 0) H5Dclose(d);
    if (sp >= 0) H5Sclose(sp);
    return ok ? 0 : -1;
}

/* Forgery k of step 1's activations of micro-batch 1 (ACT11) in file f (other: rank 1's log of the
 * same steps and values); 0 on success. */
#define ACT11 "step_00000001/act_mb1_c0"
static int forge(hid_t f, hid_t other, int k)
{
    static int32_t ints[1017];
    static float fl[1017];
    const uint64_t sum = 1;
    hid_t g = H5Gopen2(f, "step_00000001", H5P_DEFAULT);
    int ok = g >= 0;
    if (ok && k != 6 && k != 7) ok = H5Ldelete(f, ACT11, H5P_DEFAULT) >= 0;
    switch (k) {
    case 0: ok = ok && H5Ocopy(f, "step_00000000/act_mb1_c0", f, ACT11, H5P_DEFAULT, H5P_DEFAULT) >= 0; break;
    case 1: ok = ok && H5Ocopy(f, "step_00000001/grad_mb1_c0", f, ACT11, H5P_DEFAULT, H5P_DEFAULT) >= 0; break;
    case 2: ok = ok && H5Ocopy(other, ACT11, f, ACT11, H5P_DEFAULT, H5P_DEFAULT) >= 0; break;
    case 3: ok = ok && dataset_plant(g, "act_mb1_c0", H5T_NATIVE_INT32, 1, 1017, ints, &sum) == 0; break;
    case 4: ok = ok && dataset_plant(g, "act_mb1_c0", H5T_NATIVE_FLOAT, 2, 1017, fl, &sum) == 0; break;
    case 5: ok = ok && dataset_plant(g, "act_mb1_c0", H5T_NATIVE_FLOAT, 1, 500, fl, &sum) == 0; break;
    case 6: ok = ok && H5Adelete_by_name(f, ACT11, "checksum", H5P_DEFAULT) >= 0; break;
    case 7: {
        hid_t d = ok ? H5Dopen2(f, ACT11, H5P_DEFAULT) : -1;
        ok = d >= 0 && H5Adelete(d, "checksum") >= 0 && h5_attr_write_string(d, "checksum", "0123", "plant") == MP_OK;
        if (d >= 0) H5Dclose(d);
        break;
    }
    }
    if (g >= 0) H5Gclose(g);
    return ok ? 0 : -1;
}

/* Entries forged inside a log whose file and metadata are sound: step 0's tensor moved under step
 * 1's name, step 1's gradients under its activations' name, rank 1's entry of the same step (the
 * same values: only the rank differs) copied in, integers, a 2-D dataset, 500 floats where 1017
 * were written, no checksum, a string as the checksum. Each valid before format 3 would have passed
 * its checksum where it carried one; each is refused naming the file, the entry and what is wrong,
 * the caller's buffer untouched, the log's other entries still read. */
static void test_forged(const char *dir)
{
    static const char *const what[8] = {
        "step 0's activations moved under step 1's name", "step 1's gradients under its activations' name",
        "rank 1's entry of the same step and values copied in", "1017 integers", "a 1017 x 1 dataset",
        "500 floats (a short entry)", "no checksum attribute", "a string as the checksum"};
    static const char *const want[8] = {
        "checksum mismatch", "checksum mismatch", "checksum mismatch", "holds 1017 integers of 4 bytes",
        "in 2 dimension(s)", "holds 500 floats of 4 bytes in 1 dimension(s), 1017 floats", "no checksum",
        "checksum"};
    bndlog_t *b = NULL;
    bndlog_cfg_t c = cfg_of(dir, 1, 0, 1 << 20);
    size_t bytes = 0;
    int bad = bndlog_open(&c, &b) != MP_OK;
    for (long s = 0; s < 2 && !bad; s++) bad += put_step(b, s, &bytes) + (bndlog_step_done(b, s) != MP_OK);
    if (b) bad += bndlog_close(b) != MP_OK;
    hid_t other = bad ? -1 : H5Fopen(log_file(dir, 1), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (!tap_ok(!bad && other >= 0, "rank 1's log of the same 2 steps written (the source of a copied entry)")) return;
    for (int k = 0; k < 8; k++) {
        char *forged = strdup(tpath("forged.h5"));
        int ok = copy_file(log_file(dir, 0), forged) == 0;
        hid_t f = ok ? H5Fopen(forged, H5F_ACC_RDWR, H5P_DEFAULT) : -1;
        ok = f >= 0 && forge(f, other, k) == 0;
        if (f >= 0) ok &= H5Fclose(f) >= 0;
        bndlog_reader_t *r = NULL;
        float y[1017];
        for (int i = 0; i < 1017; i++) y[i] = -1.0f;
        capture_begin();
        int ro = ok ? bndlog_read_open(forged, RUN, 0, &r) : MP_ERR;
        int g = ro == MP_OK ? bndlog_get(r, 1, 1, 0, BND_ACT, numel(1), y) : MP_OK;
        capture_end();
        if (k == 0 || k == 3 || k == 7) show_errtext();
        int untouched = 1;
        for (int i = 0; i < 1017; i++) untouched &= y[i] == -1.0f;
        const int rest = ro == MP_OK && check_step(r, 0) == 0;
        tap_ok(ok && g == MP_ERR && has(forged) && has("step 1, micro-batch 1, chunk 0, activations") &&
                   has(want[k]) && untouched && rest,
               "a forged entry, %s: refused naming the file, the entry and '%s'; buffer untouched, step 0 "
               "still read", what[k], want[k]);
        if (r) bndlog_read_close(r);
        unlink(forged);
        free(forged);
    }
    H5Fclose(other);
}

/* Truncated copies (empty, inside the superblock, halfway, one byte short) are refused cleanly. */
static void test_truncated(const char *dir)
{
    const char *path = log_file(dir, 0);
    long len = file_size(path);
    long cuts[4] = {0, 100, len / 2, len - 1};
    int refused = 0;
    for (int i = 0; i < 4; i++) {
        const char *t = tpath("truncated.h5");
        bndlog_reader_t *r = NULL;
        if (copy_file(path, t) != 0 || truncate(t, cuts[i]) != 0) continue;
        capture_begin();
        int rc = bndlog_read_open(t, RUN, 0, &r);
        capture_end();
        if (i == 2) show_errtext();
        if (rc == MP_OK) bndlog_read_close(r);
        refused += rc == MP_ERR && has(t);
        unlink(t);
    }
    tap_ok(refused == 4, "truncated to 0, 100, %ld and %ld of %ld bytes: %d of 4 refused naming the file, no crash",
           len / 2, len - 1, len, refused);
}

/* Puts while paused return at once, past the queue's bound; the writer stays out of HDF5 while the
 * main thread uses HDF5 itself; after resume everything is written. */
static void test_pause(const char *dir)
{
    enum { N = 40, LEN = 1024 };
    bndlog_t *b = NULL;
    bndlog_cfg_t c = cfg_of(dir, 1, 0, 16 * LEN);
    if (!tap_ok(bndlog_open(&c, &b) == MP_OK, "open a log with a 16 KiB queue")) return;
    float x[LEN];
    int bad = 0;
    bndlog_pause(b);
    for (int mb = 0; mb < N; mb++) {
        fill(x, LEN, 0, mb, 0, BND_ACT);
        bad += bndlog_put(b, 0, mb, 0, BND_ACT, x, LEN) != MP_OK;
    }
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    bndlog_stats_t st;
    bndlog_stats(b, &st);
    tap_ok(bad == 0 && st.queue_peak == (size_t)N * LEN * sizeof(float) && st.entries == 0,
           "paused: %d puts of 4 KiB returned (queue %zu bytes, past its 16 KiB bound), none written after 50 ms", N,
           st.queue_peak);
    /* the thread rule's use: the main thread's own HDF5 work while paused */
    hid_t f = H5Fcreate(tpath("mine.h5"), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dim = LEN;
    hid_t s = H5Screate_simple(1, &dim, NULL);
    hid_t d = H5Dcreate2(f, "x", H5T_IEEE_F32LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int mine = d >= 0 && H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) >= 0;
    H5Dclose(d);
    H5Sclose(s);
    mine = H5Fclose(f) >= 0 && mine;
    capture_begin();
    int sync_paused = bndlog_sync(b);
    capture_end();
    tap_ok(mine && sync_paused == MP_ERR && has("while paused"),
           "the main thread wrote its own HDF5 file while paused; sync while paused is refused, not a hang");
    bndlog_resume(b);
    bad = bndlog_step_done(b, 0) != MP_OK || bndlog_sync(b) != MP_OK;
    bndlog_stats(b, &st);
    tap_ok(!bad && st.entries == N && st.steps == 1, "resumed: all %ld entries written, step 0 marked", st.entries);
    /* pause while the writer is busy: it returns once the writer is out of HDF5 */
    for (int mb = 0; mb < N; mb++) bad += bndlog_put(b, 1, mb, 0, BND_GRAD, x, LEN) != MP_OK;
    bndlog_pause(b);
    nanosleep(&ts, NULL); /* the entry whose HDF5 work just ended may still be counted */
    bndlog_stats(b, &st);
    long held = st.entries;
    nanosleep(&ts, NULL);
    bndlog_stats(b, &st);
    bndlog_resume(b);
    tap_ok(!bad && st.entries == held, "a pause taken while the writer works holds it (%ld entries written before "
                                       "and after 50 ms)", held);
    tap_ok(bndlog_close(b) == MP_OK, "close drains the queue");
    bndlog_reader_t *r = NULL;
    bad = bndlog_read_open(log_file(dir, 1), RUN, 1, &r) != MP_OK;
    float y[LEN];
    for (int mb = 0; mb < N && !bad; mb++) {
        fill(x, LEN, 0, mb, 0, BND_ACT);
        bad += bndlog_get(r, 0, mb, 0, BND_ACT, LEN, y) != MP_OK || memcmp(x, y, sizeof x) != 0;
    }
    if (r) bndlog_read_close(r);
    tap_ok(!bad, "the %d entries put while paused read back bitwise", N);
}

/* A queue that holds two tensors: puts wait for the writer and nothing is lost. */
static void test_full_queue(const char *dir)
{
    enum { STEPS = 8, MB = 4, LEN = 2048 };
    bndlog_t *b = NULL;
    const size_t maxq = 2 * LEN * sizeof(float);
    bndlog_cfg_t c = cfg_of(dir, 2, 0, maxq);
    if (!tap_ok(bndlog_open(&c, &b) == MP_OK, "open a log with a queue of two tensors")) return;
    float x[LEN], y[LEN];
    int bad = 0;
    for (long s = 0; s < STEPS; s++) {
        for (int mb = 0; mb < MB; mb++)
            for (int kind = BND_ACT; kind <= BND_GRAD; kind++) {
                fill(x, LEN, s, mb, 0, kind);
                bad += bndlog_put(b, s, mb, 0, kind, x, LEN) != MP_OK;
            }
        bad += bndlog_step_done(b, s) != MP_OK;
    }
    bndlog_stats_t st;
    bad += bndlog_sync(b) != MP_OK;
    bndlog_stats(b, &st);
    bad += bndlog_close(b) != MP_OK;
    tap_ok(!bad && st.put_waits > 0 && st.put_wait_s > 0 && st.queue_peak <= maxq,
           "%d puts: %ld waited %.4f s in all, the queue peaked at %zu of %zu bytes", STEPS * MB * 2, st.put_waits,
           st.put_wait_s, st.queue_peak, maxq);
    bndlog_reader_t *r = NULL;
    bad = bndlog_read_open(log_file(dir, 2), RUN, 2, &r) != MP_OK;
    for (long s = 0; s < STEPS && !bad; s++)
        for (int mb = 0; mb < MB; mb++)
            for (int kind = BND_ACT; kind <= BND_GRAD; kind++) {
                fill(x, LEN, s, mb, 0, kind);
                bad += bndlog_get(r, s, mb, 0, kind, LEN, y) != MP_OK || memcmp(x, y, sizeof x) != 0;
            }
    tap_ok(!bad && st.entries == STEPS * MB * 2 && bndlog_last_step(r) == STEPS - 1,
           "all %ld entries written and read back bitwise, last step %ld", st.entries, r ? bndlog_last_step(r) : -1);
    if (r) bndlog_read_close(r);
}

/* Write errors: a file size limit (EFBIG, as a full disk's ENOSPC), a directory where the prune's
 * temporary goes, a run directory that is a regular file. chmod would not do: the tests may run as
 * root. */
static void test_write_errors(const char *dir_limit, const char *dir_prune)
{
    bndlog_t *b = NULL;
    bndlog_cfg_t c = cfg_of(dir_limit, 0, 0, 1 << 20);
    size_t bytes = 0;
    int bad = bndlog_open(&c, &b) != MP_OK;
    if (!bad) bad += put_step(b, 0, &bytes) + (bndlog_step_done(b, 0) != MP_OK) + (bndlog_sync(b) != MP_OK);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = (rlim_t)file_size(log_file(dir_limit, 0)) + 65536;
    signal(SIGXFSZ, SIG_IGN);
    static float big[1 << 16];
    fill(big, 1 << 16, 1, 0, 0, BND_ACT);
    capture_begin();
    bad += setrlimit(RLIMIT_FSIZE, &lim) != 0;
    int p1 = bad ? MP_ERR : bndlog_put(b, 1, 0, 0, BND_ACT, big, 1 << 16);
    if (!bad) bndlog_step_done(b, 1); /* MP_OK or MP_ERR: the writer may have failed already */
    int s1 = bad ? MP_OK : bndlog_sync(b);
    int p2 = bad ? MP_OK : bndlog_put(b, 2, 0, 0, BND_ACT, big, 16);
    /* A limit still in force at close makes libhdf5 1.10 crash at exit whatever we do (its closing
     * truncate fails on any file, and a failed close leaves a broken identifier): lifted here, as a
     * full disk's ENOSPC does not reach the memory file bndlog closes a failed log through. */
    setrlimit(RLIMIT_FSIZE, &old);
    size_t len0 = 0, len1 = 0;
    char *before = slurp(log_file(dir_limit, 0), &len0);
    int c1 = b ? bndlog_close(b) : MP_OK;
    char *after = slurp(log_file(dir_limit, 0), &len1);
    capture_end();
    show_errtext();
    tap_ok(!bad && p1 == MP_OK && s1 == MP_ERR && p2 == MP_ERR && c1 == MP_ERR && has(log_file(dir_limit, 0)) &&
               has("writing step 1, micro-batch 0, chunk 0, activations failed") && has("File too large"),
           "a 256 KiB tensor past a 64 KiB file size limit: the writer's failure (naming the file, the entry and "
           "the error) is returned by sync, the next put and close");
    tap_ok(before && after && len0 == len1 && memcmp(before, after, len0) == 0,
           "closing the failed log wrote nothing to it (%zu bytes before and after)", len1);
    free(before);
    free(after);
    bndlog_reader_t *r = NULL;
    capture_begin();
    int ro = bndlog_read_open(log_file(dir_limit, 0), RUN, 0, &r);
    capture_end();
    show_errtext();
    tap_ok(ro == MP_OK && bndlog_last_step(r) == 0 && check_step(r, 0) == 0,
           "after the failure the log still opens: step 0 (marked before) reads back bitwise, step 1 is not marked");
    if (ro == MP_OK) bndlog_read_close(r);

    c = cfg_of(dir_prune, 0, 0, 1 << 20);
    bad = bndlog_open(&c, &b) != MP_OK;
    if (!bad) bad += put_step(b, 0, &bytes) + (bndlog_step_done(b, 0) != MP_OK) + (bndlog_sync(b) != MP_OK);
    char tmp[1100], inner[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp", log_file(dir_prune, 0));
    snprintf(inner, sizeof inner, "%s/keep", tmp);
    bad += mkdir(tmp, 0700) != 0 || copy_file(log_file(dir_prune, 0), inner) != 0;
    capture_begin();
    int pr = bad ? MP_ERR : bndlog_prune(b, 1);
    int s2 = bad ? MP_OK : bndlog_sync(b);
    int c2 = b ? bndlog_close(b) : MP_OK;
    capture_end();
    show_errtext();
    tap_ok(!bad && pr == MP_OK && s2 == MP_ERR && c2 == MP_ERR && has(tmp) && has("pruning the steps below 1 failed"),
           "a directory in the way of the prune's temporary: the failure is returned by sync and close, naming it");
    r = NULL;
    ro = bndlog_read_open(log_file(dir_prune, 0), RUN, 0, &r);
    tap_ok(ro == MP_OK && bndlog_last_step(r) == 0 && check_step(r, 0) == 0,
           "the log before the failed prune is intact: step 0 reads back bitwise");
    if (ro == MP_OK) bndlog_read_close(r);

    const char *plain = tpath("plainfile");
    FILE *pf = fopen(plain, "w");
    if (pf) fclose(pf);
    c = cfg_of(plain, 0, 0, 1 << 20);
    capture_begin();
    int o = bndlog_open(&c, &b);
    capture_end();
    show_errtext();
    tap_ok(o == MP_ERR && has("plainfile/bndlog") && has("Not a directory"),
           "a run directory that is a regular file: open refused naming the path");
}

/* An entry logged twice fails the writer: the failure is returned, and closing the failed log
 * writes nothing more to it (the file stays as the failure left it, its marked steps readable). */
static void test_duplicate(const char *dir)
{
    bndlog_t *b = NULL;
    bndlog_cfg_t c = cfg_of(dir, 0, 0, 1 << 20);
    size_t bytes = 0;
    int bad = bndlog_open(&c, &b) != MP_OK;
    if (bad) {
        tap_ok(0, "open a log for the duplicate entry");
        return;
    }
    bad += put_step(b, 0, &bytes) + (bndlog_step_done(b, 0) != MP_OK);
    bad += put_step(b, 1, &bytes);
    float x[1000];
    fill(x, 1000, 1, 0, 0, BND_ACT);
    capture_begin();
    bad += bndlog_put(b, 1, 0, 0, BND_ACT, x, 1000) != MP_OK; /* queued: only the writer can tell */
    int s1 = bndlog_sync(b);
    size_t len0 = 0, len1 = 0;
    char *before = slurp(log_file(dir, 0), &len0);
    int c1 = bndlog_close(b);
    char *after = slurp(log_file(dir, 0), &len1);
    capture_end();
    show_errtext();
    tap_ok(!bad && s1 == MP_ERR && c1 == MP_ERR && has("step 1, micro-batch 0, chunk 0, activations logged twice"),
           "an entry logged twice: the writer's failure is returned by sync and close");
    tap_ok(before && after && len0 == len1 && memcmp(before, after, len0) == 0,
           "closing the failed log wrote nothing to it (%zu bytes before and after)", len1);
    free(before);
    free(after);
    bndlog_reader_t *r = NULL;
    int ro = bndlog_read_open(log_file(dir, 0), RUN, 0, &r);
    tap_ok(ro == MP_OK && bndlog_last_step(r) == 0 && check_step(r, 0) == 0,
           "the failed log opens: step 0 (marked before the failure) reads back bitwise");
    if (ro == MP_OK) bndlog_read_close(r);
}

/* A child writes steps 0..2, puts step 3 and is killed (SIGKILL) before or while the writer writes
 * it: every marked step reads back bitwise, step 3 is not complete. */
static void test_killed(const char *dir, int rank, unsigned delay_us)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        bndlog_t *b = NULL;
        bndlog_cfg_t c = cfg_of(dir, rank, 0, 1 << 20);
        size_t bytes = 0;
        if (bndlog_open(&c, &b) != MP_OK) _exit(3);
        for (long s = 0; s < 3; s++)
            if (put_step(b, s, &bytes) || bndlog_step_done(b, s) != MP_OK) _exit(3);
        if (bndlog_sync(b) != MP_OK) _exit(3);
        put_step(b, 3, &bytes);
        if (delay_us == 0) bndlog_sync(b);
        else usleep(delay_us);
        raise(SIGKILL);
        _exit(4);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    int killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    bndlog_reader_t *r = NULL;
    int bad = !killed || bndlog_read_open(log_file(dir, rank), RUN, rank, &r) != MP_OK;
    long last = bad ? -9 : bndlog_last_step(r);
    for (long s = 0; s < 3 && !bad; s++) bad += check_step(r, s);
    float y[1000];
    capture_begin();
    int g = r ? bndlog_get(r, 3, 0, 0, BND_ACT, 1000, y) : MP_OK;
    capture_end();
    if (r) bndlog_read_close(r);
    tap_ok(!bad && last == 2 && g == MP_ERR && has("not complete"),
           "writer killed %s: the log opens, steps 0..2 read back bitwise, step 3 not complete (last %ld)",
           delay_us ? "while writing step 3" : "after writing step 3 unmarked", last);
}

/* bndlog_put_rows: a 300 x 7 gradient with 4 rows not +0.0 (one only by a −0.0) comes back bitwise
 * from 1 + 4·8 floats; beside it a head input (BND_HEAD); a rows entry forged through bndlog_put
 * (ids out of order) or read with another width is refused, the buffer untouched. */
static void test_rows(const char *dir)
{
    enum { ROWS = 300, W = 7 };
    static float g[ROWS * W], y[ROWS * W], h[64], hy[64];
    const int nz[4] = {3, 17, 50, 299};
    for (int j = 0; j < 4; j++) fill(g + nz[j] * W, W, 1, j, 0, BND_TIED);
    for (int i = 0; i < W; i++) g[50 * W + i] = 0.0f;
    g[50 * W + 4] = -0.0f;
    fill(h, 64, 1, 0, 1, BND_HEAD);
    const float forged[1 + 2 * (W + 1)] = {2.0f, 9.0f, 4.0f}; /* ids 9 then 4: not increasing */
    bndlog_t *b = NULL;
    bndlog_cfg_t c = cfg_of(dir, 0, 0, 1 << 20);
    int bad = bndlog_open(&c, &b) != MP_OK;
    if (!b) return;
    bad += bndlog_put_rows(b, 0, 0, 0, BND_TIED, g, ROWS, W) != MP_OK;
    bad += bndlog_put(b, 0, 0, 1, BND_HEAD, h, 64) != MP_OK;
    bad += bndlog_step_done(b, 0) != MP_OK;
    bad += bndlog_put(b, 1, 0, 0, BND_TIED, forged, 1 + 2 * (W + 1)) != MP_OK;
    bad += bndlog_step_done(b, 1) != MP_OK;
    bad += bndlog_sync(b) != MP_OK;
    bndlog_stats_t st;
    bndlog_stats(b, &st);
    bad += bndlog_close(b) != MP_OK;
    tap_ok(bad == 0 && st.bytes == (1 + 4 * (W + 1) + 64 + 1 + 2 * (W + 1)) * sizeof(float),
           "rows: a %d x %d gradient with 4 rows not +0.0 logged as %zu bytes with a head input and a forged "
           "entry", ROWS, W, st.bytes);
    double sb = -1, sc = -1, sp = -1;
    hid_t f = H5Fopen(log_file(dir, 0), H5F_ACC_RDONLY, H5P_DEFAULT);
    const char *an[3] = {"stats_bytes", "stats_writer_cpu_s", "stats_put_s"};
    double *av[3] = {&sb, &sc, &sp};
    for (int i = 0; i < 3 && f >= 0; i++) {
        hid_t a = H5Aopen(f, an[i], H5P_DEFAULT);
        if (a >= 0 && H5Aread(a, H5T_NATIVE_DOUBLE, av[i]) < 0) *av[i] = -1;
        if (a >= 0) H5Aclose(a);
    }
    if (f >= 0) H5Fclose(f);
    tap_ok(sb == (double)st.bytes && sc > 0 && sp > 0,
           "close records the counters: stats_bytes %.0f, stats_writer_cpu_s %.6f, stats_put_s %.6f", sb, sc, sp);
    bndlog_reader_t *r = NULL;
    if (bndlog_read_open(log_file(dir, 0), RUN, 0, &r) != MP_OK) {
        tap_ok(0, "rows: read_open");
        return;
    }
    for (int i = 0; i < ROWS * W; i++) y[i] = 5.0f;
    int g1 = bndlog_get_rows(r, 0, 0, 0, BND_TIED, ROWS, W, y);
    int g2 = bndlog_get(r, 0, 0, 1, BND_HEAD, 64, hy);
    tap_ok(g1 == MP_OK && memcmp(g, y, sizeof g) == 0 && g2 == MP_OK && memcmp(h, hy, sizeof h) == 0,
           "rows: read back bitwise (the −0.0 row and every +0.0 row too), the head input too");
    for (int i = 0; i < ROWS * W; i++) y[i] = 5.0f;
    capture_begin();
    int g3 = bndlog_get_rows(r, 1, 0, 0, BND_TIED, ROWS, W, y);
    int g4 = bndlog_get_rows(r, 0, 0, 0, BND_TIED, ROWS, W + 1, y);
    int g5 = bndlog_get_rows(r, 0, 0, 0, BND_TIED, 10, W, y);
    capture_end();
    show_errtext();
    int untouched = 1;
    for (int i = 0; i < ROWS * W; i++) untouched &= y[i] == 5.0f;
    tap_ok(g3 == MP_ERR && g4 == MP_ERR && g5 == MP_ERR && untouched && has("are no rows of width") &&
               has(log_file(dir, 0)),
           "rows: ids out of order, another width and fewer rows than logged are refused naming the file; buffer "
           "untouched");
    bndlog_read_close(r);
}

/* A rank whose state comes from a checkpoint or a replica (cfg.fresh): its old log, whole or torn,
 * goes to NAME.old unopened and byte for byte, nothing said (a routine resume), over an earlier
 * NAME.old; the new log starts at the resume step; a directory in its place is still refused. */
static void test_open_fresh(const char *dir)
{
    const char *path = strdup(log_file(dir, 1));
    char old[1200];
    snprintf(old, sizeof old, "%s.old", path);
    bndlog_t *b = NULL;
    bndlog_cfg_t c = cfg_of(dir, 1, 0, 1 << 20);
    size_t bytes = 0, len0 = 0, len1 = 0;
    int bad = bndlog_open(&c, &b) != MP_OK;
    for (long s = 0; !bad && s < 2; s++) bad += put_step(b, s, &bytes) + (bndlog_step_done(b, s) != MP_OK);
    bad += !b || bndlog_close(b) != MP_OK;
    char *whole = slurp(path, &len0);
    c.first_step = 1, c.fresh = 1;
    b = NULL;
    capture_begin();
    int r1 = bad ? MP_ERR : bndlog_open(&c, &b);
    capture_end();
    show_errtext();
    char *moved = slurp(old, &len1);
    bad = !b || put_step(b, 1, &bytes) != 0 || bndlog_step_done(b, 1) != MP_OK || bndlog_close(b) != MP_OK;
    bndlog_reader_t *r = NULL;
    bndlog_info_t info = {0};
    int ok = !bad && bndlog_read_open(path, RUN, 1, &r) == MP_OK;
    if (ok) bndlog_read_info(r, &info);
    ok = ok && info.first_step == 1 && info.last_step == 1 && check_step(r, 1) == 0;
    if (r) bndlog_read_close(r);
    tap_ok(r1 == MP_OK && errtext[0] == 0 && whole && moved && len1 == len0 && memcmp(whole, moved, len0) == 0 && ok,
           "fresh open at step 1 over a whole log of steps 0..1: it goes to NAME.old byte for byte, nothing said, "
           "step 0 not kept; the new log starts at step 1 (first %ld, last %ld)", info.first_step, info.last_step);
    free(whole);
    free(moved);

    /* torn, and of another run: never opened (an open would move it to NAME.damaged, or refuse it) */
    bad = truncate(path, file_size(path) / 2) != 0;
    char *torn = slurp(path, &len0);
    c.run_id = "ffffffffffffffffffffffffffffffff";
    b = NULL;
    capture_begin();
    int r2 = bad ? MP_ERR : bndlog_open(&c, &b);
    capture_end();
    show_errtext();
    if (b) bad += bndlog_close(b) != MP_OK;
    char damaged[1300];
    snprintf(damaged, sizeof damaged, "%s.damaged", path);
    struct stat st;
    moved = slurp(old, &len1);
    tap_ok(r2 == MP_OK && !bad && errtext[0] == 0 && torn && moved && len1 == len0 && memcmp(torn, moved, len0) == 0 &&
               lstat(damaged, &st) != 0,
           "fresh open over a torn log (%zu bytes), by another run id: to NAME.old over the earlier one, unopened "
           "(no NAME.damaged, no refusal)", len0);
    free(torn);
    free(moved);

    /* a directory in the log's place: refused as before, fresh or not */
    bad = unlink(path) != 0 || mkdir(path, 0700) != 0;
    b = NULL;
    capture_begin();
    int r3 = bad ? MP_OK : bndlog_open(&c, &b);
    capture_end();
    show_errtext();
    tap_ok(r3 == MP_ERR && !b && has(path) && has("not a regular file") && lstat(path, &st) == 0 && S_ISDIR(st.st_mode),
           "fresh open with a directory in the log's place: refused naming it, left there");
    free((char *)path);
}

/* A flush that failed: the step's small entry stays in libhdf5's buffers past its put, so the file
 * size limit (EFBIG, as a full disk's ENOSPC) is met by the mark's H5Fflush in the writer. libhdf5
 * 1.10.8 then failed the log's close and died at this process's exit, in its own termination
 * (SIGSEGV in H5F__close_cb: a finished run ended as a crash, the campaign's full disk under Slurm,
 * 2026-12-07). The test's verdict is the flush failure named, and that the process gets to its last
 * line: tap_done's plan, then a clean exit. */
static void test_flush_failure(const char *dir)
{
    bndlog_t *b = NULL;
    bndlog_cfg_t c = cfg_of(dir, 0, 0, 1 << 20);
    size_t bytes = 0;
    int bad = bndlog_open(&c, &b) != MP_OK;
    if (!bad) bad += put_step(b, 0, &bytes) + (bndlog_step_done(b, 0) != MP_OK) + (bndlog_sync(b) != MP_OK);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = (rlim_t)file_size(log_file(dir, 0));
    signal(SIGXFSZ, SIG_IGN);
    float x[16];
    fill(x, 16, 1, 0, 0, BND_ACT);
    capture_begin();
    bad += setrlimit(RLIMIT_FSIZE, &lim) != 0;
    int p1 = bad ? MP_ERR : bndlog_put(b, 1, 0, 0, BND_ACT, x, 16);
    if (!bad) bndlog_step_done(b, 1);
    int s1 = bad ? MP_OK : bndlog_sync(b);
    setrlimit(RLIMIT_FSIZE, &old); /* lifted before the close, as in test_write_errors */
    int c1 = b ? bndlog_close(b) : MP_OK;
    capture_end();
    show_errtext();
    tap_ok(!bad && p1 == MP_OK && s1 == MP_ERR && c1 == MP_ERR && has("marking step 1 complete failed") &&
               has("File too large"),
           "a 64-byte entry past a file size limit at the file's size: the put buffered, the mark's flush failed "
           "(named), sync and close say so; the process goes on to exit cleanly");
}

int main(void)
{
    alarm(300); /* a deadlock fails the test instead of hanging make check */
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(fmt_next, sizeof fmt_next, "bndlog_format is %d", BNDLOG_FORMAT + 1);
    hbool_t ts = 0;
    H5is_library_threadsafe(&ts);
    tap_diag("this libhdf5 is %sthread-safe: the writer keeps to bndlog's thread rule either way", ts ? "" : "not ");
    char dirs[11][1100];
    for (int i = 0; i < 11; i++) {
        snprintf(dirs[i], sizeof dirs[i], "%s/run%d", tmpdir, i);
        mkdir(dirs[i], 0700);
    }
    test_round_trip(dirs[0]);
    test_reopen_prune(dirs[0]);
    test_reopen_keeps(dirs[0]);
    test_foreign(dirs[0]);
    test_flip(dirs[1]);
    test_forged(dirs[1]);
    test_truncated(dirs[1]);
    test_pause(dirs[2]);
    test_full_queue(dirs[2]);
    test_write_errors(dirs[3], dirs[4]);
    test_flush_failure(dirs[10]);
    test_duplicate(dirs[6]);
    test_rows(dirs[7]);
    test_open_damaged(dirs[8]);
    test_open_fresh(dirs[9]);
    test_killed(dirs[5], 0, 0);
    test_killed(dirs[5], 1, 300);
    test_killed(dirs[5], 2, 3000);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) tap_diag("could not remove %s", tmpdir);
    return tap_done();
}
