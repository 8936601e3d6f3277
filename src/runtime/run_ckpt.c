/* A run's state to and from checkpoints (run_ckpt.h): host staging, the ZeRO-1 moment gather,
 * the collective write and read, --resume. */
#include "run_ckpt.h"

#include <errno.h>
#include <inttypes.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "ckpt.h"
#include "ckpt_files.h"
#include "hf_gpt2.h"
#include "hf_llama.h"
#include "perf.h"
#include "rundir.h"

float *run_ckpt_host_copy(run_stage_t *st, const float *dev, size_t n)
{
    if (be_host_visible(&st->be) || !dev) return (float *)dev;
    float *h = be_host_alloc(&st->be, n * sizeof(float));
    if (!h) MP_ABORT("out of host memory staging %zu floats for a checkpoint", n);
    be_to_host(&st->be, h, dev, n * sizeof(float));
    return h;
}

void run_ckpt_host_release(run_stage_t *st, float *host, const float *dev)
{
    if (host && host != dev) be_host_free(&st->be, host);
}

/* With ZeRO-1 the moments are sharded over the replicas: gather this replica's shards m, v (host
 * memory) into whole (local-layout) buffers on replica rank 0. Returns malloc'd m and v there,
 * NULL elsewhere. */
static void run_ckpt_gather_moments(const run_layout_t *lay, run_stage_t *st, const float *ms, const float *vs, float **m_p, float **v_p)
{
    const size_t n = st->model.alloc, k = st->model.mv_len;
    float *m = NULL, *v = NULL;
    if (lay->grid.replica_rank == 0 && (!(m = MP_MALLOC(n * sizeof(float))) || !(v = MP_MALLOC(n * sizeof(float)))))
        MP_ABORT("out of memory gathering the optimizer state for a checkpoint");
    MPI_Request q[2];
    MPI_CHECK(MPI_Igather(ms, (int)k, MPI_FLOAT, m, (int)k, MPI_FLOAT, 0, lay->grid.replica, &q[0]));
    MPI_CHECK(MPI_Igather(vs, (int)k, MPI_FLOAT, v, (int)k, MPI_FLOAT, 0, lay->grid.replica, &q[1]));
    wait_all_over(&lay->wait, 2, q, lay->grid.replica, "the ZeRO-1 moment gather for a checkpoint");
    *m_p = m;
    *v_p = v;
}

/* A file's size in MB (1e6 bytes); 0 if it cannot be read. */
static double run_ckpt_file_mb(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (double)sb.st_size / 1e6 : 0.0;
}

/* checkpoint.transfer on a part: auto takes independent transfers where ranks outnumber a node's
 * cores (HDF5's internal collectives spin there), on every rank if on any node: one file's writers
 * must all take the same. */
static void run_ckpt_transfer(const deck_t *d, const run_layout_t *lay, ckpt_part_t *pt)
{
    const deck_transfer_t t = d->checkpoint.transfer_mode;
    pt->independent = t == DECK_TRANSFER_INDEPENDENT ||
                      (t == DECK_TRANSFER_AUTO && lay->grid.any_node_oversubscribed);
    pt->wait = &lay->wait;
}

/* RUN/ckpt: the run's checkpoint directory. */
static void run_ckpt_dir(const run_t *r, char *dir_p, size_t n) { snprintf(dir_p, n, "%s/ckpt", r->files.out_dir); }

/* The counters and the layout stored with step r->step's checkpoint. */
static void run_ckpt_state(const run_t *r, ckpt_state_t *st_p)
{
    const model_t *md = &r->st.model;
    *st_p = (ckpt_state_t){.step = r->step, .adam_t = r->adam_t, .seed = r->deck.train.seed,
                           .data_cursor = r->step * r->deck.train.batch, .weight_versions = md->params_old ? 2 : 1};
    snprintf(st_p->layout, sizeof st_p->layout, "dp=%d tp=%d pp=%d sp=%d zero=%d v=%d", r->lay.grid.size[GRID_DP],
             r->lay.grid.size[GRID_TP], r->lay.grid.size[GRID_PP], r->lay.grid.size[GRID_SP], r->deck.parallel.zero,
             md->tab.nchunks);
    snprintf(st_p->schedule, sizeof st_p->schedule, "%s", sched_kind_names[r->deck.parallel.schedule_kind]);
    snprintf(st_p->run_id, sizeof st_p->run_id, "%s", r->files.run_id);
    st_p->tok = r->data_tok;
}

