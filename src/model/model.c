/* GPT forward and backward on one rank (see model.h). Backward calls the layers in exact reverse
 * order of forward; the residual-stream gradient s->dres flows through every block in place. */
#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "backend.h"
#include "block_kind.h"
#include "attention_fused_layout.h"
#include "block_ops.h"
#include "kernels.h"
#include "perf.h"

int model_create(model_t *m_p, const model_cfg_t *cfg, backend_t *be, arena_t *arena, int nchunks,
                 const int *layer0s, const int *nlayers_s, int has_embed, int has_final, int shards, int tp, int tp_rank)
{
    model_t m;
    memset(&m, 0, sizeof m);
    m.cfg = *cfg;
    m.be = be;
    m.arena = arena;
    m.tp_comm = MPI_COMM_NULL;
    if (param_table_build_chunks(&m.tab, cfg, nchunks, layer0s, nlayers_s, has_embed, has_final, tp, tp_rank) != MP_OK)
        return MP_ERR;
    size_t dev = m.tab.total;
    if (cfg->cand_slots > 0 && cfg->ncand) { /* shared tensors, then each choice block's slots */
        const size_t nk = (size_t)(m.tab.nlayers > 0 ? m.tab.nlayers : 1) * cfg->ncand;
        m.placed = MP_MALLOC(nk * sizeof *m.placed), m.cand0 = MP_MALLOC(nk * sizeof *m.cand0);
        if (!m.placed || !m.cand0) {
            free(m.placed), free(m.cand0);
            param_table_free(&m.tab);
            return MP_FAIL("out of memory for the candidates' slot map");
        }
        for (size_t i = 0; i < nk; i++) m.placed[i] = -1, m.cand0[i] = 0;
        size_t widest = 0;
        for (int b = 0; b < m.tab.nlayers; b++) {
            if (!cfg_is_choice(cfg, param_block_layer(&m.tab, b))) continue;
            m.nchoice++;
            for (int k = 0; k < cfg->ncand; k++) {
                size_t c0, cn;
                param_cand_range(&m.tab, b, k, &c0, &cn);
                m.cand0[(size_t)b * cfg->ncand + k] = c0;
                if (cn > widest) widest = cn;
            }
        }
        m.slots = cfg->cand_slots;
        m.slot0 = param_padded(m.tab.cand_off, 1);
        m.slot_stride = param_padded(widest + 15, 1); /* + 15: a candidate keeps its offset's alignment */
        dev = m.slot0 + (size_t)m.nchoice * m.slots * m.slot_stride;
    }
    const size_t n = param_padded(dev, shards), nmv = n / (size_t)shards;
    const size_t vc = (size_t)(m.tab.vocab_pad / tp) * cfg->dim;
    m.alloc = n;
    m.mv_len = nmv;
    if (!(m.params = arena_floats(arena, n, "parameters"))) goto err_free_table;
    if (!(m.grads = arena_floats(arena, n, "gradients"))) goto err_free_params;
    if (!(m.m = arena_floats(arena, nmv, "AdamW first moments"))) goto err_free_grads;
    if (!(m.v = arena_floats(arena, nmv, "AdamW second moments"))) goto err_free_m;
    /* the tied head's part of d wte apart (model.h); an untied head's gradient is its own tensor's */
    if (has_final && !cfg->untied && !(m.grad_head = arena_floats(arena, vc, "LM head gradient"))) goto err_free_v;
    const size_t bound = m.slots ? m.tab.cand_off : m.tab.total;
    if (param_view_bind_upto(&m.p, &m.tab, m.params, bound) != MP_OK) goto err_free_head;
    if (param_view_bind_upto(&m.g, &m.tab, m.grads, bound) != MP_OK) goto err_free_pview;
    if (cfg->ncand) { /* candidate 0 of every choice block until the first subnet is selected (with
                         slots: until a subnet's candidates are placed and selected) */
        if (!(m.sel = MP_CALLOC((size_t)cfg->layers, sizeof *m.sel))) {
            param_view_free(&m.g);
            goto err_free_pview;
        }
        for (int l = 0; l < cfg->layers; l++) m.sel[l] = cfg_is_choice(cfg, l) ? 0 : -1;
        if (!m.slots) model_select(&m, m.sel);
    }
    *m_p = m;
    return MP_OK;
err_free_pview:
    param_view_free(&m.p);
err_free_head:
    if (m.grad_head) arena_free(arena, m.grad_head, vc * sizeof(float));
err_free_v:
    arena_free(arena, m.v, nmv * sizeof(float));
err_free_m:
    arena_free(arena, m.m, nmv * sizeof(float));
err_free_grads:
    arena_free(arena, m.grads, n * sizeof(float));
err_free_params:
    arena_free(arena, m.params, n * sizeof(float));
err_free_table:
    free(m.placed), free(m.cand0);
    param_table_free(&m.tab);
    return MP_ERR;
}

static const block_ops_t *const families[ARCH_COUNT] = {[ARCH_GPT2] = &block_ops_gpt2, [ARCH_LLAMA] = &block_ops_llama};

const block_ops_t *model_ops(const model_t *m) { return families[m->cfg.arch]; }

static widths_t widths_of(const model_t *m, block_shape_t sh) { return model_widths_of(m, sh); }
static widths_t tp_widths(const model_t *m, int layer) { return model_tp_widths(m, layer); }
static int is_skip(const model_t *m, int layer) { return model_is_skip(m, layer); }

static int imax(int a, int b) { return a > b ? a : b; }

static widths_t widths_max(widths_t a, widths_t b)
{
    return (widths_t){imax(a.Cl, b.Cl), imax(a.NH, b.NH), imax(a.RC, b.RC), imax(a.KCl, b.KCl), imax(a.KVH, b.KVH)};
}

