/* Sampling (sampler.h). */
#include "sampler.h"

#include <math.h>
#include <string.h>

#include "check.h"
#include "math_exp.h"
#include "rng.h"

const char *sampler_cfg_refusal(const sampler_cfg_t *s, int V)
{
    /* below 1e-3 the scaled logits overflow float: such a temperature is greedy anyway */
    if (!(s->temperature == 0.0f || (s->temperature >= 1e-3f && s->temperature <= 100.0f)))
        return "temperature must be 0 (greedy) or in [0.001, 100]";
    if (s->top_k < 0 || s->top_k > V) return "top_k must be in [0, the vocabulary] (0: every token)";
    return NULL;
}

int sampler_cfg_check(const sampler_cfg_t *s, int V)
{
    const char *why = sampler_cfg_refusal(s, V);
    return why ? MP_FAIL("temperature %g, top_k %d of %d tokens: %s", (double)s->temperature, s->top_k, V, why) : MP_OK;
}

static int argmax(const float *x, int V)
{
    int best = 0;
    for (int j = 1; j < V; j++)
        if (x[j] > x[best]) best = j;
    return best;
}

/* Is token a ahead of token b: the larger logit, then the lower index. */
static int ahead(const float *x, int a, int b) { return x[a] > x[b] || (x[a] == x[b] && a < b); }

/* The k tokens with the largest logits into idx, best first (insertion: k and V are small, and
 * the order is total, so the result does not depend on the algorithm). */
static void top_k_tokens(const float *x, int V, int k, int *idx)
{
    int n = 0;
    for (int j = 0; j < V; j++) {
        if (n == k && !ahead(x, j, idx[n - 1])) continue;
        int i = n < k ? n++ : k - 1;
        while (i > 0 && ahead(x, j, idx[i - 1])) idx[i] = idx[i - 1], i--;
        idx[i] = j;
    }
}

int sampler_pick(const float *logits, int V, const sampler_cfg_t *s, uint64_t request_id, uint64_t position,
                 float *work)
{
    if (s->temperature == 0.0f || s->top_k == 1) return argmax(logits, V);
    const int k = s->top_k && s->top_k < V ? s->top_k : V; /* V may be a tokenizer's, below the model's */
    int *idx = (int *)(void *)work; /* k ints in the first V floats */
    float *p = work + V;
    top_k_tokens(logits, V, k, idx);
    const float max = logits[idx[0]], inv_t = 1.0f / s->temperature;
    float sum = 0.0f;
    for (int i = 0; i < k; i++) { /* best first: the running sum is in a fixed order */
        p[i] = mp_expf((logits[idx[i]] - max) * inv_t);
        sum += p[i];
    }
    const float u = rng_uniform(rng_key(s->seed, RNG_STREAM_SAMPLE, request_id, position)) * sum;
    float acc = 0.0f;
    for (int i = 0; i < k; i++) {
        acc += p[i];
        if (u < acc) return idx[i];
    }
    return idx[k - 1]; /* u within rounding of sum */
}