/* Rank 0, after a checkpoint at path was written in dt seconds: the log line, then pruning among
 * this run's checkpoints that verify (ckpt_dir_prune_run: the newest good one, the file just written,
 * and other runs' and corrupt files are never deleted). */
static int run_ckpt_written(run_t *r, const char *path, double dt)
{
    char dir[4200];
    const char *name = strrchr(path, '/') + 1; /* run_ckpt_dir/NAME */
    const double mb = run_ckpt_file_mb(path);
    runlog_printf(&r->files.log, "checkpoint %s (%.1f MB written in %.3f s: %.0f MB/s)", path, mb, dt, mb / dt);
    run_ckpt_dir(r, dir, sizeof dir);
    if (r->deck.checkpoint.keep <= 0) return MP_OK;
    if (ckpt_verdict_written(&r->files.verdicts, dir, name, r->files.run_id) != MP_OK) return MP_ERR;
    return ckpt_dir_prune_run(dir, r->deck.checkpoint.keep, r->files.run_id, name, &r->files.verdicts);
}

/* Rank 0, before step r->step's checkpoint is published as dir/name: a regular file already there
 * that is not this run's (another run's, one written before run ids, one whose /state cannot be read)
 * is moved aside (rundir_move_aside), never replaced; the log says so. A file of this run is replaced
 * (a resume from an earlier step writes that step again); a link or a device there is left to
 * publish_commit, which refuses it. MP_OK, or MP_ERR naming the file. */
static int run_ckpt_aside_foreign(run_t *r, const char *dir, const char *name)
{
    char path[4400], to[4600], why[700];
    struct stat st;
    const ckpt_verdict_t *v;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) return MP_OK;
    if (ckpt_verdict_get(&r->files.verdicts, dir, name, 0, &v) != MP_OK) return MP_ERR;
    if (v->head_ok && v->run_id[0] && strcmp(v->run_id, r->files.run_id) == 0) return MP_OK; /* ours */
    if (!v->head_ok) snprintf(why, sizeof why, "%s", v->reason);
    else if (!v->run_id[0]) snprintf(why, sizeof why, "it was written before run ids");
    else snprintf(why, sizeof why, "it belongs to another run (run_id %s; this run is %s)", v->run_id, r->files.run_id);
    if (rundir_move_aside(dir, name, to, sizeof to) != MP_OK) return MP_ERR;
    runlog_printf(&r->files.log, "warning: %s is not a checkpoint of this run (%s): moved to %s, not replaced by this run's "
                  "step %ld", path, why, to, r->step);
    return MP_OK;
}

/* Written collectively: each stage's TP shards write their hyperslabs of the canonical tensors
 * (one replica writes; with ZeRO-1 its moments are first gathered over the replicas), so nothing
 * is assembled on one rank. */
