/* The KV-cached decode step (decoder.h). Each block mirrors the training forward's block_forward
 * (src/model/model.c) on one row per sequence: the same per-element math, attention replaced by
 * attention_decode_forward over the cache and the products by matmul_decode_forward (a row's bits
 * do not depend on the batch it runs in; BLAS for a few rows costs more in packing than in
 * arithmetic). */
#include "decoder.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ckpt.h"
#include "kernels.h"

/* Block l's attention width, heads and MLP width (0, 0, 0: a skip block, the identity). */
static void block_widths(const model_cfg_t *c, int l, int *A, int *NH, int *RC)
{
    *NH = cfg_heads(c, l);
    *A = cfg_attn_width(c, l);
    *RC = cfg_ratio(c, l) * c->dim;
    if (block_is_skip(c, l)) *A = *RC = 0;
}

static float *kv_slot(const decoder_t *dec, int b, int slot, int which)
{
    return dec->kv + (((size_t)b * dec->slots + slot) * 2 + which) * (size_t)dec->T * dec->Amax;
}

static int decoder_alloc(decoder_t *d)
{
    const size_t S = (size_t)d->slots, C = (size_t)d->cfg.dim, T = (size_t)d->T, A = (size_t)d->Amax;
    const size_t NH = A / (C / (size_t)d->cfg.heads) + 1;
    d->params = MP_CALLOC(d->tab.total ? d->tab.total : 1, sizeof(float));
    d->kv = MP_CALLOC((size_t)(d->nlayers ? d->nlayers : 1) * S * 2 * T * (A ? A : 1), sizeof(float));
    d->ln = MP_CALLOC(S * C, sizeof(float));
    d->mean = MP_CALLOC(S, sizeof(float));
    d->rstd = MP_CALLOC(S, sizeof(float));
    d->qkv = MP_CALLOC(S * 3 * (A ? A : 1), sizeof(float));
    d->atty = MP_CALLOC(S * (A ? A : 1), sizeof(float));
    d->att = MP_CALLOC(S * NH * T, sizeof(float));
    d->fch = MP_CALLOC(S * (size_t)(d->RCmax ? d->RCmax : 1), sizeof(float));
    d->kp = MP_CALLOC(S, sizeof *d->kp);
    d->vp = MP_CALLOC(S, sizeof *d->vp);
    d->pos1 = MP_CALLOC(S, sizeof *d->pos1);
    if (!d->params || !d->kv || !d->ln || !d->mean || !d->rstd || !d->qkv || !d->atty || !d->att || !d->fch || !d->kp ||
        !d->vp || !d->pos1)
        return MP_ERR;
    return MP_OK;
}

int decoder_create(decoder_t *dec_p, const model_cfg_t *cfg, int layer0, int nlayers, int has_embed, int has_final,
                   int slots)
{
    if (cfg->ncand) return MP_FAIL("a supernet is served one subnet at a time: `mindpipe export` it to a plain model first");
    if (slots < 1 || layer0 < 0 || nlayers < 0 || layer0 + nlayers > cfg->layers)
        return MP_FAIL("decoder: blocks [%d, %d) of %d and %d slots (a bug)", layer0, layer0 + nlayers, cfg->layers, slots);
    decoder_t d;
    memset(&d, 0, sizeof d);
    d.cfg = *cfg;
    if (cfg->shape) { /* a copy (the caller's deck may go); NULL stays NULL: checkpoints tell them apart */
        if (!(d.shape = MP_CALLOC((size_t)cfg->layers, sizeof *d.shape))) return MP_ERR;
        memcpy(d.shape, cfg->shape, (size_t)cfg->layers * sizeof *d.shape);
        d.cfg.shape = d.shape;
    }
    d.layer0 = layer0, d.nlayers = nlayers, d.has_embed = has_embed, d.has_final = has_final;
    d.slots = slots, d.T = cfg->seq_len;
    for (int l = layer0; l < layer0 + nlayers; l++) {
        int A, NH, RC;
        block_widths(cfg, l, &A, &NH, &RC);
        d.Amax = A > d.Amax ? A : d.Amax;
        d.RCmax = RC > d.RCmax ? RC : d.RCmax;
    }
    if (param_table_build(&d.tab, &d.cfg, layer0, nlayers, has_embed, has_final, 1, 0) != MP_OK) goto err_free_shape;
    if (decoder_alloc(&d) != MP_OK) goto err_free_bufs;
    if (param_view_bind(&d.p, &d.tab, d.params) != MP_OK) goto err_free_bufs;
    *dec_p = d;
    return MP_OK;
err_free_bufs:
    decoder_destroy(&d); /* frees what was allocated (NULLs are fine) and the table */
    return MP_ERR;
err_free_shape:
    free(d.shape);
    return MP_ERR;
}

