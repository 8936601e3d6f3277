#include "params.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block_kind.h"
#include "check.h"
#include "rng.h"

/* Local shape of a tensor of global shape (g0, g1) split `split` in `parts` over tp ranks. */
static void entry_set(param_entry_t *e, param_kind_t kind, const char *suffix, int layer, int g0, int g1,
                      param_split_t split, int parts, int tp, size_t *offset)
{
    e->cand = -1;
    e->part_rows[0] = g0; /* one part: the whole (block_rows sets a stacked product's) */
    int d0 = split == SPLIT_ROWS ? g0 / tp : g0, d1 = split == SPLIT_COLS ? g1 / tp : g1;
    e->gshape[0] = g0;
    e->gshape[1] = g1 > 0 ? g1 : 0;
    e->split = tp > 1 ? split : SPLIT_NONE;
    e->parts = parts;
    if (tp == 1) d0 = g0, d1 = g1;
    if (layer < 0)
        snprintf(e->name, sizeof e->name, "%s",
                 kind == PK_WTE     ? "wte"
                 : kind == PK_WPE   ? "wpe"
                 : kind == PK_LNF_W ? "lnf.w"
                 : kind == PK_LNF_B ? "lnf.b"
                                    : "lm_head.w");
    else
        snprintf(e->name, sizeof e->name, "h.%d.%s", layer, suffix);
    e->kind = kind;
    e->layer = layer;
    if (layer < 0) e->block = -1;
    e->ndim = d1 > 0 ? 2 : 1;
    e->shape[0] = d0;
    e->shape[1] = d1 > 0 ? d1 : 0;
    e->numel = (size_t)d0 * (size_t)(d1 > 0 ? d1 : 1);
    e->decay = e->ndim == 2;
    e->offset = *offset;
    *offset += e->numel;
}

int param_table_build(param_table_t *tab_p, const model_cfg_t *cfg, int layer0, int nlayers, int has_embed,
                      int has_final, int tp, int tp_rank)
{
    return param_table_build_chunks(tab_p, cfg, 1, &layer0, &nlayers, has_embed, has_final, tp, tp_rank);
}

static int param_block_layer_of(int nchunks, const int *layer0s, const int *nlayers_s, int i)
{
    for (int c = 0; c < nchunks; i -= nlayers_s[c++])
        if (i < nlayers_s[c]) return layer0s[c] + i;
    return -1;
}

int param_block_layer(const param_table_t *tab, int i)
{
    return param_block_layer_of(tab->nchunks, tab->chunk_layer0, tab->chunk_nlayers, i);
}

