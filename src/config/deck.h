/* Input decks: INI files with sections [model] [train] [data] [parallel] [pipeline] [memory]
 * [checkpoint] [supernet] [debug] [cost] (ARCHITECTURE.md §1), parsed with libinih.
 *
 * The schema (deck.c) is one table: every key with its type, default, allowed range or choices and
 * a one-line doc. Unknown sections/keys, values that do not parse, values out of range and
 * cross-key rules that fail are errors naming the file, line, section.key and the rule broken.
 * `--set section.key=value` overrides are applied after the file, with the same checks.
 *
 * Every value is parsed once, here, into its typed field: choices into enums, parallel.order,
 * pipeline.layers and debug.fail_at into arrays and structs. Nothing outside the deck reads deck
 * text; modules take their own config structs filled from the deck (optim_cfg_t, grid_cfg_t, ...). */
#ifndef MP_DECK_H
#define MP_DECK_H

#include <stdint.h>
#include <stdio.h>

#include "params.h"
#include "policy.h"   /* memory.policy is a policy_t, */
#include "schedule.h" /* parallel.schedule a sched_kind_t (config sees sched: ARCHITECTURE.md "Layers") */

#define DECK_STR 256
#define DECK_PATH 4096
/* Most entries a pipeline.layers text of DECK_STR - 1 characters can hold ("1,1,...,1"). */
#define DECK_LIST_MAX (DECK_STR / 2)
/* model.vocab's largest value: the most ids a tokenizer may have (tok_hf_impl.h's limit is this one;
 * a data file above 65536 ids stores them as uint32, data.h). */
#define DECK_VOCAB_MAX 1048576

/* The choice keys, parsed once when the deck is read: each is stored as its enum, and the deck's
 * text (deck_write, messages) is its entry in the matching *_names table. The order of each enum is
 * the order of the choices in the schema and the reference. */
typedef enum { DECK_DEVICE_CPU, DECK_DEVICE_EMU, DECK_DEVICE_CUDA, DECK_DEVICE_COUNT } deck_device_t;
/* data.order: how training windows are drawn (data.h) */
typedef enum { DECK_ORDER_RANDOM, DECK_ORDER_SEQUENTIAL, DECK_ORDER_COUNT } deck_order_t;
typedef enum { DECK_PRECISION_FP32, DECK_PRECISION_BF16, DECK_PRECISION_COUNT } deck_precision_t;
/* train.attention: auto, the backend's own path; fused, emu emulating the CUDA fused kernels (backend.h). */
typedef enum { DECK_ATTENTION_AUTO, DECK_ATTENTION_FUSED, DECK_ATTENTION_COUNT } deck_attention_t;
typedef enum { DECK_WAIT_AUTO, DECK_WAIT_YIELD, DECK_WAIT_SPIN, DECK_WAIT_COUNT } deck_wait_t;
typedef enum { DECK_P2P_AUTO, DECK_P2P_MPI, DECK_P2P_NCCL, DECK_P2P_COUNT } deck_p2p_t;
/* debug.replan_times: what live migration's re-plan weighs the stages by. */
typedef enum { DECK_REPLAN_MEASURED, DECK_REPLAN_MODELLED, DECK_REPLAN_COUNT } deck_replan_times_t;
typedef enum { DECK_SUBNETS_CAUSAL, DECK_SUBNETS_SERIAL, DECK_SUBNETS_COUNT } deck_subnets_t;
/* supernet.resident: where a choice block's candidates (weights, AdamW moments) live between uses. */
typedef enum { DECK_RESIDENT_DEVICE, DECK_RESIDENT_HOST, DECK_RESIDENT_COUNT } deck_resident_t;
typedef enum {
    DECK_TRANSFER_AUTO, DECK_TRANSFER_COLLECTIVE, DECK_TRANSFER_INDEPENDENT, DECK_TRANSFER_COUNT
} deck_transfer_t;

extern const char *const deck_device_names[DECK_DEVICE_COUNT];
extern const char *const deck_order_names[DECK_ORDER_COUNT];
extern const char *const deck_precision_names[DECK_PRECISION_COUNT];
extern const char *const deck_attention_names[DECK_ATTENTION_COUNT];

extern const char *const deck_wait_names[DECK_WAIT_COUNT];
extern const char *const deck_p2p_names[DECK_P2P_COUNT];
extern const char *const deck_replan_times_names[DECK_REPLAN_COUNT];
extern const char *const deck_subnets_names[DECK_SUBNETS_COUNT];
extern const char *const deck_resident_names[DECK_RESIDENT_COUNT];
extern const char *const deck_transfer_names[DECK_TRANSFER_COUNT];

