/* The planner's device model, cost model and search (src/sched/devmodel.h, costmodel.h, planner.h),
 * linked like test_sim_nompi: the schedule layer and core alone, no MPI. Cases worked out by hand:
 * the efficiency curve's interpolation, the collective formulas, a costed simulation that must equal
 * the uniform simulator when its costs are uniform and its messages free, message costs that delay
 * the step by exactly the pipeline's critical messages, the memory of 1F1B's stage 0 (pp stashes),
 * and the search's promises (every plan fits, plans sorted, a policy chosen only when keep cannot fit).
 * zb1p: its costed step against the Zero Bubble paper's bubble, against 1f1b's with and without W,
 * its W stashes in the memory, and its place in the search (CPU kinds only, ranked by time). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "attention_fused_layout.h"
#include "costmodel.h"
#include "devmodel.h"
#include "planner.h"
#include "sim.h"
#include "tap.h"

static int near(double a, double b, double rel)
{
    return fabs(a - b) <= rel * fmax(fabs(a), fabs(b)) + 1e-15;
}

/* A made-up kind with round numbers, so expected values are easy to write down. */
static void toy_kind(dev_kind_t *d)
{
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "toy");
    d->peak[DEV_PREC_BF16] = 100e12, d->peak[DEV_PREC_TF32] = 50e12, d->peak[DEV_PREC_FP32] = 10e12;
    d->mem_bw = 1e12, d->mem_bytes = 40e9, d->idle_w = 100, d->busy_w = 400;
    d->neff = 3;
    d->eff_size[0] = 100, d->eff_size[1] = 1000, d->eff_size[2] = 10000;
    d->eff[0] = 0.2, d->eff[1] = 0.6, d->eff[2] = 0.8;
    d->per_node = 8, d->intra.bw = 100e9, d->intra.lat = 1e-5, d->inter.bw = 10e9, d->inter.lat = 1e-4;
    d->host_bw = 20e9;
}

static void test_devmodel(void)
{
    dev_kind_t d;
    toy_kind(&d);
    char why[160];
    tap_ok(dev_kind_check(&d, why, sizeof why) == MP_OK, "the toy kind checks");
    tap_ok(near(dev_eff(&d, 50), 0.2, 1e-12) && near(dev_eff(&d, 1e6), 0.8, 1e-12), "eff is flat beyond the ends");
    tap_ok(near(dev_eff(&d, sqrt(100.0 * 1000.0)), 0.4, 1e-12), "eff is linear in log s (geometric midpoint: 0.4)");
    tap_ok(near(dev_gemm_time(&d, DEV_PREC_BF16, 1000, 1000, 1000), 2e9 / (100e12 * 0.6), 1e-12),
           "a 1000^3 bf16 product takes 2e9 / (peak * 0.6)");
    /* ring over 4 ranks of 1 GB at 100 GB/s: 2·3/4·1e9/1e11 + 6·1e-5 = 0.01506 s; the tree's 4 steps
     * of 0.01 s are slower */
    tap_ok(near(dev_allreduce_time(&d.intra, 4, 1e9), 0.015 + 6e-5, 1e-12), "ring all-reduce of 1 GB over 4 ranks");
    tap_ok(near(dev_allreduce_time(&d.intra, 4, 8), 4 * (1e-5 + 8 / 100e9), 1e-9),
           "a tiny all-reduce takes the tree (latency-bound)");
    tap_ok(dev_group_link(&d, 8, 1) == &d.intra && dev_group_link(&d, 2, 8) == &d.inter,
           "tp 8 stays in the node; dp 2 at stride 8 crosses nodes");
    dev_kind_t bad = d;
    bad.eff_size[2] = 500;
    tap_ok(dev_kind_check(&bad, why, sizeof why) == MP_ERR && strstr(why, "increase"), "a decreasing curve is refused: %s", why);
    bad = d, bad.eff[1] = 1.5;
    tap_ok(dev_kind_check(&bad, why, sizeof why) == MP_ERR, "an efficiency above 1 is refused: %s", why);
}