int run_ckpt_write(run_t *r, int fail_midway)
{
    char dir[4200], path[4300];
    run_ckpt_dir(r, dir, sizeof dir);
    if (ckpt_name_path(dir, r->step, path, sizeof path) != MP_OK) return MP_ERR; /* alike on every rank */
    int aside_bad = r->lay.rank == 0 && run_ckpt_aside_foreign(r, dir, strrchr(path, '/') + 1) != MP_OK;
    wait_allreduce_sum(&r->lay.wait, &aside_bad, 1, MPI_INT, MPI_COMM_WORLD, "moving a foreign checkpoint aside");
    if (aside_bad) return MP_ERR;
    const int zero = r->st.dp_on && r->deck.parallel.zero;
    model_t *md = &r->st.model;
    /* the state in host memory (device backends: copied out; the file is written from there) */
    float *hp, *ho, *hm, *hv;
    if (run_home(r, 0)) { /* host-resident candidates: the homes, the shared part copied in */
        run_home_flush(r);
        hp = run_home(r, 0), ho = NULL, hm = run_home(r, 1), hv = run_home(r, 2);
        be_to_host(&r->st.be, hp, md->params, md->tab.cand_off * sizeof(float));
        be_to_host(&r->st.be, hm, md->m, md->tab.cand_off * sizeof(float));
        be_to_host(&r->st.be, hv, md->v, md->tab.cand_off * sizeof(float));
    } else {
        hp = run_ckpt_host_copy(&r->st, md->params, md->alloc), ho = run_ckpt_host_copy(&r->st, md->params_old, md->alloc);
        hm = run_ckpt_host_copy(&r->st, md->m, md->mv_len), hv = run_ckpt_host_copy(&r->st, md->v, md->mv_len);
    }
    float *m = hm, *v = hv;
    if (zero) run_ckpt_gather_moments(&r->lay, &r->st, hm, hv, &m, &v);
    ckpt_part_t pt = {.comm = MPI_COMM_WORLD, .local = &md->tab, .owner = r->lay.grid.replica_rank == 0,
                      .bufs = {hp, ho, m ? m : hm, v ? v : hv}, .fail_midway = fail_midway};
    run_ckpt_transfer(&r->deck, &r->lay, &pt);
    ckpt_state_t st;
    run_ckpt_state(r, &st);
    const double t0 = perf_now();
    char phase[4400];
    snprintf(phase, sizeof phase, "writing the checkpoint %s", path);
    watchdog_arm(&r->wd, phase, "checkpoint.timeout", r->deck.checkpoint.timeout);
    int rc = ckpt_write_parallel(path, &r->st.gtab, &pt, &st, r->files.deck_text);
    const double dt = perf_now() - t0;
    if (zero) {
        free(m);
        free(v);
    }
    if (!run_home(r, 0)) {
        run_ckpt_host_release(&r->st, hp, md->params);
        run_ckpt_host_release(&r->st, ho, md->params_old);
        run_ckpt_host_release(&r->st, hm, md->m);
        run_ckpt_host_release(&r->st, hv, md->v);
    }
    if (rc == MP_OK && r->lay.rank == 0) rc = run_ckpt_written(r, path, dt);
    int bad = rc != MP_OK;
    wait_allreduce_sum(&r->lay.wait, &bad, 1, MPI_INT, MPI_COMM_WORLD, "the checkpoint's outcome");
    watchdog_disarm(&r->wd);
    return bad ? MP_ERR : MP_OK;
}

/* The collective read of path into host buffers laid out by the rank's table (weights, 2BW's older
 * weights, first and second moments; NULL: not read), under the checkpoint's deadline. */
static int run_ckpt_read_into(run_t *r, const char *path, ckpt_state_t *st, float *bufs[4])
{
    ckpt_part_t pt = {.comm = MPI_COMM_WORLD, .local = &r->st.model.tab, .owner = r->lay.grid.replica_rank == 0,
                      .bufs = {bufs[0], bufs[1], bufs[2], bufs[3]}};
    run_ckpt_transfer(&r->deck, &r->lay, &pt);
    char phase[4400];
    snprintf(phase, sizeof phase, "reading the checkpoint %s", path);
    watchdog_arm(&r->wd, phase, "checkpoint.timeout", r->deck.checkpoint.timeout);
    const int rc = ckpt_read_parallel(path, &r->st.gtab, &pt, st);
    watchdog_disarm(&r->wd);
    return rc;
}

/* Host-resident candidates: the file read into the homes (the table's whole layout in host memory),
 * the shared part then copied to the device and the slots emptied (their candidates come from home
 * again). Collective; the model changes only on MP_OK. */
