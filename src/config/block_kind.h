/* A block kind as data (issue 47: one description per model family, not a copy per family in every
 * room): the tensors a block holds, each with its canonical name, its shape in the block's widths,
 * how tensor parallelism splits it and how it is initialised. The parameter table (params.c) lays a
 * block out from its kind; the parameter count and the products' FLOPs are read from it too. GPT-2's
 * block is the one kind today.
 *
 * Widths (bk_widths_t): C the model's (model.dim), A the block's attention width (its heads × head
 * size), KA its key/value width (its kv heads × head size; A without grouped-query attention) and RC
 * its MLP's hidden width (mlp_ratio × C for GPT-2, model.ffn_dim for llama); a block of
 * model.blocks' shape h{H}m{R} has its own A, KA and RC. */
#ifndef MP_BLOCK_KIND_H
#define MP_BLOCK_KIND_H

#include <stddef.h>

#include "costmodel.h"
#include "params.h"

/* A block's widths: the model's C, its query heads' A, its key/value heads' KA (= A without
 * grouped-query attention) and its MLP's hidden RC. */
typedef struct {
    int C, A, KA, RC;
} bk_widths_t;

/* A length made of the block's widths: c·C + a·A + ka·KA + rc·RC. */
typedef struct {
    int c, a, ka, rc;
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
    bk_len_t part[PARAM_MAX_PARTS]; /* parts > 1: each range's rows (q's A, k's and v's KA; gate's and up's RC) */
} bk_tensor_t;

typedef struct {
    const char *name;           /* model.arch */
    int ntensors;
    const bk_tensor_t *tensors; /* in buffer order (the forward's) */
    /* The model-level tensors beside wte (and lnf.w): a learned position table wpe, and a bias of the
     * final norm lnf.b (LayerNorm's; RMSNorm has none). */
    int has_wpe, final_norm_bias;
    /* Rotary positions on q and k (a table of sin/cos by position the forward and the decoder read). */
    int rotary;
    /* Whether its CUDA kernels have run on a GPU (docs/GPU.md): the deck refuses train.device=cuda for a
     * family whose kernels only ever ran emulated, rather than letting a first run be the test. */
    int cuda_proven;
} block_kind_t;

extern const block_kind_t block_kind_gpt2, block_kind_llama;

/* The kind of a model's blocks (model.arch), and the kind named `name` (NULL: none). */
const block_kind_t *block_kind_of(const model_cfg_t *cfg);
const block_kind_t *block_kind_named(const char *name, model_arch_t *arch);

/* The widths of a block of shape sh (not a skip) on the canonical model (tp = 1). */
bk_widths_t block_widths(const model_cfg_t *cfg, block_shape_t sh);
/* The tensor of kind `kind` in bk, or NULL. */
const bk_tensor_t *block_kind_tensor(const block_kind_t *bk, param_kind_t kind);

static inline int bk_len(bk_len_t l, bk_widths_t w) { return l.c * w.C + l.a * w.A + l.ka * w.KA + l.rc * w.RC; }
static inline int bk_is_matrix(const bk_tensor_t *t) { return t->cols.c || t->cols.a || t->cols.ka || t->cols.rc; }

/* The cost model's description of the model (costmodel.h's cm_model_t; the planner's, which knows no
 * block kinds): its uniform block's products' rows from the kind, its biases, norm and position
 * table. batch: the global batch in sequences. */
cm_model_t block_kind_cost_model(const model_cfg_t *cfg, int batch);

/* Floats of one block of widths w, and the multiply-adds per token of its products (its matrices:
 * rows × cols each; attention's scores and mixing are not products of weights). */
size_t block_kind_floats(const block_kind_t *bk, bk_widths_t w);
double block_kind_macs(const block_kind_t *bk, bk_widths_t w);

#endif
