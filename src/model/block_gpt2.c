/* GPT-2's block as kernel sequences (block_ops.h): pre-LayerNorm attention with q, k and v in one
 * product, and an MLP whose GELU runs inside its first product (the derivative saved beside it), every
 * product with a bias. */
#include "block_ops.h"

#include "backend.h"
#include "perf.h"

/* rowpar_residual for the MLP's projection, whose input is the hidden activation in the backend's
 * form (kernels.h, mlp_proj_forward). */
static void rowpar_mlp_proj(const model_t *m, float *out, const float *res, const float *hidden, const float *w,
                            const float *bias, int N, int K, int OC, prof_t *p)
{
    if (m->tab.tp_rank == 0) PROF(p, PROF_MATMUL, be_mlp_proj_forward(m->be, out, res, hidden, w, bias, N, K, OC));
    else PROF(p, PROF_MATMUL, be_mlp_proj_forward(m->be, out, NULL, hidden, w, NULL, N, K, OC));
    model_tp_reduce(m, out, (size_t)N * OC, MPI_SUM);
}

/* The attention: the fused kernels or the probabilities' path, as the backend runs it at B
 * (model_att_fused). */
static void gpt2_attention(const model_t *m, float *out, float *att, const float *qkv, int B, widths_t w, prof_t *p)
{
    if (model_att_fused(m, B, w))
        PROF(p, PROF_ATTENTION, be_attention_flash_forward(m->be, out, att, qkv, B, m->cfg.seq_len, w.Cl, w.NH));
    else
        PROF(p, PROF_ATTENTION, be_attention_forward(m->be, out, att, qkv, B, m->cfg.seq_len, w.Cl, w.NH));
}

/* One block: x (N,C) -> h->res3. Column-parallel qkv and fc on this rank's heads and MLP columns,
 * row-parallel projections summed over the TP peers. */
static void gpt2_forward(const model_t *m, int l, const block_view_t *w, block_acts_t *h, const float *x,
                         const scratch_t *s, int B, prof_t *p)
{
    const int T = m->cfg.seq_len, C = m->cfg.dim, N = B * T;
    const widths_t wd = model_tp_widths(m, l);
    const int Cl = wd.Cl, RC = wd.RC;
    (void)s; /* no constant tables */
    if (model_is_skip(m, l)) { /* the identity (its output is its own: a send or a recomputation reads it) */
        be_copy(m->be, h->res3, x, (size_t)N * C * sizeof(float));
        return;
    }
    PROF(p, PROF_ELEMENTWISE, be_layernorm_forward(m->be, h->ln1, h->ln1_mean, h->ln1_rstd, x, w->ln1w, w->ln1b, N, C));
    PROF(p, PROF_MATMUL, be_matmul_forward(m->be, h->qkv, h->ln1, w->qkvw, w->qkvb, N, C, 3 * Cl));
    gpt2_attention(m, h->atty, h->att, h->qkv, B, wd, p);
    model_rowpar_residual(m, h->res2, x, h->atty, w->projw, w->projb, N, Cl, C, p);
    PROF(p, PROF_ELEMENTWISE,
         be_layernorm_forward(m->be, h->ln2, h->ln2_mean, h->ln2_rstd, h->res2, w->ln2w, w->ln2b, N, C));
    /* GELU runs inside the fc product (timed as matmul) and saves its derivative for the backward */
    PROF(p, PROF_MATMUL, be_matmul_gelu_forward(m->be, h->mlp_act, h->mlp_pre, h->ln2, w->fcw, w->fcb, N, C, RC));
    rowpar_mlp_proj(m, h->res3, h->res2, h->mlp_act, w->fcprojw, w->fcprojb, N, RC, C, p);
}

/* Mirror of gpt2_forward. On entry s->dres = d res3; on exit s->dres = d x. The input gradient of
 * each column-parallel product is summed over the TP peers before its LayerNorm's backward.
 * wg NULL: the whole backward. wg given: a split backward's B (model_backward_b): the four products'
 * weight and bias gradients are left to gpt2_backward_w, and what it needs is kept in wg (d fc
 * and d qkv written there instead of the scratch, d res3 and d res2 copied as s->dres flows on). */
