/* The zero-bubble builders (contract and rules in zerobubble.h). */
#include "zerobubble.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>

#include "check.h"

/* One computation of a stage's order: a forward, a B, a W, or a fused backward (dualpipev's
 * BACKWARD). pair: it and the next one run as one overlapped pair, between one set of messages. */
typedef enum { ZB_F, ZB_B, ZB_W, ZB_BW } zb_op_t;

typedef struct {
    zb_op_t op;
    int mb, k, pair;
} zb_act_t;

/* ---- zb1p, zbv: the greedy play ---- */

typedef struct {
    int pp, m, K, v, limit;
    int keep_spare;        /* V: a first-arm forward may not take the last stash (zb_build) */
    sched_kind_t kind;
    sched_place_t place;
    double cost[3];        /* per chunk: F, B, W */
    double *fend, *bend;   /* (K, m): when the forward (B) ended, -1 while not run */
    int *next[3];          /* (K): the next micro-batch to run F, B, W on chunk k */
    double *free_at;       /* (pp): when the stage next looks for work */
    int *live, *nf, *nb;   /* (pp): stashes held (forward to W), forwards run, B's run */
    int *idle;             /* (pp): found nothing to do at the present time */
    zb_act_t *acts;        /* (pp, 3·m·v): each stage's computations in order */
    int *nacts;            /* (pp) */
} zb_play_t;

#define ZB_AT(a, k, mb) ((a)[(size_t)(k) * p->m + (mb)])

/* Whether a computation ending at a[k][mb] (-1: not run) is over by time t. */
static int zb_over(const zb_play_t *p, const double *a, int k, int mb, double t)
{
    const double end = ZB_AT(a, k, mb);
    return end >= 0.0 && end <= t;
}

/* Zero-bubble's warm-up bound on stage s: forwards may lead B's by this many at most. */
static int zb_warm(const zb_play_t *p, int s) { return p->kind == SCHED_ZB1P ? p->pp - s : INT_MAX; }

/* What stage s takes at time t (zerobubble.h's rules): its op and *k_p, or -1 for nothing. */
static int zb_choose(const zb_play_t *p, int s, double t, int *k_p)
{
    int kf = -1, kb = -1, kw = -1;
    const int room = p->live[s] < p->limit && p->nf[s] - p->nb[s] < zb_warm(p, s);
    for (int local = 0; local < p->v; local++) { /* ascending chunks */
        const int k = sched_place_chunk(p->place, s, local, p->pp);
        const int f = p->next[ZB_F][k], b = p->next[ZB_B][k], w = p->next[ZB_W][k];
        /* keep_spare: the last stash is the second arm's (zb_build) */
        const int spare = !p->keep_spare || local == 1 || p->live[s] + 1 < p->limit;
        if (room && spare && f < p->m && (k == 0 || zb_over(p, p->fend, k - 1, f, t))) kf = k;
        if (b < p->m && zb_over(p, p->fend, k, b, t) && (k == p->K - 1 || zb_over(p, p->bend, k + 1, b, t)) &&
            (kb < 0 || b <= p->next[ZB_B][kb]))
            kb = k;
        if (w < b && zb_over(p, p->bend, k, w, t) && (kw < 0 || w < p->next[ZB_W][kw])) kw = k;
    }
    if (kf >= 0) return *k_p = kf, ZB_F;
    if (kb >= 0) return *k_p = kb, ZB_B;
    if (kw >= 0) return *k_p = kw, ZB_W;
    return -1;
}

static void zb_act(zb_play_t *p, int s, double t, zb_op_t op, int k)
{
    const int mb = p->next[op][k]++;
    const double end = t + p->cost[op];
    if (op == ZB_F) ZB_AT(p->fend, k, mb) = end, p->live[s]++, p->nf[s]++;
    if (op == ZB_B) ZB_AT(p->bend, k, mb) = end, p->nb[s]++;
    if (op == ZB_W) p->live[s]--;
    p->free_at[s] = end;
    p->acts[(size_t)s * 3 * p->m * p->v + p->nacts[s]++] = (zb_act_t){op, mb, k, 0};
}

/* Plays the pipeline to its end. Time moves from one end of a computation to the next: every
 * stage free at the present time takes work or, finding none, waits for the next end anywhere
 * (only an end can make work ready). MP_OK, or MP_ERR (not reported) when every stage waits and
 * nothing runs. */
