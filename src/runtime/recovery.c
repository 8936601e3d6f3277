#include "recovery.h"

#include <errno.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bndlog.h"
#include "check.h"
#include "ckpt.h"
#include "perf.h"
#include "publish.h"
#include "run_ckpt.h"
#include "signals.h"

/* The host buffers a snapshot is read into: weights, m, v, and 2bw's previous weights. */
#define REC_BUFS 4

/* What the writer may hold before a put waits for it: a few steps of the small shapes, a fraction
 * of one step of 124M's (whose activations are 24 MiB per micro-batch per boundary). */
#define RECOVERY_QUEUE_BYTES ((size_t)256 << 20)

struct recovery_s {
    bndlog_t *log;                         /* this rank's boundary log (NULL: none) */
    int log_failed;                        /* the log failed: said once, logging stopped */
    exec_bnd_t bnd;
    bndlog_reader_t *rd[SIM_MAX_STAGES];   /* a replay: by stage, the logs it reads */
    int scal_stage;                        /* ... the stage whose log gives the scalars */
    unsigned char live[SIM_MAX_STAGES];    /* ... the stages it exchanges with live (they replay too) */
    int failed;                            /* ... a message it needed was missing or damaged */
    int own_snap;                          /* this rank resumed from its own snapshot: its log is kept */
    long from;                             /* the recovery's checkpoint step (a replay moves r->step on) */
};

static struct recovery_s *rec_get(run_t *r)
{
    if (!r->rec && !(r->rec = MP_CALLOC(1, sizeof *r->rec))) MP_ABORT("out of memory for recovery.log's state");
    return r->rec;
}

/* (Balance, live migration and supernets never get here: the deck refuses them with recovery.log,
 * compose.c's pairs.) */
const char *recovery_unsupported(const run_stage_t *st)
{
    if (st->p2p_nccl) return "NCCL pipeline messages (only MPI's are logged)";
    /* emu runs the device path in CI (host copies of device memory for the tied part and the head
     * inputs, the replay's sums on host copies); on cuda those copies would stall the stream and the
     * path has not run on a GPU */
    if (!be_kernels_read_host(&st->be))
        return "train.device=cuda (the device path of the log runs on emu; on a GPU it is not tried yet)";
    return NULL;
}

/* The log's failure: said once; from then on nothing is logged (a lost rank falls back to the
 * checkpoint: the next resume finds the log short). */
static void rec_log_failed(run_t *r)
{
    struct recovery_s *c = r->rec;
    if (c->log_failed) return;
    c->log_failed = 1;
    runlog_printf(&r->files.log, "warning: rank %d: recovery.log: the boundary log failed (above): nothing more is logged, "
                  "so a lost rank now costs a restart from the checkpoint", r->lay.rank);
}

static int rec_kind(int exec_kind)
{
    return exec_kind == EXEC_BND_ACT    ? BND_ACT
           : exec_kind == EXEC_BND_GRAD ? BND_GRAD
           : exec_kind == EXEC_BND_TIED ? BND_TIED
                                        : BND_HEAD;
}

static void rec_sent(void *ctx, long t, int mb, int chunk, int kind, const float *x, size_t n)
{
    run_t *r = ctx;
    struct recovery_s *c = r->rec;
    if (!c->log || c->log_failed) return;
    const size_t C = (size_t)r->st.model.cfg.dim;
    /* the embedding's gradient by rows: only the rows of the step's tokens are not zero */
    const int rc = kind == EXEC_BND_TIED ? bndlog_put_rows(c->log, t, 0, 0, BND_TIED, x, n / C, C)
                                         : bndlog_put(c->log, t, mb < 0 ? 0 : mb, chunk < 0 ? 0 : chunk, rec_kind(kind), x, n);
    if (rc != MP_OK) rec_log_failed(r);
}

/* A replay's message: the sending chunk's stage's log (the tied part: the first stage's). */
static void rec_recv(void *ctx, long t, int mb, int chunk, int kind, float *x, size_t n)
{
    run_t *r = ctx;
    struct recovery_s *c = r->rec;
    const int pp = r->lay.pp;
    /* the tied part is read by the last stage only (the first recomputes the head's from HEAD entries) */
    const int stage = kind == EXEC_BND_TIED ? 0 : sched_chunk_stage(r->deck.parallel.schedule_kind, chunk, pp);
    int rc = MP_ERR;
    if (!c->rd[stage]) {
        MP_ERROR("replay: stage %d reads no log of stage %d (a bug)", r->lay.stage, stage);
    } else {
        if (c->log) bndlog_pause(c->log); /* the thread rule: this rank's own writer is running */
        const size_t C = (size_t)r->st.model.cfg.dim;
        rc = kind == EXEC_BND_TIED ? bndlog_get_rows(c->rd[stage], t, 0, 0, BND_TIED, n / C, C, x)
                                   : bndlog_get(c->rd[stage], t, mb < 0 ? 0 : mb, chunk < 0 ? 0 : chunk, rec_kind(kind), n, x);
        if (c->log) bndlog_resume(c->log);
    }
    if (rc != MP_OK) {
        c->failed = 1;
        memset(x, 0, n * sizeof *x);
    }
}

