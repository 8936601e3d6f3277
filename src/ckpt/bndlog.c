/* The boundary log (bndlog.h): the file, the writer thread and its queue, the reader.
 *
 * Crash behaviour. A rank killed mid-step (the job's MPI_Abort after a peer died) leaves its file
 * as its last write() calls left it; the node, and so the page cache, usually survives. Two things
 * keep the marked steps readable then:
 *   - the metadata cache never evicts (evictions_enabled = 0): HDF5 writes metadata only when the
 *     writer flushes, at a step's mark; between marks only raw data goes out, into space beyond
 *     what the flushed metadata references. A kill between flushes leaves the last flushed file
 *     plus unreferenced bytes. The cache grows with the objects touched, so after a mark the file
 *     is closed and opened again once the cache passes BNDLOG_MDC_REOPEN;
 *   - a step is marked in two flushes: its data and metadata, fsync, then last_done, fsync.
 * A kill inside HDF5's flush itself can still leave metadata half written (HDF5 writes it in
 * place, several blocks per flush; seen once in CI as "addr overflow" when the file was read).
 * So nobody opens a killed rank's log: a replay reads the logs of the survivors only (a survivor
 * closes its log, drained and flushed, before it writes its snapshot, so a snapshot vouches for its
 * log), and the killed rank itself, resuming from a checkpoint or a replica, moves its old log aside
 * unopened (bndlog_cfg_t.fresh, log_set_aside) instead of trusting libhdf5 with a torn file. A log
 * that is opened and does not read (a damaged disk, a file cut short by hand) is named: a reader
 * says so and the replay falls back to the checkpoint; its own writer moves it aside to
 * NAME.damaged and starts a new log.
 *
 * Pruning rewrites: the steps kept are copied (H5Ocopy) into NAME.tmp, which is published over
 * NAME (publish.h). Rotating one file per checkpoint interval would avoid the copy but leave several
 * files per rank and a moment with two live ones for replay to choose between; at a checkpoint the
 * steps kept are the ones in flight, normally none, so the copy costs a file creation and an fsync.
 *
 * Locking: mu guards the queue, the flags and the counters. The writer's HDF5 work runs outside mu,
 * between h5_enter and h5_leave, which wait out a pause (the thread rule in bndlog.h). */
#define _GNU_SOURCE /* memfd_create */
#include "bndlog.h"

#include <errno.h>
#include <hdf5.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "ckpt.h"
#include "h5util.h"
#include "perf.h"
#include "publish.h"
#include "rng.h"

#define BNDLOG_PATH_MAX 4096
#define BNDLOG_RUN_ID_MAX 64
#define BNDLOG_MDC_REOPEN ((size_t)32 << 20) /* metadata cache bytes past which a mark reopens the file */

enum { OP_TENSOR, OP_SCALARS, OP_DONE, OP_PRUNE };

typedef struct bnd_entry_s {
    struct bnd_entry_s *next;
    int op;
    long step;       /* OP_PRUNE: below_step */
    int mb, chunk, kind;
    size_t n;        /* elements */
    size_t bytes;    /* data bytes queued: n floats or doubles */
    size_t cap;      /* bytes data holds */
    void *data;
} bnd_entry_t;

/* What a log file says of itself (its root attributes). */
typedef struct {
    int format, rank, stage, pp;
    long first, last_done;
    char run_id[BNDLOG_RUN_ID_MAX + 1];
} bnd_ident_t;

struct bndlog_s {
    char path[BNDLOG_PATH_MAX], tmp[BNDLOG_PATH_MAX + 16];
    bnd_ident_t id;          /* the writer thread's (the main thread's before start and after join) */
    size_t max_queue;
    long next_done;          /* main thread: the step the next bndlog_step_done marks */
    double put_s;            /* main thread: seconds in the puts */
    int reported;            /* main thread: the writer's failure was returned to the caller */
    hid_t f, grp;            /* writer: the file, the open step group (-1: none) */
    long grp_step;
    int fd;                  /* writer: the file's descriptor under HDF5's sec2 driver, for fsync */
    h5_quiet_t quiet;        /* writer: HDF5's error printer while it is inside HDF5 */
    pthread_mutex_t mu;
    pthread_cond_t cv_work;  /* to the writer: an entry was queued, or stop */
    pthread_cond_t cv_done;  /* to putters and sync: an entry was handled */
    pthread_cond_t cv_gate;  /* the writer left HDF5, or a pause ended */
    bnd_entry_t *head, *tail, *spare;
    size_t queued, spare_bytes;
    int busy, in_h5, paused, stop, failed, thread_up;
    char why[512];           /* what the writer failed at */
    bndlog_stats_t st;
    pthread_t thread;
};

struct bndlog_reader_s {
    char path[BNDLOG_PATH_MAX];
    hid_t f;
    bnd_ident_t id;
};

/* ---- names ---- */

int bndlog_path(const char *dir, int rank, char *path_p, size_t n)
{
    int len = snprintf(path_p, n, "%s/bndlog/bnd-r%d.h5", dir, rank);
    if (len < 0 || (size_t)len >= n) return MP_FAIL("boundary log: the directory name %s is too long", dir);
    return MP_OK;
}

static const char *kind_word(int kind)
{
    return kind == BND_ACT ? "activations" : kind == BND_GRAD ? "gradients" : kind == BND_TIED
           ? "tied-embedding gradient part" : "tied head's input";
}

static void step_name(long step, char *buf, size_t n) { snprintf(buf, n, "step_%08ld", step); }

static void entry_name(int scalars, int kind, int mb, int chunk, char *buf, size_t n)
{
    if (scalars) snprintf(buf, n, "scalars");
    else snprintf(buf, n, "%s_mb%d_c%d", kind == BND_ACT ? "act" : kind == BND_GRAD ? "grad" : kind == BND_TIED ? "tied" : "head",
                  mb, chunk);
}

/* "step 5, micro-batch 2, chunk 0, activations", or "step 5, scalars": how messages name an entry. */
static void entry_words(int scalars, long step, int mb, int chunk, int kind, char *buf, size_t n)
{
    if (scalars) snprintf(buf, n, "step %ld, scalars", step);
    else snprintf(buf, n, "step %ld, micro-batch %d, chunk %d, %s", step, mb, chunk, kind_word(kind));
}

/* The step of a group named step_%08ld; -1 for any other name. */
static long step_parse(const char *name)
{
    if (strncmp(name, "step_", 5) != 0 || name[5] < '0' || name[5] > '9') return -1;
    char *end;
    errno = 0;
    long s = strtol(name + 5, &end, 10);
    return *end || errno ? -1 : s;
}

/* The checksum of scalars: ckpt_checksum of their bits read as 2n floats (it is a sum over
 * positions, so the pieces add up to the whole). */
static uint64_t scalars_checksum(const double *v, size_t n)
{
    _Static_assert(sizeof(double) == 2 * sizeof(float), "a double is two floats' bits");
    float bits[128];
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i += 64) {
        size_t k = n - i < 64 ? n - i : 64;
        memcpy(bits, v + i, k * sizeof(double));
        sum += ckpt_checksum(bits, 2 * k, 2 * i);
    }
    return sum;
}

/* What an entry's stored checksum adds to the sum of its values (format 3): a key made of the run,
 * the rank and the entry's step, kind, micro-batch and chunk, so that an entry moved or copied under
 * another name, into another step, or from another rank's or run's log fails its checksum instead of
 * replaying the wrong tensor (a sum of the values alone travels with them). */
