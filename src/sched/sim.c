#include "sim.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

typedef struct {
    int pp, m, v, K;
    double *act, *grad;      /* (K, m): time the message left, -1 not sent; act[k] goes to k+1 */
    char *act_used, *grad_used;
    int *fwd, *bwd;          /* (K, m): times run */
    int *last_bwd;           /* (K): last micro-batch whose backward ran, for the order check */
} sim_state_t;

#define AT(a, k, mb) ((a)[(size_t)(k) * st->m + (mb)])

int sim_fail(sim_result_t *res, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->error, sizeof res->error, fmt, ap);
    va_end(ap);
    return MP_ERR;
}

/* Executes ins on `stage` if it can run now; returns 1 if it ran, 0 if blocked, -1 if invalid. */
static int sim_exec(sim_state_t *st, const instr_t *ins, int stage, double *t, double tf, double tb, sim_result_t *res)
{
    const int mb = ins->mb, k = ins->chunk, K = st->K;
    switch (ins->op) {
    case OP_FORWARD:
        if (AT(st->fwd, k, mb)++)
            return sim_fail(res, "stage %d runs the forward of micro-batch %d chunk %d twice", stage, mb, k), -1;
        *t += tf / st->v;
        return 1;
    case OP_BACKWARD:
        if (!AT(st->fwd, k, mb)) return sim_fail(res, "stage %d: backward of micro-batch %d chunk %d before its forward", stage, mb, k), -1;
        if (AT(st->bwd, k, mb)++) return sim_fail(res, "stage %d runs the backward of micro-batch %d chunk %d twice", stage, mb, k), -1;
        if (mb != st->last_bwd[k] + 1) return sim_fail(res, "stage %d: chunk %d's backward of micro-batch %d out of order", stage, k, mb), -1;
        st->last_bwd[k] = mb;
        *t += tb / st->v;
        return 1;
    case OP_SEND_ACT:
    case OP_SEND_GRAD: {
        const int act = ins->op == OP_SEND_ACT, to = act ? k + 1 : k - 1;
        if (to < 0 || to >= K || ins->peer != to % st->pp)
            return sim_fail(res, "stage %d sends micro-batch %d of chunk %d to a stage that does not hold its peer", stage, mb, k), -1;
        double *slot = act ? &AT(st->act, k, mb) : &AT(st->grad, k, mb);
        if (*slot >= 0) return sim_fail(res, "stage %d sends micro-batch %d of chunk %d twice", stage, mb, k), -1;
        *slot = *t;
        return 1;
    }
    case OP_RECV_ACT:
    case OP_RECV_GRAD: {
        const int act = ins->op == OP_RECV_ACT, from = act ? k - 1 : k + 1;
        if (from < 0 || from >= K || ins->peer != from % st->pp)
            return sim_fail(res, "stage %d receives micro-batch %d of chunk %d from a stage that cannot send it", stage, mb, k), -1;
        double sent = act ? AT(st->act, from, mb) : AT(st->grad, from, mb);
        char *used = act ? &AT(st->act_used, from, mb) : &AT(st->grad_used, from, mb);
        if (sent < 0) return 0; /* not sent yet: blocked */
        if ((*used)++) return sim_fail(res, "stage %d receives micro-batch %d of chunk %d twice", stage, mb, k), -1;
        if (sent > *t) *t = sent;
        return 1;
    }
    default:
        return 1;
    }
}

static int sim_alloc(sim_state_t *st, int pp, int m, int v)
{
    const size_t n = (size_t)pp * v * m;
    memset(st, 0, sizeof *st);
    st->pp = pp, st->m = m, st->v = v, st->K = pp * v;
    st->act = malloc(n * sizeof(double)), st->grad = malloc(n * sizeof(double));
    st->act_used = calloc(n, 1), st->grad_used = calloc(n, 1);
    st->fwd = calloc(n, sizeof(int)), st->bwd = calloc(n, sizeof(int));
    st->last_bwd = malloc((size_t)st->K * sizeof(int));
    if (!st->act || !st->grad || !st->act_used || !st->grad_used || !st->fwd || !st->bwd || !st->last_bwd)
        return MP_FAIL("out of memory simulating a schedule");
    for (size_t i = 0; i < n; i++) st->act[i] = st->grad[i] = -1.0;
    for (int k = 0; k < st->K; k++) st->last_bwd[k] = -1;
    return MP_OK;
}