int param_table_build_chunks(param_table_t *tab_p, const model_cfg_t *cfg, int nchunks, const int *layer0s,
                             const int *nlayers_s, int has_embed, int has_final, int tp, int tp_rank)
{
    const int C = cfg->dim, Vp = (cfg->vocab + tp - 1) / tp * tp;
    const block_kind_t *bk = block_kind_of(cfg);
    if (nchunks < 1 || nchunks > PARAM_MAX_CHUNKS)
        return MP_FAIL("%d model chunks on one rank (1 to %d)", nchunks, PARAM_MAX_CHUNKS);
    int nlayers = 0, nreal = 0;
    for (int c = 0; c < nchunks; c++) nlayers += nlayers_s[c];
    for (int b = 0; b < nlayers; b++) nreal += !block_is_skip(cfg, param_block_layer_of(nchunks, layer0s, nlayers_s, b));
    int ncand_real = 0;
    for (int k = 0; k < cfg->ncand; k++) ncand_real += !shape_is_skip(cfg->cand[k]);
    for (int b = 0; b < nlayers; b++) /* a choice block holds its candidates, not a block of its own */
        if (cfg_is_choice(cfg, param_block_layer_of(nchunks, layer0s, nlayers_s, b)))
            nreal += ncand_real - !block_is_skip(cfg, param_block_layer_of(nchunks, layer0s, nlayers_s, b));
    /* wte: the first stage's, and on the last the tied head's copy (untied: lm_head.w there instead) */
    const int wte = cfg->untied ? has_embed : has_embed || has_final;
    int count = nreal * bk->ntensors + wte + (has_embed && bk->has_wpe ? 1 : 0) +
                (has_final ? 1 + bk->final_norm_bias + cfg->untied : 0);
    param_entry_t *e = MP_CALLOC((size_t)count, sizeof *e);
    if (!e) return MP_ERR;
    size_t off = 0;
    int i = 0;
    /* Order in the buffer follows the forward pass: embeddings, blocks, final LN. Gradient
     * buckets (DP) walk it backwards, so the last layers' gradients are reduced first. */
    if (wte) { /* the last pipeline stage holds a copy for the tied LM head */
        entry_set(&e[i++], PK_WTE, NULL, -1, Vp, C, SPLIT_ROWS, 1, tp, &off);
        e[i - 1].gshape[0] = cfg->vocab; /* the checkpoint holds the real rows */
    }
    if (has_embed && bk->has_wpe) entry_set(&e[i++], PK_WPE, NULL, -1, cfg->seq_len, C, SPLIT_NONE, 1, tp, &off);
    for (int b = 0; b < nlayers; b++) {
        const int l = param_block_layer_of(nchunks, layer0s, nlayers_s, b);
        const int choice = cfg_is_choice(cfg, l);
        for (int k = 0; k < (choice ? cfg->ncand : 1); k++) {
            const block_shape_t sh = choice ? cfg->cand[k] : (block_shape_t){cfg_heads(cfg, l), cfg_ratio(cfg, l)};
            if (shape_is_skip(sh)) continue; /* the identity holds nothing */
            const bk_widths_t w = block_widths(cfg, sh);
            const int e0 = i;
            for (int t = 0; t < bk->ntensors; t++) {
                const bk_tensor_t *x = &bk->tensors[t];
                entry_set(&e[i], x->kind, x->suffix, l, bk_len(x->rows, w), bk_is_matrix(x) ? bk_len(x->cols, w) : 0,
                          x->split, x->parts, tp, &off);
                for (int q = 0; x->parts > 1 && q < x->parts; q++) e[i].part_rows[q] = bk_len(x->part[q], w);
                i++;
            }
            for (int j = e0; j < i; j++) {
                e[j].block = b;
                if (!choice) continue;
                e[j].cand = k; /* canonical name: the candidate after the block (ARCHITECTURE.md §3) */
                snprintf(e[j].name, sizeof e[j].name, "h.%d.c%d.%s", l, k, bk->tensors[j - e0].suffix);
            }
        }
    }
    if (has_final) {
        entry_set(&e[i++], PK_LNF_W, NULL, -1, C, 0, SPLIT_NONE, 1, tp, &off);
        if (bk->final_norm_bias) entry_set(&e[i++], PK_LNF_B, NULL, -1, C, 0, SPLIT_NONE, 1, tp, &off);
        if (cfg->untied) { /* vocab-parallel as wte */
            entry_set(&e[i++], PK_HEAD_W, NULL, -1, Vp, C, SPLIT_ROWS, 1, tp, &off);
            e[i - 1].gshape[0] = cfg->vocab;
        }
    }
    /* A supernet's buffer holds the shared tensors first and the candidates after them, each
     * candidate's tensors together: a device may then hold the shared part and a few candidates
     * only (supernet.resident = host), each moved as one range. */
    size_t shared = off;
    if (cfg->ncand) {
        off = 0;
        for (int pass = 0; pass < 2; pass++)
            for (int j = 0; j < count; j++)
                if ((e[j].cand >= 0) == pass) e[j].offset = off, off += e[j].numel;
        shared = 0;
        for (int j = 0; j < count; j++) shared += e[j].cand < 0 ? e[j].numel : 0;
    }
    tab_p->cfg = *cfg;
    tab_p->tp = tp;
    tab_p->tp_rank = tp_rank;
    tab_p->vocab_pad = Vp;
    tab_p->layer0 = layer0s[0];
    tab_p->nlayers = nlayers;
    tab_p->nchunks = nchunks;
    for (int c = 0; c < nchunks; c++) tab_p->chunk_layer0[c] = layer0s[c], tab_p->chunk_nlayers[c] = nlayers_s[c];
    tab_p->has_embed = has_embed;
    tab_p->has_final = has_final;
    tab_p->count = count;
    tab_p->entries = e;
    tab_p->total = off;
    tab_p->cand_off = shared;
    return MP_OK;
}

void param_cand_range(const param_table_t *tab, int block, int cand, size_t *off_p, size_t *n_p)
{
    size_t lo = (size_t)-1, hi = 0;
    for (int i = 0; i < tab->count; i++) {
        const param_entry_t *e = &tab->entries[i];
        if (e->cand != cand || e->block != block) continue;
        if (e->offset < lo) lo = e->offset;
        if (e->offset + e->numel > hi) hi = e->offset + e->numel;
    }
    *off_p = hi ? lo : 0;
    *n_p = hi ? hi - lo : 0;
}

void param_table_free(param_table_t *tab)
{
    free(tab->entries);
    tab->entries = NULL;
    tab->count = 0;
}