/* The widest layer l can run: what its saved tensors are sized for (every candidate fits). */
static widths_t tp_widths_cap(const model_t *m, int layer)
{
    if (!cfg_is_choice(&m->cfg, layer)) return tp_widths(m, layer);
    widths_t w = {0, 0, 0, 0, 0};
    for (int k = 0; k < m->cfg.ncand; k++) w = widths_max(w, widths_of(m, m->cfg.cand[k]));
    return w;
}

/* The widest of every block the model has: what the backward scratch and the workspace serve. */
static widths_t tp_widths_max(const model_t *m)
{
    widths_t w = {0, 0, 0, 0, 0};
    for (int l = 0; l < m->cfg.layers; l++) w = widths_max(w, tp_widths_cap(m, l));
    return w;
}

void model_select(model_t *m, const int *sel)
{
    if (!m->sel) return;
    if (sel != m->sel) memcpy(m->sel, sel, (size_t)m->cfg.layers * sizeof *sel);
    for (int b = 0; b < m->tab.nlayers; b++) {
        const int l = param_block_layer(&m->tab, b);
        if (!cfg_is_choice(&m->cfg, l)) continue;
        m->p.h[b] = m->p.hc[(size_t)b * m->p.ncand + m->sel[l]];
        m->g.h[b] = m->g.hc[(size_t)b * m->g.ncand + m->sel[l]];
        if (!m->p.h[b].ln1w && !is_skip(m, l))
            MP_ABORT("layer %d: candidate %d selected while it is not on the device (a slot bug)", l, m->sel[l]);
    }
}

static int choice_index(const model_t *m, int b)
{
    int cb = 0;
    for (int i = 0; i < b; i++) cb += cfg_is_choice(&m->cfg, param_block_layer(&m->tab, i));
    return cb;
}

size_t model_slot_at(const model_t *m, int b, int k, int s)
{
    const size_t c0 = m->cand0[(size_t)b * m->cfg.ncand + k];
    return m->slot0 + ((size_t)choice_index(m, b) * m->slots + (size_t)s) * m->slot_stride + c0 % 16;
}

void model_place(model_t *m, int b, int k, int s)
{
    m->placed[(size_t)b * m->cfg.ncand + k] = s;
    param_view_place(&m->p, &m->tab, b, k, s < 0 ? NULL : m->params + model_slot_at(m, b, k, s));
    param_view_place(&m->g, &m->tab, b, k, s < 0 ? NULL : m->grads + model_slot_at(m, b, k, s));
}

size_t model_entry_at(const model_t *m, const param_entry_t *e)
{
    if (e->cand < 0 || !m->slots) return e->offset;
    const size_t i = (size_t)e->block * m->cfg.ncand + e->cand;
    if (m->placed[i] < 0)
        MP_ABORT("%s is needed while its candidate is not on the device (a slot bug)", e->name);
    return model_slot_at(m, e->block, e->cand, m->placed[i]) + (e->offset - m->cand0[i]);
}

/* The model's local block b (of m->tab) as a layer index. */
static int layer_of(const model_t *m, int b) { return param_block_layer(&m->tab, b); }

/* Local vocabulary rows of this TP rank. */
static int tp_V(const model_t *m) { return m->tab.vocab_pad / m->tab.tp; }
static int tp_v0(const model_t *m) { return m->tab.tp_rank * tp_V(m); }
static size_t model_head_floats(const model_t *m) { return (size_t)tp_V(m) * m->cfg.dim; }
/* Where the head's product adds its weight gradient: the tied head's part of d wte apart (grad_head),
 * or an untied head's own gradient. */
static float *head_grad(const model_t *m) { return m->grad_head ? m->grad_head : m->g.head; }

static void tp_reduce(const model_t *m, float *buf, size_t n, MPI_Op op) { model_tp_reduce(m, buf, n, op); }


int model_versions_create(model_t *m)
{
    if (!(m->params_old = arena_floats(m->arena, m->alloc, "2BW previous weight version"))) return MP_ERR;
    be_copy(m->be, m->params_old, m->params, m->alloc * sizeof(float));
    m->p_new = m->p;
    if (param_view_bind(&m->p_old, &m->tab, m->params_old) != MP_OK) {
        arena_free(m->arena, m->params_old, m->alloc * sizeof(float));
        m->params_old = NULL;
        return MP_ERR;
    }
    return MP_OK;
}

void model_versions_destroy(model_t *m)
{
    if (!m->params_old) return;
    m->p = m->p_new;
    param_view_free(&m->p_old);
    arena_free(m->arena, m->params_old, m->alloc * sizeof(float));
    m->params_old = NULL;
}

void model_use_version(model_t *m, int old)
{
    if (m->params_old) m->p = old ? m->p_old : m->p_new;
}

void model_versions_advance(model_t *m)
{
    if (m->params_old) be_copy(m->be, m->params_old, m->params, m->alloc * sizeof(float));
}

void model_destroy(model_t *m)
{
    model_versions_destroy(m);
    free(m->mode), free(m->sel), free(m->placed), free(m->cand0);
    m->mode = NULL, m->sel = NULL, m->placed = NULL, m->cand0 = NULL;
    size_t n = m->alloc * sizeof(float), nmv = m->mv_len * sizeof(float);
    param_view_free(&m->g);
    param_view_free(&m->p);
    if (m->grad_head) arena_free(m->arena, m->grad_head, model_head_floats(m) * sizeof(float));
    arena_free(m->arena, m->v, nmv);
    arena_free(m->arena, m->m, nmv);
    arena_free(m->arena, m->grads, n);
    arena_free(m->arena, m->params, n);
    param_table_free(&m->tab);
}

/* Carves consecutive views out of one buffer; with buf == NULL it only counts. */
static float *carve(float *buf, size_t *off, size_t n)
{
    float *p = buf ? buf + *off : NULL;
    *off += (n + 15) / 16 * 16; /* keep every view 64-byte aligned */
    return p;
}

