/* The model a deck describes (src/config/deck_model.c) and the skip tests (params.h): every field of
 * deck_model_cfg from a plain deck, from model.blocks and from a supernet (with and without its
 * choice flags), and which blocks and candidates are skip; the family's fields from a gpt2 and a
 * llama deck, and Hugging Face's GPT-2 format refusing llama's. Decks come from --set alone, but
 * inputs/smollm2-135m.ini, whose parameter count is checked against SmolLM2-135M's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block_kind.h"
#include "check.h"
#include "deck.h"
#include "deck_model.h"
#include "hf_gpt2.h"
#include "params.h"
#include "tap.h"

static int load(deck_t *d, char **sets, int nsets)
{
    return deck_load_model(d, NULL, sets, nsets);
}

/* The sizes every model of d has, whatever its blocks and candidates. */
static int sizes_match(const model_cfg_t *c, const deck_t *d)
{
    return c->layers == d->model.layers && c->dim == d->model.dim && c->heads == d->model.heads &&
           c->seq_len == d->model.seq_len && c->vocab == d->model.vocab && c->mlp_ratio == d->model.mlp_ratio;
}

static void test_plain(void)
{
    char *sets[] = {"model.layers=3", "model.dim=48", "model.heads=6", "model.seq_len=20", "model.vocab=61",
                    "model.mlp_ratio=2"};
    deck_t d;
    if (!tap_ok(load(&d, sets, 6) == MP_OK, "plain deck loads")) return;
    const model_cfg_t c = deck_model_cfg(&d, NULL);
    tap_ok(sizes_match(&c, &d) && c.layers == 3 && c.dim == 48 && c.heads == 6 && c.seq_len == 20 && c.vocab == 61 &&
               c.mlp_ratio == 2,
           "plain: the sizes are [model]'s");
    tap_ok(!c.shape && !c.choice && !c.cand && c.ncand == 0 && c.cand_slots == 0,
           "plain: no block shapes, no candidates, no slots");
    int skips = 0;
    for (int l = 0; l < c.layers; l++) skips += block_is_skip(&c, l);
    tap_ok(skips == 0 && cfg_heads(&c, 1) == 6 && cfg_ratio(&c, 1) == 2, "plain: every block h6m2, none skip");
}

static void test_blocks(void)
{
    char *sets[] = {"model.layers=4", "model.blocks=h4m4,skip,h2m1,h4m1"};
    deck_t d;
    if (!tap_ok(load(&d, sets, 2) == MP_OK, "model.blocks deck loads")) return;
    const model_cfg_t c = deck_model_cfg(&d, NULL);
    tap_ok(sizes_match(&c, &d) && c.shape == d.model.shapes.shape && !c.choice && c.ncand == 0,
           "model.blocks: the shapes are the deck's own array");
    tap_ok(!block_is_skip(&c, 0) && block_is_skip(&c, 1) && !block_is_skip(&c, 2) && !block_is_skip(&c, 3),
           "model.blocks: block 1 alone is skip");
    char text[64];
    param_blocks_text(&c, text, sizeof text);
    tap_ok(!strcmp(text, "h4m4,skip,h2m1,h4m1"), "model.blocks: written back as given (%s)", text);
}

static void test_supernet(void)
{
    char *sets[] = {"model.layers=4", "supernet.enabled=1", "supernet.candidates=h4m4,h2m1,skip", "supernet.blocks=1,2"};
    deck_t d;
    if (!tap_ok(load(&d, sets, 4) == MP_OK, "supernet deck loads")) return;
    const unsigned char choice[4] = {0, 1, 1, 0}; /* supernet.blocks=1,2, as supernet_layers fills it */
    const model_cfg_t s = deck_model_cfg(&d, choice);
    tap_ok(sizes_match(&s, &d) && !s.shape && s.choice == choice && s.cand == d.supernet.cands.shape && s.ncand == 3 &&
               s.cand_slots == 0,
           "supernet: the choice flags given, supernet.candidates' three shapes, no slots");
    tap_ok(!cfg_is_choice(&s, 0) && cfg_is_choice(&s, 1) && cfg_is_choice(&s, 2) && !cfg_is_choice(&s, 3),
           "supernet: blocks 1 and 2 are choice blocks");
    tap_ok(!shape_is_skip(s.cand[0]) && !shape_is_skip(s.cand[1]) && shape_is_skip(s.cand[2]),
           "supernet: candidate 2 alone is skip");
    const model_cfg_t p = deck_model_cfg(&d, NULL);
    tap_ok(sizes_match(&p, &d) && !p.choice && !p.cand && p.ncand == 0,
           "supernet deck without choice flags: a plain model, no candidates");
}