static int zb_play(zb_play_t *p)
{
    const int total = 3 * p->m * p->v;
    for (;;) {
        double t = INFINITY;
        for (int s = 0; s < p->pp; s++)
            if (p->nacts[s] < total && p->free_at[s] < t) t = p->free_at[s];
        if (t == INFINITY) return MP_OK;
        int any_idle = 0;
        for (int s = 0; s < p->pp; s++) {
            p->idle[s] = 0;
            if (p->nacts[s] == total || p->free_at[s] != t) continue;
            int k, op = zb_choose(p, s, t, &k);
            if (op < 0) p->idle[s] = any_idle = 1;
            else zb_act(p, s, t, (zb_op_t)op, k);
        }
        if (!any_idle) continue;
        double next = INFINITY;
        for (int s = 0; s < p->pp; s++)
            if (p->free_at[s] > t && p->free_at[s] < next) next = p->free_at[s];
        if (next == INFINITY) return MP_ERR;
        for (int s = 0; s < p->pp; s++)
            if (p->idle[s]) p->free_at[s] = next;
    }
}

static void zb_play_free(zb_play_t *p)
{
    free(p->fend), free(p->bend), free(p->next[0]), free(p->next[1]), free(p->next[2]), free(p->free_at);
    free(p->live), free(p->nf), free(p->nb), free(p->idle), free(p->acts), free(p->nacts);
}

static int zb_play_init(zb_play_t *p, sched_kind_t kind, int pp, int m, const sched_costs_t *c, int keep_spare)
{
    *p = (zb_play_t){.pp = pp, .m = m, .kind = kind, .keep_spare = keep_spare};
    p->v = kind == SCHED_ZBV ? 2 : 1, p->K = pp * p->v;
    p->place = kind == SCHED_ZBV ? SCHED_PLACE_V : SCHED_PLACE_LOOP;
    p->limit = kind == SCHED_ZBV ? 2 * pp : pp;
    p->cost[ZB_F] = c->tf / p->v, p->cost[ZB_B] = c->tb / p->v, p->cost[ZB_W] = c->tw / p->v;
    const size_t n = (size_t)p->K * m, P = (size_t)pp;
    p->fend = malloc(n * sizeof *p->fend), p->bend = malloc(n * sizeof *p->bend);
    for (int o = 0; o < 3; o++) p->next[o] = calloc((size_t)p->K, sizeof(int));
    p->free_at = calloc(P, sizeof *p->free_at), p->idle = calloc(P, sizeof(int)), p->nacts = calloc(P, sizeof(int));
    p->live = calloc(P, sizeof(int)), p->nf = calloc(P, sizeof(int)), p->nb = calloc(P, sizeof(int));
    p->acts = malloc(P * 3 * m * p->v * sizeof *p->acts);
    if (!p->fend || !p->bend || !p->next[0] || !p->next[1] || !p->next[2] || !p->free_at || !p->idle || !p->nacts ||
        !p->live || !p->nf || !p->nb || !p->acts) {
        zb_play_free(p);
        return MP_FAIL("out of memory playing out a %s schedule of pp=%d, m=%d", kind == SCHED_ZB1P ? "zb1p" : "zbv", pp, m);
    }
    for (size_t i = 0; i < n; i++) p->fend[i] = p->bend[i] = -1.0;
    return MP_OK;
}

/* ---- dualpipev: DualPipeV's order written down ---- */

typedef struct {
    int pp, r, m, n;
    zb_act_t *a;     /* the stage's computations in order */
    int nf[2], nb[2]; /* per arm (0: chunk r, 1: chunk 2pp−1−r): forwards and backwards so far */
    int *wq, wh, wt; /* the split B's awaiting their W, oldest first: (chunk, mb) pairs */
} dpv_t;

static int dpv_chunk(const dpv_t *d, int arm) { return arm ? 2 * d->pp - 1 - d->r : d->r; }

static void dpv_f(dpv_t *d, int arm, int pair)
{
    d->a[d->n++] = (zb_act_t){ZB_F, d->nf[arm]++, dpv_chunk(d, arm), pair};
}

/* A backward of the arm: split (B now, its W queued) or fused. */
static void dpv_b(dpv_t *d, int arm, int split)
{
    const int k = dpv_chunk(d, arm), mb = d->nb[arm]++;
    d->a[d->n++] = (zb_act_t){split ? ZB_B : ZB_BW, mb, k, 0};
    if (split) d->wq[2 * d->wt] = k, d->wq[2 * d->wt + 1] = mb, d->wt++;
}

/* The oldest deferred weight gradient (DualPipeV's weight store is first in, first out). */
static void dpv_w(dpv_t *d)
{
    d->a[d->n++] = (zb_act_t){ZB_W, d->wq[2 * d->wh + 1], d->wq[2 * d->wh], 0};
    d->wh++;
}

