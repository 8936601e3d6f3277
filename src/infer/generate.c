/* `mindpipe generate` (generate.h). */
#include "generate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "completion.h"
#include "decoder.h"
#include "deck.h"
#include "deck_model.h"
#include "kernels.h"
#include "perf.h"

/* The deck's model as the decoder takes it; a supernet deck is refused (export a subnet first). */
static int generate_cfg(const deck_t *d, model_cfg_t *cfg)
{
    if (d->supernet.enabled)
        return MP_FAIL("generate runs a plain model: `mindpipe export` a subnet of this supernet and give its "
                       "deck (model.blocks) and checkpoint");
    *cfg = deck_model_cfg(d, NULL);
    return MP_OK;
}

/* The prompt's bytes as tokens. */
static int *prompt_tokens(const char *text, int *n_p)
{
    const size_t n = strlen(text);
    int *tok = MP_MALLOC((n ? n : 1) * sizeof *tok);
    if (!tok) return NULL;
    for (size_t i = 0; i < n; i++) tok[i] = (unsigned char)text[i];
    *n_p = (int)n;
    return tok;
}

static int generate_write(const int *out, int n)
{
    for (int i = 0; i < n; i++)
        if (putchar(out[i]) == EOF) return MP_FAIL("writing the completion to stdout failed");
    return fflush(stdout) == 0 ? MP_OK : MP_FAIL("writing the completion to stdout failed");
}

int generate_main(const run_opts_t *opts, const generate_opts_t *g)
{
    deck_t d;
    model_cfg_t cfg;
    if (deck_load_model(&d, opts->deck_path, opts->sets, opts->nsets) != MP_OK || generate_cfg(&d, &cfg) != MP_OK) return 1;
    if (g->max_tokens < 0) return MP_ERROR("--max-tokens %d: must be >= 0", g->max_tokens), 1;
    int nprompt = 0, *prompt = prompt_tokens(g->prompt, &nprompt), *out = NULL, nout = 0;
    if (!prompt) return 1;
    const char *why = completion_refusal(prompt, nprompt, cfg.seq_len, cfg.vocab);
    if (why) {
        MP_ERROR("--prompt: %s (%d bytes; model.seq_len = %d)", why, nprompt, cfg.seq_len);
        free(prompt);
        return 1;
    }
    const sampler_cfg_t sc = {(float)g->temperature, g->top_k, g->seed};
    if (sampler_cfg_check(&sc, cfg.vocab) != MP_OK) {
        free(prompt);
        return 1;
    }
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    kernels_set_threads(d.train.threads > 0 ? d.train.threads : cores > 0 ? (int)cores : 1);
    decoder_t dec;
    long step = 0;
    int rc = decoder_create(&dec, &cfg, 0, cfg.layers, 1, 1, 1);
    if (rc != MP_OK) {
        free(prompt);
        return 1;
    }
    rc = decoder_load(&dec, g->ckpt, &step);
    /* the context bounds a completion whatever --max-tokens says */
    const int cap = g->max_tokens < cfg.seq_len ? g->max_tokens : cfg.seq_len;
    if (rc == MP_OK && !(out = MP_MALLOC(((size_t)cap + 1) * sizeof *out))) rc = MP_ERR;
    const double t0 = perf_now();
    if (rc == MP_OK) {
        const completion_req_t rq = {prompt, nprompt, g->max_tokens, sc, g->request_id};
        rc = completion_run(&dec, 0, &rq, out, &nout);
    }
    const double dt = perf_now() - t0;
    if (rc == MP_OK) rc = generate_write(out, nout);
    if (rc == MP_OK)
        fprintf(stderr, "generated %d tokens%s after a prompt of %d in %.3f s (%.1f tokens/s, prompt included) | %s at step %ld\n",
                nout, nout < g->max_tokens ? " (the context is full)" : "", nprompt, dt,
                dt > 0 ? (nprompt + nout) / dt : 0.0, g->ckpt, step);
    decoder_destroy(&dec);
    free(prompt), free(out);
    return rc == MP_OK ? 0 : 1;
}