static uint64_t entry_key(const bnd_ident_t *id, int scalars, long step, int mb, int chunk, int kind)
{
    uint64_t k = 0xcbf29ce484222325ull; /* FNV-1a over the run id, then mixed with each field */
    for (const char *c = id->run_id; *c; c++) k = (k ^ (unsigned char)*c) * 0x100000001b3ull;
    k = rng_mix(k ^ (uint64_t)id->rank);
    k = rng_mix(k ^ (uint64_t)step);
    k = rng_mix(k ^ (uint64_t)(scalars ? BND_HEAD + 1 : kind));
    k = rng_mix(k ^ (uint64_t)mb);
    return rng_mix(k ^ (uint64_t)chunk);
}

/* ---- HDF5 helpers (the caller holds the thread rule) ---- */

/* sec2 and objects of the 1.8+ format (their metadata carries checksums); for the writer
 * (writer = 1), a metadata cache that writes only when flushed (the crash behaviour above). */
static int fapl_make(const char *path, int writer, hid_t *fapl_p)
{
    hid_t fapl = -1;
    H5AC_cache_config_t mdc;
    memset(&mdc, 0, sizeof mdc);
    mdc.version = H5AC__CURR_CACHE_CONFIG_VERSION;
    H5_TRY(fapl = H5Pcreate(H5P_FILE_ACCESS), err, path);
    H5_TRY(H5Pset_fapl_sec2(fapl), err_close_fapl, path);
    H5_TRY(H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST), err_close_fapl, path);
    if (!writer) goto done;
    H5_TRY(H5Pget_mdc_config(fapl, &mdc), err_close_fapl, path);
    mdc.incr_mode = H5C_incr__off; /* HDF5 allows no evictions only without automatic resizing */
    mdc.flash_incr_mode = H5C_flash_incr__off;
    mdc.decr_mode = H5C_decr__off;
    mdc.evictions_enabled = 0;
    H5_TRY(H5Pset_mdc_config(fapl, &mdc), err_close_fapl, path);
done:
    *fapl_p = fapl;
    return MP_OK;
err_close_fapl:
    H5Pclose(fapl);
err:
    return MP_ERR;
}

/* The log's root attributes, read with h5util.h's readers; a missing one means another kind of file. */
static int attr_read_ll(hid_t loc, const char *name, long long *v_p, const char *path)
{
    const int have = h5_attr_read(loc, name, H5T_NATIVE_LLONG, v_p, path);
    if (have == 0) return MP_FAIL("boundary log %s: no attribute %s: not a boundary log", path, name);
    return have == 1 ? MP_OK : MP_ERR;
}

static int attr_read_string(hid_t loc, const char *name, char *buf, size_t cap, const char *path)
{
    char where[BNDLOG_PATH_MAX + 96];
    snprintf(where, sizeof where, "boundary log %s: attribute %s", path, name);
    const int have = h5_attr_read_text(loc, name, buf, cap, where);
    if (have == 0) return MP_FAIL("boundary log %s: no attribute %s: not a boundary log", path, name);
    return have == 1 ? MP_OK : MP_ERR;
}

static int attr_update_ll(hid_t loc, const char *name, long long v, const char *path)
{
    hid_t a = -1;
    H5_TRY(a = H5Aopen(loc, name, H5P_DEFAULT), err, path);
    H5_TRY(H5Awrite(a, H5T_NATIVE_LLONG, &v), err_close_attr, path);
    H5Aclose(a);
    return MP_OK;
err_close_attr:
    H5Aclose(a);
err:
    return MP_ERR;
}

static int ident_write(hid_t f, const bnd_ident_t *id, const char *path)
{
    const int iv[4] = {id->format, id->rank, id->stage, id->pp};
    const char *in[4] = {"bndlog_format", "rank", "stage", "pp"};
    for (int i = 0; i < 4; i++)
        if (h5_attr_write(f, in[i], H5T_STD_I32LE, H5T_NATIVE_INT, &iv[i], path) != MP_OK) return MP_ERR;
    const long long first = id->first, last = id->last_done;
    if (h5_attr_write(f, "first_step", H5T_STD_I64LE, H5T_NATIVE_LLONG, &first, path) != MP_OK ||
        h5_attr_write(f, "last_done", H5T_STD_I64LE, H5T_NATIVE_LLONG, &last, path) != MP_OK)
        return MP_ERR;
    return h5_attr_write_string(f, "run_id", id->run_id, path);
}

/* Reads the root attributes; the format first, so another kind of file is named as such. On failure
 * *damaged_p is 1 when it is the file's state (an attribute unreadable, missing or out of range), 0
 * when the file is whole but not ours to read (another format). */
static int ident_read(hid_t f, const char *path, bnd_ident_t *id_p, int *damaged_p)
{
    long long v[6];
    const char *names[6] = {"bndlog_format", "rank", "stage", "pp", "first_step", "last_done"};
    *damaged_p = 1;
    for (int i = 0; i < 6; i++)
        if (attr_read_ll(f, names[i], &v[i], path) != MP_OK) return MP_ERR;
    if (attr_read_string(f, "run_id", id_p->run_id, sizeof id_p->run_id, path) != MP_OK) return MP_ERR;
    if (v[0] != BNDLOG_FORMAT) { /* before the ranges: another format may mean other things */
        *damaged_p = 0;
        return MP_FAIL("boundary log %s: bndlog_format is %lld, this MindPipe reads %d", path, v[0], BNDLOG_FORMAT);
    }
    if (v[1] < 0 || v[1] > INT_MAX || v[3] < 1 || v[3] > INT_MAX || v[2] < 0 || v[2] >= v[3] || v[4] < 0 ||
        v[4] > LONG_MAX - 1 || v[5] < v[4] - 1 || v[5] > LONG_MAX - 1)
        return MP_FAIL("boundary log %s: attributes out of range (rank %lld, stage %lld, pp %lld, first_step %lld, "
                       "last_done %lld): damaged",
                       path, v[1], v[2], v[3], v[4], v[5]);
    id_p->format = (int)v[0], id_p->rank = (int)v[1], id_p->stage = (int)v[2], id_p->pp = (int)v[3];
    id_p->first = (long)v[4], id_p->last_done = (long)v[5];
    return MP_OK;
}

/* A file of another run or rank is refused naming the key and both values. */
static int ident_check(const bnd_ident_t *id, const char *run_id, int rank, const char *path)
{
    if (strcmp(id->run_id, run_id) != 0)
        return MP_FAIL("boundary log %s belongs to another run: run_id is %s, this run is %s", path, id->run_id,
                       run_id);
    if (id->rank != rank)
        return MP_FAIL("boundary log %s belongs to another rank: rank is %d, expected %d", path, id->rank, rank);
    return MP_OK;
}

/* Opens path (read-only, or read-write) and reads its identity. On failure *damaged_p (when not
 * NULL) says whether the file itself is unreadable (1: HDF5 cannot open it or its identity) or whole
 * but another format (0). */