/* Stage r's order, phase by phase (n = pp stages, m micro-batches, m >= 2n). */
static void dpv_order(dpv_t *d)
{
    const int n = d->pp, r = d->r, h = (r + 1) / 2;
    for (int i = 0; i < 2 * (n - r - 1); i++) dpv_f(d, 0, 0);       /* the first arm fills */
    for (int i = 0; i < r + 1; i++) dpv_f(d, 0, 0), dpv_f(d, 1, 0); /* both arms */
    for (int i = 0; i < n - r - 1; i++) dpv_b(d, 1, 1), dpv_w(d), dpv_f(d, 1, 0);
    for (int i = 0; i < d->m - 2 * n + r + 1; i++) {                /* steady: two overlapped pairs */
        dpv_f(d, 0, 1), dpv_b(d, 1, 0);
        dpv_f(d, 1, 1), dpv_b(d, 0, 0);
    }
    for (int i = 0; i < n - r - 1; i++) dpv_b(d, 1, 0), dpv_f(d, 1, 1), dpv_b(d, 0, 0);
    /* the cool-down's backwards: the second half defer their W (odd stages one B earlier) */
    for (int i = 0; i < r + 1; i++) dpv_b(d, 1, i > h || (i == h && r % 2 == 1)), dpv_b(d, 0, i >= h);
    for (int i = 0; i < n - r - 1; i++) dpv_w(d), dpv_b(d, 0, 1);
    while (d->wh < d->wt) dpv_w(d);
}

/* ---- the list ---- */

/* Stage's computations `a` (n of them) with their messages, then the step's end. */
static int zb_emit(instr_list_t *out, sched_place_t place, const zb_act_t *a, int n, int pp, int K)
{
    instr_list_t l = {.place = place};
    int rc = MP_OK;
    static const op_t bop[] = {[ZB_B] = OP_BACKWARD_B, [ZB_BW] = OP_BACKWARD};
    for (int i = 0; i < n && rc == MP_OK; i++) {
        const zb_act_t *x = &a[i];
        if (x->pair && i + 1 < n) { /* F & B overlapped: both receives, both computations, both sends */
            const zb_act_t *y = &a[++i];
            rc |= sched_emit_forward_recv(&l, x->mb, x->k, pp) | sched_emit_backward_recv(&l, y->mb, y->k, K, pp);
            rc |= sched_emit(&l, OP_FORWARD, x->mb, x->k, -1) | sched_emit(&l, bop[y->op], y->mb, y->k, -1);
            rc |= sched_emit_forward_send(&l, x->mb, x->k, K, pp) | sched_emit_backward_send(&l, y->mb, y->k, pp);
        } else if (x->op == ZB_F) {
            rc |= sched_emit_forward(&l, x->mb, x->k, K, pp);
        } else if (x->op == ZB_W) {
            rc |= sched_emit(&l, OP_BACKWARD_W, x->mb, x->k, -1);
        } else {
            rc |= sched_emit_backward_op(&l, bop[x->op], x->mb, x->k, K, pp);
        }
    }
    return sched_finish(&l, rc, out);
}

static int zb_build_dualpipev(instr_list_t *out, int stage, int pp, int m)
{
    dpv_t d = {.pp = pp, .r = stage, .m = m};
    d.a = malloc((size_t)6 * m * sizeof *d.a); /* per arm m forwards, m backwards, at most m W's */
    d.wq = malloc((size_t)4 * m * sizeof *d.wq);
    int rc = MP_ERR;
    if (!d.a || !d.wq) {
        MP_ERROR("out of memory building dualpipev's list of stage %d", stage);
        goto out;
    }
    dpv_order(&d);
    rc = zb_emit(out, SCHED_PLACE_V, d.a, d.n, pp, 2 * pp);
out:
    free(d.a), free(d.wq);
    return rc;
}

int zb_build(instr_list_t *out, sched_kind_t kind, int stage, int pp, int m, const sched_costs_t *c)
{
    if (kind == SCHED_DUALPIPEV) return zb_build_dualpipev(out, stage, pp, m);
    /* zbv fills a stage with forwards up to its limit; for some times that leaves no stash for a
     * second-arm forward, without which nothing there can move: played again keeping the last stash
     * for the second arm, which always moves (its chain ends on stage 0 at the loss), and costs
     * bubble only at those times */
    for (int keep_spare = 0; keep_spare <= (kind == SCHED_ZBV); keep_spare++) {
        zb_play_t p;
        if (zb_play_init(&p, kind, pp, m, c, keep_spare) != MP_OK) return MP_ERR;
        int rc = zb_play(&p);
        if (rc == MP_OK) rc = zb_emit(out, p.place, p.acts + (size_t)stage * 3 * m * p.v, p.nacts[stage], pp, p.K);
        zb_play_free(&p);
        if (rc == MP_OK) return MP_OK;
    }
    return MP_FAIL("%s pp=%d m=%d: the greedy builder found no stage able to move (a bug)",
                   kind == SCHED_ZB1P ? "zb1p" : "zbv", pp, m);
}
