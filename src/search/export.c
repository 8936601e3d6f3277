/* `mindpipe export`: a subnet of a supernet checkpoint as a plain model checkpoint (export.h). One process,
 * no MPI (commands.h): the supernet's whole table read with ckpt_read, no run context, no data. */
#include "export.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ckpt.h"
#include "deck_model.h"
#include "supernet.h"

/* The exported model's deck: the supernet's, its shapes as model.blocks, no supernet. */
static int export_deck(const deck_t *sup, const int *sel, deck_t *d)
{
    *d = *sup;
    const int L = d->model.layers;
    if (L > DECK_LIST_MAX) return MP_FAIL("export: %d layers, more than model.blocks can list (%d)", L, DECK_LIST_MAX);
    for (int l = 0; l < L; l++)
        d->model.shapes.shape[l] = sel[l] >= 0 ? sup->supernet.cands.shape[sel[l]]
                                               : (block_shape_t){d->model.heads, d->model.mlp_ratio};
    d->model.shapes.n = L;
    const model_cfg_t cfg = deck_model_cfg(d, NULL); /* the subnet: model.blocks, no candidates */
    char text[DECK_LIST_MAX * 12];
    param_blocks_text(&cfg, text, sizeof text);
    if (strlen(text) >= DECK_STR)
        return MP_FAIL("export: model.blocks of %d layers is longer than a deck value (%d)", L, DECK_STR - 1);
    snprintf(d->model.blocks, DECK_STR, "%s", text);
    d->supernet.enabled = 0;
    d->supernet.candidates[0] = d->supernet.blocks[0] = 0;
    d->supernet.cands.n = d->supernet.choice.n = 0;
    return MP_OK;
}

/* The subnet's tensors out of the supernet's buffer (whole model in stab's layout) into tab's layout. */
static int export_tensors(const param_table_t *stab, const int *sel, const float *src, const param_table_t *tab,
                          float *dst)
{
    for (int i = 0; i < tab->count; i++) {
        const param_entry_t *e = &tab->entries[i];
        char name[PARAM_NAME_MAX + 16];
        if (e->layer >= 0 && sel[e->layer] >= 0) { /* h.{l}.X is candidate sel[l]'s h.{l}.c{k}.X */
            const char *suffix = strchr(strchr(e->name, '.') + 1, '.') + 1;
            snprintf(name, sizeof name, "h.%d.c%d.%s", e->layer, sel[e->layer], suffix);
        } else {
            snprintf(name, sizeof name, "%s", e->name);
        }
        const param_entry_t *s = param_table_find(stab, name);
        if (!s || s->numel != e->numel) return MP_FAIL("export: the supernet has no tensor %s of %zu floats (a bug)", name, e->numel);
        memcpy(dst + e->offset, src + s->offset, e->numel * sizeof(float));
    }
    return MP_OK;
}

/* The supernet's whole model: its table (every candidate, one process) into stab_p and its weights,
 * read from ckpt, into *buf_p (malloc'd); the checkpoint's step into *step_p, its tokenizer into
 * *tok_p (the exported file carries it on). */
static int export_read(const deck_t *d, const unsigned char *choice, const char *ckpt, param_table_t *stab_p,
                       float **buf_p, long *step_p, tok_ident_t *tok_p)
{
    const model_cfg_t cfg = deck_model_cfg(d, choice);
    if (param_table_build(stab_p, &cfg, 0, cfg.layers, 1, 1, 1, 0) != MP_OK) return MP_ERR;
    float *buf = MP_CALLOC(stab_p->total ? stab_p->total : 1, sizeof *buf);
    ckpt_state_t st;
    if (!buf || ckpt_read(ckpt, stab_p, buf, NULL, NULL, &st) != MP_OK) {
        free(buf);
        return MP_ERR;
    }
    free(st.deck);
    *buf_p = buf, *step_p = st.step, *tok_p = st.tok;
    return MP_OK;
}

int export_main(const run_opts_t *opts, const char *ckpt, const char *subnet, const char *out)
{
    run_t r; /* the deck and the supernet's choice blocks only (supernet_layers, supernet_parse_subnet) */
    memset(&r, 0, sizeof r);
    if (deck_load_model(&r.deck, opts->deck_path, opts->sets, opts->nsets) != MP_OK) return 1;
    int rc = MP_OK;
    long step = 0;
    if (!r.deck.supernet.enabled) rc = MP_FAIL("export needs the supernet's deck (supernet.enabled=1) in -c");
    if (rc == MP_OK) rc = supernet_layers(&r);
    if (rc == MP_OK) rc = supernet_parse_subnet(&r, subnet, supernet_of(&r)->sel);
    deck_t d;
    param_table_t stab = {0}, tab = {0};
    float *buf = NULL, *src = NULL;
    char *text = NULL;
    tok_ident_t tok = {{0}, {0}};
    if (rc == MP_OK) rc = export_read(&r.deck, supernet_of(&r)->choice, ckpt, &stab, &src, &step, &tok);
    if (rc == MP_OK) rc = export_deck(&r.deck, supernet_of(&r)->sel, &d);
    if (rc == MP_OK) {
        const model_cfg_t cfg = deck_model_cfg(&d, NULL);
        rc = param_table_build(&tab, &cfg, 0, cfg.layers, 1, 1, 1, 0);
    }
    if (rc == MP_OK && (!(buf = MP_CALLOC(tab.total ? tab.total : 1, sizeof *buf)) || !(text = deck_to_string(&d))))
        rc = MP_FAIL("out of memory exporting %s", ckpt);
    if (rc == MP_OK) rc = export_tensors(&stab, supernet_of(&r)->sel, src, &tab, buf);
    if (rc == MP_OK) {
        ckpt_state_t st = {.step = step, .adam_t = 0, .seed = r.deck.train.seed, .deck = NULL, .tok = tok};
        snprintf(st.layout, sizeof st.layout, "dp=1 tp=1 pp=1 sp=1");
        rc = ckpt_write(out, &tab, buf, NULL, NULL, &st, text);
    }
    if (rc == MP_OK)
        printf("exported subnet %s of %s (step %ld) to %s: a plain model with\n[model]\nblocks = %s\n", subnet, ckpt, step,
               out, d.model.blocks);
    free(buf), free(src), free(text);
    param_table_free(&tab), param_table_free(&stab);
    supernet_free(&r);
    return rc == MP_OK ? 0 : 1;
}
