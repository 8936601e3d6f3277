/* The swap simulator (swapsim.h): an event-driven run of a node's ranks against a shared,
 * full-duplex host link. Between two events every rate is constant: k copies moving in one
 * direction each get bw·eff(k)/k (the link's progressive filling: equal demands, one shared
 * resource, so max-min fairness is the equal split). An event is a compute instruction ending, a
 * copy ending, or an input from another node arriving; at each one the ranks issue and start all
 * they can before time moves again. Everything is scanned in rank and list order, so two runs give
 * the same numbers to the bit. */
#include "swapsim.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "schedule.h"

typedef enum { S_FWD, S_BWD, S_OFF, S_PRE } sop_kind_t;

/* One instruction of a rank's program. */
typedef struct {
    sop_kind_t kind;
    int mb;
    double dur;           /* FWD, BWD: seconds */
    int dep_rank, dep_op; /* FWD, BWD: an instruction of another rank of the node that must end first */
    double release;       /* FWD, BWD: when its input from another node arrives */
    int xf;               /* OFF, PRE: its copy; BWD: its prefetch's copy */
    double end;           /* FWD, BWD: when it ended; -1 before */
} sop_t;

/* A copy goes NONE (not issued) -> QUEUED (on its rank's queue) -> ASKED (waiting for the arbiter's
 * grant; coordinated only) -> MOVING -> DONE. */
typedef enum { X_NONE, X_QUEUED, X_ASKED, X_MOVING, X_DONE } xstate_t;

typedef struct {
    int dir, queue;
    double bytes, left, t_ask;
    int after;            /* PRE: the OFF copy whose data it brings back */
    xstate_t st;
} xfer_t;

typedef struct {
    sop_t *ops;
    int n;
    xfer_t *xf;           /* in list order, which is the order the rank issues them */
    int nx;
    int *fwd_of, *bwd_of; /* per micro-batch: the index of its FWD, BWD in ops */
    int pc;               /* next instruction to issue */
    int running;          /* the compute instruction under way, -1 when idle */
    double run_end, free_at;
    int held, cap;        /* device stash buffers in use, and the pool */
    double wait;
} rank_t;

typedef struct {
    const swapsim_cfg_t *cfg;
    int coord, nr;
    rank_t rk[SWAPSIM_MAX_RANKS];
    int hold_r[2], hold_x[2]; /* coordinated: the copy holding each direction, -1 when free */
    double t;
} node_t;

static int fail(swapsim_result_t *res, const char *fmt, ...) MP_PRINTF(2, 3);
static int fail(swapsim_result_t *res, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->error, sizeof res->error, fmt, ap);
    va_end(ap);
    return MP_ERR;
}

double swapsim_eff(double alpha, int k)
{
    return k <= 1 ? 1.0 : 1.0 / (1.0 + alpha * (k - 1));
}

static int cfg_check(const swapsim_cfg_t *c, swapsim_result_t *res)
{
    if (c->ranks < 1 || c->ranks > SWAPSIM_MAX_RANKS)
        return fail(res, "ranks per node must be in 1..%d (got %d)", SWAPSIM_MAX_RANKS, c->ranks);
    if (c->layout == SWAPSIM_REPLICAS &&
        (c->pp < 1 || c->pp > SWAPSIM_MAX_RANKS || c->stage < 0 || c->stage >= c->pp))
        return fail(res, "replicas: need 1 <= pp <= %d and 0 <= stage < pp (got pp %d, stage %d)",
                    SWAPSIM_MAX_RANKS, c->pp, c->stage);
    if (c->m < 1) return fail(res, "m must be >= 1 (got %d)", c->m);
    if (!(c->tf >= 0 && c->tb >= 0 && c->bytes >= 0 && c->bw > 0 && c->alpha >= 0 && isfinite(c->bytes)))
        return fail(res, "need tf, tb, bytes, alpha >= 0 and bw > 0");
    if (c->prefetch < 0 || c->buffers < 0) return fail(res, "prefetch and buffers must be >= 0");
    if (c->engines != 1 && c->engines != 2) return fail(res, "engines must be 1 or 2 (got %d)", c->engines);
    return MP_OK;
}

static void rank_free(rank_t *k)
{
    free(k->ops);
    free(k->xf);
    free(k->fwd_of);
    free(k->bwd_of);
    memset(k, 0, sizeof *k);
}

static void node_free(node_t *nd)
{
    for (int r = 0; r < nd->nr; r++) rank_free(&nd->rk[r]);
}

