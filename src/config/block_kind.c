#include "block_kind.h"

#include <string.h>

/* q, k and v stacked: tensor parallelism gives each rank its heads' rows of each. */
#define QKV_PARTS {{.a = 1}, {.ka = 1}, {.ka = 1}}

/* GPT-2's block: pre-LayerNorm attention (q, k and v in one product, each split over tp ranks
 * separately) and a GELU MLP, every product with a bias. */
static const bk_tensor_t gpt2_tensors[] = {
    {PK_LN1_W, "ln1.w", {.c = 1}, {0}, SPLIT_NONE, 1, BK_INIT_ONE, {{0}}},
    {PK_LN1_B, "ln1.b", {.c = 1}, {0}, SPLIT_NONE, 1, BK_INIT_ZERO, {{0}}},
    {PK_QKV_W, "attn.qkv.w", {.a = 1, .ka = 2}, {.c = 1}, SPLIT_ROWS, 3, BK_INIT_NORMAL, QKV_PARTS},
    {PK_QKV_B, "attn.qkv.b", {.a = 1, .ka = 2}, {0}, SPLIT_ROWS, 3, BK_INIT_ZERO, QKV_PARTS},
    {PK_PROJ_W, "attn.proj.w", {.c = 1}, {.a = 1}, SPLIT_COLS, 1, BK_INIT_RESID, {{0}}},
    {PK_PROJ_B, "attn.proj.b", {.c = 1}, {0}, SPLIT_NONE, 1, BK_INIT_ZERO, {{0}}},
    {PK_LN2_W, "ln2.w", {.c = 1}, {0}, SPLIT_NONE, 1, BK_INIT_ONE, {{0}}},
    {PK_LN2_B, "ln2.b", {.c = 1}, {0}, SPLIT_NONE, 1, BK_INIT_ZERO, {{0}}},
    {PK_FC_W, "mlp.fc.w", {.rc = 1}, {.c = 1}, SPLIT_ROWS, 1, BK_INIT_NORMAL, {{0}}},
    {PK_FC_B, "mlp.fc.b", {.rc = 1}, {0}, SPLIT_ROWS, 1, BK_INIT_ZERO, {{0}}},
    {PK_FCPROJ_W, "mlp.proj.w", {.c = 1}, {.rc = 1}, SPLIT_COLS, 1, BK_INIT_RESID, {{0}}},
    {PK_FCPROJ_B, "mlp.proj.b", {.c = 1}, {0}, SPLIT_NONE, 1, BK_INIT_ZERO, {{0}}},
};

const block_kind_t block_kind_gpt2 = {.name = "gpt2",
                                     .ntensors = (int)(sizeof gpt2_tensors / sizeof gpt2_tensors[0]),
                                     .tensors = gpt2_tensors,
                                     .has_wpe = 1,
                                     .final_norm_bias = 1,
                                     .rotary = 0,
                                     .cuda_proven = 1};

/* Llama's block (Hugging Face's LlamaDecoderLayer): RMSNorm, q, k and v in one product of
 * (A + 2·KA) rows (q_proj, k_proj, v_proj stacked; k and v of the kv heads), o_proj, RMSNorm, and
 * gate_proj and up_proj in one product of 2·RC rows (gate rows first: swiglu_forward's packed
 * input), down_proj; no biases. Tensor parallelism splits the stacked products by parts as GPT-2's
 * qkv (each rank: its q, k and v rows; its gate and up rows). */
static const bk_tensor_t llama_tensors[] = {
    {PK_LN1_W, "ln1.w", {.c = 1}, {0}, SPLIT_NONE, 1, BK_INIT_ONE, {{0}}},
    {PK_QKV_W, "attn.qkv.w", {.a = 1, .ka = 2}, {.c = 1}, SPLIT_ROWS, 3, BK_INIT_NORMAL, QKV_PARTS},
    {PK_PROJ_W, "attn.proj.w", {.c = 1}, {.a = 1}, SPLIT_COLS, 1, BK_INIT_RESID, {{0}}},
    {PK_LN2_W, "ln2.w", {.c = 1}, {0}, SPLIT_NONE, 1, BK_INIT_ONE, {{0}}},
    {PK_FC_W, "mlp.fc.w", {.rc = 2}, {.c = 1}, SPLIT_ROWS, 2, BK_INIT_NORMAL, {{.rc = 1}, {.rc = 1}}},
    {PK_FCPROJ_W, "mlp.proj.w", {.c = 1}, {.rc = 1}, SPLIT_COLS, 1, BK_INIT_RESID, {{0}}},
};

