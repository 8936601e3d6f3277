#include "migrate.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autosplit.h"
#include "check.h"
#include "perf.h"
#include "rebalance.h"

/* Tags of the layers' messages on the pipeline communicator: above every tag the executor uses, and
 * within MPI's guaranteed 32767 for model.layers ≤ 4096 (the deck's bound). The pipeline is
 * drained when they fly, so nothing else is in flight there anyway. */
#define MIGRATE_TAG0 28000

void migrate_sizes(const deck_t *d, const run_layout_t *lay, int *sizes_p)
{
    int l0[PARAM_MAX_CHUNKS], nl[PARAM_MAX_CHUNKS];
    for (int s = 0; s < lay->pp; s++) {
        run_stage_chunks(d, s, l0, nl); /* v = 1 (deck_validate refuses interleaving with migration) */
        sizes_p[s] = nl[0];
    }
}

/* The stage that holds layer l under sizes (pp stages). */
static int migrate_owner(const int *sizes, int pp, int l)
{
    for (int s = 0, l0 = 0; s < pp; l0 += sizes[s], s++)
        if (l < l0 + sizes[s]) return s;
    return pp - 1;
}

/* The buffers a layer's state lives in: weights, 2bw's older weights, both moments (NULL: absent). */
static void migrate_bufs(const model_t *m, float *bufs_p[4])
{
    bufs_p[0] = m->params, bufs_p[1] = m->params_old, bufs_p[2] = m->m, bufs_p[3] = m->v;
}

/* Floats of layer l's state in table t (its entries, in table order, once per present buffer). */
static size_t migrate_layer_floats(const param_table_t *t, int l, int nbufs)
{
    size_t n = 0;
    for (int i = 0; i < t->count; i++)
        if (t->entries[i].layer == l) n += t->entries[i].numel;
    return n * (size_t)nbufs;
}

/* Copies layer l's state between a message (msg, packed: buffer by buffer, entries in table order —
 * the same order on both sides, as both tables are built by one function for the same layer and
 * tensor-parallel rank) and buffers laid out by table t: out = 1 packs from the device, 0 unpacks
 * into host buffers. */
static void migrate_pack(run_stage_t *st, const param_table_t *t, int l, float *const bufs[4], float *msg, int out)
{
    size_t at = 0;
    for (int k = 0; k < 4; k++) {
        if (!bufs[k]) continue;
        for (int i = 0; i < t->count; i++) {
            const param_entry_t *e = &t->entries[i];
            if (e->layer != l) continue;
            if (out) be_to_host(&st->be, msg + at, bufs[k] + e->offset, e->numel * sizeof(float));
            else memcpy(bufs[k] + e->offset, msg + at, e->numel * sizeof(float));
            at += e->numel;
        }
    }
}

/* The new split's state of this rank, in host buffers laid out by the new table nt: what stays is
 * copied locally; each layer that changes stage goes from its old owner to its new one over the
 * pipeline communicator (every tensor-parallel rank and data-parallel replica moves its own shard
 * with its own peer), every wait under parallel.timeout naming the peer. host[k] is filled for
 * the buffers the model has. */
static void migrate_exchange(const deck_t *d, const run_layout_t *lay, run_stage_t *st, const int *old, const int *new, const param_table_t *nt, float *host[4],
                             long step)
{
    model_t *m = &st->model;
    float *dev[4];
    migrate_bufs(m, dev);
    int nbufs = 0;
    for (int k = 0; k < 4; k++) nbufs += dev[k] != NULL;
    for (int i = 0; i < nt->count; i++) { /* what stays: by name, from the old table */
        const param_entry_t *e = &nt->entries[i], *o = param_table_find(&m->tab, e->name);
        if (!o) continue;
        for (int k = 0; k < 4; k++)
            if (dev[k]) be_to_host(&st->be, host[k] + e->offset, dev[k] + o->offset, e->numel * sizeof(float));
    }
    const int L = d->model.layers, pp = lay->pp, me = lay->stage;
    MPI_Request *req = MP_CALLOC((size_t)L, sizeof *req);
    float **msg = MP_CALLOC((size_t)L, sizeof *msg);
    if (!req || !msg) MP_ABORT("out of memory for the live migration at step %ld", step);
    for (int l = 0; l < L; l++) { /* receives first, then sends: nothing waits on an unposted receive */
        const int from = migrate_owner(old, pp, l), to = migrate_owner(new, pp, l);
        req[l] = MPI_REQUEST_NULL;
        if (from == to || (from != me && to != me)) continue;
        const size_t n = migrate_layer_floats(from == me ? &m->tab : nt, l, nbufs);
        if (n > (size_t)2147483647) MP_ABORT("layer %d's state (%zu floats) exceeds one MPI message", l, n);
        if (!(msg[l] = malloc(n * sizeof(float) + 1))) MP_ABORT("out of memory moving layer %d", l);
        if (from == me) migrate_pack(st, &m->tab, l, dev, msg[l], 1);
        if (to == me)
            MPI_CHECK(MPI_Irecv(msg[l], (int)n, MPI_FLOAT, from, MIGRATE_TAG0 + l, lay->grid.comm[GRID_PP], &req[l]));
    }
    for (int l = 0; l < L; l++) {
        const int from = migrate_owner(old, pp, l), to = migrate_owner(new, pp, l);
        if (from == me && to != me)
            MPI_CHECK(MPI_Isend(msg[l], (int)migrate_layer_floats(&m->tab, l, nbufs), MPI_FLOAT, to, MIGRATE_TAG0 + l,
                                lay->grid.comm[GRID_PP], &req[l]));
    }
    for (int l = 0; l < L; l++) {
        if (req[l] == MPI_REQUEST_NULL) continue;
        const int from = migrate_owner(old, pp, l), to = migrate_owner(new, pp, l), peer = from == me ? to : from;
        char what[256];
        snprintf(what, sizeof what, "the live migration after step %ld: layer %d's weights and optimizer state %s "
                 "rank %d (stage %d)", step, l, from == me ? "sent to" : "from", st->exec.c.stage_rank[peer], peer);
        wait_all(&lay->wait, 1, &req[l], what);
        if (to == me) migrate_pack(st, nt, l, host, msg[l], 0);
    }
    for (int l = 0; l < L; l++) free(msg[l]);
    free(msg);
    free(req);
}