int recovery_open(run_t *r)
{
    if (!r->deck.recovery.log || (r->rec && r->rec->log)) return MP_OK;
    const char *why = recovery_unsupported(&r->st);
    if (why) {
        if (r->lay.rank == 0)
            runlog_printf(&r->files.log, "recovery.log=1: nothing is logged on this layout: %s; a lost rank costs a restart "
                          "from the checkpoint", why);
        return MP_OK;
    }
    struct recovery_s *c = rec_get(r);
    const bndlog_cfg_t cfg = {.dir = r->files.out_dir, .run_id = r->files.run_id, .rank = r->lay.rank, .stage = r->lay.stage, .pp = r->lay.pp,
                              .first_step = r->step, .max_queue_bytes = RECOVERY_QUEUE_BYTES,
                              /* only a survivor's log is opened again: any other rank resumes from a
                                 checkpoint (or a replica), and a lost one may have torn its log */
                              .fresh = !c->own_snap};
    if (bndlog_open(&cfg, &c->log) != MP_OK) return MP_ERR;
    c->bnd = (exec_bnd_t){rec_sent, rec_recv, r};
    exec_set_bnd(&r->st.exec, &c->bnd, 0, NULL);
    return MP_OK;
}

int recovery_close(run_t *r)
{
    struct recovery_s *c = r->rec;
    if (!c) return MP_OK;
    exec_set_bnd(&r->st.exec, NULL, 0, NULL);
    int rc = MP_OK;
    if (c->log) {
        bndlog_stats_t st;
        bndlog_stats(c->log, &st);
        rc = bndlog_close(c->log);
        c->log = NULL;
        if (rc == MP_OK && r->lay.rank == 0)
            runlog_printf(&r->files.log, "recovery.log: rank 0 logged %ld entries, %.1f MiB over %ld steps; puts waited %.3f s "
                          "for the writer, which worked %.3f s", st.entries, (double)st.bytes / 1048576.0, st.steps,
                          st.put_wait_s, st.writer_s);
    }
    for (int s = 0; s < SIM_MAX_STAGES; s++) bndlog_read_close(c->rd[s]);
    free(c);
    r->rec = NULL;
    return rc;
}

void recovery_step_done(run_t *r, long t, double gnorm, double loss)
{
    struct recovery_s *c = r->rec;
    if (!c || !c->log || c->log_failed) return;
    const double v[2] = {gnorm, loss};
    if (bndlog_put_scalars(c->log, t, v, 2) != MP_OK || bndlog_step_done(c->log, t) != MP_OK) rec_log_failed(r);
}

void recovery_prune(run_t *r)
{
    struct recovery_s *c = r->rec;
    if (!c || !c->log || c->log_failed) return;
    if (bndlog_prune(c->log, r->step) != MP_OK) rec_log_failed(r);
}

void recovery_pause(run_t *r)
{
    if (r->rec && r->rec->log) bndlog_pause(r->rec->log);
}

void recovery_resume(run_t *r)
{
    if (r->rec && r->rec->log) bndlog_resume(r->rec->log);
}

/* RUN/recovery/snap-r<rank>.h5 */
static void rec_snap_path(const run_files_t *files, int rank, char *path_p, size_t n)
{
    snprintf(path_p, n, "%s/recovery/snap-r%05d.h5", files->out_dir, rank);
}

/* The table a snapshot is written and read by: the stage's own, every entry its own to write (the
 * checkpoint writer leaves the last stage's copy of the tied embedding to the first stage's; a
 * snapshot holds this stage alone). */
static param_table_t rec_snap_table(const run_stage_t *st)
{
    param_table_t t = st->model.tab;
    t.has_embed = 1;
    return t;
}

/* The layout a snapshot is taken on: only the same one takes it back. */
static void rec_layout(const run_layout_t *lay, const run_stage_t *st, int rank, char *buf, size_t n)
{
    snprintf(buf, n, "dp=%d tp=%d pp=%d sp=%d v=%d rank=%d", lay->grid.size[GRID_DP], lay->grid.size[GRID_TP],
             lay->grid.size[GRID_PP], lay->grid.size[GRID_SP], st->model.tab.nchunks, rank);
}

/* The range of the stage's flat buffer whose AdamW moments this rank holds: all of it, or under
 * ZeRO-1 its replica's shard (m and v then hold s1 − s0 floats from s0). */
static void rec_moments_range(const deck_t *d, const run_stage_t *st, size_t *s0_p, size_t *s1_p)
{
    *s0_p = 0, *s1_p = st->model.tab.total;
    if (st->dp_on && d->parallel.zero) dp_shard_range(&st->dp, s0_p, s1_p);
}

/* This rank's state at r->step: weights and AdamW's moments of its shard, laid out by its own table,
 * one process (ckpt_write over MPI_COMM_SELF: a temporary name, fsync, rename). */
