/* A block kind as data (issue 47: one description per model family, not a copy per family in every
 * room): the tensors a block holds, each with its canonical name, its shape in the block's widths,
 * how tensor parallelism splits it and how it is initialised. The parameter table (params.c) lays a
 * block out from its kind; the parameter count and the products' FLOPs are read from it too. GPT-2's
 * block is the one kind today.
 *
 * Widths: C the model's (model.dim), A the block's attention width (its heads × head size) and RC its
 * MLP width (mlp_ratio × C); a block of model.blocks' shape h{H}m{R} has its own A and RC. */
#ifndef MP_BLOCK_KIND_H
#define MP_BLOCK_KIND_H

#include <stddef.h>

#include "params.h"

/* A length made of the block's widths: c·C + a·A + rc·RC. */
typedef struct {
    int c, a, rc;
} bk_len_t;

/* How a tensor starts (param_init): ones (norm weights), zeros (biases), N(0, 0.02) (products and
 * embeddings), or N(0, 0.02/√(2L)) (the products that write into the residual stream, GPT-2's
 * scaling). */
typedef enum { BK_INIT_ONE, BK_INIT_ZERO, BK_INIT_NORMAL, BK_INIT_RESID } bk_init_t;

typedef struct {
    param_kind_t kind;
    const char *suffix;        /* the canonical name after "h.{layer}." (or "h.{layer}.c{k}.") */
    bk_len_t rows, cols;       /* cols all zero: a vector of `rows` */
    param_split_t split;       /* over tensor-parallel ranks */
    int parts;                 /* SPLIT_ROWS: row ranges split separately (qkv's three), else 1 */
    bk_init_t init;
} bk_tensor_t;

typedef struct {
    const char *name;
    int ntensors;
    const bk_tensor_t *tensors; /* in buffer order (the forward's) */
} block_kind_t;

extern const block_kind_t block_kind_gpt2;

/* The kind of a model's blocks. */
const block_kind_t *block_kind_of(const model_cfg_t *cfg);
/* The tensor of kind `kind` in bk, or NULL. */
const bk_tensor_t *block_kind_tensor(const block_kind_t *bk, param_kind_t kind);

static inline int bk_len(bk_len_t l, int C, int A, int RC) { return l.c * C + l.a * A + l.rc * RC; }
static inline int bk_is_matrix(const bk_tensor_t *t) { return t->cols.c || t->cols.a || t->cols.rc; }

/* Floats of one block of widths (C, A, RC), and the multiply-adds per token of its products (its
 * matrices: rows × cols each; attention's scores and mixing are not products of weights). */
size_t block_kind_floats(const block_kind_t *bk, int C, int A, int RC);
double block_kind_macs(const block_kind_t *bk, int C, int A, int RC);

#endif
