#include "sim.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "lower.h"

int sim_fail(sim_result_t *res, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->error, sizeof res->error, fmt, ap);
    va_end(ap);
    return MP_ERR;
}

/* ---- the lists themselves: what must hold whatever the timing ---- */

typedef struct {
    int K, m;
    int *fwd, *bwd, *wgt;    /* (K, m): times each forward, B (BACKWARD_B or BACKWARD) and W (BACKWARD_W or
                                BACKWARD) ran */
    int *sent, *recvd;       /* (2, K, m): times each message (activation of chunk k, gradient of chunk k) */
    int *last_b, *last_w;    /* (K): the newest micro-batch whose B (W) ran */
} sim_count_t;

#define AT(a, k, mb) ((a)[(size_t)(k) * c->m + (mb)])
#define MSG(a, g, k, mb) ((a)[((size_t)(g) * c->K + (k)) * c->m + (mb)])

/* A forward, backward, B or W of (mb, chunk k) on stage s: each once, B after the forward, W after
 * its B, B's and W's each in micro-batch order per chunk (the order the gradients accumulate in),
 * and across a boundary inside the stage (V's turn) after the work of the chunk it takes from. */
static int sim_check_compute(sim_count_t *c, const instr_list_t *l, const instr_t *in, int s, int pp, sim_result_t *res)
{
    const int k = in->chunk, mb = in->mb, b = in->op != OP_BACKWARD_W, w = in->op != OP_BACKWARD_B;
    const char *name = op_names[in->op];
    if (in->op == OP_FORWARD) {
        if (AT(c->fwd, k, mb)++) return sim_fail(res, "stage %d runs the forward of micro-batch %d chunk %d twice", s, mb, k);
        if (k > 0 && sched_place_edge_local(l->place, k - 1, pp) && !AT(c->fwd, k - 1, mb))
            return sim_fail(res, "stage %d: forward of micro-batch %d chunk %d before its input's, chunk %d", s, mb, k, k - 1);
        return MP_OK;
    }
    if (b) {
        if (!AT(c->fwd, k, mb)) return sim_fail(res, "stage %d: %s of micro-batch %d chunk %d before its forward", s, name, mb, k);
        if (AT(c->bwd, k, mb)++) return sim_fail(res, "stage %d runs the backward of micro-batch %d chunk %d twice", s, mb, k);
        if (mb != c->last_b[k] + 1) return sim_fail(res, "stage %d: chunk %d's backward of micro-batch %d out of order", s, k, mb);
        c->last_b[k] = mb;
        if (k < c->K - 1 && sched_place_edge_local(l->place, k, pp) && !AT(c->bwd, k + 1, mb))
            return sim_fail(res, "stage %d: %s of micro-batch %d chunk %d before its gradient's, chunk %d", s, name, mb, k, k + 1);
    }
    if (w) {
        if (!AT(c->bwd, k, mb)) return sim_fail(res, "stage %d: W of micro-batch %d chunk %d before its B", s, mb, k);
        if (AT(c->wgt, k, mb)++) return sim_fail(res, "stage %d runs the W of micro-batch %d chunk %d twice", s, mb, k);
        if (mb != c->last_w[k] + 1)
            return sim_fail(res, "stage %d: chunk %d's W of micro-batch %d out of micro-batch order", s, k, mb);
        c->last_w[k] = mb;
    }
    return MP_OK;
}