const param_entry_t *param_table_find(const param_table_t *tab, const char *name)
{
    for (int i = 0; i < tab->count; i++)
        if (strcmp(tab->entries[i].name, name) == 0) return &tab->entries[i];
    return NULL;
}

void param_table_range(const param_table_t *tab, int layer, size_t *off_p, size_t *n_p)
{
    size_t lo = (size_t)-1, hi = 0;
    for (int i = 0; i < tab->count; i++) {
        const param_entry_t *e = &tab->entries[i];
        int in = layer >= 0 ? e->layer == layer
                            : layer == PARAM_RANGE_FINAL ? (e->kind == PK_LNF_W || e->kind == PK_LNF_B || e->kind == PK_HEAD_W)
                                                         : (e->kind == PK_WTE || e->kind == PK_WPE);
        if (!in) continue;
        if (e->offset < lo) lo = e->offset;
        if (e->offset + e->numel > hi) hi = e->offset + e->numel;
    }
    *off_p = hi ? lo : 0;
    *n_p = hi ? hi - lo : 0;
}

int param_view_bind(param_view_t *view_p, const param_table_t *tab, float *buf)
{
    return param_view_bind_upto(view_p, tab, buf, tab->total);
}

/* The pointer of a block view that a block tensor's kind names. */
static float **block_field(block_view_t *b, param_kind_t kind)
{
    switch (kind) {
    case PK_LN1_W: return &b->ln1w;
    case PK_LN1_B: return &b->ln1b;
    case PK_QKV_W: return &b->qkvw;
    case PK_QKV_B: return &b->qkvb;
    case PK_PROJ_W: return &b->projw;
    case PK_PROJ_B: return &b->projb;
    case PK_LN2_W: return &b->ln2w;
    case PK_LN2_B: return &b->ln2b;
    case PK_FC_W: return &b->fcw;
    case PK_FC_B: return &b->fcb;
    case PK_FCPROJ_W: return &b->fcprojw;
    default: return &b->fcprojb; /* PK_FCPROJ_B: the model-level kinds never reach here */
    }
}

void param_view_place(param_view_t *view, const param_table_t *tab, int block, int cand, float *at)
{
    size_t c0, n;
    param_cand_range(tab, block, cand, &c0, &n);
    block_view_t *b = &view->hc[(size_t)block * view->ncand + cand];
    memset(b, 0, sizeof *b);
    if (!at) return;
    for (int i = 0; i < tab->count; i++) {
        const param_entry_t *e = &tab->entries[i];
        if (e->cand != cand || e->block != block) continue;
        *block_field(b, e->kind) = at + (e->offset - c0);
    }
}

int param_view_bind_upto(param_view_t *view_p, const param_table_t *tab, float *buf, size_t limit)
{
    param_view_t v = {0};
    v.nlayers = tab->nlayers;
    v.ncand = tab->cfg.ncand;
    v.h = MP_CALLOC((size_t)(tab->nlayers > 0 ? tab->nlayers : 1), sizeof *v.h);
    if (!v.h) return MP_ERR;
    if (v.ncand && !(v.hc = MP_CALLOC((size_t)(tab->nlayers > 0 ? tab->nlayers : 1) * v.ncand, sizeof *v.hc))) {
        free(v.h);
        return MP_ERR;
    }
    for (int i = 0; i < tab->count; i++) {
        const param_entry_t *e = &tab->entries[i];
        if (e->offset >= limit) continue; /* not in this buffer: bound later (param_view_place) */
        float *p = buf + e->offset;
        switch (e->kind) {
        case PK_WTE: v.wte = p; break;
        case PK_WPE: v.wpe = p; break;
        case PK_LNF_W: v.lnfw = p; break;
        case PK_LNF_B: v.lnfb = p; break;
        case PK_HEAD_W: v.head = p; break;
        default:
            *block_field(e->cand >= 0 ? &v.hc[(size_t)e->block * v.ncand + e->cand] : &v.h[e->block], e->kind) = p;
        }
    }
    if (!tab->cfg.untied) v.head = v.wte; /* tied: the head is wte (the last stage's copy) */
    *view_p = v;
    return MP_OK;
}

void param_view_free(param_view_t *view)
{
    free(view->h), free(view->hc);
    view->h = view->hc = NULL;
}