static int file_open_ident(const char *path, unsigned flags, hid_t *f_p, bnd_ident_t *id_p, int *damaged_p)
{
    hid_t fapl = -1, f = -1;
    int damaged = 0;
    if (damaged_p) *damaged_p = 0;
    if (fapl_make(path, flags == H5F_ACC_RDWR, &fapl) != MP_OK) return MP_ERR;
    f = H5Fopen(path, flags, fapl);
    if (f < 0) mp_h5_fail(__FILE__, __LINE__, "H5Fopen", path); /* before H5Pclose clears HDF5's reason */
    H5Pclose(fapl);
    if (f < 0) {
        if (damaged_p) *damaged_p = 1;
        return MP_FAIL("boundary log %s cannot be read: truncated or damaged (or not an HDF5 file)", path);
    }
    if (ident_read(f, path, id_p, &damaged) != MP_OK) {
        if (damaged_p) *damaged_p = damaged;
        H5Fclose(f);
        return MP_ERR;
    }
    *f_p = f;
    return MP_OK;
}

/* Closing a file we write. After a failure the file must stay as its last successful flush left
 * it: HDF5's closing flush would write metadata describing what failed over a state whose marked
 * steps are good; and a close that fails (the disk still full) leaves libhdf5 1.10 an identifier it
 * crashes on at exit (SIGSEGV in H5F__close_cb). So a file to discard (discard = 1: after a
 * failure, or replaced by a rewrite), or one whose flush fails, has its sec2 descriptor pointed at
 * an anonymous memory file first: the close then succeeds and writes nothing to the disk. Objects
 * in the file are closed first. MP_OK, or MP_ERR when the flush or close failed. */
static int file_close(hid_t f, int discard, const char *path)
{
    int rc = MP_OK;
    void *handle = NULL;
    if (!discard && H5Fflush(f, H5F_SCOPE_LOCAL) < 0) {
        mp_h5_fail(__FILE__, __LINE__, "H5Fflush", path);
        rc = MP_ERR, discard = 1;
    }
    if (discard) {
        struct stat st;
        int m = memfd_create("mindpipe-bndlog-discarded", MFD_CLOEXEC), fd = -1;
        if (H5Fget_vfd_handle(f, H5P_DEFAULT, &handle) >= 0) fd = *(int *)handle;
        if (m < 0 || fd < 0 || fstat(fd, &st) != 0 || ftruncate(m, st.st_size) != 0 || dup2(m, fd) < 0)
            MP_WARN("boundary log %s: cannot set the file aside before closing it (%s): the close may write to it",
                    path, strerror(errno));
        if (m >= 0) close(m);
        /* A flush that failed (ENOSPC in step_mark) leaves libhdf5 1.10.8's metadata cache with its
         * skip list enabled: the close then fails ("slist already enabled?") and libhdf5's own
         * termination in MPI_Finalize dies on the half-closed file (SIGSEGV in H5F__close_cb, every
         * rank, a finished run ending as a crash). One more flush, into the memory file, fails too,
         * but its error path resets the cache, and the close succeeds (validation/unit/test_bndlog,
         * "a flush that failed"). Its error stack is not ours to print. */
        H5E_BEGIN_TRY { (void)H5Fflush(f, H5F_SCOPE_LOCAL); } H5E_END_TRY;
    }
    if (H5Fclose(f) < 0) {
        mp_h5_fail(__FILE__, __LINE__, "H5Fclose", path);
        rc = MP_ERR;
    }
    return rc;
}

/* ---- writing the file ---- */

typedef struct {
    hid_t dst;
    long lo, hi;
    const char *path;
} copy_ctx_t;

static herr_t copy_step(hid_t src, const char *name, const H5L_info_t *info, void *data)
{
    const copy_ctx_t *c = data;
    long s = step_parse(name);
    if (s < c->lo || s >= c->hi) return 0;
    if (H5Ocopy(src, name, c->dst, name, H5P_DEFAULT, H5P_DEFAULT) < 0) {
        mp_h5_fail(__FILE__, __LINE__, "H5Ocopy", c->path);
        return -1;
    }
    return 0;
}

/* Writes b->tmp afresh (created exclusively: nothing written through a link) with b->id's
 * attributes and src's step groups in [lo, hi) (src -1: none), and closes it. */
static int file_rewrite(bndlog_t *b, hid_t src, long lo, long hi)
{
    int rc = MP_ERR;
    hid_t fapl = -1, dst = -1;
    if (fapl_make(b->tmp, 1, &fapl) != MP_OK) return MP_ERR;
    H5_TRY(dst = H5Fcreate(b->tmp, H5F_ACC_EXCL, H5P_DEFAULT, fapl), out, b->tmp);
    if (ident_write(dst, &b->id, b->tmp) != MP_OK) goto out;
    copy_ctx_t c = {dst, lo, hi, b->tmp};
    if (src >= 0 && lo < hi) H5_TRY(H5Literate(src, H5_INDEX_NAME, H5_ITER_INC, NULL, copy_step, &c), out, b->tmp);
    rc = MP_OK;
out:
    if (dst >= 0 && file_close(dst, rc != MP_OK, b->tmp) != MP_OK) rc = MP_ERR;
    H5Pclose(fapl);
    return rc;
}

/* Opens b->path to append, and takes the descriptor the sec2 driver writes through. */
static int file_open_rw(bndlog_t *b)
{
    bnd_ident_t id;
    void *handle = NULL;
    if (file_open_ident(b->path, H5F_ACC_RDWR, &b->f, &id, NULL) != MP_OK) return MP_ERR;
    H5_TRY(H5Fget_vfd_handle(b->f, H5P_DEFAULT, &handle), err_close, b->path);
    b->fd = *(int *)handle;
    return MP_OK;
err_close:
    H5Fclose(b->f);
    b->f = -1;
    return MP_ERR;
}

/* ---- the writer thread ---- */

/* The writer enters HDF5 only between these: h5_enter waits out a pause. */
static void h5_enter(bndlog_t *b)
{
    pthread_mutex_lock(&b->mu);
    while (b->paused) pthread_cond_wait(&b->cv_gate, &b->mu);
    b->in_h5 = 1;
    pthread_mutex_unlock(&b->mu);
    h5_quiet_begin(&b->quiet);
}

static void h5_leave(bndlog_t *b)
{
    h5_quiet_end(&b->quiet);
    pthread_mutex_lock(&b->mu);
    b->in_h5 = 0;
    pthread_cond_broadcast(&b->cv_gate);
    pthread_mutex_unlock(&b->mu);
}

static void group_close(bndlog_t *b)
{
    if (b->grp >= 0) H5Gclose(b->grp);
    b->grp = -1;
}

/* The group of step, created at its first entry; kept open while the step's entries arrive. */
static int group_get(bndlog_t *b, long step)
{
    char name[32];
    htri_t ex;
    if (b->grp >= 0 && b->grp_step == step) return MP_OK;
    group_close(b);
    step_name(step, name, sizeof name);
    H5_TRY(ex = H5Lexists(b->f, name, H5P_DEFAULT), err, b->path);
    if (ex) H5_TRY(b->grp = H5Gopen2(b->f, name, H5P_DEFAULT), err, b->path);
    else H5_TRY(b->grp = H5Gcreate2(b->f, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), err, b->path);
    b->grp_step = step;
    return MP_OK;
err:
    return MP_ERR;
}

