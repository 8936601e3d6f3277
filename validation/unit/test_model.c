/* Whole-model checks: the GPT's backward against central finite differences of its forward, the
 * tied embedding's gradient parts, micro-batch accumulation and run-to-run determinism. */
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "kernels.h"
#include "model.h"
#include "model_fill.h"
#include "rng.h"
#include "tap.h"

static const model_cfg_t CFG = {.layers = 2, .dim = 16, .heads = 2, .seq_len = 6, .vocab = 23, .mlp_ratio = 2};

static double loss_of(model_t *m, acts_t *a, scratch_t *s) { return model_forward(m, a, s); }

static void test_finite_differences(model_t *m, acts_t *a, scratch_t *s)
{
    model_grads_zero(m);
    model_forward(m, a, s);
    model_backward(m, a, s, 1.0f);
    model_grads_finish(m);
    test_tokens_fill(a, CFG.vocab, 1, 0); /* backward reused probs in place; refill nothing else needed */
    int all_ok = 1;
    for (int i = 0; i < m->tab.count; i++) {
        const param_entry_t *e = &m->tab.entries[i];
        double worst = 0.0;
        for (int k = 0; k < 4; k++) {
            size_t j = (size_t)(rng_key(3, 11, (uint64_t)i, (uint64_t)k) % e->numel);
            float *p = &m->params[e->offset + j];
            const float save = *p, h = 1e-2f;
            *p = save + h;
            double lp = loss_of(m, a, s);
            *p = save - h;
            double lm = loss_of(m, a, s);
            *p = save;
            double fd = (lp - lm) / (2.0 * h), an = m->grads[e->offset + j];
            double err = fabs(fd - an) / (fabs(fd) + fabs(an) + 1e-2);
            if (err > worst) worst = err;
        }
        int good = worst < 2e-2;
        all_ok &= good;
        if (!good) tap_diag("%s: worst relative error %.3e", e->name, worst);
    }
    tap_ok(all_ok, "backward of every tensor matches central finite differences (4 elements each)");
}

static void grads_of(model_t *m, acts_t *a, scratch_t *s, int mbs, float dloss)
{
    model_grads_zero(m);
    for (int mb = 0; mb < mbs; mb++) {
        test_tokens_fill(a, CFG.vocab, 1, mb * a->B);
        model_forward(m, a, s);
        model_backward(m, a, s, dloss);
    }
    model_grads_finish(m);
}

/* Every element of every canonical tensor is held by exactly one TP rank (replicated tensors: by
 * each), at the index param_global_index says; vocab padding maps nowhere. */
/* train.device=emu: the same model in a guarded device region gives bitwise the gradients of the
 * cpu backend (g_cpu, from grads_of on 2 micro-batches of 2), and a host read of that region is a
 * segmentation fault, as it would be on a GPU. */
static void test_emu(const model_t *cpu_m, const float *g_cpu)
{
    const int zero = 0;
    wait_cfg_t wait = {.yield = 0, .timeout = 0.0};
    arena_t arena;
    arena_init(&arena, 0);
    backend_t emu;
    model_t m;
    acts_t a;
    scratch_t s;
    tap_ok(be_init(&emu, BE_EMU, &arena, (size_t)64 << 20, 0, 0, &wait) == 0 &&
               model_create(&m, &CFG, &emu, &arena, 1, &zero, &CFG.layers, 1, 1, 1, 1, 0) == 0 &&
               acts_create(&a, &m, 2, &arena) == 0 && scratch_create(&s, &m, 2, &arena) == 0,
           "emu: model, activations and scratch in the device region");
    const size_t n = m.alloc * sizeof(float);
    be_to_device(&emu, m.params, cpu_m->params, n);
    grads_of(&m, &a, &s, 2, 0.25f);
    float *g = malloc(n);
    be_to_host(&emu, g, m.grads, n);
    tap_ok(memcmp(g, g_cpu, m.tab.total * sizeof(float)) == 0, "emu: gradients bitwise equal to the cpu backend's");
    free(g);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);
        volatile float x = m.params[0]; /* what host code must never do */
        (void)x;
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    tap_ok(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV, "emu: a host read of the device region faults (status %#x)", st);
    scratch_destroy(&s, &arena);
    acts_destroy(&a, &arena);
    model_destroy(&m);
    tap_ok(arena.in_use == 0 && arena.top == 0, "emu: everything returned to the region");
    be_destroy(&emu);
}

