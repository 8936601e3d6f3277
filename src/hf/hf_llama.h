/* Hugging Face's Llama (`LlamaForCausalLM`) as a directory: model.safetensors and config.json.
 *
 * Our llama family (ARCHITECTURE.md §3) is their model: RMSNorm, rotary embeddings by rotate_half
 * (so no permutation of q and k), grouped-query attention, SwiGLU, no biases. Names, with
 * A = heads·hs, KA = kv_heads·hs, F = ffn_dim; ours stack what theirs keep apart, by rows:
 *   wte (V, C)                         model.embed_tokens.weight (V, C)
 *   h.{l}.ln1.w (C)                    model.layers.{l}.input_layernorm.weight
 *   h.{l}.attn.qkv.w (A+2KA, C) rows [0, A)          .self_attn.q_proj.weight (A, C)
 *                               rows [A, A+KA)       .self_attn.k_proj.weight (KA, C)
 *                               rows [A+KA, A+2KA)   .self_attn.v_proj.weight (KA, C)
 *   h.{l}.attn.proj.w (C, A)           .self_attn.o_proj.weight
 *   h.{l}.ln2.w (C)                    .post_attention_layernorm.weight
 *   h.{l}.mlp.fc.w (2F, C)  rows [0, F)   .mlp.gate_proj.weight (F, C)
 *                           rows [F, 2F)  .mlp.up_proj.weight (F, C)
 *   h.{l}.mlp.proj.w (C, F)            .mlp.down_proj.weight
 *   lnf.w (C)                          model.norm.weight
 *   lm_head.w (V, C), untied only      lm_head.weight
 * A tied model (tie_word_embeddings true) has no lm_head.weight, as save_pretrained leaves it; on
 * reading one that has it, it must equal the embedding. Every tensor is a matrix's (out, in), as
 * ours, so none is transposed.
 *
 * A supernet, a skip block or a per-block shape is no LlamaForCausalLM: refused. */
#ifndef MP_HF_LLAMA_H
#define MP_HF_LLAMA_H

#include <stddef.h>
#include <stdint.h>

#include "params.h"

#define HF_INDEX_FILE "model.safetensors.index.json"

/* Whether cfg is a LlamaForCausalLM: MP_OK, or MP_ERR with why not in why_p (n bytes). */
int hf_llama_fits(const model_cfg_t *cfg, char *why_p, size_t n);

/* Writes the weights (every tensor as dtype: "F32" or "BF16") and dir/config.json (dir made if missing;
 * each file replaced atomically) from buf, laid out by gtab, the whole canonical model (tp 1). The
 * weights: dir/model.safetensors when they fit in shard_bytes (0: no limit); else, as
 * save_pretrained's max_shard_size does, dir/model-0000i-of-0000N.safetensors, tensors in order, a
 * shard closed before the tensor that would take it past shard_bytes (a larger tensor alone), with
 * dir/model.safetensors.index.json ({"metadata": {"total_size": bytes}, "weight_map": {tensor:
 * shard}}) written last. The other form's file, left by an earlier export, is removed (a loader
 * would otherwise choose). MP_OK, or MP_ERR naming the file. */
int hf_llama_write(const char *dir, const param_table_t *gtab, const float *buf, const char *dtype,
                   uint64_t shard_bytes);

/* Checks dir/config.json against the deck's model (gtab->cfg), each disagreement refused naming the
 * key, its value and the deck's key and value: num_hidden_layers, hidden_size, num_attention_heads,
 * num_key_value_heads (absent: num_attention_heads), intermediate_size, vocab_size, rope_theta
 * (absent: 10000), rms_norm_eps (absent: 1e-6), tie_word_embeddings (absent: false), as LlamaConfig's
 * defaults; model_type "llama", hidden_act "silu", head_dim hidden_size / num_attention_heads,
 * attention_bias and mlp_bias false and rope_scaling null where present; max_position_embeddings is
 * not read (rotary embeddings have no table). Then the weights, dir/model.safetensors or the shards
 * dir/model.safetensors.index.json names (both present: refused; a shard name with a '/', a shard
 * missing, a tensor not in the shard the index gives or in a shard the index does not give, refused
 * naming the index, the shard and the tensor): every tensor present, F32,
 * BF16 or F16, at the shape the config gives; none unknown (the rotary inv_freq buffers of older
 * files ignored); a tied model's lm_head.weight equal to the embedding. MP_OK, or MP_ERR naming the
 * file and the key. One process. */
int hf_llama_check(const char *dir, const param_table_t *gtab);

/* Fills buf, laid out by local (any rank's table), from dir/model.safetensors, which has passed
 * hf_llama_check: the stacked tensors assembled from their parts, each element converted to float
 * exactly. MP_OK, or MP_ERR naming the file and the key; buf may be partly written then. */
int hf_llama_load(const char *dir, const param_table_t *gtab, const param_table_t *local, float *buf);

#endif
