#include "autosplit.h"

#include <math.h>
#include <string.h>

#include "check.h"
#include "block_kind.h"
#include "deck_model.h"
#include "perf.h"
#include "planner.h"
#include "profile.h"


/* A nominal device: every product at one peak, memory-bound work at a quarter of it in bytes (a
 * 4 FLOP/byte machine balance, an assumption near both this CPU's 105 GFLOP/s per core on 30 GB/s
 * and an A100's bf16 on HBM). Only the ratios of the layers' times matter to a split. */
static void autosplit_device(dev_kind_t *k)
{
    memset(k, 0, sizeof *k);
    snprintf(k->name, sizeof k->name, "nominal");
    for (int p = 0; p < DEV_PRECS; p++) k->peak[p] = 1e12;
    k->mem_bw = 2.5e11, k->mem_bytes = 1e300; /* the split ignores memory: the memory plan checks it */
    k->per_node = 1 << 20, k->intra.bw = k->inter.bw = 1e10, k->intra.lat = k->inter.lat = 1e-5, k->host_bw = 1e10;
}

/* The one policy a split assumes everywhere, and the one autosplit_resolve times: the deck's;
 * recompute and selective re-run forwards; keep, offload (its copies overlap), balance, auto and
 * per-layer letters count as keep. */
static const policy_t autosplit_of[POLICY_COUNT] = {[POLICY_RECOMPUTE] = POLICY_RECOMPUTE,
                                                    [POLICY_SELECTIVE] = POLICY_SELECTIVE};

static policy_t autosplit_policy(const deck_t *d)
{
    return d->memory.per_layer.n ? POLICY_KEEP : autosplit_of[d->memory.policy];
}

/* The deck's model costs on the nominal device; with a measured, in this run's seconds: the
 * nominal model then only splits a block's time into forward, backward and each policy's re-run
 * (their modelled ratios) and the rest's into embedding and head. A measured block had tp = 1 and
 * no all-reduce: tp divides block and vocabulary-parallel head alike, so only their ratio matters. */
static void autosplit_costs(const deck_t *d, const autosplit_t *a, cm_costs_t *c)
{
    const model_cfg_t cfg = deck_model_cfg(d, NULL);
    const cm_model_t mo = block_kind_cost_model(&cfg, d->train.batch);
    dev_kind_t k;
    autosplit_device(&k);
    cm_costs_from_device(c, &mo, &k, d->train.precision == DECK_PRECISION_BF16 ? DEV_PREC_BF16 : DEV_PREC_FP32,
                         d->train.micro_batch, d->parallel.tp);
    if (!a || !a->measured) return;
    const double sb = a->block_s / (c->fwd + c->bwd + c->extra[autosplit_policy(d)]);
    /* a rest lost in the noise (tiny models) keeps the model's ratio to the block */
    const double sr = a->rest_s > 0 ? a->rest_s / (c->embed_fwd + c->embed_bwd + c->head_fwd + c->head_bwd) : sb;
    c->fwd *= sb, c->bwd *= sb, c->tp_fwd = c->tp_bwd = 0.0;
    for (int p = 0; p < POLICY_STAGE_CHOICES; p++) c->extra[p] *= sb;
    c->embed_fwd *= sr, c->embed_bwd *= sr, c->head_fwd *= sr, c->head_bwd *= sr;
}

int autosplit_layers(const deck_t *d, const autosplit_t *a, int *sizes, double *slowest_p)
{
    const model_cfg_t cfg = deck_model_cfg(d, NULL);
    const cm_model_t mo = block_kind_cost_model(&cfg, d->train.batch);
    dev_kind_t k;
    autosplit_device(&k);
    const int tp = d->parallel.tp, B = d->train.micro_batch;
    const policy_t pol = autosplit_policy(d);
    cm_costs_t c;
    autosplit_costs(d, a, &c);
    for (int p = 0; p < POLICY_STAGE_CHOICES; p++)
        if (p != (int)pol) c.extra[p] = HUGE_VAL; /* the DP takes the fastest policy: only `pol` is finite */
    cm_layout_t lay;
    memset(&lay, 0, sizeof lay);
    lay.dp = d->parallel.dp, lay.tp = tp, lay.pp = d->parallel.pp, lay.v = 1, lay.mb = B, lay.kind = SCHED_1F1B;
    const int m = d->train.batch / (B * d->parallel.dp * d->parallel.sp);
    const double slowest = plan_partition(&mo, &c, &k, &lay, m > 0 ? m : 1);
    if (slowest < 0) return MP_FAIL("pipeline.layers=auto: no split of %d layers into %d stages", mo.L, lay.pp);
    double total = c.embed_fwd + c.embed_bwd + c.head_fwd + c.head_bwd;
    total += mo.L * (c.fwd + c.bwd + c.extra[pol] + c.tp_fwd + c.tp_bwd);
    for (int s = 0; s < lay.pp; s++) sizes[s] = lay.chunk_layers[s];
    *slowest_p = total > 0 ? slowest / total : 1.0;
    return MP_OK;
}

