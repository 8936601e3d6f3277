/* Input decks (deck.h). One schema table, `keys[]`, drives everything: defaults, the file parser,
 * --set overrides, the writer and the Markdown reference all walk it, so adding a key is one line.
 * The only per-key code is the cross-key rules in deck_validate and the few single-key parsers
 * (parse_*) that the table points to.
 *
 * Each value is parsed here once, into its typed field: a choice into its enum (deck_write prints
 * the name back, so the written deck is the same text), a string with a syntax into the struct or
 * array beside its text (the text kept as written, for deck_write).
 *
 * Messages name where the value came from ("FILE:LINE" or "--set 'ASSIGNMENT'"), section.key, the
 * value and the rule. A file is parsed to the end so that every mistake in it is reported at once.
 *
 * libinih gives no line numbers to the handler in Debian's build (INI_HANDLER_LINENO=0), so the file
 * is fed through our own fgets-style reader, which counts lines and also sees [section] headers
 * (inih calls the handler only for key = value lines, so an unknown empty section would pass
 * unnoticed otherwise). */
#include "deck.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "block_kind.h"
#include "check.h"
#include "compose.h"
#include "numparse.h"
#include "params.h"

typedef enum { T_INT, T_U64, T_DOUBLE, T_BOOL, T_BYTES, T_STRING, T_PATH, T_CHOICE } key_type_t;

enum { EXCL_MIN = 1, EXCL_MAX = 2 }; /* open ends of the [min, max] range */

/* What a T_STRING key's text parses into (the largest of its typed fields). */
typedef union {
    deck_dim_t dims[DECK_DIMS];
    deck_layer_list_t list;
    deck_block_list_t blocks;
    deck_policy_list_t policies;
    deck_fail_at_t fail;
    model_arch_t arch;
} parsed_t;

/* The syntax of one T_STRING key: MP_OK with the value in *out (a parsed_t), or MP_ERR with the
 * reason in why (*out undefined). */
typedef int (*key_parse_fn)(const char *value, void *out, char *why, size_t nwhy);

typedef struct {
    const char *section, *key;
    key_type_t type;
    size_t offset, size;   /* of the field in deck_t (T_CHOICE: the enum; T_STRING: the text) */
    const char *def;       /* default, parsed like any value */
    double min, max;       /* numeric types; ±HUGE_VAL = unbounded */
    unsigned excl;         /* EXCL_MIN / EXCL_MAX */
    const char *const *names; /* T_CHOICE: the choices, by enum value */
    int nnames;
    size_t text_offset, text_size;     /* T_CHOICE: a char field given the name too (size 0: none) */
    key_parse_fn parse;    /* T_STRING: its syntax, or NULL (any text) */
    size_t parsed_offset, parsed_size; /* T_STRING with parse: the typed field it fills */
    const char *rule;      /* T_STRING with parse: the rule in words (reference) */
    void (*rule_fn)(char *out, size_t n); /* ... or written by a function (words that live elsewhere) */
    const char *doc;
} deck_key_t;

const char *const deck_device_names[DECK_DEVICE_COUNT] = {"cpu", "emu", "cuda"};
const char *const deck_order_names[DECK_ORDER_COUNT] = {"random", "sequential"};
const char *const deck_precision_names[DECK_PRECISION_COUNT] = {"fp32", "bf16"};
const char *const deck_attention_names[DECK_ATTENTION_COUNT] = {"auto", "fused"};
const char *const deck_wait_names[DECK_WAIT_COUNT] = {"auto", "yield", "spin"};
const char *const deck_p2p_names[DECK_P2P_COUNT] = {"auto", "mpi", "nccl"};
const char *const deck_replan_times_names[DECK_REPLAN_COUNT] = {"measured", "modelled"};
const char *const deck_subnets_names[DECK_SUBNETS_COUNT] = {"causal", "serial"};
const char *const deck_resident_names[DECK_RESIDENT_COUNT] = {"device", "host"};
const char *const deck_transfer_names[DECK_TRANSFER_COUNT] = {"auto", "collective", "independent"};
static const char *const dim_names[DECK_DIMS] = {"tp", "dp", "sp", "pp"};

static int parse_order(const char *v, void *out, char *why, size_t nwhy);
static int parse_layer_list(const char *v, void *out, char *why, size_t nwhy);
static int parse_fail_at(const char *v, void *out, char *why, size_t nwhy);
static int parse_policy_list(const char *v, void *out, char *why, size_t nwhy);
static int parse_block_list(const char *v, void *out, char *why, size_t nwhy);
static int parse_index_list(const char *v, void *out, char *why, size_t nwhy);
static int parse_sched_costs(const char *v, void *out, char *why, size_t nwhy);
static int parse_pass_times(const char *v, void *out, char *why, size_t nwhy);
static int parse_arch(const char *v, void *out, char *why, size_t nwhy);
static void arch_rule(char *out, size_t n);
static const char *type_name(key_type_t t);

#define INF HUGE_VAL
#define FIELD_SIZE(s, f) sizeof(((deck_t *)0)->s.f)
/* Key s.k stored in field s.f; the rest of the row as designated initializers. */
#define KEY_AT(s, k, f, t, def_, ...)                                                                         \
    {.section = #s, .key = #k, .type = t, .offset = offsetof(deck_t, s.f), .size = FIELD_SIZE(s, f),          \
     .def = def_, __VA_ARGS__}
#define KEY(s, k, t, def_, ...) KEY_AT(s, k, k, t, def_, __VA_ARGS__)
#define K_INT(s, k, def_, lo, hi, doc_) KEY(s, k, T_INT, def_, .min = lo, .max = hi, .doc = doc_)
#define K_U64(s, k, def_, doc_) KEY(s, k, T_U64, def_, .min = 0, .max = INF, .doc = doc_)
#define K_NUM(s, k, def_, lo, hi, ex, doc_) KEY(s, k, T_DOUBLE, def_, .min = lo, .max = hi, .excl = ex, .doc = doc_)
#define K_BOOL(s, k, def_, doc_) KEY(s, k, T_BOOL, def_, .min = 0, .max = 1, .doc = doc_)
#define K_BYTES(s, k, def_, doc_) KEY(s, k, T_BYTES, def_, .min = 0, .max = INF, .doc = doc_)
#define NAMES(ch) .names = ch, .nnames = (int)(sizeof ch / sizeof ch[0])
#define K_CHOICE(s, k, def_, ch, doc_) KEY(s, k, T_CHOICE, def_, NAMES(ch), .doc = doc_)
/* A choice whose enum lives in s.f and whose name is also copied to the char field s.k: for code
 * that still reads the text (transitional). */
#define K_CHOICE_TEXT(s, k, f, def_, ch, doc_)                                                                \
    KEY_AT(s, k, f, T_CHOICE, def_, NAMES(ch), .text_offset = offsetof(deck_t, s.k), .text_size = FIELD_SIZE(s, k), \
           .doc = doc_)
/* Text with a syntax, kept as written in s.k and parsed by fn into the typed field s.p. */
#define K_PARSED(s, k, p, def_, fn, rule_, doc_)                                                              \
    KEY(s, k, T_STRING, def_, .parse = fn, .parsed_offset = offsetof(deck_t, s.p), .parsed_size = FIELD_SIZE(s, p), \
        .rule = rule_, .doc = doc_)
#define K_PATH(s, k, def_, doc_) KEY(s, k, T_PATH, def_, .doc = doc_)