/* Appends a copy of micro-batch mb's stash and its instruction; returns the copy's index. */
static int push_copy(rank_t *k, const swapsim_cfg_t *c, sop_kind_t kind, int mb)
{
    const int dir = kind == S_OFF ? SWAPSIM_D2H : SWAPSIM_H2D;
    k->xf[k->nx] = (xfer_t){.dir = dir, .queue = c->engines == 2 ? dir : 0, .bytes = c->bytes, .left = c->bytes,
                            .after = -1, .st = X_NONE};
    k->ops[k->n++] = (sop_t){.kind = kind, .mb = mb, .dep_rank = -1, .dep_op = -1, .xf = k->nx, .end = -1};
    return k->nx++;
}

/* The compute order of `stage` (1F1B's forwards and backwards; its messages cost nothing here). */
static int compute_order(const swapsim_cfg_t *c, int stage, int pp, sop_kind_t *kind, int *mb)
{
    instr_list_t l = {0};
    if (sched_build(&l, SCHED_1F1B, stage, pp, c->m, 1) != MP_OK) return MP_ERR;
    int nc = 0;
    for (int i = 0; i < l.n; i++) {
        if (l.ins[i].op != OP_FORWARD && l.ins[i].op != OP_BACKWARD) continue;
        kind[nc] = l.ins[i].op == OP_FORWARD ? S_FWD : S_BWD;
        mb[nc++] = l.ins[i].mb;
    }
    sched_free(&l);
    return nc == 2 * c->m ? MP_OK : MP_ERR;
}

/* The stash buffers the program has on the device at once: FWD to its OFF and PRE to its BWD, both
 * inclusive (as the executor sizes its pool). */
static int device_peak(const rank_t *k)
{
    int cur = 0, peak = 0;
    for (int i = 0; i < k->n; i++) {
        const sop_kind_t o = k->ops[i].kind;
        cur += o == S_FWD || o == S_PRE ? 1 : -1;
        if (cur > peak) peak = cur;
    }
    return peak;
}

/* Rank k's program: stage's compute order with OFF(mb) right after FWD(mb) and PRE(mb) `prefetch`
 * compute instructions before BWD(mb), never before OFF(mb); prefetches due at one point go in
 * backward order. */
static int rank_build(rank_t *k, const swapsim_cfg_t *c, int stage, int pp, swapsim_result_t *res)
{
    const int m = c->m, nc = 2 * m;
    sop_kind_t *kind = malloc((size_t)nc * sizeof *kind);
    int *mb = malloc((size_t)nc * sizeof *mb), *at = malloc((size_t)m * sizeof *at);
    int *off_x = malloc((size_t)m * sizeof *off_x), *pre_x = malloc((size_t)m * sizeof *pre_x);
    k->ops = malloc((size_t)(2 * nc) * sizeof *k->ops);
    k->xf = malloc((size_t)nc * sizeof *k->xf);
    k->fwd_of = malloc((size_t)m * sizeof *k->fwd_of);
    k->bwd_of = malloc((size_t)m * sizeof *k->bwd_of);
    int rc = MP_ERR;
    if (!kind || !mb || !at || !off_x || !pre_x || !k->ops || !k->xf || !k->fwd_of || !k->bwd_of) {
        fail(res, "out of memory building rank programs");
        goto out;
    }
    if (compute_order(c, stage, pp, kind, mb) != MP_OK) {
        fail(res, "no 1f1b list for stage %d of pp %d, m %d", stage, pp, c->m);
        goto out;
    }
    for (int i = 0; i < nc; i++) (kind[i] == S_FWD ? k->fwd_of : k->bwd_of)[mb[i]] = i; /* compute indices */
    for (int b = 0; b < m; b++) {
        at[b] = k->bwd_of[b] - c->prefetch;
        if (at[b] <= k->fwd_of[b]) at[b] = k->fwd_of[b] + 1;
    }
    for (int i = 0; i < nc; i++) { /* from here on fwd_of and bwd_of hold program indices */
        for (int j = i; j < nc; j++)
            if (kind[j] == S_BWD && at[mb[j]] == i) pre_x[mb[j]] = push_copy(k, c, S_PRE, mb[j]);
        (kind[i] == S_FWD ? k->fwd_of : k->bwd_of)[mb[i]] = k->n;
        k->ops[k->n++] = (sop_t){.kind = kind[i], .mb = mb[i], .dur = kind[i] == S_FWD ? c->tf : c->tb,
                                 .dep_rank = -1, .dep_op = -1, .xf = -1, .end = -1};
        if (kind[i] == S_FWD) off_x[mb[i]] = push_copy(k, c, S_OFF, mb[i]);
    }
    for (int b = 0; b < m; b++) {
        k->xf[pre_x[b]].after = off_x[b];
        k->ops[k->bwd_of[b]].xf = pre_x[b];
    }
    const int peak = device_peak(k);
    if (c->buffers && c->buffers < peak) {
        fail(res, "stage %d's list has %d stashes on the device at once; %d buffers cannot hold it", stage, peak,
             c->buffers);
        goto out;
    }
    k->cap = c->buffers ? c->buffers : peak;
    k->running = -1;
    rc = MP_OK;
out:
    free(kind);
    free(mb);
    free(at);
    free(off_x);
    free(pre_x);
    return rc;
}