static int rec_snapshot_write(run_t *r)
{
    char dir[4200], path[4300];
    struct stat sb;
    snprintf(dir, sizeof dir, "%s/recovery", r->files.out_dir);
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) return MP_FAIL("cannot create %s: %s", dir, strerror(errno));
    /* never through a planted link: the snapshot goes where the run directory says */
    if (lstat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return MP_FAIL("%s is not a directory (a link or a file under that name): the snapshot is not written", dir);
    rec_snap_path(&r->files, r->lay.rank, path, sizeof path);
    model_t *m = &r->st.model;
    const size_t n = m->tab.total;
    float *host[3] = {run_ckpt_host_copy(&r->st, m->params, n), NULL, NULL};
    size_t s0, s1;
    rec_moments_range(&r->deck, &r->st, &s0, &s1);
    if (s0 == 0 && s1 == n) {
        host[1] = run_ckpt_host_copy(&r->st, m->m, n), host[2] = run_ckpt_host_copy(&r->st, m->v, n);
    } else { /* ZeRO-1: this replica's shard of the moments at its place, zeros elsewhere */
        for (int k = 1; k < 3; k++) {
            if (!(host[k] = calloc(n ? n : 1, sizeof(float)))) MP_ABORT("out of memory writing the snapshot");
            be_to_host(&r->st.be, host[k] + s0, k == 1 ? m->m : m->v, (s1 - s0) * sizeof(float));
        }
    }
    ckpt_state_t st = {.step = r->step, .adam_t = r->adam_t, .seed = r->deck.train.seed,
                       .data_cursor = r->step * r->deck.train.batch, .weight_versions = 1, .tok = r->data_tok};
    rec_layout(&r->lay, &r->st, r->lay.rank, st.layout, sizeof st.layout);
    snprintf(st.schedule, sizeof st.schedule, "%s", sched_kind_names[r->deck.parallel.schedule_kind]);
    snprintf(st.run_id, sizeof st.run_id, "%s", r->files.run_id);
    const param_table_t tab = rec_snap_table(&r->st);
    /* 2bw: both weight versions (W(t), which the next step's forwards read, and W(t+1)) */
    float *old = m->params_old ? run_ckpt_host_copy(&r->st, m->params_old, n) : NULL;
    st.weight_versions = old ? 2 : 1;
    const ckpt_part_t pt = {.comm = MPI_COMM_SELF, .local = &tab, .owner = 1, .bufs = {host[0], old, host[1], host[2]}};
    const int rc = ckpt_write_parallel(path, &tab, &pt, &st, r->files.deck_text);
    if (old) run_ckpt_host_release(&r->st, old, m->params_old);
    run_ckpt_host_release(&r->st, host[0], m->params);
    if (s0 == 0 && s1 == n) {
        run_ckpt_host_release(&r->st, host[1], m->m);
        run_ckpt_host_release(&r->st, host[2], m->v);
    } else {
        free(host[1]), free(host[2]);
    }
    return rc;
}

/* A lost peer's end of this rank: RUN/exit_status says "75 stopped: WHO: msg" + said (rc MP_OK) or
 * "1 aborted: WHO: msg", the run log closed, and the process exits 75 or 1 (no atexit: MPI is not
 * finalized with a peer gone). */
MP_NORETURN static void rec_exit(run_t *r, int rc, const char *msg, const char *said)
{
    if (r->lay.wait.status && r->lay.wait.status[0]) {
        char text[1800];
        snprintf(text, sizeof text, "%d %s: %s: %s%s\n", rc == MP_OK ? MP_EXIT_REQUEUE : 1,
                 rc == MP_OK ? "stopped" : "aborted", r->lay.wait.who ? r->lay.wait.who : "a rank", msg,
                 rc == MP_OK ? said : "");
        publish_text(r->lay.wait.status, text);
    }
    runlog_close(&r->files.log);
    fflush(stdout);
    fflush(stderr);
    _exit(rc == MP_OK ? MP_EXIT_REQUEUE : 1);
}

/* The survivor (a wait past parallel.timeout): its state, its log drained, status 75. */
static void rec_lost(void *ctx, const char *msg)
{
    run_t *r = ctx;
    r->lay.wait.lost = NULL; /* a wait inside what follows aborts as usual */
    char path[4300];
    rec_snap_path(&r->files, r->lay.rank, path, sizeof path);
    fprintf(stderr, "mindpipe: rank %d: %s\nmindpipe: rank %d: recovery.log: a peer is lost; this rank's state at "
            "step %ld goes to %s, then exit %d (resume with --resume auto: the lost rank's steps are replayed)\n",
            r->lay.rank, msg, r->lay.rank, r->step, path, MP_EXIT_REQUEUE);
    fflush(stderr);
    int rc = recovery_close(r);
    if (rec_snapshot_write(r) != MP_OK) rc = MP_ERR;
    rec_exit(r, rc, msg, "; its state is in RUN/recovery (resume with --resume auto)");
}

void recovery_arm(run_t *r)
{
    if (!r->rec || !r->rec->log) return;
    r->lay.wait.lost = rec_lost;
    r->lay.wait.lost_ctx = r;
    /* Hydra signals a dead rank's survivors (SIGUSR1: a stop request): the stop's deadline
     * (train.stop_grace) would end this rank without its snapshot, so a wait then counts as a lost
     * peer's after half of it */
    r->lay.wait.stopping = signals_pending;
    r->lay.wait.stop_timeout = r->deck.train.stop_grace / 2;
}

/* A peer lost during the recovery (recovery_arm_resume): this rank's state is a snapshot already on
 * disk (a survivor's: still there, it is removed only by recovery_done), a replica's, or a replay
 * (in progress or done): none worth writing, so it writes nothing and exits 75; the next --resume auto
 * finds the same snapshots and replays the lost ranks again (the one just lost with them). */