/* The schema, in the order decks are written. Docs must not contain '|' (Markdown tables). */
static const deck_key_t keys[] = {
    K_INT(model, layers, "4", 1, 4096, "transformer blocks (L)"),
    K_INT(model, dim, "128", 1, 65536, "model width C (channels); a multiple of model.heads"),
    K_INT(model, heads, "4", 1, 65536, "attention heads NH; divides model.dim; a multiple of parallel.tp"),
    K_INT(model, seq_len, "64", 1, 1048576, "context length T in tokens"),
    K_INT(model, vocab, "256", 2, DECK_VOCAB_MAX,
          "vocabulary size V (256: bytes; 50257: prep --tokenizer gpt2; hf:DIR: its tokenizer.json's ids, e.g. "
          "128256 for Llama-3); the dataset's vocab must be ≤ V"),
    K_INT(model, mlp_ratio, "4", 1, 64,
          "MLP hidden width as a multiple of model.dim (R); llama: 1 (its width is model.ffn_dim), what it resolves "
          "to when the deck does not set it"),
    K_PARSED(model, blocks, shapes, "", parse_block_list, "empty, or one of h{H}m{R} or skip per layer joined by ','",
             "a shape per block: H heads of model.dim ÷ model.heads channels each and an MLP of R × model.dim, or "
             "skip (the identity, no weights); empty: every block is h{model.heads}m{model.mlp_ratio}"),
    KEY(model, arch, T_STRING, "gpt2", .parse = parse_arch, .parsed_offset = offsetof(deck_t, model.arch_kind),
        .parsed_size = FIELD_SIZE(model, arch_kind), .rule_fn = arch_rule,
        .doc = "the model family (its block kind: src/config/block_kind.c). gpt2: LayerNorm, learned positions (wpe), "
               "a GELU MLP of model.mlp_ratio × model.dim, biases, the LM head tied to wte; the llama keys below keep "
               "their defaults. llama: RMSNorm (model.norm_eps), rotary positions (model.rope_theta), grouped-query "
               "attention (model.kv_heads), a SwiGLU MLP of model.ffn_dim, no biases"),
    K_INT(model, kv_heads, "0", 0, 65536,
          "key/value heads (grouped-query attention): divides model.heads, each serving model.heads ÷ model.kv_heads "
          "query heads; 0 = model.heads (multi-head attention, the only kind gpt2 has)"),
    K_INT(model, ffn_dim, "0", 0, 1048576,
          "llama: SwiGLU's hidden width (its gate and up products have this many rows each); required with llama; "
          "gpt2: 0 (its MLP is model.mlp_ratio × model.dim)"),
    K_NUM(model, rope_theta, "10000", 0, INF, EXCL_MIN,
          "llama: the rotary embeddings' base (Llama 2: 10000, Llama 3: 500000); gpt2 (learned positions) refuses "
          "another value"),
    K_NUM(model, norm_eps, "1e-5", 0, INF, EXCL_MIN,
          "llama: RMSNorm's epsilon; gpt2 (LayerNorm with its own epsilon, 1e-5) refuses another value"),
    K_BOOL(model, tie_embeddings, "1",
           "the LM head is the token embedding wte (tied); 0 = a head of its own, lm_head.w (V, C) on the last "
           "stage (llama only)"),

    K_INT(train, steps, "100", 0, 1e9, "optimizer steps"),
    K_INT(train, batch, "8", 1, 1e9, "global batch in sequences per step, whatever the layout"),
    K_INT(train, micro_batch, "8", 1, 1e9,
          "sequences per micro-batch on one replica; batch ÷ (micro_batch × dp) micro-batches per step"),
    K_INT(train, warmup, "10", 0, 1e9, "linear learning-rate warmup, in steps (≤ train.steps)"),
    K_NUM(train, lr, "1e-3", 0, 1, EXCL_MIN,
          "peak learning rate (after warmup; cosine decay to min_lr); at most 1: AdamW moves every weight by about lr "
          "per step"),
    K_NUM(train, min_lr, "1e-4", 0, 1, 0, "learning rate at the end of the cosine decay (≤ train.lr)"),
    K_NUM(train, weight_decay, "0.1", 0, 1, 0,
          "AdamW decoupled weight decay (at most 1: with train.lr ≤ 1 a step never flips a weight's sign)"),
    K_NUM(train, grad_clip, "1.0", 0, INF, 0, "clip the global gradient norm to this value; 0 = off"),
    K_NUM(train, beta1, "0.9", 0, 1, EXCL_MAX, "AdamW first-moment decay"),
    K_NUM(train, beta2, "0.95", 0, 1, EXCL_MAX, "AdamW second-moment decay"),
    K_NUM(train, eps, "1e-8", 0, INF, EXCL_MIN, "AdamW epsilon"),
    K_U64(train, seed, "1337", "seed of every random draw (init, data order, subnet sampling)"),
    K_INT(train, log_every, "10", 1, 1e9, "log metrics every N steps"),
    K_INT(train, eval_every, "50", 0, 1e9, "compute val_loss every N steps; 0 = only at the end"),
    K_INT(train, eval_windows, "32", 1, 1e9, "validation windows of seq_len tokens (from the start of /val)"),
    K_INT(train, threads, "0", 0, 65536, "compute threads per rank; 0 = the node's cores ÷ ranks on the node"),
    K_NUM(train, peak_gflops, "0", 0, INF, 0, "peak GFLOP/s per rank; MFU divides by it times the ranks; 0 = measure sgemm at start on every rank "
          "at once, summed"),
    K_CHOICE(train, device, "cpu", deck_device_names,
             "compute backend; emu: the CPU kernels on guarded device memory, the CUDA path's data movement"),
    K_CHOICE(train, precision, "fp32", deck_precision_names, "compute precision (master weights are always fp32)"),
    K_CHOICE(train, attention, "auto", deck_attention_names,
             "attention path; auto: cpu and emu the (T,T) probabilities, cuda the fused kernels where bf16 and the shape "
             "fit; fused (emu): the fused kernels' memory (log-sum-exps, no (T,T) buffers) and math emulated on the CPU"),
    K_NUM(train, stop_grace, "50", 0, INF, 0,
          "seconds from a stop signal (SIGTERM, SIGUSR1) to the exit: a rank that has not reached its step's end "
          "and written its checkpoint by then exits with status 75 without one (the newest is kept as it was); "
          "0 = wait for the step however long"),

    K_PATH(data, path, "",
           "token dataset: an HDF5 file from `mindpipe prep`, or a glob(3) pattern of shards (HDF5 files or llm.c "
           ".bin shards of uint16 or uint32 tokens) read as one stream in sorted order; relative to the deck's "
           "directory, or to the current directory for --set"),
    K_PATH(data, val_path, "",
           "validation shards (a glob, as data.path); empty: the HDF5 files' /val (.bin shards then have no "
           "validation split and no val_loss)"),
    K_CHOICE(data, order, "random", deck_order_names,
             "training windows: random (T+1 tokens at a random offset per sample) or sequential (the "
             "non-overlapping windows of T tokens each once per epoch, in a permutation drawn from train.seed)"),

    K_INT(parallel, dp, "1", 1, 1048576, "data-parallel replicas"),
    K_INT(parallel, tp, "1", 1, 1048576,
          "tensor-parallel ranks per layer (divides heads and mlp_ratio × dim; llama: kv_heads and ffn_dim too)"),
    K_INT(parallel, pp, "1", 1, 1048576, "pipeline stages (≤ model.layers)"),
    K_INT(parallel, sp, "1", 1, 1048576, "supernet-parallel replicas"),
    K_INT(parallel, virtual_stages, "1", 1, 4096, "model chunks per pipeline rank (interleaved schedule)"),
    K_BOOL(parallel, zero, "0", "1 = shard optimizer state over dp (ZeRO-1)"),
    K_CHOICE(parallel, grad_reduce_dtype, "fp32", deck_precision_names,
             "the type data-parallel gradient sums travel in: fp32, or bf16 (half the bytes; each replica's gradient "
             "and each partial sum rounded to bf16, so not the fp32 run's bits; buckets and ZeRO-1's reduce-scatter)"),
    K_BOOL(parallel, overlap, "1", "start each gradient bucket's all-reduce as soon as its backward ends (0: after the whole backward; for measuring the overlap)"),
    K_PARSED(parallel, order, order_dims, "tp-dp-sp-pp", parse_order, "tp, dp, sp and pp in any order, joined by '-'",
          "rank order of the grid, fastest-varying first"),
    K_CHOICE_TEXT(parallel, schedule, schedule_kind, "1f1b", sched_kind_names,
                  "pipeline schedule (zb1p, zbv, dualpipev: the zero-bubble ones, each backward split into B and W)"),
    K_PARSED(parallel, schedule_costs, costs, "unit", parse_sched_costs, "unit, or three positive times TF,TB,TW",
             "the times zb1p's and zbv's lists are played out with (a forward, an input gradient B, a weight "
             "gradient W; only their ratios matter): unit (1,1,1) or TF,TB,TW as measured"),
    K_PATH(parallel, schedule_profile, "",
           "a profile from mindpipe profile of this deck's model: zb1p's and zbv's lists are played out with its "
           "measured times for this run's chunks (instead of parallel.schedule_costs); empty: none"),
    K_CHOICE(parallel, p2p, "auto", deck_p2p_names,
             "pipeline messages: mpi (through host memory off the CPU) or nccl (device to device; cuda only, and "
             "refused where two neighbouring stages share a GPU); auto: nccl on cuda unless two neighbouring stages "
             "share a GPU, else mpi"),
    K_CHOICE(parallel, wait, "auto", deck_wait_names,
             "how waits poll MPI: yield the core between tests, spin, or auto (yield when the node has more "
             "ranks than cores)"),
    K_NUM(parallel, timeout, "600", 0, INF, 0,
          "seconds a wait may last before the job aborts naming the peer; 0 = none"),

    K_PARSED(pipeline, layers, chunks, "", parse_layer_list, "empty, auto, or positive integers joined by ','",
          "layers per stage, e.g. 2,3,3 (count = parallel.pp, or pp × virtual_stages chunks under "
          "interleaved; sum = model.layers); empty = balanced; auto = the planner's split by this run's "
          "timings of a block and of the embedding and head, taken at start (cpu, emu; cuda: modelled time; "
          "v = 1 only)"),
    K_INT(pipeline, replan_every, "0", 0, 1e9,
          "live migration: every N steps the stages compare their measured compute times and, when a new split "
          "is predicted faster by more than pipeline.replan_threshold, layers move between stages with their "
          "weights and optimizer state (bitwise the same training); 0 = off. Needs parallel.pp ≥ 2, one chunk "
          "per stage, no supernet, no offload or balance, no memory.device_limit, no ZeRO-1 over dp > 1"),
    K_NUM(pipeline, replan_threshold, "0.05", 0, 1, EXCL_MIN,
          "live migration: the least predicted gain (1 − new slowest stage ÷ measured slowest stage) for which "
          "layers move"),

    K_BYTES(memory, device_limit, "0",
            "capacity of each rank's device arena in bytes (suffix K, M, G, T or KiB, MiB, GiB, TiB: "
            "powers of 1024); 0 = none (on cuda: the free memory less the larger of 4 GiB and 1/16 of the GPU, refused when two ranks share a GPU)"),
    K_CHOICE(memory, policy, "keep", policy_names,
             "every layer's stashed activations: keep until backward; recompute (keep the block's input, re-run "
             "its forward before its backward); selective (recompute attention's probabilities only); offload to "
             "host memory; balance (BPipe: lend them to the stage p−1−s); auto (per stage, the first of keep, selective, "
             "recompute whose memory plan fits memory.device_limit; the log says which and why)"),
    K_PARSED(memory, layers, per_layer, "", parse_policy_list, "empty, or one of k, r, s, o, b per layer joined by ','",
             "a policy per layer overriding memory.policy (k keep, r recompute, s selective, o offload, b balance); "
             "count = model.layers"),
    K_INT(memory, prefetch, "1", 0, 1e6,
          "offload: bring a micro-batch's stash back this many instructions before its backward"),
    K_INT(memory, balance_keep, "0", 0, 1e6,
          "balance: micro-batches' stashes an evicting stage keeps on its device (the rest go to stage p−1−s; at "
          "least 2); 0 = per pair, the keep that leaves the fewest on the fuller of the two devices (the smaller on a tie)"),
    K_BOOL(memory, coordinate, "1",
           "offload: ranks of a node share its host link, so no two move data in the same direction at once (one "
           "swaps out while another swaps in); 0 = each copies whenever its list says"),

    K_INT(checkpoint, every, "0", 0, 1e9, "write a checkpoint every N steps; 0 = only at the end"),
    K_INT(checkpoint, keep, "3", 0, 1e6, "newest checkpoints kept in the run directory (older ones are deleted; 0 = keep all)"),
    K_CHOICE_TEXT(checkpoint, transfer, transfer_mode, "auto", deck_transfer_names,
             "MPI-IO transfers of the checkpoint's tensors: collective (two-phase buffering, for parallel file "
             "systems), independent (each rank its hyperslab), or auto (independent when a node has more ranks "
             "than cores: HDF5's collectives spin there: 35 s per checkpoint at 8 ranks on 2 cores; every rank "
             "takes the same, independent if any node is so)"),
    K_BOOL(checkpoint, final, "1", "write a checkpoint after the last step (0: benchmarks only, nothing to resume from)"),
    K_NUM(checkpoint, timeout, "900", 0, INF, 0,
          "seconds a checkpoint's write, a resume's read or the start-up (data, model, run directory) may take "
          "on any rank before the job aborts naming the rank and the phase (HDF5's collectives cannot time out "
          "on their own); 0 = none"),

    K_BOOL(recovery, log, "0",
           "1 = a lost rank costs no step: each stage logs what it sends (RUN/recovery/), a survivor of a dead "
           "peer writes its state and exits 75, and --resume auto rebuilds the dead rank's stage by replaying "
           "its steps from the logs (docs/RELIABILITY.md); launch with mpiexec -disable-auto-cleanup"),

    K_BOOL(supernet, enabled, "0", "1 = supernet training: supernet.blocks are choice blocks, one subnet per step"),
    K_INT(supernet, window, "1", 1, 1e6,
          "subnets per update of the parameters every subnet shares (embeddings, final LayerNorm, other blocks); "
          "divides train.steps and checkpoint.every"),
    K_CHOICE(supernet, schedule, "causal", deck_subnets_names,
             "causal: the subnets of a window run through the pipeline several at once under NASPipe's causal "
             "rule (same results as serial); serial: one subnet at a time, the pipeline flushed between them "
             "(interleaved, balance and nccl messages always run serial)"),
    K_CHOICE(supernet, resident, "device", deck_resident_names,
             "where the candidates of the choice blocks live: device, all of them; host, their weights and AdamW "
             "moments in host memory, brought into supernet.device_slots slots per choice block for the subnets in "
             "flight and prefetched for the next (the same results; training only)"),
    K_INT(supernet, device_slots, "0", 0, 1024,
          "supernet.resident=host: device slots per choice block, at least 2 (one subnet in flight on a stage, "
          "one prefetched); 0 = auto: one per subnet the stage can have in flight (min of window and "
          "pipeline stages) plus one, at most the candidates with weights"),
    K_PARSED(supernet, candidates, cands, "", parse_block_list, "one or more of h{H}m{R} or skip joined by ','",
             "the candidates of every choice block, each a whole block with its own weights (H heads of model.dim ÷ "
             "model.heads channels, an MLP of R × model.dim; skip: the identity)"),
    K_PARSED(supernet, blocks, choice, "", parse_index_list, "empty, or layer indices from 0 joined by ','",
             "which layers are choice blocks; empty: every layer"),

    K_INT(debug, dump_activations, "-1", -1, 1e9, "step whose activations (micro-batch 0 of replica 0: the embedding, every block's output, the final "
          "LayerNorm's) go to RUN/activations_step_STEP.h5; -1 = never"),
    K_PARSED(debug, fail_at, fail, "", parse_fail_at, "empty, RANK:STEP, RANK:STEP:write, RANK:STEP:stall, RANK:STEP:hang, RANK:STEP:migrate, RANK:STEP:replay, RANK:STEP:replay-stop, RANK:STEP:recovered or RANK:STEP:recovered-stop; RANK may be RANK+RANK2",
          "fault injection, steps counted as the log counts them (1 = the first): rank RANK (and RANK2: a node of two "
          "ranks) dies (SIGKILL) as step "
          "STEP begins (STEP 0: as the start-up ends, before the layout table and the resume); :write, midway through writing the checkpoint of step STEP; :stall, it stops (SIGSTOP) "
          "midway through that write, so its peers abort at checkpoint.timeout; :hang, it stops answering in step "
          "STEP so its peers time out; :migrate, it stops in the first live migration (pipeline.replan_every) "
          "after step STEP or later, before its layers' exchange; :replay, it dies in the recovery of a --resume "
          "auto (recovery.log) whose replay covers step STEP: as its replay begins that step, or, a rank that does "
          "not replay, as it starts waiting for the replay; :replay-stop, the same with SIGSTOP: it stops answering "
          "there, so its peers time out; :recovered, it dies as the recovery to step STEP (the "
          "survivors' step) ends, its snapshots used, before the run's first step; :recovered-stop, the same with "
          "SIGSTOP: its peers meet it in the start-up's last agreements and time out"),
    K_INT(debug, kernel_times, "0", 0, 1e9,
          "time every call of every backend kernel in the training steps from step N on (counted as the log "
          "counts them, 1 = the first; a later N leaves the warm-up out) and write RUN/kernel_times.rRANK.json on "
          "every rank (calls and seconds per kernel; cuda: GPU time from CUDA events on the compute stream; cpu, "
          "emu: the host clock) and rank 0's top 8 to the log; 0 = off"),
    K_PARSED(debug, autosplit_passes, autosplit_pass_s, "", parse_pass_times,
             "empty, or two positive times P1,P2 in milliseconds",
             "what pipeline.layers=auto takes as the start-up's timings of a 1-layer and a 2-layer forward and "
             "backward pass instead of timing them (a block is P2 - P1, the embedding and head the rest), so a "
             "split is the same on a busy and an idle host; empty: timed"),
    K_BOOL(debug, unproven_cuda, "0",
           "1 = let train.device=cuda run a model family whose CUDA kernels have not yet run on a GPU (model.arch="
           "llama until a bring-up has run it: the bring-up's llama part is that first run); 0 = refuse it at load"),
    K_CHOICE(debug, replan_times, "measured", deck_replan_times_names,
             "what live migration (pipeline.replan_every) weighs the stages by: measured, each stage's median "
             "compute time; modelled, the nominal device's modelled times of its layers (the same decision on every "
             "host, whatever its load: for tests)"),

    K_NUM(cost, grid_gco2_per_kwh, "400", 0, INF, 0, "carbon intensity of the electricity (gCO2e per kWh)"),
};
#define NKEYS (sizeof keys / sizeof keys[0])