/* Costs with round numbers: blocks of 1 s forward and 2 s backward, nothing else. */
static void unit_costs(cm_costs_t *c, int B)
{
    memset(c, 0, sizeof *c);
    c->B = B, c->tp = 1;
    c->fwd = 1.0, c->bwd = 2.0, c->extra[POLICY_RECOMPUTE] = 1.0;
    c->stash[POLICY_KEEP] = 1e9, c->stash[POLICY_RECOMPUTE] = 1e8, c->stash[POLICY_SELECTIVE] = 5e8;
    c->offload_bytes = 1e9, c->act_bytes = 0.0, c->block_params = 0.0;
    c->state_bytes_per_param = 16.0, c->opt_bytes_per_param = 8.0;
    c->flops_per_token = 1.0;
}

static void test_evaluate(void)
{
    dev_kind_t d;
    toy_kind(&d);
    cm_model_t mo = {.L = 8, .C = 64, .NH = 4, .T = 16, .V = 64, .R = 4, .batch = 8};
    cm_costs_t c;
    unit_costs(&c, 1);
    for (int pp = 1; pp <= 4; pp *= 2) {
        cm_layout_t lay;
        memset(&lay, 0, sizeof lay);
        lay.dp = 1, lay.tp = 1, lay.pp = pp, lay.v = 1, lay.mb = 1, lay.kind = SCHED_1F1B, lay.nodes_ranks = 8;
        cm_layout_balanced(&lay, mo.L);
        cm_result_t r;
        sim_result_t s;
        const double per = (double)mo.L / pp;
        int ok = cm_evaluate(&mo, &c, &d, &lay, &r) == MP_OK && sim_run(SCHED_1F1B, pp, 8, 1, per, 2 * per, &s) == MP_OK;
        tap_ok(ok && near(r.step_s, s.makespan, 1e-12), "pp=%d: the costed step %.3f s equals the uniform simulator's %.3f s",
               pp, ok ? r.step_s : -1, ok ? s.makespan : -1);
        tap_ok(ok && near(r.bubble, (pp - 1.0) / (8 + pp - 1.0), 1e-12), "pp=%d: bubble (p-1)/(m+p-1) = %.4f", pp,
               ok ? r.bubble : -1);
        /* 1F1B's stage 0 holds min(m, pp) micro-batches of its blocks */
        tap_ok(ok && near(r.stage_mem[0], pp * per * 1e9, 1e-9), "pp=%d: stage 0 holds %d stashes (%.3g GB)", pp, pp,
               ok ? r.stage_mem[0] / 1e9 : -1);
        /* messages of 1 GB at 10 GB/s + 1e-4 s latency cross nodes (8 ranks per node, here 1: every
         * boundary crosses); the step grows by at least the 2(pp−1) messages on the critical path */
        if (pp > 1) {
            cm_costs_t cm = c;
            cm.act_bytes = 1e9;
            lay.nodes_ranks = 1;
            d.per_node = 1;
            cm_result_t r2;
            ok = cm_evaluate(&mo, &cm, &d, &lay, &r2) == MP_OK;
            const double msg = 0.1 + 1e-4;
            tap_ok(ok && r2.step_s >= r.step_s + 2 * (pp - 1) * msg - 1e-9 && near(r2.exposed_comm_s, r2.step_s - r.step_s, 1e-9),
                   "pp=%d: 0.1 s messages add %.3f s, all of it exposed comm", pp, ok ? r2.step_s - r.step_s : -1);
            d.per_node = 8;
        }
    }
    /* recompute: each backward re-runs its forward (+1 s per block), and the stash shrinks 10× */
    cm_layout_t lay;
    memset(&lay, 0, sizeof lay);
    lay.dp = 1, lay.tp = 1, lay.pp = 2, lay.v = 1, lay.mb = 1, lay.kind = SCHED_1F1B, lay.nodes_ranks = 8;
    cm_layout_balanced(&lay, mo.L);
    cm_result_t keep, rec;
    lay.policy[0] = lay.policy[1] = POLICY_KEEP;
    int ok = cm_evaluate(&mo, &c, &d, &lay, &keep) == MP_OK;
    lay.policy[0] = lay.policy[1] = POLICY_RECOMPUTE;
    ok = ok && cm_evaluate(&mo, &c, &d, &lay, &rec) == MP_OK;
    tap_ok(ok && near(rec.stage_busy_s[0], keep.stage_busy_s[0] * 4.0 / 3.0, 1e-12),
           "recompute: stage busy x4/3 (backward 2 s + 1 s re-run per block)");
    tap_ok(ok && rec.stage_mem[0] < keep.stage_mem[0] / 2, "recompute: stage 0 memory %.3g GB < keep's %.3g GB / 2",
           ok ? rec.stage_mem[0] / 1e9 : -1, ok ? keep.stage_mem[0] / 1e9 : -1);
    /* offload: the stash leaves the device; the copies (1 GB per block at 20 GB/s) overlap compute */
    lay.policy[0] = lay.policy[1] = POLICY_OFFLOAD;
    cm_result_t off;
    ok = cm_evaluate(&mo, &c, &d, &lay, &off) == MP_OK;
    tap_ok(ok && off.stage_mem[0] < keep.stage_mem[0] && off.step_s >= keep.step_s - 1e-9,
           "offload: less device memory (%.3g GB), no faster than keep", ok ? off.stage_mem[0] / 1e9 : -1);
    /* a CPU node of 2 cores, one thread per rank: at pp = 2 the ranks have a core each (the uniform
     * simulator's step); at pp = 4 every rank runs at half speed the whole step, because a waiting
     * rank polls and stays runnable: exactly twice pp = 4's uniform step (costmodel.c) */
    {
        dev_kind_t cpu = d;
        cpu.node_cores = 2, cpu.per_node = 4;
        cm_costs_t cc = c;
        cc.cpu_threads = 1;
        for (int pp = 2; pp <= 4; pp *= 2) {
            cm_layout_t cl;
            memset(&cl, 0, sizeof cl);
            cl.dp = 1, cl.tp = 1, cl.pp = pp, cl.v = 1, cl.mb = 1, cl.kind = SCHED_1F1B, cl.nodes_ranks = pp, cl.threads = 1;
            cm_layout_balanced(&cl, mo.L);
            cm_result_t cr;
            sim_result_t s;
            const double per = (double)mo.L / pp, share = pp > 2 ? pp / 2.0 : 1.0;
            ok = cm_evaluate(&mo, &cc, &cpu, &cl, &cr) == MP_OK && sim_run(SCHED_1F1B, pp, 8, 1, per, 2 * per, &s) == MP_OK;
            tap_ok(ok && near(cr.step_s, share * s.makespan, 1e-12),
                   "2 cores, pp=%d ranks: step %.3f s = %.0f x the uniform step %.3f s", pp, ok ? cr.step_s : -1, share,
                   ok ? s.makespan : -1);
        }
        /* dp = 2 of 4 micro-batches each, 8 GB of fp32 gradients (ring: 8e9 / 100 GB/s + 2 latencies):
         * a CPU rank sums them on its own thread after the backward, all of it exposed; a GPU's
         * reduction hides behind the last backward but a tenth (costmodel.c) */
        cm_costs_t cd = cc;
        cd.block_params = 2e9 / mo.L;
        const double ar = 8e9 / 100e9 + 2 * 1e-5;
        for (int gpu = 0; gpu <= 1; gpu++) {
            const dev_kind_t k = gpu ? d : cpu;
            cm_layout_t cl;
            memset(&cl, 0, sizeof cl);
            cl.dp = 2, cl.tp = 1, cl.pp = 1, cl.v = 1, cl.mb = 1, cl.kind = SCHED_1F1B, cl.nodes_ranks = 2, cl.threads = 1;
            cm_layout_balanced(&cl, mo.L);
            cm_result_t cr;
            sim_result_t s;
            ok = cm_evaluate(&mo, &cd, &k, &cl, &cr) == MP_OK && sim_run(SCHED_1F1B, 1, 4, 1, mo.L, 2.0 * mo.L, &s) == MP_OK;
            const double want = s.makespan + (gpu ? 0.1 : 1.0) * ar;
            tap_ok(ok && near(cr.step_s, want, 1e-9), "dp=2 on a %s: step %.4f s = 4 micro-batches %.1f s + %s the all-reduce",
                   gpu ? "GPU" : "CPU", ok ? cr.step_s : -1, ok ? s.makespan : -1, gpu ? "a tenth of" : "all of");
        }
    }
    /* a bad layout is an error, not a number */
    lay.mb = 3;
    tap_ok(cm_evaluate(&mo, &c, &d, &lay, &off) == MP_ERR && off.error[0], "costs for another micro-batch are refused: %s",
           off.error);
}

