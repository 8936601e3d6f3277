/* Serving's decoder and sampler (src/serve/): KV-cached decoding against the training forward's
 * full recomputation, batch invariance, the sampler's rules and distribution, completions' limits. */
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "completion.h"
#include "decoder.h"
#include "kernels.h"
#include "model.h"
#include "model_fill.h"
#include "rng.h"
#include "sampler.h"
#include "tap.h"

static int copy_params(decoder_t *dec, const model_t *m)
{
    for (int i = 0; i < dec->tab.count; i++) {
        const param_entry_t *e = &dec->tab.entries[i], *s = param_table_find(&m->tab, e->name);
        if (!s || s->numel != e->numel) return 0;
        memcpy(dec->params + e->offset, m->params + s->offset, e->numel * sizeof(float));
    }
    return 1;
}

static int argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Every position's logits by the cache against lnf · wteᵀ of the training forward over the whole
 * sequence (model_forward: attention_forward's BLAS blocks, a different summation order). */
static void test_cache_vs_full(const char *name, const model_cfg_t *cfg, backend_t *be, arena_t *arena)
{
    const int T = cfg->seq_len, C = cfg->dim, V = cfg->vocab, zero = 0;
    model_t m;
    acts_t a;
    scratch_t s;
    decoder_t dec;
    int ok = model_create(&m, cfg, be, arena, 1, &zero, &cfg->layers, 1, 1, 1, 1, 0) == 0 &&
             acts_create(&a, &m, 1, arena) == 0 && scratch_create(&s, &m, 1, arena) == 0 &&
             decoder_create(&dec, cfg, 0, cfg->layers, 1, 1, 2) == 0;
    if (!tap_ok(ok, "%s: model, activations and a decoder of 2 slots", name)) return;
    test_params_fill(&m.tab, m.params);
    tap_ok(copy_params(&dec, &m), "%s: the decoder's table names every tensor the training model has", name);
    for (int t = 0; t < T; t++) {
        a.inputs[t] = (int)(rng_key(1, 9, 0, (uint64_t)t) % (uint64_t)V);
        a.targets[t] = 0;
    }
    model_forward(&m, &a, &s);
    float *full = malloc((size_t)T * V * sizeof(float)), *step = malloc((size_t)T * V * sizeof(float));
    float *x = malloc((size_t)C * sizeof(float));
    matmul_forward(full, a.lnf, m.p.head, NULL, T, C, V);
    const int slot = 1;
    for (int t = 0; t < T; t++) decoder_step(&dec, step + (size_t)t * V, x, &a.inputs[t], &slot, &t, 1);
    double worst = 0.0, scale = 0.0;
    int same_argmax = 1;
    for (int t = 0; t < T; t++) {
        for (int v = 0; v < V; v++) {
            const double d = fabs((double)full[(size_t)t * V + v] - step[(size_t)t * V + v]);
            worst = d > worst ? d : worst;
            scale = fabs(full[(size_t)t * V + v]) > scale ? fabs(full[(size_t)t * V + v]) : scale;
        }
        same_argmax &= argmax(full + (size_t)t * V, V) == argmax(step + (size_t)t * V, V);
    }
    tap_ok(worst <= 1e-5 * scale, "%s: KV-cached logits of all %d positions equal full recomputation within 1e-5 of "
           "the largest logit (max |diff| %.2e, largest |logit| %.2f)", name, T, worst, scale);
    tap_ok(same_argmax, "%s: the greedy token at every position is the same", name);
    free(full), free(step), free(x);
    decoder_destroy(&dec);
    scratch_destroy(&s, arena);
    acts_destroy(&a, arena);
    model_destroy(&m);
}


/* Three sequences decoded together, joining at different steps and in a shuffled row order, give
 * each sequence the same logits, bit for bit, as decoding it alone (the serving promise). */
static void test_batch_invariance(const model_cfg_t *cfg)
{
    const int T = cfg->seq_len, C = cfg->dim, V = cfg->vocab, S = 3;
    decoder_t dec;
    if (!tap_ok(decoder_create(&dec, cfg, 0, cfg->layers, 1, 1, S) == 0, "batch: a decoder of %d slots", S)) return;
    test_params_fill(&dec.tab, dec.params);
    int tok[3][64];
    for (int q = 0; q < S; q++)
        for (int t = 0; t < T; t++) tok[q][t] = (int)(rng_key(2, 9, (uint64_t)q, (uint64_t)t) % (uint64_t)V);
    float *alone = malloc((size_t)S * T * V * sizeof(float)), *together = malloc((size_t)S * T * V * sizeof(float));
    float *x = malloc((size_t)S * C * sizeof(float)), *lg = malloc((size_t)S * V * sizeof(float));
    const int slot0 = 0;
    for (int q = 0; q < S; q++)
        for (int t = 0; t < T; t++) decoder_step(&dec, alone + ((size_t)q * T + t) * V, x, &tok[q][t], &slot0, &t, 1);
    const int start[3] = {0, 2, 5}; /* sequence q joins at step start[q] */
    for (int step = 0; step < T + 5; step++) {
        int rt[3], rs[3], rp[3], rq[3], B = 0;
        for (int i = 0; i < S; i++) {
            const int q = (step + i) % S, t = step - start[q]; /* the row order rotates every step */
            if (t < 0 || t >= T) continue;
            rt[B] = tok[q][t], rs[B] = 2 - q, rp[B] = t, rq[B] = q, B++;
        }
        if (!B) continue;
        decoder_step(&dec, lg, x, rt, rs, rp, B);
        for (int r = 0; r < B; r++)
            memcpy(together + ((size_t)rq[r] * T + rp[r]) * V, lg + (size_t)r * V, (size_t)V * sizeof(float));
    }
    tap_ok(!memcmp(alone, together, (size_t)S * T * V * sizeof(float)),
           "batch: 3 sequences decoded together (joining at steps 0, 2, 5, rows rotating) equal each decoded alone, "
           "bitwise, at all %d positions", T);
    free(alone), free(together), free(x), free(lg);
    decoder_destroy(&dec);
}

static void test_sampler(void)
{
    enum { V = 8, DRAWS = 20000 };
    const float logits[V] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 0.0f, -3.0f, 1.5f};
    float work[2 * V];
    const sampler_cfg_t greedy = {0.0f, 0, 1}, k1 = {1.0f, 1, 1}, full = {1.0f, 0, 7}, k3 = {0.7f, 3, 7};
    tap_ok(sampler_pick(logits, V, &greedy, 0, 0, work) == 1, "sampler: greedy takes the largest logit, the lower "
           "index of two equal ones (1, not 3)");
    tap_ok(sampler_pick(logits, V, &k1, 5, 9, work) == 1, "sampler: top_k = 1 is greedy at any temperature");
    int same = 1, differ = 0, outside = 0;
    double cnt[V] = {0}, cnt3[V] = {0};
    for (uint64_t pos = 0; pos < DRAWS; pos++) {
        const int a = sampler_pick(logits, V, &full, 3, pos, work);
        same &= a == sampler_pick(logits, V, &full, 3, pos, work);
        differ += a != sampler_pick(logits, V, &full, 4, pos, work);
        cnt[a]++;
        const int b = sampler_pick(logits, V, &k3, 3, pos, work);
        outside += b != 1 && b != 3 && b != 7;
        cnt3[b]++;
    }
    tap_ok(same, "sampler: a draw is a function of (seed, request, position): %d draws repeated", DRAWS);
    tap_ok(differ > DRAWS / 4, "sampler: another request id draws differently (%d of %d differ)", differ, DRAWS);
    double z = 0.0, worst = 0.0, worst3 = 0.0, z3 = 0.0;
    for (int j = 0; j < V; j++) z += exp(logits[j]);
    for (int j = 0; j < V; j++) {
        const double d = fabs(cnt[j] / DRAWS - exp(logits[j]) / z);
        worst = d > worst ? d : worst;
    }
    const int top[3] = {1, 3, 7};
    for (int i = 0; i < 3; i++) z3 += exp(logits[top[i]] / 0.7);
    for (int i = 0; i < 3; i++) {
        const double d = fabs(cnt3[top[i]] / DRAWS - exp(logits[top[i]] / 0.7) / z3);
        worst3 = d > worst3 ? d : worst3;
    }
    /* binomial standard deviation at 20000 draws is at most 0.0036: 0.015 is over 4 of them */
    tap_ok(worst < 0.015, "sampler: temperature 1 frequencies match softmax(logits) (worst |diff| %.4f < 0.015)", worst);
    tap_ok(!outside && worst3 < 0.015, "sampler: top_k = 3 at temperature 0.7 draws only tokens 1, 3, 7, at "
           "softmax(logits / 0.7) of those (worst |diff| %.4f)", worst3);
    const sampler_cfg_t bad_t = {-1.0f, 0, 1}, tiny_t = {1e-6f, 0, 1}, bad_k = {1.0f, V + 1, 1}, nan_t = {NAN, 0, 1};
    tap_ok(sampler_cfg_check(&bad_t, V) && sampler_cfg_check(&tiny_t, V) && sampler_cfg_check(&bad_k, V) &&
               sampler_cfg_check(&nan_t, V) && !sampler_cfg_check(&k3, V),
           "sampler: temperature -1, 1e-6, NaN and top_k > V are refused; 0.7 with top_k 3 is not");
}

