/* The SP simulator (causal_sp.h): runs the lists of all sp × pp ranks, each in order, sends
 * non-blocking and receives blocking, and checks what the data would be: each rank keeps a version
 * per candidate (how many subnets have stepped its copy) and the length of its running shared sum
 * (how many subnets, in order, it holds); messages carry them. The checks depend on the lists, not
 * on the costs, except the causal rule, which is read off the played timeline. */
#include "causal_sp.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

typedef struct {
    int kind, from, to, id, what;
    int recvd;       /* receives matched to it */
    int payload;     /* CAND, SYNC: the version sent; SUM, FINAL: the subnets summed */
    double at;       /* arrival, -1 until sent */
} msg_t;

typedef struct {
    const csp_cfg_t *g;
    const causal_cfg_t *c;
    const csp_costs_t *k;
    const csp_list_t *lists;
    csp_result_t *res;
    csp_users_t u;
    int per, U, R, C;
    msg_t *msg;              /* every send of every list, sorted by (kind, from, to, id, what) */
    int nmsg;
    int **mi;                /* per rank and instruction: its message (SEND, RECV), else -1 */
    int *pos;                /* per rank: instructions done */
    double *clock;           /* per rank: when its last instruction ended */
    int *ver;                /* R × C: each rank's version of each candidate */
    int *sum;                /* per rank: the running shared sum holds subnets 0 .. sum−1 */
    int *nbk;                /* per rank: backwards done (its units in order) */
    unsigned char *act, *grd;/* pp × U: the unit's activation (gradient) is on its rank */
    int *nf, *nbw;           /* pp × U: forwards, backwards run */
    int *stepped, *added;    /* pp × n: steps, ADDs run */
    double *fstart, *stepend;/* pp × n: the subnet's first forward start, its step's end */
} sim_t;

#define AT(a, s, x, w) ((a)[(size_t)(s) * (w) + (x)])

static int fail(sim_t *m, const char *fmt, ...) MP_PRINTF(2, 3);
static int fail(sim_t *m, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->res->error, sizeof m->res->error, fmt, ap);
    va_end(ap);
    return MP_ERR;
}

static int msg_cmp(const void *a, const void *b)
{
    const msg_t *x = a, *y = b;
    const int kx[5] = {x->kind, x->from, x->to, x->id, x->what}, ky[5] = {y->kind, y->from, y->to, y->id, y->what};
    for (int i = 0; i < 5; i++)
        if (kx[i] != ky[i]) return kx[i] < ky[i] ? -1 : 1;
    return 0;
}

static msg_t key_of(const csp_instr_t *in, int rank)
{
    const int send = in->op == CSP_SEND;
    return (msg_t){.kind = (int)in->msg, .from = send ? rank : in->peer, .to = send ? in->peer : rank, .id = in->id,
                   .what = in->what, .at = -1.0};
}

/* Every send once, every receive matched to exactly one send and every send to exactly one
 * receive, by (kind, from, to, id, what). Fills m->msg and m->mi. */