static int run_ckpt_read_homes(run_t *r, const char *path, ckpt_state_t *st, int weights_only)
{
    model_t *md = &r->st.model;
    const size_t n = md->tab.total;
    float *buf[3] = {NULL, NULL, NULL};
    for (int k = 0; k < (weights_only ? 1 : 3); k++) /* staged: a failed read leaves the homes as they were */
        if (!(buf[k] = be_host_alloc(&r->st.be, n * sizeof(float)))) MP_ABORT("out of host memory reading %s", path);
    const int rc = run_ckpt_read_into(r, path, st, (float *[4]){buf[0], NULL, buf[1], buf[2]});
    if (rc == MP_OK) {
        run_home_forget(r);
        float *dev[3] = {md->params, md->m, md->v};
        for (int k = 0; k < (weights_only ? 1 : 3); k++) {
            memcpy(run_home(r, k), buf[k], n * sizeof(float));
            be_to_device(&r->st.be, dev[k], buf[k], md->tab.cand_off * sizeof(float));
        }
    }
    for (int k = 0; k < 3; k++)
        if (buf[k]) be_host_free(&r->st.be, buf[k]);
    return rc;
}

/* Every rank reads its own shard of the canonical checkpoint (any layout wrote it); with ZeRO-1
 * it keeps its replica's part of the moments. Collective; the model changes only on MP_OK. */
static int run_ckpt_read(run_t *r, const char *path, ckpt_state_t *st, int weights_only)
{
    const int zero = r->st.dp_on && r->deck.parallel.zero, host = be_host_visible(&r->st.be);
    model_t *md = &r->st.model;
    if (run_home(r, 0)) return run_ckpt_read_homes(r, path, st, weights_only);
    float *dev[4] = {md->params, md->params_old, md->m, md->v}, *buf[4];
    if (weights_only) dev[1] = dev[2] = dev[3] = NULL;
    /* read into host memory: the model's own buffers on the cpu backend, else staging copies (the
     * moments whole under ZeRO-1: the file holds them whole) */
    for (int k = 0; k < 4; k++) {
        const size_t n = k >= 2 && !zero ? md->mv_len : md->alloc;
        buf[k] = dev[k] && (!host || (k >= 2 && zero)) ? be_host_alloc(&r->st.be, n * sizeof(float)) : dev[k];
        if (dev[k] && !buf[k]) MP_ABORT("out of host memory reading %s", path);
    }
    const int rc = run_ckpt_read_into(r, path, st, buf);
    const size_t off = zero ? (size_t)r->lay.grid.replica_rank * md->mv_len : 0;
    for (int k = 0; k < 4; k++) {
        if (buf[k] == dev[k]) continue;
        if (rc == MP_OK) be_to_device(&r->st.be, dev[k], buf[k] + (k >= 2 ? off : 0),
                                      (k >= 2 ? md->mv_len : md->alloc) * sizeof(float));
        be_host_free(&r->st.be, buf[k]);
    }
    return rc;
}

/* The keys whose change makes a resumed run another training run than the one that wrote the
 * checkpoint. refuse: unless this command line sets the key with --set (a deliberate change), the
 * resume is refused: a deck edited for another experiment, resumed into an old directory, must not
 * silently continue someone else's trajectory. The others are warned about: extending train.steps
 * (and so the schedule) is how a finished run is trained on. Layout keys (parallel.*, pipeline.*,
 * train.micro_batch, memory.*, checkpoint.*) may change freely: resharding is a feature. The model's
 * shape is checked by the reader (and by --resume auto's fit check). */
static const struct {
    const char *section, *key;
    int refuse;
    const char *what; /* what it changes */
} run_ckpt_semantic_keys[] = {
    {"train", "seed", 1, "the data order (and the subnets a supernet samples)"},
    {"train", "batch", 1, "the samples per step and the data cursor"},
    {"data", "path", 1, "the training data"},
    {"data", "order", 1, "the data order"},
    {"data", "val_path", 0, "the validation data"},
    {"train", "steps", 0, "the learning-rate schedule's length"},
    {"train", "warmup", 0, "the learning-rate schedule"},
    {"train", "lr", 0, "the learning-rate schedule"},
    {"train", "min_lr", 0, "the learning-rate schedule"},
    {"train", "weight_decay", 0, "the optimizer"},
    {"train", "grad_clip", 0, "the optimizer"},
    {"train", "beta1", 0, "the optimizer"},
    {"train", "beta2", 0, "the optimizer"},
    {"train", "eps", 0, "the optimizer"},
    {"train", "precision", 0, "the arithmetic"},
    {"supernet", "window", 0, "the supernet's update rule"},
};