static void test_shard_map(int tp)
{
    model_cfg_t cfg = CFG;
    cfg.vocab = 25; /* not a multiple of tp: padded */
    param_table_t g, s;
    param_table_build(&g, &cfg, 0, cfg.layers, 1, 1, 1, 0);
    int good = 1;
    for (int i = 0; i < g.count && good; i++) {
        const param_entry_t *ge = &g.entries[i];
        int *hits = calloc(ge->numel, sizeof(int));
        int pad = 0, split = 0;
        for (int r = 0; r < tp; r++) {
            param_table_build(&s, &cfg, 0, cfg.layers, 1, 1, tp, r);
            const param_entry_t *e = &s.entries[i];
            good &= strcmp(e->name, ge->name) == 0;
            split = e->split != SPLIT_NONE;
            for (size_t j = 0; j < e->numel; j++) {
                size_t k = param_global_index(&s, e, j, r);
                if (k == (size_t)-1) pad++;
                else if (k < ge->numel) hits[k]++;
                else good = 0;
            }
            param_table_free(&s);
        }
        for (size_t k = 0; k < ge->numel; k++) good &= hits[k] == (split ? 1 : tp);
        if (ge->kind == PK_WTE) good &= pad == (tp - cfg.vocab % tp) % tp * cfg.dim;
        free(hits);
    }
    param_table_free(&g);
    tap_ok(good, "tp=%d: shards cover every canonical element exactly once (replicated tensors on every rank), "
                 "vocab padding maps nowhere", tp);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    kernels_set_threads(2);
    const int zero = 0;
    arena_t arena;
    arena_init(&arena, 0);
    wait_cfg_t wait = {.yield = 0, .timeout = 0.0};
    backend_t cpu;
    be_init(&cpu, BE_CPU, &arena, 0, 0, 0, &wait);
    model_t m;
    acts_t a4, a2;
    scratch_t s4, s2;
    tap_ok(model_create(&m, &CFG, &cpu, &arena, 1, &zero, &CFG.layers, 1, 1, 1, 1, 0) == 0, "model_create");
    tap_ok(m.tab.total == param_count_model(&CFG), "parameter table covers the whole model (%zu floats)", m.tab.total);
    {   /* GPT-2 124M from its block kind's description (block_kind.c): Hugging Face's parameter count
         * (tied head), and the FLOPs of 4·C² attention and 2·4·C² MLP products per block (written
         * here from the architecture, not from the table) */
        const model_cfg_t g = {.layers = 12, .dim = 768, .heads = 12, .seq_len = 1024, .vocab = 50257, .mlp_ratio = 4};
        const double C = 768, want_flops = 6.0 * (12 * (4 * C * C + 8 * C * C) + 50257 * C) + 12 * 12.0 * C * 1024;
        tap_ok(param_count_model(&g) == 124439808, "GPT-2 124M holds 124,439,808 parameters (%zu)", param_count_model(&g));
        tap_ok(model_flops_per_token(&g) == want_flops, "GPT-2 124M: %.6g FLOPs per token (%.6g)", model_flops_per_token(&g),
               want_flops);
    }
    acts_create(&a4, &m, 4, &arena);
    scratch_create(&s4, &m, 4, &arena);
    acts_create(&a2, &m, 2, &arena);
    scratch_create(&s2, &m, 2, &arena);
    test_params_fill(&m.tab, m.params);
    test_tokens_fill(&a4, CFG.vocab, 1, 0);

    test_finite_differences(&m, &a4, &s4);
    test_shard_map(2);
    test_shard_map(4);

    /* The head's part of d wte lives apart until finish: both parts non-zero, and their sum is d wte. */
    model_grads_zero(&m);
    test_tokens_fill(&a4, CFG.vocab, 1, 0);
    model_forward(&m, &a4, &s4);
    model_backward(&m, &a4, &s4, 1.0f);
    size_t vc = (size_t)CFG.vocab * CFG.dim;
    double head = sumsq(m.grad_head, vc), emb = sumsq(m.g.wte, vc);
    float *before = malloc(vc * sizeof(float));
    memcpy(before, m.g.wte, vc * sizeof(float));
    model_grads_finish(&m);
    int sum_ok = 1;
    for (size_t i = 0; i < vc; i++) sum_ok &= m.g.wte[i] == before[i] + m.grad_head[i];
    tap_ok(head > 0 && emb > 0 && sum_ok, "tied embedding: head and embedding parts kept apart, added once");
    free(before);

    /* The head's part recomputed from the head's input alone (the replay of a lost first stage,
     * recovery.log): bitwise over two accumulated micro-batches; another dloss differs (the check
     * can fail). */
    {
        float *hg = calloc(vc, sizeof(float)), *hx = calloc(vc, sizeof(float));
        const size_t nc = (size_t)2 * CFG.seq_len * CFG.dim;
        int rc = MP_OK;
        model_grads_zero(&m);
        for (int mb = 0; mb < 2; mb++) {
            test_tokens_fill(&a2, CFG.vocab, 7, mb * 2);
            model_forward(&m, &a2, &s2);
            float *lnf = malloc(nc * sizeof(float));
            memcpy(lnf, model_head_input(&a2), nc * sizeof(float));
            model_backward(&m, &a2, &s2, 0.25f);
            rc |= model_head_grad(&m, lnf, a2.targets, 2, 0.25f, hg);
            rc |= model_head_grad(&m, lnf, a2.targets, 2, 0.5f, hx);
            free(lnf);
        }
        tap_ok(rc == MP_OK && memcmp(hg, m.grad_head, vc * sizeof(float)) == 0 &&
                   memcmp(hx, m.grad_head, vc * sizeof(float)) != 0,
               "model_head_grad: the tied head's part from its input alone, bitwise over 2 micro-batches");
        free(hg);
        free(hx);
    }

    /* One micro-batch of 4 against two of 2: the same gradients up to float reassociation. */
    size_t n = m.tab.total;
    float *g4 = malloc(n * sizeof(float)), *g2 = malloc(n * sizeof(float));
    grads_of(&m, &a4, &s4, 1, 0.25f);
    memcpy(g4, m.grads, n * sizeof(float));
    grads_of(&m, &a2, &s2, 2, 0.25f);
    memcpy(g2, m.grads, n * sizeof(float));
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) num += (g4[i] - g2[i]) * (double)(g4[i] - g2[i]), den += (double)g4[i] * g4[i];
    tap_ok(sqrt(num / den) < 1e-5, "1x4 and 2x2 micro-batches give the same gradients (rel %.2e)", sqrt(num / den));

    /* Determinism: the same micro-batches twice give the same bits. */
    grads_of(&m, &a2, &s2, 2, 0.25f);
    tap_ok(memcmp(g2, m.grads, n * sizeof(float)) == 0, "two identical backward passes are bitwise equal");
    test_emu(&m, g2);

    /* A memory limit below what the model needs is refused, not overrun. */
    arena_t small;
    arena_init(&small, 1024);
    model_t m2;
    tap_ok(model_create(&m2, &CFG, &cpu, &small, 1, &zero, &CFG.layers, 1, 1, 1, 1, 0) != 0 && small.in_use == 0,
           "memory.device_limit too small: model_create refuses and frees what it took");
    tap_ok(arena.peak >= arena.in_use && arena.peak > 0, "arena peak accounting (%zu bytes)", arena.peak);

    free(g4);
    free(g2);
    scratch_destroy(&s2, &arena);
    acts_destroy(&a2, &arena);
    scratch_destroy(&s4, &arena);
    acts_destroy(&a4, &arena);
    model_destroy(&m);
    tap_ok(arena.in_use == 0 && arena.count == 0, "everything returned to the arena");
    MPI_Finalize();
    return tap_done();
}