/* One stage's list in order: peers, counts and orders (sim_check_compute). */
static int sim_check_stage(sim_count_t *c, const instr_list_t *l, int s, int pp, sim_result_t *res)
{
    for (int i = 0; i < l->n; i++) {
        const instr_t *in = &l->ins[i];
        const int k = in->chunk, mb = in->mb, K = c->K;
        if (in->op == OP_LOAD_BATCH || in->op == OP_OPTIMIZER_STEP || in->op == OP_REDUCE_GRADS) continue;
        if (in->op >= OP_EVICT) continue; /* balance: memlists.c checks them */
        if (mb < 0 || mb >= c->m || k < 0 || k >= K || sched_place_stage(l->place, k, pp) != s)
            return sim_fail(res, "stage %d: %s of micro-batch %d chunk %d is not its to run", s, op_names[in->op], mb, k);
        switch (in->op) {
        case OP_FORWARD:
        case OP_BACKWARD:
        case OP_BACKWARD_B:
        case OP_BACKWARD_W:
            if (sim_check_compute(c, l, in, s, pp, res) != MP_OK) return MP_ERR;
            break;
        case OP_SEND_ACT:
        case OP_SEND_GRAD: {
            const int act = in->op == OP_SEND_ACT, to = act ? k + 1 : k - 1;
            if (to < 0 || to >= K || in->peer != sched_place_stage(l->place, to, pp))
                return sim_fail(res, "stage %d sends micro-batch %d of chunk %d to a stage that does not hold its peer", s, mb, k);
            if (sched_place_edge_local(l->place, act ? k : k - 1, pp))
                return sim_fail(res, "stage %d sends micro-batch %d of chunk %d to itself across V's turn", s, mb, k);
            if (MSG(c->sent, !act, k, mb)++) return sim_fail(res, "stage %d sends micro-batch %d of chunk %d twice", s, mb, k);
            break;
        }
        case OP_RECV_ACT:
        case OP_RECV_GRAD: {
            const int act = in->op == OP_RECV_ACT, from = act ? k - 1 : k + 1;
            if (from < 0 || from >= K || in->peer != sched_place_stage(l->place, from, pp))
                return sim_fail(res, "stage %d receives micro-batch %d of chunk %d from a stage that cannot send it", s, mb, k);
            if (sched_place_edge_local(l->place, act ? k - 1 : k, pp))
                return sim_fail(res, "stage %d receives micro-batch %d of chunk %d from itself across V's turn", s, mb, k);
            if (MSG(c->recvd, !act, from, mb)++) return sim_fail(res, "stage %d receives micro-batch %d of chunk %d twice", s, mb, k);
            break;
        }
        default:
            break;
        }
    }
    return MP_OK;
}

/* Every (micro-batch, chunk) of every stage's list forward, B and W exactly once (a BACKWARD is
 * both), in the orders sim_check_compute holds, every message across a boundary between stages
 * sent to the stage that holds its peer chunk and received there once. Timing-free: the engine
 * below finds deadlocks and crossed messages. */
static int sim_check_counts(const sim_count_t *c, sched_place_t place, int pp, sim_result_t *res)
{
    for (int k = 0; k < c->K; k++)
        for (int mb = 0; mb < c->m; mb++) {
            if (AT(c->fwd, k, mb) != 1 || AT(c->bwd, k, mb) != 1 || AT(c->wgt, k, mb) != 1)
                return sim_fail(res, "micro-batch %d of chunk %d runs forward %d, backward (B) %d and W %d times", mb, k,
                                AT(c->fwd, k, mb), AT(c->bwd, k, mb), AT(c->wgt, k, mb));
            for (int g = 0; g < 2; g++) {
                const int needed = g ? k > 0 && !sched_place_edge_local(place, k - 1, pp)
                                     : k < c->K - 1 && !sched_place_edge_local(place, k, pp);
                if (needed && (MSG(c->sent, g, k, mb) != 1 || MSG(c->recvd, g, k, mb) != 1))
                    return sim_fail(res, "a message of micro-batch %d chunk %d is never %s", mb, k,
                                    MSG(c->sent, g, k, mb) ? "received" : "sent");
            }
        }
    return MP_OK;
}

