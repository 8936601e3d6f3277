/* Llama's block as kernel sequences (block_ops.h), Hugging Face's LlamaDecoderLayer:
 *   x → RMSNorm → [q | k | v] = ln1 · Wqkvᵀ → rotary on q and k → grouped-query causal attention
 *     → res2 = x + atty · Woᵀ → RMSNorm → [gate | up] = ln2 · Wfcᵀ → silu(gate) · up
 *     → res3 = res2 + act · Wdownᵀ
 * No biases. Tensor parallelism as GPT-2's: q, k, v, gate and up by rows (each rank its heads' and its
 * MLP columns' rows), o and down by columns, the row-parallel sums over the TP peers. */
#include "block_ops.h"

#include "backend.h"
#include "perf.h"

static int head_size(const model_t *m) { return m->cfg.dim / m->cfg.heads; }

static void llama_norm_forward(const model_t *m, float *out, float *mean, float *rstd, const float *x, const float *w,
                               const float *b, int N, prof_t *p)
{
    (void)mean, (void)b; /* RMSNorm has neither */
    PROF(p, PROF_ELEMENTWISE, be_rmsnorm_forward(m->be, out, rstd, x, w, N, m->cfg.dim, m->cfg.norm_eps));
}

static void llama_norm_backward(const model_t *m, float *dinp, float *dw, float *db, const float *dout, const float *x,
                                const float *w, const float *mean, const float *rstd, int N, prof_t *p)
{
    (void)db, (void)mean;
    PROF(p, PROF_ELEMENTWISE, be_rmsnorm_backward(m->be, dinp, dw, dout, x, w, rstd, N, m->cfg.dim));
}

static void llama_attention(const model_t *m, float *out, float *att, const float *qkv, int B, widths_t w, prof_t *p)
{
    if (model_att_fused(m, B, w)) /* KVH = NH only (be_attention_fused) */
        PROF(p, PROF_ATTENTION, be_attention_flash_forward(m->be, out, att, qkv, B, m->cfg.seq_len, w.Cl, w.NH));
    else
        PROF(p, PROF_ATTENTION, be_attention_gqa_forward(m->be, out, att, qkv, B, m->cfg.seq_len, w.Cl, w.NH, w.KVH));
}

static void llama_forward(const model_t *m, int l, const block_view_t *w, block_acts_t *h, const float *x,
                          const scratch_t *s, int B, prof_t *p)
{
    const int T = m->cfg.seq_len, C = m->cfg.dim, N = B * T;
    const widths_t wd = model_tp_widths(m, l);
    if (model_is_skip(m, l)) { /* the identity (its output is its own: a send or a recomputation reads it) */
        be_copy(m->be, h->res3, x, (size_t)N * C * sizeof(float));
        return;
    }
    llama_norm_forward(m, h->ln1, NULL, h->ln1_rstd, x, w->ln1w, NULL, N, p);
    PROF(p, PROF_MATMUL, be_matmul_forward(m->be, h->qkv, h->ln1, w->qkvw, NULL, N, C, wd.Cl + 2 * wd.KCl));
    PROF(p, PROF_ELEMENTWISE, be_rope_forward(m->be, h->qkv, s->rope, 0, B, T, wd.NH, wd.KVH, head_size(m)));
    llama_attention(m, h->atty, h->att, h->qkv, B, wd, p);
    model_rowpar_residual(m, h->res2, x, h->atty, w->projw, NULL, N, wd.Cl, C, p);
    llama_norm_forward(m, h->ln2, NULL, h->ln2_rstd, h->res2, w->ln2w, NULL, N, p);
    PROF(p, PROF_MATMUL, be_matmul_forward(m->be, h->mlp_pre, h->ln2, w->fcw, NULL, N, C, 2 * wd.RC));
    PROF(p, PROF_ELEMENTWISE, be_swiglu_forward(m->be, h->mlp_act, h->mlp_pre, N, wd.RC));
    model_rowpar_residual(m, h->res3, h->res2, h->mlp_act, w->fcprojw, NULL, N, wd.RC, C, p);
}

/* Mirror of llama_forward. On entry s->dres = d res3; on exit d x. wg NULL: the whole backward; wg
 * given: a split backward's B, the four products' weight gradients left to llama_backward_w and
 * what it needs kept in wg (as GPT-2's, model.h's block_wgrad_t). */
