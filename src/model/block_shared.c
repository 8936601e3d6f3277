/* What model.c and the families' blocks (block_gpt2.c, block_llama.c) share (block_ops.h): a block's
 * widths on this tensor-parallel rank, whether it runs as skip, and the tensor-parallel sums. Its own
 * file, below both: the model calls the families' blocks, and they call these, never the model. */
#include "block_ops.h"

#include "backend.h"
#include "block_kind.h"
#include "perf.h"

/* A block's local widths on this TP rank (block_ops.h; all 0 for a skip block). */
widths_t model_widths_of(const model_t *m, block_shape_t sh)
{
    const int tp = m->tab.tp;
    if (shape_is_skip(sh)) return (widths_t){0, 0, 0, 0, 0};
    const bk_widths_t w = block_widths(&m->cfg, sh);
    return (widths_t){w.A / tp, sh.heads / tp, w.RC / tp, w.KA / tp, shape_kv_heads(&m->cfg, sh) / tp};
}

/* Layer l's shape as it runs now (a choice block: the candidate selected). */
static block_shape_t shape_now(const model_t *m, int layer)
{
    if (cfg_is_choice(&m->cfg, layer)) return m->cfg.cand[m->sel[layer]];
    return (block_shape_t){cfg_heads(&m->cfg, layer), cfg_ratio(&m->cfg, layer)};
}

widths_t model_tp_widths(const model_t *m, int layer) { return model_widths_of(m, shape_now(m, layer)); }

/* Whether layer l runs as skip now (the identity: no tensors, no work). */
int model_is_skip(const model_t *m, int layer) { return shape_is_skip(shape_now(m, layer)); }

int model_att_fused(const model_t *m, int B, widths_t w)
{
    return w.NH > 0 && be_attention_fused(m->be, B, m->cfg.seq_len, w.Cl, w.NH, w.KVH);
}

void model_tp_reduce(const model_t *m, float *buf, size_t n, MPI_Op op)
{
    if (m->tab.tp > 1) be_allreduce(m->be, buf, n, op, m->tp_comm, "a tensor-parallel all-reduce");
}

void model_rowpar_residual(const model_t *m, float *out, const float *res, const float *inp, const float *w,
                           const float *bias, int N, int K, int OC, prof_t *p)
{
    if (m->tab.tp_rank == 0) PROF(p, PROF_MATMUL, be_matmul_residual_forward(m->be, out, res, inp, w, bias, N, K, OC));
    else PROF(p, PROF_MATMUL, be_matmul_forward(m->be, out, inp, w, NULL, N, K, OC));
    model_tp_reduce(m, out, (size_t)N * OC, MPI_SUM);
}