static int sim_check_lists(const instr_list_t *lists, int pp, int m, int v, sim_result_t *res)
{
    sim_count_t cc = {.K = pp * v, .m = m}, *c = &cc;
    const size_t n = (size_t)c->K * m;
    int rc = MP_ERR;
    c->last_b = malloc((size_t)c->K * sizeof(int)), c->last_w = malloc((size_t)c->K * sizeof(int));
    c->fwd = calloc(n, sizeof(int)), c->bwd = calloc(n, sizeof(int)), c->wgt = calloc(n, sizeof(int));
    c->sent = calloc(2 * n, sizeof(int)), c->recvd = calloc(2 * n, sizeof(int));
    if (!c->last_b || !c->last_w || !c->fwd || !c->bwd || !c->wgt || !c->sent || !c->recvd) {
        sim_fail(res, "out of memory checking a schedule");
        goto out;
    }
    for (int k = 0; k < c->K; k++) c->last_b[k] = c->last_w[k] = -1;
    for (int s = 0; s < pp; s++)
        if (lists[s].place != lists[0].place) {
            sim_fail(res, "stage %d's list places the chunks otherwise than stage 0's", s);
            goto out;
        }
    for (int s = 0; s < pp; s++)
        if (sim_check_stage(c, &lists[s], s, pp, res) != MP_OK) goto out;
    rc = sim_check_counts(c, lists[0].place, pp, res);
out:
    free(c->last_b), free(c->last_w), free(c->fwd), free(c->bwd), free(c->wgt), free(c->sent), free(c->recvd);
    return rc;
}

/* ---- the engine: lowered programs against a matching rule ---- */

typedef struct {
    const lower_prog_t *progs;
    int pp, K, M, v;
    sim_match_t rule;
    sched_costs_t unit;          /* the uniform per-stage times (a chunk takes 1/v of them) */
    const sim_costs_t *costs;    /* NULL: the uniform times, messages free */
    double first[SIM_MAX_STAGES], last[SIM_MAX_STAGES]; /* per stage: start of its first forward, B or W
                                                           (-1 none yet) and end of its last */
    int (*pos)[LS_STREAMS];      /* per stage and stream: ops done */
    double (*clock)[LS_STREAMS]; /* per stage and stream: when its last op ended */
    double *fin[SIM_MAX_STAGES][LS_STREAMS]; /* per op: when it ended */
    double *sent;                /* tag rule: (2, K, M) when the message left, -1 not yet */
} sim_engine_t;

/* When op o of stage s may start: -1 while one of its event waits is not done. */
static double sim_ready(const sim_engine_t *e, int s, int x, const lower_op_t *o)
{
    double t = e->clock[s][x];
    for (int d = 0; d < o->ndeps; d++) {
        const int y = o->dep_stream[d], i = o->dep_idx[d];
        if (e->pos[s][y] <= i) return -1.0;
        if (e->fin[s][y][i] > t) t = e->fin[s][y][i];
    }
    return t;
}

static void sim_finish(sim_engine_t *e, int s, int x, double end)
{
    e->fin[s][x][e->pos[s][x]++] = end;
    e->clock[s][x] = end;
}