static int match_messages(sim_t *m)
{
    for (int x = 0; x < m->R; x++)
        for (int i = 0; i < m->lists[x].n; i++) m->nmsg += m->lists[x].ins[i].op == CSP_SEND;
    if (!(m->msg = malloc(((size_t)m->nmsg + 1) * sizeof *m->msg))) return fail(m, "out of memory");
    int k = 0;
    for (int x = 0; x < m->R; x++)
        for (int i = 0; i < m->lists[x].n; i++) {
            const csp_instr_t *in = &m->lists[x].ins[i];
            if (in->peer >= m->R || ((in->op == CSP_SEND || in->op == CSP_RECV) && (in->peer < 0 || in->peer == x)))
                return fail(m, "rank %d: %s %s to or from rank %d", x, csp_op_names[in->op], csp_msg_names[in->msg], in->peer);
            if (in->op == CSP_SEND) m->msg[k++] = key_of(in, x);
        }
    qsort(m->msg, (size_t)m->nmsg, sizeof *m->msg, msg_cmp);
    for (int i = 1; i < m->nmsg; i++)
        if (msg_cmp(&m->msg[i - 1], &m->msg[i]) == 0)
            return fail(m, "rank %d sends %s %d (candidate %d) to rank %d twice", m->msg[i].from, csp_msg_names[m->msg[i].kind],
                        m->msg[i].id, m->msg[i].what, m->msg[i].to);
    for (int x = 0; x < m->R; x++)
        for (int i = 0; i < m->lists[x].n; i++) {
            const csp_instr_t *in = &m->lists[x].ins[i];
            m->mi[x][i] = -1;
            if (in->op != CSP_SEND && in->op != CSP_RECV) continue;
            const msg_t key = key_of(in, x);
            const msg_t *hit = bsearch(&key, m->msg, (size_t)m->nmsg, sizeof *m->msg, msg_cmp);
            if (!hit) return fail(m, "rank %d receives %s %d (candidate %d) from rank %d, which never sends it", x,
                                  csp_msg_names[in->msg], in->id, in->what, in->peer);
            m->mi[x][i] = (int)(hit - m->msg);
            if (in->op == CSP_RECV && m->msg[m->mi[x][i]].recvd++)
                return fail(m, "rank %d receives %s %d from rank %d twice", x, csp_msg_names[in->msg], in->id, in->peer);
        }
    for (int i = 0; i < m->nmsg; i++)
        if (!m->msg[i].recvd)
            return fail(m, "rank %d's %s %d (candidate %d) to rank %d is never received", m->msg[i].from,
                        csp_msg_names[m->msg[i].kind], m->msg[i].id, m->msg[i].what, m->msg[i].to);
    return MP_OK;
}

/* Every candidate with weights of subnet j on stage s at the sequential order's version on rank x:
 * `after` 0 before j's step (forward, backward), 1 when it has stepped them. */
static int versions_right(sim_t *m, int x, int s, int j, int after, const char *what)
{
    const causal_cfg_t *c = m->c;
    for (int l = c->layer0[s]; l < c->layer0[s + 1]; l++) {
        const int e = m->u.before[(size_t)j * c->layers + l];
        if (e < 0) continue;
        const int cand = l * c->ncand + c->sel[(size_t)j * c->layers + l], v = AT(m->ver, x, cand, m->C);
        if (v != e + after)
            return fail(m, "rank %d: subnet %d's %s sees version %d of layer %d's candidate %d, the sequential order's is %d",
                        x, j, what, v, l, cand % c->ncand, e + after);
    }
    return MP_OK;
}

static double msg_cost(const sim_t *m, int kind)
{
    return kind == CSP_MSG_CAND || kind == CSP_MSG_SYNC ? m->k->cand : kind == CSP_MSG_SUM || kind == CSP_MSG_FINAL ? m->k->sum : 0.0;
}

/* A unit's compute on rank x = (r, s): on the right replica, once, with its inputs here. */
static int run_unit(sim_t *m, int x, const csp_instr_t *in, double start)
{
    const int pp = m->c->pp, s = x % pp, uu = in->id, j = uu / m->per;
    if (uu < 0 || uu >= m->U || csp_replica(m->g, j) != x / pp)
        return fail(m, "rank %d runs %s of unit %d, which is not its replica's", x, csp_op_names[in->op], uu);
    if (in->op == CSP_LOAD) {
        if (s != 0) return fail(m, "rank %d loads a batch on stage %d", x, s);
        AT(m->act, s, uu, m->U) = 1;
        return MP_OK;
    }
    if (in->op == CSP_FORWARD) {
        if (AT(m->nf, s, uu, m->U)++ || !AT(m->act, s, uu, m->U))
            return fail(m, "rank %d: forward of unit %d twice or before its activation", x, uu);
        if (AT(m->fstart, s, j, m->c->n) < 0) AT(m->fstart, s, j, m->c->n) = start;
        return versions_right(m, x, s, j, 0, "forward");
    }
    const int r = x / pp, i = m->nbk[x] / m->per; /* the rank's units in order */
    if (i >= m->u.sub0[r + 1] - m->u.sub0[r] || uu != m->u.subs[m->u.sub0[r] + i] * m->per + m->nbk[x] % m->per) return fail(m, "rank %d: backward of unit %d out of order", x, uu);
    m->nbk[x]++;
    if (!AT(m->nf, s, uu, m->U) || AT(m->nbw, s, uu, m->U)++ || (s < pp - 1 && !AT(m->grd, s, uu, m->U)))
        return fail(m, "rank %d: backward of unit %d twice, before its forward or before its gradient", x, uu);
    return versions_right(m, x, s, j, 0, "backward");
}

