/* The SP builder (causal_sp.h): plays the window out on sp × pp ranks against the costs, event by
 * event, and writes each rank's actions down as its list. At sp = 1 it makes causal.c's decisions
 * at the same times, so it gives causal.c's forward and backward order on every stage. */
#include "causal_sp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

const char *const csp_op_names[CSP_OPS] = {"LOAD", "FORWARD", "BACKWARD", "STEP", "ADD", "SHARED_STEP", "SEND", "RECV"};
const char *const csp_msg_names[CSP_MSGS] = {"ACT", "GRAD", "CAND", "SUM", "FINAL", "SYNC"};

/* ---- who uses what ---- */

int csp_stage_of(const causal_cfg_t *c, int l)
{
    int s = 0;
    while (s + 1 < c->pp && c->layer0[s + 1] <= l) s++;
    return s;
}

/* j's candidate of layer l if it has weights, else -1. */
static int weighted(const causal_cfg_t *c, int j, int l)
{
    const int a = c->sel[(size_t)j * c->layers + l];
    return a >= 0 && !(c->weightless && c->weightless[a]) ? a : -1;
}

void csp_users_free(csp_users_t *u)
{
    free(u->prev), free(u->next), free(u->before), free(u->last), free(u->uses), free(u->subs), free(u->sub0);
    memset(u, 0, sizeof *u);
}

/* Each replica's subnets in order (a counting sort by replica). */
static void users_by_replica(const csp_cfg_t *g, csp_users_t *u)
{
    for (int j = 0; j < g->c.n; j++) u->sub0[csp_replica(g, j) + 1]++;
    for (int r = 0; r < g->sp; r++) u->sub0[r + 1] += u->sub0[r];
    for (int r = 0, j = 0; r < g->sp; r++)
        for (int i = 0; i < g->c.n; i++)
            if (csp_replica(g, i) == r) u->subs[j++] = i;
}

int csp_users_init(const csp_cfg_t *g, csp_users_t *u)
{
    const causal_cfg_t *c = &g->c;
    const int L = c->layers, C = L * c->ncand;
    const size_t nl = (size_t)c->n * L;
    u->prev = malloc(nl * sizeof(int)), u->next = malloc(nl * sizeof(int)), u->before = malloc(nl * sizeof(int));
    u->last = malloc((size_t)C * sizeof(int)), u->uses = calloc((size_t)C, sizeof(int));
    u->subs = malloc((size_t)c->n * sizeof(int)), u->sub0 = calloc((size_t)g->sp + 1, sizeof(int));
    if (!u->prev || !u->next || !u->before || !u->last || !u->uses || !u->subs || !u->sub0) {
        csp_users_free(u);
        return MP_ERR;
    }
    for (int j = 0; j < c->n; j++)
        if (csp_replica(g, j) < 0 || csp_replica(g, j) >= g->sp) {
            csp_users_free(u);
            return MP_ERR;
        }
    users_by_replica(g, u);
    for (int x = 0; x < C; x++) u->last[x] = -1;
    for (size_t i = 0; i < nl; i++) u->prev[i] = u->next[i] = u->before[i] = -1;
    /* in subnet order: last[] is the previous user while j is visited */
    for (int j = 0; j < c->n; j++)
        for (int l = 0; l < L; l++) {
            const int a = weighted(c, j, l), x = l * c->ncand + a;
            if (a < 0) continue;
            const size_t e = (size_t)j * L + l;
            u->prev[e] = u->last[x], u->before[e] = u->uses[x]++;
            if (u->last[x] >= 0) u->next[(size_t)u->last[x] * L + l] = j;
            u->last[x] = j;
        }
    return MP_OK;
}

/* ---- lists ---- */

void csp_free_lists(csp_list_t *lists, int n)
{
    for (int i = 0; i < n; i++) {
        free(lists[i].ins);
        memset(&lists[i], 0, sizeof lists[i]);
    }
}

static int push(csp_list_t *l, csp_op_t op, csp_msg_t msg, int id, int what, int peer)
{
    if (l->n == l->cap) {
        const int cap = l->cap ? 2 * l->cap : 64;
        csp_instr_t *p = realloc(l->ins, (size_t)cap * sizeof *p);
        if (!p) return MP_ERR;
        l->ins = p, l->cap = cap;
    }
    l->ins[l->n++] = (csp_instr_t){op, msg, id, what, peer};
    return MP_OK;
}

/* ---- the play ---- */

enum { NONE = -1 };

