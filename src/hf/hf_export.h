/* `mindpipe export --format hf` of a plain model (hf_export.c). */
#ifndef MP_HF_EXPORT_H
#define MP_HF_EXPORT_H

#include <stdint.h>

#include "run_opts.h"

/* `mindpipe export --format hf`: checkpoint `ckpt` of the deck's plain model (no supernet, no skip
 * block, every block of the model's shape) as Hugging Face's GPT2LMHeadModel, or LlamaForCausalLM for
 * model.arch=llama, in directory `out` (hf_gpt2.h, hf_llama.h: model.safetensors and config.json; bf16:
 * llama's tensors as BF16, refused for GPT-2, whose import reads F32 only; shard_bytes: llama's weights
 * in shards of at most that many bytes with their index (hf_llama.h), 0: one file; refused for GPT-2), with the checkpoint's tokenizer beside them: gpt2's
 * encoder.json and vocab.bpe (from tokenizer_dir, NULL: tok_default_dir) as vocab.json and merges.txt
 * plus a tokenizer_config.json, sp's model as tokenizer.model, nothing for byte and none; the
 * tokenizer is opened and checked against the checkpoint's tokenizer_sha256 before anything is
 * written. One rank. Returns the process exit code. */
int export_hf_main(const run_opts_t *opts, const char *ckpt, const char *tokenizer_dir, const char *out, int bf16,
                   uint64_t shard_bytes);

#endif