static void rec_lost_resume(void *ctx, const char *msg)
{
    run_t *r = ctx;
    r->lay.wait.lost = NULL; /* a wait inside what follows aborts as usual */
    fprintf(stderr, "mindpipe: rank %d: %s\nmindpipe: rank %d: recovery.log: a peer was lost during the recovery; the "
            "snapshots stay for the next --resume auto, which recovers again from the checkpoint of step %ld; exit %d\n",
            r->lay.rank, msg, r->lay.rank, r->rec ? r->rec->from : r->step, MP_EXIT_REQUEUE);
    fflush(stderr);
    const int rc = recovery_close(r); /* a replaying rank's log: drained (the next recovery sets it aside) */
    rec_exit(r, rc, msg, "; a peer lost during the recovery, which --resume auto tries again");
}

void recovery_arm_resume(run_t *r)
{
    if (!r->deck.recovery.log || !r->opts.resume) return;
    r->lay.wait.lost = rec_lost_resume;
    r->lay.wait.lost_ctx = r;
}

void recovery_disarm(run_layout_t *lay)
{
    lay->wait.lost = NULL;
    lay->wait.lost_ctx = NULL;
    lay->wait.stopping = NULL;
}

/* The deck keys whose values the steps after the checkpoint were computed with. The run id says a
 * snapshot is this directory's, not that this deck computed it: a resume may change train.seed or
 * train.lr on purpose (--set; run_ckpt.c warns or refuses), and then the survivors' snapshots are of
 * the old deck's steps while a replay of the lost rank would follow the new one: a model no run
 * computed. Such a snapshot is refused; the resume starts from the checkpoint under the new deck. */
static const char *const rec_same_keys[][2] = {
    {"model", "layers"}, {"model", "dim"}, {"model", "heads"}, {"model", "seq_len"}, {"model", "vocab"},
    {"model", "mlp_ratio"}, {"model", "blocks"}, {"model", "arch"}, {"model", "kv_heads"}, {"model", "ffn_dim"},
    {"model", "rope_theta"}, {"model", "norm_eps"}, {"model", "tie_embeddings"}, {"train", "steps"},
    {"train", "batch"}, {"train", "micro_batch"}, {"train", "warmup"}, {"train", "lr"}, {"train", "min_lr"}, {"train", "weight_decay"}, {"train", "grad_clip"},
    {"train", "beta1"}, {"train", "beta2"}, {"train", "eps"}, {"train", "seed"}, {"train", "precision"},
    {"data", "path"}, {"data", "order"}, {"parallel", "schedule"}, {"parallel", "zero"}, {"supernet", "enabled"},
    {"supernet", "window"}, {"supernet", "schedule"}, {"supernet", "candidates"}, {"supernet", "blocks"}};

/* The snapshot's deck text (its /state deck) against this run's deck on rec_same_keys. MP_OK, or
 * MP_ERR with the first key that differs, both values, in why_p (name: the snapshot as messages say). */
static int rec_snap_deck_same(const deck_t *d, const char *text, const char *name, char *why_p, size_t n)
{
    char why[600], was[512], now[512];
    deck_t *old = MP_MALLOC(sizeof *old);
    if (!old) return snprintf(why_p, n, "%s: no memory to read its deck", name), MP_ERR;
    if (!text || deck_parse_text(old, text, NULL, why, sizeof why) != MP_OK) {
        snprintf(why_p, n, "%s has no readable deck (%s): whose steps it holds cannot be told", name,
                 text ? why : "none stored");
        return free(old), MP_ERR;
    }
    int rc = MP_OK;
    for (size_t i = 0; i < sizeof rec_same_keys / sizeof rec_same_keys[0] && rc == MP_OK; i++) {
        const char *sec = rec_same_keys[i][0], *key = rec_same_keys[i][1];
        if (deck_value_text(old, sec, key, was, sizeof was) != MP_OK ||
            deck_value_text(d, sec, key, now, sizeof now) != MP_OK)
            MP_ABORT("recovery: %s.%s is not a deck key (rec_same_keys)", sec, key);
        if (strcmp(was, now))
            rc = MP_ERR, snprintf(why_p, n, "%s was taken with %s.%s = %.200s, this run's deck says %.200s: another "
                                  "run's steps", name, sec, key, was, now);
    }
    free(old);
    return rc;
}

/* A snapshot read whole into host buffers (b: REC_BUFS × tab.total floats: weights, AdamW's m and v,
 * and under 2bw the previous weight version), checked against this run:
 * its run id, its layout (rank's), the deck it was computed with (rec_same_keys) and a step. MP_OK
 * with the step and AdamW's counter, or MP_ERR with why in why_p (quiet when the file is absent). */
