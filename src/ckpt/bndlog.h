/* The boundary log (issue 33, "zero lost steps"; DESIGN.md §10 "Replay"): every pipeline stage
 * writes down what it sends across its boundaries, so that a stage lost with its node can later be
 * recomputed from the newest checkpoint by replaying exactly what it had received. Logging by the
 * sender means the log of what a dead rank received lives on its neighbours' nodes.
 *
 * One HDF5 file per rank, written by that process alone (the sec2 driver, never MPI-IO):
 *     RUN/bndlog/bnd-r<rank>.h5
 *     /                      attributes: bndlog_format (int, BNDLOG_FORMAT), run_id (string),
 *                            rank, stage, pp (int), first_step, last_done (int64)
 *     /step_%08ld/           one group per step
 *         act_mb<m>_c<c>     float32 (n): activations of micro-batch m, chunk c, sent downstream
 *         grad_mb<m>_c<c>    float32 (n): gradients of micro-batch m, chunk c, sent upstream
 *         tied_mb0_c0        float32 (1 + k·(W+1)): the first stage's part of the tied embedding's
 *                            gradient as its k rows (of width W) that are not all +0.0 bits: k, the k
 *                            row numbers (exact in float32: rows < 2^24), then the rows (bndlog_put_rows)
 *         head_mb<m>_c<c>    float32 (n): the last stage's input to the tied LM head (the final layer
 *                            norm's output) of micro-batch m, from which a replay of the first stage
 *                            recomputes that stage's part of the tied gradient
 *         scalars            float64 (k): the step's agreed scalars (loss scale, clip factor, ...)
 * Every dataset carries attribute "checksum" (uint64): ckpt_checksum of its elements (scalars:
 * of their bits taken as 2k floats) plus a key of the run id, the rank and the entry's step, kind,
 * micro-batch and chunk, verified on every read: an entry moved or copied elsewhere fails it. The complete steps are exactly
 * [first_step, last_done]: a step is marked (last_done) only after its data and the file's
 * metadata were flushed and fsynced, so a reader never trusts a half-written step. Steps below
 * first_step were pruned.
 *
 * The writer: bndlog_put copies a tensor into a bounded queue and returns; one thread per log
 * writes the queue in order (HDF5 calls, flushes, fsyncs). A failure in that thread (a full disk)
 * is printed when it happens, stops the logging, and is returned by every later call on the log.
 *
 * THE THREAD RULE. Debian's parallel libhdf5 is not built thread-safe (H5is_library_threadsafe
 * says 0): no two threads may be inside HDF5 at once. While a log is open, the thread that owns it
 * brackets every other HDF5 call of the process (checkpoints, data, a reader) with bndlog_pause and
 * bndlog_resume: pause returns once the writer is outside HDF5 and keeps it out (it may finish an
 * fsync meanwhile: that is no HDF5 call); puts are still accepted while paused. One thread calls
 * the writer API (the training loop's); the writer thread is internal. Close the log before the
 * process exits: libhdf5's atexit handler must not run beside the writer. */
#ifndef MP_BNDLOG_H
#define MP_BNDLOG_H

#include <stddef.h>

#define BNDLOG_FORMAT 3 /* 3: an entry's checksum covers its name, rank and run (bndlog.c) */
#define BNDLOG_ROWS_MAX (1L << 24) /* row numbers stored exactly as float32 */

/* What crossed a boundary: activations sent downstream, gradients sent upstream, the first stage's
 * part of the tied embedding's gradient (all-reduced with the last stage's; mb and chunk 0; logged
 * by rows), or the last stage's input to the tied head (per micro-batch, chunk: the last chunk). */
enum { BND_ACT = 0, BND_GRAD = 1, BND_TIED = 2, BND_HEAD = 3 };

