#include "planner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compose.h"
#include "memlists.h"

const char *const plan_objective_names[PLAN_OBJECTIVES] = {"time", "energy", "carbon"};

/* Candidates simulated after the estimate's ranking: the estimate (a closed 1F1B bound) only
 * orders them; the simulator decides. */
#define PLAN_SIMULATED 48

/* Device bytes of stage s holding layers [a, b) under policy pol (the DP's estimate of cm_memory). */
static double plan_stage_mem(const cm_costs_t *c, const cm_layout_t *lay, int m, int s, int a, int b, policy_t pol)
{
    const int pp = lay->pp, n = b - a;
    double params = n * c->block_params;
    if (s == 0) params += c->embed_params;
    if (s == pp - 1) params += c->head_params + (pp > 1 ? c->embed_params : 0.0);
    double state = params * c->state_bytes_per_param;
    if (lay->zero && lay->dp > 1) state -= params * c->opt_bytes_per_param * (1.0 - 1.0 / lay->dp);
    const int keys = pol == POLICY_OFFLOAD ? 2 : (m < pp - s ? m : pp - s);
    const double stash = keys * n * c->stash[pol == POLICY_OFFLOAD ? POLICY_KEEP : pol];
    double work = 2.0 * c->act_bytes + (pol == POLICY_KEEP || pol == POLICY_OFFLOAD ? 0.0 : c->stash[POLICY_KEEP]);
    if (s == pp - 1) work += c->work_bytes;
    return state + stash + work;
}

/* Seconds of one micro-batch's forward and backward of stage s holding [a, b) under pol. */
static double plan_stage_time(const cm_costs_t *c, const dev_kind_t *d, const cm_layout_t *lay, int s, int a, int b,
                              policy_t pol)
{
    const int n = b - a;
    double t = n * (c->fwd + c->bwd + c->extra[pol] + c->tp_fwd + c->tp_bwd);
    if (pol == POLICY_OFFLOAD) {
        const double copy = d->node_cores > 0 ? 2.0 * c->offload_bytes / d->mem_bw : c->offload_bytes / d->host_bw;
        t += d->node_cores > 0 ? 2.0 * n * copy : (copy > c->fwd ? n * (copy - c->fwd) : 0.0);
    }
    if (s == 0) t += c->embed_fwd + c->embed_bwd;
    if (s == lay->pp - 1) t += c->head_fwd + c->head_bwd;
    return t;
}

/* The fastest policy for stage s on [a, b) that fits; -1 time when none does. */
static double plan_stage_best(const cm_costs_t *c, const dev_kind_t *d, const cm_layout_t *lay, int m, int s, int a,
                              int b, policy_t *pol_p)
{
    double best = -1.0;
    for (int p = 0; p < POLICY_STAGE_CHOICES; p++) {
        if (plan_stage_mem(c, lay, m, s, a, b, (policy_t)p) > d->mem_bytes) continue;
        const double t = plan_stage_time(c, d, lay, s, a, b, (policy_t)p);
        if (best < 0 || t < best) best = t, *pol_p = (policy_t)p;
    }
    return best;
}

double plan_partition(const cm_model_t *mo, const cm_costs_t *c, const dev_kind_t *d, cm_layout_t *lay, int m)
{
    const int L = mo->L, pp = lay->pp;
    if (pp > L || pp > SIM_MAX_STAGES) return -1.0;
    /* best[s][j]: the slowest of stages 0..s holding layers [0, j); cut[s][j]: where stage s starts */
    double *best = malloc(sizeof(double) * (size_t)pp * (L + 1));
    int *cut = malloc(sizeof(int) * (size_t)pp * (L + 1));
    policy_t *pol = malloc(sizeof(policy_t) * (size_t)pp * (L + 1));
    double result = -1.0;
    if (!best || !cut || !pol) goto out;
    for (int i = 0; i < pp * (L + 1); i++) best[i] = -1.0;
    for (int s = 0; s < pp; s++)
        for (int j = s + 1; j <= L - (pp - 1 - s); j++)
            for (int i = s ? s : 0; i < j; i++) {
                if (s == 0 && i != 0) break;
                const double prev = s ? best[(s - 1) * (L + 1) + i] : 0.0;
                if (prev < 0) continue;
                policy_t p = POLICY_KEEP;
                const double t = plan_stage_best(c, d, lay, m, s, i, j, &p);
                if (t < 0) continue;
                const double v = t > prev ? t : prev;
                double *bj = &best[s * (L + 1) + j];
                if (*bj < 0 || v < *bj) *bj = v, cut[s * (L + 1) + j] = i, pol[s * (L + 1) + j] = p;
            }
    if ((result = best[(pp - 1) * (L + 1) + L]) < 0) goto out;
    for (int s = pp - 1, j = L; s >= 0; s--) {
        const int i = cut[s * (L + 1) + j];
        lay->chunk_layers[s] = j - i, lay->policy[s] = pol[s * (L + 1) + j];
        j = i;
    }
out:
    free(best), free(cut), free(pol);
    return result;
}