static int rec_snap_read(const deck_t *d, run_files_t *files, const run_layout_t *lay, run_stage_t *st, int rank, float *b, long *step_p, long *adam_p, char *why_p, size_t n)
{
    char path[4300], layout[128];
    rec_snap_path(files, rank, path, sizeof path);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        snprintf(why_p, n, "no snapshot");
        return MP_ERR;
    }
    const size_t total = st->model.tab.total;
    ckpt_state_t cs = {0};
    const param_table_t tab = rec_snap_table(st);
    const ckpt_part_t pt = {.comm = MPI_COMM_SELF, .local = &tab, .owner = 1,
                            .bufs = {b, st->model.params_old ? b + 3 * total : NULL, b + total, b + 2 * total}};
    if (ckpt_read_parallel(path, &tab, &pt, &cs) != MP_OK) {
        snprintf(why_p, n, "RUN/recovery/snap-r%05d.h5 does not read back (above)", rank);
        return MP_ERR;
    }
    char name[64];
    snprintf(name, sizeof name, "RUN/recovery/snap-r%05d.h5", rank);
    rec_layout(lay, st, rank, layout, sizeof layout);
    int rc = MP_ERR;
    if (strcmp(cs.run_id, files->run_id))
        snprintf(why_p, n, "%s is of run %s, not %s", name, cs.run_id, files->run_id);
    else if (strcmp(cs.layout, layout))
        snprintf(why_p, n, "%s was taken on layout '%s', not '%s'", name, cs.layout, layout);
    else if (rec_snap_deck_same(d, cs.deck, name, why_p, n) == MP_OK)
        *step_p = cs.step, *adam_p = cs.adam_t, rc = MP_OK;
    free(cs.deck);
    return rc;
}

static void rec_to_device(const deck_t *d, run_stage_t *st, const float *b)
{
    model_t *m = &st->model;
    const size_t total = m->tab.total, bytes = total * sizeof(float);
    size_t s0, s1;
    rec_moments_range(d, st, &s0, &s1);
    be_to_device(&st->be, m->params, b, bytes);
    be_to_device(&st->be, m->m, b + total + s0, (s1 - s0) * sizeof(float));
    be_to_device(&st->be, m->v, b + 2 * total + s0, (s1 - s0) * sizeof(float));
    if (m->params_old) be_to_device(&st->be, m->params_old, b + 3 * total, bytes);
}

/* ZeRO-1 over dp > 1: each replica holds its own shard of the moments, so no replica's snapshot
 * stands in for a lost one. */
static int rec_sharded_dp(const run_t *r) { return r->st.dp_on && r->deck.parallel.zero; }

/* World rank i's coordinate in dimension d (grid.h: the digits of the rank). */
static int rec_coord(const grid_t *g, int i, int d) { return i / g->stride[d] % g->size[d]; }

/* Whether rank l's replicas (its tp and pp coordinates, every dp one) are all lost: plain dp > 1 has no
 * snapshot of l's state left to take, so the replica group replays together. */
static int rec_replicas_lost(const grid_t *g, const long *snap, int W, int l)
{
    for (int j = 0; j < W; j++)
        if (j != l && snap[j] >= 0 && rec_coord(g, j, GRID_TP) == rec_coord(g, l, GRID_TP) &&
            rec_coord(g, j, GRID_PP) == rec_coord(g, l, GRID_PP) && rec_coord(g, j, GRID_SP) == rec_coord(g, l, GRID_SP))
            return 0;
    return 1;
}

/* Who replays (replays[i] = 1), alike on every rank from the snapshots' steps (snap[i] < 0: lost).
 * A lost rank replays unless it takes a replica's snapshot (plain dp > 1), and with it every rank it
 * shares a step's unlogged collectives with: its tensor-parallel peers (tp > 1: every layer's sums)
 * and its replica peers where they replay too (ZeRO-1: the reduce-scatter and all-gather; plain dp
 * whose every replica is lost — a node that held a stage's replicas —: the gradient all-reduce), so
 * its stage's group recomputes the step together, the pipeline's messages read from the other
 * stages' logs. */
static void rec_replayers(const run_t *r, const long *snap, int *replays)
{
    const grid_t *g = &r->lay.grid;
    const int W = r->lay.world, tp = g->size[GRID_TP] > 1, zero = rec_sharded_dp(r);
    for (int l = 0; l < W; l++) {
        if (snap[l] >= 0) continue;
        const int all_dp = zero || (g->size[GRID_DP] > 1 && rec_replicas_lost(g, snap, W, l));
        if (!zero && g->size[GRID_DP] > 1 && !all_dp) continue; /* a replica's snapshot survived: taken */
        for (int j = 0; j < W; j++)
            replays[j] |= j == l || (rec_coord(g, j, GRID_PP) == rec_coord(g, l, GRID_PP) &&
                                     rec_coord(g, j, GRID_SP) == rec_coord(g, l, GRID_SP) &&
                                     (tp || rec_coord(g, j, GRID_TP) == rec_coord(g, l, GRID_TP)) &&
                                     (all_dp || rec_coord(g, j, GRID_DP) == rec_coord(g, l, GRID_DP)));
    }
}

/* Why this rank cannot replay (filled, nonzero), or 0. Plain dp > 1: the step's gradient sum needs
 * every replica, so a replay is the whole replica group's (rec_replayers), never one rank's beside
 * replicas that do not replay. (The first stage of a tied embedding at tp > 1 recomputes the head's
 * part of its gradient with its tp peers, who replay with it: model_head_grad's softmax sums.) */