/* Whether this command line sets section.key with --set (read as deck_set reads it: spaces around
 * the name do not matter, "train.seed = 7" sets train.seed). */
static int run_ckpt_key_set(const run_opts_t *o, const char *section, const char *key)
{
    for (int i = 0; i < o->nsets; i++) {
        char sec[128], k[128];
        if (deck_set_key(o->sets[i], sec, sizeof sec, k, sizeof k) == MP_OK && !strcmp(sec, section) &&
            !strcmp(k, key))
            return 1;
    }
    return 0;
}

/* Rank 0: the checkpoint at path, whose head is h, against this run's deck: its /state deck parsed
 * by the deck's own parser (the head's checks made sure it parses and agrees with /state's seed,
 * shape and data cursor), values compared as deck_write writes them; train.seed from /state's own
 * attribute. Warns about each changed key; MP_ERR (reported, naming the keys and both values) if a
 * refused one changed. */
static int run_ckpt_semantics(const deck_t *d, run_files_t *files, const run_opts_t *opts, const char *path, const ckpt_head_info_t *h)
{
    char refused[1024] = "", why[900];
    deck_t *old = MP_MALLOC(sizeof *old);
    if (!old) return MP_ERR;
    if (deck_parse_text(old, h->deck, NULL, why, sizeof why) != MP_OK) {
        free(old);
        return MP_FAIL("resume refused: %s has no readable deck in /state (%s), so whether this run changes its "
                       "training semantics cannot be told: a corrupt file", path, why);
    }
    for (size_t i = 0; i < sizeof run_ckpt_semantic_keys / sizeof run_ckpt_semantic_keys[0]; i++) {
        const char *sec = run_ckpt_semantic_keys[i].section, *key = run_ckpt_semantic_keys[i].key;
        char was[4200], now[4200];
        if (deck_value_text(old, sec, key, was, sizeof was) != MP_OK ||
            deck_value_text(d, sec, key, now, sizeof now) != MP_OK)
            MP_ABORT("resume: %s.%s is not a deck key (run_ckpt_semantic_keys)", sec, key);
        if (!strcmp(sec, "train") && !strcmp(key, "seed")) snprintf(was, sizeof was, "%" PRIu64, h->seed);
        if (!strcmp(was, now)) continue;
        if (run_ckpt_semantic_keys[i].refuse && !run_ckpt_key_set(opts, sec, key)) {
            MP_ERROR("resume: %s was written with %s.%s = %s; this run's deck says %s.%s = %s (it changes %s)", path,
                     sec, key, was, sec, key, now, run_ckpt_semantic_keys[i].what);
            size_t o = strlen(refused);
            snprintf(refused + o, sizeof refused - o, "%s%s.%s", o ? ", " : "", sec, key);
            continue;
        }
        MP_WARN("resume: %s.%s changed from %s (the checkpoint's run) to %s: this changes %s", sec, key, was, now,
                run_ckpt_semantic_keys[i].what);
        if (files->log.log) fprintf(files->log.log, "warning: resume: %s.%s changed from %s to %s\n", sec, key, was, now);
    }
    free(old);
    if (!refused[0]) return MP_OK;
    return MP_FAIL("resume refused: %s changed since %s was written. Resume with the checkpoint's values; change them "
                   "on purpose with --set on the command line; or start a new run (--restart, or another --out)",
                   refused, path);
}

/* The checkpoint at path, trained on tokens of tokenizer ck, against this run's data (data.path's
 * tokenizer): what reads it (resume, eval, search) must feed it tokens of the same tokenizer. MP_OK,
 * or MP_ERR after an error naming both files and both tokenizers (printed when report is set). */
