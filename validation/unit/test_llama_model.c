/* The llama family on one rank (issue 47): its parameter table against Hugging Face's counts, the
 * whole model's backward against central finite differences of its forward (grouped-query, and
 * multi-query), the memory policies and the split backward giving the full backward's bits, and the
 * emu backend bitwise the cpu one. */
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "block_kind.h"
#include "check.h"
#include "costmodel.h"
#include "kernels.h"
#include "model.h"
#include "model_fill.h"
#include "rng.h"
#include "tap.h"

/* 2 layers of 4 heads sharing 2 kv heads, SwiGLU of 24, theta and eps off their defaults so a
 * wrong one shows. */
static const model_cfg_t CFG = {.layers = 2, .dim = 16, .heads = 4, .seq_len = 7, .vocab = 23, .mlp_ratio = 1,
                                .arch = ARCH_LLAMA, .kv_heads = 2, .ffn_dim = 24, .rope_theta = 500.0f,
                                .norm_eps = 1e-5f};

typedef struct {
    arena_t arena;
    backend_t be;
    model_t m;
    acts_t a;
    scratch_t s;
} rig_t;

static int rig_open(rig_t *r, const model_cfg_t *cfg, be_kind_t kind, int B, const unsigned char *modes)
{
    static const wait_cfg_t wait = {.yield = 0, .timeout = 0.0};
    const int zero = 0;
    arena_init(&r->arena, 0);
    return be_init(&r->be, kind, &r->arena, kind == BE_CPU ? 0 : (size_t)64 << 20, 0, 0, &wait) == 0 &&
           model_create(&r->m, cfg, &r->be, &r->arena, 1, &zero, &cfg->layers, 1, 1, 1, 1, 0) == 0 &&
           model_set_modes(&r->m, modes) == 0 && acts_create(&r->a, &r->m, B, &r->arena) == 0 &&
           scratch_create(&r->s, &r->m, B, &r->arena) == 0;
}

static void rig_close(rig_t *r)
{
    scratch_destroy(&r->s, &r->arena);
    acts_destroy(&r->a, &r->arena);
    model_destroy(&r->m);
    be_destroy(&r->be);
}

/* Gradients of two micro-batches into g (the model's whole buffer, host memory). */
static void grads_of(rig_t *r, float *g)
{
    model_grads_zero(&r->m);
    for (int mb = 0; mb < 2; mb++) {
        test_tokens_fill(&r->a, r->m.cfg.vocab, 1, mb * r->a.B);
        model_forward(&r->m, &r->a, &r->s);
        model_backward(&r->m, &r->a, &r->s, 0.25f);
    }
    model_grads_finish(&r->m);
    be_to_host(&r->be, g, r->m.grads, r->m.tab.total * sizeof(float));
}

