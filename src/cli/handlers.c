/* Each command's handler (handlers.h): what the command table cannot say about its options, then
 * the call into the room that does the work. */
#include "handlers.h"

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
#include "sim.h"
#include "sim_nccl.h"
#include "swapsim.h"
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
    if (c->tokenizer_dir && kind != TOK_GPT2) return MP_ERROR("--tokenizer-dir is for --tokenizer gpt2"), 2;
    if ((c->vocab_size || c->sp_model || c->sp_model_file) && kind != TOK_SP)
        return MP_ERROR("--vocab-size, --sp-model and --sp-model-file are for --tokenizer sp"), 2;
    tokenizer_t tok;
    if (kind == TOK_SP) {
        const int rc = prep_sp(c, &tok);
        if (rc) return rc;
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

/* --format mindpipe (the default): a supernet's subnet, which needs --subnet; hf: a plain model's
 * checkpoint as Hugging Face's GPT-2, where --subnet makes no sense (export the subnet first). */
int cmd_export(cli_t *c)
{
    const char *fmt = c->format ? c->format : "mindpipe";
    if (!strcmp(fmt, "hf")) {
        if (c->subnet)
            return MP_ERROR("export: --subnet with --format hf: export the subnet first (--format mindpipe --subnet "
                            "%s), then export that plain checkpoint with --format hf", c->subnet), 2;
        return export_hf_main(&c->run, c->ckpt, c->tokenizer_dir, c->out);
    }
    if (strcmp(fmt, "mindpipe"))
        return MP_ERROR("export: --format '%s': mindpipe (a supernet's subnet) or hf (Hugging Face's GPT-2)", fmt), 2;
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

/* `mindpipe sim --swap`: docs/MEMORY.md's tables from the swap simulator's default costs (swapsim.h). */
static int cmd_sim_swap(const cli_t *c)
{
    static const char *const names[] = {"pipeline (rank r = stage r of a pp = R pipeline)",
                                        "replicas (R data-parallel replicas of stage 0 of a pp = 4 pipeline)"};
    for (int l = 0; l < 2; l++) {
        swapsim_cfg_t cfg;
        swapsim_cfg_default(&cfg, l ? SWAPSIM_REPLICAS : SWAPSIM_PIPELINE, 2);
        if (c->alpha >= 0.0) cfg.alpha = c->alpha;
        printf("%s%s; m = %d, tf = %g ms, tb = %g ms, %g MB each way per micro-batch, %g GB/s per direction, "
               "alpha = %g (assumed)\n\n",
               l ? "\n" : "", names[l], cfg.m, 1e3 * cfg.tf, 1e3 * cfg.tb, cfg.bytes / 1e6, cfg.bw / 1e9, cfg.alpha);
        if (swapsim_table(stdout, &cfg) != MP_OK) return 1;
    }
    return 0;
}

/* --costs "TF,TB,TW" (or "unit"), in the deck's parallel.schedule_costs syntax. MP_OK, or MP_ERR
 * naming the option. */
static int sim_parse_costs(const char *text, sched_costs_t *c)
{
    double t[3];
    char why[160];
    if (deck_parse_sched_costs(text, t, why, sizeof why) != 0) return MP_FAIL("sim --costs: '%s' is %s", text, why);
    *c = t[0] > 0.0 ? (sched_costs_t){t[0], t[1], t[2]} : sched_costs_unit;
    return MP_OK;
}

/* Stage s's list on one line after " |". */
static void sim_print_list(sched_kind_t kind, int s, const cli_t *c, int v, const sched_costs_t *t)
{
    instr_list_t l;
    if (sched_build_costs(&l, kind, s, c->pp, c->m, v, t) != MP_OK) return;
    printf(" |");
    for (int i = 0; i < l.n; i++)
        l.ins[i].mb >= 0 ? printf(" %s(%d.%d)", op_names[l.ins[i].op], l.ins[i].mb, l.ins[i].chunk)
                         : printf(" %s", op_names[l.ins[i].op]);
    sched_free(&l);
}

/* The rest of `mindpipe sim`'s report on a valid schedule r: 1f1b's for the same pp, m and times
 * beside it, then each stage's stash (and list). */
static void sim_report(sched_kind_t kind, const cli_t *c, int v, const sched_costs_t *t, const sim_result_t *r)
{
    const int split = sched_kind_split(kind);
    printf("  makespan %.2f tf, busy %.2f tf per stage, bubble %.4f", r->makespan / t->tf, r->busy / t->tf, r->bubble);
    if (split) printf(" (from each stage's first work, the Zero Bubble paper's rate: %.4f)", r->span_bubble);
    printf("\n");
    sim_result_t f;
    if (kind != SCHED_1F1B && sim_run_costs(SCHED_1F1B, c->pp, c->m, 1, t, &f) == MP_OK)
        printf("  1f1b, same pp, m and times: bubble %.4f, peak stash %.2f stage units; %s: bubble %.4f, peak stash %.2f\n",
               f.bubble, f.peak_units_max, c->schedule, r->bubble, r->peak_units_max);
    for (int s = 0; s < c->pp; s++) {
        printf("  stage %d: peak stashed micro-batches %d", s, r->peak_stash[s]);
        if (split || v > 1)
            printf(" (%.2f stage units; %d awaiting their B)", r->peak_units[s], r->peak_stash_b[s]);
        if (c->list) sim_print_list(kind, s, c, v, t);
        printf("\n");
    }
}

/* `mindpipe sim`: the schedule simulator on one (kind, pp, m, v); exit 0 iff the schedule is valid
 * under both matching rules (MPI's tags, NCCL's order). */
int cmd_sim(cli_t *c)
{
    if (c->swap) return cmd_sim_swap(c);
    sched_kind_t kind;
    if (!c->schedule || sched_kind_parse(c->schedule, &kind) != MP_OK || c->pp < 1 || c->m < 1)
        return MP_ERROR("sim needs --schedule gpipe|1f1b|interleaved|2bw|zb1p|zbv|dualpipev, --pp P >= 1 and --m M >= 1"),
               2;
    const int v = c->v > 0 ? c->v : sched_kind_default_v(kind);
    sched_costs_t t = sched_costs_unit;
    if (c->costs && sim_parse_costs(c->costs, &t) != MP_OK) return 2;
    sim_result_t r, n;
    int rc = sim_run_costs(kind, c->pp, c->m, v, &t, &r);
    if (rc != MP_OK) {
        printf("%s pp=%d m=%d v=%d: INVALID: %s\n", c->schedule, c->pp, c->m, v, r.error);
        return 1;
    }
    instr_list_t lists[SIM_MAX_STAGES];
    if (sim_build_lists_costs(lists, kind, c->pp, c->m, v, &t, &n) == MP_OK) {
        rc = sim_nccl_lists(lists, c->pp, c->m, v, &n);
        sim_free_lists(lists, c->pp);
    }
    if (rc != MP_OK) {
        printf("%s pp=%d m=%d v=%d: INVALID under NCCL's order: %s\n", c->schedule, c->pp, c->m, v, n.error);
        return 1;
    }
    printf("%s pp=%d m=%d v=%d: valid (no deadlock, every send matched, under MPI's tags and NCCL's order); times tf %g, "
           "B %g, W %g per stage (a fused backward B + W%s):\n", c->schedule, c->pp, c->m, v, t.tf, t.tb, t.tw,
           c->costs ? "" : ": the cost model tb = 2 tf");
    sim_report(kind, c, v, &t, &r);
    return 0;
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
