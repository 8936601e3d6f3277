#include "causal.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"

int causal_conflict(const causal_cfg_t *c, int s, int i, int j)
{
    if (i == j) return 0;
    if (c->serial) return 1;
    for (int l = c->layer0[s]; l < c->layer0[s + 1]; l++) {
        const int a = c->sel[(size_t)i * c->layers + l], b = c->sel[(size_t)j * c->layers + l];
        if (a >= 0 && a == b && !(c->weightless && c->weightless[a])) return 1;
    }
    return 0;
}

enum { TF = 1, TB = 2, NONE = -1 };

/* The player's units are micro-batches: u = j·per + k is micro-batch k of subnet j. */
typedef struct {
    int *fwd, *bwd;          /* pp × n·per: when the forward (backward) ended, NONE not yet */
    int *order;              /* pp × 2·n·per: each stage's actions, u for a forward, N + u for a backward */
    int *norder, *nb, *busy; /* per stage: actions so far, next backward, busy until */
} play_t;

static int per_of(const causal_cfg_t *c) { return c->per > 1 ? c->per : 1; }

#define AT(a, s, j) ((a)[(size_t)(s) * N + (j)])

/* Whether a micro-batch of the subnet whose first is j0 has run its forward on stage s. */
static int subnet_started(const play_t *p, int N, int s, int j0, int per)
{
    for (int k = j0; k < j0 + per; k++)
        if (AT(p->fwd, s, k) != NONE) return 1;
    return 0;
}

/* Stage s at time t: its next backward if its gradient is here, else the first subnet in index
 * order whose activation is here and that no earlier unfinished subnet conflicts with. 1 acted,
 * 0 idle (*blocked: a forward waited for a conflict only). */
static int play_stage(const causal_cfg_t *c, play_t *p, int s, int t, int *blocked)
{
    const int per = per_of(c), n = c->n * per, N = n, pp = c->pp, j = p->nb[s];
    *blocked = 0;
    if (j < n && AT(p->fwd, s, j) != NONE && AT(p->fwd, s, j) <= t) {
        const int g = s == pp - 1 ? AT(p->fwd, s, j) : AT(p->bwd, s + 1, j);
        if (g != NONE && g <= t) {
            AT(p->bwd, s, j) = t + TB, p->busy[s] = t + TB, p->nb[s]++;
            p->order[(size_t)s * 2 * n + p->norder[s]++] = n + j;
            return 1;
        }
    }
    int inflight = 0, head = -1, subnets = 0;
    for (int i = 0; i < n; i++) {
        inflight += AT(p->fwd, s, i) != NONE && AT(p->bwd, s, i) == NONE;
        if (head < 0 && AT(p->fwd, s, i) == NONE) head = i;
    }
    for (int j0 = 0; j0 < n; j0 += per) /* started here (a forward) and not stepped (its last backward) */
        subnets += subnet_started(p, N, s, j0, per) && AT(p->bwd, s, j0 + per - 1) == NONE;
    const int limit = c->in_flight > 0 ? c->in_flight : pp - s;
    for (int k = head; k >= 0 && k < n; k++) {
        if (AT(p->fwd, s, k) != NONE) continue;
        /* one slot stays for the oldest subnet not yet forwarded: the backwards wait for it */
        if (inflight >= (k == head ? limit : limit - 1)) break;
        /* a new subnet on the stage: the same rule for the subnets' cap, in subnets */
        if (c->subnets_cap > 0 && !subnet_started(p, N, s, k - k % per, per) &&
            subnets >= (k == head ? c->subnets_cap : c->subnets_cap - 1))
            continue; /* a started subnet's later micro-batch may still go */
        const int a = s == 0 ? 0 : AT(p->fwd, s - 1, k);
        if (a == NONE || a > t) continue;
        int ok = 1;
        for (int i = 0; i < k && ok; i++)
            if ((AT(p->bwd, s, i) == NONE || AT(p->bwd, s, i) > t) && causal_conflict(c, s, i / per, k / per)) ok = 0;
        if (!ok) {
            *blocked = 1;
            continue;
        }
        AT(p->fwd, s, k) = t + TF, p->busy[s] = t + TF;
        p->order[(size_t)s * 2 * n + p->norder[s]++] = k;
        return 1;
    }
    return 0;
}

int causal_build(const causal_cfg_t *c, instr_list_t *lists, causal_result_t *res)
{
    const int pp = c->pp, per = per_of(c), n = c->n * per, N = n;
    memset(res, 0, sizeof *res);
    play_t p;
    p.fwd = malloc((size_t)pp * n * sizeof *p.fwd), p.bwd = malloc((size_t)pp * n * sizeof *p.bwd);
    p.order = malloc((size_t)pp * 2 * n * sizeof *p.order);
    p.norder = calloc((size_t)pp, sizeof *p.norder), p.nb = calloc((size_t)pp, sizeof *p.nb);
    p.busy = calloc((size_t)pp, sizeof *p.busy);
    int rc = MP_ERR, built = 0;
    if (!p.fwd || !p.bwd || !p.order || !p.norder || !p.nb || !p.busy) goto out;
    for (size_t i = 0; i < (size_t)pp * n; i++) p.fwd[i] = p.bwd[i] = NONE;
    int done = 0;
    for (int t = 0; done < pp && t < 64 * pp * (n + 1); t++) {
        done = 0;
        for (int s = 0; s < pp; s++) {
            int blocked = 0;
            if (p.busy[s] <= t && p.nb[s] < n && !play_stage(c, &p, s, t, &blocked)) res->stalls += blocked;
            done += p.nb[s] == n && p.busy[s] <= t;
        }
    }
    for (int s = 0; s < pp; s++)
        if (p.nb[s] < n) goto out; /* cannot happen: the oldest subnet can always move (a bug) */
    for (int s = 0; s < pp; s++)
        for (int j = 0; j < n; j++)
            if (AT(p.bwd, s, j) > res->makespan) res->makespan = AT(p.bwd, s, j);
    /* with several micro-batches a subnet is a 1F1B pipeline of its own: build with serial = 1 */
    res->sequential = per == 1 ? (double)(TF + TB) * pp * c->n : 0.0;
    for (; built < pp; built++) {
        instr_list_t *l = &lists[built];
        memset(l, 0, sizeof *l);
        int e = MP_OK;
        for (int i = 0; i < p.norder[built] && e == MP_OK; i++) {
            const int a = p.order[(size_t)built * 2 * n + i];
            e = a < n ? sched_emit_forward(l, a, built, pp, pp) : sched_emit_backward(l, a - n, built, pp, pp);
            /* a subnet's last backward on the stage: its candidates there step at once */
            if (e == MP_OK && a >= n && (a - n) % per == per - 1) e = sched_emit_subnet_step(l, a - n, built);
        }
        if (e == MP_OK) e = sched_emit_step_end(l);
        if (e != MP_OK) {
            sched_free(l);
            goto out;
        }
    }
    rc = MP_OK;
out:
    if (rc != MP_OK)
        for (int s = 0; s < built; s++) sched_free(&lists[s]);
    free(p.fwd), free(p.bwd), free(p.order), free(p.norder), free(p.nb), free(p.busy);
    return rc;
}