/* Longest value a deck line may carry, and the line buffer handed to inih. */
#define VALUE_MAX (DECK_PATH + 16)
#define LINE_MAX_CHARS (DECK_PATH + 1024)

/* ---- schema look-ups ---------------------------------------------------------------------------- */

static int section_known(const char *section)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (!strcmp(keys[i].section, section)) return 1;
    return 0;
}

static int key_find(const char *section, const char *key)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (!strcmp(keys[i].section, section) && !strcmp(keys[i].key, key)) return (int)i;
    return -1;
}

static int edit_distance(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    int prev[64], cur[64];
    if (na > 63 || nb > 63) return INT_MAX;
    for (size_t j = 0; j <= nb; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= na; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= nb; j++) {
            int sub = prev[j - 1] + (tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]));
            int del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, sizeof cur);
    }
    return prev[nb];
}

/* " (did you mean [train]?)" when a section is within edit distance 2, else "". */
static void suggest_section(const char *section, char *out, size_t n)
{
    const char *best = NULL;
    int bestd = 3;
    out[0] = 0;
    for (size_t i = 0; i < NKEYS; i++) {
        int dist = edit_distance(section, keys[i].section);
        if (dist < bestd) bestd = dist, best = keys[i].section;
    }
    if (best) snprintf(out, n, " (did you mean [%s]?)", best);
}

/* The closest key: within edit distance 2, preferring the same section (a key of another section
 * costs one more, so a key put under the wrong section is found too). */
static void suggest_key(const char *section, const char *key, char *out, size_t n)
{
    const deck_key_t *best = NULL;
    int bestd = INT_MAX;
    out[0] = 0;
    for (size_t i = 0; i < NKEYS; i++) {
        int dist = edit_distance(key, keys[i].key);
        if (dist > 2) continue;
        dist += strcmp(section, keys[i].section) != 0;
        if (dist < bestd) bestd = dist, best = &keys[i];
    }
    if (best) snprintf(out, n, " (did you mean %s.%s?)", best->section, best->key);
}

/* ---- values --------------------------------------------------------------------------------------- */

/* The allowed range in words: "[1, 4096]", "> 0", "[0, 1)", or "" when unbounded. */
static void range_text(const deck_key_t *k, char *out, size_t n)
{
    int lo = k->min > -INF, hi = k->max < INF;
    if (lo && hi)
        snprintf(out, n, "%c%.15g, %.15g%c", k->excl & EXCL_MIN ? '(' : '[', k->min, k->max,
                 k->excl & EXCL_MAX ? ')' : ']');
    else if (lo)
        snprintf(out, n, "%s %.15g", k->excl & EXCL_MIN ? ">" : "≥", k->min);
    else if (hi)
        snprintf(out, n, "%s %.15g", k->excl & EXCL_MAX ? "<" : "≤", k->max);
    else
        out[0] = 0;
}

static int in_range(const deck_key_t *k, double x, char *why, size_t nwhy)
{
    int ok = (k->excl & EXCL_MIN ? x > k->min : x >= k->min) && (k->excl & EXCL_MAX ? x < k->max : x <= k->max);
    if (ok) return MP_OK;
    char r[96];
    range_text(k, r, sizeof r);
    snprintf(why, nwhy, "out of range: must be %s%s", r[0] == '[' || r[0] == '(' ? "in " : "", r);
    return MP_ERR;
}

static int parse_bool(const char *s, int *x)
{
    static const char *const yes[] = {"1", "true", "yes", "on"}, *const no[] = {"0", "false", "no", "off"};
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(s, yes[i])) return *x = 1, MP_OK;
        if (!strcasecmp(s, no[i])) return *x = 0, MP_OK;
    }
    return MP_ERR;
}

/* "123", "64K", "3 MiB", "2G": an integer with an optional binary suffix. */
static int parse_bytes(const char *s, uint64_t *x, char *why, size_t nwhy)
{
    static const char *const units[] = {"", "K", "M", "G", "T"};
    char *end;
    if (!isdigit((unsigned char)*s)) goto bad;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0) goto big;
    while (*end == ' ') end++;
    for (int u = 0; u < 5; u++) {
        size_t ul = strlen(units[u]);
        if (u > 0 && strncasecmp(end, units[u], ul) != 0) continue;
        const char *tail = end + ul;
        if (*tail && strcasecmp(tail, u > 0 ? "iB" : "B") != 0) continue;
        for (int i = 0; i < u; i++) {
            if (v > UINT64_MAX / 1024) goto big;
            v *= 1024;
        }
        *x = v;
        return MP_OK;
    }
bad:
    snprintf(why, nwhy, "not a byte count (an integer with an optional suffix K, M, G, T, KiB, MiB, GiB, TiB)");
    return MP_ERR;
big:
    snprintf(why, nwhy, "too large for a 64-bit byte count");
    return MP_ERR;
}

/* The enum value of v among k's choices, or -1. */
static int choice_find(const deck_key_t *k, const char *v)
{
    for (int i = 0; i < k->nnames; i++)
        if (!strcmp(k->names[i], v)) return i;
    return -1;
}

/* "a|b|c": k's choices, as messages name them. */
static void choice_list(const deck_key_t *k, char *out, size_t n)
{
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < k->nnames && o < n; i++)
        o += (size_t)snprintf(out + o, n - o, "%s%s", i ? "|" : "", k->names[i]);
}

/* Made absolute against base (the deck's directory; NULL: the current directory). The longest
 * leading part that exists is canonicalised (so "../data/x.h5" loses its ".."); the rest need not
 * exist yet (the trainer checks the file and names it). */
static int path_resolve(const char *v, const char *base, char *out, size_t n, char *why, size_t nwhy)
{
    char joined[2 * DECK_PATH + 2], cwd[DECK_PATH];
    if (!v[0] || v[0] == '/') {
        snprintf(joined, sizeof joined, "%s", v);
    } else {
        if (!base && !(base = getcwd(cwd, sizeof cwd)))
            return snprintf(why, nwhy, "cannot resolve against the current directory: %s", strerror(errno)), MP_ERR;
        snprintf(joined, sizeof joined, "%s/%s", base, v);
    }
    char *real = NULL, *cut = NULL;
    for (char *slash = strrchr(joined, '/'); slash && slash != joined && !real;) {
        if (cut) *cut = '/';
        *slash = 0, cut = slash;
        real = realpath(joined, NULL);
        if (!real) slash = strrchr(joined, '/');
    }
    if (cut) *cut = '/';
    int len = real ? snprintf(out, n, "%s%s", strcmp(real, "/") ? real : "", cut) : snprintf(out, n, "%s", joined);
    free(real);
    if (len < 0 || (size_t)len >= n) return snprintf(why, nwhy, "path longer than %zu characters", n - 1), MP_ERR;
    return MP_OK;
}

/* A string an INI line can hold and give back unchanged: inih cuts inline comments (';' or '#'
 * after whitespace) and lines. */
static int string_writable(const char *v, char *why, size_t nwhy)
{
    for (const char *p = v; *p; p++) {
        if (*p == '\n' || *p == '\r' || ((*p == ';' || *p == '#') && p > v && isspace((unsigned char)p[-1])))
            return snprintf(why, nwhy, "contains a line break or a comment (';' or '#' after a space)"), MP_ERR;
    }
    return MP_OK;
}

/* Parses raw for key k and stores it in d. MP_OK, or MP_ERR with the reason in why (d untouched).
 * base: directory for relative paths (NULL: the current directory). One pair of surrounding
 * double quotes is removed, so `path = ""` is the empty string. */
static int key_parse(const deck_key_t *k, const char *raw, const char *base, deck_t *d, char *why, size_t nwhy)
{
    char v[VALUE_MAX];
    size_t len = strlen(raw);
    if (len >= sizeof v) return snprintf(why, nwhy, "longer than %zu characters", sizeof v - 1), MP_ERR;
    if (len >= 2 && raw[0] == '"' && raw[len - 1] == '"') raw++, len -= 2;
    memcpy(v, raw, len);
    v[len] = 0;
    void *dst = (char *)d + k->offset;
    long long i;
    uint64_t u;
    double x;
    int b;
    parsed_t parsed;
    switch (k->type) {
    case T_INT:
        if (num_parse_long(v, &i) != MP_OK) return snprintf(why, nwhy, "not an integer"), MP_ERR;
        if (in_range(k, (double)i, why, nwhy) != MP_OK) return MP_ERR;
        *(int *)dst = (int)i;
        return MP_OK;
    case T_U64:
        if (num_parse_u64(v, &u) != MP_OK) return snprintf(why, nwhy, "not an integer in [0, 2^64)"), MP_ERR;
        *(uint64_t *)dst = u;
        return MP_OK;
    case T_BYTES:
        if (parse_bytes(v, &u, why, nwhy) != MP_OK) return MP_ERR;
        *(uint64_t *)dst = u;
        return MP_OK;
    case T_BOOL:
        if (parse_bool(v, &b) != MP_OK) return snprintf(why, nwhy, "not 0 or 1 (or true/false)"), MP_ERR;
        *(int *)dst = b;
        return MP_OK;
    case T_DOUBLE:
        if (num_parse_double(v, &x) != MP_OK) return snprintf(why, nwhy, "not a finite number"), MP_ERR;
        if (in_range(k, x, why, nwhy) != MP_OK) return MP_ERR;
        *(double *)dst = x;
        return MP_OK;
    case T_CHOICE: {
        char list[256];
        if ((b = choice_find(k, v)) < 0) {
            choice_list(k, list, sizeof list);
            return snprintf(why, nwhy, "not one of %s", list), MP_ERR;
        }
        *(int *)dst = b;
        if (k->text_size) snprintf((char *)d + k->text_offset, k->text_size, "%s", v);
        return MP_OK;
    }
    case T_STRING:
        if (string_writable(v, why, nwhy) != MP_OK) return MP_ERR;
        if (k->parse && k->parse(v, &parsed, why, nwhy) != MP_OK) return MP_ERR;
        break;
    case T_PATH:
        if (string_writable(v, why, nwhy) != MP_OK) return MP_ERR;
        return path_resolve(v, base, dst, k->size, why, nwhy);
    }
    if (len >= k->size) return snprintf(why, nwhy, "longer than %zu characters", k->size - 1), MP_ERR;
    memcpy(dst, v, len + 1);
    if (k->parse) memcpy((char *)d + k->parsed_offset, &parsed, k->parsed_size);
    return MP_OK;
}