int autosplit_resolve(deck_t *d, const wait_cfg_t *w, int rank, autosplit_t *a)
{
    memset(a, 0, sizeof *a);
    if (!d->pipeline.chunks.automatic && d->pipeline.replan_every == 0) return MP_OK;
    a->on = d->pipeline.chunks.automatic;
    /* the one policy the split assumes (autosplit_layers); the CUDA backend's times cannot be taken
     * on a host without its device, and the emulator's are the CPU's */
    static const block_mode_t mode_of[POLICY_COUNT] = {[POLICY_RECOMPUTE] = MODE_RECOMPUTE,
                                                            [POLICY_SELECTIVE] = MODE_SELECTIVE};
    const block_mode_t mode = d->memory.per_layer.n ? MODE_KEEP : mode_of[d->memory.policy]; /* autosplit_policy */
    double t[4] = {0.0, 0.0, 0.0, 0.0}; /* block, rest, wall time, 2-layer pass: rank 0's, + others' zeros */
    const double *fixed = d->debug.autosplit_pass_s; /* the deck's passes, not timed: fwd + bwd each, b = 0 */
    if (rank == 0 && (fixed[0] > 0 || d->train.device != DECK_DEVICE_CUDA) && d->parallel.pp > 1) { /* one stage: nothing to split */
        const double t0 = perf_now();
        double f1 = fixed[0], b1 = 0.0, f2 = fixed[1], b2 = 0.0;
        /* the fastest of 2 after a warm-up (a few seconds at 124M); a model whose pass is shorter
         * takes up to 7, as mindpipe profile does: about a second of passes against a busy host */
        int reps = 2, ok = fixed[0] > 0;
        if (!ok) {
            ok = profile_time_model(d, 1, mode, reps, w, &f1, &b1) == MP_OK;
            if (ok && f1 + b1 < 0.25)
                reps = f1 + b1 < 1.0 / 7 ? 7 : (int)ceil(1.0 / (f1 + b1)),
                ok = profile_time_model(d, 1, mode, reps, w, &f1, &b1) == MP_OK;
            ok = ok && profile_time_model(d, 2, mode, reps, w, &f2, &b2) == MP_OK;
        }
        /* a 2-layer pass under AUTOSPLIT_MIN_PASS_S is not timed against the host's noise (a
         * scheduler tick is 4 ms; at the tests' sizes a block is 0.05-0.5 ms and its measured
         * share varied 5x between runs on a busy host): the model's ratios decide */
        if (ok && f2 + b2 >= AUTOSPLIT_MIN_PASS_S && f2 + b2 > f1 + b1)
            t[0] = (f2 + b2) - (f1 + b1), t[1] = fmax((f1 + b1) - t[0], 0.0);
        t[2] = perf_now() - t0, t[3] = ok ? f2 + b2 : 0.0;
    }
    wait_allreduce_sum(w, t, 4, MPI_DOUBLE, MPI_COMM_WORLD, "pipeline.layers=auto's timings");
    a->measured = t[0] > 0.0, a->block_s = t[0], a->rest_s = t[1], a->took_s = t[2], a->pass_s = t[3];
    if (!a->on) return MP_OK; /* live migration only: its per-layer costs (autosplit_layer_costs) */
    int sizes[DECK_LIST_MAX];
    if (autosplit_layers(d, a, sizes, &a->share) != MP_OK) return MP_ERR;
    deck_layer_list_t *l = &d->pipeline.chunks;
    l->automatic = 0, l->n = d->parallel.pp;
    for (int s = 0; s < l->n; s++) l->layers[s] = sizes[s];
    return MP_OK;
}

/* Per token, a block's product and attention work in multiply-adds: 4AC + 2RC² + 2AT for attention
 * width A, MLP ratio R, width C and context T (a skip block: heads 0, no work). */
static double autosplit_block_work(double A, double R, double C, double T) { return 4 * A * C + 2 * R * C * C + 2 * A * T; }

int autosplit_layer_costs(const deck_t *d, const autosplit_t *a, double *w_p, double *embed_p, double *head_p)
{
    cm_costs_t c;
    autosplit_costs(d, a, &c);
    const policy_t *of = autosplit_of;
    const double C = d->model.dim, T = d->model.seq_len;
    const double uniform = autosplit_block_work(C, d->model.mlp_ratio, C, T);
    const model_cfg_t cfg = deck_model_cfg(d, NULL); /* the blocks' shapes */
    for (int l = 0; l < d->model.layers; l++) {
        const policy_t p = d->memory.per_layer.n ? d->memory.per_layer.policy[l] : d->memory.policy;
        const double block = c.fwd + c.bwd + c.extra[of[p == POLICY_AUTO ? POLICY_KEEP : p]] + c.tp_fwd + c.tp_bwd;
        double scale = 1.0;
        if (cfg.shape)
            scale = block_is_skip(&cfg, l)
                        ? 0.0
                        : autosplit_block_work(cfg_heads(&cfg, l) * C / cfg.heads, cfg_ratio(&cfg, l), C, T) / uniform;
        w_p[l] = block * scale;
    }
    *embed_p = c.embed_fwd + c.embed_bwd;
    *head_p = c.head_fwd + c.head_bwd;
    return MP_OK;
}