static int run_ckpt_tok_check(const run_t *r, const char *path, const tok_ident_t *ck, const char *what, int report)
{
    if (tok_ident_same(ck, &r->data_tok)) return MP_OK;
    char a[TOK_SHA256_HEX + 40], b[TOK_SHA256_HEX + 40];
    if (report)
        MP_ERROR("%s refused: %s was trained on tokens of tokenizer %s, but %s (data.path) holds tokens of tokenizer %s: "
                 "give the data file prepared with the checkpoint's tokenizer (mindpipe prep --tokenizer)", what, path,
                 tok_ident_text(ck, a, sizeof a), r->deck.data.path, tok_ident_text(&r->data_tok, b, sizeof b));
    return MP_ERR;
}

/* Rank 0, --resume auto: does the checkpoint whose head is h fit this run's model and optimizer?
 * 1, or 0 with why not in why_p (n bytes). */
static int run_ckpt_fits(const deck_t *d, const run_stage_t *st, const ckpt_head_info_t *h, char *why_p, size_t n)
{
    const model_cfg_t *c = &st->gtab.cfg;
    const struct {
        const char *name;
        int have, want;
    } f[] = {{"layers", h->layers, c->layers}, {"dim", h->dim, c->dim},   {"heads", h->heads, c->heads},
             {"seq_len", h->seq_len, c->seq_len}, {"vocab", h->vocab, c->vocab}, {"mlp_ratio", h->mlp_ratio, c->mlp_ratio}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].have != f[i].want)
            return snprintf(why_p, n, "it has model.%s=%d, the deck says %d", f[i].name, f[i].have, f[i].want), 0;
    const ckpt_family_t fam = ckpt_family_of(c);
    char diff[300];
    if (ckpt_family_differs(&h->fam, &fam, "the deck", diff, sizeof diff)) return snprintf(why_p, n, "it has %s", diff), 0;
    char blocks[2048];
    param_blocks_text(c, blocks, sizeof blocks);
    if (strcmp(blocks, h->blocks))
        return snprintf(why_p, n, "it has model.blocks='%.500s', the deck says '%.500s'", h->blocks, blocks), 0;
    if (!h->has_optim)
        return snprintf(why_p, n, "it holds no optimizer state (/optim): weights only, not a training checkpoint"), 0;
    if (sched_kind_versions(d->parallel.schedule_kind) == 2 && !h->has_model_prev)
        return snprintf(why_p, n, "it has no /model_prev (not written by a 2bw run) and this run is 2bw"), 0;
    return 1;
}

/* Rank 0, --resume auto: why dir/name cannot be resumed ("" when it can), its run id in id_p. The
 * cheap checks (head, run id, shape) come before verifying the whole file. */
static void run_ckpt_judge(const deck_t *d, run_files_t *files, run_stage_t *st, const char *dir, const char *name, char *why, size_t n, char *id_p)
{
    char path[4400];
    const ckpt_verdict_t *v;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    why[0] = 0;
    if (ckpt_verdict_get(&files->verdicts, dir, name, 0, &v) != MP_OK) {
        snprintf(why, n, "it cannot be read");
        return;
    }
    if (!v->head_ok) {
        snprintf(why, n, "%s", v->reason);
        return;
    }
    snprintf(id_p, CKPT_RUN_ID_LEN + 1, "%s", v->run_id);
    if (files->run_id[0] && v->run_id[0] && strcmp(files->run_id, v->run_id)) {
        snprintf(why, n, "it belongs to another run (run_id %s; this directory's run is %s)", v->run_id, files->run_id);
        return;
    }
    ckpt_head_info_t h;
    if (ckpt_file_head(path, &h, why, n) != MP_OK) return;
    const int fits = run_ckpt_fits(d, st, &h, why, n);
    ckpt_file_head_free(&h);
    if (fits && (ckpt_verdict_get(&files->verdicts, dir, name, 1, &v) != MP_OK || v->verified != 1))
        snprintf(why, n, "%s", v->reason);
}

