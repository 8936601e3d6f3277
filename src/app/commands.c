#include "commands.h"

#include <string.h>

#define RUN_OPTS "-c", "--deck", "--set"

static const command_t commands[] = {
    {"train", CMD_MPI, "[-c DECK] [--set section.key=value]... [--out DIR] [--resume PATH|auto | --restart] [--quiet]",
     "train the deck's model (under mpiexec: on every rank of the job's layout)",
     {RUN_OPTS, "--out", "--resume", "--restart", "--quiet", NULL},
     "  -c, --deck DECK      the input deck (docs/DECK.md; without it, the defaults)\n"
     "  --set S.K=V          override one deck key (repeatable; applied after the deck, in order)\n"
     "  --out DIR            the run directory (default run): log.txt, metrics.jsonl, trace.json,\n"
     "                       exit_status, ckpt/; locked while the run uses it\n"
     "  --resume PATH|auto   continue from a checkpoint; auto: the newest in DIR/ckpt that verifies and\n"
     "                       fits the deck (none: start at step 0)\n"
     "  --restart            a fresh run into a DIR holding checkpoints moves them to DIR/ckpt.old-TIME/\n"
     "                       (without it, or --resume, such a run is refused)\n"
     "  --quiet              no console output (the log and metrics are still written)\n"
     "exit status: 0 done, 75 stopped by SIGUSR1/SIGTERM after a checkpoint (requeue and --resume auto),\n"
     "1 failed (also in DIR/exit_status)\n"},
    {"prep", 0, "--text FILE --out DATA.h5 [--val-fraction F]", "turn a text file into a token file (bytes as tokens)",
     {"--text", "--out", "--val-fraction", NULL},
     "  --text FILE          the text (UTF-8 or any bytes)\n"
     "  --out DATA.h5        the token file (written atomically)\n"
     "  --val-fraction F     the share held out for validation, in (0, 0.5) (default 0.05)\n"},
    {"inspect", 0, "CKPT.h5", "a checkpoint's step, layout, deck and every tensor with its checksum status", {NULL},
     "  exit status 0 when every checksum verifies, 1 otherwise (a damaged file is reported, never crashes)\n"},
    {"eval", CMD_MPI, "-c DECK --ckpt CKPT.h5 [--subnet 0,2,1] [--set ...]", "val_loss of a checkpoint, on any layout",
     {RUN_OPTS, "--ckpt", "--subnet", "--quiet", NULL},
     "  -c, --deck DECK      the deck (the model and the data)\n"
     "  --set S.K=V          override one deck key (repeatable)\n"
     "  --ckpt CKPT.h5       the checkpoint\n"
     "  --subnet 0,2,1       a supernet checkpoint: the candidate per choice block to evaluate\n"},
    {"export", 0, "-c DECK --ckpt CKPT.h5 --subnet 0,2,1 --out SUB.h5", "a supernet's subnet as a plain model checkpoint",
     {RUN_OPTS, "--ckpt", "--subnet", "--out", "--quiet", NULL},
     "  -c, --deck DECK      the supernet's deck; --set S.K=V overrides a key\n"
     "  --ckpt CKPT.h5       the supernet checkpoint\n"
     "  --subnet 0,2,1       the candidate per choice block\n"
     "  --out SUB.h5         the plain checkpoint; prints the [model] blocks = ... it needs\n"},
    {"generate", 0,
     "-c DECK --ckpt CKPT.h5 --prompt TEXT [--max-tokens N] [--temperature T] [--top-k K] [--seed S]\n"
     "         [--request-id N]",
     "complete a prompt with a checkpoint's model (CPU, key/value cache); the bytes go to stdout",
     {RUN_OPTS, "--ckpt", "--prompt", "--max-tokens", "--temperature", "--top-k", "--seed", "--request-id", NULL},
     "  -c, --deck DECK      the deck of the model (an exported subnet's: its model.blocks); --set S.K=V\n"
     "  --ckpt CKPT.h5       a training checkpoint of any layout, or an exported subnet\n"
     "  --prompt TEXT        the prompt's bytes are its tokens (1 to model.seq_len - 1 of them)\n"
     "  --max-tokens N       bytes to generate (default 64); a full context stops it earlier\n"
     "  --temperature T      0 (default): greedy; else in [0.001, 100], softmax(logits / T)\n"
     "  --top-k K            draw among the K most likely bytes only (default 0: all)\n"
     "  --seed S             the draws are a function of (S, request id, position) (default 1)\n"
     "  --request-id N       the request id of the draws (default 0; serve's request_id)\n"
     "  stdout: the completion's bytes, nothing else; stderr: a summary line (tokens, time)\n"},
    {"serve", 0,
     "-c DECK --ckpt CKPT.h5 [--stages S] [--standby 0|1] [--slots N] [--listen HOST:PORT [--public]]\n"
     "         [--http-limits C,P,D] [--out DIR]",
     "serve completions over HTTP on loopback, the model split into pipeline stages (processes) that fail over",
     {RUN_OPTS, "--ckpt", "--stages", "--slots", "--listen", "--public", "--out", "--standby", "--links", "--http-limits",
      NULL},
     "  -c, --deck DECK      the model's deck (pipeline.layers splits it as in training); --set S.K=V\n"
     "  --ckpt CKPT.h5       a training checkpoint of any layout, or an exported subnet\n"
     "  --stages S           stage processes, each holding a contiguous range of layers (default 1)\n"
     "  --slots N            sequences decoded together at most (continuous batching; default 8)\n"
     "  --listen H:P         the HTTP address (default 127.0.0.1:8080; port 0: any free one)\n"
     "  --public             allow an address beyond loopback; needs MINDPIPE_SERVE_TOKEN (16+ characters)\n"
     "                       in the environment: with it every request sends Authorization: Bearer TOKEN\n"
     "  --http-limits C,P,D  at most C connections (default 256; an eighth kept for requests that arrive\n"
     "                       whole), P from one client address (default 32; 0: no limit), each request\n"
     "                       whole within D seconds of its connection (default 10) or answered 408\n"
     "  --out DIR            DIR/serve.json (every process: role, stage, layers, pid, address), DIR/sock/\n"
     "                       (the stages' sockets, mode 0700), DIR/trace.json (the failover timeline,\n"
     "                       Chrome trace events) (default serve)\n"
     "  --links tcp:PORT:H,H0,B0,...  the stages run on other hosts, started by jobs/slurm/serve.sbatch:\n"
     "                       the front end on H, stage k's primary on Hk and standby on Bk (TCP ports\n"
     "                       from PORT; the job's secret in MINDPIPE_SERVE_SECRET; heartbeats)\n"
     "  --standby 0|1        a standby per stage: loaded, it applies its primary's state deltas once the\n"
     "                       front end confirms them and takes over when the primary dies, running\n"
     "                       requests resuming from its state (without: a new process is started and\n"
     "                       they replay their tokens); either way no request is lost\n"
     "  POST /v1/completions {\"prompt\", \"max_tokens\", \"temperature\", \"top_k\", \"seed\", \"request_id\",\n"
     "  \"stream\"} (stream: server-sent events);\n"
     "  GET /health; GET /metrics (Prometheus). SIGTERM stops it (exit 0).\n"},
    {"serve-stage", 0, "-c DECK --ckpt CKPT.h5 --stage s --stages S --slots N --links DIR [--standby 0|1|2] [--slot 0|1]",
     "one serving stage (started by serve; the job secret comes in its environment; --standby 1: a standby, "
     "2: a primary shipping state deltas to one; --slot: on several hosts, the host slot it runs in, default 0 for "
     "a primary and 1 for a standby; a standby restarted after a promotion runs in its dead primary's)",
     {RUN_OPTS, "--ckpt", "--stage", "--stages", "--slots", "--links", "--standby", "--slot", NULL}, ""},
    {"search", CMD_MPI,
     "-c DECK --ckpt CKPT.h5 --out DIR [--method evolution|random] [--population 8] [--generations 4]\n"
     "         [--mutation 0.2] [--max-params N] [--max-flops N] [--seed S]",
     "search a supernet's subnets by val_loss",
     {RUN_OPTS, "--ckpt", "--out", "--method", "--population", "--generations", "--mutation", "--max-params",
      "--max-flops", "--seed", "--quiet", NULL},
     "  -c, --deck DECK      the supernet's deck; --set S.K=V overrides a key\n"
     "  --ckpt CKPT.h5       the supernet checkpoint\n"
     "  --out DIR            DIR/search.jsonl: every subnet evaluated\n"
     "  --method M           evolution (default) or random\n"
     "  --population N       subnets per generation (default 8)\n"
     "  --generations N      generations (default 4)\n"
     "  --mutation P         probability a gene is redrawn (default 0.2)\n"
     "  --max-params N       only subnets with at most N parameters\n"
     "  --max-flops N        only subnets with at most N FLOPs per token\n"
     "  --seed S             the search's seed (default 1)\n"},
    {"debug-grads", CMD_MPI, "-c DECK [--set ...] --out FILE.h5", "step-0 gradients for the PyTorch check (one rank)",
     {RUN_OPTS, "--out", "--quiet", NULL},
     "  -c, --deck DECK      the deck; --set S.K=V overrides a key\n"
     "  --out FILE.h5        the parameters, /grad, /batch and the loss\n"},
    {"deck-reference", 0, "", "the Markdown table of every deck key (docs/DECK.md)", {NULL}, ""},
    {"peak", 0, "[--threads N]", "the measured sgemm GFLOP/s: the MFU denominator", {"--threads", NULL},
     "  --threads N          threads of the measurement (default 1)\n"},
    {"sim", 0, "--schedule gpipe|1f1b|interleaved|2bw --pp P --m M [--v V] [--list] | --swap [--alpha A]",
     "simulate a pipeline schedule (validity, bubble), or coordinated against uncoordinated host swapping",
     {"--schedule", "--pp", "--m", "--v", "--list", "--swap", "--alpha", NULL},
     "  --schedule S         gpipe, 1f1b, interleaved or 2bw\n"
     "  --pp P, --m M        stages and micro-batches\n"
     "  --v V                virtual stages per rank (interleaved)\n"
     "  --list               print each stage's instruction list\n"
     "  --swap               the swap simulator's tables at 2, 4, 8 ranks per node (docs/MEMORY.md)\n"
     "  --alpha A            the swap simulator's contention factor, in [0, 10]\n"},
    {"plan", 0,
     "-c DECK (--ranks N | --layout tp=..,pp=..,dp=..,v=..,micro_batch=..) [--device KIND] [--devices FILE] [--nodes-of R]\n"
     "         [--profile PROF.json] [--precision bf16|tf32|fp32] [--top K] [--json] [--objective time|energy|carbon]\n"
     "         [--tokens N [--deadline HOURS]] [--emit DECK]",
     "predict a layout's step time, throughput, MFU, memory and energy, or search the best layouts (vPipe)",
     {RUN_OPTS, "--ranks", "--layout", "--device", "--devices", "--profile", "--precision", "--top", "--json",
      "--objective", "--tokens", "--deadline", "--emit", "--nodes-of", NULL},
     "  -c, --deck DECK      the model, batch and (for --layout) the parallel keys and memory.policy\n"
     "  --set S.K=V          override one deck key (repeatable)\n"
     "  --ranks N            search every layout of N ranks (tp x pp x dp, v, micro-batch, schedule, ZeRO,\n"
     "                       stage boundaries, a memory policy per stage) that fits the device memory\n"
     "  --layout K=V,...     predict one layout instead: tp, pp, dp, v, micro_batch, schedule, zero, policy\n"
     "                       (unset keys come from the deck); exit 1 when it does not fit\n"
     "  --device KIND        a kind of the device file (default cpu: this machine)\n"
     "  --devices FILE       the device file (default $MINDPIPE_DEVICES, else inputs/devices.ini)\n"
     "  --nodes-of R         ranks per node (default: the kind's per_node; a CPU kind: the whole job)\n"
     "  --profile PROF.json  per-layer costs measured by mindpipe profile instead of the device model's\n"
     "  --precision P        the peak products run at (default the deck's train.precision)\n"
     "  --top K              print the K best plans (default 5)\n"
     "  --json               one JSON object per plan and line (step_time_s, tokens_per_s, tflops_per_gpu,\n"
     "                       mfu, peak_mem_bytes per stage, ...)\n"
     "  --objective O        rank by step time (default), energy per token or CO2 per token\n"
     "  --tokens N           also print the whole run's hours, kWh and kg CO2 for N tokens\n"
     "  --deadline HOURS     with --tokens: plans that finish the N tokens within HOURS rank first (by the\n"
     "                       objective), the others after them, marked; exit 1 when none meets it\n"
     "  --emit DECK          write the deck with the first plan's layout (pipeline.layers, memory.layers)\n"
     "docs/PLAN.md defines every figure and how it is predicted.\n"},
    {"profile", CMD_MPI, "-c DECK --out PROF.json [--set ...]",
     "measure per-layer costs on this machine and probe the job's MPI links, for mindpipe plan --profile",
     {RUN_OPTS, "--out", NULL},
     "  -c, --deck DECK      the model and micro-batch to measure (the CPU backend, train.threads threads)\n"
     "  --set S.K=V          override one deck key (repeatable)\n"
     "  --out PROF.json      the profile (rank 0 writes it); under mpiexec -n N the probe measures p2p\n"
     "                       between ranks 0 and 1 and all-reduce over all N\n"},
    {"selftest", CMD_MPI, "--device cpu|cuda[:N] [--verbose]", "each CUDA kernel against its CPU twin",
     {"--device", "--verbose", NULL},
     "  --device D           cpu, or cuda[:N] (a GPU; without one: says so and exits 1)\n"
     "  --verbose            every kernel's error\n"},
};

const command_t *command_find(const char *name)
{
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(commands[i].name, name)) return &commands[i];
    return NULL;
}

int command_takes(const command_t *cmd, const char *opt)
{
    for (int i = 0; cmd->options[i]; i++)
        if (!strcmp(cmd->options[i], opt)) return 1;
    return 0;
}

void commands_usage(FILE *f)
{
    fprintf(f, "usage: mindpipe COMMAND [options]   (mindpipe COMMAND --help: that command's options)\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %s %s\n        %s\n", commands[i].name, commands[i].synopsis, commands[i].summary);
    fprintf(f, "  --version | --help\n");
}

void command_usage(FILE *f, const command_t *cmd)
{
    fprintf(f, "usage: mindpipe %s %s\n%s\n", cmd->name, cmd->synopsis, cmd->summary);
    if (cmd->details[0]) fprintf(f, "\n%s", cmd->details);
}