static int dataset_write(bndlog_t *b, const bnd_entry_t *e, uint64_t sum, const char *words)
{
    const int scalars = e->op == OP_SCALARS;
    char name[64];
    hid_t s = -1, d = -1;
    htri_t ex;
    hsize_t dim = e->n;
    entry_name(scalars, e->kind, e->mb, e->chunk, name, sizeof name);
    H5_TRY(ex = H5Lexists(b->grp, name, H5P_DEFAULT), err, b->path);
    if (ex) return MP_FAIL("boundary log %s: %s logged twice", b->path, words);
    H5_TRY(s = H5Screate_simple(1, &dim, NULL), err, b->path);
    H5_TRY(d = H5Dcreate2(b->grp, name, scalars ? H5T_IEEE_F64LE : H5T_IEEE_F32LE, s, H5P_DEFAULT, H5P_DEFAULT,
                          H5P_DEFAULT), err_close_space, b->path);
    H5_TRY(H5Dwrite(d, scalars ? H5T_NATIVE_DOUBLE : H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, e->data),
           err_close_dset, b->path);
    if (h5_attr_write(d, "checksum", H5T_STD_U64LE, H5T_NATIVE_UINT64, &sum, b->path) != MP_OK) goto err_close_dset;
    H5Dclose(d);
    H5Sclose(s);
    return MP_OK;
err_close_dset:
    H5Dclose(d);
err_close_space:
    H5Sclose(s);
err:
    return MP_ERR;
}

static int entry_write(bndlog_t *b, const bnd_entry_t *e, const char *words)
{
    /* the sum before entering HDF5: a pause need not wait for arithmetic */
    const int scalars = e->op == OP_SCALARS;
    uint64_t sum = (scalars ? scalars_checksum(e->data, e->n) : ckpt_checksum(e->data, e->n, 0)) +
                   entry_key(&b->id, scalars, e->step, e->mb, e->chunk, e->kind);
    h5_enter(b);
    int rc = group_get(b, e->step) == MP_OK ? dataset_write(b, e, sum, words) : MP_ERR;
    h5_leave(b);
    return rc;
}

static int fd_sync(const bndlog_t *b)
{
    if (fsync(b->fd) != 0) return MP_FAIL("boundary log %s: fsync: %s", b->path, strerror(errno));
    return MP_OK;
}

/* Data and metadata durable first, then the mark: a reader that sees last_done = step finds all of
 * it. The fsyncs run outside HDF5, so a pause does not wait for the disk. */
static int step_mark(bndlog_t *b, long step)
{
    int rc = MP_ERR;
    h5_enter(b);
    group_close(b);
    H5_TRY(H5Fflush(b->f, H5F_SCOPE_LOCAL), out_leave, b->path);
    h5_leave(b);
    if (fd_sync(b) != MP_OK) return MP_ERR;
    h5_enter(b);
    if (attr_update_ll(b->f, "last_done", step, b->path) != MP_OK) goto out_leave;
    H5_TRY(H5Fflush(b->f, H5F_SCOPE_LOCAL), out_leave, b->path);
    b->id.last_done = step;
    size_t cur = 0;
    int entries = 0;
    H5_TRY(H5Fget_mdc_size(b->f, NULL, NULL, &cur, &entries), out_leave, b->path);
    if (cur > BNDLOG_MDC_REOPEN) { /* everything is clean now: closing writes nothing of note */
        const int closed = file_close(b->f, 0, b->path);
        b->f = -1;
        if (closed != MP_OK || file_open_rw(b) != MP_OK) goto out_leave;
    }
    rc = MP_OK;
out_leave:
    h5_leave(b);
    return rc == MP_OK ? fd_sync(b) : MP_ERR;
}

/* The rewrite (bndlog_prune): NAME.tmp gets the steps >= below, is published over NAME, and the
 * writer appends to it from then on. */
static int prune_file(bndlog_t *b, long below)
{
    const long first = below > b->id.first ? below : b->id.first;
    const long old_first = b->id.first;
    if (publish_tmp_prepare(b->tmp) != MP_OK) return MP_ERR;
    h5_enter(b);
    group_close(b);
    b->id.first = first;
    int rc = file_rewrite(b, b->f, first, LONG_MAX);
    if (rc == MP_OK) { /* the old file stays as its last mark left it until the rename replaces it */
        rc = file_close(b->f, 1, b->path);
        b->f = -1;
    }
    h5_leave(b);
    if (rc != MP_OK) {
        b->id.first = old_first;
        publish_discard(b->tmp);
        return MP_ERR;
    }
    if (publish_commit(b->tmp, b->path) != MP_OK) return MP_ERR;
    h5_enter(b);
    rc = file_open_rw(b);
    h5_leave(b);
    return rc;
}

static int entry_handle(bndlog_t *b, const bnd_entry_t *e, char *why, size_t n)
{
    char words[160];
    switch (e->op) {
    case OP_TENSOR:
    case OP_SCALARS:
        entry_words(e->op == OP_SCALARS, e->step, e->mb, e->chunk, e->kind, words, sizeof words);
        snprintf(why, n, "writing %s", words);
        return entry_write(b, e, words);
    case OP_DONE:
        snprintf(why, n, "marking step %ld complete", e->step);
        return step_mark(b, e->step);
    default:
        snprintf(why, n, "pruning the steps below %ld", e->step);
        return prune_file(b, e->step);
    }
}

/* Keeps a handled entry's buffer for the next put while the spares stay within max_queue bytes. */
static void entry_recycle(bndlog_t *b, bnd_entry_t *e)
{
    if (e->cap > 0 && b->spare_bytes + e->cap <= b->max_queue) {
        e->next = b->spare;
        b->spare = e;
        b->spare_bytes += e->cap;
        return;
    }
    free(e->data);
    free(e);
}

/* After a failure the writer keeps taking entries, without writing them, so nobody waits forever. */
static void *writer_main(void *arg)
{
    bndlog_t *b = arg;
    char why[256];
    pthread_mutex_lock(&b->mu);
    for (;;) {
        while (!b->head && !b->stop) pthread_cond_wait(&b->cv_work, &b->mu);
        bnd_entry_t *e = b->head;
        if (!e) break; /* stopped, and everything queued handled */
        b->head = e->next;
        if (!b->head) b->tail = NULL;
        b->busy = 1;
        const int skip = b->failed;
        pthread_mutex_unlock(&b->mu);
        const double t0 = perf_now();
        const int rc = skip ? MP_OK : entry_handle(b, e, why, sizeof why);
        if (rc != MP_OK) MP_ERROR("boundary log %s: %s failed; nothing after it is logged", b->path, why);
        const double dt = perf_now() - t0;
        pthread_mutex_lock(&b->mu);
        b->st.writer_s += dt;
        if (rc != MP_OK) {
            b->failed = 1;
            snprintf(b->why, sizeof b->why, "%s failed", why);
        } else if (!skip && e->op == OP_DONE) {
            b->st.steps++;
        } else if (!skip && e->op != OP_PRUNE) {
            b->st.entries++;
            b->st.bytes += e->bytes;
        }
        b->queued -= e->bytes;
        b->busy = 0;
        entry_recycle(b, e);
        pthread_cond_broadcast(&b->cv_done);
    }
    struct timespec cpu;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu) == 0) b->st.writer_cpu_s = (double)cpu.tv_sec + 1e-9 * (double)cpu.tv_nsec;
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

/* ---- the writer API (one thread) ---- */

/* MP_ERR once the writer failed; the first call to see it says so. Called with mu held. */
static int failed_locked(bndlog_t *b)
{
    if (!b->reported) MP_ERROR("boundary log %s: the writer thread failed earlier (%s)", b->path, b->why);
    b->reported = 1;
    return MP_ERR;
}

/* A spare whose buffer holds bytes (the smallest such), or NULL. Called with mu held. */
static bnd_entry_t *spare_take(bndlog_t *b, size_t bytes)
{
    bnd_entry_t **best = NULL;
    for (bnd_entry_t **p = &b->spare; *p; p = &(*p)->next)
        if ((*p)->cap >= bytes && (!best || (*p)->cap < (*best)->cap)) best = p;
    if (!best) return NULL;
    bnd_entry_t *e = *best;
    *best = e->next;
    b->spare_bytes -= e->cap;
    return e;
}

