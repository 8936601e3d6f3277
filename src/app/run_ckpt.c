/* A run's state to and from checkpoints (run_ckpt.h): host staging, the ZeRO-1 moment gather,
 * the collective write and read, --resume. */
#include "run_ckpt.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "ckpt.h"
#include "ckpt_files.h"
#include "perf.h"

float *run_ckpt_host_copy(run_t *r, const float *dev, size_t n)
{
    if (be_host_visible(&r->be) || !dev) return (float *)dev;
    float *h = be_host_alloc(&r->be, n * sizeof(float));
    if (!h) MP_ABORT("out of host memory staging %zu floats for a checkpoint", n);
    be_to_host(&r->be, h, dev, n * sizeof(float));
    return h;
}

void run_ckpt_host_release(run_t *r, float *host, const float *dev)
{
    if (host && host != dev) be_host_free(&r->be, host);
}

/* With ZeRO-1 the moments are sharded over the replicas: gather this replica's shards m, v (host
 * memory) into whole (local-layout) buffers on replica rank 0. Returns malloc'd m and v there,
 * NULL elsewhere. */
static void run_ckpt_gather_moments(run_t *r, const float *ms, const float *vs, float **m_p, float **v_p)
{
    const size_t n = r->model.alloc, k = r->model.mv_len;
    float *m = NULL, *v = NULL;
    if (r->grid.replica_rank == 0 && (!(m = MP_MALLOC(n * sizeof(float))) || !(v = MP_MALLOC(n * sizeof(float)))))
        MP_ABORT("out of memory gathering the optimizer state for a checkpoint");
    MPI_Request q[2];
    MPI_CHECK(MPI_Igather(ms, (int)k, MPI_FLOAT, m, (int)k, MPI_FLOAT, 0, r->grid.replica, &q[0]));
    MPI_CHECK(MPI_Igather(vs, (int)k, MPI_FLOAT, v, (int)k, MPI_FLOAT, 0, r->grid.replica, &q[1]));
    wait_all(&r->wait, 2, q, "the ZeRO-1 moment gather for a checkpoint");
    *m_p = m;
    *v_p = v;
}

/* A file's size in MB (1e6 bytes); 0 if it cannot be read. */
static double run_ckpt_file_mb(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (double)sb.st_size / 1e6 : 0.0;
}

/* checkpoint.transfer on a part: auto takes independent transfers where ranks outnumber the node's
 * cores (HDF5's internal collectives spin there). */
static void run_ckpt_transfer(const run_t *r, ckpt_part_t *pt)
{
    const deck_transfer_t t = r->deck.checkpoint.transfer_mode;
    pt->independent = t == DECK_TRANSFER_INDEPENDENT ||
                      (t == DECK_TRANSFER_AUTO && wait_node_oversubscribed(r->grid.node_size));
    pt->wait = &r->wait;
}

/* RUN/ckpt: the run's checkpoint directory. */
static void run_ckpt_dir(const run_t *r, char *dir_p, size_t n) { snprintf(dir_p, n, "%s/ckpt", r->out_dir); }

/* The counters and the layout stored with step r->step's checkpoint. */
static void run_ckpt_state(const run_t *r, ckpt_state_t *st_p)
{
    const model_t *md = &r->model;
    *st_p = (ckpt_state_t){.step = r->step, .adam_t = r->adam_t, .seed = r->deck.train.seed,
                           .data_cursor = r->step * r->deck.train.batch, .weight_versions = md->params_old ? 2 : 1};
    snprintf(st_p->layout, sizeof st_p->layout, "dp=%d tp=%d pp=%d sp=%d zero=%d v=%d", r->grid.size[GRID_DP],
             r->grid.size[GRID_TP], r->grid.size[GRID_PP], r->grid.size[GRID_SP], r->deck.parallel.zero,
             md->tab.nchunks);
    snprintf(st_p->schedule, sizeof st_p->schedule, "%s", deck_schedule_names[r->deck.parallel.schedule_kind]);
}

/* Rank 0, after a checkpoint at path was written in dt seconds: the log line, then pruning. */
static int run_ckpt_written(run_t *r, const char *path, double dt)
{
    char dir[4200];
    const double mb = run_ckpt_file_mb(path);
    runlog_printf(&r->log, "checkpoint %s (%.1f MB written in %.3f s: %.0f MB/s)", path, mb, dt, mb / dt);
    run_ckpt_dir(r, dir, sizeof dir);
    return ckpt_dir_prune(dir, r->deck.checkpoint.keep);
}

/* Written collectively: each stage's TP shards write their hyperslabs of the canonical tensors
 * (one replica writes; with ZeRO-1 its moments are first gathered over the replicas), so nothing
 * is assembled on one rank. */