/* Each rank's program, with its inputs: from the neighbouring ranks (pipeline), or at the times a
 * swap-free pipeline delivers them (replicas; `ideal` is that pipeline's finished node). */
static int node_build(node_t *nd, const swapsim_cfg_t *c, const node_t *ideal, swapsim_result_t *res)
{
    const int pipe = c->layout == SWAPSIM_PIPELINE, pp = pipe ? c->ranks : c->pp;
    nd->nr = c->ranks;
    for (int r = 0; r < nd->nr; r++)
        if (rank_build(&nd->rk[r], c, pipe ? r : c->stage, pp, res) != MP_OK) return MP_ERR;
    for (int r = 0; r < nd->nr; r++) {
        rank_t *k = &nd->rk[r];
        const int s = pipe ? r : c->stage;
        for (int b = 0; b < c->m; b++) {
            sop_t *f = &k->ops[k->fwd_of[b]], *g = &k->ops[k->bwd_of[b]];
            if (pipe) {
                if (s > 0) f->dep_rank = r - 1, f->dep_op = nd->rk[r - 1].fwd_of[b];
                if (s < pp - 1) g->dep_rank = r + 1, g->dep_op = nd->rk[r + 1].bwd_of[b];
            } else {
                if (s > 0) f->release = ideal->rk[s - 1].ops[ideal->rk[s - 1].fwd_of[b]].end;
                if (s < pp - 1) g->release = ideal->rk[s + 1].ops[ideal->rk[s + 1].bwd_of[b]].end;
            }
        }
    }
    return MP_OK;
}

/* Issues rank r's instructions in order while it is idle: copies go on its queue, and a compute
 * instruction starts once its inputs, its prefetch (BWD) or a free buffer (FWD) are there. */
static int rank_advance(node_t *nd, int r)
{
    rank_t *k = &nd->rk[r];
    int moved = 0;
    while (k->running < 0 && k->pc < k->n) {
        sop_t *o = &k->ops[k->pc];
        if (o->kind == S_OFF || o->kind == S_PRE) {
            k->xf[o->xf].st = X_QUEUED;
            k->pc++;
            moved = 1;
            continue;
        }
        double ready = k->free_at > o->release ? k->free_at : o->release;
        if (o->dep_rank >= 0) {
            const double e = nd->rk[o->dep_rank].ops[o->dep_op].end;
            if (e < 0) break;
            if (e > ready) ready = e;
        }
        if (ready > nd->t) break;
        if (o->kind == S_BWD && k->xf[o->xf].st != X_DONE) break;
        if (o->kind == S_FWD && k->held >= k->cap) break;
        if (o->kind == S_FWD) k->held++;
        k->wait += nd->t - ready; /* only copies can hold it back once it is ready */
        k->running = k->pc++;
        k->run_end = nd->t + o->dur;
        moved = 1;
    }
    return moved;
}

/* The head of each of rank r's queues leaves the queue once its data is there (PRE: its offload
 * done) and, for a prefetch, a buffer is free to receive it: it moves, or (coordinated) asks. */
static int rank_copies_start(node_t *nd, int r)
{
    rank_t *k = &nd->rk[r];
    int moved = 0;
    for (int q = 0; q < nd->cfg->engines; q++) {
        int h = 0;
        while (h < k->nx && (k->xf[h].queue != q || k->xf[h].st == X_DONE)) h++;
        if (h == k->nx || k->xf[h].st != X_QUEUED) continue;
        xfer_t *x = &k->xf[h];
        if (x->after >= 0 && k->xf[x->after].st != X_DONE) continue;
        if (x->dir == SWAPSIM_H2D) {
            if (k->held >= k->cap) continue;
            k->held++;
        }
        x->st = nd->coord ? X_ASKED : X_MOVING;
        x->t_ask = nd->t;
        moved = 1;
    }
    return moved;
}