/* A block's saved tensors in three groups that a mode places independently: its output res3, the
 * attention probabilities, and the rest. Carving with buf == NULL only counts. */
static void carve_res3(const model_t *m, int B, block_acts_t *h, float *buf, size_t *off)
{
    h->res3 = carve(buf, off, (size_t)B * m->cfg.seq_len * m->cfg.dim);
}

/* Floats of att (grad 0) or of the backward's datt (grad 1) for a block of widths w: what the
 * attention that runs reads (model_att_fused), the log-sum-exps' layout on the fused path, else the
 * (B,NH,T,T) probabilities. */
static size_t att_floats(const model_t *m, int B, widths_t w, int grad)
{
    const int T = m->cfg.seq_len;
    if (!w.NH) return 0;
    if (!model_att_fused(m, B, w)) return mp_att_probs_floats(B, T, w.NH);
    return grad ? mp_att_fused_dfloats(B, T, w.NH) : mp_att_fused_floats(B, T, w.Cl, w.NH);
}

/* The most layer l can need: a choice block's largest candidate (a narrower one may take the other
 * path, so each is asked). */
static size_t att_floats_layer(const model_t *m, int B, int layer, int grad)
{
    if (!cfg_is_choice(&m->cfg, layer)) return att_floats(m, B, tp_widths(m, layer), grad);
    size_t n = 0;
    for (int k = 0; k < m->cfg.ncand; k++) {
        const size_t nk = att_floats(m, B, widths_of(m, m->cfg.cand[k]), grad);
        n = nk > n ? nk : n;
    }
    return n;
}

/* The most any block of the model needs: what the backward scratch and the workspace serve. */
static size_t att_floats_max(const model_t *m, int B, int grad)
{
    size_t n = 0;
    for (int l = 0; l < m->cfg.layers; l++) {
        const size_t nl = att_floats_layer(m, B, l, grad);
        n = nl > n ? nl : n;
    }
    return n;
}

static void carve_att(block_acts_t *h, size_t n, float *buf, size_t *off) { h->att = n ? carve(buf, off, n) : NULL; }

/* A skip block saves nothing but its output. */
static void carve_rest(const model_t *m, int B, widths_t w, block_acts_t *h, float *buf, size_t *off)
{
    const size_t C = m->cfg.dim, N = (size_t)B * m->cfg.seq_len, Cl = w.Cl, RC = w.RC;
    const block_ops_t *ops = model_ops(m);
    float *res3 = h->res3, *att = h->att;
    memset(h, 0, sizeof *h);
    h->res3 = res3, h->att = att;
    if (!w.NH) return;
    h->ln1 = carve(buf, off, N * C);
    if (ops->norm_mean) h->ln1_mean = carve(buf, off, N);
    h->ln1_rstd = carve(buf, off, N);
    h->qkv = carve(buf, off, N * (Cl + 2 * (size_t)w.KCl));
    h->atty = carve(buf, off, N * Cl);
    h->res2 = carve(buf, off, N * C);
    h->ln2 = carve(buf, off, N * C);
    if (ops->norm_mean) h->ln2_mean = carve(buf, off, N);
    h->ln2_rstd = carve(buf, off, N);
    h->mlp_pre = carve(buf, off, N * ops->mlp_pre * RC);
    h->mlp_act = carve(buf, off, N * RC);
}

/* Where each group of a block in `mode` goes: the stash (resident), the movable region, or the
 * workspace (not saved). */
enum { AT_STASH, AT_MOVABLE, AT_WORK };
static int place_att(block_mode_t mode)
{
    return mode == MODE_KEEP ? AT_STASH : mode == MODE_OFFLOAD || mode == MODE_BALANCE ? AT_MOVABLE : AT_WORK;
}
static int place_rest(block_mode_t mode)
{
    return mode == MODE_KEEP || mode == MODE_SELECTIVE ? AT_STASH
           : mode == MODE_RECOMPUTE                    ? AT_WORK
                                                       : AT_MOVABLE;
}

/* Floats of layer l's groups in the stash and in the movable region under `mode`. */
static void block_floats(const model_t *m, int B, int l, block_mode_t mode, size_t *res, size_t *mov)
{
    block_acts_t h;
    const widths_t w = tp_widths_cap(m, l);
    size_t r = 0, v = 0, tmp = 0;
    carve_res3(m, B, &h, NULL, &r);
    carve_att(&h, att_floats_layer(m, B, l, 0), NULL,
              place_att(mode) == AT_STASH ? &r : place_att(mode) == AT_MOVABLE ? &v : &tmp);
    carve_rest(m, B, w, &h, NULL, place_rest(mode) == AT_STASH ? &r : place_rest(mode) == AT_MOVABLE ? &v : &tmp);
    *res = r, *mov = v;
}

block_mode_t model_block_mode(const model_t *m, int local_block)
{
    return m->mode ? (block_mode_t)m->mode[local_block] : MODE_KEEP;
}

int model_set_modes(model_t *m, const unsigned char *modes)
{
    free(m->mode);
    m->mode = NULL;
    if (!modes) return MP_OK;
    if (!(m->mode = MP_CALLOC((size_t)(m->tab.nlayers > 0 ? m->tab.nlayers : 1), 1))) return MP_ERR;
    memcpy(m->mode, modes, (size_t)m->tab.nlayers);
    return MP_OK;
}

/* The head's tensors after the blocks' positions (buf == NULL: only counts). */
static void carve_head(acts_t *a, const model_t *m, float *buf, size_t *off)
{
    const size_t C = m->cfg.dim, N = (size_t)a->B * m->cfg.seq_len, V = tp_V(m);
    a->lnf = carve(buf, off, N * C);
    a->lnf_mean = model_ops(m)->norm_mean ? carve(buf, off, N) : NULL;
    a->lnf_rstd = carve(buf, off, N);
    a->probs = carve(buf, off, N * V);
    a->losses = carve(buf, off, N);
}

