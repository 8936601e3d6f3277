/* Input decks: INI files with sections [model] [train] [data] [parallel] [pipeline] [memory]
 * [checkpoint] [supernet] [debug] [cost] (DESIGN §1), parsed with libinih.
 *
 * The schema (deck.c) is one table: every key with its type, default, allowed range or choices and
 * a one-line doc. Unknown sections/keys, values that do not parse, values out of range and
 * cross-key rules that fail are errors naming the file, line, section.key and the rule broken.
 * `--set section.key=value` overrides are applied after the file, with the same checks. */
#ifndef MP_DECK_H
#define MP_DECK_H

#include <stdint.h>
#include <stdio.h>

#define DECK_STR 256
#define DECK_PATH 4096

typedef struct {
    struct {
        int layers, dim, heads, seq_len, vocab, mlp_ratio;
    } model;
    struct {
        int steps, batch, micro_batch, warmup;
        double lr, min_lr, weight_decay, grad_clip, beta1, beta2, eps;
        uint64_t seed;
        int log_every, eval_every, eval_windows, threads;
        double peak_gflops;            /* 0: measure the sgemm peak at start */
        char device[DECK_STR];         /* cpu | cuda */
        char precision[DECK_STR];      /* fp32 | bf16 */
    } train;
    struct {
        char path[DECK_PATH];          /* made absolute (relative to the deck's directory) */
    } data;
    struct {
        int dp, tp, pp, sp, virtual_stages, zero, overlap;
        char order[DECK_STR];          /* e.g. tp-dp-sp-pp (fastest first) */
        char schedule[DECK_STR];       /* gpipe | 1f1b | interleaved | 2bw */
        char wait[DECK_STR];           /* auto | yield | spin */
        char p2p[DECK_STR];            /* auto | mpi | nccl */
        double timeout;                /* seconds; 0 = none */
    } parallel;
    struct {
        char layers[DECK_STR];         /* "" (balanced) or "a,b,c" */
    } pipeline;
    struct {
        uint64_t device_limit;         /* bytes; 0 = none. Accepts suffixes K, M, G (binary). */
        char policy[DECK_STR];         /* keep | recompute | offload | balance | auto */
    } memory;
    struct {
        int every, keep, final;
        char transfer[DECK_STR];       /* auto | collective | independent */
    } checkpoint;
    struct {
        int enabled, window;
        char candidates[DECK_STR];
    } supernet;
    struct {
        int dump_activations;          /* step, -1 = never */
        char fail_at[DECK_STR];        /* "RANK:STEP" or "" */
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

/* Applies one "section.key=value" override (same checks as the file). */
int deck_set(deck_t *d, const char *assignment);

/* The cross-key rules (dim % heads, batch % micro_batch, ...). MP_OK or MP_ERR with the rule. */
int deck_validate(const deck_t *d);

/* Model chunks per pipeline stage: parallel.virtual_stages under the interleaved schedule with
 * pp > 1, else 1. The model is cut into pp × this many chunks (pipeline.layers lists them). */
int deck_chunks_per_stage(const deck_t *d);

/* Writes the resolved deck: every key with the value in force, paths absolute. */
int deck_write(const deck_t *d, FILE *f);
/* The same as a malloc'd string (for checkpoints); NULL on allocation failure. */
char *deck_to_string(const deck_t *d);

/* Markdown reference of every key (section, key, type, default, rule, doc): docs/DECK.md. */
void deck_print_reference(FILE *f);

#endif