static void sim_release(sim_state_t *st)
{
    free(st->act), free(st->grad), free(st->act_used), free(st->grad_used), free(st->fwd), free(st->bwd);
    free(st->last_bwd);
}

/* Every message received, every (micro-batch, chunk) run forward and backward exactly once. */
static int sim_complete(const sim_state_t *st, sim_result_t *res)
{
    for (int k = 0; k < st->K; k++)
        for (int mb = 0; mb < st->m; mb++) {
            if (AT(st->fwd, k, mb) != 1 || AT(st->bwd, k, mb) != 1)
                return sim_fail(res, "micro-batch %d of chunk %d runs forward %d and backward %d times", mb, k,
                                AT(st->fwd, k, mb), AT(st->bwd, k, mb));
            if ((k < st->K - 1 && !AT(st->act_used, k, mb)) || (k > 0 && !AT(st->grad_used, k, mb)))
                return sim_fail(res, "a message of micro-batch %d chunk %d is never received", mb, k);
        }
    return MP_OK;
}

int sim_run_lists(const instr_list_t *lists, int pp, int m, int v, double tf, double tb, sim_result_t *res)
{
    memset(res, 0, sizeof *res);
    if (pp > SIM_MAX_STAGES) return sim_fail(res, "more than %d stages", SIM_MAX_STAGES);
    int pc[SIM_MAX_STAGES] = {0}, rc = MP_ERR;
    double t[SIM_MAX_STAGES] = {0};
    sim_state_t st;
    if (sim_alloc(&st, pp, m, v) != MP_OK) goto out;
    for (int progress = 1; progress;) {
        progress = 0;
        for (int s = 0; s < pp; s++)
            while (pc[s] < lists[s].n) {
                int r = sim_exec(&st, &lists[s].ins[pc[s]], s, &t[s], tf, tb, res);
                if (r < 0) goto out;
                if (r == 0) break;
                pc[s]++, progress = 1;
            }
    }
    for (int s = 0; s < pp; s++)
        if (pc[s] < lists[s].n) {
            const instr_t *b = &lists[s].ins[pc[s]];
            sim_fail(res, "deadlock: stage %d waits forever at %s of micro-batch %d chunk %d", s, op_names[b->op], b->mb,
                     b->chunk);
            goto out;
        }
    if (sim_complete(&st, res) != MP_OK) goto out;
    for (int s = 0; s < pp; s++) {
        res->makespan = t[s] > res->makespan ? t[s] : res->makespan;
        res->peak_stash[s] = sched_list_peak(&lists[s], 0);
    }
    res->busy = m * (tf + tb);
    res->bubble = res->makespan > 0 ? 1.0 - res->busy / res->makespan : 0.0;
    rc = MP_OK;
out:
    sim_release(&st);
    return rc;
}

int sim_build_lists(instr_list_t *lists, sched_kind_t kind, int pp, int m, int v, sim_result_t *res)
{
    memset(res, 0, sizeof *res);
    if (pp > SIM_MAX_STAGES) return sim_fail(res, "more than %d stages", SIM_MAX_STAGES);
    if (sched_check(kind, pp, m, v, res->error, sizeof res->error) != MP_OK) return MP_ERR;
    for (int s = 0; s < pp; s++)
        if (sched_build(&lists[s], kind, s, pp, m, v) != MP_OK) {
            sim_free_lists(lists, s);
            return sim_fail(res, "cannot build stage %d's list", s);
        }
    return MP_OK;
}

void sim_free_lists(instr_list_t *lists, int n)
{
    for (int s = 0; s < n; s++) sched_free(&lists[s]);
}

int sim_run(sched_kind_t kind, int pp, int m, int v, double tf, double tb, sim_result_t *res)
{
    instr_list_t lists[SIM_MAX_STAGES];
    if (sim_build_lists(lists, kind, pp, m, v, res) != MP_OK) return MP_ERR;
    int rc = sim_run_lists(lists, pp, m, v, tf, tb, res);
    sim_free_lists(lists, pp);
    return rc;
}