/* The extents of block positions 0..a->nblocks-1: position i serves block i of every chunk that
 * has one (and of the whole model when a holds all its blocks), so it is as large as the largest
 * of their modes needs. Returns the stash's floats. */
static size_t acts_positions(acts_t *a, const model_t *m)
{
    const size_t C = m->cfg.dim, N = (size_t)a->B * m->cfg.seq_len;
    size_t off = 0, mov = 0;
    carve(NULL, &off, N * C); /* encoded: the embedding's output, or the activation a stage receives */
    const int whole = a->nblocks == m->tab.nlayers;
    for (int i = 0; i < a->nblocks; i++) {
        size_t res_i = 0, mov_i = 0;
        for (int c = 0; c <= m->tab.nchunks; c++) {
            const model_part_t pt = c < m->tab.nchunks ? model_chunk(m, c) : model_whole(m);
            if (i >= pt.n || (c == m->tab.nchunks && !whole)) continue;
            size_t r, v;
            block_floats(m, a->B, layer_of(m, pt.b0 + i), model_block_mode(m, pt.b0 + i), &r, &v);
            if (r > res_i) res_i = r;
            if (v > mov_i) mov_i = v;
        }
        a->pos_res[i] = off, a->pos_mov[i] = mov;
        off += res_i, mov += mov_i;
    }
    a->head_off = off;
    if (a->final) carve_head(a, m, NULL, &off);
    a->mov_floats = mov;
    return off;
}

void acts_bind(acts_t *a, const model_t *m, const model_part_t *pt, float *mov, const scratch_t *s)
{
    const size_t C = m->cfg.dim, N = (size_t)a->B * m->cfg.seq_len;
    size_t off = 0;
    a->encoded = carve(a->buf, &off, N * C);
    a->mov = mov;
    for (int i = 0; i < pt->n; i++) {
        const block_mode_t mode = model_block_mode(m, pt->b0 + i);
        const widths_t w = tp_widths(m, layer_of(m, pt->b0 + i));
        block_acts_t *h = &a->h[i];
        size_t r = a->pos_res[i], v = a->pos_mov[i];
        const int pa = place_att(mode), pr = place_rest(mode);
        if ((pa == AT_MOVABLE || pr == AT_MOVABLE) && !mov)
            MP_ABORT("block %d's stash is movable but no movable region is bound (a bug)", pt->b0 + i);
        if ((pa == AT_WORK || pr == AT_WORK) && (!s || !s->work.att))
            MP_ABORT("block %d recomputes but the stage has no recompute workspace (a bug)", pt->b0 + i);
        carve_res3(m, a->B, h, a->buf, &r);
        if (pa == AT_WORK) h->att = s->work.att;
        else carve_att(h, att_floats(m, a->B, w, 0), pa == AT_STASH ? a->buf : mov, pa == AT_STASH ? &r : &v);
        if (pr == AT_WORK) {
            float *res3 = h->res3, *att = h->att;
            *h = s->work;
            h->res3 = res3, h->att = att;
        } else {
            carve_rest(m, a->B, w, h, pr == AT_STASH ? a->buf : mov, pr == AT_STASH ? &r : &v);
        }
    }
    off = a->head_off;
    if (a->final) carve_head(a, m, a->buf, &off);
}

size_t acts_part_bytes(const model_t *m, int B, int nblocks, int final, size_t *mov_bytes)
{
    acts_t a;
    memset(&a, 0, sizeof a);
    a.B = B, a.T = m->cfg.seq_len, a.nblocks = nblocks, a.final = final;
    const size_t np = (size_t)(nblocks > 0 ? nblocks : 1);
    a.pos_res = MP_CALLOC(np, sizeof *a.pos_res);
    a.pos_mov = MP_CALLOC(np, sizeof *a.pos_mov);
    if (!a.pos_res || !a.pos_mov) MP_ABORT("out of memory planning the activations");
    const size_t nf = acts_positions(&a, m);
    free(a.pos_res), free(a.pos_mov);
    *mov_bytes = a.mov_floats * sizeof(float);
    return nf * sizeof(float) + 2 * (size_t)B * a.T * sizeof(int);
}

int acts_create(acts_t *a_p, const model_t *m, int B, arena_t *arena)
{
    return acts_create_part(a_p, m, B, m->tab.nlayers, m->tab.has_final, arena);
}

int acts_create_part(acts_t *a_p, const model_t *m, int B, int nblocks, int final, arena_t *arena)
{
    acts_t a;
    memset(&a, 0, sizeof a);
    a.B = B;
    a.T = m->cfg.seq_len;
    a.nblocks = nblocks;
    a.final = final;
    const size_t np = (size_t)(nblocks > 0 ? nblocks : 1);
    a.h = MP_CALLOC(np, sizeof *a.h);
    a.pos_res = MP_CALLOC(np, sizeof *a.pos_res);
    a.pos_mov = MP_CALLOC(np, sizeof *a.pos_mov);
    if (!a.h || !a.pos_res || !a.pos_mov) goto err_free_h;
    a.nfloats = acts_positions(&a, m);
    const size_t ntok = (size_t)B * a.T;
    if (!(a.buf = arena_floats(arena, a.nfloats, "activations"))) goto err_free_h;
    if (!(a.ibuf = arena_ints(arena, 2 * ntok, "token buffers"))) goto err_free_buf;
    size_t off = 0;
    a.encoded = carve(a.buf, &off, (size_t)B * a.T * m->cfg.dim);
    off = a.head_off;
    if (final) carve_head(&a, m, a.buf, &off);
    a.d_inputs = a.ibuf;
    a.d_targets = a.ibuf + ntok;
    a.inputs = a.d_inputs, a.targets = a.d_targets, a.host_losses = a.losses;
    if (!be_host_visible(m->be)) { /* the loader writes tokens and the loop reads losses on the host */
        a.be = m->be; /* pinned on cuda: these cross to the device every micro-batch */
        if (!(a.host_ibuf = be_host_alloc(m->be, 2 * ntok * sizeof(int)))) goto err_free_ibuf;
        if (!(a.host_losses = be_host_alloc(m->be, ntok * sizeof(float)))) goto err_free_hi;
        a.inputs = a.host_ibuf;
        a.targets = a.host_ibuf + ntok;
    }
    *a_p = a;
    return MP_OK;
err_free_hi:
    be_host_free(m->be, a.host_ibuf);
err_free_ibuf:
    arena_free(arena, a.ibuf, 2 * ntok * sizeof(int));
err_free_buf:
    arena_free(arena, a.buf, a.nfloats * sizeof(float));
err_free_h:
    free(a.h), free(a.pos_res), free(a.pos_mov);
    return MP_ERR;
}

