#include "block_kind.h"

/* GPT-2's block: pre-LayerNorm attention (q, k and v in one product, each split over tp ranks
 * separately) and a GELU MLP, every product with a bias. */
static const bk_tensor_t gpt2_tensors[] = {
    {PK_LN1_W, "ln1.w", {1, 0, 0}, {0}, SPLIT_NONE, 1, BK_INIT_ONE},
    {PK_LN1_B, "ln1.b", {1, 0, 0}, {0}, SPLIT_NONE, 1, BK_INIT_ZERO},
    {PK_QKV_W, "attn.qkv.w", {0, 3, 0}, {1, 0, 0}, SPLIT_ROWS, 3, BK_INIT_NORMAL},
    {PK_QKV_B, "attn.qkv.b", {0, 3, 0}, {0}, SPLIT_ROWS, 3, BK_INIT_ZERO},
    {PK_PROJ_W, "attn.proj.w", {1, 0, 0}, {0, 1, 0}, SPLIT_COLS, 1, BK_INIT_RESID},
    {PK_PROJ_B, "attn.proj.b", {1, 0, 0}, {0}, SPLIT_NONE, 1, BK_INIT_ZERO},
    {PK_LN2_W, "ln2.w", {1, 0, 0}, {0}, SPLIT_NONE, 1, BK_INIT_ONE},
    {PK_LN2_B, "ln2.b", {1, 0, 0}, {0}, SPLIT_NONE, 1, BK_INIT_ZERO},
    {PK_FC_W, "mlp.fc.w", {0, 0, 1}, {1, 0, 0}, SPLIT_ROWS, 1, BK_INIT_NORMAL},
    {PK_FC_B, "mlp.fc.b", {0, 0, 1}, {0}, SPLIT_ROWS, 1, BK_INIT_ZERO},
    {PK_FCPROJ_W, "mlp.proj.w", {1, 0, 0}, {0, 0, 1}, SPLIT_COLS, 1, BK_INIT_RESID},
    {PK_FCPROJ_B, "mlp.proj.b", {1, 0, 0}, {0}, SPLIT_NONE, 1, BK_INIT_ZERO},
};

const block_kind_t block_kind_gpt2 = {"gpt2", (int)(sizeof gpt2_tensors / sizeof gpt2_tensors[0]), gpt2_tensors};

const block_kind_t *block_kind_of(const model_cfg_t *cfg)
{
    (void)cfg; /* one family today: the deck's model.arch chooses once there are more */
    return &block_kind_gpt2;
}

const bk_tensor_t *block_kind_tensor(const block_kind_t *bk, param_kind_t kind)
{
    for (int i = 0; i < bk->ntensors; i++)
        if (bk->tensors[i].kind == kind) return &bk->tensors[i];
    return NULL;
}

size_t block_kind_floats(const block_kind_t *bk, int C, int A, int RC)
{
    size_t n = 0;
    for (int i = 0; i < bk->ntensors; i++) {
        const bk_tensor_t *t = &bk->tensors[i];
        n += (size_t)bk_len(t->rows, C, A, RC) * (size_t)(bk_is_matrix(t) ? bk_len(t->cols, C, A, RC) : 1);
    }
    return n;
}

double block_kind_macs(const block_kind_t *bk, int C, int A, int RC)
{
    double n = 0.0;
    for (int i = 0; i < bk->ntensors; i++) {
        const bk_tensor_t *t = &bk->tensors[i];
        if (bk_is_matrix(t)) n += (double)bk_len(t->rows, C, A, RC) * bk_len(t->cols, C, A, RC);
    }
    return n;
}
