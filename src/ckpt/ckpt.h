/* Checkpoints (ARCHITECTURE.md §7): one HDF5 file per checkpoint.
 *   /model/<canonical name>      float32 at global shape
 *   /model_prev/<name>           2bw's previous weight version W(t−1) (2bw runs only)
 *   /optim/m/<name>, /optim/v/<name>
 *   /state                       group; attributes: step (int64, optimizer steps completed),
 *                                adam_t (int64), seed (uint64), format (int, 2), version (string),
 *                                data_cursor (int64: samples consumed, step × batch; the sampler is
 *                                counter-based, keyed by (seed, step, sample)), weight_versions
 *                                (int: 2 with /model_prev, else 1), schedule (string),
 *                                layout (string, e.g. "dp=1 tp=1 pp=1 sp=1"), deck (string: the
 *                                resolved deck), model shape attributes layers dim heads seq_len
 *                                vocab mlp_ratio (int), the model family: arch (string), kv_heads
 *                                ffn_dim tie_embeddings (int), under llama rope_theta norm_eps
 *                                (float32) (ckpt_family.h: absent in older files, which read as
 *                                gpt2), run_id (string, 32 hex digits: the run
 *                                that wrote it; absent in older files), tokenizer (string, "byte"
 *                                or "gpt2": what made the tokens it was trained on, copied from the
 *                                data file) and, with gpt2, tokenizer_sha256 (64 hex digits: its
 *                                vocabulary's SHA-256). A file without tokenizer (older) is read as
 *                                "byte": every token file before tokenizers was bytes.
 * Every float dataset carries attribute "checksum" (uint64): ckpt_checksum of its elements. The
 * sum is position-keyed and order-free, so ranks writing hyperslabs can add their parts.
 * The file starts with a user block holding the file checksum (filesum.h): everything but the
 * tensors' raw data hashed, checked with POSIX I/O by every reader before libhdf5 opens the file.
 * Files are written as NAME.tmp, sealed, and published atomically (publish.h: fsync, rename, fsync
 * of the directory).
 *
 * Parallel: one file written collectively over a communicator with HDF5's MPI-IO driver; each
 * rank writes the hyperslab of every tensor its shard holds (no gather of the model anywhere) and
 * reads back exactly its own shard, so a checkpoint of any layout resumes on any other. */
#ifndef MP_CKPT_H
#define MP_CKPT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ckpt_family.h"
#include "params.h"
#include "tokenizer.h"
#include "wait.h"

#include <mpi.h>

/* A run's identity: 128 random bits as 32 lowercase hex digits (ckpt_files.h, run directories). */
#define CKPT_RUN_ID_LEN 32

typedef struct {
    long step;
    long adam_t;
    uint64_t seed;
    long data_cursor;    /* samples consumed */
    int weight_versions; /* 2: /model_prev present (2bw) */
    char layout[128];
    char schedule[64];
    char run_id[CKPT_RUN_ID_LEN + 1]; /* the run that wrote it (32 hex digits); "" in files before run ids */
    char *deck;          /* malloc'd resolved deck text (NULL when writing: taken from the caller) */
    tok_ident_t tok;     /* the data's tokenizer; writing with name "": no attribute (read back as byte) */
} ckpt_state_t;

/* What a checkpoint's /state says, as ckpt_state_check judges it. */
typedef struct {
    int format;
    int layers, dim, heads, seq_len, vocab, mlp_ratio;
    ckpt_family_t fam;                   /* arch and llama's keys (ckpt_family.h) */
    long long step, adam_t, data_cursor; /* data_cursor: 0 in format 1 */
    uint64_t seed;
    const char *deck;                    /* the /state deck text (NULL: none) */
    int has_optim;                       /* /optim/m and /optim/v: a training checkpoint */
} ckpt_facts_t;

/* What every checkpoint's /state satisfies, checked by every reader (the collective read behind
 * resume, eval, export, search and serving; inspect; --resume auto's choice and pruning, through
 * ckpt_file_head): no counter below zero; step at most train.steps' largest value; adam_t at most
 * step; the model's shape within the deck keys' ranges and a family it can have (ckpt_family_valid);
 * a deck that parses (deck_parse_text) and sets the model's shape, train.seed, train.batch and
 * data.path, agreeing with the attributes (shape, family, seed; a deck without model.arch, an older
 * one, says gpt2 as the attributes' absence does). A training checkpoint (with /optim) also has data_cursor = step × train.batch (format 2)
 * and adam_t = step, except under a supernet (its shared parameters step once per window, and the
 * window may change between resumes: 1 <= adam_t <= step once step > 0). Exported and debug-grads
 * files (no /optim) keep adam_t 0. MP_OK, or MP_ERR with why in why_p (n bytes), printing nothing. */
int ckpt_state_check(const ckpt_facts_t *facts, char *why_p, size_t n);

/* ckpt_part_t.fail_midway: the faults the recovery tests inject into a write. */
enum { CKPT_FAIL_KILL = 1, CKPT_FAIL_STOP = 2 };