/* Coordinated: a free direction goes to the copy that asked first (ties: lowest rank, then list
 * order), as a lock taken in arrival order would. */
static int arbiter_grant(node_t *nd)
{
    int moved = 0;
    for (int d = 0; d < 2; d++) {
        if (nd->hold_r[d] >= 0) continue;
        int br = -1, bx = -1;
        for (int r = 0; r < nd->nr; r++)
            for (int i = 0; i < nd->rk[r].nx; i++) {
                const xfer_t *x = &nd->rk[r].xf[i];
                if (x->st == X_ASKED && x->dir == d && (br < 0 || x->t_ask < nd->rk[br].xf[bx].t_ask)) br = r, bx = i;
            }
        if (br < 0) continue;
        nd->rk[br].xf[bx].st = X_MOVING;
        nd->hold_r[d] = br, nd->hold_x[d] = bx;
        moved = 1;
    }
    return moved;
}

static int node_done(const node_t *nd)
{
    for (int r = 0; r < nd->nr; r++) {
        const rank_t *k = &nd->rk[r];
        if (k->pc < k->n || k->running >= 0) return 0;
        for (int i = 0; i < k->nx; i++)
            if (k->xf[i].st != X_DONE) return 0;
    }
    return 1;
}

/* The next event after nd->t: a compute end, a copy end at the current rates, or an input from
 * another node that an idle rank waits for. INFINITY when nothing is under way. */
static double next_event(const node_t *nd, const double rate[2])
{
    double tn = INFINITY;
    for (int r = 0; r < nd->nr; r++) {
        const rank_t *k = &nd->rk[r];
        if (k->running >= 0) tn = fmin(tn, k->run_end);
        else if (k->pc < k->n && k->ops[k->pc].release > nd->t) tn = fmin(tn, k->ops[k->pc].release);
        for (int i = 0; i < k->nx; i++)
            if (k->xf[i].st == X_MOVING) tn = fmin(tn, nd->t + k->xf[i].left / rate[k->xf[i].dir]);
    }
    return tn;
}

/* Moves time to the next event: data flows at the current rates, and what ends there ends. */
static int node_step(node_t *nd, swapsim_result_t *res)
{
    int k_dir[2] = {0, 0};
    double rate[2];
    for (int r = 0; r < nd->nr; r++)
        for (int i = 0; i < nd->rk[r].nx; i++)
            if (nd->rk[r].xf[i].st == X_MOVING) k_dir[nd->rk[r].xf[i].dir]++;
    for (int d = 0; d < 2; d++) rate[d] = k_dir[d] ? nd->cfg->bw * swapsim_eff(nd->cfg->alpha, k_dir[d]) / k_dir[d] : 0;
    const double tn = next_event(nd, rate), dt = tn - nd->t;
    if (isinf(tn)) return fail(res, "deadlock at t = %g s: no instruction or copy can advance", nd->t);
    for (int d = 0; d < 2 && dt > 0; d++) { /* an overlap of no duration is no contention */
        if (k_dir[d]) res->busy[d] += dt;
        if (k_dir[d] > res->max_same_dir[d]) res->max_same_dir[d] = k_dir[d];
    }
    for (int r = 0; r < nd->nr; r++) {
        rank_t *k = &nd->rk[r];
        if (k->running >= 0 && k->run_end <= tn) {
            sop_t *o = &k->ops[k->running];
            o->end = k->free_at = k->run_end;
            if (o->kind == S_BWD) k->held--;
            k->running = -1;
        }
        for (int i = 0; i < k->nx; i++) {
            xfer_t *x = &k->xf[i];
            if (x->st != X_MOVING) continue;
            const int ends = nd->t + x->left / rate[x->dir] <= tn; /* the same sum next_event took */
            res->bytes_moved[x->dir] += rate[x->dir] * dt;
            x->left = ends ? 0 : x->left - rate[x->dir] * dt;
            if (!ends) continue;
            x->st = X_DONE;
            if (x->dir == SWAPSIM_D2H) k->held--; /* the offloaded stash's buffer is free again */
            if (nd->coord) nd->hold_r[x->dir] = -1;
        }
    }
    nd->t = tn;
    return MP_OK;
}

