/* The command table and everything made from it (contract in commands.h). */
#include "commands.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "handlers.h"
#include "numparse.h"

/* ---- the option catalogue: each option once, with its type, its place in cli_t and its range ---- */

typedef enum { T_FLAG, T_STR, T_INT, T_U64, T_DBL, T_SET } opt_type_t;

#define NO_FLAG SIZE_MAX

typedef struct {
    const char *name, *alias;
    opt_type_t type;
    size_t off;      /* where the value goes in cli_t */
    double min, max; /* T_INT, T_DBL: the inclusive range a value must lie in */
    size_t given;    /* an int in cli_t set to 1 when the option is given (NO_FLAG: none) */
} opt_def_t;

#define AT(field) offsetof(cli_t, field)
#define FLAG(n, f) {n, NULL, T_FLAG, AT(f), 0, 0, NO_FLAG}
#define STR(n, f) {n, NULL, T_STR, AT(f), 0, 0, NO_FLAG}
#define INT(n, f, lo, hi) {n, NULL, T_INT, AT(f), lo, hi, NO_FLAG}
#define DBL(n, f, lo, hi) {n, NULL, T_DBL, AT(f), lo, hi, NO_FLAG}

static const opt_def_t catalogue[] = {
    {"--deck", "-c", T_STR, AT(run.deck_path), 0, 0, NO_FLAG},
    {"--set", NULL, T_SET, AT(sets), 0, 0, NO_FLAG},
    STR("--out", out),
    STR("--resume", run.resume),
    FLAG("--restart", run.restart),
    FLAG("--quiet", run.quiet),
    STR("--ckpt", ckpt),
    STR("--subnet", subnet),
    STR("--format", format),
    STR("--dtype", dtype),
    STR("--max-shard-size", max_shard_size),
    STR("--init-from", run.init_from),
    STR("--method", method),
    INT("--population", population, 1, 1e6),
    INT("--generations", generations, 1, 1e6),
    DBL("--mutation", mutation, 0, 1),
    DBL("--max-params", max_params, 0, 1e18),
    DBL("--max-flops", max_flops, 0, 1e21),
    {"--seed", NULL, T_U64, AT(seed), 0, 0, AT(seed_set)},
    STR("--text", text),
    STR("--tokenizer", tokenizer),
    STR("--tokenizer-dir", tokenizer_dir),
    /* wide: tok_sp.h's own check says why its bounds are what they are */
    INT("--vocab-size", vocab_size, 1, 1 << 30),
    STR("--sp-model", sp_model),
    STR("--sp-model-file", sp_model_file),
    STR("--prompt", prompt),
    INT("--max-tokens", max_tokens, 0, 1 << 24),
    DBL("--temperature", temperature, 0, 100),
    INT("--top-k", top_k, 0, 1 << 30),
    {"--request-id", NULL, T_U64, AT(request_id), 0, 0, NO_FLAG},
    INT("--stages", stages, 1, 64),
    INT("--slots", slots, 1, 1024),
    INT("--stage", stage, 0, 63),
    INT("--standby", standby, 0, 2),
    INT("--slot", slot, 0, 1),
    STR("--listen", listen),
    STR("--links", links),
    FLAG("--public", public),
    STR("--http-limits", http_limits),
    DBL("--val-fraction", val_fraction, 0, 0.5),
    INT("--threads", threads, 1, 4096),
    STR("--schedule", schedule),
    STR("--costs", costs),
    INT("--pp", pp, 1, 4096),
    INT("--m", m, 1, 1 << 20),
    INT("--v", v, 1, 1024),
    FLAG("--list", list),
    FLAG("--swap", swap),
    DBL("--alpha", alpha, 0, 10),
    STR("--device", device),
    FLAG("--verbose", verbose),
    INT("--ranks", plan.ranks, 1, 1 << 24),
    STR("--layout", plan.layout),
    STR("--devices", plan.devices),
    STR("--profile", plan.profile),
    STR("--precision", plan.precision),
    INT("--top", plan.top, 1, 1 << 20),
    FLAG("--json", plan.json),
    STR("--objective", plan.objective),
    DBL("--tokens", plan.tokens, 0, 1e21),
    DBL("--deadline", plan.deadline_h, 0, 1e9),
    STR("--emit", plan.emit),
    INT("--nodes-of", plan.per_node, 1, 1 << 20),
};

static const opt_def_t *opt_find(const char *s)
{
    for (size_t i = 0; i < sizeof catalogue / sizeof catalogue[0]; i++)
        if (!strcmp(catalogue[i].name, s) || (catalogue[i].alias && !strcmp(catalogue[i].alias, s)))
            return &catalogue[i];
    return NULL;
}