/* The value in force as deck text that parses back to the same value (doubles: the shortest of
 * %.15g..%.17g that round-trips; strings quoted when quotes would otherwise be lost). */
static void key_format(const deck_key_t *k, const deck_t *d, char *out, size_t n)
{
    const void *src = (const char *)d + k->offset;
    switch (k->type) {
    case T_INT:
    case T_BOOL:
        snprintf(out, n, "%d", *(const int *)src);
        return;
    case T_U64:
    case T_BYTES:
        snprintf(out, n, "%" PRIu64, *(const uint64_t *)src);
        return;
    case T_DOUBLE:
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(out, n, "%.*g", prec, *(const double *)src);
            if (strtod(out, NULL) == *(const double *)src) return;
        }
        return;
    case T_CHOICE:
        snprintf(out, n, "%s", k->names[*(const int *)src]);
        return;
    default: {
        const char *s = src;
        size_t len = strlen(s);
        int quote = len == 0 || (len >= 2 && s[0] == '"' && s[len - 1] == '"');
        snprintf(out, n, quote ? "\"%s\"" : "%s", s);
    }
    }
}

/* ---- single-key syntax rules ---------------------------------------------------------------------- */

/* The model families' names joined by sep, from the block kinds (block_kind.c: the names live there). */
static void arch_names(char *out, size_t n, const char *sep)
{
    size_t o = 0;
    out[0] = 0;
    for (int a = 0; a < ARCH_COUNT && o < n; a++) {
        const model_cfg_t c = {.arch = (model_arch_t)a};
        o += (size_t)snprintf(out + o, n - o, "%s%s", a ? sep : "", block_kind_of(&c)->name);
    }
}

/* model.arch: a block kind's name, into its model_arch_t (block_kind_named). */
static int parse_arch(const char *v, void *out, char *why, size_t nwhy)
{
    if (block_kind_named(v, out)) return MP_OK;
    char list[128];
    arch_names(list, sizeof list, "|");
    snprintf(why, nwhy, "not one of %s (the model families: src/config/block_kind.c)", list);
    return MP_ERR;
}

/* model.arch's rule in the reference: its names. */
static void arch_rule(char *out, size_t n)
{
    char list[128];
    arch_names(list, sizeof list, ", ");
    snprintf(out, n, "a model family: %s", list);
}

static int parse_sched_costs(const char *v, void *out, char *why, size_t nwhy)
{
    return sched_costs_parse(v, out, why, nwhy);
}

/* "" or P1,P2 (milliseconds, positive, finite), kept in seconds. */
static int parse_pass_times(const char *v, void *out, char *why, size_t nwhy)
{
    double *t = out;
    char tail;
    t[0] = t[1] = 0.0;
    if (!v[0]) return MP_OK;
    if (sscanf(v, "%lf,%lf%c", &t[0], &t[1], &tail) != 2 || !(t[0] > 0.0 && t[1] > 0.0) || !isfinite(t[0] + t[1])) {
        t[0] = t[1] = 0.0;
        snprintf(why, nwhy, "not two positive times P1,P2 in milliseconds (e.g. 30,50) or empty");
        return MP_ERR;
    }
    t[0] *= 1e-3, t[1] *= 1e-3;
    return MP_OK;
}

static int parse_order(const char *v, void *out, char *why, size_t nwhy)
{
    deck_dim_t *dims = out;
    int seen[DECK_DIMS] = {0}, count = 0;
    for (const char *p = v;; p += 3) {
        int hit = -1;
        for (int i = 0; i < DECK_DIMS; i++)
            if (!strncmp(p, dim_names[i], 2)) hit = i;
        if (hit < 0 || seen[hit] || (p[2] != '-' && p[2] != 0)) break;
        seen[hit] = 1, dims[count++] = (deck_dim_t)hit;
        if (p[2] == 0 && count == DECK_DIMS) return MP_OK;
        if (p[2] == 0) break;
    }
    snprintf(why, nwhy, "not a permutation of tp, dp, sp, pp joined by '-' (e.g. tp-dp-sp-pp)");
    return MP_ERR;
}

/* "" or "a,b,c" with positive integers (spaces allowed around them). */
/* After a list item ending at end: p moves past its ',' (spaces allowed before it). MP_ERR on anything
 * else after the item, or a trailing comma. */
static int list_next(const char **p, const char *end)
{
    while (*end == ' ') end++;
    if (*end && *end != ',') return MP_ERR;
    *p = *end ? end + 1 : end;
    return *end && !**p ? MP_ERR : MP_OK;
}

static int parse_policy_list(const char *v, void *out, char *why, size_t nwhy)
{
    deck_policy_list_t *l = out;
    l->n = 0;
    for (const char *p = v; *p;) {
        while (*p == ' ') p++;
        int pol = -1;
        for (int i = 0; i < POLICY_AUTO; i++)
            if (*p == policy_letters[i]) pol = i;
        if (pol < 0 || l->n == DECK_LIST_MAX) goto bad;
        l->policy[l->n++] = (policy_t)pol;
        if (list_next(&p, p + 1) != MP_OK) goto bad;
    }
    return MP_OK;
bad:
    snprintf(why, nwhy, "not a comma-separated list of the letters k, r, s, o, b (e.g. k,r,r,o)");
    return MP_ERR;
}

static int parse_block_list(const char *v, void *out, char *why, size_t nwhy)
{
    deck_block_list_t *l = out;
    l->n = 0;
    for (const char *p = v; *p;) {
        while (*p == ' ') p++;
        block_shape_t b = {0, 0};
        const char *end = p;
        if (!strncmp(p, "skip", 4)) {
            end = p + 4;
        } else {
            char *e1, *e2;
            if (*p != 'h' || !isdigit((unsigned char)p[1])) goto bad;
            errno = 0;
            const long h = strtol(p + 1, &e1, 10);
            if (*e1 != 'm' || !isdigit((unsigned char)e1[1])) goto bad;
            const long r = strtol(e1 + 1, &e2, 10);
            if (errno || h < 1 || h > 65536 || r < 1 || r > 64) goto bad;
            b = (block_shape_t){(int)h, (int)r};
            end = e2;
        }
        if (l->n == DECK_LIST_MAX) goto bad;
        l->shape[l->n++] = b;
        if (list_next(&p, end) != MP_OK) goto bad;
    }
    return MP_OK;
bad:
    snprintf(why, nwhy, "not a comma-separated list of h{heads}m{mlp_ratio} (heads 1 to 65536, mlp_ratio 1 to 64) "
                        "and skip, e.g. h4m4,h2m1,skip");
    return MP_ERR;
}

/* Comma-separated integers from lo into l: MP_OK, or MP_ERR on anything else. */
static int parse_ints(const char *v, deck_layer_list_t *l, long lo)
{
    l->n = 0, l->automatic = 0;
    for (const char *p = v; *p;) {
        char *end;
        while (*p == ' ') p++;
        if (!isdigit((unsigned char)*p) || l->n == DECK_LIST_MAX) return MP_ERR;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (errno || x < lo || x > INT_MAX) return MP_ERR;
        l->layers[l->n++] = (int)x;
        if (list_next(&p, end) != MP_OK) return MP_ERR;
    }
    return MP_OK;
}

static int parse_index_list(const char *v, void *out, char *why, size_t nwhy)
{
    if (parse_ints(v, out, 0) == MP_OK) return MP_OK;
    snprintf(why, nwhy, "not a comma-separated list of layer indices from 0 (e.g. 0,2,3)");
    return MP_ERR;
}

static int parse_layer_list(const char *v, void *out, char *why, size_t nwhy)
{
    if (!strcmp(v, "auto")) {
        deck_layer_list_t *l = out;
        l->n = 0, l->automatic = 1;
        return MP_OK;
    }
    if (parse_ints(v, out, 1) == MP_OK) return MP_OK;
    snprintf(why, nwhy, "not auto or a comma-separated list of positive integers (e.g. 2,3,3)");
    return MP_ERR;
}

/* "", RANK:STEP, or RANK:STEP:MODE with MODE write, stall, hang, migrate, replay, replay-stop, recovered or
 * recovered-stop (deck.h); RANK may be RANK+RANK2 (numbers past LONG_MAX saturate). */
static int parse_fail_at(const char *v, void *out, char *why, size_t nwhy)
{
    deck_fail_at_t *f = out;
    char *end;
    *f = (deck_fail_at_t){.rank = -1, .rank2 = -1, .step = -1, .mode = DECK_FAIL_NONE};
    if (!v[0]) return MP_OK;
    if (isdigit((unsigned char)v[0])) {
        f->rank = strtol(v, &end, 10);
        if (*end == '+' && isdigit((unsigned char)end[1])) f->rank2 = strtol(end + 1, &end, 10);
        if (*end == ':' && isdigit((unsigned char)end[1])) {
            f->step = strtol(end + 1, &end, 10);
            f->mode = !*end ? DECK_FAIL_KILL : !strcmp(end, ":write") ? DECK_FAIL_WRITE
                    : !strcmp(end, ":hang") ? DECK_FAIL_HANG : !strcmp(end, ":stall") ? DECK_FAIL_STALL
                    : !strcmp(end, ":migrate") ? DECK_FAIL_MIGRATE : !strcmp(end, ":replay") ? DECK_FAIL_REPLAY
                    : !strcmp(end, ":replay-stop") ? DECK_FAIL_REPLAY_STOP
                    : !strcmp(end, ":recovered") ? DECK_FAIL_RECOVERED
                    : !strcmp(end, ":recovered-stop") ? DECK_FAIL_RECOVERED_STOP : DECK_FAIL_NONE;
            if (f->mode != DECK_FAIL_NONE) return MP_OK;
        }
    }
    snprintf(why, nwhy, "not RANK:STEP, RANK:STEP:write, RANK:STEP:stall, RANK:STEP:hang, RANK:STEP:migrate, RANK:STEP:replay, "
             "RANK:STEP:replay-stop, RANK:STEP:recovered or RANK:STEP:recovered-stop (e.g. 3:120, "
             "2+3:120 or 0:10:write) or empty");
    return MP_ERR;
}

/* ---- text in messages ----------------------------------------------------------------------------- */

/* Bytes of the printable character at p (ASCII, or a well-formed UTF-8 sequence that is not a C1
 * control), or 0 when *p is shown escaped. A backslash is escaped too, so \xNN is never ambiguous. */
static size_t show_char_len(const unsigned char *p)
{
    if (*p >= 0x20 && *p < 0x7f) return *p == '\\' ? 0 : 1;
    const size_t n = *p >= 0xC2 && *p <= 0xDF ? 2 : *p >= 0xE0 && *p <= 0xEF ? 3 : *p >= 0xF0 && *p <= 0xF4 ? 4 : 0;
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xC0) != 0x80) return 0;
    return n == 2 && p[0] == 0xC2 && p[1] < 0xA0 ? 0 : n;
}

/* Whether cutting the shown text s before s[i] would split a character or an escape. */
static int show_inside(const char *s, size_t i)
{
    if (((unsigned char)s[i] & 0xC0) == 0x80) return 1;
    for (size_t j = 1; j <= 3 && j <= i; j++)
        if (s[i - j] == '\\') return 1;
    return 0;
}