int run_ckpt_write(run_t *r, int fail_midway)
{
    char dir[4200], path[4300];
    run_ckpt_dir(r, dir, sizeof dir);
    if (ckpt_name_path(dir, r->step, path, sizeof path) != MP_OK) return MP_ERR; /* alike on every rank */
    const int zero = r->dp_on && r->deck.parallel.zero;
    model_t *md = &r->model;
    /* the state in host memory (device backends: copied out; the file is written from there) */
    float *hp = run_ckpt_host_copy(r, md->params, md->alloc), *ho = run_ckpt_host_copy(r, md->params_old, md->alloc);
    float *hm = run_ckpt_host_copy(r, md->m, md->mv_len), *hv = run_ckpt_host_copy(r, md->v, md->mv_len);
    float *m = hm, *v = hv;
    if (zero) run_ckpt_gather_moments(r, hm, hv, &m, &v);
    ckpt_part_t pt = {.comm = MPI_COMM_WORLD, .local = &md->tab, .owner = r->grid.replica_rank == 0,
                      .bufs = {hp, ho, m ? m : hm, v ? v : hv}, .fail_midway = fail_midway};
    run_ckpt_transfer(r, &pt);
    ckpt_state_t st;
    run_ckpt_state(r, &st);
    const double t0 = perf_now();
    int rc = ckpt_write_parallel(path, &r->gtab, &pt, &st, r->deck_text);
    const double dt = perf_now() - t0;
    if (zero) {
        free(m);
        free(v);
    }
    run_ckpt_host_release(r, hp, md->params);
    run_ckpt_host_release(r, ho, md->params_old);
    run_ckpt_host_release(r, hm, md->m);
    run_ckpt_host_release(r, hv, md->v);
    if (rc == MP_OK && r->rank == 0) rc = run_ckpt_written(r, path, dt);
    int bad = rc != MP_OK;
    wait_allreduce_sum(&r->wait, &bad, 1, MPI_INT, MPI_COMM_WORLD, "the checkpoint's outcome");
    return bad ? MP_ERR : MP_OK;
}

/* Every rank reads its own shard of the canonical checkpoint (any layout wrote it); with ZeRO-1
 * it keeps its replica's part of the moments. Collective; the model changes only on MP_OK. */
static int run_ckpt_read(run_t *r, const char *path, ckpt_state_t *st, int weights_only)
{
    const int zero = r->dp_on && r->deck.parallel.zero, host = be_host_visible(&r->be);
    model_t *md = &r->model;
    float *dev[4] = {md->params, md->params_old, md->m, md->v}, *buf[4];
    if (weights_only) dev[1] = dev[2] = dev[3] = NULL;
    /* read into host memory: the model's own buffers on the cpu backend, else staging copies (the
     * moments whole under ZeRO-1: the file holds them whole) */
    for (int k = 0; k < 4; k++) {
        const size_t n = k >= 2 && !zero ? md->mv_len : md->alloc;
        buf[k] = dev[k] && (!host || (k >= 2 && zero)) ? be_host_alloc(&r->be, n * sizeof(float)) : dev[k];
        if (dev[k] && !buf[k]) MP_ABORT("out of host memory reading %s", path);
    }
    ckpt_part_t pt = {.comm = MPI_COMM_WORLD, .local = &md->tab, .owner = r->grid.replica_rank == 0,
                      .bufs = {buf[0], buf[1], buf[2], buf[3]}};
    run_ckpt_transfer(r, &pt);
    int rc = ckpt_read_parallel(path, &r->gtab, &pt, st);
    const size_t off = zero ? (size_t)r->grid.replica_rank * md->mv_len : 0;
    for (int k = 0; k < 4; k++) {
        if (buf[k] == dev[k]) continue;
        if (rc == MP_OK) be_to_device(&r->be, dev[k], buf[k] + (k >= 2 ? off : 0),
                                      (k >= 2 ? md->mv_len : md->alloc) * sizeof(float));
        be_host_free(&r->be, buf[k]);
    }
    return rc;
}

/* --resume auto: the newest checkpoint of RUN/ckpt that verifies into path_p (n bytes). 1: found;
 * 0: the directory holds no checkpoint at all (start fresh); MP_ERR: none of them verifies. */
static int run_ckpt_find_auto(run_t *r, char *path_p, size_t n)
{
    char dir[4200];
    run_ckpt_dir(r, dir, sizeof dir);
    if (ckpt_dir_find_latest(dir, path_p, n) == MP_OK) return 1;
    if (ckpt_dir_has_any(dir)) return MP_FAIL("--resume auto: no checkpoint in %s verifies", dir);
    runlog_printf(&r->log, "resume auto: no checkpoint in %s, starting from step 0", dir);
    return 0;
}

int run_ckpt_resume(run_t *r)
{
    char path[4300];
    const char *want = r->opts.resume;
    if (!want) return MP_OK;
    if (strcmp(want, "auto") == 0) {
        int found = run_ckpt_find_auto(r, path, sizeof path);
        if (found != 1) return found == 0 ? MP_OK : MP_ERR;
        want = path;
    }
    ckpt_state_t st;
    const double t0 = perf_now();
    if (run_ckpt_read(r, want, &st, 0) != MP_OK) return MP_ERR;
    if (st.step > r->deck.train.steps) {
        free(st.deck);
        return MP_FAIL("%s is at step %ld, past train.steps=%d: raise train.steps to train on from it", want, st.step,
                       r->deck.train.steps);
    }
    const double dt = perf_now() - t0, mb = run_ckpt_file_mb(want);
    r->step = st.step;
    r->adam_t = st.adam_t;
    free(st.deck);
    runlog_printf(&r->log, "resumed from %s at step %ld (%.1f MB read in %.3f s: %.0f MB/s)", want, r->step, mb, dt,
                  mb / dt);
    return MP_OK;
}

int run_ckpt_load_weights(run_t *r, const char *path, long *step_p)
{
    ckpt_state_t st;
    if (run_ckpt_read(r, path, &st, 1) != MP_OK) return MP_ERR;
    *step_p = st.step;
    free(st.deck);
    return MP_OK;
}