typedef struct {
    const csp_cfg_t *g;
    const causal_cfg_t *c;
    const csp_costs_t *k;
    csp_users_t u;
    csp_list_t *lists;
    csp_result_t *res;
    int per, U, R;
    double *fwd, *bwd;       /* pp × U: when the forward (backward) ended, NONE not yet */
    double *step, *add;      /* pp × n: when subnet j's step (ADD) ended on stage s, NONE not yet */
    unsigned char *got;      /* pp × n: j's CAND receives are in (ρ(j), s)'s list */
    int *nb, *na;            /* per rank: its next backward (index into its units), its next ADD (into its subnets) */
    unsigned char *blocked;  /* per rank: its last try at a forward met the causal rule only */
    double *busy;            /* per rank: busy until */
    int rc;                  /* MP_ERR once an append failed */
} play_t;

#define AT(a, s, x, w) ((a)[(size_t)(s) * (w) + (x)])

static int nsub_of(const play_t *p, int r) { return p->u.sub0[r + 1] - p->u.sub0[r]; }
static int sub_of(const play_t *p, int r, int i) { return p->u.subs[p->u.sub0[r] + i]; }
/* Replica r's i-th unit: its subnets' micro-batches in order. */
static int unit_of(const play_t *p, int r, int i) { return sub_of(p, r, i / p->per) * p->per + i % p->per; }

static void emit(play_t *p, int rank, csp_op_t op, csp_msg_t msg, int id, int what, int peer)
{
    p->rc |= push(&p->lists[rank], op, msg, id, what, peer);
    if (op != CSP_SEND) return;
    p->res->msgs[msg]++;
    p->res->bytes += msg == CSP_MSG_CAND || msg == CSP_MSG_SYNC ? 3.0 : msg == CSP_MSG_SUM || msg == CSP_MSG_FINAL ? 1.0 : 0.0;
}

static int done_at(double x, double t) { return x != NONE && x <= t; }

/* When the running sum with subnets 0..j reaches ρ(j + 1) on stage s (NONE: not added yet). */
static double sum_arrival(const play_t *p, int s, int j)
{
    const double a = AT(p->add, s, j, p->c->n);
    if (a == NONE) return NONE;
    return a + (j + 1 < p->c->n && csp_replica(p->g, j + 1) != csp_replica(p->g, j) ? p->k->sum : 0.0);
}

/* ADD(j) on (r, s): after j's step, with the sum of 0..j−1 here. */
static int try_add(play_t *p, int r, int s, double t)
{
    const int pp = p->c->pp, n = p->c->n, rank = r * pp + s;
    if (p->na[rank] >= nsub_of(p, r)) return 0;
    const int j = sub_of(p, r, p->na[rank]);
    if (!done_at(AT(p->step, s, j, n), t) || (j > 0 && !done_at(sum_arrival(p, s, j - 1), t))) return 0;
    const int from = j > 0 ? csp_replica(p->g, j - 1) : r, to = j + 1 < n ? csp_replica(p->g, j + 1) : r;
    if (from != r) emit(p, rank, CSP_RECV, CSP_MSG_SUM, j - 1, -1, from * pp + s);
    emit(p, rank, CSP_ADD, CSP_MSG_ACT, j, -1, -1);
    if (to != r) emit(p, rank, CSP_SEND, CSP_MSG_SUM, j, -1, to * pp + s);
    for (int q = 0; j == n - 1 && q < p->g->sp; q++) /* the full sum: every other replica steps with it */
        if (q != r) emit(p, rank, CSP_SEND, CSP_MSG_FINAL, 0, -1, q * pp + s);
    AT(p->add, s, j, n) = p->busy[rank] = t; /* free at once: an ADD costs nothing */
    p->na[rank]++;
    return 1;
}

/* After j's last backward on (r, s): its step, then its candidates' state to whoever needs it. */
static void emit_step(play_t *p, int r, int s, int j)
{
    const causal_cfg_t *c = p->c;
    const int pp = c->pp, rank = r * pp + s;
    emit(p, rank, CSP_STEP, CSP_MSG_ACT, j, -1, -1);
    for (int l = c->layer0[s]; l < c->layer0[s + 1]; l++) {
        const int a = weighted(c, j, l), nx = p->u.next[(size_t)j * c->layers + l];
        if (a < 0) continue;
        if (nx >= 0 && csp_replica(p->g, nx) != r) /* the next user runs elsewhere */
            emit(p, rank, CSP_SEND, CSP_MSG_CAND, j, l * c->ncand + a, csp_replica(p->g, nx) * pp + s);
        for (int q = 0; nx < 0 && q < p->g->sp; q++) /* j is the last user: every replica gets it */
            if (q != r) emit(p, rank, CSP_SEND, CSP_MSG_SYNC, j, l * c->ncand + a, q * pp + s);
    }
}