typedef struct {
    const char *dir;        /* the run directory: the log is DIR/bndlog/bnd-r<rank>.h5 */
    const char *run_id;     /* the run's id (ckpt.h: 32 hex digits); a file of another run is refused */
    int rank, stage, pp;    /* this process's world rank, its pipeline stage, the pipeline depth */
    long first_step;        /* the first step this run will log: 0, or the step it resumed at */
    int fresh;              /* 1: no replay can need this rank's steps below first_step (its state
                               comes from a checkpoint or a replica's snapshot, not its own): a log
                               already there is not opened (bndlog_open) */
    size_t max_queue_bytes; /* data waiting for the writer; past it put waits (> 0); the writer keeps
                               as much again in spare buffers for reuse */
} bndlog_cfg_t;

typedef struct {
    size_t bytes;        /* tensor and scalar bytes written to the file */
    long entries;        /* tensors and scalar sets written */
    long steps;          /* steps marked complete */
    long put_waits;      /* puts that found the queue full and waited */
    double put_wait_s;   /* seconds they waited: what the log cost compute */
    double pause_wait_s; /* seconds bndlog_pause waited for the writer to leave HDF5 */
    double writer_s;     /* seconds the writer thread spent working (HDF5 calls and fsyncs) */
    double writer_cpu_s; /* CPU seconds of the writer thread (set when it stops: at close) */
    double put_s;        /* seconds the caller spent in the puts (the rows' scan, the copies, waits) */
    size_t queue_peak;   /* most bytes ever queued (above max_queue_bytes only while paused) */
} bndlog_stats_t;

typedef struct bndlog_s bndlog_t;

/* DIR/bndlog/bnd-r<rank>.h5 into path_p (n bytes). MP_OK, or MP_ERR naming dir when it does not fit. */
int bndlog_path(const char *dir, int rank, char *path_p, size_t n);

/* Opens this rank's log for writing and starts its writer thread; DIR/bndlog is created if
 * missing (a link or a file under that name is refused). With cfg->fresh, a log already there is
 * moved aside unopened to NAME.old (over an earlier NAME.old: one generation kept for a look): a
 * rank that lost its state may have been killed inside its writer's flush, which tears the file,
 * and libhdf5 is not trusted to open a torn file without crashing. Otherwise it is read first:
 *   - another run's, rank's or format's: refused, naming the file and the key, left untouched;
 *   - one that cannot be read (damaged, truncated: a kill inside its flush tears it): moved aside to
 *     NAME.damaged (NAME.damaged.K, never over an earlier one), said in a warning, and a new log
 *     starts at first_step (a later replay that needs the steps before falls back to the checkpoint);
 *   - this run's, same stage and pp, whose complete steps reach first_step - 1: its steps below
 *     first_step are kept (a resumed run keeps the log back to its last checkpoint); otherwise
 *     it is replaced by an empty log starting at first_step (a warning says what was dropped).
 * Every file is written under NAME.tmp and published (publish.h) before the writer appends to it.
 * MP_OK with the log in *log_p, or MP_ERR (message printed, nothing left running). Main thread,
 * no other HDF5 call in flight. */
int bndlog_open(const bndlog_cfg_t *cfg, bndlog_t **log_p);

/* Queues a copy of x (n floats, host memory) sent at step (>= the step next to be marked) for
 * micro-batch mb and chunk (0 without interleaving) in direction kind (BND_ACT, BND_GRAD), and
 * returns; x may be reused at once. Waits while the queue lacks room for it (one larger than
 * max_queue_bytes waits for an empty queue), never while paused: that could only deadlock, so the
 * queue then grows past the bound. An entry logged twice fails the writer. MP_OK, or MP_ERR: bad
 * arguments, or the writer failed (now or earlier). */
int bndlog_put(bndlog_t *log, long step, int mb, int chunk, int kind, const float *x, size_t n);

/* Like bndlog_put for x of rows × width floats, of which only the rows holding any bit other than
 * +0.0's are queued (with their row numbers): the embedding's gradient touches only the rows of the
 * batch's tokens (at GPT-2's vocabulary about 1/100 of them). rows <= BNDLOG_ROWS_MAX. The scan
 * and gather run on the caller's thread. MP_OK or MP_ERR as bndlog_put. */
int bndlog_put_rows(bndlog_t *log, long step, int mb, int chunk, int kind, const float *x, size_t rows, size_t width);