void param_part(const param_table_t *tab, const param_entry_t *e, int p, size_t *g0, size_t *gn, size_t *l0,
                size_t *ln)
{
    const size_t tp = e->split == SPLIT_ROWS ? (size_t)tab->tp : 1;
    if (e->parts <= 1) {
        *g0 = *l0 = 0, *ln = (size_t)e->shape[0], *gn = *ln * tp;
        return;
    }
    *g0 = 0;
    for (int q = 0; q < p; q++) *g0 += (size_t)e->part_rows[q];
    *gn = (size_t)e->part_rows[p], *l0 = *g0 / tp, *ln = *gn / tp;
}

size_t param_global_index(const param_table_t *tab, const param_entry_t *e, size_t local, int tp_rank)
{
    const size_t cols = e->ndim == 2 ? (size_t)e->shape[1] : 1, gcols = e->ndim == 2 ? (size_t)e->gshape[1] : 1;
    size_t i = local / cols, j = local % cols;
    if (e->split == SPLIT_ROWS) { /* the part holding local row i, then this rank's share of it */
        size_t g0 = 0, gn = 0, l0 = 0, ln = 0;
        for (int p = 0; p < (e->parts > 1 ? e->parts : 1); p++) {
            param_part(tab, e, p, &g0, &gn, &l0, &ln);
            if (i < l0 + ln) break;
        }
        i = g0 + (size_t)tp_rank * ln + (i - l0);
    } else if (e->split == SPLIT_COLS) {
        j += (size_t)tp_rank * e->shape[1];
    }
    if (i >= (size_t)e->gshape[0]) return (size_t)-1; /* vocab padding */
    return i * gcols + j;
}

/* How entry e starts: a block's tensor as its kind says; the embeddings N(0, 0.02), lnf's weight ones
 * and its bias zeros. */
static bk_init_t param_init_of(const block_kind_t *bk, const param_entry_t *e)
{
    if (e->layer >= 0) return block_kind_tensor(bk, e->kind)->init;
    return e->kind == PK_LNF_W ? BK_INIT_ONE : e->kind == PK_LNF_B ? BK_INIT_ZERO : BK_INIT_NORMAL;
}

void param_init(const param_table_t *tab, float *buf, unsigned long long seed)
{
    const float std_resid = 0.02f / sqrtf(2.0f * (float)tab->cfg.layers);
    const block_kind_t *bk = block_kind_of(&tab->cfg);
    for (int i = 0; i < tab->count; i++) {
        const param_entry_t *e = &tab->entries[i];
        float *p = buf + e->offset;
        const bk_init_t how = param_init_of(bk, e);
        if (how == BK_INIT_ONE) {
            for (size_t j = 0; j < e->numel; j++) p[j] = 1.0f;
        } else if (how == BK_INIT_ZERO) {
            memset(p, 0, e->numel * sizeof *p);
        } else {
            const float std = how == BK_INIT_RESID ? std_resid : 0.02f;
            uint64_t h = rng_name_hash(e->name);
            for (size_t j = 0; j < e->numel; j++) {
                size_t g = param_global_index(tab, e, j, tab->tp_rank); /* every layout draws the same numbers */
                p[j] = g == (size_t)-1 ? 0.0f : std * rng_normal(seed, h, g);
            }
        }
    }
}

size_t param_count_model(const model_cfg_t *cfg)
{
    const size_t C = (size_t)cfg->dim;
    const block_kind_t *bk = block_kind_of(cfg);
    size_t n = (size_t)cfg->vocab * C * (cfg->untied ? 2 : 1) + (bk->has_wpe ? (size_t)cfg->seq_len * C : 0) +
               (1 + (size_t)bk->final_norm_bias) * C;
    for (int l = 0; l < cfg->layers; l++)
        for (int k = 0; k < (cfg_is_choice(cfg, l) ? cfg->ncand : 1); k++) {
            const block_shape_t sh = cfg_is_choice(cfg, l) ? cfg->cand[k] : (block_shape_t){cfg_heads(cfg, l), cfg_ratio(cfg, l)};
            if (shape_is_skip(sh)) continue;
            n += block_kind_floats(bk, block_widths(cfg, sh));
        }
    return n;
}

size_t param_padded(size_t total, int shards)
{
    size_t q = 16 * (size_t)shards;
    return (total + q - 1) / q * q;
}

void param_blocks_text(const model_cfg_t *cfg, char *buf, size_t n)
{
    size_t o = 0;
    buf[0] = 0;
    for (int l = 0; cfg->shape && l < cfg->layers && o < n; l++) {
        o += block_is_skip(cfg, l) ? (size_t)snprintf(buf + o, n - o, "%sskip", l ? "," : "")
                                   : (size_t)snprintf(buf + o, n - o, "%sh%dm%d", l ? "," : "", cfg_heads(cfg, l),
                                                      cfg_ratio(cfg, l));
    }
}
