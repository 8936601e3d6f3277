/* The next token from a row of logits: greedy, or drawn from the temperature-scaled softmax of the
 * top k. A draw is a pure function of (seed, request id, position) through the counter-based
 * generator (core/rng.h, stream RNG_STREAM_SAMPLE), so a completion is the same bytes whatever
 * batch it ran in, on whichever process, and after a failover. */
#ifndef MP_SAMPLER_H
#define MP_SAMPLER_H

#include <stdint.h>

typedef struct {
    float temperature;  /* 0: greedy (the largest logit, the lowest index among equals) */
    int top_k;          /* draw among the k largest logits only; 0: all of them */
    uint64_t seed;
} sampler_cfg_t;

/* Why s cannot sample from V tokens (temperature 0 or in [0.001, 100], top_k in [0, V]), or NULL. */
const char *sampler_cfg_refusal(const sampler_cfg_t *s, int V);
/* MP_OK, or MP_ERR after reporting sampler_cfg_refusal with the values. */
int sampler_cfg_check(const sampler_cfg_t *s, int V);

/* The token for position `position` of request `request_id` from logits[0..V) (a row may be longer:
 * V is then the tokenizer's vocabulary; top_k above V means V). work: 2·V floats of scratch. Ties
 * between logits are broken by the lower token index. */
int sampler_pick(const float *logits, int V, const sampler_cfg_t *s, uint64_t request_id, uint64_t position,
                 float *work);

#endif
