/* Hugging Face's GPT-2 (`GPT2LMHeadModel`) as a directory: model.safetensors and config.json.
 *
 * Our canonical tensors (params.h, ARCHITECTURE.md §3) and theirs are the same model: pre-LN
 * blocks, LayerNorm eps 1e-5, GELU's tanh approximation ("gelu_new"), attention scaled by
 * 1/sqrt(head size), q, k, v the three row ranges of qkv each split into heads of C/heads, the LM
 * head tied to wte. Names and layouts:
 *   wte (V, C)             transformer.wte.weight (V, C)        (the real vocab: no padding rows)
 *   wpe (T, C)             transformer.wpe.weight (T, C)
 *   h.{l}.ln1.w/b          transformer.h.{l}.ln_1.weight/bias
 *   h.{l}.attn.qkv.w (3C, C)  transformer.h.{l}.attn.c_attn.weight (C, 3C)   transposed: Conv1D
 *   h.{l}.attn.proj.w (C, C)  transformer.h.{l}.attn.c_proj.weight (C, C)    transposed
 *   h.{l}.ln2.w/b          transformer.h.{l}.ln_2.weight/bias
 *   h.{l}.mlp.fc.w (RC, C)    transformer.h.{l}.mlp.c_fc.weight (C, RC)      transposed
 *   h.{l}.mlp.proj.w (C, RC)  transformer.h.{l}.mlp.c_proj.weight (RC, C)    transposed
 *   lnf.w/b                transformer.ln_f.weight/bias
 * (biases keep their names' .bias and their shapes). lm_head.weight is not written: the tie, as
 * save_pretrained leaves it and from_pretrained restores it. On reading, names without the
 * "transformer." prefix (the original GPT-2 files) are accepted too, the attention's mask buffers
 * (attn.bias, attn.masked_bias) are ignored, and an lm_head.weight must equal wte.
 *
 * A model whose blocks differ in heads or MLP ratio, has a skip block, is a supernet or of another
 * family (model.arch=llama: hf_llama.h) is not a GPT2LMHeadModel: refused. */
#ifndef MP_HF_GPT2_H
#define MP_HF_GPT2_H

#include <stddef.h>

#include "params.h"

#define HF_WEIGHTS_FILE "model.safetensors"
#define HF_CONFIG_FILE "config.json"

/* Whether cfg is a GPT2LMHeadModel: MP_OK, or MP_ERR with why not in why_p (n bytes), printing
 * nothing. */
int hf_gpt2_fits(const model_cfg_t *cfg, char *why_p, size_t n);

/* Writes dir/model.safetensors and dir/config.json (dir made if missing; each file replaced only
 * atomically) from buf, laid out by gtab, the whole canonical model (tp 1). MP_OK, or MP_ERR
 * naming the file. */
int hf_gpt2_write(const char *dir, const param_table_t *gtab, const float *buf);

/* Checks dir/config.json and dir/model.safetensors against the canonical table gtab. config.json
 * (required: it says which model the weights are) must describe gtab's model: n_layer, n_embd,
 * n_head and vocab_size (the vocabulary without padding, as hf_gpt2_write writes it) equal to the
 * deck's; n_positions at least seq_len (wpe's first seq_len rows are the model's); activation
 * gelu_new or gelu_pytorch_tanh, n_inner null (4 * n_embd) or mlp_ratio * dim, layer_norm_epsilon
 * 1e-5, the attention scaled as ours (GPT2Config's defaults where a key is absent, except the five
 * sizes). model.safetensors: every tensor present, F32, at the shape gtab's model needs (wpe:
 * n_positions rows), no tensor unknown to it, an lm_head.weight equal to wte. One process (rank 0
 * before the others load). MP_OK, or MP_ERR naming the file and the key. */
int hf_gpt2_check(const char *dir, const param_table_t *gtab);

/* Fills buf, laid out by local (any rank's table: its blocks, its TP shard, the vocab padded with
 * zero rows), from dir/model.safetensors, reading only the tensors local holds (of wpe, its first
 * seq_len rows). The file has passed hf_gpt2_check. MP_OK, or MP_ERR naming the file and the key;
 * buf may be partly written then. */
int hf_gpt2_load(const char *dir, const param_table_t *gtab, const param_table_t *local, float *buf);

#endif