/* Tries the op at the head of stage s's stream x: 1 ran, 0 blocked, -1 crossed message. */
static int sim_step(sim_engine_t *e, const instr_list_t *lists, int s, int x, sim_result_t *res)
{
    const lower_op_t *o = &e->progs[s].s[x].ops[e->pos[s][x]];
    double ready = sim_ready(e, s, x, o);
    if (ready < 0) return 0;
    const instr_t *in = &lists[s].ins[o->instr];
    if (o->kind == LK_COMPUTE && o->wait_chan >= 0) { /* host: it reads a message posted earlier */
        const double at = e->sent[((size_t)o->wait_chan * e->K + o->wait_k) * e->M + o->wait_mb];
        if (at < 0) return 0;
        if (at > ready) ready = at;
    }
    if (o->kind == LK_POST) { /* an MPI receive posted: its reader waits (above) */
        sim_finish(e, s, x, ready);
        return 1;
    }
    if (o->kind == LK_COMPUTE) {
        const sched_costs_t *u = &e->unit;
        const double cost = e->costs                    ? e->costs->compute(e->costs->ctx, s, in)
                            : o->op == OP_FORWARD    ? u->tf / e->v
                            : o->op == OP_BACKWARD   ? (u->tb + u->tw) / e->v
                            : o->op == OP_BACKWARD_B ? u->tb / e->v
                            : o->op == OP_BACKWARD_W ? u->tw / e->v
                                                     : 0.0;
        const int work = o->op == OP_FORWARD || o->op == OP_BACKWARD || o->op == OP_BACKWARD_B || o->op == OP_BACKWARD_W;
        if (work && e->first[s] < 0) e->first[s] = ready;
        if (work) e->last[s] = ready + cost;
        sim_finish(e, s, x, ready + cost);
        return 1;
    }
    /* a message's time on the wire: from its send's start to its receive's earliest end */
    const double wire = e->costs && o->kind == LK_SEND ? e->costs->wire(e->costs->ctx, s, in) : 0.0;
    if (e->rule == SIM_MATCH_TAG) { /* MPI: eager sends, receives by tag */
        double *t = &e->sent[((size_t)o->chan * e->K + o->k) * e->M + o->mb];
        if (o->kind == LK_SEND) {
            *t = ready + wire;
            sim_finish(e, s, x, ready);
            return 1;
        }
        if (*t < 0) return 0;
        sim_finish(e, s, x, ready > *t ? ready : *t);
        return 1;
    }
    /* NCCL: the partner must be at the head of the peer's matching stream, its waits done */
    const int q = o->peer;
    if (q < 0 || q >= e->pp) return 0;
    const int y = lower_partner_stream(&e->progs[q], x);
    if (e->pos[q][y] >= e->progs[q].s[y].n) return 0;
    const lower_op_t *p = &e->progs[q].s[y].ops[e->pos[q][y]];
    if (p->kind == LK_COMPUTE || p->kind == o->kind || p->peer != s || p->chan != o->chan) return 0;
    const double ready_p = sim_ready(e, q, y, p);
    if (ready_p < 0) return 0;
    if (p->k != o->k || p->mb != o->mb) {
        const instr_t *a = &lists[s].ins[o->instr], *b = &lists[q].ins[p->instr];
        sim_fail(res, "stage %d's %s of micro-batch %d chunk %d meets stage %d's %s of micro-batch %d chunk %d on the %s "
                      "stream: NCCL would deliver it to the wrong buffer",
                 s, op_names[a->op], a->mb, a->chunk, q, op_names[b->op], b->mb, b->chunk, lower_stream_names[x]);
        return -1;
    }
    const instr_t *sender = o->kind == LK_SEND ? in : &lists[q].ins[p->instr];
    const int sender_stage = o->kind == LK_SEND ? s : q;
    const double end = (ready > ready_p ? ready : ready_p) +
                       (e->costs ? e->costs->wire(e->costs->ctx, sender_stage, sender) : 0.0);
    sim_finish(e, s, x, end);
    sim_finish(e, q, y, end);
    return 1;
}

static int sim_engine_alloc(sim_engine_t *e, const lower_prog_t *progs, int pp, int K, int M)
{
    memset(e, 0, sizeof *e);
    e->progs = progs, e->pp = pp, e->K = K, e->M = M;
    e->pos = calloc((size_t)pp, sizeof *e->pos);
    e->clock = calloc((size_t)pp, sizeof *e->clock);
    e->sent = malloc((size_t)4 * K * M * sizeof(double)); /* activations, gradients, balance out and back */
    if (!e->pos || !e->clock || !e->sent) return MP_ERR;
    for (size_t i = 0; i < (size_t)4 * K * M; i++) e->sent[i] = -1.0;
    for (int s = 0; s < pp; s++)
        for (int x = 0; x < LS_STREAMS; x++)
            if (!(e->fin[s][x] = malloc(((size_t)progs[s].s[x].n + 1) * sizeof(double)))) return MP_ERR;
    return MP_OK;
}

static void sim_engine_free(sim_engine_t *e)
{
    for (int s = 0; s < e->pp; s++)
        for (int x = 0; x < LS_STREAMS; x++) free(e->fin[s][x]);
    free(e->pos), free(e->clock), free(e->sent);
}

/* Why the engine stopped with ops left: the first stream that cannot move. */
static int sim_deadlock(const sim_engine_t *e, const instr_list_t *lists, sim_result_t *res)
{
    for (int s = 0; s < e->pp; s++)
        for (int x = 0; x < LS_STREAMS; x++)
            if (e->pos[s][x] < e->progs[s].s[x].n) {
                const instr_t *b = &lists[s].ins[e->progs[s].s[x].ops[e->pos[s][x]].instr];
                if (e->progs[s].target == LOWER_HOST)
                    return sim_fail(res, "deadlock: stage %d waits forever at %s of micro-batch %d chunk %d", s,
                                    op_names[b->op], b->mb, b->chunk);
                return sim_fail(res, "deadlock: stage %d's %s stream waits forever at %s of micro-batch %d chunk %d", s,
                                lower_stream_names[x], op_names[b->op], b->mb, b->chunk);
            }
    return MP_OK;
}