void acts_destroy(acts_t *a, arena_t *arena)
{
    if (a->host_ibuf) {
        be_host_free(a->be, a->host_ibuf);
        be_host_free(a->be, a->host_losses);
        a->host_ibuf = NULL;
    }
    arena_free(arena, a->ibuf, 2 * (size_t)a->B * a->T * sizeof(int));
    arena_free(arena, a->buf, a->nfloats * sizeof(float));
    free(a->h), free(a->pos_res), free(a->pos_mov);
    a->h = NULL, a->pos_res = a->pos_mov = NULL;
}

static size_t scratch_layout(scratch_t *s, const model_t *m, int B, float *buf)
{
    const size_t C = m->cfg.dim, T = m->cfg.seq_len, N = (size_t)B * T;
    const widths_t w = tp_widths_max(m);
    const size_t RC = w.RC, Cl = w.Cl;
    size_t off = 0;
    s->dres = carve(buf, &off, N * C);
    s->dbuf = carve(buf, &off, N * C);
    const block_ops_t *ops = model_ops(m);
    s->dqkv = carve(buf, &off, N * (Cl + 2 * (size_t)w.KCl));
    s->datt = carve(buf, &off, att_floats_max(m, B, 1));
    s->dfch = carve(buf, &off, N * ops->mlp_pre * RC);
    s->dact = ops->rope ? carve(buf, &off, N * RC) : NULL;
    s->rope = ops->rope ? carve(buf, &off, T * (size_t)(m->cfg.dim / m->cfg.heads)) : NULL;
    s->xmax = carve(buf, &off, N);
    s->xsum = carve(buf, &off, N);
    s->xtgt = carve(buf, &off, N);
    /* the workspace: a whole block when some block recomputes, else (selective only) the
     * probabilities and the attention output its recomputation writes beside them */
    int any_r = 0, any_s = 0;
    for (int i = 0; i < m->tab.nlayers; i++)
        any_r |= model_block_mode(m, i) == MODE_RECOMPUTE, any_s |= model_block_mode(m, i) == MODE_SELECTIVE;
    memset(&s->work, 0, sizeof s->work);
    if (any_r) {
        carve_res3(m, B, &s->work, buf, &off);
        carve_att(&s->work, att_floats_max(m, B, 0), buf, &off);
        carve_rest(m, B, w, &s->work, buf, &off);
    } else if (any_s) {
        carve_att(&s->work, att_floats_max(m, B, 0), buf, &off);
        s->work.atty = carve(buf, &off, N * Cl);
    }
    if (!buf) memset(&s->work, 0, sizeof s->work);
    return off;
}

size_t scratch_bytes(const model_t *m, int B)
{
    scratch_t s;
    return scratch_layout(&s, m, B, NULL) * sizeof(float);
}

int scratch_create(scratch_t *s_p, const model_t *m, int B, arena_t *arena)
{
    scratch_t s;
    memset(&s, 0, sizeof s);
    s.nfloats = scratch_layout(&s, m, B, NULL);
    if (!(s.buf = arena_floats(arena, s.nfloats, "backward scratch"))) return MP_ERR;
    scratch_layout(&s, m, B, s.buf);
    if (s.rope) { /* the rotary table: made on the host once, in double (rope_table_init), and copied over */
        const int T = m->cfg.seq_len, hs = m->cfg.dim / m->cfg.heads;
        float *cs = MP_MALLOC((size_t)T * hs * sizeof *cs);
        if (!cs) {
            arena_free(arena, s.buf, s.nfloats * sizeof(float));
            return MP_FAIL("out of memory for the rotary table");
        }
        rope_table_init(cs, T, hs, m->cfg.rope_theta);
        be_to_device(m->be, s.rope, cs, (size_t)T * hs * sizeof *cs);
        free(cs);
    }
    *s_p = s;
    return MP_OK;
}

void scratch_destroy(scratch_t *s, arena_t *arena) { arena_free(arena, s->buf, s->nfloats * sizeof(float)); }

static const float *block_input(const acts_t *a, int i) { return i == 0 ? a->encoded : a->h[i - 1].res3; }

/* What block b's backward reads, whole again: under RECOMPUTE its forward re-run from its input x
 * into the workspace (the same kernels on the same input: the same bits, tensor-parallel
 * all-reduces included, which every TP peer re-runs too); under SELECTIVE the probabilities
 * recomputed from q and k (the attention output it writes beside them is not used). Other modes
 * saved everything. With wg (a split backward's B), RECOMPUTE writes its products' inputs into wg. */