void decoder_destroy(decoder_t *d)
{
    param_view_free(&d->p);
    param_table_free(&d->tab);
    free(d->params), free(d->kv), free(d->ln), free(d->mean), free(d->rstd), free(d->qkv), free(d->atty);
    free(d->att), free(d->fch), free(d->kp), free(d->vp), free(d->pos1), free(d->shape);
    memset(d, 0, sizeof *d);
}

int decoder_load(decoder_t *dec, const char *path, long *step_p)
{
    /* The whole model is read and verified (a dataset's checksum covers all of it), then this
     * part's tensors are copied out by name: a stage holds the whole model only while it loads. */
    param_table_t gtab;
    if (param_table_build(&gtab, &dec->cfg, 0, dec->cfg.layers, 1, 1, 1, 0) != MP_OK) return MP_ERR;
    float *all = MP_MALLOC((gtab.total ? gtab.total : 1) * sizeof(float));
    ckpt_state_t st;
    memset(&st, 0, sizeof st);
    int rc = all ? ckpt_read(path, &gtab, all, NULL, NULL, &st) : MP_ERR;
    for (int i = 0; rc == MP_OK && i < dec->tab.count; i++) {
        const param_entry_t *e = &dec->tab.entries[i], *g = param_table_find(&gtab, e->name);
        if (!g || g->numel != e->numel) rc = MP_FAIL("decoder: %s is not in the whole model's table (a bug)", e->name);
        else memcpy(dec->params + e->offset, all + g->offset, e->numel * sizeof(float));
    }
    if (rc == MP_OK && step_p) *step_p = st.step;
    free(st.deck);
    free(all);
    param_table_free(&gtab);
    return rc;
}

void decoder_embed(const decoder_t *dec, float *x, const int *tok, const int *pos, int B)
{
    const int C = dec->cfg.dim, V = dec->cfg.vocab;
    for (int b = 0; b < B; b++) /* one row at a time: T = 1 with the position's row of wpe */
        encoder_forward(x + (size_t)b * C, &tok[b], dec->p.wte, dec->p.wpe + (size_t)pos[b] * C, 1, 1, C, 0, V);
}

/* One block on B rows, in place on x: LN → qkv → cache append → cached attention → proj (+x) →
 * LN → fc → GELU → proj (+x), as block_forward in training. */
static void decoder_block(decoder_t *d, int b, float *x, const int *slot, const int *pos, int B)
{
    const int C = d->cfg.dim, l = d->layer0 + b;
    int A, NH, RC;
    block_widths(&d->cfg, l, &A, &NH, &RC);
    if (block_is_skip(&d->cfg, l)) return; /* the identity */
    const block_view_t *w = &d->p.h[b];
    layernorm_forward(d->ln, d->mean, d->rstd, x, w->ln1w, w->ln1b, B, C);
    matmul_decode_forward(d->qkv, NULL, d->ln, w->qkvw, w->qkvb, B, C, 3 * A);
    for (int r = 0; r < B; r++) {
        const float *qkv = d->qkv + (size_t)r * 3 * A;
        float *k = kv_slot(d, b, slot[r], 0), *v = kv_slot(d, b, slot[r], 1);
        memcpy(k + (size_t)pos[r] * A, qkv + A, (size_t)A * sizeof(float));
        memcpy(v + (size_t)pos[r] * A, qkv + 2 * A, (size_t)A * sizeof(float));
        d->kp[r] = k, d->vp[r] = v;
    }
    attention_decode_forward(d->atty, d->att, d->qkv, 3 * A, d->kp, d->vp, pos, B, A, NH, d->T);
    matmul_decode_forward(x, x, d->atty, w->projw, w->projb, B, A, C);
    layernorm_forward(d->ln, d->mean, d->rstd, x, w->ln2w, w->ln2b, B, C);
    matmul_decode_forward(d->fch, NULL, d->ln, w->fcw, w->fcb, B, C, RC);
    gelu_forward(d->fch, d->fch, (size_t)B * RC);
    matmul_decode_forward(x, x, d->fch, w->fcprojw, w->fcprojb, B, RC, C);
}

void decoder_blocks(decoder_t *dec, float *x, const int *slot, const int *pos, int B)
{
    for (int b = 0; b < dec->nlayers; b++) decoder_block(dec, b, x, slot, pos, B);
}

void decoder_head(decoder_t *dec, float *logits, float *x, int B)
{
    const int C = dec->cfg.dim, V = dec->cfg.vocab;
    layernorm_forward(x, dec->mean, dec->rstd, x, dec->p.lnfw, dec->p.lnfb, B, C);
    matmul_decode_forward(logits, NULL, x, dec->p.wte, NULL, B, C, V);
}

void decoder_step(decoder_t *dec, float *logits, float *x, const int *tok, const int *slot, const int *pos, int B)
{
    decoder_embed(dec, x, tok, pos, B);
    decoder_blocks(dec, x, slot, pos, B);
    decoder_head(dec, logits, x, B);
}