static int sim_run_engine(const instr_list_t *lists, const lower_prog_t *progs, int pp, int v, sim_match_t rule,
                          const sched_costs_t *unit, const sim_costs_t *costs, sim_result_t *res)
{
    int M = 1, rc = MP_ERR;
    for (int s = 0; s < pp; s++)
        for (int i = 0; i < lists[s].n; i++)
            if (lists[s].ins[i].mb + 1 > M) M = lists[s].ins[i].mb + 1;
    sim_engine_t e;
    if (sim_engine_alloc(&e, progs, pp, pp * v, M) != MP_OK) {
        sim_fail(res, "out of memory simulating a schedule");
        goto out;
    }
    e.rule = rule, e.v = v, e.unit = *unit, e.costs = costs;
    for (int s = 0; s < pp; s++) e.first[s] = -1.0, e.last[s] = 0.0;
    for (int progress = 1; progress;) {
        progress = 0;
        for (int s = 0; s < pp; s++)
            for (int x = 0; x < LS_STREAMS; x++)
                while (e.pos[s][x] < progs[s].s[x].n) {
                    const int r = sim_step(&e, lists, s, x, res);
                    if (r < 0) goto out;
                    if (r == 0) break;
                    progress = 1;
                }
    }
    if (sim_deadlock(&e, lists, res) != MP_OK) goto out;
    res->makespan = 0.0;
    res->span = 0.0;
    for (int s = 0; s < pp; s++) {
        for (int x = 0; x < LS_STREAMS; x++)
            if (e.clock[s][x] > res->makespan) res->makespan = e.clock[s][x];
        if (e.first[s] >= 0 && e.last[s] - e.first[s] > res->span) res->span = e.last[s] - e.first[s];
    }
    rc = MP_OK;
out:
    sim_engine_free(&e);
    return rc;
}

int sim_run_programs(const instr_list_t *lists, const lower_prog_t *progs, int pp, int v, sim_match_t rule,
                     const sched_costs_t *unit, sim_result_t *res)
{
    return sim_run_engine(lists, progs, pp, v, rule, unit, NULL, res);
}

sched_costs_t sim_costs_fused(double tf, double tb) { return (sched_costs_t){tf, tb / 2.0, tb / 2.0}; }

/* The stash peaks of res from the lists: slots (to W), to B, and in stage units (a chunk's stash
 * weighs 1/v of the stage's: the stage's layers split evenly over its v chunks). */
static void sim_peaks(const instr_list_t *lists, int pp, int v, sim_result_t *res)
{
    for (int s = 0; s < pp; s++) {
        res->peak_stash[s] = sched_list_peak(&lists[s], 0);
        res->peak_stash_b[s] = sched_list_peak_b(&lists[s], 0);
        res->peak_units[s] = (double)res->peak_stash[s] / v;
        if (res->peak_units[s] > res->peak_units_max) res->peak_units_max = res->peak_units[s];
    }
}

