/* The executor (src/exec/executor.h) on one process, pp = 1 (a one-stage pipeline over
 * MPI_COMM_SELF), for 1f1b, gpipe and 2bw with m = 3 micro-batches: exec_step's loss and gradients
 * are bitwise those of a hand loop of model_forward/model_backward over the same micro-batches in
 * the same order; the bucket-ready hook sees PARAM_RANGE_FINAL then each block from the last, only
 * during the last micro-batch, with that range's gradients already final; one stash slot is ever
 * in use; 2bw runs batch t on the previous weight version; exec_forward_only's loss is
 * model_forward's. */
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "backend.h"
#include "check.h"
#include "executor.h"
#include "kernels.h"
#include "model.h"
#include "mpi_check.h"
#include "params.h"
#include "rng.h"
#include "tap.h"

static const model_cfg_t CFG = {.layers = 2, .dim = 16, .heads = 2, .seq_len = 8, .vocab = 32, .mlp_ratio = 4};
enum { B = 2, M = 3, STEPS = 2 };

/* Tokens of micro-batch mb of batch t: a function of (t, mb) only. */
static void fill_tokens(acts_t *a, long t, int mb)
{
    for (int i = 0; i < a->B * a->T; i++) {
        a->inputs[i] = (int)(rng_key(7, (uint64_t)t, (uint64_t)mb, (uint64_t)i) % (uint64_t)CFG.vocab);
        a->targets[i] = (int)(rng_key(8, (uint64_t)t, (uint64_t)mb, (uint64_t)i) % (uint64_t)CFG.vocab);
    }
}

/* What the batch source and the hook saw. */
#define LOG_MAX 64
typedef struct {
    model_t *model;
    long fills_t[LOG_MAX];
    int fills_mb[LOG_MAX], nfills;
    int layer[LOG_MAX], layer_mb[LOG_MAX], nready; /* hook calls, and the micro-batch last filled then */
    float *snap[LOG_MAX];                          /* the range's gradients when its hook ran */
} log_t;

static void source_fill(void *ctx, acts_t *a, long t, int mb)
{
    log_t *lg = ctx;
    if (lg->nfills < LOG_MAX) lg->fills_t[lg->nfills] = t, lg->fills_mb[lg->nfills++] = mb;
    fill_tokens(a, t, mb);
}

static void ready_hook(void *ctx, int layer)
{
    log_t *lg = ctx;
    if (lg->nready == LOG_MAX) return;
    size_t off, n;
    param_table_range(&lg->model->tab, layer, &off, &n);
    lg->snap[lg->nready] = malloc((n ? n : 1) * sizeof(float));
    memcpy(lg->snap[lg->nready], lg->model->grads + off, n * sizeof(float));
    lg->layer[lg->nready] = layer;
    lg->layer_mb[lg->nready++] = lg->nfills ? lg->fills_mb[lg->nfills - 1] : -1;
}

static void log_reset(log_t *lg)
{
    for (int i = 0; i < lg->nready; i++) free(lg->snap[i]);
    model_t *m = lg->model;
    memset(lg, 0, sizeof *lg);
    lg->model = m;
}

/* The hand loop: batch t's micro-batches forward then backward, one after the other, on the
 * previous weight version when old. Returns the Σ of token losses; gradients in m->grads. */
static double hand_step(model_t *m, acts_t *a, scratch_t *s, long t, float dloss, int old)
{
    model_use_version(m, old);
    model_grads_zero(m);
    double loss = 0.0;
    for (int mb = 0; mb < M; mb++) {
        fill_tokens(a, t, mb);
        loss += model_forward(m, a, s);
        model_backward(m, a, s, dloss);
    }
    model_grads_finish(m);
    model_use_version(m, 0);
    return loss;
}

/* The hook's calls of one step: FINAL, then blocks L-1..0, all during micro-batch M-1, each range's
 * gradients then equal to its final ones. */
static int hook_calls_right(const log_t *lg, const model_t *m, char *why, size_t nwhy)
{
    const int want = 1 + m->tab.nlayers;
    if (lg->nready != want) return snprintf(why, nwhy, "%d calls, want %d", lg->nready, want), 0;
    for (int i = 0; i < want; i++) {
        const int layer = i == 0 ? PARAM_RANGE_FINAL : param_block_layer(&m->tab, m->tab.nlayers - i);
        if (lg->layer[i] != layer || lg->layer_mb[i] != M - 1)
            return snprintf(why, nwhy, "call %d: range %d during micro-batch %d, want %d during %d", i, lg->layer[i],
                            lg->layer_mb[i], layer, M - 1), 0;
        size_t off, n;
        param_table_range(&m->tab, layer, &off, &n);
        if (n == 0 || memcmp(lg->snap[i], m->grads + off, n * sizeof(float)) != 0)
            return snprintf(why, nwhy, "call %d (range %d): its gradients changed after the hook", i, layer), 0;
    }
    return snprintf(why, nwhy, "FINAL, %d, %d", lg->layer[1], lg->layer[2]), 1;
}

typedef struct {
    model_t *m;
    backend_t *be;
    arena_t *arena;
    acts_t *a;
    scratch_t *s;
    const wait_cfg_t *wait;
} rig_t;