/* A new entry with a buffer of bytes (none for 0), or NULL (message printed). */
static bnd_entry_t *entry_alloc(size_t bytes)
{
    bnd_entry_t *e = MP_CALLOC(1, sizeof *e);
    if (!e || !bytes) return e;
    if (!(e->data = MP_MALLOC(bytes))) {
        free(e);
        return NULL;
    }
    e->cap = bytes;
    return e;
}

/* Waits for room unless paused, reserves it, copies data outside the lock (the writer goes on
 * meanwhile) and queues the entry. */
static int enqueue(bndlog_t *b, const bnd_entry_t *spec, const void *data)
{
    pthread_mutex_lock(&b->mu);
    if (!b->paused && b->queued > 0 && b->queued + spec->bytes > b->max_queue && !b->failed) {
        const double t0 = perf_now();
        b->st.put_waits++;
        while (!b->paused && b->queued > 0 && b->queued + spec->bytes > b->max_queue && !b->failed)
            pthread_cond_wait(&b->cv_done, &b->mu);
        b->st.put_wait_s += perf_now() - t0;
    }
    if (b->failed) {
        int rc = failed_locked(b);
        pthread_mutex_unlock(&b->mu);
        return rc;
    }
    bnd_entry_t *e = spec->bytes ? spare_take(b, spec->bytes) : NULL;
    b->queued += spec->bytes;
    if (b->queued > b->st.queue_peak) b->st.queue_peak = b->queued;
    pthread_mutex_unlock(&b->mu);
    if (!e && !(e = entry_alloc(spec->bytes))) {
        pthread_mutex_lock(&b->mu);
        b->queued -= spec->bytes;
        pthread_mutex_unlock(&b->mu);
        return MP_ERR;
    }
    void *buf = e->data;
    const size_t cap = e->cap;
    *e = *spec;
    e->data = buf, e->cap = cap, e->next = NULL;
    if (spec->bytes) memcpy(e->data, data, spec->bytes);
    pthread_mutex_lock(&b->mu);
    if (b->tail) b->tail->next = e;
    else b->head = e;
    b->tail = e;
    pthread_cond_signal(&b->cv_work);
    pthread_mutex_unlock(&b->mu);
    return MP_OK;
}

static int put_tensor(bndlog_t *b, long step, int mb, int chunk, int kind, const float *x, size_t n);

int bndlog_put(bndlog_t *b, long step, int mb, int chunk, int kind, const float *x, size_t n)
{
    const double t0 = perf_now();
    const int rc = put_tensor(b, step, mb, chunk, kind, x, n);
    b->put_s += perf_now() - t0; /* the caller's thread only: no lock */
    return rc;
}

static int put_tensor(bndlog_t *b, long step, int mb, int chunk, int kind, const float *x, size_t n)
{
    if (kind < BND_ACT || kind > BND_HEAD || mb < 0 || chunk < 0 || !x || n == 0 || n > SIZE_MAX / sizeof(float))
        return MP_FAIL("boundary log %s: bndlog_put(step %ld, micro-batch %d, chunk %d, kind %d, %zu values): bad "
                       "arguments", b->path, step, mb, chunk, kind, n);
    if (step < b->next_done)
        return MP_FAIL("boundary log %s: step %ld is already marked complete; nothing more can be logged for it",
                       b->path, step);
    bnd_entry_t e = {.op = OP_TENSOR, .step = step, .mb = mb, .chunk = chunk, .kind = kind, .n = n,
                     .bytes = n * sizeof(float)};
    return enqueue(b, &e, x);
}

/* Whether a row holds any bit other than +0.0's (a -0.0 is logged: the replay's sum must see it). */
static int row_nonzero(const float *x, size_t width)
{
    uint32_t any = 0;
    for (size_t j = 0; j < width; j++) {
        uint32_t u;
        memcpy(&u, &x[j], sizeof u);
        any |= u;
    }
    return any != 0;
}

int bndlog_put_rows(bndlog_t *b, long step, int mb, int chunk, int kind, const float *x, size_t rows, size_t width)
{
    const double t0 = perf_now();
    if (!x || rows == 0 || width == 0 || rows > (size_t)BNDLOG_ROWS_MAX || width > SIZE_MAX / sizeof(float) / (rows + 1))
        return MP_FAIL("boundary log %s: bndlog_put_rows(step %ld, %zu rows of %zu): bad arguments", b->path, step, rows,
                       width);
    uint32_t *which = MP_MALLOC(rows * sizeof *which);
    if (!which) return MP_ERR;
    size_t k = 0;
    for (size_t i = 0; i < rows; i++)
        if (row_nonzero(x + i * width, width)) which[k++] = (uint32_t)i;
    const size_t n = 1 + k * (width + 1);
    float *buf = MP_MALLOC(n * sizeof(float));
    if (!buf) {
        free(which);
        return MP_ERR;
    }
    buf[0] = (float)k;
    for (size_t j = 0; j < k; j++) {
        buf[1 + j] = (float)which[j];
        memcpy(buf + 1 + k + j * width, x + (size_t)which[j] * width, width * sizeof(float));
    }
    free(which);
    const int rc = put_tensor(b, step, mb, chunk, kind, buf, n);
    free(buf);
    b->put_s += perf_now() - t0;
    return rc;
}

int bndlog_put_scalars(bndlog_t *b, long step, const double *v, int n)
{
    if (!v || n <= 0) return MP_FAIL("boundary log %s: bndlog_put_scalars(step %ld, %d values): bad arguments", b->path, step, n);
    if (step < b->next_done)
        return MP_FAIL("boundary log %s: step %ld is already marked complete; nothing more can be logged for it",
                       b->path, step);
    bnd_entry_t e = {.op = OP_SCALARS, .step = step, .n = (size_t)n, .bytes = (size_t)n * sizeof(double)};
    return enqueue(b, &e, v);
}

int bndlog_step_done(bndlog_t *b, long step)
{
    if (step != b->next_done)
        return MP_FAIL("boundary log %s: steps are marked in order: step %ld given, step %ld is next", b->path, step,
                       b->next_done);
    bnd_entry_t e = {.op = OP_DONE, .step = step};
    if (enqueue(b, &e, NULL) != MP_OK) return MP_ERR;
    b->next_done++;
    return MP_OK;
}

int bndlog_prune(bndlog_t *b, long below_step)
{
    if (below_step > b->next_done)
        return MP_FAIL("boundary log %s: cannot prune below step %ld: only the steps below %ld are marked", b->path,
                       below_step, b->next_done);
    bnd_entry_t e = {.op = OP_PRUNE, .step = below_step};
    return enqueue(b, &e, NULL);
}

int bndlog_sync(bndlog_t *b)
{
    pthread_mutex_lock(&b->mu);
    if (b->paused) {
        pthread_mutex_unlock(&b->mu);
        return MP_FAIL("boundary log %s: bndlog_sync while paused would never return", b->path);
    }
    while (b->head || b->busy) pthread_cond_wait(&b->cv_done, &b->mu);
    int rc = b->failed ? failed_locked(b) : MP_OK;
    pthread_mutex_unlock(&b->mu);
    return rc;
}

