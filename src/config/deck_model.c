/* The model a deck describes (deck_model.h). */
#include "deck_model.h"

model_cfg_t deck_model_cfg(const deck_t *d, const unsigned char *choice)
{
    /* candidates only with choice blocks: ncand > 0 is what marks a supernet to its readers (the
     * model's selection and slots, decoder_create's refusal) */
    return (model_cfg_t){
        .layers = d->model.layers,
        .dim = d->model.dim,
        .heads = d->model.heads,
        .seq_len = d->model.seq_len,
        .vocab = d->model.vocab,
        .mlp_ratio = d->model.mlp_ratio,
        .shape = d->model.shapes.n ? d->model.shapes.shape : NULL,
        .choice = choice,
        .cand = choice ? d->supernet.cands.shape : NULL,
        .ncand = choice ? d->supernet.cands.n : 0,
        .cand_slots = 0,
    };
}