/* "1,5": a split as pipeline.layers writes it. */
static void migrate_text(const int *sizes, int pp, char *buf, size_t n)
{
    buf[0] = 0;
    for (int s = 0, o = 0; s < pp && o < (int)n; s++) o += snprintf(buf + o, n - (size_t)o, "%s%d", s ? "," : "", sizes[s]);
}

/* The deck now says the new split: the stage rebuilds from it, checkpoints record it in their deck
 * (a resume on any split reads them), and deck.ini keeps the one the run started with. */
static void migrate_set_split(deck_t *d, run_files_t *files, const run_layout_t *lay, const int *sizes)
{
    d->pipeline.chunks.n = lay->pp, d->pipeline.chunks.automatic = 0;
    for (int s = 0; s < lay->pp; s++) d->pipeline.chunks.layers[s] = sizes[s];
    migrate_text(sizes, lay->pp, d->pipeline.layers, sizeof d->pipeline.layers);
    free(files->deck_text);
    if (!(files->deck_text = deck_to_string(d))) MP_ABORT("out of memory formatting the deck after a live migration");
}

/* Moves the layers from split old to new and rebuilds this rank's stage (collective). */
static void migrate_move(run_t *r, const int *old, const int *new, long step)
{
    const deck_t *d = &r->deck;
    char phase[200];
    snprintf(phase, sizeof phase, "the live migration after step %ld (moving layers, rebuilding stage %d)", step,
             r->lay.stage);
    watchdog_arm(&r->wd, phase, "parallel.timeout", d->parallel.timeout);
    const double t0 = perf_now();
    /* the first move at or after the step: whether a re-plan moves depends on measured times, which a
     * busy host can even out (test_migrate once saw no move at step 3 of a 1,5 split) */
    if (d->debug.fail.mode == DECK_FAIL_MIGRATE && deck_fail_names(&d->debug.fail, r->lay.rank) && d->debug.fail.step <= step) {
        fprintf(stderr, "mindpipe: debug.fail_at=%s: rank %d stops (SIGSTOP) in the live migration after step %ld\n",
                d->debug.fail_at, r->lay.rank, step);
        fflush(stderr);
        mp_stop_for_good();
    }
    int l0 = 0;
    for (int s = 0; s < r->lay.stage; s++) l0 += new[s];
    const int nl = new[r->lay.stage];
    param_table_t nt;
    if (param_table_build_chunks(&nt, &r->st.model.cfg, 1, &l0, &nl, r->lay.stage == 0, r->lay.stage == r->lay.pp - 1,
                                 r->st.model.tab.tp, r->st.model.tab.tp_rank) != MP_OK)
        MP_ABORT("rank %d: out of memory planning the live migration after step %ld", r->lay.rank, step);
    float *host[4] = {NULL, NULL, NULL, NULL}, *dev[4];
    migrate_bufs(&r->st.model, dev);
    for (int k = 0; k < 4; k++)
        if (dev[k] && !(host[k] = mem_zalloc(nt.total * sizeof(float))))
            MP_ABORT("rank %d: out of host memory staging the live migration after step %ld", r->lay.rank, step);
    migrate_exchange(&r->deck, &r->lay, &r->st, old, new, &nt, host, step);
    migrate_set_split(&r->deck, &r->files, &r->lay, new);
    if (run_stage_rebuild(r, host) != MP_OK)
        MP_ABORT("rank %d: rebuilding stage %d for pipeline.layers=%s in the live migration after step %ld failed "
                 "(above); resume from the newest checkpoint", r->lay.rank, r->lay.stage, d->pipeline.layers, step);
    for (int k = 0; k < 4; k++) free(host[k]);
    param_table_free(&nt);
    trace_span(&r->files.trace, "live migration", step, -1, t0);
    watchdog_disarm(&r->wd);
}

