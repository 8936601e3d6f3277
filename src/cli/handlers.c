/* Each command's handler (handlers.h): what the command table cannot say about its options, then
 * the call into the room that does the work. */
#include "handlers.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "ckpt.h"
#include "device.h"
#include "data.h"
#include "deck.h"
#include "eval.h"
#include "export.h"
#include "generate.h"
#include "hf_export.h"
#include "kernels.h"
#include "numparse.h"
#include "perf.h"
#include "plan.h"
#include "profile.h"
#include "schedule.h"
#include "search.h"
#include "selftest.h"
#include "serve.h"
#include "supernet.h"
#include "sim_main.h"
#include "tokenizer.h"
#include "train.h"

/* The commands that run a deck's model offer the supernet's plug-in: it is active when the deck
 * has one (run.h's run_plug_t), and the loop then takes its steps. */
static run_opts_t with_supernet(const cli_t *c)
{
    run_opts_t o = c->run;
    o.plug = &supernet_plug;
    return o;
}

int cmd_train(cli_t *c)
{
    const run_opts_t o = with_supernet(c);
    return train_main(&o, &supernet_train_ops);
}

int cmd_debug_grads(cli_t *c)
{
    const run_opts_t o = with_supernet(c);
    return train_debug_grads(&o, &supernet_train_ops, c->out);
}

/* prep --tokenizer sp's model: trained on the text, or read from --sp-model-file. 0, or the exit
 * status: 2 for a usage error or a build without SentencePiece, 1 when training or reading fails. */
static int prep_sp(const cli_t *c, tokenizer_t *tok_p)
{
    tok_sp_t *sp;
    if (!tok_sp_available())
        return MP_ERROR("--tokenizer sp: this mindpipe was built without SentencePiece (install "
                        "libsentencepiece-dev, bash .ci/deps.sh, and run ./configure again)"), 2;
    if (c->sp_model_file && (c->vocab_size || c->sp_model))
        return MP_ERROR("--sp-model-file %s: the model fixes the vocabulary and type: no --vocab-size or --sp-model",
                        c->sp_model_file), 2;
    if (c->sp_model_file) {
        if (tok_sp_load_file(&sp, c->sp_model_file) != MP_OK) return 1;
    } else {
        if (!c->vocab_size) return MP_ERROR("--tokenizer sp needs --vocab-size N or --sp-model-file FILE"), 2;
        if (c->vocab_size < TOK_SP_VOCAB_MIN || c->vocab_size > TOK_SP_VOCAB_MAX)
            return MP_ERROR("--vocab-size %d: must be in [%d, %d] (the byte pieces and <unk> <s> </s> need %d; "
                            "the token file's ids are uint16, %d values)",
                            c->vocab_size, TOK_SP_VOCAB_MIN, TOK_SP_VOCAB_MAX, TOK_SP_VOCAB_MIN, TOK_SP_VOCAB_MAX), 2;
        if (c->sp_model && strcmp(c->sp_model, "unigram") && strcmp(c->sp_model, "bpe"))
            return MP_ERROR("--sp-model '%s': unigram or bpe", c->sp_model), 2;
        if (tok_sp_train(&sp, c->text, c->vocab_size, c->sp_model ? c->sp_model : "unigram") != MP_OK) return 1;
    }
    *tok_p = tok_from_sp(sp);
    return 0;
}

int cmd_prep(cli_t *c)
{
    tok_kind_t kind = TOK_BYTES;
    if (!(c->val_fraction > 0 && c->val_fraction < 0.5)) return MP_ERROR("--val-fraction must be in (0, 0.5)"), 2;
    if (c->tokenizer && tok_kind_parse(c->tokenizer, &kind) != MP_OK) return 2;
    if (c->tokenizer_dir && kind != TOK_GPT2) return MP_ERROR("--tokenizer-dir is for --tokenizer gpt2 (hf:DIR names its own)"), 2;
    if ((c->vocab_size || c->sp_model || c->sp_model_file) && kind != TOK_SP)
        return MP_ERROR("--vocab-size, --sp-model and --sp-model-file are for --tokenizer sp"), 2;
    tokenizer_t tok;
    if (kind == TOK_SP) {
        const int rc = prep_sp(c, &tok);
        if (rc) return rc;
    } else if (kind == TOK_HF) {
        if (tok_open_hf_dir(&tok, c->tokenizer + 3) != MP_OK) return 1;
    } else if (tok_open(&tok, kind, c->tokenizer_dir) != MP_OK) {
        return 1;
    }
    const int rc = data_prep_tokenized(c->text, c->out, c->val_fraction, &tok);
    tok_close(&tok);
    return rc == MP_OK ? 0 : 1;
}

int cmd_eval(cli_t *c)
{
    const run_opts_t o = with_supernet(c);
    return eval_main(&o, &supernet_train_ops, c->ckpt, c->subnet);
}

int cmd_search(cli_t *c)
{
    if (c->method && strcmp(c->method, "evolution") && strcmp(c->method, "random"))
        return MP_ERROR("--method '%s': evolution or random", c->method), 2;
    search_cfg_t s = {c->ckpt, c->out, !c->method || !strcmp(c->method, "evolution"), c->population, c->generations,
                      c->mutation, c->max_params, c->max_flops, c->seed_set ? c->seed : 1};
    return search_main(&c->run, &s);
}