/* Subnet j's step or ADD on rank x = (r, s). */
static int run_subnet(sim_t *m, int x, const csp_instr_t *in, double end)
{
    const int pp = m->c->pp, s = x % pp, j = in->id, n = m->c->n;
    if (j < 0 || j >= n || csp_replica(m->g, j) != x / pp) return fail(m, "rank %d: %s of subnet %d", x, csp_op_names[in->op], j);
    if (in->op == CSP_STEP) {
        for (int k = 0; k < m->per; k++)
            if (!AT(m->nbw, s, j * m->per + k, m->U)) return fail(m, "rank %d steps subnet %d before its backwards", x, j);
        if (AT(m->stepped, s, j, n)++) return fail(m, "rank %d steps subnet %d twice", x, j);
        if (versions_right(m, x, s, j, 0, "step") != MP_OK) return MP_ERR;
        for (int l = m->c->layer0[s]; l < m->c->layer0[s + 1]; l++)
            if (m->u.before[(size_t)j * m->c->layers + l] >= 0) AT(m->ver, x, l * m->c->ncand + m->c->sel[(size_t)j * m->c->layers + l], m->C)++;
        AT(m->stepend, s, j, n) = end;
        return MP_OK;
    }
    if (!AT(m->stepped, s, j, n) || AT(m->added, s, j, n)++)
        return fail(m, "rank %d adds subnet %d's shared gradient twice or before its backward", x, j);
    if (m->sum[x] != j) return fail(m, "rank %d adds subnet %d to a sum of subnets 0..%d: out of subnet order", x, j, m->sum[x] - 1);
    m->sum[x] = j + 1;
    return MP_OK;
}

/* The window's end on rank x: the full sum, the last version of every candidate of its stage, all its work done. */
static int run_shared_step(sim_t *m, int x, int i)
{
    const causal_cfg_t *c = m->c;
    const int s = x % c->pp;
    if (i != m->lists[x].n - 1) return fail(m, "rank %d: SHARED_STEP is not its list's last instruction", x);
    if (m->sum[x] != c->n) return fail(m, "rank %d takes the shared step with subnets 0..%d of %d summed", x, m->sum[x] - 1, c->n);
    for (int cand = c->layer0[s] * c->ncand; cand < c->layer0[s + 1] * c->ncand; cand++)
        if (AT(m->ver, x, cand, m->C) != m->u.uses[cand])
            return fail(m, "rank %d ends the window with version %d of layer %d's candidate %d, not %d", x,
                        AT(m->ver, x, cand, m->C), cand / c->ncand, cand % c->ncand, m->u.uses[cand]);
    return MP_OK;
}