static void test_finite_differences(const model_cfg_t *cfg, const char *what)
{
    rig_t r;
    if (!rig_open(&r, cfg, BE_CPU, 3, NULL)) {
        tap_ok(0, "%s: model, activations and scratch", what);
        return;
    }
    model_t *m = &r.m;
    test_params_fill(&m->tab, m->params);
    test_tokens_fill(&r.a, cfg->vocab, 1, 0);
    model_grads_zero(m);
    model_forward(m, &r.a, &r.s);
    model_backward(m, &r.a, &r.s, 1.0f);
    model_grads_finish(m);
    int all_ok = 1, ntensors = 0;
    for (int i = 0; i < m->tab.count; i++) {
        const param_entry_t *e = &m->tab.entries[i];
        double worst = 0.0;
        ntensors++;
        for (int k = 0; k < 6; k++) {
            size_t j = (size_t)(rng_key(3, 11, (uint64_t)i, (uint64_t)k) % e->numel);
            float *p = &m->params[e->offset + j];
            const float save = *p, h = 1e-2f;
            *p = save + h;
            double lp = model_forward(m, &r.a, &r.s);
            *p = save - h;
            double lm = model_forward(m, &r.a, &r.s);
            *p = save;
            double fd = (lp - lm) / (2.0 * h), an = m->grads[e->offset + j];
            double err = fabs(fd - an) / (fabs(fd) + fabs(an) + 1e-2);
            if (err > worst) worst = err;
        }
        int good = worst < 2e-2;
        all_ok &= good;
        if (!good) tap_diag("%s: %s: worst relative error %.3e", what, e->name, worst);
    }
    tap_ok(all_ok && ntensors == 2 * 6 + 2 + cfg->untied, "%s: the backward of all %d tensors matches central finite "
           "differences", what, ntensors);
    rig_close(&r);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    kernels_set_threads(2);

    {   /* SmolLM2-135M (Hugging Face's config.json: 30 layers, 576 wide, 9 heads, 3 kv heads, 1536, 49152,
         * tied): 134,515,008 parameters as Hugging Face counts them, here written from the architecture */
        const model_cfg_t s = {.layers = 30, .dim = 576, .heads = 9, .seq_len = 2048, .vocab = 49152, .mlp_ratio = 1,
                               .arch = ARCH_LLAMA, .kv_heads = 3, .ffn_dim = 1536, .rope_theta = 1e5f, .norm_eps = 1e-5f};
        const size_t C = 576, KA = 3 * 64, F = 1536;
        const size_t want = 49152 * C + 30 * (C * C + 2 * KA * C + C * C + 3 * F * C + 2 * C) + C;
        tap_ok(param_count_model(&s) == want && want == 134515008, "SmolLM2-135M holds %zu parameters (134,515,008)",
               param_count_model(&s));
        const double T = 2048, mac = 30 * (C * C + 2.0 * KA * C + C * C + 3.0 * F * C) + 49152.0 * C;
        const double flops = 6.0 * mac + 30 * 12.0 * C * T;
        tap_ok(model_flops_per_token(&s) == flops, "SmolLM2-135M: %.6g FLOPs per token (%.6g)", model_flops_per_token(&s),
               flops);
    }

    /* the planner's cost model reads the family: its FLOPs are the model's, and its parameters (one
     * block's, the embedding's and the head's) add up to the table's, tied and untied, and GPT-2's too */
    {
        model_cfg_t cs[3] = {CFG, CFG, {.layers = 3, .dim = 24, .heads = 3, .seq_len = 9, .vocab = 31, .mlp_ratio = 4}};
        cs[1].untied = 1;
        int good = 1;
        for (int k = 0; k < 3; k++) {
            const cm_model_t mo = block_kind_cost_model(&cs[k], 8);
            dev_kind_t dk;
            memset(&dk, 0, sizeof dk);
            dk.peak[DEV_PREC_FP32] = 1e12, dk.mem_bw = 1e11, dk.per_node = 1;
            cm_costs_t c;
            cm_costs_from_device(&c, &mo, &dk, DEV_PREC_FP32, 1, 1);
            const double n = c.block_params * cs[k].layers + c.embed_params + c.head_params;
            good &= cm_model_flops_per_token(&mo) == model_flops_per_token(&cs[k]) && n == (double)param_count_model(&cs[k]);
            if (!good) tap_diag("model %d: cost model %.0f parameters, table %zu", k, n, param_count_model(&cs[k]));
        }
        tap_ok(good, "the cost model's FLOPs and parameters are the model's: llama tied, untied, GPT-2");
    }

    /* the table: no position table, no biases, the stacked q|k|v of the kv heads and gate|up */
    {
        param_table_t t;
        tap_ok(param_table_build(&t, &CFG, 0, CFG.layers, 1, 1, 1, 0) == 0, "llama: parameter table");
        const param_entry_t *qkv = param_table_find(&t, "h.0.attn.qkv.w"), *fc = param_table_find(&t, "h.1.mlp.fc.w");
        tap_ok(!param_table_find(&t, "wpe") && !param_table_find(&t, "lnf.b") && !param_table_find(&t, "h.0.attn.qkv.b") &&
                   qkv && qkv->gshape[0] == 16 + 2 * 8 && qkv->gshape[1] == 16 && fc && fc->gshape[0] == 48 &&
                   t.total == param_count_model(&CFG),
               "llama: no wpe, lnf.b or biases; qkv (32, 16) with 2 kv heads of 4; fc (48, 16) = [gate | up]; %zu floats",
               t.total);
        param_table_free(&t);
    }

    /* tensor parallelism over 2 ranks: every element held once (the norms on both); each rank's q, k,
     * v, gate and up rows are its heads' and its MLP columns' share of each range */
    {
        param_table_t g, sh[2];
        param_table_build(&g, &CFG, 0, CFG.layers, 1, 1, 1, 0);
        param_table_build(&sh[0], &CFG, 0, CFG.layers, 1, 1, 2, 0);
        param_table_build(&sh[1], &CFG, 0, CFG.layers, 1, 1, 2, 1);
        int good = sh[0].count == g.count && sh[1].count == g.count;
        for (int i = 0; i < g.count && good; i++) {
            const param_entry_t *ge = &g.entries[i];
            int *hits = calloc(ge->numel, sizeof(int));
            for (int r = 0; r < 2; r++) {
                const param_entry_t *e = &sh[r].entries[i];
                for (size_t j = 0; j < e->numel; j++) {
                    const size_t k = param_global_index(&sh[r], e, j, r);
                    if (k != (size_t)-1 && k < ge->numel) hits[k]++;
                    else if (k != (size_t)-1) good = 0;
                }
            }
            for (size_t k = 0; k < ge->numel; k++) good &= hits[k] == (sh[0].entries[i].split != SPLIT_NONE ? 1 : 2);
            free(hits);
        }
        /* rank 1's first k row (local row 16/2 = 8) is global row A + KA/2 = 16 + 4; its first up row
         * (local 24/2 = 12) is global 24 + 12 = 36 */
        const param_entry_t *q1 = param_table_find(&sh[1], "h.0.attn.qkv.w"), *f1 = param_table_find(&sh[1], "h.0.mlp.fc.w");
        good &= q1 && param_global_index(&sh[1], q1, 8 * 16, 1) == 20 * 16 && f1 &&
                param_global_index(&sh[1], f1, 12 * 16, 1) == 36 * 16;
        tap_ok(good, "tp=2: every element held once (norms on both); rank 1's k and up rows are its share of each range");
        param_table_free(&g), param_table_free(&sh[0]), param_table_free(&sh[1]);
    }

    test_finite_differences(&CFG, "grouped-query (4 heads, 2 kv heads)");
    model_cfg_t mq = CFG;
    mq.kv_heads = 1;
    test_finite_differences(&mq, "multi-query (4 heads, 1 kv head)");
    model_cfg_t mh = CFG;
    mh.kv_heads = 0;
    test_finite_differences(&mh, "multi-head (kv_heads = heads)");
    model_cfg_t un = CFG;
    un.untied = 1;
    test_finite_differences(&un, "untied head (lm_head.w its own tensor)");
    {   /* untied: the first stage holds wte, the last lm_head.w and no copy of wte */
        param_table_t first, last;
        param_table_build(&first, &un, 0, 1, 1, 0, 1, 0);
        param_table_build(&last, &un, 1, 1, 0, 1, 1, 0);
        const param_entry_t *h = param_table_find(&last, "lm_head.w");
        tap_ok(param_table_find(&first, "wte") && !param_table_find(&first, "lm_head.w") &&
                   !param_table_find(&last, "wte") && h && h->gshape[0] == 23 && h->gshape[1] == 16 &&
                   param_count_model(&un) == param_count_model(&CFG) + 23 * 16,
               "untied: wte on the first stage, lm_head.w (23, 16) and no wte copy on the last; 368 more parameters");
        param_table_free(&first), param_table_free(&last);
    }

    /* Memory policies: the same bits as keeping everything (recompute re-runs the block, selective
     * the attention); the emu backend the cpu one's bits. */
    rig_t keep;
    const int ok_keep = rig_open(&keep, &CFG, BE_CPU, 2, NULL);
    tap_ok(ok_keep, "keep: model, activations and scratch");
    if (ok_keep) {
        test_params_fill(&keep.m.tab, keep.m.params);
        const size_t n = keep.m.tab.total;
        float *g0 = malloc(n * sizeof(float)), *g1 = malloc(n * sizeof(float));
        grads_of(&keep, g0);
        double ss = 0;
        for (size_t i = 0; i < n; i++) ss += (double)g0[i] * g0[i];
        static const struct {
            block_mode_t mode;
            const char *name;
        } modes[] = {{MODE_RECOMPUTE, "recompute"}, {MODE_SELECTIVE, "selective"}};
        for (int k = 0; k < 2; k++) {
            unsigned char md[2] = {(unsigned char)modes[k].mode, (unsigned char)modes[k].mode};
            rig_t r;
            int ok = rig_open(&r, &CFG, BE_CPU, 2, md);
            if (ok) {
                memcpy(r.m.params, keep.m.params, n * sizeof(float));
                grads_of(&r, g1);
                ok = memcmp(g0, g1, n * sizeof(float)) == 0;
                rig_close(&r);
            }
            tap_ok(ok && ss > 0, "%s: gradients bitwise those of keep", modes[k].name);
        }
        rig_t e;
        int ok = rig_open(&e, &CFG, BE_EMU, 2, NULL);
        if (ok) {
            be_to_device(&e.be, e.m.params, keep.m.params, n * sizeof(float));
            grads_of(&e, g1);
            ok = memcmp(g0, g1, n * sizeof(float)) == 0;
            rig_close(&e);
        }
        tap_ok(ok, "emu: gradients bitwise those of the cpu backend");

        /* the split backward (zero-bubble schedules' B then W) against the whole one */
        model_part_t pt = model_whole(&keep.m);
        wstash_t ws;
        ok = wstash_create(&ws, &keep.m, 2, model_wstash_bytes(&keep.m, &pt, 2), &keep.arena) == 0;
        if (ok) {
            model_grads_zero(&keep.m);
            for (int mb = 0; mb < 2; mb++) {
                test_tokens_fill(&keep.a, CFG.vocab, 1, mb * 2);
                model_forward(&keep.m, &keep.a, &keep.s);
                model_backward_b(&keep.m, &pt, &keep.a, &keep.s, 0.25f, NULL, &ws);
                model_backward_w(&keep.m, &pt, &keep.a, &keep.s, NULL, &ws, NULL);
            }
            model_grads_finish(&keep.m);
            ok = memcmp(g0, keep.m.grads, n * sizeof(float)) == 0;
            wstash_destroy(&ws, &keep.arena);
        }
        tap_ok(ok, "split backward (B then W): gradients bitwise those of the whole backward");
        free(g0);
        free(g1);
        rig_close(&keep);
        tap_ok(keep.arena.in_use == 0, "everything returned to the arena");
    }
    MPI_Finalize();
    return tap_done();
}