/* ---- the commands ---- */

static int cmd_cli_reference(cli_t *c)
{
    (void)c;
    commands_reference(stdout);
    return 0;
}

#define DECK_OPT(req, help) {"--deck", "DECK", help, req}
#define SET_OPT {"--set", "S.K=V", "override one deck key (repeatable; applied after the deck, in order)", 0}
#define END_OPTS {NULL, NULL, NULL, 0}

static const command_t commands[] = {
    {"train", CMD_MPI | CMD_RUN, cmd_train,
     "[-c DECK] [--set section.key=value]... [--out DIR] [--resume PATH|auto | --restart] [--init-from hf:DIR]\n"
     "         [--quiet]",
     "train the deck's model (under mpiexec: on every rank of the job's layout)",
     {DECK_OPT(0, "the input deck (docs/DECK.md; without it, the defaults)"),
      SET_OPT,
      {"--out", "DIR", "the run directory (default run): log.txt, metrics.jsonl, trace.json,\n"
                       "exit_status, ckpt/; locked while the run uses it", 0},
      {"--resume", "PATH|auto", "continue from a checkpoint; auto: the newest in DIR/ckpt that verifies and\n"
                                "fits the deck (none: start at step 0)", 0},
      {"--restart", NULL, "a fresh run into a DIR holding checkpoints moves them to DIR/ckpt.old-TIME/\n"
                          "(without it, or --resume, such a run is refused)", 0},
      {"--init-from", "hf:DIR", "a fresh run (step 0, fresh optimizer) from Hugging Face GPT-2 weights:\n"
                                "DIR/model.safetensors (F32, as export --format hf writes it) and\n"
                                "DIR/config.json, whose model_type, sizes and switches give the deck's\n"
                                "model keys it does not set (one it sets otherwise is refused; its context\n"
                                "fills model.seq_len only where unset), both checked against the deck's\n"
                                "model (n_positions may exceed model.seq_len: wpe's first rows are taken); for\n"
                                "model.arch=llama a LlamaForCausalLM's: F32, BF16 or F16, one file or the\n"
                                "shards of model.safetensors.index.json; with train.steps=0 it writes\n"
                                "them as ckpt/step_00000000.h5. Not with --resume", 0},
      {"--quiet", NULL, "no console output (the log and metrics are still written)", 0},
      END_OPTS},
     "exit status: 0 done, 75 stopped (SIGUSR1/SIGTERM after a checkpoint; with recovery.log a lost peer, its\n"
     "state saved, or a replay that failed, its snapshots aside): requeue and --resume auto; 1 failed (also in\n"
     "DIR/exit_status)\n"},
    {"prep", 0, cmd_prep,
     "--text FILE --out DATA.h5 [--val-fraction F] [--tokenizer bytes|gpt2|sp|hf:DIR [--tokenizer-dir DIR | --vocab-size N "
     "[--sp-model unigram|bpe] | --sp-model-file FILE]]",
     "turn a text file into a token file (bytes, GPT-2's BPE or SentencePiece as tokens)",
     {{"--text", "FILE", "the text (UTF-8 or any bytes)", 1},
      {"--out", "DATA.h5", "the token file (written atomically)", 1},
      {"--val-fraction", "F", "the share held out for validation, in (0, 0.5) (default 0.05)", 0},
      {"--tokenizer", "NAME", "bytes (default): each byte a token, vocab 256; gpt2: GPT-2's byte-level\n"
                              "BPE, vocab 50257, tiktoken's gpt2 token for token; sp: a SentencePiece\n"
                              "model trained on the text (or --sp-model-file), stored in the token file;\n"
                              "hf:DIR: a Hugging Face model directory's tokenizer.json (BPE, byte-level\n"
                              "or SentencePiece-style as Llama 2's and Mistral's; stored in the token file with its tokenizer_config.json; ids up to\n"
                              "1048576, written as uint32 above 65536), else its tokenizer.model\n"
                              "through SentencePiece (as sp)", 0},
      {"--tokenizer-dir", "DIR", "gpt2: the directory of GPT-2's encoder.json and vocab.bpe (default\n"
                                 "$MINDPIPE_GPT2_DIR, else ~/.cache/mindpipe/gpt2, where .ci/deps.sh puts them)", 0},
      {"--vocab-size", "N", "sp: the model's pieces, in [260, 65536] (ids are uint16)", 0},
      {"--sp-model", "TYPE", "sp: unigram (default) or bpe", 0},
      {"--sp-model-file", "FILE", "sp: apply this .model instead of training one (its pieces are the vocab)", 0},
      END_OPTS},
     "/train and /val are uint16, or uint32 for a vocabulary above 65536 ids (hf); the token file's\n"
     "attributes: vocab, tokenizer (byte, gpt2, sp or hf), source; with gpt2 tokenizer_sha256,\n"
     "the SHA-256 of encoder.json followed by vocab.bpe; with sp the model's bytes (uint8 dataset\n"
     "/tokenizer/sp_model) and their SHA-256 (tokenizer_sha256). Training is single-threaded and\n"
     "deterministic; the ids must decode back to the text exactly, or prep refuses it (exit 1). A build\n"
     "without SentencePiece refuses --tokenizer sp (exit 2)\n"},
    {"inspect", CMD_POSITIONAL, cmd_inspect, "CKPT.h5",
     "a checkpoint's step, layout, deck and every tensor with its checksum status",
     {END_OPTS},
     "exit status 0 when every checksum verifies, 1 otherwise (a damaged file is reported, never crashes)\n"},
    {"eval", CMD_MPI | CMD_RUN, cmd_eval, "-c DECK --ckpt CKPT.h5 [--subnet 0,2,1] [--set ...]",
     "val_loss of a checkpoint, on any layout",
     {DECK_OPT(0, "the deck (the model and the data)"),
      SET_OPT,
      {"--ckpt", "CKPT.h5", "the checkpoint", 1},
      {"--subnet", "0,2,1", "a supernet checkpoint: the candidate per choice block to evaluate", 0},
      {"--quiet", NULL, "no console output", 0},
      END_OPTS},
     ""},
    {"export", 0, cmd_export,
     "-c DECK --ckpt CKPT.h5 --subnet 0,2,1 --out SUB.h5\n"
     "         | -c DECK --ckpt CKPT.h5 --format hf --out DIR [--dtype fp32|bf16] [--max-shard-size SIZE]\n"
     "           [--tokenizer-dir DIR]",
     "a supernet's subnet as a plain model checkpoint, or a plain model as Hugging Face's GPT-2 or Llama",
     {DECK_OPT(0, "the supernet's deck (--format hf: the model's deck)"),
      SET_OPT,
      {"--ckpt", "CKPT.h5", "the supernet checkpoint (--format hf: a plain model's checkpoint of any layout)", 1},
      {"--format", "FMT", "mindpipe (default): a subnet as our checkpoint; hf: DIR/model.safetensors and\n"
                          "DIR/config.json of a GPT2LMHeadModel, or of a LlamaForCausalLM for\n"
                          "model.arch=llama (no supernet, skip block or per-block shape)", 0},
      {"--dtype", "fp32|bf16", "--format hf of a llama model: the tensors' type (default fp32; bf16: each\n"
                               "weight rounded to the nearest bfloat16, ties to even)", 0},
      {"--max-shard-size", "SIZE", "--format hf of a llama model: weights past SIZE bytes (suffix KB, MB, GB:\n"
                                   "powers of 1000; KiB, MiB, GiB: of 1024) as shards\n"
                                   "model-0000i-of-0000N.safetensors with model.safetensors.index.json,\n"
                                   "as save_pretrained(max_shard_size=...) (default: one file)", 0},
      {"--subnet", "0,2,1", "the candidate per choice block (--format mindpipe, where it is required)", 0},
      {"--out", "SUB.h5|DIR", "the plain checkpoint; prints the [model] blocks = ... it needs\n"
                              "(--format hf: the directory, made if missing; files replaced atomically)", 1},
      {"--tokenizer-dir", "DIR", "--format hf: where the checkpoint's tokenizer comes from, written beside the\n"
                                 "weights: gpt2: encoder.json and vocab.bpe, copied as vocab.json and merges.txt\n"
                                 "with a tokenizer_config.json (default $MINDPIPE_GPT2_DIR, else\n"
                                 "~/.cache/mindpipe/gpt2); sp: a token file or .model file, written as\n"
                                 "tokenizer.model (default: the deck's data.path it trained on); either must\n"
                                 "have the checkpoint's tokenizer_sha256; byte: no tokenizer files", 0},
      {"--quiet", NULL, "no console output", 0},
      END_OPTS},
     ""},
    {"generate", 0, cmd_generate,
     "-c DECK --ckpt CKPT.h5 --prompt TEXT [--max-tokens N] [--temperature T] [--top-k K] [--seed S]\n"
     "         [--request-id N] [--tokenizer-dir DIR]",
     "complete a prompt with a checkpoint's model (CPU, key/value cache); the bytes go to stdout",
     {DECK_OPT(1, "the deck of the model (an exported subnet's: its model.blocks)"),
      SET_OPT,
      {"--ckpt", "CKPT.h5", "a training checkpoint of any layout, or an exported subnet", 1},
      {"--prompt", "TEXT", "encoded with the checkpoint's tokenizer (byte: its bytes are its tokens; gpt2:\n"
                           "GPT-2's BPE; sp: its SentencePiece model) into 1 to model.seq_len - 1 tokens", 1},
      {"--max-tokens", "N", "tokens to generate (default 64); a full context stops it earlier", 0},
      {"--temperature", "T", "0 (default): greedy; else in [0.001, 100], softmax(logits / T)", 0},
      {"--top-k", "K", "draw among the K most likely tokens only (default 0: all)", 0},
      {"--seed", "S", "the draws are a function of (S, request id, position) (default 1)", 0},
      {"--request-id", "N", "the request id of the draws (default 0; serve's request_id)", 0},
      {"--tokenizer-dir", "DIR", "a gpt2 checkpoint: GPT-2's encoder.json and vocab.bpe, whose SHA-256 must be\n"
                                 "the checkpoint's tokenizer_sha256 (default $MINDPIPE_GPT2_DIR, else\n"
                                 "~/.cache/mindpipe/gpt2); an sp checkpoint: a token file or .model file\n"
                                 "holding its SentencePiece model (default: the deck's data.path it trained on);\n"
                                 "an hf checkpoint: its token file, model directory or tokenizer.json (default:\n"
                                 "the deck's data.path); generation stops at tokenizer_config.json's eos_token", 0},
      END_OPTS},
     "stdout: the completion's bytes (its tokens decoded; a gpt2 completion may end inside a UTF-8\n"
     "character), nothing else; stderr: a summary line (tokens, time)\n"},
    {"serve", 0, cmd_serve,
     "-c DECK --ckpt CKPT.h5 [--stages S] [--standby 0|1] [--slots N] [--listen HOST:PORT [--public]]\n"
     "         [--http-limits C,P,D] [--out DIR] [--tokenizer-dir DIR]",
     "serve completions over HTTP on loopback, the model split into pipeline stages (processes) that fail over",
     {DECK_OPT(1, "the model's deck (pipeline.layers splits it as in training)"),
      SET_OPT,
      {"--ckpt", "CKPT.h5", "a training checkpoint of any layout, or an exported subnet", 1},
      {"--stages", "S", "stage processes, each holding a contiguous range of layers (default 1)", 0},
      {"--slots", "N", "sequences decoded together at most (continuous batching; default 8)", 0},
      {"--listen", "H:P", "the HTTP address (default 127.0.0.1:8080; port 0: any free one)", 0},
      {"--public", NULL, "allow an address beyond loopback; needs MINDPIPE_SERVE_TOKEN (16+ characters)\n"
                         "in the environment: with it every request sends Authorization: Bearer TOKEN", 0},
      {"--http-limits", "C,P,D", "at most C connections (default 256; an eighth kept for requests that arrive\n"
                                 "whole; a quarter more answered 503 with Retry-After), P slow requests (not\n"
                                 "whole in 0.3 s) from one client address (default 32; 0: no limit; the\n"
                                 "newest beyond it answered 408), each request whole within D seconds of its\n"
                                 "connection (default 10) or answered 408", 0},
      {"--out", "DIR", "DIR/serve.json (every process: role, stage, layers, pid, address), DIR/sock/\n"
                       "(the stages' sockets, mode 0700), DIR/trace.json (the failover timeline,\n"
                       "Chrome trace events) (default serve)", 0},
      {"--links", "tcp:PORT:H,H0,B0,...", "the stages run on other hosts, started by jobs/slurm/serve.sbatch:\n"
                                          "the front end on H, stage k's primary on Hk and standby on Bk (TCP ports\n"
                                          "from PORT; the job's secret in MINDPIPE_SERVE_SECRET; heartbeats)", 0},
      {"--standby", "0|1", "a standby per stage: loaded, it applies its primary's state deltas once the\n"
                           "front end confirms them and takes over when the primary dies, running\n"
                           "requests resuming from its state (without: a new process is started and\n"
                           "they replay their tokens); either way no request is lost", 0},
      {"--tokenizer-dir", "DIR", "a gpt2 checkpoint: GPT-2's encoder.json and vocab.bpe, whose SHA-256 must be\n"
                                 "the checkpoint's tokenizer_sha256 (default $MINDPIPE_GPT2_DIR, else\n"
                                 "~/.cache/mindpipe/gpt2); an sp checkpoint: a token file or .model file\n"
                                 "holding its SentencePiece model (default: the deck's data.path it trained on);\n"
                                 "an hf checkpoint: its token file, model directory or tokenizer.json (default:\n"
                                 "the deck's data.path); generation stops at tokenizer_config.json's eos_token", 0},
      END_OPTS},
     "POST /v1/completions {\"prompt\", \"max_tokens\", \"temperature\", \"top_k\", \"seed\", \"request_id\",\n"
     "\"stream\"} (stream: server-sent events); prompts are encoded and completions decoded with the\n"
     "checkpoint's tokenizer (\"text\": whole UTF-8 characters, U+FFFD for invalid bytes; \"tokens\": the ids);\n"
     "GET /health; GET /metrics (Prometheus). SIGTERM stops it (exit 0).\n"},
    {"serve-stage", 0, cmd_serve_stage,
     "-c DECK --ckpt CKPT.h5 --stage s --stages S --slots N --links DIR [--standby 0|1|2] [--slot 0|1]",
     "one serving stage (started by serve; the job secret comes in its environment)",
     {DECK_OPT(1, "the model's deck"),
      SET_OPT,
      {"--ckpt", "CKPT.h5", "the checkpoint", 1},
      {"--stage", "s", "this process's stage, in [0, S)", 1},
      {"--stages", "S", "the number of stages", 1},
      {"--slots", "N", "sequences decoded together at most", 1},
      {"--links", "DIR", "where the stages' sockets are (or tcp:... on several hosts)", 1},
      {"--standby", "0|1|2", "1: a standby; 2: a primary shipping state deltas to one", 0},
      {"--slot", "0|1", "on several hosts, the host slot it runs in (default 0 for a primary and 1 for\n"
                        "a standby; a standby restarted after a promotion runs in its dead primary's)", 0},
      END_OPTS},
     ""},
    {"search", CMD_MPI | CMD_RUN, cmd_search,
     "-c DECK --ckpt CKPT.h5 --out DIR [--method evolution|random] [--population 8] [--generations 4]\n"
     "         [--mutation 0.2] [--max-params N] [--max-flops N] [--seed S]",
     "search a supernet's subnets by val_loss",
     {DECK_OPT(0, "the supernet's deck"),
      SET_OPT,
      {"--ckpt", "CKPT.h5", "the supernet checkpoint", 1},
      {"--out", "DIR", "DIR/search.jsonl: every subnet evaluated", 1},
      {"--method", "M", "evolution (default) or random", 0},
      {"--population", "N", "subnets per generation (default 8)", 0},
      {"--generations", "N", "generations (default 4)", 0},
      {"--mutation", "P", "probability a gene is redrawn (default 0.2)", 0},
      {"--max-params", "N", "only subnets with at most N parameters", 0},
      {"--max-flops", "N", "only subnets with at most N FLOPs per token", 0},
      {"--seed", "S", "the search's seed (default 1)", 0},
      {"--quiet", NULL, "no console output", 0},
      END_OPTS},
     ""},
    {"debug-grads", CMD_MPI | CMD_RUN, cmd_debug_grads, "-c DECK [--set ...] --out FILE.h5",
     "step-0 gradients for the PyTorch check (one rank)",
     {DECK_OPT(1, "the deck"),
      SET_OPT,
      {"--out", "FILE.h5", "the parameters, /grad, /batch and the loss", 1},
      {"--quiet", NULL, "no console output", 0},
      END_OPTS},
     ""},
    {"deck-reference", 0, cmd_deck_reference, "", "the Markdown table of every deck key (docs/DECK.md)", {END_OPTS},
     ""},
    {"cli-reference", 0, cmd_cli_reference, "", "every command and option as Markdown (docs/CLI.md)", {END_OPTS}, ""},
    {"peak", 0, cmd_peak, "[--threads N]", "the measured sgemm GFLOP/s: the MFU denominator",
     {{"--threads", "N", "threads of the measurement (default 1)", 0}, END_OPTS},
     ""},
    {"sim", 0, cmd_sim,
     "--schedule gpipe|1f1b|interleaved|2bw|zb1p|zbv|dualpipev --pp P --m M [--v V] [--costs TF,TB,TW] [--list]\n"
     "         | --swap [--alpha A]",
     "simulate a pipeline schedule (validity, bubble, stash; beside 1f1b's), or coordinated against uncoordinated "
     "host swapping",
     {{"--schedule", "S",
       "gpipe, 1f1b, interleaved, 2bw, or the zero-bubble zb1p, zbv, dualpipev", 0},
      {"--pp", "P", "stages", 0},
      {"--m", "M", "micro-batches", 0},
      {"--v", "V", "virtual stages per rank (interleaved; zbv and dualpipev: 2, their V)", 0},
      {"--costs", "TF,TB,TW", "per-stage times of a forward, an input gradient B and a weight gradient W (default\n"
                              "1,1,1; a fused backward takes TB + TW); the zero-bubble lists are built for them", 0},
      {"--list", NULL, "print each stage's instruction list", 0},
      {"--swap", NULL, "the swap simulator's tables at 2, 4, 8 ranks per node (docs/MEMORY.md)", 0},
      {"--alpha", "A", "the swap simulator's contention factor, in [0, 10]", 0},
      END_OPTS},
     ""},
    {"plan", 0, cmd_plan,
     "-c DECK (--ranks N | --layout tp=..,pp=..,dp=..,v=..,micro_batch=..) [--device KIND] [--devices FILE] [--nodes-of R]\n"
     "         [--profile PROF.json] [--precision bf16|tf32|fp32] [--top K] [--json] [--objective time|energy|carbon]\n"
     "         [--tokens N [--deadline HOURS]] [--emit DECK]",
     "predict a layout's step time, throughput, MFU, memory and energy, or search the best layouts (vPipe)",
     {DECK_OPT(1, "the model, batch and (for --layout) the parallel keys and memory.policy"),
      SET_OPT,
      {"--ranks", "N", "search every layout of N ranks (tp x pp x dp, v, micro-batch, schedule, ZeRO,\n"
                       "stage boundaries, a memory policy per stage) that fits the device memory", 0},
      {"--layout", "K=V,...", "predict one layout instead: tp, pp, dp, v, micro_batch, schedule, zero, policy\n"
                              "(unset keys come from the deck); exit 1 when it does not fit", 0},
      {"--device", "KIND", "a kind of the device file (default cpu: this machine)", 0},
      {"--devices", "FILE", "the device file (default $MINDPIPE_DEVICES, else inputs/devices.ini)", 0},
      {"--nodes-of", "R", "ranks per node (default: the kind's per_node; a CPU kind: the whole job)", 0},
      {"--profile", "PROF.json", "per-layer costs measured by mindpipe profile instead of the device model's", 0},
      {"--precision", "P", "the peak products run at (default the deck's train.precision)", 0},
      {"--top", "K", "print the K best plans (default 5)", 0},
      {"--json", NULL, "one JSON object per plan and line (step_time_s, tokens_per_s, tflops_per_gpu,\n"
                       "mfu, peak_mem_bytes per stage, ...)", 0},
      {"--objective", "O", "rank by step time (default), energy per token or CO2 per token", 0},
      {"--tokens", "N", "also print the whole run's hours, kWh and kg CO2 for N tokens", 0},
      {"--deadline", "HOURS", "with --tokens: plans that finish the N tokens within HOURS rank first (by the\n"
                              "objective), the others after them, marked; exit 1 when none meets it", 0},
      {"--emit", "DECK", "write the deck with the first plan's layout (pipeline.layers, memory.layers)", 0},
      END_OPTS},
     "docs/PLAN.md defines every figure and how it is predicted.\n"},
    {"profile", CMD_MPI, cmd_profile, "-c DECK --out PROF.json [--set ...]",
     "measure per-layer costs on this machine and probe the job's MPI links, for mindpipe plan --profile",
     {DECK_OPT(1, "the model and micro-batch to measure (the CPU backend, train.threads threads)"),
      SET_OPT,
      {"--out", "PROF.json", "the profile (rank 0 writes it); under mpiexec -n N the probe measures p2p\n"
                             "between ranks 0 and 1 and all-reduce over all N", 1},
      END_OPTS},
     ""},
    {"selftest", CMD_MPI, cmd_selftest, "--device cpu|cuda[:N] [--verbose]", "each CUDA kernel against its CPU twin",
     {{"--device", "D", "cpu, or cuda[:N] (a GPU; without one: says so and exits 1)", 0},
      {"--verbose", NULL, "every kernel's error", 0},
      END_OPTS},
     ""},
};