static block_acts_t block_restore(const model_t *m, int b, const block_acts_t *saved, const float *x, scratch_t *s,
                                  const block_wgrad_t *wg, int B, prof_t *p)
{
    block_acts_t h = *saved;
    const block_mode_t mode = is_skip(m, layer_of(m, b)) ? MODE_KEEP : model_block_mode(m, b);
    const widths_t w = tp_widths(m, layer_of(m, b));
    const double t0 = perf_now();
    if (mode == MODE_RECOMPUTE) {
        h = s->work; /* its own res3 too: the saved output may still be read by a send in flight */
        if (wg) /* a split backward's B: the products' inputs where W finds them after later blocks' recomputations */
            h.ln1 = wg->ln1, h.atty = wg->atty, h.ln2 = wg->ln2, h.mlp_act = wg->mlp_act;
        model_ops(m)->forward(m, layer_of(m, b), &m->p.h[b], &h, x, s, B, p);
    } else if (mode == MODE_SELECTIVE) {
        h.att = s->work.att;
        model_ops(m)->attention(m, s->work.atty, h.att, h.qkv, B, w, p);
    }
    if (p && (mode == MODE_RECOMPUTE || mode == MODE_SELECTIVE)) {
        p->recompute += perf_now() - t0;
        if (p->span) p->span(p->span_ctx, "recompute", t0);
    }
    return h;
}

/* Token + position embedding; vocab-parallel: each TP rank adds the rows it holds, then the
 * positions (at tp = 1 one pass, the same bits). */
static void embed_forward(model_t *m, acts_t *a, prof_t *p)
{
    const int B = a->B, T = m->cfg.seq_len, C = m->cfg.dim;
    if (m->tab.tp == 1) {
        PROF(p, PROF_ELEMENTWISE, be_encoder_forward(m->be, a->encoded, a->d_inputs, m->p.wte, m->p.wpe, B, T, C, 0, tp_V(m)));
        return;
    }
    PROF(p, PROF_ELEMENTWISE, be_encoder_forward(m->be, a->encoded, a->d_inputs, m->p.wte, NULL, B, T, C, tp_v0(m), tp_V(m)));
    tp_reduce(m, a->encoded, (size_t)B * T * C, MPI_SUM);
    if (m->p.wpe) PROF(p, PROF_ELEMENTWISE, be_position_forward(m->be, a->encoded, m->p.wpe, B, T, C));
}

/* Softmax cross-entropy of the logits in a->probs; vocab-parallel at tp > 1 (no rank ever holds
 * all B×T×V logits). */
static void xent_forward_on(model_t *m, float *losses, float *probs, const int *targets, int N, float *xmax, float *xsum,
                            float *xtgt, prof_t *p)
{
    const int Vl = tp_V(m), v0 = tp_v0(m);
    if (m->tab.tp == 1) {
        PROF(p, PROF_XENT, be_crossentropy_forward(m->be, losses, probs, targets, N, Vl));
        return;
    }
    int valid = m->cfg.vocab - v0;
    valid = valid < 0 ? 0 : valid > Vl ? Vl : valid;
    PROF(p, PROF_XENT, be_xent_local_max(m->be, xmax, xtgt, probs, targets, N, Vl, v0, valid));
    tp_reduce(m, xmax, (size_t)N, MPI_MAX);
    PROF(p, PROF_XENT, be_xent_local_expsum(m->be, xsum, probs, xmax, N, Vl, valid));
    tp_reduce(m, xsum, (size_t)N, MPI_SUM);
    tp_reduce(m, xtgt, (size_t)N, MPI_SUM);
    PROF(p, PROF_XENT, be_xent_finish(m->be, losses, probs, xmax, xsum, xtgt, N, Vl));
}

static void xent_forward(model_t *m, acts_t *a, scratch_t *s, prof_t *p)
{
    xent_forward_on(m, a->losses, a->probs, a->d_targets, a->B * m->cfg.seq_len, s->xmax, s->xsum, s->xtgt, p);
}

model_part_t model_whole(const model_t *m)
{
    return (model_part_t){0, m->tab.nlayers, m->tab.has_embed, m->tab.has_final};
}

model_part_t model_chunk(const model_t *m, int c)
{
    int b0 = 0;
    for (int i = 0; i < c; i++) b0 += m->tab.chunk_nlayers[i];
    return (model_part_t){b0, m->tab.chunk_nlayers[c], m->tab.has_embed && c == 0,
                          m->tab.has_final && c == m->tab.nchunks - 1};
}

double model_forward(model_t *m, acts_t *a, scratch_t *s)
{
    model_part_t pt = model_whole(m);
    return model_forward_part(m, &pt, a, s, NULL);
}

double model_forward_part(model_t *m, const model_part_t *pt, acts_t *a, scratch_t *s, prof_t *p)
{
    const int B = a->B, T = m->cfg.seq_len, C = m->cfg.dim, N = B * T;
    if ((pt->embed || pt->final) && a->inputs != a->d_inputs) /* the tokens the host loaded */
        be_to_device(m->be, a->d_inputs, a->inputs, 2 * (size_t)N * sizeof(int));
    acts_bind(a, m, pt, a->mov, s);
    if (pt->embed) embed_forward(m, a, p);
    for (int i = 0; i < pt->n; i++)
        model_ops(m)->forward(m, layer_of(m, pt->b0 + i), &m->p.h[pt->b0 + i], &a->h[i], block_input(a, i), s, B, p);
    if (!pt->final) return 0.0;
    const float *top = block_input(a, pt->n);
    model_ops(m)->norm_forward(m, a->lnf, a->lnf_mean, a->lnf_rstd, top, m->p.lnfw, m->p.lnfb, N, p);
    if (m->tab.tp == 1) { /* one unit: the backend keeps the logits in its own form until backward */
        PROF(p, PROF_MATMUL, be_head_forward(m->be, a->losses, a->probs, a->lnf, m->p.head, a->d_targets, N, C, tp_V(m)));
    } else {
        PROF(p, PROF_MATMUL, be_matmul_forward(m->be, a->probs, a->lnf, m->p.head, NULL, N, C, tp_V(m)));
        xent_forward(m, a, s, p);
    }
    be_to_host(m->be, a->host_losses, a->losses, (size_t)N * sizeof(float));
    double sum = 0.0; /* fixed order: the reported loss is the same bits every run */
    for (int i = 0; i < N; i++) sum += a->host_losses[i];
    return sum;
}