/* The next backward of (r, s), if its gradient is here. */
static int try_backward(play_t *p, int r, int s, double t)
{
    const causal_cfg_t *c = p->c;
    const int pp = c->pp, U = p->U, rank = r * pp + s, uu = unit_of(p, r, p->nb[rank]);
    if (!done_at(AT(p->fwd, s, uu, U), t)) return 0;
    const double g = s == pp - 1 ? AT(p->fwd, s, uu, U) : AT(p->bwd, s + 1, uu, U);
    if (!done_at(g, t)) return 0;
    if (s < pp - 1) emit(p, rank, CSP_RECV, CSP_MSG_GRAD, uu, -1, rank + 1);
    emit(p, rank, CSP_BACKWARD, CSP_MSG_ACT, uu, -1, -1);
    if (s > 0) emit(p, rank, CSP_SEND, CSP_MSG_GRAD, uu, -1, rank - 1);
    AT(p->bwd, s, uu, U) = p->busy[rank] = t + p->k->tb;
    p->nb[rank]++;
    if (uu % p->per == p->per - 1) { /* the subnet's last micro-batch: its candidates step now */
        const int j = uu / p->per;
        emit_step(p, r, s, j);
        AT(p->step, s, j, c->n) = p->busy[rank] = t + p->k->tb + p->k->step;
    }
    return 1;
}

/* Whether subnet j may start its forward on (r, s) at t: the previous user of each of its
 * candidates there has stepped, and its state has arrived when it ran elsewhere. */
static int causal_ready(const play_t *p, int r, int s, int j, double t)
{
    const causal_cfg_t *c = p->c;
    for (int l = c->layer0[s]; l < c->layer0[s + 1]; l++) {
        const int q = p->u.prev[(size_t)j * c->layers + l];
        if (q < 0) continue;
        const double st = AT(p->step, s, q, c->n);
        if (!done_at(st, t) || (csp_replica(p->g, q) != r && st + p->k->cand > t)) return 0;
    }
    return 1;
}

static void emit_forward(play_t *p, int r, int s, int uu, double t)
{
    const causal_cfg_t *c = p->c;
    const int pp = c->pp, rank = r * pp + s, j = uu / p->per;
    if (!AT(p->got, s, j, c->n)) { /* before j's first forward here: the states shipped to it */
        for (int l = c->layer0[s]; l < c->layer0[s + 1]; l++) {
            const int q = p->u.prev[(size_t)j * c->layers + l];
            if (q >= 0 && csp_replica(p->g, q) != r)
                emit(p, rank, CSP_RECV, CSP_MSG_CAND, q, l * c->ncand + weighted(c, j, l), csp_replica(p->g, q) * pp + s);
        }
        AT(p->got, s, j, c->n) = 1;
    }
    if (s == 0) emit(p, rank, CSP_LOAD, CSP_MSG_ACT, uu, -1, -1);
    else emit(p, rank, CSP_RECV, CSP_MSG_ACT, uu, -1, rank - 1);
    emit(p, rank, CSP_FORWARD, CSP_MSG_ACT, uu, -1, -1);
    if (s < pp - 1) emit(p, rank, CSP_SEND, CSP_MSG_ACT, uu, -1, rank + 1);
    AT(p->fwd, s, uu, p->U) = p->busy[rank] = t + p->k->tf;
}

/* causal.c's choice on one replica: the first of its units in order whose activation is here and
 * that the rule lets through, one in-flight slot kept for its oldest unit not yet forwarded. */
static int try_forward(play_t *p, int r, int s, double t)
{
    const causal_cfg_t *c = p->c;
    const int pp = c->pp, U = p->U, rank = r * pp + s, nu = nsub_of(p, r) * p->per;
    int inflight = 0, head = -1;
    for (int i = 0; i < nu; i++) {
        const int uu = unit_of(p, r, i);
        inflight += AT(p->fwd, s, uu, U) != NONE && AT(p->bwd, s, uu, U) == NONE;
        if (head < 0 && AT(p->fwd, s, uu, U) == NONE) head = i;
    }
    const int limit = c->in_flight > 0 ? c->in_flight : pp - s;
    for (int i = head; i >= 0 && i < nu; i++) {
        const int uu = unit_of(p, r, i);
        if (AT(p->fwd, s, uu, U) != NONE) continue;
        if (inflight >= (i == head ? limit : limit - 1)) break;
        if (s > 0 && !done_at(AT(p->fwd, s - 1, uu, U), t)) continue;
        if (!causal_ready(p, r, s, uu / p->per, t)) {
            p->blocked[rank] = 1;
            continue;
        }
        emit_forward(p, r, s, uu, t);
        return 1;
    }
    return 0;
}