/* Queues the step's agreed scalars (n > 0 doubles), once per step, like bndlog_put. */
int bndlog_put_scalars(bndlog_t *log, long step, const double *v, int n);

/* Queues the mark of step as complete: the writer flushes and fsyncs the file, then records
 * last_done = step, then flushes and fsyncs again. Steps are marked one after another (step is
 * the last marked + 1, first_step at first); put every entry of the step before. MP_OK, or
 * MP_ERR (out of order, or the writer failed). */
int bndlog_step_done(bndlog_t *log, long step);

/* Queues the removal of the steps below below_step (at a checkpoint of below_step steps; at most
 * the step next to be marked). HDF5 does not give back the space of deleted objects, so the writer
 * copies the steps kept (normally none or the one in flight) into a new file, NAME.tmp, publishes it
 * over the old one and appends to it: the file holds the log since the newest checkpoint, and a
 * crash at any point leaves the old file or the new one, whole. MP_OK or MP_ERR as above. */
int bndlog_prune(bndlog_t *log, long below_step);

/* Waits until the writer has handled everything queued. MP_OK, or MP_ERR when the writer failed
 * (or the log is paused: waiting could not end). */
int bndlog_sync(bndlog_t *log);

/* The thread rule (above): pause returns once the writer is outside HDF5 and keeps it out until
 * resume. Pauses nest. */
void bndlog_pause(bndlog_t *log);
void bndlog_resume(bndlog_t *log);

/* The counters so far into *st_p. */
void bndlog_stats(bndlog_t *log, bndlog_stats_t *st_p);

/* Ends a pause if one is held, writes everything queued, stops the writer, records the counters
 * bytes, steps, writer_cpu_s and put_s as root attributes stats_* (float64: what the log cost this
 * rank, for a reader or a benchmark), closes the file and frees the log (NULL: nothing). Steps not marked stay unmarked. MP_OK, or MP_ERR when anything failed,
 * now or earlier (reported once). */
int bndlog_close(bndlog_t *log);

/* ---- reading (replay) ---- */

typedef struct bndlog_reader_s bndlog_reader_t;

typedef struct {
    int rank, stage, pp;
    long first_step, last_step; /* the complete steps; none when last_step < first_step */
} bndlog_info_t;

/* Opens a log to read (whose writer is closed: replay reads at start). Refused (MP_ERR, message
 * naming the file and, for a foreign file, the key and both values): not a regular file, not an
 * HDF5 file HDF5 can open (truncated, damaged), another format, run id or rank, attributes out of
 * range. MP_OK with the reader in *r_p. Under the thread rule like any HDF5 call. */
int bndlog_read_open(const char *path, const char *run_id, int rank, bndlog_reader_t **r_p);

void bndlog_read_info(const bndlog_reader_t *r, bndlog_info_t *info_p);

/* The last step marked complete (first_step - 1 when none). */
long bndlog_last_step(const bndlog_reader_t *r);

/* Reads the n floats logged for (step, mb, chunk, kind) into out_p after verifying the checksum.
 * MP_ERR, with a message naming the file, step, micro-batch, chunk and kind, when the step is not
 * complete or was pruned, the entry is missing, holds another number of elements, or fails its
 * checksum; out_p is written only on MP_OK. */
int bndlog_get(bndlog_reader_t *r, long step, int mb, int chunk, int kind, size_t n, float *out_p);

/* Reads an entry logged by bndlog_put_rows into out_p (rows × width floats; the rows not logged are
 * +0.0), after verifying the checksum and that its row numbers are whole, increasing and below rows.
 * MP_ERR as bndlog_get (also when the entry's size does not fit width); out_p written only on MP_OK. */
int bndlog_get_rows(bndlog_reader_t *r, long step, int mb, int chunk, int kind, size_t rows, size_t width,
                    float *out_p);

/* Reads the step's n scalars like bndlog_get. */
int bndlog_get_scalars(bndlog_reader_t *r, long step, int n, double *out_p);

void bndlog_read_close(bndlog_reader_t *r);

#endif