/* The grid dimensions parallel.order names ("tp", "dp", "sp", "pp"). */
typedef enum { DECK_DIM_TP, DECK_DIM_DP, DECK_DIM_SP, DECK_DIM_PP, DECK_DIMS } deck_dim_t;

/* debug.fail_at = RANK:STEP[:write|:hang] parsed: rank `rank` fails at step `step` in `mode`.
 * kill: SIGKILL as the step begins; write: dies midway through the checkpoint written after the
 * step; hang: SIGSTOP once the step's stop-request agreement is behind it. "" is mode NONE. */
/* migrate: SIGSTOP midway through the live migration after step STEP (pipeline.replan_every), between
 * the decision and the layers' exchange. */
/* replay: SIGKILL in the recovery of a --resume auto (recovery.log) whose replay covers step STEP: a
 * replaying rank as its replay begins that step, another as it starts waiting for the replay;
 * replay-stop: SIGSTOP there instead; recovered: SIGKILL once the recovery to step STEP is done,
 * before the start-up's last agreements; recovered-stop: SIGSTOP there instead. */
typedef enum { DECK_FAIL_NONE, DECK_FAIL_KILL, DECK_FAIL_WRITE, DECK_FAIL_HANG, DECK_FAIL_STALL, DECK_FAIL_MIGRATE,
               DECK_FAIL_REPLAY, DECK_FAIL_REPLAY_STOP, DECK_FAIL_RECOVERED,
               DECK_FAIL_RECOVERED_STOP } deck_fail_mode_t;
typedef struct {
    long rank, step;
    long rank2;        /* RANK+RANK2:STEP...: a second rank fails alike (a node of two ranks); -1: none */
    deck_fail_mode_t mode;
} deck_fail_at_t;

/* Whether debug.fail_at names this rank. */
static inline int deck_fail_names(const deck_fail_at_t *f, long rank) { return f->rank == rank || f->rank2 == rank; }

/* pipeline.layers parsed: the layers of each model chunk; n = 0: balanced (the text is empty), or
 * chosen by the planner at start (automatic: the text is "auto"). */
typedef struct {
    int n;
    int automatic;
    int layers[DECK_LIST_MAX];
} deck_layer_list_t;

/* model.blocks parsed: one block shape per layer; n = 0: every block is h{heads}m{mlp_ratio}. */
typedef struct {
    int n;
    block_shape_t shape[DECK_LIST_MAX];
} deck_block_list_t;

/* memory.layers parsed: one policy per layer; n = 0: every layer takes memory.policy. */
typedef struct {
    int n;
    policy_t policy[DECK_LIST_MAX];
} deck_policy_list_t;

/* The resolved deck. Keys whose text is free-form (parallel.order, pipeline.layers,
 * debug.fail_at) keep it as written, for deck_write, beside the value parsed from it. */