/* Rank 0, --resume auto: newest first, the first checkpoint of RUN/ckpt that verifies, is this run's
 * (or carries no run id) and fits the deck, into path_p (n bytes) and its run id into id_p; each one
 * skipped is named with why. 1 found; 0 no checkpoint at all (start fresh); MP_ERR none fits
 * (reported, listing every candidate and why). */
static int run_ckpt_pick(run_t *r, char *path_p, size_t n, char *id_p)
{
    char dir[4200], why[1200], report[8192] = "";
    ckpt_file_t *files = NULL;
    int count = 0, found = 0;
    run_ckpt_dir(r, dir, sizeof dir);
    if (ckpt_dir_list(dir, &files, &count) != MP_OK && errno != ENOENT)
        return MP_FAIL("--resume auto: cannot list %s: %s", dir, strerror(errno));
    for (int i = count - 1; i >= 0 && !found; i--) {
        run_ckpt_judge(&r->deck, &r->files, &r->st, dir, files[i].name, why, sizeof why, id_p);
        if (!why[0]) {
            snprintf(path_p, n, "%s/%s", dir, files[i].name);
            found = 1;
        } else {
            MP_WARN("resume auto: skipping %s/%s: %s", dir, files[i].name, why);
            size_t o = strlen(report);
            if (o < sizeof report) snprintf(report + o, sizeof report - o, "\n  %s: %s", files[i].name, why);
        }
    }
    free(files);
    if (found) return 1;
    if (count) return MP_FAIL("--resume auto: none of the %d checkpoint(s) in %s can be resumed:%s", count, dir, report);
    runlog_printf(&r->files.log, "resume auto: no checkpoint in %s, starting from step 0", dir);
    return 0;
}

/* What rank 0 decided about --resume, for every rank. */
typedef struct {
    int status;                        /* 1 resume from path, 0 start fresh, MP_ERR refused */
    int id_changed;                    /* run_id is new to the directory: RUN/run_id is written */
    char path[4300];
    char run_id[CKPT_RUN_ID_LEN + 1];
} run_ckpt_choice_t;

/* Rank 0: which file --resume names (auto: run_ckpt_pick), whether its training semantics match
 * this deck, and the run id the run goes on with (the directory's; else the file's; else new). */
static void run_ckpt_choose(run_t *r, run_ckpt_choice_t *c)
{
    char file_id[CKPT_RUN_ID_LEN + 1] = "", reason[600];
    c->status = 1;
    if (!strcmp(r->opts.resume, "auto")) {
        c->status = run_ckpt_pick(r, c->path, sizeof c->path, file_id);
    } else {
        snprintf(c->path, sizeof c->path, "%s", r->opts.resume);
    }
    ckpt_head_info_t h;
    if (c->status == 1 && ckpt_file_head(c->path, &h, reason, sizeof reason) == MP_OK) {
        snprintf(file_id, sizeof file_id, "%s", h.run_id);
        if (run_ckpt_tok_check(r, c->path, &h.tok, "resume", 1) != MP_OK || run_ckpt_semantics(&r->deck, &r->files, &r->opts, c->path, &h) != MP_OK)
            c->status = MP_ERR;
        ckpt_file_head_free(&h);
    } /* else: an unreadable file named by --resume PATH is refused by the collective read, naming why */
    snprintf(c->run_id, sizeof c->run_id, "%s", r->files.run_id);
    if (c->status == MP_ERR || c->run_id[0]) return;
    c->id_changed = 1; /* files before run ids (and directories without RUN/run_id) belong to whoever resumes them */
    if (file_id[0]) snprintf(c->run_id, sizeof c->run_id, "%s", file_id);
    else if (rundir_id_new(c->run_id) != MP_OK) c->status = MP_ERR;
}