static int rec_replay_refused(const run_t *r, const int *replays, char *why, size_t n)
{
    const grid_t *g = &r->lay.grid;
    if (rec_sharded_dp(r) || g->size[GRID_DP] == 1) return 0;
    for (int j = 0; j < r->lay.world; j++)
        if (!replays[j] && rec_coord(g, j, GRID_TP) == g->coord[GRID_TP] && rec_coord(g, j, GRID_PP) == g->coord[GRID_PP] &&
            rec_coord(g, j, GRID_SP) == g->coord[GRID_SP])
            return snprintf(why, n, "rank %d has no replica's snapshot to take", r->lay.rank), 1;
    return 0;
}

/* Opens the log of stage s's rank (its chunks' messages, or the scalars) for steps from to target − 1
 * into c->rd[s]. MP_OK, or MP_ERR with why. */
static int rec_open_reader(run_t *r, const recovery_plan_t *p, int s, char *why, size_t n)
{
    struct recovery_s *c = r->rec;
    const int pp = r->lay.pp, wr = r->st.exec.c.stage_rank[s];
    char path[4300];
    bndlog_info_t info;
    if (bndlog_path(r->files.out_dir, wr, path, sizeof path) != MP_OK ||
        bndlog_read_open(path, r->files.run_id, wr, &c->rd[s]) != MP_OK) {
        snprintf(why, n, "the log of rank %d (stage %d) does not open (above)", wr, s);
        return MP_ERR;
    }
    bndlog_read_info(c->rd[s], &info);
    if (info.stage != s || info.pp != pp) { /* this run's id, written under another pipeline */
        snprintf(why, n, "the log of rank %d (%.300s) was written by stage %d of %d, this run has it as stage %d of %d",
                 wr, path, info.stage, info.pp, s, pp);
        return MP_ERR;
    }
    if (info.first_step > p->from || info.last_step < p->target - 1) {
        snprintf(why, n, "the log of rank %d holds steps %ld to %ld, not %ld to %ld", wr, info.first_step + 1,
                 info.last_step + 1, p->from + 1, p->target);
        return MP_ERR;
    }
    return MP_OK;
}

/* A replaying rank: the logs it reads (its chunks' neighbours, the tied embedding's other end, and
 * the scalars from any stage), each whole from `from` to target − 1. A neighbour that replays too (a
 * lost node held both stages) reads none: the two exchange their messages live, as in the step,
 * since both recompute the same steps from the same checkpoint (c->live). MP_OK, or MP_ERR with why. */
static int rec_open_readers(run_t *r, const recovery_plan_t *p, const long *snap, const int *replays, char *why,
                            size_t n)
{
    struct recovery_s *c = rec_get(r);
    const int pp = r->lay.pp, K = r->st.model.tab.nchunks * pp;
    int need[SIM_MAX_STAGES] = {0};
    const sched_kind_t kind = r->deck.parallel.schedule_kind;
    for (int ch = 0; ch < r->st.model.tab.nchunks; ch++) {
        const int k = sched_stage_chunk(kind, r->lay.stage, ch, pp);
        if (k > 0) need[sched_chunk_stage(kind, k - 1, pp)] = 1;
        if (k < K - 1) need[sched_chunk_stage(kind, k + 1, pp)] = 1;
    }
    /* the tied embedding's other end: the last stage reads the first's rows, the first the last's head inputs */
    if (pp > 1 && !r->st.model.cfg.untied && (r->lay.stage == 0 || r->lay.stage == pp - 1))
        need[r->lay.stage == 0 ? pp - 1 : 0] = 1;
    c->scal_stage = -1;
    memset(c->live, 0, sizeof c->live);
    for (int s = 0; s < pp; s++) {
        if (!need[s] || s == r->lay.stage) continue;
        const int wr = r->st.exec.c.stage_rank[s];
        if (replays[wr]) { /* it recomputes what its log would give: exchanged live */
            c->live[s] = 1;
            continue;
        }
        if (snap[wr] < 0) { /* lost and not replaying (took a replica's snapshot): its log may end short */
            snprintf(why, n, "rank %d (stage %d), whose log it reads, is lost too", wr, s);
            return MP_ERR;
        }
        if (rec_open_reader(r, p, s, why, n) != MP_OK) return MP_ERR;
        if (c->scal_stage < 0) c->scal_stage = s;
    }
    /* every neighbour replays: the scalars (the steps' gradient norms, the same in every log) from a
     * stage that does not */
    for (int s = 0; c->scal_stage < 0 && s < pp; s++) {
        const int wr = r->st.exec.c.stage_rank[s];
        if (s == r->lay.stage || replays[wr] || snap[wr] < 0) continue;
        if (rec_open_reader(r, p, s, why, n) != MP_OK) return MP_ERR;
        c->scal_stage = s;
    }
    if (c->scal_stage < 0) {
        snprintf(why, n, "no other stage's log gives the steps' gradient norms");
        return MP_ERR;
    }
    return MP_OK;
}

int recovery_replay_scalars(run_t *r, long t, double v[2])
{
    struct recovery_s *c = r->rec;
    if (!c || c->scal_stage < 0) return MP_FAIL("replay: no log gives the scalars of step %ld (a bug)", t + 1);
    recovery_pause(r);
    const int rc = bndlog_get_scalars(c->rd[c->scal_stage], t, 2, v);
    recovery_resume(r);
    if (rc != MP_OK) c->failed = 1;
    return rc;
}

void recovery_replay_mode(run_t *r, int on)
{
    if (r->rec && r->rec->log) exec_set_bnd(&r->st.exec, &r->rec->bnd, on, r->rec->live);
}

