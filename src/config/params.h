/* The GPT parameter table: every tensor's canonical name (ARCHITECTURE.md §3), shape and offset in one
 * contiguous float buffer. Parameters, gradients and both AdamW moments are separate buffers laid
 * out by the same table, so one table describes all four and named views point into any of them.
 *
 * A table covers one or more contiguous ranges ("chunks") of blocks plus, optionally, the
 * embeddings (wte, wpe) and the final LayerNorm with the tied LM head (lnf and a copy of wte): a
 * pipeline stage builds the table of what it holds (one chunk, or v of them under the interleaved
 * schedule, in ascending layer order). Local block i is the i-th block held.
 *
 * A block of model.blocks' shape h{H}m{R} has attention width A = H·(C ÷ model.heads) in place of C
 * (qkv (3A, C), proj (C, A)) and R of its own; a skip block has no tensors.
 *
 * Legend: L layers, C channels, R mlp_ratio, V vocab, T seq_len. */
#ifndef MP_PARAMS_H
#define MP_PARAMS_H

#include <stddef.h>

#define PARAM_NAME_MAX 64
#define PARAM_MAX_DIMS 2
#define PARAM_MAX_CHUNKS 16 /* model chunks per rank: parallel.virtual_stages ≤ this */
#define PARAM_MAX_PARTS 3   /* row ranges a stacked product splits separately (q, k, v) */

/* One block's shape: `heads` heads of the model's head size (dim ÷ model.heads) and an MLP of
 * mlp_ratio·dim; heads = 0 is `skip`, the identity, with no parameters. */
typedef struct {
    int heads, mlp_ratio;
} block_shape_t;

/* The model family (model.arch): which block kind and model-level tensors it has (block_kind.h). */
typedef enum { ARCH_GPT2 = 0, ARCH_LLAMA = 1, ARCH_COUNT } model_arch_t;

typedef struct {
    int layers, dim, heads, seq_len, vocab, mlp_ratio;
    /* The family and its own keys. Zero is GPT-2's: every zero-initialised model_cfg_t is the GPT-2
     * it always was. Read them through the cfg_ helpers below. */
    model_arch_t arch;
    int kv_heads;        /* key/value heads (grouped-query attention; model.kv_heads); 0: = heads */
    int ffn_dim;         /* llama: SwiGLU's hidden width (model.ffn_dim); 0: mlp_ratio × dim */
    float rope_theta;    /* llama: rotary embeddings' base (model.rope_theta) */
    float norm_eps;      /* llama: RMSNorm's epsilon (model.norm_eps); GPT-2's LayerNorm has its own 1e-5 */
    int untied;          /* the LM head is its own tensor (model.tie_embeddings = false); 0: tied to wte */
    const block_shape_t *shape; /* per layer ([model] blocks, owned by the deck); NULL: every block
                                   is h{heads}m{mlp_ratio} */
    /* supernet: layers with choice[l] = 1 hold ncand candidates, each a whole block of shape
     * cand[k] with its own tensors h.{l}.c{k}.* (a skip candidate has none); NULL: none */
    const unsigned char *choice;
    const block_shape_t *cand;
    int ncand;
    /* supernet.resident = host: the device buffers hold the shared tensors and this many slots per
     * choice block, each for one candidate at a time (model_place); 0: every candidate */
    int cand_slots;
} model_cfg_t;

static inline int cfg_is_choice(const model_cfg_t *c, int l) { return c->choice && c->choice[l]; }

/* Block l's heads (0: skip) and MLP ratio, and its attention width heads · head size. */
static inline int cfg_heads(const model_cfg_t *c, int l) { return c->shape ? c->shape[l].heads : c->heads; }
static inline int cfg_ratio(const model_cfg_t *c, int l) { return c->shape ? c->shape[l].mlp_ratio : c->mlp_ratio; }
static inline int cfg_attn_width(const model_cfg_t *c, int l) { return cfg_heads(c, l) * (c->dim / c->heads); }
/* Key/value heads of the model (model.kv_heads; multi-head attention: heads). */
static inline int cfg_kv_heads(const model_cfg_t *c) { return c->kv_heads ? c->kv_heads : c->heads; }
/* A block of shape sh: its key/value heads (its query heads grouped as the model's are), and its MLP's
 * hidden width (GPT-2: mlp_ratio × dim; llama: mlp_ratio × ffn_dim, mlp_ratio being 1 unless a
 * block's shape says otherwise). */
