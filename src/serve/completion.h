/* One completion on a whole-model decoder: the prompt fed token by token through the KV cache, then
 * tokens sampled and fed back until max_tokens or the context is full. Tokens are ids of the
 * checkpoint's tokenizer (the caller encodes and decodes: generate.c, http.c). */
#ifndef MP_COMPLETION_H
#define MP_COMPLETION_H

#include <stdint.h>

#include "decoder.h"
#include "sampler.h"

typedef struct {
    const int *prompt;
    int nprompt;
    int max_tokens;        /* ≥ 0; the context cuts a completion at T − nprompt tokens */
    sampler_cfg_t sample;
    uint64_t request_id;   /* with the seed and the position, keys every draw */
    int sample_v;          /* draws among tokens [0, sample_v) only: the tokenizer's vocabulary when the
                              model's is padded past it (gpt2: 50257 of 50304); 0: all V */
    int eos;               /* the tokenizer's end-of-sequence id (tok_eos): drawing it ends the completion,
                              and it is not among the tokens given back; -1: none */
} completion_req_t;

/* Why a prompt cannot be completed on a context of T tokens and vocabulary V (NULL: it can):
 * empty, longer than T − 1 (no room for a token), or a token outside [0, V). */
const char *completion_refusal(const int *prompt, int nprompt, int T, int V);

/* Runs request rq in cache slot `slot` of dec (a whole model: embeddings, every block, head).
 * out: at least max_tokens ints; *nout_p tokens generated (fewer than max_tokens only when the
 * context filled). MP_OK, or MP_ERR (reported: a refused prompt or sampler setting, allocation). */
int completion_run(decoder_t *dec, int slot, const completion_req_t *rq, int *out, int *nout_p);

#endif
