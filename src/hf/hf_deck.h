/* config.json onto the deck: the model keys a Hugging Face model directory's config.json gives, as
 * deck values (deck.h's deck_imports_t), for `train --init-from hf:DIR`. The deck takes each where it
 * does not set the key itself and refuses one it sets to another value (deck_load_imports).
 *
 *   model_type "llama" (LlamaForCausalLM)          model_type "gpt2" (GPT2LMHeadModel)
 *   model_type             model.arch = llama      model_type       model.arch = gpt2
 *   num_hidden_layers      model.layers            n_layer          model.layers
 *   hidden_size            model.dim               n_embd           model.dim
 *   num_attention_heads    model.heads             n_head           model.heads
 *   num_key_value_heads    model.kv_heads          n_inner          model.mlp_ratio (n_inner / n_embd;
 *   intermediate_size      model.ffn_dim                                             null: 4)
 *   vocab_size             model.vocab             vocab_size       model.vocab
 *   rope_theta             model.rope_theta
 *   rms_norm_eps           model.norm_eps
 *   tie_word_embeddings    model.tie_embeddings
 *   max_position_embeddings model.seq_len (fill)  n_positions     model.seq_len (fill)
 * Absent llama keys are LlamaConfig's defaults (num_key_value_heads: num_attention_heads; rope_theta
 * 10000, rms_norm_eps 1e-6, tie_word_embeddings false), as transformers loads the file. model.seq_len
 * is the training window, not the model's shape: the file's context is taken only where the deck sets
 * none (fill), and a deck's own is kept: GPT-2's check needs n_positions ≥ model.seq_len (wpe's first
 * rows), llama's rotary positions have no table. A key of the wrong kind, a model_type of another
 * family or none is not taken: the model's check (hf_llama_check, hf_gpt2_check) then refuses the file
 * naming the key, as it compares every key with the deck. */
#ifndef MP_HF_DECK_H
#define MP_HF_DECK_H

#include "deck.h"

/* dir/config.json's model keys into *imp (imp->source: the file). MP_OK, or MP_ERR naming the file
 * when it cannot be read as JSON (hf_config_read). One process: rank 0, which broadcasts *imp. */
int hf_deck_imports(const char *dir, deck_imports_t *imp);

#endif