/* Rank (r, s), free at t: its ADDs that can run (they cost nothing), then a backward or a forward.
 * 1 when it did something. */
static int rank_act(play_t *p, int r, int s, double t)
{
    const int rank = r * p->c->pp + s;
    int acted = 0;
    while (try_add(p, r, s, t)) acted = 1;
    p->blocked[rank] = 0;
    if (p->nb[rank] >= nsub_of(p, r) * p->per) return acted;
    if (try_backward(p, r, s, t) || try_forward(p, r, s, t)) return 1;
    return acted;
}

static int rank_done(const play_t *p, int r, int s)
{
    const int rank = r * p->c->pp + s, ns = nsub_of(p, r);
    return p->nb[rank] == ns * p->per && p->na[rank] == ns;
}

static void next_of(double x, double t, double *tn) { if (x != NONE && x > t && x < *tn) *tn = x; }

/* The earliest time after t at which anything ends or arrives (INFINITY: nothing will). */
static double next_time(const play_t *p, double t)
{
    const int pp = p->c->pp, n = p->c->n;
    double tn = INFINITY;
    for (int x = 0; x < p->R; x++) next_of(p->busy[x], t, &tn);
    for (size_t x = 0; x < (size_t)pp * p->U; x++) next_of(p->fwd[x], t, &tn), next_of(p->bwd[x], t, &tn);
    for (int s = 0; s < pp; s++)
        for (int j = 0; j < n; j++) {
            const double st = AT(p->step, s, j, n);
            next_of(st, t, &tn), next_of(st == NONE ? NONE : st + p->k->cand, t, &tn);
            next_of(sum_arrival(p, s, j), t, &tn);
        }
    return tn;
}

/* The window's main part: every rank acts whenever free until all units are done and summed. */
static int play(play_t *p)
{
    const int pp = p->c->pp, sp = p->g->sp;
    for (double t = 0.0;;) {
        for (int moved = 1; moved;) {
            moved = 0;
            for (int r = 0; r < sp; r++)
                for (int s = 0; s < pp; s++)
                    if (p->busy[r * pp + s] <= t && !rank_done(p, r, s)) moved |= rank_act(p, r, s, t);
        }
        int done = 1;
        for (int x = 0; x < p->R; x++) done &= rank_done(p, x / pp, x % pp);
        if (done) return MP_OK;
        const double tn = next_time(p, t);
        if (!isfinite(tn)) return MP_ERR; /* cannot happen: the oldest unfinished subnet can always move */
        for (int x = 0; x < p->R; x++)
            if (p->busy[x] <= t && p->nb[x] < nsub_of(p, x / pp) * p->per && p->blocked[x]) p->res->stalls += tn - t;
        t = tn;
    }
}

/* The window's end on (r, s): the final states of the candidates last stepped elsewhere, the full
 * sum if it ends elsewhere, then the shared step. Returns when the rank's list ends. */
static double emit_tail(play_t *p, int r, int s)
{
    const causal_cfg_t *c = p->c;
    const int pp = c->pp, n = c->n, rank = r * pp + s;
    double t = p->busy[rank];
    for (int l = c->layer0[s]; l < c->layer0[s + 1]; l++)
        for (int a = 0; a < c->ncand; a++) {
            const int x = l * c->ncand + a, L = p->u.last[x];
            if (L < 0 || csp_replica(p->g, L) == r) continue;
            emit(p, rank, CSP_RECV, CSP_MSG_SYNC, L, x, csp_replica(p->g, L) * pp + s);
            t = fmax(t, AT(p->step, s, L, n) + p->k->cand);
        }
    const int h = csp_replica(p->g, n - 1);
    if (h != r) {
        emit(p, rank, CSP_RECV, CSP_MSG_FINAL, 0, -1, h * pp + s);
        t = fmax(t, AT(p->add, s, n - 1, n) + p->k->sum);
    }
    emit(p, rank, CSP_SHARED_STEP, CSP_MSG_ACT, 0, -1, -1);
    return t + p->k->step;
}

static void play_free(play_t *p)
{
    csp_users_free(&p->u);
    free(p->fwd), free(p->bwd), free(p->step), free(p->add), free(p->got);
    free(p->nb), free(p->na), free(p->blocked), free(p->busy);
}

