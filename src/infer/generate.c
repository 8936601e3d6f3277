/* `mindpipe generate` (generate.h). */
#include "generate.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "ckpt_files.h"
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

/* The prompt's tokens under tok (malloc'd, *n_p of them), or NULL (reported). */
static int *prompt_tokens(const tokenizer_t *tok, const char *text, int *n_p)
{
    const size_t n = strlen(text);
    uint32_t *ids = MP_MALLOC(TOK_IDS_ROOM(n) * sizeof *ids);
    int *out = MP_MALLOC(TOK_IDS_ROOM(n) * sizeof *out);
    size_t m = 0;
    if (!ids || !out || tok_encode(tok, (const unsigned char *)text, n, ids, &m) != MP_OK || m > INT_MAX) {
        free(ids), free(out);
        return NULL;
    }
    for (size_t i = 0; i < m; i++) out[i] = (int)ids[i]; /* below model.vocab's largest */
    free(ids);
    *n_p = (int)m;
    return out;
}

/* The bytes of tokens out[0..n) under tok to stdout (a gpt2 completion may end inside a UTF-8
 * character: its bytes are written as they are). */
static int generate_write(const tokenizer_t *tok, const int *out, int n)
{
    unsigned char *bytes;
    size_t nb;
    if (tok_decode(tok, out, (size_t)n, &bytes, &nb) != MP_OK) return MP_ERR;
    const int bad = fwrite(bytes, 1, nb, stdout) != nb || fflush(stdout) != 0;
    free(bytes);
    return bad ? MP_FAIL("writing the completion to stdout failed") : MP_OK;
}

int generate_main(const run_opts_t *opts, const generate_opts_t *g)
{
    deck_t d;
    model_cfg_t cfg;
    if (deck_load_model(&d, opts->deck_path, opts->sets, opts->nsets) != MP_OK || generate_cfg(&d, &cfg) != MP_OK) return 1;
    if (g->max_tokens < 0) return MP_ERROR("--max-tokens %d: must be >= 0", g->max_tokens), 1;
    tokenizer_t tok;
    if (ckpt_file_tokenizer(g->ckpt, g->tokenizer_dir, &tok) != MP_OK) return 1;
    int nprompt = 0, *prompt = prompt_tokens(&tok, g->prompt, &nprompt), *out = NULL, nout = 0;
    if (!prompt) return tok_close(&tok), 1;
    const char *why = completion_refusal(prompt, nprompt, cfg.seq_len, cfg.vocab);
    if (why) {
        MP_ERROR("--prompt: %s (%d %s; model.seq_len = %d)", why, nprompt, tok.kind == TOK_BYTES ? "bytes" : "gpt2 tokens",
                 cfg.seq_len);
        free(prompt), tok_close(&tok);
        return 1;
    }
    const sampler_cfg_t sc = {(float)g->temperature, g->top_k, g->seed};
    if (sampler_cfg_check(&sc, cfg.vocab) != MP_OK) {
        free(prompt), tok_close(&tok);
        return 1;
    }
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    kernels_set_threads(d.train.threads > 0 ? d.train.threads : cores > 0 ? (int)cores : 1);
    decoder_t dec;
    long step = 0;
    int rc = decoder_create(&dec, &cfg, 0, cfg.layers, 1, 1, 1);
    if (rc != MP_OK) {
        free(prompt), tok_close(&tok);
        return 1;
    }
    rc = decoder_load(&dec, g->ckpt, &step);
    /* the context bounds a completion whatever --max-tokens says */
    const int cap = g->max_tokens < cfg.seq_len ? g->max_tokens : cfg.seq_len;
    if (rc == MP_OK && !(out = MP_MALLOC(((size_t)cap + 1) * sizeof *out))) rc = MP_ERR;
    const double t0 = perf_now();
    if (rc == MP_OK) {
        /* gpt2: the model's vocabulary is padded past the tokenizer's; no draw lands in the padding */
        const completion_req_t rq = {prompt, nprompt, g->max_tokens, sc, g->request_id,
                                     tok.kind == TOK_BYTES ? 0 : tok_vocab(&tok), tok_eos(&tok)};
        rc = completion_run(&dec, 0, &rq, out, &nout);
    }
    const double dt = perf_now() - t0;
    if (rc == MP_OK) rc = generate_write(&tok, out, nout);
    if (rc == MP_OK)
        fprintf(stderr, "generated %d tokens%s after a prompt of %d in %.3f s (%.1f tokens/s, prompt included) | %s at step %ld\n",
                nout, nout >= g->max_tokens ? "" : nprompt + nout < cfg.seq_len ? " (the end-of-sequence token)" : " (the context is full)", nprompt, dt,
                dt > 0 ? (nprompt + nout) / dt : 0.0, g->ckpt, step);
    decoder_destroy(&dec);
    tok_close(&tok);
    free(prompt), free(out);
    return rc == MP_OK ? 0 : 1;
}