int recovery_replay_failed(const run_t *r)
{
    return r->rec && r->rec->failed;
}

/* Every rank's snapshot step (−1: none, or not usable), gathered. */
static void rec_gather(const run_layout_t *lay, long mine, long *all)
{
    MPI_Request q;
    MPI_CHECK(MPI_Iallgather(&mine, 1, MPI_LONG, all, 1, MPI_LONG, MPI_COMM_WORLD, &q));
    wait_all_over(&lay->wait, 1, &q, MPI_COMM_WORLD, "the survivors' snapshot steps");
}

static void rec_snap_aside(run_files_t *files, const run_layout_t *lay, const char *suffix);

/* The fallback: rank 0's line; every rank's snapshot moved aside (a later loss must not meet it). */
static void rec_fallback(run_files_t *files, const run_layout_t *lay, const char *why, long from)
{
    rec_snap_aside(files, lay, ".unused");
    if (lay->rank == 0)
        runlog_printf(&files->log, "recovery: the survivors' snapshots are not used: %s; resuming from the checkpoint of "
                      "step %ld", why, from);
}

int recovery_plan(run_t *r, recovery_plan_t *p)
{
    memset(p, 0, sizeof *p);
    p->from = p->target = r->step;
    p->source = -1;
    if (!r->deck.recovery.log || !r->opts.resume) return MP_OK;
    rec_get(r)->from = r->step;
    const int W = r->lay.world;
    const size_t total = r->st.model.tab.total;
    float *b = MP_MALLOC(REC_BUFS * (total ? total : 1) * sizeof *b);
    long *snap = MP_MALLOC((size_t)W * sizeof *snap), mine = -1, adam = 0;
    if (!b || !snap) MP_ABORT("out of memory reading the survivors' snapshots");
    char why[1200] = "";
    if (rec_snap_read(&r->deck, &r->files, &r->lay, &r->st, r->lay.rank, b, &mine, &adam, why, sizeof why) != MP_OK) {
        if (strcmp(why, "no snapshot")) MP_WARN("recovery: %s: not used (this rank counts as lost)", why);
        mine = -1;
    } else if (mine <= r->step) {
        mine = -1; /* not newer than the checkpoint: nothing to gain (an old one) */
    }
    why[0] = 0;
    rec_gather(&r->lay, mine, snap);
    long T = -1;
    for (int i = 0; i < W; i++) {
        if (snap[i] < 0) continue;
        p->nsnap++;
        if (T < 0) T = snap[i];
        else if (snap[i] != T && !why[0]) snprintf(why, sizeof why, "they are of different steps (%ld, %ld)", T, snap[i]);
    }
    int rc = MP_OK;
    if (p->nsnap == 0) goto out; /* an ordinary resume */
    const char *unsup = recovery_unsupported(&r->st);
    int differ = 0;
    for (int i = 0; i < W; i++) differ |= snap[i] >= 0 && snap[i] != T;
    if (differ || unsup) {
        rec_fallback(&r->files, &r->lay, differ ? why : unsup, r->step);
        goto out;
    }
    p->target = T;
    /* who replays, and who takes a replica's snapshot instead (plain dp > 1: the replicas hold the
     * same state; reading it is faster than any replay); every rank decides alike from snap */
    int coord[GRID_NDIMS];
    for (int i = 0; i < W; i++) p->nreplay += snap[i] < 0;
    if (mine < 0 && !rec_sharded_dp(r)) {
        memcpy(coord, r->lay.grid.coord, sizeof coord);
        for (int q = 0; q < r->lay.grid.size[GRID_DP] && p->source < 0; q++) {
            coord[GRID_DP] = q;
            const int peer = grid_rank_of(&r->lay.grid, coord);
            if (peer != r->lay.rank && snap[peer] >= 0) p->source = peer;
        }
    }
    int *replays = MP_CALLOC((size_t)W, sizeof *replays);
    if (!replays) MP_ABORT("out of memory planning the recovery");
    rec_replayers(r, snap, replays);
    p->replay = replays[r->lay.rank];
    p->group = rec_sharded_dp(r) || r->lay.grid.size[GRID_TP] > 1 || r->lay.grid.size[GRID_DP] > 1;
    char mywhy[600] = "";
    int bad = 0;
    if (mine < 0 && p->source < 0 && !p->replay)
        bad = 1, snprintf(mywhy, sizeof mywhy, "rank %d has no replica's snapshot to take", r->lay.rank);
    else if (p->replay && rec_replay_refused(r, replays, mywhy, sizeof mywhy))
        bad = 1;
    else if (p->replay && rec_open_readers(r, p, snap, replays, mywhy, sizeof mywhy) != MP_OK)
        bad = 1;
    /* a neighbour that replays too waits for this rank's messages: none stops early */
    for (int s = 0; p->replay && !bad && s < r->lay.pp; s++) p->group |= r->rec->live[s];
    free(replays);
    if (p->source >= 0) {
        long st_step = -1;
        if (rec_snap_read(&r->deck, &r->files, &r->lay, &r->st, p->source, b, &st_step, &adam, mywhy, sizeof mywhy) != MP_OK || st_step != T) {
            bad = 1;
            if (!mywhy[0]) snprintf(mywhy, sizeof mywhy, "rank %d's snapshot changed while read", p->source);
        }
    }
    /* every rank learns whether some rank cannot go on, and rank 0 says why (the first one's) */
    int anybad = bad;
    wait_allreduce(&r->lay.wait, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, "the recovery plan's agreement");
    if (anybad) {
        char line[600] = "";
        int first = bad ? r->lay.rank : W;
        wait_allreduce(&r->lay.wait, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, "the recovery plan's agreement");
        if (r->lay.rank == first) snprintf(line, sizeof line, "%s", mywhy);
        if (first != 0) {
            MPI_Request q[2];
            if (r->lay.rank == first) MPI_CHECK(MPI_Isend(line, sizeof line, MPI_CHAR, 0, 75, MPI_COMM_WORLD, &q[0]));
            if (r->lay.rank == 0) MPI_CHECK(MPI_Irecv(line, sizeof line, MPI_CHAR, first, 75, MPI_COMM_WORLD, &q[1]));
            if (r->lay.rank == first) wait_all(&r->lay.wait, 1, &q[0], "the recovery plan's reason");
            if (r->lay.rank == 0) wait_all(&r->lay.wait, 1, &q[1], "the recovery plan's reason");
        }
        rec_fallback(&r->files, &r->lay, line, r->step);
        struct recovery_s *c = r->rec;
        for (int s = 0; c && s < SIM_MAX_STAGES; s++) bndlog_read_close(c->rd[s]), c->rd[s] = NULL;
        p->replay = 0, p->source = -1, p->nreplay = 0, p->target = r->step;
        goto out;
    }
    p->on = 1;
    int counts[3] = {p->replay, p->source >= 0, !p->replay && p->source < 0};
    wait_allreduce(&r->lay.wait, counts, 3, MPI_INT, MPI_SUM, MPI_COMM_WORLD, "the recovery plan's agreement");
    p->nreplay_own = counts[0], p->ntook = counts[1], p->nloaded = counts[2];
    if (!p->replay) { /* its own snapshot, or its replica's */
        rec_to_device(&r->deck, &r->st, b);
        r->adam_t = adam;
        rec_get(r)->own_snap = p->source < 0;
    }
out:
    free(b), free(snap);
    return rc;
}

