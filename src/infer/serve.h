/* `mindpipe serve` and its stage processes (ARCHITECTURE.md §10): the front end splits the deck's
 * model into --stages S by the training partitioning (pipeline.layers, or balanced), starts one
 * `mindpipe serve-stage` process per stage (fork/exec of this program; the job's secret in their
 * environment, never on a command line), supervises them, batches requests continuously
 * (src/serve/batcher.c) and answers HTTP on loopback (src/serve/http.c). */
#ifndef MP_SERVE_H
#define MP_SERVE_H

#include "run_opts.h"

typedef struct {
    const char *ckpt, *out, *listen, *links;
    int stages, slots, stage, standby, public;
    int slot;             /* serve-stage on several hosts: its host slot (links.h; −1: 0 for a primary, 1 for a standby) */
    const char *http_limits; /* --http-limits CONNS,PER_CLIENT,DEADLINE_S (NULL: http.h's defaults) */
    const char *tokenizer_dir; /* a gpt2 checkpoint's vocabulary (NULL: tok_default_dir); the front end's alone */
} serve_opts_t;

/* `mindpipe serve`: runs until SIGTERM or SIGUSR1. The front end encodes prompts and decodes
 * completions with the checkpoint's tokenizer (ckpt_file_tokenizer: gpt2's vocabulary from
 * s->tokenizer_dir, its SHA-256 verified); the stages see only tokens. Returns the process exit code. */
int serve_main(const run_opts_t *opts, const serve_opts_t *s);
/* `mindpipe serve-stage` (started by serve): stage s->stage of the deck's parallel.pp stages,
 * linked through s->links. Returns the process exit code. */
int serve_stage_main(const run_opts_t *opts, const serve_opts_t *s);

#endif