/* A completion's limits: the prompt's refusals, and a completion that stops when the context fills. */
static void test_completion(const model_cfg_t *cfg)
{
    const int T = cfg->seq_len;
    int prompt[64], out[64], n = -1;
    for (int i = 0; i < T; i++) prompt[i] = i % cfg->vocab;
    tap_ok(completion_refusal(prompt, 0, T, cfg->vocab) && completion_refusal(prompt, T, T, cfg->vocab) &&
               !completion_refusal(prompt, T - 1, T, cfg->vocab),
           "completion: an empty prompt and one of T = %d tokens are refused; T - 1 tokens are not", T);
    prompt[2] = cfg->vocab;
    tap_ok(completion_refusal(prompt, 3, T, cfg->vocab) != NULL, "completion: a token outside the vocabulary is refused");
    prompt[2] = 2;
    decoder_t dec;
    if (decoder_create(&dec, cfg, 0, cfg->layers, 1, 1, 1) != 0) return;
    test_params_fill(&dec.tab, dec.params);
    const completion_req_t rq = {prompt, T - 5, 40, {0.0f, 0, 1}, 0, 0, -1};
    const int rc = completion_run(&dec, 0, &rq, out, &n);
    tap_ok(rc == 0 && n == 5, "completion: a prompt of T - 5 tokens and max_tokens 40 stops at the context's end "
           "after 5 tokens (got %d)", n);
    decoder_destroy(&dec);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    kernels_set_threads(2);
    arena_t arena;
    arena_init(&arena, 0);
    wait_cfg_t wait = {.yield = 0, .timeout = 0.0};
    backend_t cpu;
    be_init(&cpu, BE_CPU, &arena, 0, 0, 0, &wait);
    const model_cfg_t plain = {.layers = 2, .dim = 32, .heads = 4, .seq_len = 24, .vocab = 61, .mlp_ratio = 4};
    static const block_shape_t shapes[4] = {{4, 4}, {2, 1}, {0, 0}, {1, 2}};
    model_cfg_t blocks = plain;
    blocks.layers = 4, blocks.shape = shapes;
    test_cache_vs_full("plain 2x32", &plain, &cpu, &arena);
    test_cache_vs_full("blocks h4m4,h2m1,skip,h1m2", &blocks, &cpu, &arena);
    test_batch_invariance(&blocks);
    /* llama (issue 47): 4 heads sharing 2 kv heads (the cache holds those), rotary at each position */
    const model_cfg_t llama = {.layers = 2, .dim = 32, .heads = 4, .seq_len = 24, .vocab = 61, .mlp_ratio = 1,
                               .arch = ARCH_LLAMA, .kv_heads = 2, .ffn_dim = 40, .rope_theta = 300.0f, .norm_eps = 1e-5f};
    model_cfg_t mqa = llama;
    mqa.kv_heads = 1;
    test_cache_vs_full("llama 2x32, 2 kv heads", &llama, &cpu, &arena);
    test_cache_vs_full("llama 2x32, 1 kv head", &mqa, &cpu, &arena);
    test_batch_invariance(&llama);
    model_cfg_t untied = llama;
    untied.untied = 1;
    test_cache_vs_full("llama untied head", &untied, &cpu, &arena);
    {
        decoder_t dec;
        tap_ok(decoder_create(&dec, &llama, 0, 2, 1, 1, 3) == 0 && dec.KAmax == 16 && dec.Amax == 32,
               "llama: the cache holds the 2 kv heads' 16 channels a position, not the 4 heads' 32");
        decoder_destroy(&dec);
    }
    test_sampler();
    test_completion(&plain);
    MPI_Finalize();
    return tap_done();
}