#define NCOMMANDS (sizeof commands / sizeof commands[0])

const command_t *command_find(const char *name)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (!strcmp(commands[i].name, name)) return &commands[i];
    return NULL;
}

static const cmd_opt_t *command_opt(const command_t *cmd, const opt_def_t *def)
{
    for (int i = 0; cmd->opts[i].name; i++)
        if (!strcmp(cmd->opts[i].name, def->name)) return &cmd->opts[i];
    return NULL;
}

int command_takes(const command_t *cmd, const char *opt)
{
    const opt_def_t *def = opt_find(opt);
    return def && command_opt(cmd, def);
}

/* ---- parsing ---- */

/* "--deck DECK" or "-c, --deck DECK": how help and errors name an option. */
static void opt_label(char *buf, size_t n, const opt_def_t *def, const cmd_opt_t *o)
{
    snprintf(buf, n, "%s%s%s%s%s", def->alias ? def->alias : "", def->alias ? ", " : "", def->name,
             o && o->meta ? " " : "", o && o->meta ? o->meta : "");
}

/* The numbers are read as the deck's are (numparse.h): whole or refused. */
static int parse_value(cli_t *c, const opt_def_t *def, const char *cmd, const char *v)
{
    char *p = (char *)c + def->off;
    switch (def->type) {
    case T_STR: *(const char **)p = v; return MP_OK;
    case T_INT: {
        long long x;
        if (num_parse_long(v, &x) != MP_OK) return MP_FAIL("%s %s: '%s' is not an integer", cmd, def->name, v);
        if (x < def->min || x > def->max)
            return MP_FAIL("%s %s: %lld is outside [%.0f, %.0f]", cmd, def->name, x, def->min, def->max);
        *(int *)p = (int)x;
        return MP_OK;
    }
    case T_U64: {
        uint64_t x;
        if (num_parse_u64(v, &x) != MP_OK)
            return MP_FAIL("%s %s: '%s' is not an integer in [0, 2^64)", cmd, def->name, v);
        *(unsigned long long *)p = x;
        return MP_OK;
    }
    case T_DBL: {
        double x;
        if (num_parse_double(v, &x) != MP_OK) return MP_FAIL("%s %s: '%s' is not a number", cmd, def->name, v);
        if (x < def->min || x > def->max)
            return MP_FAIL("%s %s: %g is outside [%g, %g]", cmd, def->name, x, def->min, def->max);
        *(double *)p = x;
        return MP_OK;
    }
    case T_SET:
        if (c->run.nsets == CLI_MAX_SETS) return MP_FAIL("%s: more than %d --set options", cmd, CLI_MAX_SETS);
        c->sets[c->run.nsets++] = (char *)v;
        return MP_OK;
    case T_FLAG: break;
    }
    return MP_FAIL("%s %s: internal: no value expected", cmd, def->name);
}

