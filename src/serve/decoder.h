/* The decoder: a model's blocks (a whole model, or one serving stage's contiguous range of them)
 * and a key/value cache, advancing sequences one token at a time (ARCHITECTURE.md §3 model, §10
 * serving). A decode step feeds each sequence's newest token at its position: the embedding (first
 * stage), the blocks, each reading the keys and values of the sequence's earlier positions from the
 * cache and appending its own, and the final LayerNorm and tied head (last stage). Nothing is
 * recomputed: a step costs one row of every product per sequence.
 *
 * Batch invariance: every product runs one row at a time and attention reads only its own
 * sequence's cache, so a sequence's logits are the same bits whatever else is in the batch and in
 * which order (the promise `mindpipe serve` makes about completions).
 *
 * CPU only: it calls kernels.h directly, like `mindpipe selftest`, with the threads the caller set
 * (kernels_set_threads). Weights are float32, laid out by the canonical parameter table of the part.
 *
 * Legend: C model width, A a block's attention width (heads × head size), NH its heads, R its MLP
 * ratio, V vocabulary, T context (model.seq_len), S cache slots (sequences in flight), B rows of a
 * step (≤ S). */
#ifndef MP_DECODER_H
#define MP_DECODER_H

#include <stddef.h>

#include "params.h"

typedef struct {
    model_cfg_t cfg;           /* the whole model's shape (cfg.shape: shape below, or NULL) */
    block_shape_t *shape;      /* (L) per layer, owned; NULL when the model has no model.blocks */
    param_table_t tab;         /* the part held: blocks [layer0, layer0 + nlayers), embed, final */
    param_view_t p;
    float *params;             /* tab.total floats */
    int layer0, nlayers, has_embed, has_final;
    int slots, T, Amax, KAmax, RCmax;
    float *kv;                 /* (nlayers, S, 2, T, KAmax): keys then values of each slot, rows of the
                                  block's KA (its kv heads: grouped-query attention caches those only) */
    /* one step's scratch, for S rows */
    float *ln, *mean, *rstd;   /* (S,C), (S), (S) */
    float *qkv, *atty, *att;   /* (S,Amax+2·KAmax), (S,Amax), (S,NHmax,T) */
    float *fch, *act;          /* (S,2·RCmax): fc's output (llama: [gate | up]); (S,RCmax): SwiGLU's */
    float *rope;               /* (T, hs): the rotary table (llama), else NULL */
    const float **kp, **vp;    /* (S) cache rows of each step row, for the attention kernel */
    int *pos1;                 /* (S) */
} decoder_t;

/* A decoder for blocks [layer0, layer0 + nlayers) of the model cfg (cfg.shape may be NULL: every
 * block h{heads}m{mlp_ratio}; a supernet's cfg is refused: export a subnet first), with the
 * embeddings when has_embed and the final LayerNorm and head when has_final, and a cache of `slots`
 * sequences of up to cfg.seq_len tokens. Weights zero until decoder_load. MP_OK or MP_ERR (reported). */
int decoder_create(decoder_t *dec_p, const model_cfg_t *cfg, int layer0, int nlayers, int has_embed, int has_final,
                   int slots);
void decoder_destroy(decoder_t *dec);

/* The weights of the part from checkpoint `path` (any layout it was written on: checkpoints hold
 * every tensor once at its global shape; a plain model or an exported subnet), verified by their
 * checksums. A file whose model is not cfg's is refused naming what differs. *step_p: its step
 * (may be NULL). MP_OK or MP_ERR (reported; the weights unchanged). */
int decoder_load(decoder_t *dec, const char *path, long *step_p);

/* x (B,C) = wte[tok[b]] + wpe[pos[b]]: the first stage's input rows. 0 ≤ pos[b] < T. */
void decoder_embed(const decoder_t *dec, float *x, const int *tok, const int *pos, int B);
/* In place on the residual stream x (B,C): the part's blocks for row b of sequence slot[b] at
 * position pos[b], writing that position's keys and values into the slot's cache and attending to
 * positions 0..pos[b] of it (positions below pos[b] must have been fed before, since the slot was
 * last reset). Slots of one step are distinct. */
void decoder_blocks(decoder_t *dec, float *x, const int *slot, const int *pos, int B);
/* logits (B,V) = LN_f(x) · wteᵀ; x (B,C) is overwritten (the last stage only). */
void decoder_head(decoder_t *dec, float *logits, float *x, int B);
/* The three above on a whole model: logits (B,V) of feeding tok[b] at pos[b] to slot[b]; x (B,C)
 * is scratch. */
void decoder_step(decoder_t *dec, float *logits, float *x, const int *tok, const int *slot, const int *pos, int B);

#endif