/* deck_text_show of the len bytes at s, NUL bytes included (s[len] must be readable and NUL). */
static void text_show_n(const char *s, size_t len, char *out, size_t n)
{
    char *full = malloc(4 * len + 1);
    if (!full) {
        snprintf(out, n, "(%zu bytes)", len);
        return;
    }
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s, *e = p + len; p < e;) {
        const size_t k = show_char_len(p);
        if (k) memcpy(full + o, p, k), o += k, p += k;
        else o += (size_t)sprintf(full + o, "\\x%02X", *p++);
    }
    full[o] = 0;
    if (o < n) {
        memcpy(out, full, o + 1);
    } else {
        size_t head = (n - 4) / 2, tail = o - (n - 4 - head);
        while (head && show_inside(full, head)) head--;
        while (tail < o && show_inside(full, tail)) tail++;
        memcpy(out, full, head);
        memcpy(out + head, "...", 3);
        memcpy(out + head + 3, full + tail, o - tail + 1);
    }
    free(full);
}

void deck_text_show(const char *s, char *out, size_t n) { text_show_n(s, strlen(s), out, n); }

/* ---- defaults and overrides ----------------------------------------------------------------------- */

/* The field size each type writes (0: strings, bounded by the field's own size). */
static size_t type_size(key_type_t t)
{
    switch (t) {
    case T_INT:
    case T_BOOL:
    case T_CHOICE: /* an enum */
        return sizeof(int);
    case T_U64:
    case T_BYTES:
        return sizeof(uint64_t);
    case T_DOUBLE:
        return sizeof(double);
    default:
        return 0;
    }
}

void deck_defaults(deck_t *d)
{
    char why[256];
    memset(d, 0, sizeof *d);
    for (size_t i = 0; i < NKEYS; i++)
        if (type_size(keys[i].type) && type_size(keys[i].type) != keys[i].size)
            MP_ABORT("deck schema: %s.%s is declared %s but its field has %zu bytes", keys[i].section,
                     keys[i].key, type_name(keys[i].type), keys[i].size);
        else if (keys[i].parsed_size > sizeof(parsed_t))
            MP_ABORT("deck schema: %s.%s parses into %zu bytes, more than parsed_t holds", keys[i].section,
                     keys[i].key, keys[i].parsed_size);
        else if (key_parse(&keys[i], keys[i].def, "/", d, why, sizeof why) != MP_OK)
            MP_ABORT("deck schema: default of %s.%s = '%s' is %s", keys[i].section, keys[i].key, keys[i].def, why);
}

static void trim_copy(char *out, size_t n, const char *s, size_t len)
{
    while (len && isspace((unsigned char)*s)) s++, len--;
    while (len && isspace((unsigned char)s[len - 1])) len--;
    if (len >= n) len = n - 1;
    memcpy(out, s, len);
    out[len] = 0;
}

/* Messages quote the assignment (and the value) through deck_text_show: escaped, and shortened so
 * the reason after them is never cut. */
int deck_set(deck_t *d, const char *a)
{
    const char *eq = strchr(a, '=');
    char name[128], value[VALUE_MAX], why[256], hint[128], shown[DECK_SHOW], vshown[DECK_SHOW];
    deck_text_show(a, shown, sizeof shown);
    if (!eq) return MP_FAIL("--set '%s': expected section.key=value (e.g. --set train.lr=3e-4)", shown);
    trim_copy(name, sizeof name, a, (size_t)(eq - a));
    if (strlen(eq + 1) >= sizeof value)
        return MP_FAIL("--set '%s': value longer than %zu characters", shown, sizeof value - 1);
    trim_copy(value, sizeof value, eq + 1, strlen(eq + 1));
    char *dot = strchr(name, '.');
    if (!dot || dot == name || !dot[1])
        return MP_FAIL("--set '%s': expected section.key=value (e.g. --set train.lr=3e-4)", shown);
    *dot = 0;
    const char *section = name, *key = dot + 1;
    if (!section_known(section)) {
        suggest_section(section, hint, sizeof hint);
        deck_text_show(section, vshown, sizeof vshown);
        return MP_FAIL("--set '%s': unknown section [%s]%s", shown, vshown, hint);
    }
    int idx = key_find(section, key);
    if (idx < 0) {
        suggest_key(section, key, hint, sizeof hint);
        deck_text_show(key, vshown, sizeof vshown);
        return MP_FAIL("--set '%s': unknown key %s.%s%s", shown, section, vshown, hint);
    }
    if (key_parse(&keys[idx], value, NULL, d, why, sizeof why) != MP_OK) {
        deck_text_show(value, vshown, sizeof vshown);
        return MP_FAIL("--set '%s': %s.%s = '%s' is %s", shown, section, key, vshown, why);
    }
    return MP_OK;
}

int deck_set_key(const char *a, char *section_p, size_t ns, char *key_p, size_t nk)
{
    const char *eq = strchr(a, '=');
    char name[128];
    if (!eq) return MP_ERR;
    trim_copy(name, sizeof name, a, (size_t)(eq - a));
    char *dot = strchr(name, '.');
    if (!dot || dot == name || !dot[1]) return MP_ERR;
    *dot = 0;
    snprintf(section_p, ns, "%s", name);
    snprintf(key_p, nk, "%s", dot + 1);
    return MP_OK;
}

int deck_value_text(const deck_t *d, const char *section, const char *key, char *out_p, size_t n)
{
    const int idx = key_find(section, key);
    if (idx < 0) return MP_ERR;
    key_format(&keys[idx], d, out_p, n);
    return MP_OK;
}

int deck_key_range(const char *section, const char *key, double *min_p, double *max_p)
{
    const int idx = key_find(section, key);
    if (idx < 0) return MP_ERR;
    *min_p = keys[idx].min;
    *max_p = keys[idx].max;
    return MP_OK;
}

/* ---- the file ------------------------------------------------------------------------------------- */

typedef struct {
    FILE *f;
    const char *file;          /* as given, for messages */
    char dir[DECK_PATH];       /* absolute directory of the deck: base of relative paths */
    deck_t *d;
    int line;                  /* line of the text last handed to inih */
    int at_line_start;
    int in_bad_section;        /* the current [section] was reported unknown */
    int nerr, first_handler_err;
    int seen_line[NKEYS];      /* line where each key was set, 0 = not yet */
    char *why;                 /* deck_parse_text: the first error goes here, none is printed (NULL: printed) */
    size_t nwhy;
} load_t;

/* An error of the deck being read: printed, or (deck_parse_text) the first one kept in st->why. */
static void load_verror(load_t *st, const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (!st->why) MP_ERROR("%s", msg);
    else if (!st->why[0]) snprintf(st->why, st->nwhy, "%s", msg);
}

MP_PRINTF(2, 3) static void load_error(load_t *st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    load_verror(st, fmt, ap);
    va_end(ap);
}

/* load_error, then MP_ERR. */
MP_PRINTF(2, 3) static int load_fail(load_t *st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    load_verror(st, fmt, ap);
    va_end(ap);
    return MP_ERR;
}

/* Reports unknown [section] headers (with their line; inih never calls the handler for an empty one). */
static void reader_section(load_t *st, const char *line)
{
    char name[128], hint[128], shown[DECK_SHOW];
    const char *p = line;
    if (st->line == 1 && !strncmp(p, "\xEF\xBB\xBF", 3)) p += 3;
    while (isspace((unsigned char)*p)) p++;
    const char *end = *p == '[' ? strchr(p + 1, ']') : NULL;
    if (!end) return; /* not a header; inih reports a malformed one */
    trim_copy(name, sizeof name, p + 1, (size_t)(end - p - 1));
    if (strcmp(name, "") && section_known(name) && (size_t)(end - p - 1) == strlen(name)) {
        st->in_bad_section = 0;
        return;
    }
    suggest_section(name, hint, sizeof hint);
    const size_t n = (size_t)(end - p - 1);
    char *raw = malloc(n + 1);
    if (raw) memcpy(raw, p + 1, n), raw[n] = 0;
    deck_text_show(raw ? raw : "", shown, sizeof shown);
    free(raw);
    load_error(st, "%s:%d: unknown section [%s]%s", st->file, st->line, shown, hint);
    st->in_bad_section = 1;
    st->nerr++;
}

/* fgets for inih that counts lines and checks section headers. A line is read up to its '\n'
 * byte by byte, so a NUL byte inside it is seen (fgets would hide the rest of the line behind it,
 * and the '\n' it had already read would make the next line look like the rest of this one). An
 * over-long line, or one holding a NUL byte, is reported once and handed to inih as a comment, so
 * its pieces are not parsed as lines of their own. */
static char *load_reader(char *str, int num, void *stream)
{
    load_t *st = stream;
    int c = 0, n = 0;
    long nul = -1;
    while (n < num - 1 && (c = getc(st->f)) != EOF) {
        if (c == 0 && nul < 0) nul = n;
        str[n++] = (char)c;
        if (c == '\n') break;
    }
    if (n == 0) return NULL;
    str[n] = 0;
    int complete = str[n - 1] == '\n' || c == EOF;
    int start = st->at_line_start;
    st->at_line_start = complete;
    if (!start) return str; /* the rest of an over-long line, already reported and skipped */
    st->line++;
    if (!complete) {
        load_error(st, "%s:%d: line longer than %d characters", st->file, st->line, num - 3);
        while ((c = getc(st->f)) != EOF && c != '\n') {}
        st->at_line_start = 1;
    } else if (nul >= 0) {
        const int len = n - (str[n - 1] == '\n');
        char shown[DECK_SHOW];
        str[len] = 0;
        text_show_n(str, (size_t)len, shown, sizeof shown);
        load_error(st, "%s:%d: a NUL byte at column %ld (a deck is text): '%s'", st->file, st->line, nul + 1, shown);
    } else {
        reader_section(st, str);
        return str;
    }
    st->nerr++;
    snprintf(str, (size_t)num, ";\n");
    return str;
}

static int load_key(load_t *st, const char *section, const char *name, const char *value)
{
    char why[256], hint[128], sec[DECK_SHOW], key[DECK_SHOW], shown[DECK_SHOW];
    deck_text_show(section, sec, sizeof sec);
    deck_text_show(name, key, sizeof key);
    if (!section[0]) {
        suggest_key("", name, hint, sizeof hint);
        return load_fail(st, "%s:%d: '%s' is outside any [section]%s", st->file, st->line, key, hint);
    }
    if (!section_known(section)) {
        if (st->in_bad_section) return MP_ERR; /* reported with its header */
        suggest_section(section, hint, sizeof hint);
        return load_fail(st, "%s:%d: unknown section [%s]%s", st->file, st->line, sec, hint);
    }
    int idx = key_find(section, name);
    if (idx < 0) {
        suggest_key(section, name, hint, sizeof hint);
        return load_fail(st, "%s:%d: unknown key %s.%s%s", st->file, st->line, sec, key, hint);
    }
    if (st->seen_line[idx])
        return load_fail(st, "%s:%d: %s.%s is set twice (first on line %d)", st->file, st->line, section, name,
                       st->seen_line[idx]);
    st->seen_line[idx] = st->line;
    if (key_parse(&keys[idx], value, st->dir, st->d, why, sizeof why) != MP_OK) {
        deck_text_show(value, shown, sizeof shown);
        return load_fail(st, "%s:%d: %s.%s = '%s' is %s", st->file, st->line, section, name, shown, why);
    }
    return MP_OK;
}

static int load_handler(void *user, const char *section, const char *name, const char *value)
{
    load_t *st = user;
    if (load_key(st, section, name, value) == MP_OK) return 1;
    st->nerr++;
    if (!st->first_handler_err) st->first_handler_err = st->line;
    return 0;
}

/* inih's behaviour is set through the globals of Debian's build (runtime variables, not macros):
 * no multi-line values (an indented line is a line of its own), ';' and '#' start comments after
 * whitespace, lines up to LINE_MAX_CHARS. Every parse sets them, the only user in the process. */
static void ini_configure(void)
{
    static char comment_prefixes[] = ";#";
    ini_allow_multiline = false;
    ini_allow_inline_comments = true;
    ini_inline_comment_prefixes = comment_prefixes;
    ini_start_comment_prefixes = comment_prefixes;
    ini_allow_no_value = false;
    ini_stop_on_first_error = false;
    ini_max_line = LINE_MAX_CHARS;
}

