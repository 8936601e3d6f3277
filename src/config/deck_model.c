/* The model a deck describes (deck_model.h). */
#include "deck_model.h"

model_cfg_t deck_model_cfg(const deck_t *d, const unsigned char *choice)
{
    const int llama = d->model.arch_kind == ARCH_LLAMA;
    /* candidates only with choice blocks: ncand > 0 is what marks a supernet to its readers (the
     * model's selection and slots, decoder_create's refusal) */
    return (model_cfg_t){
        .layers = d->model.layers,
        .dim = d->model.dim,
        .heads = d->model.heads,
        .seq_len = d->model.seq_len,
        .vocab = d->model.vocab,
        .mlp_ratio = d->model.mlp_ratio,
        .arch = d->model.arch_kind,
        .kv_heads = d->model.kv_heads,
        .ffn_dim = d->model.ffn_dim,
        /* llama's; zero for gpt2, whose deck keeps them at their defaults and whose model reads neither */
        .rope_theta = llama ? (float)d->model.rope_theta : 0.0f,
        .norm_eps = llama ? (float)d->model.norm_eps : 0.0f,
        .untied = !d->model.tie_embeddings,
        .shape = d->model.shapes.n ? d->model.shapes.shape : NULL,
        .choice = choice,
        .cand = choice ? d->supernet.cands.shape : NULL,
        .ncand = choice ? d->supernet.cands.n : 0,
        .cand_slots = 0,
    };
}