/* A message's end of rank x: a send sets its payload and arrival, a receive takes them. */
static int run_message(sim_t *m, int x, const csp_instr_t *in, msg_t *g, double start)
{
    const int s = x % m->c->pp, id = in->id;
    const int unit_ok = id >= 0 && id < m->U, pp = m->c->pp, send = in->op == CSP_SEND;
    /* activations go down the replica's pipeline, gradients up; the rest stay on the stage index */
    const int peer = in->msg == CSP_MSG_ACT ? (send ? x + 1 : x - 1) : in->msg == CSP_MSG_GRAD ? (send ? x - 1 : x + 1) : -1;
    if (peer >= 0 ? in->peer != peer || peer / pp != x / pp : in->peer % pp != s)
        return fail(m, "rank %d: %s %s %d with rank %d, which does not hold its other end", x, csp_op_names[in->op],
                    csp_msg_names[in->msg], id, in->peer);
    if (send) {
        if ((in->msg == CSP_MSG_ACT && (!unit_ok || !AT(m->nf, s, id, m->U))) ||
            (in->msg == CSP_MSG_GRAD && (!unit_ok || !AT(m->nbw, s, id, m->U))))
            return fail(m, "rank %d sends %s of unit %d before computing it", x, csp_msg_names[in->msg], id);
        if ((in->msg == CSP_MSG_CAND || in->msg == CSP_MSG_SYNC) &&
            (in->what < 0 || in->what >= m->C || csp_stage_of(m->c, in->what / m->c->ncand) != s))
            return fail(m, "rank %d sends candidate %d, not one of its stage's", x, in->what);
        g->payload = in->msg == CSP_MSG_CAND || in->msg == CSP_MSG_SYNC ? AT(m->ver, x, in->what, m->C) : m->sum[x];
        g->at = start + msg_cost(m, in->msg);
        return MP_OK;
    }
    switch (in->msg) {
    case CSP_MSG_ACT: if (unit_ok) AT(m->act, s, id, m->U) = 1; break;
    case CSP_MSG_GRAD: if (unit_ok) AT(m->grd, s, id, m->U) = 1; break;
    case CSP_MSG_CAND:
    case CSP_MSG_SYNC: AT(m->ver, x, in->what, m->C) = g->payload; break;
    default: m->sum[x] = g->payload; break;
    }
    return MP_OK;
}

/* Runs rank x's next instruction if it can: 1 ran, 0 waits for a message, -1 invalid. */
static int sim_step(sim_t *m, int x)
{
    const int i = m->pos[x];
    const csp_instr_t *in = &m->lists[x].ins[i];
    msg_t *g = m->mi[x][i] >= 0 ? &m->msg[m->mi[x][i]] : NULL;
    double start = m->clock[x], cost = 0.0;
    if (in->op == CSP_RECV) {
        if (g->at < 0) return 0;
        start = fmax(start, g->at);
    }
    cost = in->op == CSP_FORWARD ? m->k->tf : in->op == CSP_BACKWARD ? m->k->tb
         : in->op == CSP_STEP || in->op == CSP_SHARED_STEP ? m->k->step : 0.0;
    int rc;
    switch (in->op) {
    case CSP_LOAD: case CSP_FORWARD: case CSP_BACKWARD: rc = run_unit(m, x, in, start); break;
    case CSP_STEP: case CSP_ADD: rc = run_subnet(m, x, in, start + cost); break;
    case CSP_SHARED_STEP: rc = run_shared_step(m, x, i); break;
    default: rc = run_message(m, x, in, g, start); break;
    }
    if (rc != MP_OK) return -1;
    m->clock[x] = start + cost, m->pos[x]++;
    return 1;
}

/* The causal rule on the timeline: on every stage index, a subnet's first forward starts after
 * the step of every earlier subnet it conflicts with there, whatever replicas they ran on. */
static int rule_holds(sim_t *m)
{
    const causal_cfg_t *c = m->c;
    for (int s = 0; s < c->pp; s++)
        for (int j = 0; j < c->n; j++)
            for (int i = 0; i < j; i++)
                if (causal_conflict(c, s, i, j) && AT(m->fstart, s, j, c->n) < AT(m->stepend, s, i, c->n) - 1e-9)
                    return fail(m, "stage %d: subnet %d (replica %d) starts at %g, before conflicting subnet %d (replica %d) "
                                   "has stepped at %g", s, j, csp_replica(m->g, j), AT(m->fstart, s, j, c->n), i,
                                csp_replica(m->g, i), AT(m->stepend, s, i, c->n));
    return MP_OK;
}