void bndlog_pause(bndlog_t *b)
{
    pthread_mutex_lock(&b->mu);
    b->paused++;
    if (b->in_h5) {
        const double t0 = perf_now();
        while (b->in_h5) pthread_cond_wait(&b->cv_gate, &b->mu);
        b->st.pause_wait_s += perf_now() - t0;
    }
    pthread_mutex_unlock(&b->mu);
}

void bndlog_resume(bndlog_t *b)
{
    pthread_mutex_lock(&b->mu);
    if (b->paused > 0) b->paused--;
    pthread_cond_broadcast(&b->cv_gate);
    pthread_mutex_unlock(&b->mu);
}

void bndlog_stats(bndlog_t *b, bndlog_stats_t *st_p)
{
    pthread_mutex_lock(&b->mu);
    *st_p = b->st;
    pthread_mutex_unlock(&b->mu);
    st_p->put_s = b->put_s;
}

/* The counters as root attributes stats_* (replacing a previous run's). Writer stopped. */
static int stats_record(bndlog_t *b)
{
    const char *names[4] = {"stats_bytes", "stats_steps", "stats_writer_cpu_s", "stats_put_s"};
    const double v[4] = {(double)b->st.bytes, (double)b->st.steps, b->st.writer_cpu_s, b->put_s};
    for (int i = 0; i < 4; i++) {
        htri_t ex;
        H5_TRY(ex = H5Aexists(b->f, names[i]), err, b->path);
        if (ex) H5_TRY(H5Adelete(b->f, names[i]), err, b->path);
        if (h5_attr_write(b->f, names[i], H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v[i], b->path) != MP_OK) goto err;
    }
    return MP_OK;
err:
    return MP_ERR;
}

/* ---- open and close ---- */

/* DIR/bndlog, the folder of path: created if missing, refused when something else is there. */
static int log_dir_make(const char *log_path)
{
    char d[BNDLOG_PATH_MAX];
    struct stat st;
    publish_dir_name(log_path, d, sizeof d);
    if (mkdir(d, 0777) != 0 && errno != EEXIST) return MP_FAIL("boundary log: cannot create %s: %s", d, strerror(errno));
    if (lstat(d, &st) != 0 || !S_ISDIR(st.st_mode))
        return MP_FAIL("boundary log: %s is in the way: it is not a directory", d);
    return MP_OK;
}

/* An unreadable log of this rank goes to PATH.damaged (PATH.damaged.K when that is taken: never over
 * an earlier one), the directory synced: kept for a look, out of the new log's way. */
static int log_move_aside(const char *path)
{
    char to[BNDLOG_PATH_MAX + 32], dir[BNDLOG_PATH_MAX];
    struct stat st;
    snprintf(to, sizeof to, "%s.damaged", path);
    for (int k = 2; lstat(to, &st) == 0; k++)
        if (k == 1000) return MP_FAIL("boundary log %s: cannot move it aside: %s.damaged.2..999 are all taken", path, path);
        else snprintf(to, sizeof to, "%s.damaged.%d", path, k);
    if (rename(path, to) != 0) return MP_FAIL("boundary log %s: cannot move it to %s: %s", path, to, strerror(errno));
    publish_dir_name(path, dir, sizeof dir);
    if (publish_fsync_path(dir, 1) != MP_OK) return MP_ERR;
    MP_WARN("boundary log %s: the read above failed (a kill inside the log's flush tears it: bndlog.c's crash "
            "behaviour); moved to %s, and this rank logs anew: a replay that needs its earlier steps falls back to "
            "the checkpoint", path, to);
    return MP_OK;
}

/* The log of a rank whose state comes from a checkpoint or a replica (bndlog_cfg_t.fresh) goes to
 * PATH.old unopened, over an earlier PATH.old, the directory synced. Such a rank may have been
 * killed inside its writer's H5Fflush, and a torn file is read by libhdf5 without any check of ours
 * before it (a checksum over the flushed metadata would need HDF5's own layout). Its steps below
 * first_step are needed by no replay: every replay starts from the newest checkpoint, at or after
 * this rank's first_step, and this rank's replay (or its run from here) logs the steps after it
 * again. Kept, not removed: it is the only trace of what the lost rank had logged. */
static int log_set_aside(const char *path)
{
    char to[BNDLOG_PATH_MAX + 8], dir[BNDLOG_PATH_MAX];
    snprintf(to, sizeof to, "%s.old", path);
    if (rename(path, to) != 0) return MP_FAIL("boundary log %s: cannot move it to %s: %s", path, to, strerror(errno));
    publish_dir_name(path, dir, sizeof dir);
    return publish_fsync_path(dir, 1);
}

/* What to keep of the log already at b->path (b->id holds this run's identity and first_step):
 * the steps [its first, first_step) when they reach first_step - 1 on the same stage and pp;
 * nothing otherwise (and nothing of one that cannot be read, moved aside); nothing and unopened
 * when fresh (log_set_aside). *src_p: the old file, open (or -1). */
static int log_existing(bndlog_t *b, long first_step, int fresh, hid_t *src_p, long *keep_hi_p)
{
    struct stat st;
    bnd_ident_t old;
    int damaged = 0;
    *src_p = -1, *keep_hi_p = first_step;
    if (lstat(b->path, &st) != 0) return MP_OK;
    if (!S_ISREG(st.st_mode)) return MP_FAIL("boundary log %s: not a regular file: refused", b->path);
    if (fresh) return log_set_aside(b->path);
    if (file_open_ident(b->path, H5F_ACC_RDONLY, src_p, &old, &damaged) != MP_OK) {
        *src_p = -1;
        if (damaged) return log_move_aside(b->path);
        MP_ERROR("boundary log %s: refused: it was left as it is (move it aside to start a new log)", b->path);
        return MP_ERR;
    }
    if (ident_check(&old, b->id.run_id, b->id.rank, b->path) != MP_OK) {
        H5Fclose(*src_p);
        *src_p = -1;
        return MP_ERR;
    }
    if (old.stage == b->id.stage && old.pp == b->id.pp && old.first <= first_step && first_step <= old.last_done + 1) {
        b->id.first = old.first;
        return MP_OK;
    }
    MP_WARN("boundary log %s: steps %ld..%ld of stage %d of %d dropped: this run logs stage %d of %d from step %ld",
            b->path, old.first, old.last_done, old.stage, old.pp, b->id.stage, b->id.pp, first_step);
    return MP_OK;
}

/* The file the writer appends to: what to keep of an old one, rewritten under NAME.tmp, published. */
static int log_file_start(bndlog_t *b, long first_step, int fresh)
{
    hid_t src = -1;
    long keep_hi;
    if (publish_tmp_name(b->path, b->tmp, sizeof b->tmp) != MP_OK) return MP_ERR;
    if (log_existing(b, first_step, fresh, &src, &keep_hi) != MP_OK) return MP_ERR;
    b->id.last_done = first_step - 1;
    int rc = publish_tmp_prepare(b->tmp) == MP_OK ? file_rewrite(b, src, b->id.first, keep_hi) : MP_ERR;
    if (src >= 0) H5Fclose(src);
    if (rc != MP_OK) {
        publish_discard(b->tmp);
        return MP_ERR;
    }
    if (publish_commit(b->tmp, b->path) != MP_OK) return MP_ERR;
    return file_open_rw(b);
}