/* Runs a built node to its end. */
static int node_run(node_t *nd, swapsim_result_t *res)
{
    nd->hold_r[0] = nd->hold_r[1] = -1;
    for (;;) {
        int moved;
        do {
            moved = 0;
            for (int r = 0; r < nd->nr; r++) moved |= rank_advance(nd, r) | rank_copies_start(nd, r);
            if (nd->coord) moved |= arbiter_grant(nd);
        } while (moved);
        if (node_done(nd)) return MP_OK;
        if (node_step(nd, res) != MP_OK) return MP_ERR;
    }
}

/* A swap-free pipeline of the replicas' depth: when each stage's inputs would arrive. */
static int ideal_pipeline(node_t *ideal, const swapsim_cfg_t *c, swapsim_result_t *res)
{
    swapsim_cfg_t p = *c;
    p.layout = SWAPSIM_PIPELINE;
    p.ranks = c->pp;
    p.bytes = 0;
    p.buffers = 0;
    swapsim_result_t scratch;
    memset(&scratch, 0, sizeof scratch);
    ideal->cfg = &p;
    ideal->coord = 0;
    if (node_build(ideal, &p, NULL, res) != MP_OK) return MP_ERR;
    if (node_run(ideal, &scratch) != MP_OK) return fail(res, "ideal pipeline: %s", scratch.error);
    ideal->cfg = NULL; /* p dies here; only the end times are read later */
    return MP_OK;
}

int swapsim_run(const swapsim_cfg_t *cfg, int coordinated, swapsim_result_t *res)
{
    memset(res, 0, sizeof *res);
    if (cfg_check(cfg, res) != MP_OK) return MP_ERR;
    node_t *nd = calloc(2, sizeof *nd), *ideal = nd + 1;
    if (!nd) return fail(res, "out of memory");
    int rc = MP_ERR;
    if (cfg->layout == SWAPSIM_REPLICAS && ideal_pipeline(ideal, cfg, res) != MP_OK) goto out;
    nd->cfg = cfg;
    nd->coord = coordinated != 0;
    if (node_build(nd, cfg, ideal, res) != MP_OK || node_run(nd, res) != MP_OK) goto out;
    for (int r = 0; r < nd->nr; r++) {
        const rank_t *k = &nd->rk[r];
        res->step[r] = k->free_at;
        res->wait[r] = k->wait;
        res->step_max = fmax(res->step_max, k->free_at);
        res->wait_max = fmax(res->wait_max, k->wait);
        for (int i = 0; i < k->nx; i++) res->bytes_asked[k->xf[i].dir] += k->xf[i].bytes;
    }
    rc = MP_OK;
out:
    node_free(nd);
    node_free(ideal);
    free(nd);
    return rc;
}

void swapsim_cfg_default(swapsim_cfg_t *cfg, swapsim_layout_t layout, int ranks)
{
    *cfg = (swapsim_cfg_t){
        .layout = layout, .ranks = ranks, .pp = 4, .stage = 0, .m = 8,
        .tf = 10e-3, .tb = 20e-3, .bytes = 250e6, .bw = 25e9, .alpha = 0.05,
        .prefetch = 1, .buffers = 0, .engines = 1,
    };
}

int swapsim_table(FILE *f, const swapsim_cfg_t *cfg)
{
    static const int ranks[] = {2, 4, 8};
    fprintf(f, "| ranks per node | uncoordinated step (ms) | coordinated step (ms) | speedup | exposed wait, "
               "uncoordinated (ms) | exposed wait, coordinated (ms) |\n");
    fprintf(f, "|---:|---:|---:|---:|---:|---:|\n");
    for (size_t i = 0; i < sizeof ranks / sizeof ranks[0]; i++) {
        swapsim_cfg_t c = *cfg;
        c.ranks = ranks[i];
        swapsim_result_t u, o;
        if (swapsim_run(&c, 0, &u) != MP_OK) return MP_FAIL("swap simulator, %d ranks: %s", c.ranks, u.error);
        if (swapsim_run(&c, 1, &o) != MP_OK) return MP_FAIL("swap simulator, %d ranks: %s", c.ranks, o.error);
        fprintf(f, "| %d | %.1f | %.1f | %.3f | %.1f | %.1f |\n", c.ranks, 1e3 * u.step_max, 1e3 * o.step_max,
                u.step_max / o.step_max, 1e3 * u.wait_max, 1e3 * o.wait_max);
    }
    return MP_OK;
}