static int toy_costs(void *ctx, int B, int tp, cm_costs_t *c)
{
    (void)ctx;
    if (tp != 1) return MP_ERR;
    unit_costs(c, B);
    c->fwd *= B, c->bwd *= B, c->extra[POLICY_RECOMPUTE] *= B;
    for (int i = 0; i < POLICY_STAGE_CHOICES; i++) c->stash[i] *= B;
    return MP_OK;
}

static void test_search(void)
{
    dev_kind_t d;
    toy_kind(&d);
    cm_model_t mo = {.L = 8, .C = 64, .NH = 4, .T = 16, .V = 64, .R = 4, .batch = 8};
    plan_opts_t o = {4, 8, DEV_PREC_BF16, PLAN_TIME, 8, 0, 0, 0.0};
    plan_t p[8];
    int n = 0;
    int ok = plan_search(&mo, &d, toy_costs, NULL, &o, p, 8, &n) == MP_OK && n > 0;
    tap_ok(ok, "the search finds %d plans on 4 ranks", n);
    int sorted = 1, fit = 1;
    for (int i = 0; i < n; i++) {
        if (i && p[i].res.step_s < p[i - 1].res.step_s) sorted = 0;
        for (int s = 0; s < p[i].lay.pp; s++)
            if (p[i].res.stage_mem[s] > d.mem_bytes) fit = 0;
    }
    tap_ok(sorted, "plans come fastest first");
    tap_ok(fit, "every plan fits the device memory");
    /* 10 GB per device: keep at 8 layers × 1 GB × 1..4 stashes does not fit on every stage, so the
     * DP must choose a cheaper policy somewhere, and never one that does not fit */
    d.mem_bytes = 10e9;
    ok = plan_search(&mo, &d, toy_costs, NULL, &o, p, 8, &n) == MP_OK && n > 0;
    int nonkeep = 0;
    fit = 1;
    for (int i = 0; i < n; i++)
        for (int s = 0; s < p[i].lay.pp; s++) {
            nonkeep += p[i].lay.policy[s] != POLICY_KEEP;
            if (p[i].res.stage_mem[s] > d.mem_bytes) fit = 0;
        }
    tap_ok(ok && fit && nonkeep > 0, "under 10 GB: %d plans, all fit, %d stages not on keep", n, nonkeep);
    d.mem_bytes = 1e6;
    ok = plan_search(&mo, &d, toy_costs, NULL, &o, p, 8, &n) == MP_OK;
    tap_ok(ok && n == 0, "under 1 MB nothing fits and nothing is proposed");
    /* the DP: a uniform model on 2 stages splits evenly */
    d.mem_bytes = 40e9;
    cm_layout_t lay;
    memset(&lay, 0, sizeof lay);
    lay.dp = 1, lay.tp = 1, lay.pp = 2, lay.v = 1, lay.mb = 1, lay.kind = SCHED_1F1B;
    cm_costs_t c;
    unit_costs(&c, 1);
    const double st = plan_partition(&mo, &c, &d, &lay, 8);
    tap_ok(near(st, 12.0, 1e-12) && lay.chunk_layers[0] == 4 && lay.chunk_layers[1] == 4,
           "the DP splits 8 uniform layers 4 + 4 (slowest stage %.1f s)", st);
    /* a head as slow as two blocks moves two layers off the last stage */
    c.head_fwd = 2.0, c.head_bwd = 4.0;
    plan_partition(&mo, &c, &d, &lay, 8);
    tap_ok(lay.chunk_layers[0] == 5 && lay.chunk_layers[1] == 3, "a heavy head: %d + %d layers", lay.chunk_layers[0],
           lay.chunk_layers[1]);
}