static int cfg_check(const bndlog_cfg_t *c)
{
    size_t id_len = c->run_id ? strlen(c->run_id) : 0;
    if (!c->dir || !*c->dir || id_len == 0 || id_len > BNDLOG_RUN_ID_MAX || c->rank < 0 || c->pp < 1 ||
        c->stage < 0 || c->stage >= c->pp || c->first_step < 0 || c->first_step == LONG_MAX || c->max_queue_bytes == 0)
        return MP_FAIL("boundary log: bad configuration (dir %s, run id of %zu characters, rank %d, stage %d of %d, "
                       "first step %ld, queue %zu bytes)",
                       c->dir ? c->dir : "(none)", id_len, c->rank, c->stage, c->pp, c->first_step, c->max_queue_bytes);
    return MP_OK;
}

static int sync_init(bndlog_t *b)
{
    if (pthread_mutex_init(&b->mu, NULL) != 0) return MP_ERR;
    if (pthread_cond_init(&b->cv_work, NULL) == 0) {
        if (pthread_cond_init(&b->cv_done, NULL) == 0) {
            if (pthread_cond_init(&b->cv_gate, NULL) == 0) return MP_OK;
            pthread_cond_destroy(&b->cv_done);
        }
        pthread_cond_destroy(&b->cv_work);
    }
    pthread_mutex_destroy(&b->mu);
    return MP_ERR;
}

static void sync_destroy(bndlog_t *b)
{
    pthread_cond_destroy(&b->cv_gate);
    pthread_cond_destroy(&b->cv_done);
    pthread_cond_destroy(&b->cv_work);
    pthread_mutex_destroy(&b->mu);
}

int bndlog_open(const bndlog_cfg_t *cfg, bndlog_t **log_p)
{
    if (cfg_check(cfg) != MP_OK) return MP_ERR;
    bndlog_t *b = MP_CALLOC(1, sizeof *b);
    if (!b) return MP_ERR;
    b->f = b->grp = -1;
    b->fd = -1;
    b->max_queue = cfg->max_queue_bytes;
    b->id = (bnd_ident_t){.format = BNDLOG_FORMAT, .rank = cfg->rank, .stage = cfg->stage, .pp = cfg->pp,
                          .first = cfg->first_step};
    snprintf(b->id.run_id, sizeof b->id.run_id, "%s", cfg->run_id);
    if (bndlog_path(cfg->dir, cfg->rank, b->path, sizeof b->path) != MP_OK || log_dir_make(b->path) != MP_OK)
        goto err_free;
    h5_quiet_t q;
    h5_quiet_begin(&q);
    int rc = log_file_start(b, cfg->first_step, cfg->fresh);
    h5_quiet_end(&q);
    if (rc != MP_OK) goto err_free;
    b->next_done = cfg->first_step;
    if (sync_init(b) != MP_OK) {
        MP_ERROR("boundary log %s: cannot create the writer's locks", b->path);
        goto err_close_file;
    }
    if (pthread_create(&b->thread, NULL, writer_main, b) != 0) {
        MP_ERROR("boundary log %s: cannot start the writer thread", b->path);
        goto err_destroy_sync;
    }
    b->thread_up = 1;
    *log_p = b;
    return MP_OK;
err_destroy_sync:
    sync_destroy(b);
err_close_file:
    H5Fclose(b->f);
err_free:
    free(b);
    return MP_ERR;
}

int bndlog_close(bndlog_t *b)
{
    if (!b) return MP_OK;
    pthread_mutex_lock(&b->mu);
    b->paused = 0; /* a pause held now would keep the writer from draining the queue */
    b->stop = 1;
    pthread_cond_broadcast(&b->cv_gate);
    pthread_cond_broadcast(&b->cv_work);
    pthread_mutex_unlock(&b->mu);
    pthread_join(b->thread, NULL);
    int rc = b->failed ? failed_locked(b) : MP_OK; /* the writer is gone: no lock needed */
    h5_quiet_t q;
    h5_quiet_begin(&q);
    group_close(b);
    if (b->f >= 0 && !b->failed && stats_record(b) != MP_OK) rc = MP_ERR;
    if (b->f >= 0 && file_close(b->f, b->failed, b->path) != MP_OK) rc = MP_ERR;
    h5_quiet_end(&q);
    for (bnd_entry_t *e = b->spare, *next; e; e = next) {
        next = e->next;
        free(e->data);
        free(e);
    }
    sync_destroy(b);
    free(b);
    return rc;
}

/* ---- reading ---- */