typedef struct {
    cm_layout_t lay;
    double est;
} plan_cand_t;

typedef struct {
    plan_cand_t *v;
    int n, cap;
} plan_cands_t;

static int plan_push(plan_cands_t *cs, const cm_layout_t *lay, double est)
{
    if (cs->n == cs->cap) {
        const int cap = cs->cap ? 2 * cs->cap : 64;
        plan_cand_t *v = realloc(cs->v, sizeof *v * (size_t)cap);
        if (!v) return MP_ERR;
        cs->v = v, cs->cap = cap;
    }
    cs->v[cs->n++] = (plan_cand_t){*lay, est};
    return MP_OK;
}

static int plan_cand_cmp(const void *a, const void *b)
{
    const double x = ((const plan_cand_t *)a)->est, y = ((const plan_cand_t *)b)->est;
    return x < y ? -1 : x > y;
}

int plan_meets(const cm_result_t *r, double min_tokens_per_s)
{
    return min_tokens_per_s <= 0 || r->tokens_per_s >= min_tokens_per_s;
}

/* a deadline is a constraint, the objective a preference: under --objective energy a plan that
 * saves energy but finishes late must not come first */
static int plan_cmp(const void *a, const void *b)
{
    const plan_t *p = a, *q = b;
    if (p->meets != q->meets) return q->meets - p->meets;
    return p->score < q->score ? -1 : p->score > q->score;
}

/* BPipe on a CPU kind (its moves are host MPI): keep everywhere with balanced chunks, stashes moved
 * from the first stages to the last, tried only when keep alone overfills some stage (where keep
 * fits, balance moves nothing and times like it). The simulation's memory decides if it fits. */
static int plan_add_balance(plan_cands_t *cs, const cm_model_t *mo, const cm_costs_t *c, const dev_kind_t *d,
                            const cm_layout_t *lay, int m)
{
    char why[160];
    if (d->node_cores <= 0 || sched_balance_check(SCHED_1F1B, lay->pp, m, 1, why, sizeof why) != MP_OK) return MP_OK;
    cm_layout_t bl = *lay;
    bl.kind = SCHED_1F1B, bl.v = 1, bl.balance = 1, bl.balance_keep = 0;
    cm_layout_balanced(&bl, mo->L);
    int over = 0;
    double worst = 0.0;
    for (int s = 0; s < bl.pp; s++) {
        bl.policy[s] = POLICY_KEEP;
        if (plan_stage_mem(c, &bl, m, s, 0, bl.chunk_layers[s], POLICY_KEEP) > d->mem_bytes) over = 1;
        const double t = plan_stage_time(c, d, &bl, s, 0, bl.chunk_layers[s], POLICY_KEEP);
        if (t > worst) worst = t;
    }
    return over ? plan_push(cs, &bl, (m + bl.pp - 1) * worst) : MP_OK;
}

int plan_split_usable(sched_kind_t kind, int pp, const cm_costs_t *c, const dev_kind_t *d, char *why, size_t n)
{
    /* a GPU kind runs on cuda with its pipeline messages through NCCL (parallel.p2p=auto's choice) */
    const unsigned have = d->node_cores <= 0 ? 1u << COMPOSE_CUDA | 1u << COMPOSE_DEVICE | 1u << COMPOSE_NCCL_P2P : 0u;
    if (compose_refused(kind, pp, have, why, n) != MP_OK) return 0;
    if (!(c->bwd_b + c->bwd_w > 0))
        return snprintf(why, n, "the costs have no B/W split (an older profile: profile again)"), 0;
    return 1;
}

/* zb1p on 1f1b's boundaries and policies (ZB-H1 keeps 1F1B's stash count on stage 0 and moves
 * only W's), where the runtime runs it: pp >= 2, v = 1, any policy but balance (which is never in
 * `lay`; an offloaded stash comes back before B and stays until W). Its estimate takes the Zero Bubble paper's bubble,
 * (pp − 1)·(F + B − W) of the slowest stage instead of 1F1B's (pp − 1)·(F + B + W). cm_evaluate's
 * memory, with W's stashes and its deeper stage peaks, decides whether it fits. */