static void gpt2_backward(const model_t *m, int l, const block_view_t *w, block_view_t *g, const block_acts_t *h,
                           const float *x, scratch_t *s, block_wgrad_t *wg, int B, prof_t *p)
{
    const int T = m->cfg.seq_len, C = m->cfg.dim, N = B * T;
    const widths_t wd = model_tp_widths(m, l);
    const int Cl = wd.Cl, RC = wd.RC, NH = wd.NH;
    if (model_is_skip(m, l)) return; /* the identity: d x = d res3 */
    block_view_t gp = *g; /* the products' gradients: here, or (B) none: W adds them */
    if (wg) gp.qkvw = gp.qkvb = gp.projw = gp.projb = gp.fcw = gp.fcb = gp.fcprojw = gp.fcprojb = NULL;
    float *dfch = wg ? wg->dfch : s->dfch, *dqkv = wg ? wg->dqkv : s->dqkv;
    if (wg) be_copy(m->be, wg->dres3, s->dres, (size_t)N * C * sizeof(float));
    PROF(p, PROF_MATMUL, be_matmul_backward_gelu(m->be, dfch, gp.fcprojw, gp.fcprojb, s->dres, h->mlp_act,
                                                  w->fcprojw, h->mlp_pre, N, RC, C));
    PROF(p, PROF_MATMUL, be_mlp_fc_backward(m->be, s->dbuf, gp.fcw, gp.fcb, dfch, h->ln2, w->fcw, N, C, RC));
    model_tp_reduce(m, s->dbuf, (size_t)N * C, MPI_SUM);
    PROF(p, PROF_ELEMENTWISE, be_layernorm_backward(m->be, s->dres, g->ln2w, g->ln2b, s->dbuf, h->res2, w->ln2w, h->ln2_mean,
                                                 h->ln2_rstd, N, C));
    if (wg) be_copy(m->be, wg->dres2, s->dres, (size_t)N * C * sizeof(float));
    PROF(p, PROF_MATMUL, be_matmul_backward(m->be, s->dbuf, gp.projw, gp.projb, s->dres, h->atty, w->projw, N, Cl, C));
    if (model_att_fused(m, B, wd))
        PROF(p, PROF_ATTENTION, be_attention_flash_backward(m->be, dqkv, s->datt, s->dbuf, h->qkv, h->att, B, T, Cl, NH));
    else
        PROF(p, PROF_ATTENTION, be_attention_backward(m->be, dqkv, s->datt, s->dbuf, h->qkv, h->att, B, T, Cl, NH));
    PROF(p, PROF_MATMUL, be_matmul_backward(m->be, s->dbuf, gp.qkvw, gp.qkvb, dqkv, h->ln1, w->qkvw, N, C, 3 * Cl));
    /* The key bias gets no gradient: it adds one constant to every score of a query's row, which
     * softmax ignores. Computed, it is a sum of rounding noise that AdamW's m/sqrt(v) would turn
     * into steps of size lr, differently for every layout; so it is exactly zero. */
    if (!wg) be_zero(m->be, g->qkvb + Cl, (size_t)Cl * sizeof(float));
    model_tp_reduce(m, s->dbuf, (size_t)N * C, MPI_SUM);
    PROF(p, PROF_ELEMENTWISE,
         be_layernorm_backward(m->be, s->dres, g->ln1w, g->ln1b, s->dbuf, x, w->ln1w, h->ln1_mean, h->ln1_rstd, N, C));
}

/* A split backward's W of block l: the four products' weight and bias gradients that
 * gpt2_backward leaves out when given wg, from the douts B kept there and the products' inputs
 * (h: the stash's; under RECOMPUTE wg's). Each is the weight half of the very kernel call
 * gpt2_backward makes (matmul_backward_weight), on the same dout and inp: the same bits, added
 * once per micro-batch. Local: no TP communication. */
static void gpt2_backward_w(const model_t *m, int l, block_view_t *g, const block_acts_t *h, const block_wgrad_t *wg,
                             int B, prof_t *p)
{
    const int C = m->cfg.dim, N = B * m->cfg.seq_len;
    const widths_t wd = model_tp_widths(m, l);
    const int Cl = wd.Cl, RC = wd.RC;
    if (model_is_skip(m, l)) return;
    const float *ln1 = wg->ln1 ? wg->ln1 : h->ln1, *atty = wg->atty ? wg->atty : h->atty;
    const float *ln2 = wg->ln2 ? wg->ln2 : h->ln2, *mlp_act = wg->mlp_act ? wg->mlp_act : h->mlp_act;
    PROF(p, PROF_MATMUL, be_mlp_proj_backward_weight(m->be, g->fcprojw, g->fcprojb, wg->dres3, mlp_act, N, RC, C));
    PROF(p, PROF_MATMUL, be_mlp_fc_backward_weight(m->be, g->fcw, g->fcb, wg->dfch, ln2, N, C, RC));
    PROF(p, PROF_MATMUL, be_matmul_backward_weight(m->be, g->projw, g->projb, wg->dres2, atty, N, Cl, C));
    PROF(p, PROF_MATMUL, be_matmul_backward_weight(m->be, g->qkvw, g->qkvb, wg->dqkv, ln1, N, C, 3 * Cl));
    be_zero(m->be, g->qkvb + Cl, (size_t)Cl * sizeof(float)); /* the key bias: gpt2_backward says why */
}

static void gpt2_norm_forward(const model_t *m, float *out, float *mean, float *rstd, const float *x, const float *w,
                              const float *b, int N, prof_t *p)
{
    PROF(p, PROF_ELEMENTWISE, be_layernorm_forward(m->be, out, mean, rstd, x, w, b, N, m->cfg.dim));
}

static void gpt2_norm_backward(const model_t *m, float *dinp, float *dw, float *db, const float *dout, const float *x,
                               const float *w, const float *mean, const float *rstd, int N, prof_t *p)
{
    PROF(p, PROF_ELEMENTWISE, be_layernorm_backward(m->be, dinp, dw, db, dout, x, w, mean, rstd, N, m->cfg.dim));
}

const block_ops_t block_ops_gpt2 = {
    .norm_mean = 1,
    .mlp_pre = 1,
    .rope = 0,
    .forward = gpt2_forward,
    .backward = gpt2_backward,
    .backward_w = gpt2_backward_w,
    .attention = gpt2_attention,
    .norm_forward = gpt2_norm_forward,
    .norm_backward = gpt2_norm_backward,
};