/* The float groups, in file order. */
enum { CKPT_MODEL, CKPT_MODEL_PREV, CKPT_M, CKPT_V, CKPT_NGROUPS };

/* One rank's part in a collective checkpoint write or read. */
typedef struct {
    MPI_Comm comm;               /* every rank taking part (MPI_COMM_SELF: one process) */
    const param_table_t *local;  /* the tensors (TP shards) this rank holds, in its buffers' layout */
    int owner;                   /* this rank writes its shard's elements (one data-parallel replica
                                    does; the others hold the same numbers) */
    float *bufs[CKPT_NGROUPS];   /* per group, laid out by local; NULL: group not written / read
                                    (the same groups on every rank) */
    int fail_midway;             /* debug.fail_at RANK:STEP:write (CKPT_FAIL_KILL): this rank dies (SIGKILL)
                                    midway; :stall (CKPT_FAIL_STOP): it stops there (SIGSTOP); 0: neither */
    int independent;             /* 1: independent MPI-IO transfers (each rank's hyperslab on its own);
                                    0: collective (two-phase buffering); checkpoint.transfer */
    const wait_cfg_t *wait;      /* how the part's own all-reduces wait (NULL: blocking MPI) */
} ckpt_part_t;

/* Collective over part->comm: writes every tensor of gtab (the canonical model) into the groups
 * whose bufs are set, each rank its shard's hyperslab, and the state. MP_OK or MP_ERR on every
 * rank alike; on error no file named path is created or replaced. */
int ckpt_write_parallel(const char *path, const param_table_t *gtab, const ckpt_part_t *part, const ckpt_state_t *st,
                        const char *deck_text);

/* Collective over part->comm: reads each rank's shard of the groups whose bufs are set, after
 * verifying the file checksum (rank 0 alone, before HDF5 opens the file), shapes, the model's shape
 * and every dataset's checksum (ranks' partial sums added). A file without the file checksum is
 * refused. MP_OK or MP_ERR on every rank alike; the buffers change only when everything verified. */
int ckpt_read_parallel(const char *path, const param_table_t *gtab, const ckpt_part_t *part, ckpt_state_t *st_p);

/* Σ_i mix(i, bits(x[i])) mod 2^64 over elements first..first+n (first = global index of x[0]). */
uint64_t ckpt_checksum(const float *x, size_t n, size_t first);

/* One process (MPI_COMM_SELF), the whole model: writes params, m and v (each laid out by tab) and the state. deck_text is stored as /state deck.
 * m and v may be NULL (no /optim group). MP_OK or MP_ERR; on error no file named path is created
 * or replaced. */
int ckpt_write(const char *path, const param_table_t *tab, const float *params, const float *m, const float *v,
               const ckpt_state_t *st, const char *deck_text);

/* Reads a checkpoint into buffers laid out by tab. Refuses (MP_ERR, message naming the field or
 * dataset) a file whose model shape differs from tab->cfg, a missing dataset, a shape mismatch or
 * a checksum that does not verify. m and v may be NULL (skip optimizer state). st_p->deck is
 * malloc'd (free it). Nothing is written to the buffers unless every check passes. */
int ckpt_read(const char *path, const param_table_t *tab, float *params, float *m, float *v, ckpt_state_t *st_p);

/* `mindpipe inspect`: the file checksum, step, layout, deck, every dataset with shape and checksum
 * status. Returns MP_OK when the file checksum and every dataset's checksum verify. A damaged file
 * is reported without HDF5 reading it; a file without the file checksum (an older MindPipe's, a
 * foreign one) is reported as such, read anyway and MP_ERR. The reading runs in a forked child
 * that never calls MPI: if libhdf5 crashes, MP_ERR and "FILE: corrupt file: the HDF5 library
 * crashed reading it (signal N: NAME)". A reader of out that goes away (SIGPIPE, or EPIPE where it is
 * ignored) is no crash: MP_ERR and "inspect FILE: output closed ...". One process; out gets the
 * child's lines in order. */
int ckpt_inspect(const char *path, FILE *out);

/* ckpt_inspect with a deadline on the child: past timeout_s seconds it is killed and the file
 * reported as one libhdf5 cannot finish reading (MP_ERR). timeout_s 0: 300 s plus a second per
 * 20 MiB of file (inspect reads every tensor to check it). */
int ckpt_inspect_within(const char *path, FILE *out, double timeout_s);

/* For tests: when set, inspect's child process calls it before reading the file (to stand for a
 * crash of libhdf5). NULL in the program. */
extern void (*ckpt_inspect_child_hook)(void);

/* Does the file at path carry a valid file checksum, open as a checkpoint of our format, and does
 * every dataset's checksum verify? One process. MP_OK, or MP_ERR with why not in reason_p (n
 * bytes); what HDF5 could not read is reported as it is met. The checkpoint directory's files:
 * ckpt_files.h. */
int ckpt_verify(const char *path, char *reason_p, size_t n);

/* Seals again a checkpoint changed after it was written (debug-grads adds /grad and /batch): its
 * file checksum is recomputed (filesum_reseal). MP_OK, or MP_ERR naming the file. */
int ckpt_reseal(const char *path);

#endif