static int sim_play(sim_t *m)
{
    for (int moved = 1; moved;) {
        moved = 0;
        for (int x = 0; x < m->R; x++)
            for (int r; m->pos[x] < m->lists[x].n && (r = sim_step(m, x)) != 0; moved = 1)
                if (r < 0) return MP_ERR;
    }
    for (int x = 0; x < m->R; x++)
        if (m->pos[x] < m->lists[x].n) {
            const csp_instr_t *in = &m->lists[x].ins[m->pos[x]];
            return fail(m, "deadlock: rank %d (replica %d, stage %d) waits forever at %s %s %d from rank %d", x,
                        x / m->c->pp, x % m->c->pp, csp_op_names[in->op], csp_msg_names[in->msg], in->id, in->peer);
        }
    for (int s = 0; s < m->c->pp; s++)
        for (int uu = 0; uu < m->U; uu++)
            if (AT(m->nf, s, uu, m->U) != 1 || AT(m->nbw, s, uu, m->U) != 1)
                return fail(m, "stage %d: unit %d runs forward %d and backward %d times", s, uu, AT(m->nf, s, uu, m->U),
                            AT(m->nbw, s, uu, m->U));
    for (int x = 0; x < m->R; x++)
        if (m->lists[x].n == 0 || m->lists[x].ins[m->lists[x].n - 1].op != CSP_SHARED_STEP)
            return fail(m, "rank %d's list does not end with the shared step", x);
    return rule_holds(m);
}

static void sim_free(sim_t *m)
{
    for (int x = 0; m->mi && x < m->R; x++) free(m->mi[x]);
    free(m->mi), free(m->msg), free(m->pos), free(m->clock), free(m->ver), free(m->sum), free(m->nbk);
    free(m->act), free(m->grd), free(m->nf), free(m->nbw), free(m->stepped), free(m->added), free(m->fstart), free(m->stepend);
    csp_users_free(&m->u);
}

static int sim_alloc(sim_t *m)
{
    const size_t pu = (size_t)m->c->pp * m->U, pn = (size_t)m->c->pp * m->c->n, R = (size_t)m->R;
    m->mi = calloc(R, sizeof *m->mi), m->pos = calloc(R, sizeof(int)), m->clock = calloc(R, sizeof(double));
    m->ver = calloc(R * (size_t)m->C, sizeof(int)), m->sum = calloc(R, sizeof(int)), m->nbk = calloc(R, sizeof(int));
    m->act = calloc(pu, 1), m->grd = calloc(pu, 1), m->nf = calloc(pu, sizeof(int)), m->nbw = calloc(pu, sizeof(int));
    m->stepped = calloc(pn, sizeof(int)), m->added = calloc(pn, sizeof(int));
    m->fstart = malloc(pn * sizeof(double)), m->stepend = malloc(pn * sizeof(double));
    if (!m->mi || !m->pos || !m->clock || !m->ver || !m->sum || !m->nbk || !m->act || !m->grd || !m->nf || !m->nbw ||
        !m->stepped || !m->added || !m->fstart || !m->stepend || csp_users_init(m->g, &m->u) != MP_OK)
        return fail(m, "out of memory");
    for (size_t i = 0; i < pn; i++) m->fstart[i] = m->stepend[i] = -1.0;
    for (int x = 0; x < m->R; x++)
        if (!(m->mi[x] = malloc(((size_t)m->lists[x].n + 1) * sizeof(int)))) return fail(m, "out of memory");
    return MP_OK;
}

int csp_sim(const csp_cfg_t *g, const csp_costs_t *costs, const csp_list_t *lists, csp_result_t *res)
{
    memset(res, 0, sizeof *res);
    sim_t m = {.g = g, .c = &g->c, .k = costs, .lists = lists, .res = res, .per = g->c.per > 1 ? g->c.per : 1};
    m.U = g->c.n * m.per, m.R = g->sp * g->c.pp, m.C = g->c.layers * g->c.ncand;
    int rc = sim_alloc(&m);
    if (rc == MP_OK) rc = match_messages(&m);
    if (rc == MP_OK) rc = sim_play(&m);
    if (rc == MP_OK) {
        for (int x = 0; x < m.R; x++) res->makespan = fmax(res->makespan, m.clock[x]);
        for (int i = 0; i < m.nmsg; i++) {
            const int kd = m.msg[i].kind;
            res->msgs[kd]++;
            res->bytes += kd == CSP_MSG_CAND || kd == CSP_MSG_SYNC ? 3.0 : kd == CSP_MSG_SUM || kd == CSP_MSG_FINAL ? 1.0 : 0.0;
        }
    }
    sim_free(&m);
    return rc;
}