/* The family (model.arch and llama's keys): a gpt2 deck's model has a zero-initialised cfg's family
 * fields (params.h: zero is GPT-2's); a llama deck's has its keys, and the widths its block kind
 * lays out come from them. */
static void test_family(void)
{
    deck_t d;
    char *gpt2[] = {"model.layers=2"};
    if (!tap_ok(load(&d, gpt2, 1) == MP_OK, "gpt2 deck loads")) return;
    const model_cfg_t g = deck_model_cfg(&d, NULL);
    tap_ok(g.arch == ARCH_GPT2 && g.kv_heads == 0 && g.ffn_dim == 0 && g.rope_theta == 0.0f && g.norm_eps == 0.0f &&
               g.untied == 0 && g.mlp_ratio == 4 && block_kind_of(&g) == &block_kind_gpt2,
           "gpt2: arch gpt2, kv_heads 0, ffn_dim 0, no rope_theta or norm_eps, tied: a zero cfg's family");
    char *llama[] = {"model.arch=llama", "model.ffn_dim=344", "model.kv_heads=2", "model.rope_theta=500000",
                     "model.norm_eps=1e-6"};
    if (!tap_ok(load(&d, llama, 5) == MP_OK, "llama deck loads")) return;
    const model_cfg_t c = deck_model_cfg(&d, NULL);
    const bk_widths_t w = block_widths(&c, (block_shape_t){cfg_heads(&c, 0), cfg_ratio(&c, 0)});
    tap_ok(c.arch == ARCH_LLAMA && c.kv_heads == 2 && c.ffn_dim == 344 && c.rope_theta == 500000.0f &&
               c.norm_eps == 1e-6f && c.untied == 0 && c.mlp_ratio == 1 && cfg_kv_heads(&c) == 2 &&
               block_kind_of(&c) == &block_kind_llama,
           "llama: arch, kv_heads 2, ffn_dim 344, rope_theta 500000, norm_eps 1e-6, tied, mlp_ratio 1");
    tap_ok(w.C == 128 && w.A == 128 && w.KA == 64 && w.RC == 344,
           "llama: its block's widths C 128, A 128, KA 64 (2 of 4 heads), RC 344 (%d %d %d %d)", w.C, w.A, w.KA, w.RC);
    /* Hugging Face's GPT-2 format (export, --init-from) takes the gpt2 deck's model, refuses llama's */
    char why[300] = "";
    const int fits = hf_gpt2_fits(&g, why, sizeof why), no = hf_gpt2_fits(&c, why, sizeof why);
    tap_ok(fits == MP_OK && no == MP_ERR && strstr(why, "model.arch=llama is no GPT2LMHeadModel") &&
               strstr(why, "LlamaForCausalLM"),
           "hf_gpt2_fits: gpt2's model fits, llama's is refused naming model.arch and its own format (%s)", why);
}

/* inputs/smollm2-135m.ini is SmolLM2-135M's shape: 134,515,008 parameters, as its model.safetensors
 * holds (tied: no lm_head.weight). Worked out from the shapes: embedding 49152 × 576 = 28,311,552;
 * a block q 576·576, k and v 192·576 each, o 576·576, gate, up and down 3·1536·576, two norms of 576:
 * 3,540,096, × 30 = 106,202,880; the final norm 576. */
static void test_smollm2(void)
{
    const char *src = getenv("MP_SRCDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/inputs/smollm2-135m.ini", src && src[0] ? src : MP_SRCDIR_DEFAULT);
    deck_t d;
    if (!tap_ok(deck_load_model(&d, path, NULL, 0) == MP_OK, "%s loads", path)) return;
    const model_cfg_t c = deck_model_cfg(&d, NULL);
    const size_t n = param_count_model(&c), block = 576 * 576 * 2 + 192 * 576 * 2 + 3 * 1536 * 576 + 2 * 576;
    tap_ok(c.arch == ARCH_LLAMA && c.layers == 30 && c.dim == 576 && c.heads == 9 && cfg_kv_heads(&c) == 3 &&
               c.ffn_dim == 1536 && c.vocab == 49152 && !c.untied && c.rope_theta == 100000.0f && c.norm_eps == 1e-5f,
           "smollm2-135m: llama, 30 layers, C 576, 9 heads, 3 kv heads, ffn 1536, V 49152, tied, theta 1e5, eps 1e-5");
    tap_ok(n == 134515008 && n == 49152 * 576 + 30 * block + 576,
           "smollm2-135m: %zu parameters, SmolLM2-135M's 134,515,008", n);
}

int main(void)
{
    test_plain();
    test_blocks();
    test_supernet();
    test_family();
    test_smollm2();
    return tap_done();
}