/* "5GB", "100KiB", "4096": bytes (HF's max_shard_size spelling: KB, MB, GB powers of 1000, KiB, MiB,
 * GiB of 1024) into *n_p. MP_OK, or MP_ERR (printing nothing) for anything else or 0. */
static int export_shard_size(const char *s, uint64_t *n_p)
{
    static const struct { const char *suffix; uint64_t mul; } units[] = {
        {"", 1}, {"B", 1}, {"KB", 1000}, {"MB", 1000000}, {"GB", 1000000000},
        {"KiB", 1024}, {"MiB", 1048576}, {"GiB", 1073741824}};
    uint64_t v = 0;
    const char *p = s;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > UINT64_MAX / 10 - 9) return MP_ERR;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (p == s || !v) return MP_ERR;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (!strcmp(p, units[i].suffix)) {
            if (v > UINT64_MAX / units[i].mul) return MP_ERR;
            *n_p = v * units[i].mul;
            return MP_OK;
        }
    return MP_ERR;
}

/* --format mindpipe (the default): a supernet's subnet, which needs --subnet; hf: a plain model's
 * checkpoint as Hugging Face's GPT-2, where --subnet makes no sense (export the subnet first). */
int cmd_export(cli_t *c)
{
    const char *fmt = c->format ? c->format : "mindpipe";
    if (!strcmp(fmt, "hf")) {
        if (c->subnet)
            return MP_ERROR("export: --subnet with --format hf: export the subnet first (--format mindpipe --subnet "
                            "%s), then export that plain checkpoint with --format hf", c->subnet), 2;
        if (c->dtype && strcmp(c->dtype, "fp32") && strcmp(c->dtype, "bf16"))
            return MP_ERROR("export: --dtype '%s': fp32 or bf16", c->dtype), 2;
        uint64_t shard = 0;
        if (c->max_shard_size && export_shard_size(c->max_shard_size, &shard) != MP_OK)
            return MP_ERROR("export: --max-shard-size '%s': a positive number of bytes with an optional suffix KB, MB, "
                            "GB (powers of 1000) or KiB, MiB, GiB (of 1024), e.g. 5GB", c->max_shard_size), 2;
        return export_hf_main(&c->run, c->ckpt, c->tokenizer_dir, c->out, c->dtype && !strcmp(c->dtype, "bf16"),
                              shard);
    }
    if (strcmp(fmt, "mindpipe"))
        return MP_ERROR("export: --format '%s': mindpipe (a supernet's subnet) or hf (Hugging Face's GPT-2 or Llama)", fmt), 2;
    if (c->dtype || c->max_shard_size)
        return MP_ERROR("export: --%s is for --format hf (a subnet checkpoint is one float32 file)",
                        c->dtype ? "dtype" : "max-shard-size"), 2;
    if (c->tokenizer_dir)
        return MP_ERROR("export: --tokenizer-dir is for --format hf (a subnet checkpoint carries its tokenizer's "
                        "identity on, no files)"), 2;
    if (!c->subnet) return MP_ERROR("export --format mindpipe needs --subnet 0,2,1 (mindpipe export --help)"), 2;
    return export_main(&c->run, c->ckpt, c->subnet, c->out);
}

int cmd_generate(cli_t *c)
{
    const generate_opts_t g = {c->ckpt,  c->prompt,      c->tokenizer_dir,           c->max_tokens,
                               c->top_k, c->temperature, c->seed_set ? c->seed : 1, c->request_id};
    return generate_main(&c->run, &g);
}

static serve_opts_t serve_opts(const cli_t *c)
{
    return (serve_opts_t){c->ckpt,  c->out ? c->out : "serve", c->listen ? c->listen : "127.0.0.1:8080",
                          c->links, c->stages, c->slots, c->stage, c->standby, c->public, c->slot, c->http_limits,
                          c->tokenizer_dir};
}

int cmd_serve(cli_t *c)
{
    const serve_opts_t s = serve_opts(c);
    return serve_main(&c->run, &s);
}

int cmd_serve_stage(cli_t *c)
{
    const serve_opts_t s = serve_opts(c);
    return serve_stage_main(&c->run, &s);
}

int cmd_inspect(cli_t *c) { return ckpt_inspect(c->positional, stdout) == MP_OK ? 0 : 1; }

int cmd_peak(cli_t *c)
{
    kernels_set_threads(c->threads > 0 ? c->threads : 1);
    printf("%.1f\n", perf_sgemm_peak_gflops());
    return 0;
}

int cmd_sim(cli_t *c)
{
    const sim_opts_t o = {.schedule = c->schedule, .pp = c->pp, .m = c->m, .v = c->v, .costs = c->costs,
                          .list = c->list, .swap = c->swap, .alpha = c->alpha};
    return sim_main(&o);
}

int cmd_plan(cli_t *c)
{
    c->plan.deck_path = c->run.deck_path, c->plan.sets = c->run.sets, c->plan.nsets = c->run.nsets;
    c->plan.device = c->device;
    return plan_main(&c->plan);
}

int cmd_profile(cli_t *c) { return profile_main(&c->run, c->out); }

int cmd_selftest(cli_t *c) { return selftest_run(c->device ? c->device : "cuda", c->verbose); }

int cmd_deck_reference(cli_t *c)
{
    (void)c;
    deck_print_reference(stdout);
    return 0;
}