/* cuda_proven 0: the rmsnorm, rope, swiglu and grouped-query kernels are tested emulated on the CPU
 * (validation/cuda) but have not yet run on a GPU (issue 47). */
const block_kind_t block_kind_llama = {.name = "llama",
                                      .ntensors = (int)(sizeof llama_tensors / sizeof llama_tensors[0]),
                                      .tensors = llama_tensors,
                                      .has_wpe = 0,
                                      .final_norm_bias = 0,
                                      .rotary = 1,
                                      .cuda_proven = 0};

static const block_kind_t *const kinds[ARCH_COUNT] = {[ARCH_GPT2] = &block_kind_gpt2, [ARCH_LLAMA] = &block_kind_llama};

const block_kind_t *block_kind_of(const model_cfg_t *cfg) { return kinds[cfg->arch]; }

const block_kind_t *block_kind_named(const char *name, model_arch_t *arch)
{
    for (int a = 0; a < ARCH_COUNT; a++)
        if (strcmp(kinds[a]->name, name) == 0) {
            if (arch) *arch = (model_arch_t)a;
            return kinds[a];
        }
    return NULL;
}

bk_widths_t block_widths(const model_cfg_t *cfg, block_shape_t sh)
{
    const int hs = cfg->dim / cfg->heads;
    return (bk_widths_t){cfg->dim, sh.heads * hs, shape_kv_heads(cfg, sh) * hs, shape_mlp_width(cfg, sh)};
}

const bk_tensor_t *block_kind_tensor(const block_kind_t *bk, param_kind_t kind)
{
    for (int i = 0; i < bk->ntensors; i++)
        if (bk->tensors[i].kind == kind) return &bk->tensors[i];
    return NULL;
}

cm_model_t block_kind_cost_model(const model_cfg_t *cfg, int batch)
{
    const block_kind_t *bk = block_kind_of(cfg);
    const bk_widths_t w = block_widths(cfg, (block_shape_t){cfg->heads, cfg->mlp_ratio});
    const bk_tensor_t *qkv = block_kind_tensor(bk, PK_QKV_W), *fc = block_kind_tensor(bk, PK_FC_W);
    return (cm_model_t){
        .L = cfg->layers, .C = cfg->dim, .NH = cfg->heads, .T = cfg->seq_len, .V = cfg->vocab, .R = cfg->mlp_ratio,
        .batch = batch,
        .QKV = bk_len(qkv->rows, w), .FC = bk_len(fc->rows, w), .F = w.RC,
        .bias = block_kind_tensor(bk, PK_QKV_B) != NULL,
        .norm = 1 + (block_kind_tensor(bk, PK_LN1_B) != NULL),
        .wpe = bk->has_wpe,
        .untied = cfg->untied,
    };
}

size_t block_kind_floats(const block_kind_t *bk, bk_widths_t w)
{
    size_t n = 0;
    for (int i = 0; i < bk->ntensors; i++) {
        const bk_tensor_t *t = &bk->tensors[i];
        n += (size_t)bk_len(t->rows, w) * (size_t)(bk_is_matrix(t) ? bk_len(t->cols, w) : 1);
    }
    return n;
}

double block_kind_macs(const block_kind_t *bk, bk_widths_t w)
{
    double n = 0.0;
    for (int i = 0; i < bk->ntensors; i++) {
        const bk_tensor_t *t = &bk->tensors[i];
        if (bk_is_matrix(t)) n += (double)bk_len(t->rows, w) * bk_len(t->cols, w);
    }
    return n;
}
