/* The model a deck describes (src/config/deck_model.c) and the skip tests (params.h): every field of
 * deck_model_cfg from a plain deck, from model.blocks and from a supernet (with and without its
 * choice flags), and which blocks and candidates are skip. Decks come from --set alone. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "deck.h"
#include "deck_model.h"
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

int main(void)
{
    test_plain();
    test_blocks();
    test_supernet();
    return tap_done();
}
