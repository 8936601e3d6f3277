/* The KV-cached decode step (decoder.h). Each block mirrors the training forward's block of its
 * family (src/model/block_gpt2.c, block_llama.c) on one row per sequence: the same per-element math,
 * attention replaced by
 * attention_decode_forward over the cache and the products by matmul_decode_forward (a row's bits
 * do not depend on the batch it runs in; BLAS for a few rows costs more in packing than in
 * arithmetic). */
#include "decoder.h"

#include <stdlib.h>
#include <string.h>

#include "block_kind.h"
#include "check.h"
#include "ckpt.h"
#include "kernels.h"

/* Block l's widths (block_kind.h; all 0 for a skip block, the identity) and heads. */
typedef struct {
    bk_widths_t w;
    int NH, KVH;
} dec_widths_t;

static dec_widths_t dec_widths(const model_cfg_t *c, int l)
{
    if (block_is_skip(c, l)) return (dec_widths_t){{c->dim, 0, 0, 0}, 0, 0};
    const block_shape_t sh = {cfg_heads(c, l), cfg_ratio(c, l)};
    return (dec_widths_t){block_widths(c, sh), sh.heads, shape_kv_heads(c, sh)};
}

/* Slot `slot`'s keys (which 0) or values (1) of local block b: T rows of the block's KA (the kv
 * heads' width), in a region of KAmax per row. */
static float *kv_slot(const decoder_t *dec, int b, int slot, int which)
{
    return dec->kv + (((size_t)b * dec->slots + slot) * 2 + which) * (size_t)dec->T * dec->KAmax;
}

static int decoder_alloc(decoder_t *d)
{
    const size_t S = (size_t)d->slots, C = (size_t)d->cfg.dim, T = (size_t)d->T, A = (size_t)d->Amax;
    const size_t KA = (size_t)d->KAmax, RC = (size_t)(d->RCmax ? d->RCmax : 1), hs = C / (size_t)d->cfg.heads;
    const size_t NH = A / hs + 1;
    d->params = MP_CALLOC(d->tab.total ? d->tab.total : 1, sizeof(float));
    d->kv = MP_CALLOC((size_t)(d->nlayers ? d->nlayers : 1) * S * 2 * T * (KA ? KA : 1), sizeof(float));
    d->ln = MP_CALLOC(S * C, sizeof(float));
    d->mean = MP_CALLOC(S, sizeof(float));
    d->rstd = MP_CALLOC(S, sizeof(float));
    d->qkv = MP_CALLOC(S * (A + 2 * KA ? A + 2 * KA : 1), sizeof(float));
    d->atty = MP_CALLOC(S * (A ? A : 1), sizeof(float));
    d->att = MP_CALLOC(S * NH * T, sizeof(float));
    d->fch = MP_CALLOC(S * 2 * RC, sizeof(float)); /* GPT-2's fc output, llama's [gate | up] */
    d->act = MP_CALLOC(S * RC, sizeof(float));
    d->rope = block_kind_of(&d->cfg)->rotary ? MP_CALLOC(T * hs, sizeof(float)) : NULL;
    d->kp = MP_CALLOC(S, sizeof *d->kp);
    d->vp = MP_CALLOC(S, sizeof *d->vp);
    d->pos1 = MP_CALLOC(S, sizeof *d->pos1);
    if (!d->params || !d->kv || !d->ln || !d->mean || !d->rstd || !d->qkv || !d->atty || !d->att || !d->fch || !d->act ||
        !d->kp || !d->vp || !d->pos1 || (block_kind_of(&d->cfg)->rotary && !d->rope))
        return MP_ERR;
    if (d->rope) rope_table_init(d->rope, d->T, (int)hs, d->cfg.rope_theta);
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
        const dec_widths_t w = dec_widths(cfg, l);
        d.Amax = w.w.A > d.Amax ? w.w.A : d.Amax;
        d.KAmax = w.w.KA > d.KAmax ? w.w.KA : d.KAmax;
        d.RCmax = w.w.RC > d.RCmax ? w.w.RC : d.RCmax;
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
    free(d->att), free(d->fch), free(d->act), free(d->rope), free(d->kp), free(d->vp), free(d->pos1), free(d->shape);
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
    for (int b = 0; b < B; b++) /* one row at a time: T = 1 with the position's row of wpe (none: llama) */
        encoder_forward(x + (size_t)b * C, &tok[b], dec->p.wte, dec->p.wpe ? dec->p.wpe + (size_t)pos[b] * C : NULL, 1, 1,
                        C, 0, V);
}

/* Each row's new keys and values into its slot's cache at its position, and the cache rows the
 * attention reads; qkv rows of A + 2·KA. */
static void cache_append(decoder_t *d, int b, dec_widths_t w, const int *slot, const int *pos, int B)
{
    const int A = w.w.A, KA = w.w.KA;
    for (int r = 0; r < B; r++) {
        const float *qkv = d->qkv + (size_t)r * (A + 2 * KA);
        float *k = kv_slot(d, b, slot[r], 0), *v = kv_slot(d, b, slot[r], 1);
        memcpy(k + (size_t)pos[r] * KA, qkv + A, (size_t)KA * sizeof(float));
        memcpy(v + (size_t)pos[r] * KA, qkv + A + KA, (size_t)KA * sizeof(float));
        d->kp[r] = k, d->vp[r] = v;
    }
}