/* Moves this rank's snapshot aside to NAME + suffix (the next --resume auto then ignores it). */
static void rec_snap_aside(run_files_t *files, const run_layout_t *lay, const char *suffix)
{
    char path[4300], aside[4400];
    rec_snap_path(files, lay->rank, path, sizeof path);
    snprintf(aside, sizeof aside, "%s%s", path, suffix);
    if (rename(path, aside) != 0 && errno != ENOENT)
        MP_WARN("cannot move %s aside: %s", path, strerror(errno));
}

int recovery_finish(run_t *r, const recovery_plan_t *p, int ok, double replay_s)
{
    if (!p->on) return MP_OK;
    /* the replaying ranks' time: the others wait (a deadline per replayed step) */
    wait_cfg_t w = r->lay.wait;
    w.timeout = r->lay.wait.timeout > 0 ? r->lay.wait.timeout * (double)(p->target - p->from + 1) : 0;
    int bad = !ok;
    double took = replay_s;
    wait_allreduce(&w, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, "the replay of the lost rank's steps");
    wait_allreduce(&r->lay.wait, &took, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, "the replay's time");
    if (bad) {
        rec_snap_aside(&r->files, &r->lay, ".failed");
        return MP_FAIL("recovery: the replay of steps %ld to %ld failed (above): the snapshots are moved aside; "
                       "--resume auto now restarts from the checkpoint of step %ld", p->from + 1, p->target, p->from);
    }
    struct recovery_s *c = r->rec;
    /* the thread rule: a replaying rank's own writer is running (train_replay opened it) and may be
     * inside H5Fflush marking the last replayed step; closing the readers beside it corrupted HDF5's
     * free lists once in CI (the writer's SIGSEGV in H5FL_fac_malloc) */
    recovery_pause(r);
    for (int s = 0; c && s < SIM_MAX_STAGES; s++) bndlog_read_close(c->rd[s]), c->rd[s] = NULL;
    recovery_resume(r);
    r->step = p->target;
    if (r->lay.rank == 0) {
        char how[300] = "";
        if (p->nreplay_own)
            snprintf(how, sizeof how, "; %d rank(s) replayed steps %ld to %ld from the logs in %.3f s", p->nreplay_own,
                     p->from + 1, p->target, took);
        if (p->ntook)
            snprintf(how + strlen(how), sizeof how - strlen(how), "; %d took a data-parallel replica's snapshot",
                     p->ntook);
        runlog_printf(&r->files.log, "recovery: resumed at step %ld, the step the survivors had reached: 0 steps lost (the "
                      "checkpoint of step %ld; %d rank(s) loaded their own snapshot%s)", p->target, p->from, p->nloaded, how);
    }
    return MP_OK;
}

void recovery_done(run_t *r, const recovery_plan_t *p)
{
    if (!p->on) return;
    char path[4300];
    rec_snap_path(&r->files, r->lay.rank, path, sizeof path);
    if (unlink(path) != 0 && errno != ENOENT) MP_WARN("cannot remove the used snapshot %s: %s", path, strerror(errno));
}