void model_backward(model_t *m, acts_t *a, scratch_t *s, float dloss)
{
    model_part_t pt = model_whole(m);
    model_backward_part(m, &pt, a, s, dloss, NULL, NULL);
}

/* The backward of part pt: model_backward_part's (ws NULL: every gradient, ready fired per range)
 * and model_backward_b's (ws: the products' weight gradients left to W, what they need kept in ws,
 * which wstash_layout laid out for pt; ready NULL). */
static void backward_part(model_t *m, const model_part_t *pt, acts_t *a, scratch_t *s, float dloss, prof_t *p,
                          const model_ready_t *ready, wstash_t *ws)
{
    const int B = a->B, T = m->cfg.seq_len, C = m->cfg.dim, N = B * T, Vl = tp_V(m);
    acts_bind(a, m, pt, a->mov, s);
    if (pt->final) { /* B leaves dlogits in a->probs for W's share of the head */
        if (m->tab.tp == 1) {
            PROF(p, PROF_MATMUL, be_head_backward(m->be, s->dbuf, ws ? NULL : head_grad(m), a->probs, a->lnf, m->p.head,
                                                a->d_targets, dloss, N, C, Vl));
        } else {
            PROF(p, PROF_XENT, be_crossentropy_backward(m->be, a->probs, a->probs, a->d_targets, dloss, N, Vl, tp_v0(m)));
            PROF(p, PROF_MATMUL, be_matmul_backward(m->be, s->dbuf, ws ? NULL : head_grad(m), NULL, a->probs, a->lnf,
                                                    m->p.head, N, C, Vl));
            tp_reduce(m, s->dbuf, (size_t)N * C, MPI_SUM);
        }
        be_zero(m->be, s->dres, (size_t)N * C * sizeof(float));
        const float *top = block_input(a, pt->n);
        model_ops(m)->norm_backward(m, s->dres, m->g.lnfw, m->g.lnfb, s->dbuf, top, m->p.lnfw, a->lnf_mean, a->lnf_rstd,
                                    N, p);
        if (ready) ready->fn(ready->ctx, PARAM_RANGE_FINAL);
    }
    for (int i = pt->n - 1; i >= 0; i--) {
        block_wgrad_t *wg = ws ? &ws->h[i] : NULL;
        const block_acts_t h = block_restore(m, pt->b0 + i, &a->h[i], block_input(a, i), s, wg, B, p);
        model_ops(m)->backward(m, layer_of(m, pt->b0 + i), &m->p.h[pt->b0 + i], &m->g.h[pt->b0 + i], &h,
                               block_input(a, i), s, wg, B, p);
        if (ready) ready->fn(ready->ctx, param_block_layer(&m->tab, pt->b0 + i));
    }
    if (pt->embed)
        PROF(p, PROF_ELEMENTWISE, be_encoder_backward(m->be, m->g.wte, m->g.wpe, s->dres, a->d_inputs, B, T, C, tp_v0(m), Vl));
}

void model_backward_part(model_t *m, const model_part_t *pt, acts_t *a, scratch_t *s, float dloss, prof_t *p,
                         const model_ready_t *ready)
{
    backward_part(m, pt, a, s, dloss, p, ready, NULL);
}

/* Block l's share of a wstash under `mode` (buf == NULL: only counts): its products' douts and,
 * under RECOMPUTE, their inputs, sized for the widest the block can run (every candidate fits). */
static void carve_wgrad(const model_t *m, int B, int l, block_mode_t mode, block_wgrad_t *wg, float *buf, size_t *off)
{
    const widths_t w = tp_widths_cap(m, l);
    const size_t C = m->cfg.dim, N = (size_t)B * m->cfg.seq_len, Cl = w.Cl, RC = w.RC;
    memset(wg, 0, sizeof *wg);
    if (!w.NH) return; /* skip: the identity has no products */
    wg->dres3 = carve(buf, off, N * C);
    wg->dfch = carve(buf, off, N * model_ops(m)->mlp_pre * RC);
    wg->dres2 = carve(buf, off, N * C);
    wg->dqkv = carve(buf, off, N * (Cl + 2 * (size_t)w.KCl));
    if (mode != MODE_RECOMPUTE) return;
    wg->ln1 = carve(buf, off, N * C);
    wg->atty = carve(buf, off, N * Cl);
    wg->ln2 = carve(buf, off, N * C);
    wg->mlp_act = carve(buf, off, N * RC);
}

/* The layout of part pt's blocks in ws (buf == NULL: only counts into *off). */
static void wstash_layout(wstash_t *ws, const model_t *m, const model_part_t *pt, float *buf, size_t *off)
{
    for (int i = 0; i < pt->n; i++)
        carve_wgrad(m, ws->B, layer_of(m, pt->b0 + i), model_block_mode(m, pt->b0 + i), &ws->h[i], buf, off);
}

size_t model_wstash_bytes(const model_t *m, const model_part_t *pt, int B)
{
    size_t off = 0;
    for (int i = 0; i < pt->n; i++) {
        block_wgrad_t wg;
        carve_wgrad(m, B, layer_of(m, pt->b0 + i), model_block_mode(m, pt->b0 + i), &wg, NULL, &off);
    }
    return off * sizeof(float);
}

int wstash_create(wstash_t *ws_p, const model_t *m, int B, size_t bytes, arena_t *arena)
{
    wstash_t ws;
    memset(&ws, 0, sizeof ws);
    ws.B = B;
    ws.nfloats = bytes / sizeof(float);
    if (!(ws.h = MP_CALLOC((size_t)(m->tab.nlayers > 0 ? m->tab.nlayers : 1), sizeof *ws.h)))
        return MP_FAIL("out of memory for a weight-gradient stash's views");
    if (ws.nfloats && !(ws.buf = arena_floats(arena, ws.nfloats, "weight-gradient stash (B to W)"))) {
        free(ws.h);
        return MP_ERR;
    }
    *ws_p = ws;
    return MP_OK;
}