static void test_kind(const rig_t *r, sched_kind_t kind)
{
    const char *name = sched_kind_names[kind];
    model_t *m = r->m;
    const int two = kind == SCHED_2BW;
    const size_t nbytes = m->alloc * sizeof(float);
    exec_ctx_t c = {.model = m, .be = r->be, .arena = r->arena, .acts = r->a, .scratch = r->s, .wait = r->wait,
                    .pp_comm = MPI_COMM_SELF, .embed_comm = MPI_COMM_NULL, .stage = 0, .pp = 1, .kind = kind,
                    .m = M, .nccl = 0, .policy = NULL, .trace = NULL, .prof = NULL, .dump = NULL};
    c.stage_rank[0] = 0;
    const size_t in_use = r->arena->in_use;
    exec_t e;
    if (exec_init(&e, &c) != MP_OK) {
        tap_ok(0, "%s: exec_init at pp=1", name);
        return;
    }
    log_t lg = {.model = m};
    const exec_batch_t src = {source_fill, &lg};
    const model_ready_t ready = {ready_hook, &lg};
    const float dloss = 1.0f / (float)(M * B * CFG.seq_len);
    float *g_exec = malloc(nbytes), *g_new = malloc(nbytes);
    int loss_ok = 1, grads_ok = 1, fills_ok = 1, hook_ok = 1, version_ok = 1, differs = 1;
    char why[256] = "";
    for (long t = 0; t < STEPS; t++) {
        log_reset(&lg);
        const double l_exec = exec_step(&e, t, dloss, &src, &ready, t == STEPS - 1);
        memcpy(g_exec, m->grads, nbytes);
        version_ok &= m->p.wte == m->params + param_table_find(&m->tab, "wte")->offset;
        for (int i = 0; i < M; i++) fills_ok &= lg.nfills == M && lg.fills_t[i] == t && lg.fills_mb[i] == i;
        if (!hook_calls_right(&lg, m, why, sizeof why)) hook_ok = 0;
        const double l_hand = hand_step(m, r->a, r->s, t, dloss, two);
        if (l_exec != l_hand) tap_diag("%s step %ld: loss %.17g, hand loop %.17g", name, t, l_exec, l_hand);
        loss_ok &= l_exec == l_hand && l_exec > 0.0;
        grads_ok &= memcmp(g_exec, m->grads, nbytes) == 0;
        if (two) { /* on the newest version instead: different gradients (the check above can tell) */
            hand_step(m, r->a, r->s, t, dloss, 0);
            memcpy(g_new, m->grads, nbytes);
            differs &= memcmp(g_exec, g_new, nbytes) != 0;
        }
    }
    tap_ok(loss_ok && grads_ok, "%s, pp=1, m=%d: %d steps' losses and gradients bitwise equal to a hand loop of "
                                "model_forward/model_backward%s", name, M, STEPS, two ? " on the previous weights" : "");
    if (two)
        tap_ok(differs && version_ok, "2bw: batch t ran on W(t-1), not W(t) (gradients differ from the newest "
                                      "weights'), and the newest version is in use after the step");
    tap_ok(fills_ok, "%s: the batch source filled micro-batches 0, 1, 2 of step t, once each", name);
    tap_ok(hook_ok, "%s: bucket-ready hook called FINAL then each block from the last, only in the last "
                    "micro-batch, each range final when called (%s)", name, why);
    tap_ok(exec_stash_peak(&e) == 1, "%s: stash peak at pp=1 is 1 slot (got %d)", name, exec_stash_peak(&e));

    /* the evaluation's forward: all rows, then one row */
    fill_tokens(r->a, 99, 0);
    const double f_all = exec_forward_only(&e, B);
    const double f_one = exec_forward_only(&e, 1);
    fill_tokens(r->a, 99, 0);
    const double f_hand = model_forward(m, r->a, r->s);
    double row0 = 0.0;
    for (int i = 0; i < CFG.seq_len; i++) row0 += r->a->host_losses[i];
    tap_ok(f_all == f_hand && f_one == row0 && f_one > 0.0 && f_one < f_all,
           "%s: exec_forward_only's loss equals model_forward's sum (%.6f), and with 1 valid row the first row's "
           "(%.6f)", name, f_all, f_one);
    log_reset(&lg);
    free(g_exec);
    free(g_new);
    exec_free(&e);
    tap_ok(r->arena->in_use == in_use, "%s: exec_free returns the stash and buffers to the arena", name);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    mpi_check_init(0);
    kernels_set_threads(1);
    const int zero = 0;
    wait_cfg_t wait = {.yield = 0, .timeout = 30.0};
    arena_t arena;
    arena_init(&arena, 0);
    backend_t cpu;
    model_t m;
    acts_t a;
    scratch_t s;
    if (be_init(&cpu, BE_CPU, &arena, 0, 0, 0, &wait) != MP_OK ||
        model_create(&m, &CFG, &cpu, &arena, 1, &zero, &CFG.layers, 1, 1, 1, 1, 0) != MP_OK ||
        acts_create(&a, &m, B, &arena) != MP_OK || scratch_create(&s, &m, B, &arena) != MP_OK) {
        tap_ok(0, "tiny model (L2 C16 H2 T8 V32), activations and scratch on the cpu backend");
        return tap_done();
    }
    param_init(&m.tab, m.params, 1337);
    const rig_t rig = {&m, &cpu, &arena, &a, &s, &wait};
    test_kind(&rig, SCHED_1F1B);
    test_kind(&rig, SCHED_GPIPE);
    /* 2bw: W(t-1) the initial weights, W(t) another draw */
    if (model_versions_create(&m) != MP_OK) {
        tap_ok(0, "model_versions_create");
        return tap_done();
    }
    param_init(&m.tab, m.params, 4242);
    test_kind(&rig, SCHED_2BW);
    scratch_destroy(&s, &arena);
    acts_destroy(&a, &arena);
    model_destroy(&m);
    be_destroy(&cpu);
    tap_ok(arena.in_use == 0 && arena.count == 0, "everything returned to the arena");
    MPI_Finalize();
    return tap_done();
}