/* Parses st's stream into st->d (st->f, file, dir, d set). MP_OK, or MP_ERR after reporting
 * (load_error) every error met. */
static int deck_parse_stream(load_t *st)
{
    st->at_line_start = 1;
    ini_configure();
    int rc = ini_parse_stream(load_reader, st, load_handler, st);
    if (rc == -2) {
        load_error(st, "%s: out of memory while parsing", st->file);
        st->nerr++;
    } else if (rc > 0 && (!st->first_handler_err || rc < st->first_handler_err)) {
        load_error(st, "%s:%d: not a 'key = value' line, a [section] header or a comment", st->file, rc);
        st->nerr++;
    }
    if (ferror(st->f)) {
        load_error(st, "%s: read error: %s", st->file, strerror(errno));
        st->nerr++;
    }
    return st->nerr ? MP_ERR : MP_OK;
}

/* Parses the file at path into d; given[i] is set for each keys[i] the file sets. */
static int deck_parse_file(deck_t *d, const char *path, unsigned char *given)
{
    load_t *st = calloc(1, sizeof *st);
    if (!st) return MP_FAIL("out of memory reading %s", path);
    char *real = realpath(path, NULL);
    st->f = real ? fopen(real, "r") : NULL;
    if (!st->f) {
        int rc = MP_FAIL("cannot read the deck %s: %s", path, strerror(errno));
        free(real);
        free(st);
        return rc;
    }
    *strrchr(real, '/') = 0; /* realpath is absolute: there is a '/' */
    snprintf(st->dir, sizeof st->dir, "%s", real[0] ? real : "/");
    free(real);
    st->file = path, st->d = d;
    const int rc = deck_parse_stream(st);
    fclose(st->f);
    for (size_t i = 0; i < NKEYS; i++) given[i] |= st->seen_line[i] != 0;
    free(st);
    return rc;
}

int deck_parse_text(deck_t *d, const char *text, const char *const *required, char *why_p, size_t n)
{
    snprintf(why_p, n, "%s", "");
    load_t *st = calloc(1, sizeof *st);
    deck_t *tmp = malloc(sizeof *tmp);
    int rc = MP_ERR;
    if (!st || !tmp) {
        snprintf(why_p, n, "out of memory parsing the deck");
        goto out;
    }
    deck_defaults(tmp);
    /* fmemopen refuses a size of 0 in older C libraries: an empty text is parsed as a lone newline */
    st->f = text[0] ? fmemopen((void *)text, strlen(text), "r") : fmemopen("\n", 1, "r");
    if (!st->f) {
        snprintf(why_p, n, "cannot read the deck text: %s", strerror(errno));
        goto out;
    }
    snprintf(st->dir, sizeof st->dir, "/"); /* a resolved deck's paths are absolute */
    st->file = "deck", st->d = tmp, st->why = why_p, st->nwhy = n;
    rc = deck_parse_stream(st);
    fclose(st->f);
    for (int i = 0; rc == MP_OK && required && required[i]; i++) {
        char section[64], key[64];
        const char *dot = strchr(required[i], '.');
        snprintf(section, sizeof section, "%.*s", dot ? (int)(dot - required[i]) : 0, required[i]);
        snprintf(key, sizeof key, "%s", dot ? dot + 1 : required[i]);
        const int idx = key_find(section, key);
        if (idx < 0 || !st->seen_line[idx]) {
            snprintf(why_p, n, "it does not set %s (a resolved deck sets every key)", required[i]);
            rc = MP_ERR;
        }
    }
    if (rc == MP_OK) *d = *tmp;
out:
    free(tmp);
    free(st);
    return rc;
}

static int deck_check(const deck_t *d, int need_data);

/* The values keys take from other keys when the deck does not give them (given[i]: keys[i] is set by
 * the file or a --set): model.mlp_ratio is 1 under llama, whose MLP width is model.ffn_dim. A key
 * given is kept as given, for the rules to judge (validate_llama names both keys). The resolved deck
 * (deck_write) then sets the key, so it loads back to the same deck. */
static void deck_resolve(deck_t *d, const unsigned char *given)
{
    if (d->model.arch_kind == ARCH_LLAMA && !given[key_find("model", "mlp_ratio")]) d->model.mlp_ratio = 1;
}

/* Whether key k holds the same value in a and b: integers and switches equal, numbers equal as
 * float32 (what a config.json of a float32 model writes: 1e-05 is the float nearest 1e-5), a parsed
 * string's value (the family, not its spelling), any other by its text. */
static int key_same(const deck_key_t *k, const deck_t *a, const deck_t *b)
{
    const char *x = (const char *)a + k->offset, *y = (const char *)b + k->offset;
    char tx[VALUE_MAX], ty[VALUE_MAX];
    switch (k->type) {
    case T_INT:
    case T_BOOL:
    case T_CHOICE:
        return *(const int *)x == *(const int *)y;
    case T_DOUBLE:
        return (float)*(const double *)x == (float)*(const double *)y;
    default:
        if (k->parse)
            return !memcmp((const char *)a + k->parsed_offset, (const char *)b + k->parsed_offset, k->parsed_size);
        key_format(k, a, tx, sizeof tx);
        key_format(k, b, ty, sizeof ty);
        return !strcmp(tx, ty);
    }
}

/* One import (deck.h) into d when the deck does not give its key (marked given then, and written
 * into taken: n bytes), else compared with the deck's value. MP_OK, or MP_ERR printed. */
static int deck_take_import(deck_t *d, deck_t *alt, unsigned char *given, const char *source, const deck_import_t *x,
                            char *taken, size_t n)
{
    char section[32], why[256], have[VALUE_MAX];
    const char *dot = strchr(x->key, '.');
    snprintf(section, sizeof section, "%.*s", dot ? (int)(dot - x->key) : 0, x->key);
    const int idx = dot ? key_find(section, dot + 1) : -1;
    if (idx < 0) return MP_FAIL("%s: key %s maps onto %s, which is no deck key", source, x->from, x->key);
    const deck_key_t *k = &keys[idx];
    *alt = *d;
    const int parsed = key_parse(k, x->value, NULL, alt, why, sizeof why) == MP_OK;
    if (!parsed && !given[idx]) /* given, it is a disagreement with the deck's value: below */
        return MP_FAIL("%s: key %s is %s: as the deck's %s it is %s", source, x->from, x->shown, x->key, why);
    if (!given[idx]) {
        const size_t at = strlen(taken);
        snprintf(taken + at, n - at, "%s%s=%s (%s)", at ? ", " : "", x->key, x->value, x->from);
        *d = *alt;
        given[idx] = 1;
        return MP_OK;
    }
    if (x->fill || (parsed && key_same(k, d, alt))) return MP_OK;
    *alt = *d;
    if (x->same[0] && key_parse(k, x->same, NULL, alt, why, sizeof why) == MP_OK && key_same(k, d, alt)) return MP_OK;
    if (k->type == T_BOOL) snprintf(have, sizeof have, "%s", *(const int *)((const char *)d + k->offset) ? "true" : "false");
    else key_format(k, d, have, sizeof have);
    return MP_FAIL("%s: key %s is %s, the deck's %s is %s (set by the deck or a --set; a model key the deck does not "
                   "set is taken from %s)", source, x->from, x->shown, x->key, have, source);
}

/* The imports imp (may be NULL) into d (deck_load_imports); the errors' count. */
static int deck_take_imports(deck_t *d, unsigned char *given, const deck_imports_t *imp, char *taken, size_t n)
{
    int nerr = 0;
    if (n) taken[0] = 0;
    if (!imp || !imp->n) return 0;
    deck_t *alt = malloc(sizeof *alt);
    if (!alt) return MP_ERROR("out of memory loading the deck"), 1;
    for (int i = 0; i < imp->n && i < DECK_IMPORTS_MAX; i++)
        nerr += deck_take_import(d, alt, given, imp->source, &imp->v[i], taken, n) != MP_OK;
    free(alt);
    return nerr;
}

/* deck_load, and (need_data = 0) deck_load_model, and (imp) deck_load_imports */
static int deck_load_as(deck_t *d, const char *path, char *const *sets, int nsets, int need_data,
                        const deck_imports_t *imp, char *taken, size_t ntaken)
{
    deck_t *tmp = malloc(sizeof *tmp);
    unsigned char given[NKEYS] = {0};
    int nerr = 0;
    if (!tmp) return MP_FAIL("out of memory loading the deck");
    deck_defaults(tmp);
    if (path && deck_parse_file(tmp, path, given) != MP_OK) nerr++;
    for (int i = 0; i < nsets; i++) {
        char section[128], key[128];
        if (deck_set(tmp, sets[i]) != MP_OK) nerr++;
        else if (deck_set_key(sets[i], section, sizeof section, key, sizeof key) == MP_OK && key_find(section, key) >= 0)
            given[key_find(section, key)] = 1;
    }
    if (!nerr) nerr += deck_take_imports(tmp, given, imp, taken, ntaken);
    deck_resolve(tmp, given);
    if (!nerr && deck_check(tmp, need_data) != MP_OK) nerr++;
    if (!nerr) *d = *tmp;
    free(tmp);
    return nerr ? MP_ERR : MP_OK;
}

int deck_load(deck_t *d, const char *path, char *const *sets, int nsets)
{
    return deck_load_as(d, path, sets, nsets, 1, NULL, NULL, 0);
}

int deck_load_model(deck_t *d, const char *path, char *const *sets, int nsets)
{
    return deck_load_as(d, path, sets, nsets, 0, NULL, NULL, 0);
}

int deck_load_imports(deck_t *d, const char *path, char *const *sets, int nsets, const deck_imports_t *imp,
                      char *taken_p, size_t n)
{
    return deck_load_as(d, path, sets, nsets, 1, imp, taken_p, n);
}

/* ---- cross-key rules ------------------------------------------------------------------------------ */

/* zbv and dualpipev: two chunks per stage in a V (sched's placement) */
static int deck_sched_v(const deck_t *d) { return sched_kind_place(d->parallel.schedule_kind) == SCHED_PLACE_V; }

int deck_chunks_per_stage(const deck_t *d)
{
    if (deck_sched_v(d)) return 2;
    return d->parallel.pp > 1 && d->parallel.schedule_kind == SCHED_INTERLEAVED ? d->parallel.virtual_stages : 1;
}

/* The run features the deck knows before the run, for compose_refused (compose.h). NCCL is not
 * among them: parallel.p2p=auto is resolved at start (mpi where two neighbouring stages share a GPU),
 * so the executor asks with the resolved value. */
unsigned deck_compose_have(const deck_t *d)
{
    unsigned have = 0;
    const int dp = d->parallel.dp;
    if (d->supernet.enabled || d->parallel.sp > 1) have |= 1u << COMPOSE_SUPERNET;
    for (int l = 0; l < d->model.layers; l++) {
        const policy_t p = d->memory.per_layer.n ? d->memory.per_layer.policy[l] : d->memory.policy;
        if (p == POLICY_BALANCE) have |= 1u << COMPOSE_BALANCE;
        if (p == POLICY_OFFLOAD) have |= 1u << COMPOSE_OFFLOAD;
    }
    if (d->train.device == DECK_DEVICE_CUDA) have |= 1u << COMPOSE_CUDA;
    if (d->train.device != DECK_DEVICE_CPU) have |= 1u << COMPOSE_DEVICE;
    if (d->pipeline.replan_every > 0) have |= 1u << COMPOSE_MIGRATION;
    if (d->recovery.log) have |= 1u << COMPOSE_RECOVERY_LOG;
    if (d->parallel.zero && dp * d->parallel.sp > 1) have |= 1u << COMPOSE_ZERO1;
    if (d->parallel.sp > 1) have |= 1u << COMPOSE_SP;
    if (deck_chunks_per_stage(d) > 1) have |= 1u << COMPOSE_CHUNKS;
    if (d->memory.device_limit) have |= 1u << COMPOSE_DEVICE_LIMIT;
    if (d->parallel.grad_reduce_dtype == DECK_PRECISION_BF16 && dp > 1) have |= 1u << COMPOSE_BF16_GRADS;
    return have;
}