/* sim_lower_and_run with costs (NULL: the uniform times) */
static int sim_lower_and_run_c(const instr_list_t *lists, int pp, int m, int v, lower_target_t target, sim_match_t rule,
                               const sched_costs_t *unit, const sim_costs_t *costs, sim_result_t *res)
{
    memset(res, 0, sizeof *res);
    if (pp > SIM_MAX_STAGES) return sim_fail(res, "more than %d stages", SIM_MAX_STAGES);
    if (sim_check_lists(lists, pp, m, v, res) != MP_OK) return MP_ERR;
    int M = m;
    for (int s = 0; s < pp; s++)
        for (int i = 0; i < lists[s].n; i++)
            if (lists[s].ins[i].mb + 1 > M) M = lists[s].ins[i].mb + 1;
    lower_prog_t progs[SIM_MAX_STAGES];
    int lowered = 0, rc = MP_ERR;
    for (; lowered < pp; lowered++)
        if (lower_stage(&lists[lowered], pp * v, M, target, &progs[lowered]) != MP_OK) {
            sim_fail(res, "out of memory lowering stage %d's list", lowered);
            goto out;
        }
    if (sim_run_engine(lists, progs, pp, v, rule, unit, costs, res) != MP_OK) goto out;
    res->busy = costs ? 0.0 : m * (unit->tf + unit->tb + unit->tw);
    res->bubble = res->makespan > 0 && !costs ? 1.0 - res->busy / res->makespan : 0.0;
    res->span_bubble = res->span > 0 && !costs ? 1.0 - res->busy / res->span : 0.0;
    sim_peaks(lists, pp, v, res);
    rc = MP_OK;
out:
    for (int s = 0; s < lowered; s++) lower_free(&progs[s]);
    return rc;
}

int sim_lower_and_run(const instr_list_t *lists, int pp, int m, int v, lower_target_t target, sim_match_t rule,
                      const sched_costs_t *unit, sim_result_t *res)
{
    return sim_lower_and_run_c(lists, pp, m, v, target, rule, unit, NULL, res);
}

int sim_run_costed(const instr_list_t *lists, int pp, int m, int v, lower_target_t target, sim_match_t rule,
                   const sim_costs_t *costs, sim_result_t *res)
{
    const sched_costs_t none = {0.0, 0.0, 0.0};
    return sim_lower_and_run_c(lists, pp, m, v, target, rule, &none, costs, res);
}

int sim_run_lists(const instr_list_t *lists, int pp, int m, int v, double tf, double tb, sim_result_t *res)
{
    const sched_costs_t unit = sim_costs_fused(tf, tb);
    return sim_lower_and_run(lists, pp, m, v, LOWER_HOST, SIM_MATCH_TAG, &unit, res);
}

int sim_run_lists_costs(const instr_list_t *lists, int pp, int m, int v, const sched_costs_t *unit, sim_result_t *res)
{
    return sim_lower_and_run(lists, pp, m, v, LOWER_HOST, SIM_MATCH_TAG, unit ? unit : &sched_costs_unit, res);
}

int sim_build_lists_costs(instr_list_t *lists, sched_kind_t kind, int pp, int m, int v, const sched_costs_t *unit,
                          sim_result_t *res)
{
    memset(res, 0, sizeof *res);
    if (pp > SIM_MAX_STAGES) return sim_fail(res, "more than %d stages", SIM_MAX_STAGES);
    if (sched_check(kind, pp, m, v, res->error, sizeof res->error) != MP_OK) return MP_ERR;
    for (int s = 0; s < pp; s++)
        if (sched_build_costs(&lists[s], kind, s, pp, m, v, unit) != MP_OK) {
            sim_free_lists(lists, s);
            return sim_fail(res, "cannot build stage %d's list", s);
        }
    return MP_OK;
}

int sim_build_lists(instr_list_t *lists, sched_kind_t kind, int pp, int m, int v, sim_result_t *res)
{
    return sim_build_lists_costs(lists, kind, pp, m, v, NULL, res);
}

void sim_free_lists(instr_list_t *lists, int n)
{
    for (int s = 0; s < n; s++) sched_free(&lists[s]);
}

int sim_run_costs(sched_kind_t kind, int pp, int m, int v, const sched_costs_t *unit, sim_result_t *res)
{
    instr_list_t lists[SIM_MAX_STAGES];
    if (sim_build_lists_costs(lists, kind, pp, m, v, unit, res) != MP_OK) return MP_ERR;
    int rc = sim_run_lists_costs(lists, pp, m, v, unit, res);
    sim_free_lists(lists, pp);
    return rc;
}

int sim_run(sched_kind_t kind, int pp, int m, int v, double tf, double tb, sim_result_t *res)
{
    const sched_costs_t unit = sim_costs_fused(tf, tb);
    return sim_run_costs(kind, pp, m, v, &unit, res);
}