static int play_alloc(play_t *p)
{
    const int pp = p->c->pp, n = p->c->n;
    const size_t pu = (size_t)pp * p->U, pn = (size_t)pp * n;
    p->fwd = malloc(pu * sizeof(double)), p->bwd = malloc(pu * sizeof(double));
    p->step = malloc(pn * sizeof(double)), p->add = malloc(pn * sizeof(double));
    p->got = calloc(pn, 1), p->blocked = calloc((size_t)p->R, 1);
    p->nb = calloc((size_t)p->R, sizeof(int)), p->na = calloc((size_t)p->R, sizeof(int));
    p->busy = calloc((size_t)p->R, sizeof(double));
    if (!p->fwd || !p->bwd || !p->step || !p->add || !p->got || !p->blocked || !p->nb || !p->na || !p->busy ||
        csp_users_init(p->g, &p->u) != MP_OK)
        return MP_ERR;
    for (size_t x = 0; x < pu; x++) p->fwd[x] = p->bwd[x] = NONE;
    for (size_t x = 0; x < pn; x++) p->step[x] = p->add[x] = NONE;
    return MP_OK;
}

int csp_build(const csp_cfg_t *g, const csp_costs_t *costs, csp_list_t *lists, csp_result_t *res)
{
    const causal_cfg_t *c = &g->c;
    memset(res, 0, sizeof *res);
    if (g->sp < 1 || c->pp < 1 || c->n < 1 || c->serial) return MP_ERR; /* serial: build with causal.h */
    play_t p = {.g = g, .c = c, .k = costs, .lists = lists, .res = res, .per = c->per > 1 ? c->per : 1};
    p.U = c->n * p.per, p.R = g->sp * c->pp;
    memset(lists, 0, (size_t)p.R * sizeof *lists);
    int rc = play_alloc(&p) == MP_OK ? play(&p) : MP_ERR;
    for (int x = 0; x < p.R && rc == MP_OK; x++) res->makespan = fmax(res->makespan, emit_tail(&p, x / c->pp, x % c->pp));
    if (rc != MP_OK || p.rc != MP_OK) {
        csp_free_lists(lists, p.R);
        rc = MP_ERR;
    }
    play_free(&p);
    return rc;
}

void csp_assign_affinity(const csp_cfg_t *g, int *replica_p)
{
    const causal_cfg_t *c = &g->c;
    for (int j = 0; j < c->n; j++) {
        int r = -1;
        for (int i = j - 1; i >= 0 && r < 0; i--) /* it waits for that one anyway: no ship, no gap */
            for (int s = 0; s < c->pp && r < 0; s++)
                if (causal_conflict(c, s, i, j)) r = replica_p[i];
        if (r < 0) { /* the replica whose newest subnet is oldest (none: -1) has been free longest */
            int oldest = c->n;
            for (int q = 0; q < g->sp; q++) {
                int latest = -1;
                for (int i = 0; i < j; i++)
                    if (replica_p[i] == q) latest = i;
                if (latest < oldest) oldest = latest, r = q;
            }
        }
        replica_p[j] = r;
    }
}

/* Assignment a of the window: 0 round robin, 1 affinity, 2 everything on replica 0. */
static void assign(const csp_cfg_t *g, int a, int *replica_p)
{
    if (a == 1) csp_assign_affinity(g, replica_p);
    for (int j = 0; a != 1 && j < g->c.n; j++) replica_p[j] = a == 0 ? j % g->sp : 0;
}

int csp_build_best(const csp_cfg_t *g, const csp_costs_t *costs, int *replica_p, csp_list_t *lists, csp_result_t *res)
{
    const int R = g->sp * g->c.pp, n = g->c.n;
    int *rep = malloc((size_t)n * sizeof(int)), rc = MP_ERR;
    csp_list_t *other = malloc((size_t)R * sizeof *other);
    csp_cfg_t h = *g;
    h.replica = rep;
    for (int a = 0; rep && other && a < 3; a++) {
        csp_result_t r2;
        assign(g, a, rep);
        if (csp_build(&h, costs, other, &r2) != MP_OK) continue;
        const int better = rc != MP_OK || r2.makespan < res->makespan; /* ties: the earlier assignment */
        if (!better || rc == MP_OK) csp_free_lists(better ? lists : other, R);
        if (better) {
            memcpy(lists, other, (size_t)R * sizeof *other);
            memcpy(replica_p, rep, (size_t)n * sizeof(int));
            *res = r2, rc = MP_OK;
        }
    }
    free(other), free(rep);
    return rc;
}