/* What the schedule does not run with, and the features that do not run together, in compose's
 * words (the one table: compose.c). */
static int validate_compose(const deck_t *d)
{
    char why[640];
    if (compose_refused(d->parallel.schedule_kind, d->parallel.pp, deck_compose_have(d), why, sizeof why) == MP_OK)
        return 0;
    MP_ERROR("%s", why);
    return 1;
}

/* zbv and dualpipev run (the executor places the V: stage s holds chunks s and 2pp−1−s, the turn
 * chunk pp−1 → pp is a copy on stage pp−1; dualpipev's overlapped pairs post both receives before
 * either computation) on the layouts their bitwise tests cover (validation/test_zbv_run.sh,
 * test_dualpipev_run.sh): pp >= 2 stages with tp and dp, the layers kept, recomputed, selective or
 * offloaded, on the cpu or emu backend. Their stage count is checked here, their micro-batch count
 * by sched_check (validate_sched_shape), the features they do not run with (supernets, balance, a
 * GPU) by compose (validate_compose). */
static int validate_v(const deck_t *d)
{
    const int pp = d->parallel.pp;
    const char *k = sched_kind_names[d->parallel.schedule_kind];
    int nerr = 0;
    if (pp < 2)
        nerr++, MP_ERROR("parallel.schedule=%s places two chunks on each of parallel.pp >= 2 stages in a V (pp is "
                         "%d): with one stage use 1f1b", k, pp);
    return nerr;
}

/* The schedule's shape on the deck's numbers (the micro-batches per step, the chunks per stage):
 * sched_check's rules, stated there once (the run's lists and sim ask it too), with the deck's
 * arithmetic added. One stage runs 1f1b whatever the deck names (compose_run_kind). */
static int validate_sched_shape(const deck_t *d)
{
    const int pp = d->parallel.pp;
    const long long per = (long long)d->train.micro_batch * d->parallel.dp;
    if (pp < 2 || per <= 0 || d->train.batch % per) return 0; /* a batch that does not divide: validate_train */
    const long long m = d->train.batch / per;
    char why[512];
    if (sched_check(d->parallel.schedule_kind, pp, (int)m, deck_chunks_per_stage(d), why, sizeof why) == MP_OK) return 0;
    MP_ERROR("%s (train.batch ÷ (train.micro_batch × parallel.dp) = %d ÷ (%d × %d) = %lld; a smaller "
             "train.micro_batch gives more)", why, d->train.batch, d->train.micro_batch, d->parallel.dp, m);
    return 1;
}

/* The zero-bubble schedules split each backward into B and W. zb1p runs (the executor's split
 * backward, under the loop placement); zbv and dualpipev run under the V placement (validate_v).
 * Under the V placement each stage's layers are cut into two chunks of half a stage each, so a
 * stage's layer count must be even. */
static int validate_zero_bubble(const deck_t *d)
{
    const sched_kind_t k = d->parallel.schedule_kind;
    const int pp = d->parallel.pp, L = d->model.layers;
    int nerr = 0;
    const int costs = d->parallel.costs.tf > 0.0, prof = d->parallel.schedule_profile[0] != 0;
    if (!sched_kind_played(k) && (costs || prof))
        nerr++, MP_ERROR("parallel.%s is read by the schedules whose lists are played out from times (zb1p, zbv); "
                         "parallel.schedule=%s has a fixed list: leave it unset", prof ? "schedule_profile" : "schedule_costs",
                         sched_kind_names[k]);
    if (costs && prof)
        nerr++, MP_ERROR("parallel.schedule_costs=%s and parallel.schedule_profile=%s both give the lists' times: "
                         "set one", d->parallel.schedule_costs, d->parallel.schedule_profile);
    if (!sched_kind_split(k)) return nerr;
    if (deck_sched_v(d)) nerr += validate_v(d);
    if (deck_sched_v(d) && d->parallel.virtual_stages > 1)
        nerr++, MP_ERROR("parallel.schedule=%s fixes two chunks per stage (a V); leave parallel.virtual_stages=1 (it is %d)",
                         sched_kind_names[k], d->parallel.virtual_stages);
    const deck_layer_list_t *c = &d->pipeline.chunks;
    if (deck_sched_v(d) && c->n == 0 && L % (2 * pp))
        nerr++, MP_ERROR("parallel.schedule=%s cuts each stage's layers into two equal chunks: model.layers=%d is not a "
                         "multiple of 2 × parallel.pp = %d (an odd or uneven count of layers per stage)",
                         sched_kind_names[k], L, 2 * pp);
    for (int s = 0; deck_sched_v(d) && c->n == 2 * pp && s < pp; s++) /* stage s: chunks s and 2pp−1−s */
        if (c->layers[s] != c->layers[2 * pp - 1 - s])
            nerr++, MP_ERROR("parallel.schedule=%s: pipeline.layers gives stage %d chunks of %d and %d layers; the V "
                             "holds half a stage's layers in each (equal, so an even count per stage)",
                             sched_kind_names[k], s, c->layers[s], c->layers[2 * pp - 1 - s]);
    return nerr;
}

static int validate_pipeline(const deck_t *d)
{
    int nerr = 0;
    long long sum = 0;
    const char *v = d->pipeline.layers;
    const deck_layer_list_t *l = &d->pipeline.chunks;
    const int vs = deck_chunks_per_stage(d), K = d->parallel.pp * vs, count = l->n;
    nerr += validate_zero_bubble(d);
    nerr += validate_sched_shape(d);
    nerr += validate_compose(d);
    if (d->parallel.virtual_stages > 1 && d->parallel.schedule_kind != SCHED_INTERLEAVED && !deck_sched_v(d))
        nerr++, MP_ERROR("parallel.virtual_stages=%d needs parallel.schedule=interleaved (it is %s)",
                         d->parallel.virtual_stages, sched_kind_names[d->parallel.schedule_kind]);
    if (vs > PARAM_MAX_CHUNKS)
        nerr++, MP_ERROR("parallel.virtual_stages=%d: at most %d model chunks per stage", vs, PARAM_MAX_CHUNKS);
    if (vs > 1 && K > d->model.layers)
        nerr++, MP_ERROR("parallel.pp × parallel.virtual_stages = %d × %d = %d model chunks, more than "
                         "model.layers=%d: every chunk needs a layer", d->parallel.pp, vs, K, d->model.layers);
    if (l->automatic && vs > 1)
        nerr++, MP_ERROR("pipeline.layers=auto: the planner splits one chunk per stage; with "
                         "parallel.virtual_stages=%d give the chunks' sizes (mindpipe plan --emit writes them)", vs);
    if (d->pipeline.replan_every > 0 && d->parallel.pp < 2)
        nerr++, MP_ERROR("pipeline.replan_every=%d moves layers between pipeline stages: it needs parallel.pp >= 2 "
                         "(it is %d); set pipeline.replan_every=0", d->pipeline.replan_every, d->parallel.pp);
    if (count == 0) return nerr;
    for (int k = 0; k < count; k++) sum += l->layers[k];
    if (count != K && deck_sched_v(d))
        nerr++, MP_ERROR("pipeline.layers='%s' has %d entries, but the %s schedule cuts the model into 2 × parallel.pp "
                         "= %d chunks (one entry per chunk)", v, count, sched_kind_names[d->parallel.schedule_kind], K);
    else if (count != K && vs > 1)
        nerr++, MP_ERROR("pipeline.layers='%s' has %d entries, but the interleaved schedule cuts the model into "
                         "parallel.pp × parallel.virtual_stages = %d chunks (one entry per chunk)", v, count, K);
    else if (count != K)
        nerr++, MP_ERROR("pipeline.layers='%s' has %d entries, but parallel.pp=%d (one per stage)", v, count,
                         d->parallel.pp);
    if (sum != d->model.layers)
        nerr++, MP_ERROR("pipeline.layers='%s' sums to %lld, but model.layers=%d", v, sum, d->model.layers);
    return nerr;
}

/* One block shape h{H}m{R} (model.blocks' or a supernet candidate's) of the deck's family: its heads
 * grouped as the model's (llama: H a multiple of model.heads ÷ model.kv_heads, so the block has whole
 * key/value heads), its heads, kv heads and MLP (R × model.dim; llama R × model.ffn_dim) dividing over
 * the tensor-parallel ranks. A skip has nothing to divide. */
static int validate_shape(const deck_t *d, const char *what, block_shape_t sh)
{
    if (shape_is_skip(sh)) return 0;
    const long long tp = d->parallel.tp, kv = d->model.kv_heads ? d->model.kv_heads : d->model.heads;
    const long long group = kv > 0 && d->model.heads % kv == 0 ? d->model.heads / kv : 1;
    const long long unit = d->model.arch_kind == ARCH_LLAMA ? d->model.ffn_dim : d->model.dim;
    if (sh.heads % group)
        return MP_ERROR("%s (h%dm%d) has %d heads, not a multiple of model.heads ÷ model.kv_heads = %lld (whole "
                        "key/value heads)", what, sh.heads, sh.mlp_ratio, sh.heads, group), 1;
    if (sh.heads % tp)
        return MP_ERROR("%s (h%dm%d) has %d heads, not a multiple of parallel.tp=%lld", what, sh.heads, sh.mlp_ratio,
                        sh.heads, tp), 1;
    if ((sh.heads / group) % tp)
        return MP_ERROR("%s (h%dm%d) has %lld key/value heads, not a multiple of parallel.tp=%lld", what, sh.heads,
                        sh.mlp_ratio, sh.heads / group, tp), 1;
    if ((long long)sh.mlp_ratio * unit % tp)
        return MP_ERROR("%s (h%dm%d) has an MLP of %lld, not a multiple of parallel.tp=%lld", what, sh.heads,
                        sh.mlp_ratio, (long long)sh.mlp_ratio * unit, tp), 1;
    return 0;
}

/* supernet: candidates that divide over tp, choice layers that exist once each, windows that end
 * where the run and its checkpoints do (a checkpoint holds no half-summed window). */
static int validate_supernet(const deck_t *d)
{
    int nerr = 0;
    const deck_block_list_t *c = &d->supernet.cands;
    const deck_layer_list_t *b = &d->supernet.choice;
    if (!d->supernet.enabled) return 0;
    if (c->n < 1) nerr++, MP_ERROR("supernet.enabled=1 needs supernet.candidates (e.g. h4m4,h2m1,skip)");
    for (int k = 0; k < c->n; k++) {
        char what[64];
        snprintf(what, sizeof what, "supernet.candidates: candidate %d", k);
        nerr += validate_shape(d, what, c->shape[k]);
    }
    for (int i = 0; i < b->n; i++) {
        if (b->layers[i] >= d->model.layers)
            nerr++, MP_ERROR("supernet.blocks: layer %d does not exist (model.layers=%d)", b->layers[i], d->model.layers);
        for (int j = 0; j < i; j++)
            if (b->layers[j] == b->layers[i]) nerr++, MP_ERROR("supernet.blocks: layer %d listed twice", b->layers[i]);
    }
    if (d->model.shapes.n) nerr++, MP_ERROR("supernet.enabled=1 with model.blocks: give the shapes as supernet.candidates");
    if (d->train.steps % d->supernet.window)
        nerr++, MP_ERROR("train.steps=%d is not a multiple of supernet.window=%d", d->train.steps, d->supernet.window);
    if (d->checkpoint.every % d->supernet.window)
        nerr++, MP_ERROR("checkpoint.every=%d is not a multiple of supernet.window=%d (a checkpoint ends a window)",
                         d->checkpoint.every, d->supernet.window);
    if (d->supernet.device_slots == 1)
        nerr++, MP_ERROR("supernet.device_slots=1: a stage needs a slot for the subnet in flight and one to bring the "
                         "next subnet's candidate into (at least 2; 0 = auto)");
    if (d->supernet.resident == DECK_RESIDENT_HOST && d->parallel.sp > 1)
        nerr++, MP_ERROR("supernet.resident=host with parallel.sp=%d: the replicas send candidates from and into their "
                         "device copies (not built with host-resident candidates; use supernet.resident=device)",
                         d->parallel.sp);
    return nerr;
}