int cli_parse(cli_t *c, const command_t *cmd, int argc, char **argv)
{
    memset(c, 0, sizeof *c);
    c->val_fraction = 0.05;
    c->alpha = -1.0; /* unset: the simulator's own */
    c->population = 8, c->generations = 4, c->mutation = 0.2;
    c->max_tokens = 64;
    c->stages = 1, c->slots = 8, c->stage = -1, c->slot = -1;
    unsigned char given[sizeof catalogue / sizeof catalogue[0]] = {0};
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] == '-' && a[1]) {
            const opt_def_t *def = opt_find(a);
            if (!def) return MP_FAIL("unknown option '%s' for '%s' (mindpipe %s --help lists its options)", a, cmd->name, cmd->name);
            const cmd_opt_t *o = command_opt(cmd, def);
            if (!o)
                return MP_FAIL("option '%s' does not apply to '%s' (mindpipe %s --help lists its options)", a,
                               cmd->name, cmd->name);
            given[def - catalogue] = 1;
            if (def->given != NO_FLAG) *(int *)((char *)c + def->given) = 1;
            if (def->type == T_FLAG) {
                *(int *)((char *)c + def->off) = 1;
                continue;
            }
            if (i + 1 >= argc) {
                char label[96];
                opt_label(label, sizeof label, def, o);
                return MP_FAIL("%s: option %s needs a value", cmd->name, label);
            }
            if (parse_value(c, def, cmd->name, argv[++i]) != MP_OK) return MP_ERR;
        } else if ((cmd->flags & CMD_POSITIONAL) && !c->positional) {
            c->positional = a;
        } else {
            return MP_FAIL("unexpected argument '%s' for '%s': %s (see mindpipe %s --help)", a, cmd->name,
                           (cmd->flags & CMD_POSITIONAL) ? "it takes one file"
                                                         : "this command takes no file or directory without an "
                                                           "option (the run directory is --out DIR)",
                           cmd->name);
        }
    }
    for (int k = 0; cmd->opts[k].name; k++) {
        const opt_def_t *def = opt_find(cmd->opts[k].name);
        if (cmd->opts[k].required && !given[def - catalogue]) {
            char label[96];
            opt_label(label, sizeof label, def, &cmd->opts[k]);
            return MP_FAIL("%s needs %s (mindpipe %s --help)", cmd->name, label, cmd->name);
        }
    }
    if ((cmd->flags & CMD_POSITIONAL) && !c->positional)
        return MP_FAIL("%s needs %s (mindpipe %s --help)", cmd->name, cmd->synopsis, cmd->name);
    if (c->run.init_from && c->run.resume)
        return MP_FAIL("--init-from and --resume exclude each other: --init-from starts a fresh run (step 0) from "
                       "other weights, --resume continues a run from its checkpoint");
    if (c->run.init_from && strncmp(c->run.init_from, "hf:", 3))
        return MP_FAIL("--init-from '%s': the only source is hf:DIR (a directory with model.safetensors)",
                       c->run.init_from);
    if (c->run.restart && c->run.resume)
        return MP_FAIL("--restart and --resume exclude each other: --resume continues the run in --out, --restart "
                       "starts a new one there");
    c->run.sets = c->sets;
    c->run.out_dir = c->out;
    return MP_OK;
}

