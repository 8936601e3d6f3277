/* `mindpipe generate`: one completion of a prompt from a checkpoint, on the CPU with a key/value
 * cache (src/serve/: decoder, sampler, completion). */
#ifndef MP_GENERATE_H
#define MP_GENERATE_H

#include <stdint.h>

#include "run_opts.h"

typedef struct {
    const char *ckpt, *prompt;
    const char *tokenizer_dir; /* gpt2 checkpoints: the vocabulary's directory (NULL: tok_default_dir) */
    int max_tokens, top_k;
    double temperature;
    uint64_t seed, request_id;
} generate_opts_t;

/* Loads the deck (opts->deck_path and --set), the weights of g->ckpt (any layout; a plain model or
 * an exported subnet) and the tokenizer it was trained with (its /state tokenizer: byte, or gpt2
 * with the vocabulary in g->tokenizer_dir, refused unless its SHA-256 is the checkpoint's), encodes
 * the prompt with it (at most model.seq_len - 1 tokens), and writes the completion's bytes (its
 * max_tokens tokens decoded) to stdout and a summary line to stderr. One process. Returns the
 * process exit code: 0, or 1 after an error naming the cause. */
int generate_main(const run_opts_t *opts, const generate_opts_t *g);

#endif