int run_ckpt_resume(run_t *r)
{
    if (!r->opts.resume) return MP_OK;
    run_ckpt_choice_t c = {0};
    if (r->lay.rank == 0) run_ckpt_choose(r, &c);
    /* only rank 0 verifies whole files; the others learn its choice */
    MPI_CHECK(MPI_Bcast(&c, sizeof c, MPI_BYTE, 0, MPI_COMM_WORLD));
    if (c.status == MP_ERR) return MP_ERR;
    int rc = MP_OK;
    if (c.status == 1) {
        ckpt_state_t st;
        const double t0 = perf_now();
        if (run_ckpt_read(r, c.path, &st, 0) != MP_OK) return MP_ERR;
        free(st.deck);
        if (st.step > r->deck.train.steps)
            return MP_FAIL("%s is at step %ld, past train.steps=%d: raise train.steps to train on from it", c.path,
                           st.step, r->deck.train.steps);
        const double dt = perf_now() - t0, mb = run_ckpt_file_mb(c.path);
        r->step = st.step;
        r->adam_t = st.adam_t;
        runlog_printf(&r->files.log, "resumed from %s at step %ld (%.1f MB read in %.3f s: %.0f MB/s)", c.path, r->step, mb,
                      dt, mb / dt);
    }
    snprintf(r->files.run_id, sizeof r->files.run_id, "%s", c.run_id);
    if (r->lay.rank == 0 && c.id_changed) {
        rc = rundir_id_write(r->files.out_dir, r->files.run_id);
        if (rc == MP_OK) runlog_printf(&r->files.log, "run id %s (RUN/run_id)", r->files.run_id);
    }
    return rc; /* train_main agrees on it */
}

int run_ckpt_load_weights(run_t *r, const char *path, long *step_p)
{
    ckpt_state_t st;
    if (run_ckpt_read(r, path, &st, 1) != MP_OK) return MP_ERR;
    free(st.deck);
    if (run_ckpt_tok_check(r, path, &st.tok, "reading the checkpoint", r->lay.rank == 0) != MP_OK) return MP_ERR;
    *step_p = st.step;
    return MP_OK;
}

int run_ckpt_init_from(run_t *r)
{
    if (!r->opts.init_from) return MP_OK;
    const char *dir = r->opts.init_from + 3; /* after "hf:" (cli_parse checked it) */
    model_t *md = &r->st.model;
    int rc = MP_OK;
    const int llama = r->st.gtab.cfg.arch == ARCH_LLAMA; /* LlamaForCausalLM, else GPT2LMHeadModel */
    if (run_home(r, 0)) rc = MP_FAIL("--init-from %s: a supernet is no Hugging Face model", r->opts.init_from);
    else if (r->lay.rank == 0) /* one process reads the whole header */
        rc = llama ? hf_llama_check(dir, &r->st.gtab) : hf_gpt2_check(dir, &r->st.gtab);
    MPI_CHECK(MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD));
    if (rc != MP_OK) return MP_ERR;
    float *h = be_host_alloc(&r->st.be, md->alloc * sizeof(float));
    if (!h) MP_ABORT("out of host memory reading %s", dir);
    memset(h, 0, md->alloc * sizeof(float)); /* the padding past tab.total stays zero */
    rc = llama ? hf_llama_load(dir, &r->st.gtab, &md->tab, h) : hf_gpt2_load(dir, &r->st.gtab, &md->tab, h);
    int bad = rc != MP_OK;
    wait_allreduce_sum(&r->lay.wait, &bad, 1, MPI_INT, MPI_COMM_WORLD, "the --init-from load's outcome");
    if (!bad) {
        float *dst[2] = {md->params, md->params_old};
        for (int k = 0; k < 2; k++) {
            if (!dst[k]) continue;
            if (be_host_visible(&r->st.be)) memcpy(dst[k], h, md->alloc * sizeof(float));
            else be_to_device(&r->st.be, dst[k], h, md->alloc * sizeof(float));
        }
        runlog_printf(&r->files.log, "initialised from %s/" HF_WEIGHTS_FILE " (Hugging Face %s): step 0, fresh optimizer",
                      dir, llama ? "LlamaForCausalLM" : "GPT-2");
        runlog_printf(&r->files.log, "model keys taken from %s/" HF_CONFIG_FILE ": %s", dir,
                      r->files.init_keys && r->files.init_keys[0] ? r->files.init_keys : "none (the deck sets them all)");
    }
    be_host_free(&r->st.be, h);
    return bad ? MP_ERR : MP_OK;
}