/* ---- help and reference ---- */

void commands_usage(FILE *f)
{
    fprintf(f, "usage: mindpipe COMMAND [options]   (mindpipe COMMAND --help: that command's options)\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %s %s\n        %s\n", commands[i].name, commands[i].synopsis, commands[i].summary);
    fprintf(f, "  --version | --help\n");
}

/* Help text with its continuation lines indented under the first. */
static void print_help_lines(FILE *f, const char *help, int indent)
{
    for (const char *s = help; *s; s++) {
        fputc(*s, f);
        if (*s == '\n' && s[1]) fprintf(f, "%*s", indent, "");
    }
    fputc('\n', f);
}

void command_usage(FILE *f, const command_t *cmd)
{
    fprintf(f, "usage: mindpipe %s %s\n%s\n", cmd->name, cmd->synopsis, cmd->summary);
    if (cmd->opts[0].name) fprintf(f, "\n");
    for (int k = 0; cmd->opts[k].name; k++) {
        const cmd_opt_t *o = &cmd->opts[k];
        char label[96];
        opt_label(label, sizeof label, opt_find(o->name), o);
        fprintf(f, "  %-20s ", label);
        print_help_lines(f, o->help, 23);
    }
    if (cmd->notes[0]) fprintf(f, "%s%s", cmd->opts[0].name ? "" : "\n", cmd->notes);
}