/* unit_costs with the backward split: B 1 s, W 1 s per block (bwd stays their sum), and W's stash
 * a tenth of keep's */
static void split_costs(cm_costs_t *c, int B)
{
    unit_costs(c, B);
    c->bwd_b = 1.0, c->bwd_w = 1.0;
    for (int i = 0; i < POLICY_STAGE_CHOICES; i++) c->wstash[i] = 1e8;
}

/* One pipeline of pp stages, v chunks each, micro-batches of 1, balanced chunks, every stage keep. */
static cm_layout_t zb_layout(const cm_model_t *mo, sched_kind_t kind, int pp, int v)
{
    cm_layout_t lay;
    memset(&lay, 0, sizeof lay);
    lay.dp = 1, lay.tp = 1, lay.pp = pp, lay.v = v, lay.mb = 1, lay.kind = kind, lay.nodes_ranks = 8;
    cm_layout_balanced(&lay, mo->L);
    return lay;
}

static int zb_layout_eval(const cm_model_t *mo, const cm_costs_t *c, const dev_kind_t *d, sched_kind_t kind, int pp,
                          cm_result_t *r)
{
    const cm_layout_t lay = zb_layout(mo, kind, pp, 1);
    return cm_evaluate(mo, c, d, &lay, r);
}

static void test_zb1p(void)
{
    dev_kind_t d;
    toy_kind(&d);
    cm_model_t mo = {.L = 8, .C = 64, .NH = 4, .T = 16, .V = 64, .R = 4, .batch = 8}; /* m = 8 micro-batches of 1 */
    cm_costs_t c;
    split_costs(&c, 1);
    for (int pp = 2; pp <= 4; pp *= 2) {
        cm_result_t f, z;
        const double per = (double)mo.L / pp; /* one stage's F, B and W per micro-batch */
        int ok = zb_layout_eval(&mo, &c, &d, SCHED_1F1B, pp, &f) == MP_OK &&
                 zb_layout_eval(&mo, &c, &d, SCHED_ZB1P, pp, &z) == MP_OK;
        tap_ok(ok && z.step_s < f.step_s, "pp=%d m=8: zb1p's step %.3f s < 1f1b's %.3f s", pp, ok ? z.step_s : -1,
               ok ? f.step_s : -1);
        /* equal stages, free messages: m·(F+B+W) + (pp−1)·(F+B−W) (zerobubble.h), against 1F1B's
         * (m + pp − 1)·(F+B+W) */
        tap_ok(ok && near(z.step_s, (8 * 3.0 + (pp - 1)) * per, 1e-12) &&
                   near(f.step_s, (8 + pp - 1.0) * 3.0 * per, 1e-12),
               "pp=%d: zb1p %.3f s = (3m + pp - 1)·%.0f, 1f1b %.3f s = 3(m + pp - 1)·%.0f", pp, ok ? z.step_s : -1,
               per, ok ? f.step_s : -1, per);
        tap_ok(ok && near(z.stage_busy_s[0], f.stage_busy_s[0], 1e-12),
               "pp=%d: B + W busy the stage as the fused backward", pp);
        /* W's stashes beside the slots: more memory on every stage than 1F1B's */
        int more = ok;
        for (int s = 0; ok && s < pp; s++) more &= z.stage_mem[s] > f.stage_mem[s];
        tap_ok(more, "pp=%d: zb1p holds W's stashes: every stage above 1f1b's memory", pp);
        /* no W to move: the split buys nothing, zb1p is no better than 1f1b */
        cm_costs_t c0 = c;
        c0.bwd_b = 2.0, c0.bwd_w = 0.0;
        ok = zb_layout_eval(&mo, &c0, &d, SCHED_ZB1P, pp, &z) == MP_OK;
        tap_ok(ok && z.step_s >= f.step_s - 1e-12, "pp=%d, W = 0: zb1p's step %.3f s is no shorter than 1f1b's %.3f s",
               pp, ok ? z.step_s : -1, f.step_s);
    }
    /* zbv: the V of v = 2 (a V of one chunk per stage, or unequal chunks of a stage, refused naming
     * them); stage 0 holds the embedding and the head, a smaller bubble than zb1p's at equal costs,
     * and more memory on stage pp−1 than zb1p's last stage holds in stashes alone (the turn's gradients) */
    cm_result_t r;
    tap_ok(zb_layout_eval(&mo, &c, &d, SCHED_ZBV, 2, &r) == MP_ERR && strstr(r.error, "two chunks on each"),
           "zbv at v = 1 is refused: %s", r.error);
    {
        cm_layout_t vl = zb_layout(&mo, SCHED_ZBV, 2, 2);
        cm_result_t zv, z1;
        const int okv = cm_evaluate(&mo, &c, &d, &vl, &zv) == MP_OK, ok1 = zb_layout_eval(&mo, &c, &d, SCHED_ZB1P, 2, &z1) == MP_OK;
        tap_ok(okv && ok1 && zv.bubble < z1.bubble, "zbv pp=2 m=8: bubble %.4f below zb1p's %.4f", okv ? zv.bubble : -1,
               ok1 ? z1.bubble : -1);
        vl.chunk_layers[0] = 3, vl.chunk_layers[3] = 1;
        tap_ok(cm_evaluate(&mo, &c, &d, &vl, &r) == MP_ERR && strstr(r.error, "stage 0 has chunks of 3 and 1"),
               "zbv with unequal chunks on a stage is refused: %s", r.error);
    }
    cm_costs_t none = c;
    none.bwd_b = none.bwd_w = 0.0;
    tap_ok(zb_layout_eval(&mo, &none, &d, SCHED_ZB1P, 2, &r) == MP_ERR && strstr(r.error, "B and W"),
           "costs without a split are refused for zb1p: %s", r.error);
    cm_layout_t lay = zb_layout(&mo, SCHED_ZB1P, 2, 1);
    lay.policy[1] = POLICY_OFFLOAD;
    tap_ok(cm_evaluate(&mo, &c, &d, &lay, &r) == MP_OK,
           "zb1p with offload on stage 1 is evaluated (its stashes come back before B, stay until W)");
    lay.policy[1] = POLICY_KEEP, lay.balance = 1;
    tap_ok(cm_evaluate(&mo, &c, &d, &lay, &r) == MP_ERR && strstr(r.error, "balance"),
           "zb1p with balance is refused: %s", r.error);
}