void wstash_destroy(wstash_t *ws, arena_t *arena)
{
    if (ws->buf) arena_free(arena, ws->buf, ws->nfloats * sizeof(float));
    free(ws->h);
    memset(ws, 0, sizeof *ws);
}

void model_backward_b(model_t *m, const model_part_t *pt, acts_t *a, scratch_t *s, float dloss, prof_t *p, wstash_t *ws)
{
    if (ws->pending)
        MP_ABORT("a split backward's B into a wstash whose W (blocks %d..%d) has not run (a bug)", ws->pt.b0,
                 ws->pt.b0 + ws->pt.n - 1);
    if (ws->B != a->B) MP_ABORT("a wstash for micro-batches of %d sequences used for %d (a bug)", ws->B, a->B);
    size_t need = 0;
    wstash_layout(ws, m, pt, NULL, &need);
    if (need > ws->nfloats)
        MP_ABORT("a wstash of %zu bytes for a part that needs %zu (a bug: size it by model_wstash_bytes)",
                 ws->nfloats * sizeof(float), need * sizeof(float));
    ws->used = 0;
    wstash_layout(ws, m, pt, ws->buf, &ws->used);
    backward_part(m, pt, a, s, dloss, p, NULL, ws);
    ws->pt = *pt;
    ws->pending = 1;
}

void model_backward_w(model_t *m, const model_part_t *pt, acts_t *a, scratch_t *s, prof_t *p, wstash_t *ws,
                      const model_ready_t *ready)
{
    if (!ws->pending || ws->pt.b0 != pt->b0 || ws->pt.n != pt->n || ws->pt.final != pt->final)
        MP_ABORT("a split backward's W of blocks %d..%d without its B (%s) (a bug)", pt->b0, pt->b0 + pt->n - 1,
                 ws->pending ? "the wstash holds another part" : "the wstash holds none");
    const int N = a->B * m->cfg.seq_len, C = m->cfg.dim;
    acts_bind(a, m, pt, a->mov, s); /* the slot's views again: its movable region may have been rebound */
    if (pt->final) {
        if (m->tab.tp == 1)
            PROF(p, PROF_MATMUL, be_head_backward_weight(m->be, head_grad(m), a->probs, a->lnf, N, C, tp_V(m)));
        else
            PROF(p, PROF_MATMUL, be_matmul_backward_weight(m->be, head_grad(m), NULL, a->probs, a->lnf, N, C, tp_V(m)));
        if (ready) ready->fn(ready->ctx, PARAM_RANGE_FINAL);
    }
    for (int i = pt->n - 1; i >= 0; i--) {
        model_ops(m)->backward_w(m, layer_of(m, pt->b0 + i), &m->g.h[pt->b0 + i], &a->h[i], &ws->h[i], a->B, p);
        if (ready) ready->fn(ready->ctx, param_block_layer(&m->tab, pt->b0 + i));
    }
    ws->pending = 0;
}

float *model_part_output(const model_part_t *pt, acts_t *a) { return (float *)block_input(a, pt->n); }

const float *model_head_input(const acts_t *a) { return a->lnf; }

int model_head_grad(model_t *m, const float *lnf, const int *targets, int B, float dloss, float *grad_head_p)
{
    const int N = B * m->cfg.seq_len, C = m->cfg.dim, V = tp_V(m);
    if (!be_kernels_read_host(m->be))
        return MP_FAIL("the tied head's gradient is recomputed by kernels that read host memory (cpu, emu) only");
    float *probs = MP_MALLOC((size_t)N * V * sizeof(float)), *x = MP_MALLOC(4 * (size_t)N * sizeof(float));
    int rc = probs && x ? MP_OK : MP_ERR;
    if (rc == MP_OK) { /* model_forward_part's head, then model_backward_part's, without the input gradient;
                        * at tp > 1 the vocabulary-parallel softmax's sums with the tp peers, who all do this */
        be_matmul_forward(m->be, probs, lnf, m->p.head, NULL, N, C, V);
        xent_forward_on(m, x, probs, targets, N, x + N, x + 2 * (size_t)N, x + 3 * (size_t)N, NULL);
        be_crossentropy_backward(m->be, probs, probs, targets, dloss, N, V, tp_v0(m));
        be_matmul_backward(m->be, NULL, grad_head_p, NULL, probs, lnf, m->p.head, N, C, V);
    }
    free(x);
    free(probs);
    return rc;
}

void model_grads_zero(model_t *m)
{
    be_zero(m->be, m->grads, m->alloc * sizeof(float));
    if (m->grad_head) be_zero(m->be, m->grad_head, model_head_floats(m) * sizeof(float));
}

void model_grads_finish(model_t *m)
{
    if (m->grad_head && m->g.wte) be_vec_add(m->be, m->g.wte, m->g.wte, m->grad_head, model_head_floats(m));
}

double model_flops_per_token(const model_cfg_t *cfg)
{
    const double C = cfg->dim, T = cfg->seq_len, V = cfg->vocab;
    double n_matmul = V * C, attn = 0.0;
    for (int l = 0; l < cfg->layers; l++) { /* A = C and R = mlp_ratio unless model.blocks says otherwise */
        if (block_is_skip(cfg, l)) continue;
        const int A = cfg_attn_width(cfg, l);
        n_matmul += block_kind_macs(block_kind_of(cfg), block_widths(cfg, (block_shape_t){cfg_heads(cfg, l), cfg_ratio(cfg, l)}));
        attn += 12.0 * A * T;
    }
    return 6.0 * n_matmul + attn;
}
