/* A model family's block as kernel sequences (issue 47: the family is data the model reads, not
 * branches through it). block_kind.h lists a family's tensors; this is the other half, private to
 * src/model: what its forward saves (the sizes of block_acts_t's tensors), its forward, backward and
 * split backward (B and W), its norm and its attention alone (the selective policy recomputes
 * that), each a kernel sequence on the backend. model.c carves the activations, runs the memory
 * policies, the head and the embedding around them, and never asks which family it runs.
 *
 * The helpers below (widths, skip test, tensor-parallel sums) are block_shared.c's, which the
 * model and the families' files (block_gpt2.c, block_llama.c) both call. */
#ifndef MP_BLOCK_OPS_H
#define MP_BLOCK_OPS_H

#include "model.h"

/* A block's local widths on this TP rank: its query heads' channels Cl and heads NH, its key/value
 * heads' channels KCl and heads KVH, its MLP's hidden width RC (all 0 for a skip block). */
typedef struct {
    int Cl, NH, RC, KCl, KVH;
} widths_t;

typedef struct {
    /* Its norms save the mean beside rstd (LayerNorm; RMSNorm has none). */
    int norm_mean;
    /* mlp_pre's width in units of RC (GPT-2 1: gelu'; llama 2: [gate | up]). */
    int mlp_pre;
    /* Rotary positions: the scratch holds the (T, hs) table (scratch_t.rope) and dact (N, RC). */
    int rope;
    /* x (N,C) → h->res3; s: the scratch's constant tables (the rotary one). */
    void (*forward)(const model_t *m, int l, const block_view_t *w, block_acts_t *h, const float *x,
                    const scratch_t *s, int B, prof_t *p);
    /* On entry s->dres = d res3, on exit d x; wg: a split backward's B (model.h, block_wgrad_t). */
    void (*backward)(const model_t *m, int l, const block_view_t *w, block_view_t *g, const block_acts_t *h,
                     const float *x, scratch_t *s, block_wgrad_t *wg, int B, prof_t *p);
    /* A split backward's W: the products' weight gradients from what B kept in wg. */
    void (*backward_w)(const model_t *m, int l, block_view_t *g, const block_acts_t *h, const block_wgrad_t *wg,
                       int B, prof_t *p);
    /* The attention probabilities att and output out again from the saved qkv (MODE_SELECTIVE). */
    void (*attention)(const model_t *m, float *out, float *att, const float *qkv, int B, widths_t w, prof_t *p);
    /* The family's norm over C (the blocks' and the final one): out, mean (LayerNorm), rstd from x;
     * and its backward: dinp +=, dw +=, db += (db and mean NULL where the norm has none). */
    void (*norm_forward)(const model_t *m, float *out, float *mean, float *rstd, const float *x, const float *w,
                         const float *b, int N, prof_t *p);
    void (*norm_backward)(const model_t *m, float *dinp, float *dw, float *db, const float *dout, const float *x,
                          const float *w, const float *mean, const float *rstd, int N, prof_t *p);
} block_ops_t;

extern const block_ops_t block_ops_gpt2, block_ops_llama;

/* The family of m's blocks (model.arch). */
const block_ops_t *model_ops(const model_t *m);

/* What the model and the families' files share (block_shared.c). */
widths_t model_widths_of(const model_t *m, block_shape_t sh); /* a block of shape sh on this TP rank */
widths_t model_tp_widths(const model_t *m, int layer);   /* layer l as it runs now (a choice block: its candidate) */
int model_is_skip(const model_t *m, int layer);          /* layer l runs as the identity now */
void model_tp_reduce(const model_t *m, float *buf, size_t n, MPI_Op op); /* Σ (or max) over tp peers; nothing at tp = 1 */
/* Whether a block of widths w runs the fused attention at micro-batch B (be_attention_fused: the one
 * rule): its kernels (be_attention_flash_*) then, and its att and datt carved as
 * attention_fused_layout.h says; else the probabilities' path and (B,NH,T,T) each. */
int model_att_fused(const model_t *m, int B, widths_t w);
/* A row-parallel product: out = res + inp · wᵀ + bias summed over the TP peers (the residual and the
 * replicated bias added by TP rank 0 only). At tp = 1 it is matmul_residual_forward. */
void model_rowpar_residual(const model_t *m, float *out, const float *res, const float *inp, const float *w,
                           const float *bias, int N, int K, int OC, prof_t *p);

#endif