static int toy_split_costs(void *ctx, int B, int tp, cm_costs_t *c)
{
    if (toy_costs(ctx, B, tp, c) != MP_OK) return MP_ERR;
    c->bwd_b = c->bwd_w = c->bwd / 2.0, c->cpu_threads = 1;
    for (int i = 0; i < POLICY_STAGE_CHOICES; i++) c->wstash[i] = 1e8 * B;
    return MP_OK;
}

static void test_zb1p_search(void)
{
    dev_kind_t d;
    toy_kind(&d);
    d.node_cores = 2, d.per_node = 2; /* a CPU node: where the runtime runs zb1p (MPI messages) */
    cm_model_t mo = {.L = 8, .C = 64, .NH = 4, .T = 16, .V = 64, .R = 4, .batch = 8};
    plan_opts_t o = {2, 2, DEV_PREC_FP32, PLAN_TIME, 8, 0, 1, 0.0};
    plan_t p[32];
    int n = 0, ok = plan_search(&mo, &d, toy_split_costs, NULL, &o, p, 32, &n) == MP_OK && n > 0;
    int sorted = 1, zb = -1, f1 = -1;
    for (int i = 0; i < n; i++) {
        if (i && p[i].res.step_s < p[i - 1].res.step_s) sorted = 0;
        const cm_layout_t *l = &p[i].lay;
        if (l->pp != 2 || l->mb != 1) continue;
        if (l->kind == SCHED_ZB1P && zb < 0) zb = i;
        if (l->kind == SCHED_1F1B && !l->balance && f1 < 0) f1 = i;
    }
    tap_ok(ok && sorted, "CPU kind, 2 ranks: %d plans, fastest first", n);
    tap_ok(zb >= 0 && f1 >= 0 && zb < f1 && p[zb].res.step_s < p[f1].res.step_s,
           "zb1p is a candidate and ranks ahead of 1f1b at pp=2, micro_batch=1 (plans %d and %d: %.3f s < %.3f s)",
           zb + 1, f1 + 1, zb >= 0 ? p[zb].res.step_s : -1, f1 >= 0 ? p[f1].res.step_s : -1);
    /* a GPU kind: the runtime's zb1p has no NCCL path (compose.c), so the search leaves it out */
    toy_kind(&d);
    o.per_node = 8;
    ok = plan_search(&mo, &d, toy_split_costs, NULL, &o, p, 32, &n) == MP_OK && n > 0;
    int any = 0;
    for (int i = 0; i < n; i++) any |= p[i].lay.kind == SCHED_ZB1P;
    char why[640];
    cm_costs_t c;
    toy_split_costs(NULL, 1, 1, &c);
    tap_ok(ok && !any && !plan_split_usable(SCHED_ZB1P, 2, &c, &d, why, sizeof why) && strstr(why, "NCCL"),
           "GPU kind: %d plans, none zb1p (%s)", n, why);
}