int bndlog_read_open(const char *path, const char *run_id, int rank, bndlog_reader_t **r_p)
{
    struct stat st;
    if (lstat(path, &st) != 0) return MP_FAIL("boundary log %s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return MP_FAIL("boundary log %s: not a regular file: refused", path);
    bndlog_reader_t *r = MP_CALLOC(1, sizeof *r);
    if (!r) return MP_ERR;
    if (snprintf(r->path, sizeof r->path, "%s", path) >= (int)sizeof r->path) {
        free(r);
        return MP_FAIL("boundary log: the name %s is too long", path);
    }
    h5_quiet_t q;
    h5_quiet_begin(&q);
    int rc = file_open_ident(path, H5F_ACC_RDONLY, &r->f, &r->id, NULL);
    if (rc == MP_OK && (rc = ident_check(&r->id, run_id, rank, path)) != MP_OK) H5Fclose(r->f);
    h5_quiet_end(&q);
    if (rc != MP_OK) {
        free(r);
        return MP_ERR;
    }
    *r_p = r;
    return MP_OK;
}

void bndlog_read_info(const bndlog_reader_t *r, bndlog_info_t *info_p)
{
    *info_p = (bndlog_info_t){.rank = r->id.rank, .stage = r->id.stage, .pp = r->id.pp,
                              .first_step = r->id.first, .last_step = r->id.last_done};
}

long bndlog_last_step(const bndlog_reader_t *r) { return r->id.last_done; }

/* Opens dataset name of step's group; 0 with *d_p, 1 when either is missing, MP_ERR on errors. */
static int dataset_open(const bndlog_reader_t *r, long step, const char *name, hid_t *d_p)
{
    char gname[32];
    htri_t ex;
    hid_t g = -1;
    step_name(step, gname, sizeof gname);
    H5_TRY(ex = H5Lexists(r->f, gname, H5P_DEFAULT), err, r->path);
    if (!ex) return 1;
    H5_TRY(g = H5Gopen2(r->f, gname, H5P_DEFAULT), err, r->path);
    H5_TRY(ex = H5Lexists(g, name, H5P_DEFAULT), err_close_group, r->path);
    if (ex) H5_TRY(*d_p = H5Dopen2(g, name, H5P_DEFAULT), err_close_group, r->path);
    H5Gclose(g);
    return ex ? 0 : 1;
err_close_group:
    H5Gclose(g);
err:
    return MP_ERR;
}

/* Reads a whole 1-D float dataset of elements of size elem (4: float, 8: double) into a new buffer
 * *buf_p (freed by the caller) and its stored checksum into *sum_p: exactly *n_io elements, or
 * (*n_io == 0) as many as it holds, at least one, *n_io set. words names the entry in messages. */
static int dataset_read(const bndlog_reader_t *r, hid_t d, size_t *n_io, size_t elem, void **buf_p, uint64_t *sum_p,
                        const char *words)
{
    int rc = MP_ERR;
    hid_t s = -1, t = -1;
    hsize_t dim = 0;
    void *buf = NULL;
    const size_t n = *n_io;
    H5_TRY(s = H5Dget_space(d), out, r->path);
    H5_TRY(t = H5Dget_type(d), out, r->path);
    const int ndims = H5Sget_simple_extent_ndims(s);
    const H5T_class_t cls = H5Tget_class(t);
    if (ndims != 1 || H5Sget_simple_extent_dims(s, &dim, NULL) != 1 || cls != H5T_FLOAT || H5Tget_size(t) != elem ||
        (n ? dim != n : dim == 0) || dim > SIZE_MAX / elem) {
        /* say what it holds: a shape or a type we never write is someone else's entry */
        const hssize_t pts = H5Sget_simple_extent_npoints(s);
        const char *what = cls == H5T_FLOAT ? "floats" : cls == H5T_INTEGER ? "integers" : cls == H5T_STRING
                           ? "strings" : "values of another type";
        char want[64];
        if (n) snprintf(want, sizeof want, "%zu floats of %zu bytes", n, elem);
        else snprintf(want, sizeof want, "floats of %zu bytes", elem);
        MP_ERROR("boundary log %s: %s: holds %lld %s of %zu bytes in %d dimension(s), %s in one expected (short, "
                 "damaged or not written by MindPipe)", r->path, words, (long long)pts, what, H5Tget_size(t), ndims,
                 want);
        goto out;
    }
    if (!(buf = MP_MALLOC((size_t)dim * elem))) goto out;
    H5_TRY(H5Dread(d, elem == 4 ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf), out,
           r->path);
    char why[128];
    const int have = h5_attr_get(d, "checksum", H5T_NATIVE_UINT64, sum_p, why, sizeof why);
    if (have == MP_ERR) {
        MP_ERROR("boundary log %s: %s: its checksum %s", r->path, words, why);
        goto out;
    }
    if (!have) {
        MP_ERROR("boundary log %s: %s: no checksum", r->path, words);
        goto out;
    }
    *n_io = (size_t)dim;
    *buf_p = buf;
    buf = NULL;
    rc = MP_OK;
out:
    free(buf);
    if (t >= 0) H5Tclose(t);
    if (s >= 0) H5Sclose(s);
    return rc;
}

/* The common part of the readers: the entry's n values (n == 0: as many as it holds, *n_io set) in
 * a new buffer *buf_p, returned only when the entry verified. */
static int entry_get(bndlog_reader_t *r, long step, int scalars, int mb, int chunk, int kind, size_t *n_io,
                     void **buf_p)
{
    char words[128], name[64];
    entry_words(scalars, step, mb, chunk, kind, words, sizeof words);
    if (step < r->id.first)
        return MP_FAIL("boundary log %s: %s: pruned (the log starts at step %ld)", r->path, words, r->id.first);
    if (step > r->id.last_done)
        return MP_FAIL("boundary log %s: %s: the step is not complete (the last complete step is %ld)", r->path,
                       words, r->id.last_done);
    const size_t elem = scalars ? sizeof(double) : sizeof(float);
    void *buf = NULL;
    entry_name(scalars, kind, mb, chunk, name, sizeof name);
    uint64_t stored = 0;
    hid_t d = -1;
    h5_quiet_t q;
    h5_quiet_begin(&q);
    int rc = dataset_open(r, step, name, &d);
    if (rc == 1) rc = MP_FAIL("boundary log %s: %s: missing", r->path, words);
    else if (rc == MP_OK) rc = dataset_read(r, d, n_io, elem, &buf, &stored, words);
    if (d >= 0) H5Dclose(d);
    h5_quiet_end(&q);
    if (rc == MP_OK) {
        uint64_t sum = (scalars ? scalars_checksum(buf, *n_io) : ckpt_checksum(buf, *n_io, 0)) +
                       entry_key(&r->id, scalars, step, mb, chunk, kind);
        if (sum != stored)
            rc = MP_FAIL("boundary log %s: %s: checksum mismatch (stored %016llx, data and name give %016llx): "
                         "damaged, or an entry of another step, kind, rank or run", r->path, words,
                         (unsigned long long)stored, (unsigned long long)sum);
    }
    if (rc == MP_OK) *buf_p = buf;
    else free(buf);
    return rc;
}

static int kind_check(const bndlog_reader_t *r, const char *fn, long step, int mb, int chunk, int kind, size_t n)
{
    if (kind < BND_ACT || kind > BND_HEAD || mb < 0 || chunk < 0 || n == 0 || n > SIZE_MAX / sizeof(float))
        return MP_FAIL("boundary log %s: %s(step %ld, micro-batch %d, chunk %d, kind %d, %zu values): bad arguments",
                       r->path, fn, step, mb, chunk, kind, n);
    return MP_OK;
}

int bndlog_get(bndlog_reader_t *r, long step, int mb, int chunk, int kind, size_t n, float *out_p)
{
    if (kind_check(r, "bndlog_get", step, mb, chunk, kind, n) != MP_OK) return MP_ERR;
    void *buf = NULL;
    if (entry_get(r, step, 0, mb, chunk, kind, &n, &buf) != MP_OK) return MP_ERR;
    memcpy(out_p, buf, n * sizeof(float));
    free(buf);
    return MP_OK;
}

int bndlog_get_rows(bndlog_reader_t *r, long step, int mb, int chunk, int kind, size_t rows, size_t width,
                    float *out_p)
{
    if (kind_check(r, "bndlog_get_rows", step, mb, chunk, kind, rows) != MP_OK || width == 0 ||
        rows > (size_t)BNDLOG_ROWS_MAX || width > SIZE_MAX / sizeof(float) / rows)
        return MP_FAIL("boundary log %s: bndlog_get_rows(step %ld, %zu rows of %zu): bad arguments", r->path, step, rows,
                       width);
    size_t n = 0;
    void *raw = NULL;
    if (entry_get(r, step, 0, mb, chunk, kind, &n, &raw) != MP_OK) return MP_ERR;
    float *buf = raw;
    /* k, then k increasing whole row numbers below rows, then k rows */
    const size_t k = (n - 1) / (width + 1);
    int ok = (n - 1) % (width + 1) == 0 && buf[0] == (float)k && k <= rows;
    for (size_t j = 0; ok && j < k; j++) {
        const float id = buf[1 + j];
        ok = id >= 0 && id < (float)rows && id == (float)(size_t)id && (j == 0 || id > buf[j]);
    }
    if (!ok) {
        free(buf);
        return MP_FAIL("boundary log %s: step %ld, micro-batch %d, chunk %d, %s: %zu values are no rows of width %zu "
                       "below row %zu (damaged, or written by another model)", r->path, step, mb, chunk, kind_word(kind),
                       n, width, rows);
    }
    memset(out_p, 0, rows * width * sizeof(float));
    for (size_t j = 0; j < k; j++)
        memcpy(out_p + (size_t)buf[1 + j] * width, buf + 1 + k + j * width, width * sizeof(float));
    free(buf);
    return MP_OK;
}

int bndlog_get_scalars(bndlog_reader_t *r, long step, int n, double *out_p)
{
    if (n <= 0) return MP_FAIL("boundary log %s: bndlog_get_scalars(step %ld, %d values): bad arguments", r->path, step, n);
    size_t len = (size_t)n;
    void *buf = NULL;
    if (entry_get(r, step, 1, 0, 0, 0, &len, &buf) != MP_OK) return MP_ERR;
    memcpy(out_p, buf, len * sizeof(double));
    free(buf);
    return MP_OK;
}

void bndlog_read_close(bndlog_reader_t *r)
{
    if (!r) return;
    h5_quiet_t q;
    h5_quiet_begin(&q);
    H5Fclose(r->f);
    h5_quiet_end(&q);
    free(r);
}