static inline int shape_kv_heads(const model_cfg_t *c, block_shape_t sh) { return sh.heads / (c->heads / cfg_kv_heads(c)); }
static inline int shape_mlp_width(const model_cfg_t *c, block_shape_t sh)
{
    return sh.mlp_ratio * (c->ffn_dim ? c->ffn_dim : c->dim);
}

/* Whether a block of shape sh is `skip`, the identity: no tensors, no work. The one definition of a
 * skip: every test of one (a layer, a supernet candidate) goes through it. */
static inline int shape_is_skip(block_shape_t sh) { return sh.heads == 0; }
/* Whether block l is skip by its own shape. A choice block runs one of its candidates instead: ask
 * shape_is_skip of that candidate (cfg->cand[k]). */
static inline int block_is_skip(const model_cfg_t *c, int l)
{
    return shape_is_skip((block_shape_t){cfg_heads(c, l), cfg_ratio(c, l)});
}

/* Which tensor of a block (or of the model) an entry is. */
typedef enum {
    PK_WTE, PK_WPE, PK_LNF_W, PK_LNF_B,
    PK_LN1_W, PK_LN1_B, PK_QKV_W, PK_QKV_B, PK_PROJ_W, PK_PROJ_B,
    PK_LN2_W, PK_LN2_B, PK_FC_W, PK_FC_B, PK_FCPROJ_W, PK_FCPROJ_B,
    PK_HEAD_W, /* the untied LM head (model.tie_embeddings = false), "lm_head.w" (V, C) */
    PK_COUNT
} param_kind_t;

/* How a tensor is split over tensor-parallel ranks (Megatron, ARCHITECTURE.md §4). */
typedef enum {
    SPLIT_NONE,  /* replicated: every TP rank holds all of it */
    SPLIT_ROWS,  /* column-parallel products and the vocab-parallel embedding: a block of rows
                    (for qkv, a block of each of the q, k and v row ranges: `parts` = 3) */
    SPLIT_COLS   /* row-parallel products: a block of columns */
} param_split_t;

typedef struct {
    char name[PARAM_NAME_MAX]; /* canonical, e.g. "h.3.attn.qkv.w" */
    param_kind_t kind;
    int layer;                 /* block index, -1 for model-level tensors */
    int cand;                  /* supernet candidate of a choice block, -1 for every other tensor */
    int block;                 /* local block index in the table (views' h[block]), -1 likewise */
    int ndim;
    int shape[PARAM_MAX_DIMS];  /* held here (this TP rank's shard) */
    int gshape[PARAM_MAX_DIMS]; /* canonical, in checkpoints (wte: the real vocab V) */
    param_split_t split;
    int parts;                 /* SPLIT_ROWS: row ranges split separately (3 for qkv, else 1) */
    int part_rows[PARAM_MAX_PARTS]; /* parts > 1: each range's global rows (q's A, k's KA, v's KA) */
    size_t numel;
    size_t offset;             /* in floats, into the buffer */
    int decay;                 /* AdamW weight decay applies (matrices and embeddings only) */
} param_entry_t;

typedef struct {
    model_cfg_t cfg;
    int tp, tp_rank;       /* tensor-parallel degree and this rank's place */
    int vocab_pad;         /* vocab padded to a multiple of tp (rows past cfg.vocab are zero) */
    int layer0, nlayers;   /* the first block held, and how many blocks are held in all */
    int nchunks;                               /* contiguous ranges of blocks */
    int chunk_layer0[PARAM_MAX_CHUNKS];        /* first block of each range (ascending) */
    int chunk_nlayers[PARAM_MAX_CHUNKS];       /* blocks in each range */
    int has_embed;         /* wte, wpe */
    int has_final;         /* lnf */
    int count;
    param_entry_t *entries;
    size_t total;          /* floats in a buffer laid out by this table */
    size_t cand_off;       /* where the supernet's candidates begin: every tensor below is shared
                              (no candidates: total) */
} param_table_t;

/* Views into a buffer laid out by a table; NULL for tensors the table does not hold. */
typedef struct {
    float *ln1w, *ln1b;    /* (C) */
    float *qkvw, *qkvb;    /* (3C, C), (3C) */
    float *projw, *projb;  /* (C, C), (C) */
    float *ln2w, *ln2b;    /* (C) */
    float *fcw, *fcb;      /* (RC, C), (RC) */
    float *fcprojw, *fcprojb; /* (C, RC), (C) */
} block_view_t;