/* GPT-2's block on B rows, in place on x: LN → qkv → cache append → cached attention → proj (+x) →
 * LN → fc → GELU → proj (+x), as block_gpt2.c in training. */
static void decode_gpt2(decoder_t *d, int b, const block_view_t *w, dec_widths_t wd, float *x, const int *slot,
                        const int *pos, int B)
{
    const int C = d->cfg.dim, A = wd.w.A, RC = wd.w.RC;
    layernorm_forward(d->ln, d->mean, d->rstd, x, w->ln1w, w->ln1b, B, C);
    matmul_decode_forward(d->qkv, NULL, d->ln, w->qkvw, w->qkvb, B, C, 3 * A);
    cache_append(d, b, wd, slot, pos, B);
    attention_decode_forward(d->atty, d->att, d->qkv, 3 * A, d->kp, d->vp, pos, B, A, wd.NH, wd.NH, d->T);
    matmul_decode_forward(x, x, d->atty, w->projw, w->projb, B, A, C);
    layernorm_forward(d->ln, d->mean, d->rstd, x, w->ln2w, w->ln2b, B, C);
    matmul_decode_forward(d->fch, NULL, d->ln, w->fcw, w->fcb, B, C, RC);
    gelu_forward(d->fch, d->fch, (size_t)B * RC);
    matmul_decode_forward(x, x, d->fch, w->fcprojw, w->fcprojb, B, RC, C);
}

/* Llama's block on B rows, in place on x: RMSNorm → q|k|v → q and k rotated for each row's position
 * → cache append (the kv heads only) → cached grouped-query attention → o (+x) → RMSNorm →
 * gate|up → silu(gate)·up → down (+x), as block_llama.c in training. */
static void decode_llama(decoder_t *d, int b, const block_view_t *w, dec_widths_t wd, float *x, const int *slot,
                         const int *pos, int B)
{
    const int C = d->cfg.dim, A = wd.w.A, KA = wd.w.KA, RC = wd.w.RC, hs = C / d->cfg.heads;
    rmsnorm_forward(d->ln, d->rstd, x, w->ln1w, B, C, d->cfg.norm_eps);
    matmul_decode_forward(d->qkv, NULL, d->ln, w->qkvw, NULL, B, C, A + 2 * KA);
    for (int r = 0; r < B; r++) /* each row at its own position */
        rope_forward(d->qkv + (size_t)r * (A + 2 * KA), d->rope, pos[r], 1, 1, wd.NH, wd.KVH, hs);
    cache_append(d, b, wd, slot, pos, B);
    attention_decode_forward(d->atty, d->att, d->qkv, A + 2 * KA, d->kp, d->vp, pos, B, A, wd.NH, wd.KVH, d->T);
    matmul_decode_forward(x, x, d->atty, w->projw, NULL, B, A, C);
    rmsnorm_forward(d->ln, d->rstd, x, w->ln2w, B, C, d->cfg.norm_eps);
    matmul_decode_forward(d->fch, NULL, d->ln, w->fcw, NULL, B, C, 2 * RC);
    swiglu_forward(d->act, d->fch, B, RC);
    matmul_decode_forward(x, x, d->act, w->fcprojw, NULL, B, RC, C);
}

/* The final norm of each family, in place on x (B,C). */
static void final_gpt2(decoder_t *d, float *x, int B)
{
    layernorm_forward(x, d->mean, d->rstd, x, d->p.lnfw, d->p.lnfb, B, d->cfg.dim);
}

static void final_llama(decoder_t *d, float *x, int B)
{
    rmsnorm_forward(x, d->rstd, x, d->p.lnfw, B, d->cfg.dim, d->cfg.norm_eps);
}

/* The families' decode steps (model.arch). */
static const struct {
    void (*block)(decoder_t *d, int b, const block_view_t *w, dec_widths_t wd, float *x, const int *slot,
                  const int *pos, int B);
    void (*final_norm)(decoder_t *d, float *x, int B);
} families[ARCH_COUNT] = {[ARCH_GPT2] = {decode_gpt2, final_gpt2}, [ARCH_LLAMA] = {decode_llama, final_llama}};

void decoder_blocks(decoder_t *dec, float *x, const int *slot, const int *pos, int B)
{
    for (int b = 0; b < dec->nlayers; b++) {
        const int l = dec->layer0 + b;
        if (block_is_skip(&dec->cfg, l)) continue; /* the identity */
        families[dec->cfg.arch].block(dec, b, &dec->p.h[b], dec_widths(&dec->cfg, l), x, slot, pos, B);
    }
}

void decoder_head(decoder_t *dec, float *logits, float *x, int B)
{
    const int C = dec->cfg.dim, V = dec->cfg.vocab;
    families[dec->cfg.arch].final_norm(dec, x, B);
    matmul_decode_forward(logits, NULL, x, dec->p.head, NULL, B, C, V);
}

void decoder_step(decoder_t *dec, float *logits, float *x, const int *tok, const int *slot, const int *pos, int B)
{
    decoder_embed(dec, x, tok, pos, B);
    decoder_blocks(dec, x, slot, pos, B);
    decoder_head(dec, logits, x, B);
}