static void llama_backward(const model_t *m, int l, const block_view_t *w, block_view_t *g, const block_acts_t *h,
                           const float *x, scratch_t *s, block_wgrad_t *wg, int B, prof_t *p)
{
    const int T = m->cfg.seq_len, C = m->cfg.dim, N = B * T;
    const widths_t wd = model_tp_widths(m, l);
    const int QKV = wd.Cl + 2 * wd.KCl;
    if (model_is_skip(m, l)) return; /* the identity: d x = d res3 */
    block_view_t gp = *g; /* the products' gradients: here, or (B) none: W adds them */
    if (wg) gp.qkvw = gp.projw = gp.fcw = gp.fcprojw = NULL;
    float *dfch = wg ? wg->dfch : s->dfch, *dqkv = wg ? wg->dqkv : s->dqkv;
    if (wg) be_copy(m->be, wg->dres3, s->dres, (size_t)N * C * sizeof(float));
    PROF(p, PROF_MATMUL, be_matmul_backward(m->be, s->dact, gp.fcprojw, NULL, s->dres, h->mlp_act, w->fcprojw, N,
                                            wd.RC, C));
    PROF(p, PROF_ELEMENTWISE, be_swiglu_backward(m->be, dfch, s->dact, h->mlp_pre, N, wd.RC));
    PROF(p, PROF_MATMUL, be_matmul_backward(m->be, s->dbuf, gp.fcw, NULL, dfch, h->ln2, w->fcw, N, C, 2 * wd.RC));
    model_tp_reduce(m, s->dbuf, (size_t)N * C, MPI_SUM);
    llama_norm_backward(m, s->dres, g->ln2w, NULL, s->dbuf, h->res2, w->ln2w, NULL, h->ln2_rstd, N, p);
    if (wg) be_copy(m->be, wg->dres2, s->dres, (size_t)N * C * sizeof(float));
    PROF(p, PROF_MATMUL, be_matmul_backward(m->be, s->dbuf, gp.projw, NULL, s->dres, h->atty, w->projw, N, wd.Cl, C));
    if (model_att_fused(m, B, wd))
        PROF(p, PROF_ATTENTION, be_attention_flash_backward(m->be, dqkv, s->datt, s->dbuf, h->qkv, h->att, B, T, wd.Cl,
                                                            wd.NH));
    else
        PROF(p, PROF_ATTENTION, be_attention_gqa_backward(m->be, dqkv, s->datt, s->dbuf, h->qkv, h->att, B, T, wd.Cl,
                                                          wd.NH, wd.KVH));
    PROF(p, PROF_ELEMENTWISE, be_rope_backward(m->be, dqkv, s->rope, 0, B, T, wd.NH, wd.KVH, head_size(m)));
    PROF(p, PROF_MATMUL, be_matmul_backward(m->be, s->dbuf, gp.qkvw, NULL, dqkv, h->ln1, w->qkvw, N, C, QKV));
    model_tp_reduce(m, s->dbuf, (size_t)N * C, MPI_SUM);
    llama_norm_backward(m, s->dres, g->ln1w, NULL, s->dbuf, x, w->ln1w, NULL, h->ln1_rstd, N, p);
}

/* A split backward's W: the weight half of each product call llama_backward makes, on the same
 * dout and input (the same bits, added once per micro-batch). Local: no TP communication. */
static void llama_backward_w(const model_t *m, int l, block_view_t *g, const block_acts_t *h, const block_wgrad_t *wg,
                             int B, prof_t *p)
{
    const int C = m->cfg.dim, N = B * m->cfg.seq_len;
    const widths_t wd = model_tp_widths(m, l);
    if (model_is_skip(m, l)) return;
    const float *ln1 = wg->ln1 ? wg->ln1 : h->ln1, *atty = wg->atty ? wg->atty : h->atty;
    const float *ln2 = wg->ln2 ? wg->ln2 : h->ln2, *act = wg->mlp_act ? wg->mlp_act : h->mlp_act;
    PROF(p, PROF_MATMUL, be_matmul_backward_weight(m->be, g->fcprojw, NULL, wg->dres3, act, N, wd.RC, C));
    PROF(p, PROF_MATMUL, be_matmul_backward_weight(m->be, g->fcw, NULL, wg->dfch, ln2, N, C, 2 * wd.RC));
    PROF(p, PROF_MATMUL, be_matmul_backward_weight(m->be, g->projw, NULL, wg->dres2, atty, N, wd.Cl, C));
    PROF(p, PROF_MATMUL, be_matmul_backward_weight(m->be, g->qkvw, NULL, wg->dqkv, ln1, N, C, wd.Cl + 2 * wd.KCl));
}

const block_ops_t block_ops_llama = {
    .norm_mean = 0,
    .mlp_pre = 2,
    .rope = 1,
    .forward = llama_forward,
    .backward = llama_backward,
    .backward_w = llama_backward_w,
    .attention = llama_attention,
    .norm_forward = llama_norm_forward,
    .norm_backward = llama_norm_backward,
};