typedef struct {
    float *wte;            /* (V, C) */
    float *head;           /* (V, C) the LM head: wte (tied; on a last stage without the embedding its
                              copy) or lm_head.w (untied) */
    float *wpe;            /* (T, C) */
    float *lnfw, *lnfb;    /* (C) */
    block_view_t *h;       /* nlayers entries; h[i] is local block i (param_block_layer) */
    int nlayers;
    block_view_t *hc;      /* supernet: nlayers × ncand, candidate k of local block i at i·ncand + k
                              (h[i] is then whichever the model selects); NULL without candidates */
    int ncand;
} param_view_t;

/* Builds the table of TP rank tp_rank of tp (1, 0: the whole, canonical model). The caller has
 * checked that tp divides heads and mlp_ratio·dim. MP_OK, or MP_ERR (allocation). */
int param_table_build(param_table_t *tab_p, const model_cfg_t *cfg, int layer0, int nlayers, int has_embed,
                      int has_final, int tp, int tp_rank);
/* The same for nchunks ranges [layer0s[c], layer0s[c] + nlayers_s[c]), ascending and disjoint. */
int param_table_build_chunks(param_table_t *tab_p, const model_cfg_t *cfg, int nchunks, const int *layer0s,
                             const int *nlayers_s, int has_embed, int has_final, int tp, int tp_rank);
/* The model's block index of local block i. */
int param_block_layer(const param_table_t *tab, int i);

/* Row range p of a row-split entry with parts: its first row and its rows in the canonical tensor
 * (*g0, *gn) and in this rank's shard (*l0, *ln = gn ÷ tp; each rank holds the same share of every
 * range). With one part: the whole. */
void param_part(const param_table_t *tab, const param_entry_t *e, int p, size_t *g0, size_t *gn, size_t *l0,
                size_t *ln);

/* Flat index into the canonical (global-shape) tensor of element `local` of this rank's shard, or
 * (size_t)-1 for a padding row of the vocab-parallel embedding. */
size_t param_global_index(const param_table_t *tab, const param_entry_t *e, size_t local, int tp_rank);
void param_table_free(param_table_t *tab);
/* Entry by canonical name, or NULL. */
const param_entry_t *param_table_find(const param_table_t *tab, const char *name);

/* The buffer range [off, off+n) of one gradient bucket: block `layer` (held by the table),
 * PARAM_RANGE_FINAL (lnf, and an untied lm_head) or PARAM_RANGE_EMBED (wte, wpe). n = 0 when the table lacks it. */
enum { PARAM_RANGE_FINAL = -1, PARAM_RANGE_EMBED = -2 };
void param_table_range(const param_table_t *tab, int layer, size_t *off_p, size_t *n_p);

/* The buffer range [off, off+n) of candidate cand of local block `block` (n = 0: it holds no
 * tensors, or the table has no such candidate). */
void param_cand_range(const param_table_t *tab, int block, int cand, size_t *off_p, size_t *n_p);

/* Fills view_p with pointers into buf. MP_OK or MP_ERR (allocation of the block array). */
int param_view_bind(param_view_t *view_p, const param_table_t *tab, float *buf);
/* The same for a buffer that holds [0, limit) of the table's layout only: the tensors beyond stay
 * NULL. */
int param_view_bind_upto(param_view_t *view_p, const param_table_t *tab, float *buf, size_t limit);
/* Points the view of candidate cand of local block `block` at `at`, where its range
 * (param_cand_range) lies copied; at = NULL: nowhere (its pointers NULL). */
void param_view_place(param_view_t *view, const param_table_t *tab, int block, int cand, float *at);
void param_view_free(param_view_t *view);

/* GPT-2 initialisation from the counter-based generator, keyed by (seed, name, element index):
 * matrices and embeddings N(0, 0.02), the two residual projections N(0, 0.02/sqrt(2L)),
 * biases 0, LayerNorm weights 1. The same values whatever the layout. */
void param_init(const param_table_t *tab, float *buf, unsigned long long seed);

/* model.blocks as text ("h4m4,h2m1,skip"; "" when cfg->shape is NULL), truncated to n bytes. */
void param_blocks_text(const model_cfg_t *cfg, char *buf, size_t n);

/* Parameters of the whole model (all blocks, embeddings, final LN). */
size_t param_count_model(const model_cfg_t *cfg);

/* Padded length of a buffer of `total` floats sharded `shards` ways (a multiple of 16·shards): what
 * the parameter, gradient and moment buffers are allocated with, so every ZeRO-1 shard has one size. */
size_t param_padded(size_t total, int shards);

#endif