/* model.blocks: one per layer, each dividing over the tensor-parallel ranks like the model's own. */
static int validate_blocks(const deck_t *d)
{
    const deck_block_list_t *l = &d->model.shapes;
    const long long tp = d->parallel.tp;
    int nerr = 0;
    if (l->n && l->n != d->model.layers)
        nerr++, MP_ERROR("model.blocks='%s' has %d entries, but model.layers=%d (one per layer)", d->model.blocks, l->n,
                         d->model.layers);
    for (int i = 0; i < l->n && !nerr; i++) {
        char what[64];
        snprintf(what, sizeof what, "model.blocks: block %d", i);
        nerr += validate_shape(d, what, l->shape[i]);
    }
    (void)tp;
    return nerr;
}

/* The default of the numeric key section.key: its schema row's text, parsed (one place for it). */
static double key_default(const char *section, const char *key)
{
    double x = 0.0;
    if (num_parse_double(keys[key_find(section, key)].def, &x) != MP_OK)
        MP_ABORT("deck schema: %s.%s has no numeric default", section, key);
    return x;
}

/* gpt2 (model.arch): multi-head attention, learned positions, LayerNorm with its own epsilon, an MLP
 * of model.mlp_ratio × model.dim and the head tied to wte. llama's keys keep their defaults: a
 * resolved deck writes every key, so "unset" cannot be told from "set to the default" there, and a
 * value other than the default, which gpt2 would ignore, is refused. */
static int validate_gpt2(const deck_t *d)
{
    const double theta = key_default("model", "rope_theta"), eps = key_default("model", "norm_eps");
    int nerr = 0;
    if (d->model.kv_heads && d->model.kv_heads != d->model.heads)
        nerr++, MP_ERROR("model.kv_heads=%d with model.arch=gpt2: GPT-2's attention has a key/value head per query "
                         "head (model.kv_heads 0 or model.heads=%d); grouped-query attention is llama's",
                         d->model.kv_heads, d->model.heads);
    if (d->model.ffn_dim)
        nerr++, MP_ERROR("model.ffn_dim=%d with model.arch=gpt2: GPT-2's MLP is model.mlp_ratio × model.dim (set "
                         "model.mlp_ratio; model.ffn_dim is llama's SwiGLU width): leave model.ffn_dim=0",
                         d->model.ffn_dim);
    if (d->model.rope_theta != theta)
        nerr++, MP_ERROR("model.rope_theta=%g with model.arch=gpt2: GPT-2 has learned positions (wpe), no rotary "
                         "embeddings; leave model.rope_theta at its default %g", d->model.rope_theta, theta);
    if (d->model.norm_eps != eps)
        nerr++, MP_ERROR("model.norm_eps=%g with model.arch=gpt2: GPT-2's LayerNorm has its own epsilon (1e-5); "
                         "model.norm_eps is llama's RMSNorm's: leave it at its default %g", d->model.norm_eps, eps);
    if (!d->model.tie_embeddings)
        nerr++, MP_ERROR("model.tie_embeddings=false with model.arch=gpt2: GPT-2's LM head is its token embedding "
                         "wte; set model.tie_embeddings=true");
    return nerr;
}

/* llama (model.arch): SwiGLU of model.ffn_dim (so model.mlp_ratio is 1: deck_resolve), key/value heads
 * that divide over tensor parallelism as the query heads do. Then what is not built for llama yet
 * (issue 47), refused naming its keys until it is: the CUDA backend (its kernels have not run on a
 * GPU). */
static int validate_llama(const deck_t *d)
{
    const int tp = d->parallel.tp, kv = d->model.kv_heads ? d->model.kv_heads : d->model.heads;
    int nerr = 0;
    if (!d->model.ffn_dim)
        nerr++, MP_ERROR("model.arch=llama needs model.ffn_dim (SwiGLU's hidden width, e.g. 11008 for Llama 2 7B's "
                         "model.dim 4096)");
    if (d->model.mlp_ratio != 1)
        nerr++, MP_ERROR("model.mlp_ratio=%d with model.arch=llama: llama's MLP width is model.ffn_dim, so its "
                         "model.mlp_ratio is 1; leave model.mlp_ratio unset (or set it to 1)", d->model.mlp_ratio);
    if (kv % tp)
        nerr++, MP_ERROR("model.kv_heads=%d (key/value heads) is not a multiple of parallel.tp=%d: each "
                         "tensor-parallel rank holds whole key/value heads", kv, tp);
    if (d->model.ffn_dim % tp)
        nerr++, MP_ERROR("model.ffn_dim=%d is not a multiple of parallel.tp=%d: each tensor-parallel rank holds "
                         "model.ffn_dim ÷ parallel.tp of SwiGLU's width", d->model.ffn_dim, tp);
    return nerr;
}

/* The model family (model.arch) and its keys. */
static int validate_arch(const deck_t *d)
{
    int nerr = 0;
    if (d->model.kv_heads && d->model.heads % d->model.kv_heads)
        nerr++, MP_ERROR("model.kv_heads=%d does not divide model.heads=%d (each key/value head serves model.heads ÷ "
                         "model.kv_heads query heads)", d->model.kv_heads, d->model.heads);
    /* the family's capability, not its name: a family is refused on cuda until its kernels have run on a GPU */
    const block_kind_t *bk = block_kind_of(&(model_cfg_t){.arch = d->model.arch_kind});
    if (d->train.device == DECK_DEVICE_CUDA && !bk->cuda_proven && !d->debug.unproven_cuda)
        nerr++, MP_ERROR("model.arch=%s with train.device=cuda: %s's CUDA kernels have not run on a GPU yet "
                         "(issue 47); use train.device=cpu or emu (debug.unproven_cuda=1 runs them anyway: the "
                         "GPU bring-up's first run)", bk->name, bk->name);
    return nerr + (d->model.arch_kind == ARCH_LLAMA ? validate_llama(d) : validate_gpt2(d));
}

static int validate_memory(const deck_t *d)
{
    int nerr = 0;
    const deck_policy_list_t *l = &d->memory.per_layer;
    if (l->n && l->n != d->model.layers)
        nerr++, MP_ERROR("memory.layers='%s' has %d entries, but model.layers=%d (one per layer)", d->memory.layers,
                         l->n, d->model.layers);
    return nerr;
}

int deck_validate(const deck_t *d)
{
    return deck_check(d, 1);
}

static int deck_check(const deck_t *d, int need_data)
{
    const long long dim = d->model.dim, heads = d->model.heads, tp = d->parallel.tp;
    const long long batch = d->train.batch, mb = d->train.micro_batch, dp = d->parallel.dp;
    const long long width = (long long)d->model.mlp_ratio * dim;
    int nerr = 0;
    if (dim % heads)
        nerr++, MP_ERROR("model.dim=%lld is not a multiple of model.heads=%lld", dim, heads);
    if (batch % mb)
        nerr++, MP_ERROR("train.batch=%lld is not a multiple of train.micro_batch=%lld", batch, mb);
    else if (batch % (mb * dp))
        nerr++, MP_ERROR("train.batch=%lld is not a multiple of train.micro_batch × parallel.dp = %lld × %lld = %lld",
                         batch, mb, dp, mb * dp);
    if (d->train.warmup > d->train.steps)
        nerr++, MP_ERROR("train.warmup=%d is more than train.steps=%d", d->train.warmup, d->train.steps);
    if (d->train.min_lr > d->train.lr)
        nerr++, MP_ERROR("train.min_lr=%g is more than train.lr=%g", d->train.min_lr, d->train.lr);
    if (heads % tp)
        nerr++, MP_ERROR("model.heads=%lld is not a multiple of parallel.tp=%lld", heads, tp);
    if (width % tp && d->model.arch_kind == ARCH_GPT2) /* llama's width is model.ffn_dim: validate_llama */
        nerr++, MP_ERROR("model.mlp_ratio × model.dim = %d × %lld = %lld is not a multiple of parallel.tp=%lld",
                         d->model.mlp_ratio, dim, width, tp);
    if (d->parallel.pp > d->model.layers)
        nerr++, MP_ERROR("parallel.pp=%d is more than model.layers=%d: every stage needs a layer", d->parallel.pp,
                         d->model.layers);
    nerr += validate_arch(d);
    nerr += validate_pipeline(d);
    nerr += validate_memory(d);
    nerr += validate_blocks(d);
    nerr += validate_supernet(d);
    if (need_data && !d->data.path[0])
        nerr++, MP_ERROR("data.path is empty: make a token file with `mindpipe prep --text FILE --out DATA.h5`, "
                         "then set [data] path = DATA.h5 in the deck (or --set data.path=DATA.h5)");
    return nerr ? MP_ERR : MP_OK;
}

/* ---- output --------------------------------------------------------------------------------------- */

int deck_write(const deck_t *d, FILE *f)
{
    char *v = malloc(VALUE_MAX + 4);
    if (!v) return MP_FAIL("out of memory writing the deck");
    fprintf(f, "# MindPipe input deck, resolved: every key with the value in force, paths absolute.\n"
               "# Every key is documented by `mindpipe deck-reference`.\n");
    for (size_t i = 0; i < NKEYS; i++) {
        const deck_key_t *k = &keys[i];
        if (i == 0 || strcmp(k->section, keys[i - 1].section)) fprintf(f, "\n[%s]\n", k->section);
        key_format(k, d, v, VALUE_MAX + 4);
        fprintf(f, "%s = %s\n", k->key, v);
    }
    free(v);
    if (ferror(f)) return MP_FAIL("cannot write the deck: %s", strerror(errno));
    return MP_OK;
}

char *deck_to_string(const deck_t *d)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    int rc = deck_write(d, f);
    if (fclose(f) != 0 || rc != MP_OK) {
        free(buf);
        return NULL;
    }
    return buf;
}

static const char *type_name(key_type_t t)
{
    static const char *const names[] = {"int", "uint64", "number", "0/1", "bytes", "string", "path", "choice"};
    return names[t];
}

/* The "allowed" column of the reference. */
static void allowed_text(const deck_key_t *k, char *out, size_t n)
{
    switch (k->type) {
    case T_CHOICE: {
        size_t o = 0;
        for (int i = 0; i < k->nnames && o < n; i++)
            o += (size_t)snprintf(out + o, n - o, "%s`%s`", i ? ", " : "", k->names[i]);
        return;
    }
    case T_STRING:
        if (k->rule_fn) k->rule_fn(out, n);
        else snprintf(out, n, "%s", k->rule ? k->rule : "any text");
        return;
    case T_PATH:
        snprintf(out, n, "a file path");
        return;
    case T_BOOL:
        snprintf(out, n, "0 or 1");
        return;
    case T_U64:
        snprintf(out, n, "[0, 2^64)");
        return;
    default:
        range_text(k, out, n);
    }
}

void deck_print_reference(FILE *f)
{
    char allowed[256];
    fprintf(f, "# Input deck reference\n\n"
               "Generated by `mindpipe deck-reference` from the schema in `src/config/deck.c`. A deck is an INI file;\n"
               "`--set section.key=value` overrides any key after the file. Comments start with `;` or `#`\n"
               "(after a space when they follow a value). Unknown sections or keys, values that do not parse\n"
               "or are out of range, a key set twice and layouts that do not divide the model are errors\n"
               "naming the file, line and key. Byte counts take the suffixes K, M, G, T (or KiB, MiB, GiB,\n"
               "TiB), all powers of 1024. Strings may be written in double quotes (`path = \"\"`).\n");
    for (size_t i = 0; i < NKEYS; i++) {
        const deck_key_t *k = &keys[i];
        if (i == 0 || strcmp(k->section, keys[i - 1].section))
            fprintf(f, "\n## [%s]\n\n| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n",
                    k->section);
        allowed_text(k, allowed, sizeof allowed);
        fprintf(f, "| `%s` | %s | `%s` | %s | %s |\n", k->key, type_name(k->type), k->def[0] ? k->def : "\"\"",
                allowed, k->doc);
    }
}
