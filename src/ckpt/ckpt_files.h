/* The files of a checkpoint directory (RUN/ckpt): one per checkpointed step, named
 *     step_%08ld.h5      (step_00000010.h5; wider when the step needs more than 8 digits)
 * This module alone knows that name: it formats it, parses it back, lists a directory's
 * checkpoints by step, finds the newest that verifies, prunes old ones and says whether a
 * directory holds any. A name is ours exactly when formatting its parsed step gives it back, so
 * temporaries (step_00000010.h5.tmp), unpadded names (step_12.h5) and other files are never taken
 * for checkpoints. It also reads a file's /state head without its tensors (choosing and pruning
 * need the run id, shape and deck) and caches verdicts, since verifying reads the whole file.
 * The files' contents: ckpt.h. */
#ifndef MP_CKPT_FILES_H
#define MP_CKPT_FILES_H

#include <stddef.h>

#include "ckpt.h"

/* "step_" + at most 18 digits + ".h5" + NUL */
#define CKPT_NAME_MAX 32

/* One checkpoint of a directory listing. */
typedef struct {
    long step;
    char name[CKPT_NAME_MAX]; /* the file's name in the directory, e.g. step_00000010.h5 */
} ckpt_file_t;

/* The file name of step's checkpoint into name_p (n bytes). MP_OK, or MP_ERR (reported) for a
 * negative step or a buffer too small. */
int ckpt_name_format(long step, char *name_p, size_t n);

/* 1 with the step in *step_p if name is a checkpoint's file name exactly as ckpt_name_format
 * writes it; 0 (and *step_p untouched) for any other name. */
int ckpt_name_parse(const char *name, long *step_p);

/* DIR/step_%08ld.h5 into path_p (n bytes). MP_OK, or MP_ERR naming dir when it does not fit. */
int ckpt_name_path(const char *dir, long step, char *path_p, size_t n);

/* The checkpoints of dir in increasing step order, malloc'd into *files_p (free it; NULL when
 * none) with their count in *n_p. MP_OK, or MP_ERR with errno set when dir cannot be read; quiet
 * (the caller decides whether a missing directory is an error). */
int ckpt_dir_list(const char *dir, ckpt_file_t **files_p, int *n_p);

/* 1 if dir holds at least one checkpoint file (verified or not), 0 otherwise (also when dir
 * cannot be read). */
int ckpt_dir_has_any(const char *dir);

/* The newest checkpoint of dir that verifies (ckpt_verify), its path into path_p (n bytes); warns
 * about each newer one it skips and why. MP_OK, or MP_ERR when none verifies; prints nothing when
 * dir is missing or holds no checkpoint (a first run: the caller decides). */
int ckpt_dir_find_latest(const char *dir, char *path_p, size_t n);

/* What choosing and pruning checkpoints need of a file without reading its tensors: /state's step,
 * run id, model shape and family, and deck, and which optional groups it holds. */
typedef struct {
    long step;
    uint64_t seed;                    /* /state seed: the train.seed it was written under */
    char run_id[CKPT_RUN_ID_LEN + 1]; /* "" in files written before run ids */
    int layers, dim, heads, seq_len, vocab, mlp_ratio;
    ckpt_family_t fam;                /* /state arch and llama's keys (gpt2's when absent: ckpt_family.h) */
    char *blocks;                     /* malloc'd /state blocks ("" uniform, also when absent) */
    char *deck;                       /* malloc'd resolved deck the file was written under */
    int has_optim, has_model_prev;    /* /optim/m and /optim/v; /model_prev (2bw) */
    tok_ident_t tok;                  /* /state tokenizer, tokenizer_sha256 (byte when absent: ckpt.h) */
} ckpt_head_info_t;

/* Reads path's /state head (attributes only: cheap) into *h_p (free with ckpt_file_head_free), after
 * the file checksum and ckpt_state_check (ckpt.h), so a head read here is one every reader takes.
 * MP_OK, or MP_ERR with why not in reason_p (n bytes), printing nothing. */
int ckpt_file_head(const char *path, ckpt_head_info_t *h_p, char *reason_p, size_t n);
void ckpt_file_head_free(ckpt_head_info_t *h);

/* The tokenizer checkpoint path was trained with (its /state tokenizer; byte when absent), opened:
 * gpt2's vocabulary from dir (NULL: tok_default_dir), refused unless its SHA-256 is the checkpoint's
 * tokenizer_sha256 (tok_open_ident). For generate and serve. One process. MP_OK, or MP_ERR (reported,
 * naming the file and, for a vocabulary, the directory and both digests). */
int ckpt_file_tokenizer(const char *path, const char *dir, tokenizer_t *tok_p);

/* What one process learnt of a directory's files, by (name, size, mtime): verifying a file reads all
 * of it, so a run does it at most once per file version. Rank 0 of a run holds one for its
 * checkpoint directory; zero-initialised is empty. */
typedef struct {
    char name[CKPT_NAME_MAX];
    long long size, mtime_ns;
    int head_ok;                      /* /state readable (run_id known) */
    int verified;                     /* -1 not yet checked, 0 does not verify, 1 verifies */
    int warned;                       /* pruning has said why it leaves this file */
    char run_id[CKPT_RUN_ID_LEN + 1];
    char reason[600];                 /* why it does not verify */
} ckpt_verdict_t;

typedef struct {
    ckpt_verdict_t *v;
    int n, cap;
} ckpt_verdicts_t;

void ckpt_verdicts_free(ckpt_verdicts_t *c);

/* The verdict on dir/name: its head read (run_id) and, with full, whether every dataset verifies
 * (ckpt_verify), from the cache when the file's size and mtime are those it was judged at. The
 * pointer is valid until the next call on c. MP_OK, or MP_ERR (reported) when the file cannot be
 * stat'ed or memory runs out. */
int ckpt_verdict_get(ckpt_verdicts_t *c, const char *dir, const char *name, int full, const ckpt_verdict_t **v_p);

/* Records dir/name, just written and published by this process with run_id, as verifying (a write
 * that succeeded is not read back). MP_OK or MP_ERR (reported). */
int ckpt_verdict_written(ckpt_verdicts_t *c, const char *dir, const char *name, const char *run_id);

/* Pruning to checkpoint.keep (keep <= 0: keeps all). Of dir's checkpoints only those that verify
 * and carry run_id (NULL: any run id) are candidates; the `keep` newest of them by step remain, and
 * so does `written` (the file just written; NULL: none) even when newer files of the run's abandoned
 * past outrank it. Never deleted, each named once in a warning the first time it is met: files that
 * do not verify (a crash's leftovers are evidence, and a user may still repair or inspect them),
 * files of another run or written before run ids (not ours to judge), and anything that is not a
 * checkpoint name (temporaries included). So the newest good checkpoint of the run is never deleted,
 * and a directory's corrupt or foreign files never crowd its good ones out. Verdicts come from c
 * (NULL: a private cache for this call). MP_OK, or MP_ERR naming the directory or the file. */
int ckpt_dir_prune_run(const char *dir, int keep, const char *run_id, const char *written, ckpt_verdicts_t *c);

/* ckpt_dir_prune_run(dir, keep, NULL, NULL, NULL): the newest `keep` verifying checkpoints of any
 * run remain. */
int ckpt_dir_prune(const char *dir, int keep);

#endif