static void type_text(char *buf, size_t n, const opt_def_t *d)
{
    switch (d->type) {
    case T_FLAG: snprintf(buf, n, "flag"); break;
    case T_STR: snprintf(buf, n, "text"); break;
    case T_SET: snprintf(buf, n, "text, repeatable"); break;
    case T_INT: snprintf(buf, n, "integer in [%.0f, %.0f]", d->min, d->max); break;
    case T_U64: snprintf(buf, n, "integer in [0, 2^64)"); break;
    case T_DBL: snprintf(buf, n, "number in [%g, %g]", d->min, d->max); break;
    }
}

/* Markdown table cells hold no newline and no bar. */
static void md_cell(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '\n') fputc(' ', f);
        else if (*s == '|') fputs("\\|", f);
        else fputc(*s, f);
    }
}

void commands_reference(FILE *f)
{
    fprintf(f, "# The command line\n\n"
               "Generated by `mindpipe cli-reference` from the command table (`src/cli/commands.c`); "
               "`validation/test_cli.sh` checks that this file is its output. Every value is checked "
               "against its type and range before the command runs: a wrong one is refused naming the "
               "option, with exit status 2.\n");
    for (size_t i = 0; i < NCOMMANDS; i++) {
        const command_t *c = &commands[i];
        fprintf(f, "\n## %s\n\n```\nmindpipe %s %s\n```\n\n%s%s\n", c->name, c->name, c->synopsis, c->summary,
                (c->flags & CMD_MPI) ? " (initialises MPI: runs under mpiexec or alone)" : "");
        if (c->opts[0].name) {
            fprintf(f, "\n| option | value | required | what |\n|---|---|---|---|\n");
            for (int k = 0; c->opts[k].name; k++) {
                const cmd_opt_t *o = &c->opts[k];
                const opt_def_t *d = opt_find(o->name);
                char ty[64];
                type_text(ty, sizeof ty, d);
                fprintf(f, "| `%s%s%s` | ", d->alias ? d->alias : "", d->alias ? "`, `" : "", d->name);
                if (o->meta) {
                    fprintf(f, "`");
                    md_cell(f, o->meta);
                    fprintf(f, "`: ");
                }
                fprintf(f, "%s | %s | ", ty, o->required ? "yes" : "");
                md_cell(f, o->help);
                fprintf(f, " |\n");
            }
        }
        if (c->notes[0]) fprintf(f, "\n%s", c->notes); /* a paragraph: its line breaks are Markdown's */
    }
}