/* The attention's saved bytes (what selective drops): in bf16 at GPT-2 124M's shape (B = 16, T = 1024,
 * C = 768, NH = 12) the fused kernels' fp32 layout, as the model carves it on cuda (issue 44, item 5);
 * in fp32, and in bf16 where the head size is not one the fused kernels take, the (T,T) probabilities. */
static void test_att_bytes(void)
{
    dev_kind_t d;
    toy_kind(&d);
    cm_model_t mo = {.L = 12, .C = 768, .NH = 12, .T = 1024, .V = 50257, .R = 4, .batch = 16};
    cm_costs_t bf, fp, odd;
    cm_costs_from_device(&bf, &mo, &d, DEV_PREC_BF16, 16, 1);
    cm_costs_from_device(&fp, &mo, &d, DEV_PREC_FP32, 16, 1);
    const double probs = 16.0 * 12 * 1024 * 1024, fused = (double)mp_att_fused_floats(16, 1024, 768, 12);
    const double att_bf = bf.stash[POLICY_KEEP] - bf.stash[POLICY_SELECTIVE];
    const double att_fp = fp.stash[POLICY_KEEP] - fp.stash[POLICY_SELECTIVE];
    tap_diag("124M, B = 16: attention bytes a block saves: bf16 %.0f (fused layout), fp32 %.0f", att_bf, att_fp);
    tap_ok(near(att_bf, 4.0 * fused, 1e-12) && near(att_fp, 4.0 * probs, 1e-12),
           "attention stash: bf16 the fused layout's %.0f fp32 floats, fp32 the (B,NH,T,T) probabilities", fused);
    mo.NH = 64; /* head size 12: the probabilities' path, in bf16 elements */
    cm_costs_from_device(&odd, &mo, &d, DEV_PREC_BF16, 16, 1);
    tap_ok(near(odd.stash[POLICY_KEEP] - odd.stash[POLICY_SELECTIVE], 2.0 * 16 * 64 * 1024 * 1024, 1e-12),
           "bf16 at head size 12: the probabilities (bf16)");
}

int main(void)
{
    test_att_bytes();
    test_devmodel();
    test_evaluate();
    test_search();
    test_zb1p();
    test_zb1p_search();
    return tap_done();
}
