/* The model a deck describes, as the parameter table, the model and the decoder take it (model_cfg_t,
 * params.h): built here once, so every command that makes a model from a deck (training, export,
 * search, generate, serve, profile) makes the same one from the same keys. */
#ifndef MP_DECK_MODEL_H
#define MP_DECK_MODEL_H

#include "deck.h"
#include "params.h"

/* Deck d's model: [model]'s sizes, its family (model.arch and llama's keys: rope_theta and norm_eps
 * zero under gpt2, which has neither) and model.blocks' shapes (cfg.shape NULL when the deck gives none:
 * every block is h{heads}m{mlp_ratio}). With choice (per layer, model.layers bytes: 1 for a choice
 * block, as supernet_layers fills them) the supernet's candidates of supernet.candidates hold its
 * choice blocks; choice = NULL: no candidates, whatever the deck's supernet (a plain model, or a
 * subnet's). cand_slots is 0 (every candidate on the device): a run that keeps candidates on the host
 * sets it.
 *
 * The result points into d and choice (shapes, flags, candidates): it is valid while they are.
 * Cannot fail: the deck's rules (deck_validate) have checked the keys it reads. */
model_cfg_t deck_model_cfg(const deck_t *d, const unsigned char *choice);

#endif