static int plan_add_zb1p(plan_cands_t *cs, const cm_costs_t *c, const dev_kind_t *d, const cm_layout_t *lay, int m,
                         double st)
{
    char why[640];
    if (st < 0 || lay->pp < 2 || !plan_split_usable(SCHED_ZB1P, lay->pp, c, d, why, sizeof why) ||
        sched_check(SCHED_ZB1P, lay->pp, m, 1, why, sizeof why) != MP_OK)
        return MP_OK;
    cm_layout_t zl = *lay;
    zl.kind = SCHED_ZB1P, zl.v = 1;
    double w = 0.0;
    for (int s = 0; s < zl.pp; s++) {
        const double ws = zl.chunk_layers[s] * c->bwd_w + (s == zl.pp - 1 ? c->head_bwd_w : 0.0);
        w = ws > w ? ws : w;
    }
    const double est = m * st + (zl.pp - 1) * (st - 2.0 * w > 0 ? st - 2.0 * w : 0.0);
    return plan_push(cs, &zl, est);
}

/* The V kinds' candidate beside 1f1b's (lay: its policies per stage), where the runtime runs them:
 * pp >= 2, an even count of layers per stage (the V's two equal chunks: L a multiple of 2pp), a kind
 * zb1p runs on; dualpipev also needs m >= 2pp (sched_check). The estimate: the slowest stage's
 * micro-batch (its two chunks, stage 0 with the embedding and the head) m times, and the kind's
 * bubble at unit times in stage micro-batches: ZB-V's (pp − 1)/2 of a chunk's forward, a twelfth of
 * a stage's micro-batch each; DualPipeV's pp − 1 chunk B's and W's, a third each (sim's
 * (pp − 1)·tf over 3m·tf). cm_evaluate decides whether it fits. */
static int plan_add_v(plan_cands_t *cs, const cm_model_t *mo, const cm_costs_t *c, const dev_kind_t *d,
                      const cm_layout_t *lay, int m, sched_kind_t kind)
{
    char why[640];
    const int pp = lay->pp;
    if (pp < 2 || mo->L % (2 * pp) || 2 * pp > CM_MAX_CHUNKS || !plan_split_usable(kind, pp, c, d, why, sizeof why) ||
        sched_check(kind, pp, m, 2, why, sizeof why) != MP_OK)
        return MP_OK;
    cm_layout_t zl = *lay;
    zl.kind = kind, zl.v = 2;
    cm_layout_balanced(&zl, mo->L);
    const int n = 2 * (mo->L / (2 * pp));
    double worst = 0.0;
    for (int s = 0; s < pp; s++) {
        double t = n * (c->fwd + c->bwd + c->extra[zl.policy[s]] + c->tp_fwd + c->tp_bwd);
        if (s == 0) t += c->embed_fwd + c->embed_bwd + c->head_fwd + c->head_bwd;
        worst = t > worst ? t : worst;
    }
    return plan_push(cs, &zl, m * worst + (pp - 1) * worst / (kind == SCHED_ZBV ? 12.0 : 3.0));
}

/* The schedules of one (tp, pp, dp, mb, zero): 1f1b with DP boundaries, zb1p on them (above), zbv
 * and dualpipev on balanced chunks with their policies (above), 1f1b with balance, interleaved
 * v = 2, 4 with balanced chunks and the first policy (keep, selective, recompute) whose estimate fits. */