typedef struct {
    struct {
        int layers, dim, heads, seq_len, vocab, mlp_ratio;
        char blocks[DECK_STR];         /* "" or "h4m4,h2m1,skip,..." as written */
        deck_block_list_t shapes;      /* model.blocks parsed */
        char arch[32];                 /* model.arch as written: a block kind's name (block_kind.h) */
        model_arch_t arch_kind;        /* model.arch parsed (block_kind_named) */
        int kv_heads;                  /* 0: model.heads (no grouped-query attention) */
        int ffn_dim;                   /* llama's SwiGLU width; 0 for gpt2 */
        double rope_theta, norm_eps;   /* llama's rotary base and RMSNorm epsilon */
        int tie_embeddings;            /* the LM head is wte (1; the untied head is not built) */
    } model;
    struct {
        int steps, batch, micro_batch, warmup;
        double lr, min_lr, weight_decay, grad_clip, beta1, beta2, eps;
        uint64_t seed;
        int log_every, eval_every, eval_windows, threads;
        double peak_gflops;            /* 0: measure the sgemm peak at start */
        deck_device_t device;
        deck_precision_t precision;    /* of the products; master weights are always fp32 */
        deck_attention_t attention;    /* which attention emu runs (cpu: probabilities; cuda: its own rule) */
        double stop_grace;             /* seconds from a stop signal to the exit; 0 = none */
    } train;
    struct {
        char path[DECK_PATH];          /* made absolute (relative to the deck's directory); may be a glob */
        char val_path[DECK_PATH];      /* "" or a glob of validation shards, made absolute likewise */
        deck_order_t order;
    } data;
    struct {
        int dp, tp, pp, sp, virtual_stages, zero, overlap;
        char order[DECK_STR];          /* e.g. tp-dp-sp-pp (fastest first) */
        deck_dim_t order_dims[DECK_DIMS]; /* parallel.order parsed: the dimensions, fastest first */
        sched_kind_t schedule_kind; /* parallel.schedule */
        char schedule[DECK_STR];       /* its name as given (unread: use schedule_kind) */
        char schedule_costs[DECK_STR]; /* as written */
        sched_costs_t costs;           /* parallel.schedule_costs parsed (sched_costs_parse): 0,0,0: unit */
        char schedule_profile[DECK_PATH]; /* "" or a profile (absolute) */
        deck_wait_t wait;
        deck_p2p_t p2p;
        deck_precision_t grad_reduce_dtype; /* what the data-parallel gradient sums travel in */
        double timeout;                /* seconds; 0 = none */
    } parallel;
    struct {
        char layers[DECK_STR];         /* "" (balanced) or "a,b,c" as written */
        deck_layer_list_t chunks;      /* pipeline.layers parsed */
        int replan_every;              /* live migration: re-plan the split every N steps; 0 = off */
        double replan_threshold;       /* ... and move layers only when the predicted gain exceeds it */
    } pipeline;
    struct {
        uint64_t device_limit;         /* bytes; 0 = none. Accepts suffixes K, M, G (binary). */
        policy_t policy;
        char layers[DECK_STR];         /* "" or "k,r,s,o,b,..." as written */
        deck_policy_list_t per_layer;  /* memory.layers parsed */
        int prefetch;                  /* offload: PREFETCH this many instructions before the backward */
        int coordinate;                /* offload: ranks of a node take turns per direction on the host link */
        int balance_keep;              /* balance: stashes an evictor keeps on its device; 0 = chosen per pair (memlists.h) */
    } memory;
    struct {
        int every, keep, final;
        double timeout;                /* seconds a checkpoint's write or read may take on a rank; 0 = none */
        deck_transfer_t transfer_mode; /* checkpoint.transfer */
        char transfer[DECK_STR];       /* its name as given (unread: use transfer_mode) */
    } checkpoint;
    struct {
        int log;                       /* the boundary log and the survivors' snapshots (docs/RELIABILITY.md) */
    } recovery;
    struct {
        int enabled, window;
        deck_subnets_t schedule;       /* causal: several subnets in flight; serial: one at a time */
        deck_resident_t resident;      /* device: every candidate on the device; host: slots on it */
        int device_slots;              /* resident = host: device slots per choice block (0: auto) */
        char candidates[DECK_STR];     /* "h4m4,h2m1,skip" as written */
        deck_block_list_t cands;       /* supernet.candidates parsed */
        char blocks[DECK_STR];         /* "" (every layer) or "0,2,3" as written */
        deck_layer_list_t choice;      /* supernet.blocks parsed: layer indices (n = 0: every layer) */
    } supernet;
    struct {
        int dump_activations;          /* step, -1 = never */
        char fail_at[DECK_STR];        /* "RANK[+RANK2]:STEP[:write|:hang|...]" or "", as written */
        deck_fail_at_t fail;           /* debug.fail_at parsed */
        int kernel_times;              /* time every kernel call from this step on (1 = the first); 0 = off */
        deck_replan_times_t replan_times; /* live migration weighs stages by measured or modelled times */
        char autosplit_passes[DECK_STR]; /* "" (timed) or "P1,P2" as written */
        double autosplit_pass_s[2];    /* debug.autosplit_passes parsed, seconds; 0, 0: timed */
        int unproven_cuda;             /* run a family on cuda whose kernels never ran on a GPU (the bring-up) */
    } debug;
    struct {
        double grid_gco2_per_kwh;
    } cost;
} deck_t;

/* Fills *d with every default. */
void deck_defaults(deck_t *d);

/* Defaults, then the file at path (may be NULL: defaults only), then each "section.key=value" of
 * sets[0..nsets), then the cross-key rules. MP_OK, or MP_ERR after printing the reason. */
int deck_load(deck_t *d, const char *path, char *const *sets, int nsets);
/* deck_load for commands that read no token data (generate, serve, plan, profile): an empty
 * data.path is allowed; every other rule holds. */
int deck_load_model(deck_t *d, const char *path, char *const *sets, int nsets);

/* Values for the model's keys from another description of the same model (a Hugging Face
 * config.json, for --init-from): taken where neither the deck file nor a --set gives the key; a key
 * they give with another value is refused naming the key, both values and where each comes from.
 * (A key marked fill is only taken, never compared.) Plain bytes, no pointers, so rank 0 can broadcast
 * what it read. */