/* The median of n values (sorted in place): a step slowed by another process on a shared host does
 * not move layers. */
static int migrate_cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double migrate_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, migrate_cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Every rank: the median compute seconds per step of each stage since the last re-plan (the slowest
 * replica of each stage: every rank of the job all-reduces the same vector, so every rank decides
 * alike), then the decision, its log line and, past the threshold, the move. */
static void migrate_replan(run_t *r, migrate_t *mg)
{
    const deck_t *d = &r->deck;
    const int pp = r->lay.pp, L = d->model.layers;
    const long step = r->step;
    double *t = MP_CALLOC((size_t)pp, sizeof *t), *w = MP_CALLOC((size_t)L, sizeof *w), we, wh;
    int *old = MP_CALLOC((size_t)pp, sizeof *old), *new = MP_CALLOC((size_t)pp, sizeof *new);
    if (!t || !w || !old || !new) MP_ABORT("out of memory re-planning the pipeline at step %ld", step);
    t[r->lay.stage] = migrate_median(mg->busy, mg->steps);
    char what[128];
    snprintf(what, sizeof what, "the live migration's stage times after step %ld", step);
    wait_allreduce(&r->lay.wait, t, pp, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, what);
    const int measured = mg->steps;
    mg->steps = 0;
    migrate_sizes(&r->deck, &r->lay, old);
    if (autosplit_layer_costs(d, &r->autosplit, w, &we, &wh) != MP_OK) MP_ABORT("re-planning the pipeline at step %ld", step);
    if (d->debug.replan_times == DECK_REPLAN_MODELLED) /* each stage its layers' modelled times: load-free */
        for (int s = 0, l = 0; s < pp; l += old[s], s++) {
            t[s] = (s == 0 ? we : 0.0) + (s == pp - 1 ? wh : 0.0);
            for (int k = l; k < l + old[s]; k++) t[s] += w[k];
        }
    const rebalance_in_t in = {L, pp, old, t, w, we, wh};
    double was, now;
    const double gain = rebalance_plan(&in, new, &was, &now);
    if (gain < 0) MP_ABORT("out of memory re-planning the pipeline at step %ld", step);
    char times[SIM_MAX_STAGES * 16] = "", from[DECK_STR], to[DECK_STR];
    for (int s = 0, o = 0; s < pp && o < (int)sizeof times; s++)
        o += snprintf(times + o, sizeof times - (size_t)o, "%s%.1f", s ? "/" : "", 1e3 * t[s]);
    migrate_text(old, pp, from, sizeof from);
    migrate_text(new, pp, to, sizeof to);
    const int move = gain > d->pipeline.replan_threshold;
    char how[64];
    if (d->debug.replan_times == DECK_REPLAN_MODELLED) snprintf(how, sizeof how, "modelled, debug.replan_times");
    else snprintf(how, sizeof how, "median of %d", measured);
    runlog_printf(&r->files.log, "step %ld: replan: stage times %s ms per step (%s); layers %s %s %s (predicted "
                  "gain %.1f%%%s)", step, times, how, from, move ? "->" : "kept; best", to, 100 * gain,
                  move ? "" : ", not above pipeline.replan_threshold");
    if (move) {
        int moved = 0;
        for (int l = 0; l < L; l++) moved += migrate_owner(old, pp, l) != migrate_owner(new, pp, l);
        trace_instant(&r->files.trace, "live migration: layers moved", step, moved);
        const double t0 = perf_now();
        migrate_move(r, old, new, step);
        double dt = perf_now() - t0;
        wait_allreduce(&r->lay.wait, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, "the live migration's duration");
        mg->moves++, mg->warmed = 0;
        runlog_printf(&r->files.log, "step %ld: replan: moved %d layer(s) in %.3f s; pipeline.layers=%s", step, moved, dt, to);
    }
    free(t), free(w), free(old), free(new);
}

void migrate_after_step(run_t *r, migrate_t *mg)
{
    const int n = r->deck.pipeline.replan_every;
    if (n <= 0) return;
    if (!mg->busy && !(mg->busy = MP_CALLOC((size_t)n, sizeof *mg->busy)))
        MP_ABORT("out of memory measuring stage times for pipeline.replan_every=%d", n);
    /* the first step on a fresh stage faults its memory in: not what it costs */
    if (mg->warmed && mg->steps < n) mg->busy[mg->steps++] = r->st.exec.busy;
    r->st.exec.busy = 0.0, mg->warmed = 1;
    if (r->step % n || r->step >= r->deck.train.steps || !mg->steps) return;
    migrate_replan(r, mg);
}

void migrate_free(migrate_t *mg)
{
    free(mg->busy);
    mg->busy = NULL;
}