static int plan_add_schedules(plan_cands_t *cs, const cm_model_t *mo, const cm_costs_t *c, const dev_kind_t *d,
                              cm_layout_t *lay, int m)
{
    lay->kind = SCHED_1F1B, lay->v = 1;
    const double st = plan_partition(mo, c, d, lay, m);
    if (st >= 0 && plan_push(cs, lay, (m + lay->pp - 1) * st) != MP_OK) return MP_ERR;
    if (plan_add_zb1p(cs, c, d, lay, m, st) != MP_OK) return MP_ERR;
    if (st >= 0 && plan_add_v(cs, mo, c, d, lay, m, SCHED_ZBV) != MP_OK) return MP_ERR;
    if (st >= 0 && plan_add_v(cs, mo, c, d, lay, m, SCHED_DUALPIPEV) != MP_OK) return MP_ERR;
    if (plan_add_balance(cs, mo, c, d, lay, m) != MP_OK) return MP_ERR;
    for (int v = 2; v <= 4 && lay->pp > 1; v *= 2) {
        char why[160];
        if (mo->L < lay->pp * v || sched_check(SCHED_INTERLEAVED, lay->pp, m, v, why, sizeof why) != MP_OK) continue;
        cm_layout_t il = *lay;
        il.kind = SCHED_INTERLEAVED, il.v = v;
        cm_layout_balanced(&il, mo->L);
        static const policy_t order[] = {POLICY_KEEP, POLICY_SELECTIVE, POLICY_RECOMPUTE};
        for (int k = 0; k < 3; k++) {
            int fit = 1;
            double worst = 0.0;
            for (int s = 0; s < il.pp; s++) {
                int n = 0;
                for (int local = 0; local < v; local++) n += il.chunk_layers[sched_stage_chunk(il.kind, s, local, il.pp)];
                il.policy[s] = order[k];
                /* interleaving holds about (1 + (pp − 1)/(pp·v))× 1F1B's stash on stage 0 */
                if (plan_stage_mem(c, &il, m, s, 0, n, order[k]) * (1.0 + 1.0 / v) > d->mem_bytes) fit = 0;
                const double t = plan_stage_time(c, d, &il, s, 0, n, order[k]);
                if (t > worst) worst = t;
            }
            if (!fit) continue;
            if (plan_push(cs, &il, (m + (double)(il.pp - 1) / v) * worst) != MP_OK) return MP_ERR;
            break;
        }
    }
    return MP_OK;
}

static int plan_enumerate(plan_cands_t *cs, const cm_model_t *mo, const dev_kind_t *d, plan_costs_fn costs, void *ctx,
                          const plan_opts_t *o)
{
    for (int tp = 1; tp <= o->ranks; tp++) {
        if (o->ranks % tp || (d->node_cores <= 0 && tp > o->per_node) || cm_tp_indivisible(mo, tp))
            continue;
        for (int pp = 1; pp <= mo->L && pp <= SIM_MAX_STAGES; pp++) {
            if ((o->ranks / tp) % pp) continue;
            const int dp = o->ranks / tp / pp;
            if (mo->batch % dp) continue;
            for (int mb = 1; mb <= o->max_mb && mb <= mo->batch / dp; mb++) {
                if ((mo->batch / dp) % mb) continue;
                cm_costs_t c;
                if (costs(ctx, mb, tp, &c) != MP_OK) continue;
                for (int zero = 0; zero <= (dp > 1); zero++) {
                    cm_layout_t lay;
                    memset(&lay, 0, sizeof lay);
                    lay.dp = dp, lay.tp = tp, lay.pp = pp, lay.mb = mb, lay.zero = zero;
                    lay.nodes_ranks = o->per_node, lay.prefetch = o->prefetch, lay.prec = o->prec;
                    lay.threads = o->threads;
                    if (plan_add_schedules(cs, mo, &c, d, &lay, mo->batch / dp / mb) != MP_OK) return MP_ERR;
                }
            }
        }
    }
    return MP_OK;
}

int plan_search(const cm_model_t *mo, const dev_kind_t *d, plan_costs_fn costs, void *ctx, const plan_opts_t *o,
                plan_t *out, int max, int *n_p)
{
    plan_cands_t cs = {0};
    plan_t *done = NULL;
    int rc = MP_ERR, nd = 0;
    if (plan_enumerate(&cs, mo, d, costs, ctx, o) != MP_OK) goto out;
    if (cs.n) qsort(cs.v, (size_t)cs.n, sizeof *cs.v, plan_cand_cmp); /* none: cs.v is NULL */
    const int nsim = cs.n < PLAN_SIMULATED ? cs.n : PLAN_SIMULATED;
    if (!(done = malloc(sizeof *done * (size_t)(nsim ? nsim : 1)))) goto out;
    for (int i = 0; i < nsim; i++) {
        cm_costs_t c;
        plan_t *p = &done[nd];
        p->lay = cs.v[i].lay;
        if (costs(ctx, p->lay.mb, p->lay.tp, &c) != MP_OK) continue;
        if (cm_evaluate(mo, &c, d, &p->lay, &p->res) != MP_OK || !p->res.fits) continue;
        p->score = o->objective == PLAN_TIME ? p->res.step_s : p->res.energy_j / p->res.tokens_per_s / p->res.step_s;
        p->meets = plan_meets(&p->res, o->min_tokens_per_s);
        nd++;
    }
    qsort(done, (size_t)nd, sizeof *done, plan_cmp);
    *n_p = nd < max ? nd : max;
    memcpy(out, done, sizeof *done * (size_t)*n_p);
    rc = MP_OK;
out:
    free(cs.v), free(done);
    return rc;
}