#define DECK_IMPORTS_MAX 16
typedef struct {
    char key[32];      /* "model.dim" */
    char value[64];    /* as a deck writes it ("576", "1e-05", "llama") */
    char same[48];     /* "" or another spelling of the same model ("0" for model.kv_heads = model.heads) */
    char from[48];     /* the source's key ("hidden_size") */
    char shown[160];   /* the source's value as a message shows it ("576", "absent (LlamaConfig's default 1e-6)") */
    char fill;         /* 1: only where the deck does not give the key, a value of its own kept (a bound the
                          model's check holds, not a shape: model.seq_len from max_position_embeddings) */
} deck_import_t;

typedef struct {
    char source[DECK_PATH]; /* the file, for messages ("DIR/config.json") */
    int n;
    deck_import_t v[DECK_IMPORTS_MAX];
} deck_imports_t;

/* deck_load with imp's values taken for the keys the file and sets[] do not give (imp NULL:
 * deck_load). A given key whose value differs (numbers as the source's float32 or integer, the
 * family by name, a key's `same` spelling accepted) is refused, printing "SOURCE: key FROM is SHOWN,
 * the deck's KEY is VALUE". The keys taken, "model.dim=576 (hidden_size), ...", go into taken_p (n
 * bytes; "" for none). MP_OK, or MP_ERR after printing every reason. */
int deck_load_imports(deck_t *d, const char *path, char *const *sets, int nsets, const deck_imports_t *imp,
                      char *taken_p, size_t n);

/* Applies one "section.key=value" override (same checks as the file). */
int deck_set(deck_t *d, const char *assignment);

/* The section and key an assignment "section.key=value" names, as deck_set reads it (spaces
 * around them ignored: "train.seed = 7" names train, seed). MP_OK, or MP_ERR (nothing printed) when
 * it is not of that form. The key need not exist. */
int deck_set_key(const char *assignment, char *section_p, size_t ns, char *key_p, size_t nk);

/* A deck's text as written by deck_write (a checkpoint's /state deck) parsed by the same rules as a
 * deck file into *d (defaults first; no cross-key rules: the deck was checked when it was in force).
 * Every "section.key" of required (NULL-terminated, or NULL) must be set by the text. MP_OK, or MP_ERR
 * with the first reason in why_p (n bytes); nothing is printed and *d changes only on MP_OK. */
int deck_parse_text(deck_t *d, const char *text, const char *const *required, char *why_p, size_t n);

/* section.key's value in d as deck_write writes it, into out_p (n bytes). MP_OK, or MP_ERR for a
 * key the schema does not have. */
int deck_value_text(const deck_t *d, const char *section, const char *key, char *out_p, size_t n);

/* The allowed range of a numeric key (±HUGE_VAL: unbounded). MP_OK, or MP_ERR for an unknown key. */
int deck_key_range(const char *section, const char *key, double *min_p, double *max_p);

/* The cross-key rules (dim % heads, batch % micro_batch, ...). MP_OK or MP_ERR with the rule. */
int deck_validate(const deck_t *d);

/* Model chunks per pipeline stage: parallel.virtual_stages under the interleaved schedule with
 * pp > 1, else 1. The model is cut into pp × this many chunks (pipeline.layers lists them). */
int deck_chunks_per_stage(const deck_t *d);
/* The run features this deck has (bits 1u << compose_feature_t, compose.h), as far as the deck knows
 * them before the run: all but NCCL messages (parallel.p2p=auto is resolved at start). */
unsigned deck_compose_have(const deck_t *d);

/* Writes the resolved deck: every key with the value in force, paths absolute. */
int deck_write(const deck_t *d, FILE *f);
/* The same as a malloc'd string (for checkpoints); NULL on allocation failure. */
char *deck_to_string(const deck_t *d);

/* Room for user text quoted in a message (deck_text_show): values and paths up to 4 KiB would
 * otherwise push the reason out of a message. */
#define DECK_SHOW 256

/* s as a message quotes it, in out (n bytes, at least 16): every byte that is not printable text
 * (control characters, DEL, a byte of malformed UTF-8) written \xNN, and when the result is longer
 * than n - 1 its head and tail joined by "...", so the reason after it is never cut. */
void deck_text_show(const char *s, char *out, size_t n);

/* Markdown reference of every key (section, key, type, default, rule, doc): docs/DECK.md. */
void deck_print_reference(FILE *f);

#endif
