/* One completion (completion.h). */
#include "completion.h"

#include <stdio.h>
#include <stdlib.h>

#include "check.h"

const char *completion_refusal(const int *prompt, int nprompt, int T, int V)
{
    if (nprompt < 1) return "the prompt is empty: give at least one byte";
    if (nprompt > T - 1) return "the prompt is longer than the context allows (at most model.seq_len - 1 bytes)";
    for (int i = 0; i < nprompt; i++)
        if (prompt[i] < 0 || prompt[i] >= V) return "the prompt holds a token outside the model's vocabulary";
    return NULL;
}

int completion_run(decoder_t *dec, int slot, const completion_req_t *rq, int *out, int *nout_p)
{
    const int T = dec->T, V = dec->cfg.vocab, C = dec->cfg.dim;
    if (!dec->has_embed || !dec->has_final || dec->nlayers != dec->cfg.layers)
        return MP_FAIL("completion_run needs a whole model's decoder (a bug)");
    const char *why = completion_refusal(rq->prompt, rq->nprompt, T, V);
    if (why) return MP_FAIL("%s: %d tokens, context %d", why, rq->nprompt, T);
    if (rq->max_tokens < 0) return MP_FAIL("max_tokens %d: must be >= 0", rq->max_tokens);
    if (sampler_cfg_check(&rq->sample, V) != MP_OK) return MP_ERR;
    float *logits = MP_MALLOC((size_t)V * sizeof(float)), *x = MP_MALLOC((size_t)C * sizeof(float));
    float *work = MP_MALLOC(2 * (size_t)V * sizeof(float));
    if (!logits || !x || !work) {
        free(logits), free(x), free(work);
        return MP_ERR;
    }
    int pos = 0, n = 0;
    for (; pos < rq->nprompt; pos++) decoder_step(dec, logits, x, &rq->prompt[pos], &slot, &pos, 1);
    /* logits now predict position pos; a token sampled there is fed only if another one follows */
    const int SV = rq->sample_v > 0 && rq->sample_v < V ? rq->sample_v : V;
    while (n < rq->max_tokens && pos < T) {
        out[n] = sampler_pick(logits, SV, &rq->sample, rq->request_id, (uint64_t)pos, work);
        if (out[n] == rq->eos) break;
        if (++n == rq->max_tokens || pos + 1 == T) break;
        decoder_step(dec, logits, x, &out[n - 1], &slot, &pos, 1);
        pos++;
    }
    *nout_p = n;
    free(logits), free(x), free(work);
    return MP_OK;
}
