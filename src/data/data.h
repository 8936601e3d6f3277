/* Token datasets (ARCHITECTURE.md §3). data.path names one file or a glob(3) pattern of shards,
 * expanded and sorted by name; each shard is either
 *   - an HDF5 token file of `mindpipe prep`: unsigned 16- or 32-bit arrays /train and /val and
 *     attributes vocab (int), tokenizer ("byte", "gpt2" or "sp"), source and, for gpt2 and sp,
 *     tokenizer_sha256 (the vocabulary files' SHA-256; sp: of its model), and for sp the model
 *     (uint8 dataset /tokenizer/sp_model: the .model file's bytes); or
 *   - an llm.c/nanoGPT `.bin` shard: a header of 256 little-endian int32 (header[0] magic,
 *     header[1] version, header[2] token count), then the tokens, little-endian:
 *     magic 20240520 version 1: uint16; magic 20240801 version 7 (llm.c's llama-3 writer): uint32.
 * A split is its shards' tokens concatenated in sorted order: one stream, and a window may cross
 * from one shard into the next. Training reads every shard's train tokens (a .bin shard is all
 * train). Validation: data.val_path's shards when set (a .bin shard's tokens, an HDF5 file's
 * /val), else the HDF5 files' /val; .bin shards without data.val_path have no validation split.
 *
 * Tokens are never copied whole: .bin shards and contiguous unfiltered little-endian HDF5 splits
 * are mmap'd read-only (ranks of a node share the page cache; a rank's resident memory grows only
 * by the pages its windows touch), chunked or filtered HDF5 splits are read window by window.
 *
 * Training samples are windows of T+1 tokens (T inputs, the T next tokens as targets), a pure
 * function of (seed, step, global sample index i < train.batch), so every layout draws the same:
 *   random (default): offset = rng_key(seed, RNG_STREAM_DATA, step, i) mod (n_train - T);
 *   sequential: the non-overlapping windows w (tokens [w*T, w*T+T], nwin = (n_train-1)/T) each once
 *     per epoch: global sample g = step*batch + i (the checkpoint's data cursor plus i), epoch
 *     e = g / nwin, window = perm_{seed,e}(g mod nwin), perm a keyed Feistel permutation (no table).
 * Validation windows are fixed: window w starts at w*T of the validation stream. */
#ifndef MP_DATA_H
#define MP_DATA_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

typedef enum { DATA_ORDER_RANDOM, DATA_ORDER_SEQUENTIAL } data_order_t;

typedef enum {
    DATA_SHARD_MAP,  /* tokens mmap'd: a .bin shard, or a contiguous unfiltered HDF5 split */
    DATA_SHARD_H5READ /* chunked or filtered HDF5: each window read through HDF5 */
} data_shard_kind_t;

/* One file's part of a split. */
typedef struct {
    char *path;                /* the file, as the glob named it */
    data_shard_kind_t kind;
    int bin;                   /* an llm.c .bin shard (it records no tokenizer), else an HDF5 token file */
    int width;                 /* bytes per token: 2 or 4 */
    int vocab;                 /* an HDF5 file's vocab attribute; 0 for .bin (no declared vocab) */
    uint64_t n;                /* tokens */
    uint64_t start;            /* index of its first token in the split's stream */
    uint64_t file_off;         /* MAP: byte offset of the first token in the file */
    void *map;                 /* MAP: the mapping (page-aligned start), map_len bytes */
    size_t map_len;
    const unsigned char *tok;  /* MAP: the first token inside map */
    int fd;                    /* MAP of an HDF5 file: the descriptor mapped (-1: none) */
    hid_t file, dset;          /* H5READ: kept open for window reads */
} data_shard_t;

typedef struct {
    data_shard_t *shard;
    int n;                     /* shards */
    uint64_t tokens;           /* all shards' tokens */
} data_split_t;

typedef struct {
    data_split_t train, val;
    size_t n_train, n_val;     /* = train.tokens, val.tokens */
    int vocab;                 /* the largest vocab attribute; after a scan at least the largest token + 1 */
    int scanned;               /* the tokens were scanned (data_opts_t.scan): max_token is known */
    unsigned max_token;        /* scanned: the largest token, first met at max_at of max_file */
    uint64_t max_at;
    const char *max_file;
    int val_missing;           /* .bin training shards and no data.val_path: no validation split */
    data_order_t order;
    char path[4096];           /* data.path as given */
} dataset_t;

typedef struct {
    const char *val_path;      /* NULL or "": validation from the HDF5 files' /val */
    data_order_t order;
    int scan;                  /* read every token once: refuse one >= its file's vocab, find the largest */
} data_opts_t;

/* Opens data.path (a file or a glob) and o->val_path. Errors name the file or the pattern: a glob
 * matching nothing; missing, neither HDF5 nor a .bin shard (naming the magic found), a .bin shard
 * with a wrong version, shorter than its header or than its token count says (or longer); HDF5
 * without /train or /val, of the wrong type, claiming more tokens than it stores; with o->scan a
 * token >= its HDF5 file's vocab. On error nothing stays open. */
int data_open(dataset_t *ds_p, const char *path, const data_opts_t *o);
/* data_open of one file or glob, random order, scanned, validation from /val. */
int data_load(dataset_t *ds_p, const char *path);
void data_free(dataset_t *ds);

/* Tokens [off, off+n) of split s (its shards' streams concatenated) into out. Requires
 * off + n <= s->tokens. MP_OK, or MP_ERR (reported, naming the shard) when an HDF5 read fails. */
int data_window(const data_split_t *s, uint64_t off, int n, int *out);

/* Training window for (step, global sample index < batch): inp (T) and tgt (T) = the next tokens.
 * A read failure of a chunked HDF5 shard aborts the job (MP_ABORT naming the file): a missing
 * sample cannot be skipped without changing the trajectory on one rank only. */
void data_train_sample(const dataset_t *ds, uint64_t seed, long step, long index, long batch, int T, int *inp, int *tgt);
/* The sequential order's window for global sample g: perm_{seed, g / nwin}(g mod nwin). */
uint64_t data_seq_window(uint64_t seed, uint64_t g, uint64_t nwin);
/* Validation window w (0-based): tokens [w*T, w*T+T] of the validation stream. MP_ERR if it does not fit. */
int data_val_sample(const dataset_t *ds, long w, int T, int *inp, int *tgt);
/* How many full validation windows the validation split holds for sequence length T. */
long data_val_windows(const dataset_t *ds, int T);
/* Setup's check of an opened dataset against seq_len T. MP_ERR (reported, naming the file) when
 * the training split holds no training window (fewer than T+2 tokens). When the validation split
 * holds no window (fewer than T+1 tokens, or .bin shards without data.val_path) a warning says so,
 * and MP_OK: the run trains, and its metrics carry no val_loss (`mindpipe eval` refuses). */
int data_check_windows(const dataset_t *ds, int T);

/* `mindpipe prep`: bytes of text_path -> byte-level tokens (vocab 256); the last val_fraction of
 * the text (at least one window's worth) goes to /val. Written to a temporary name, fsynced and
 * renamed over out_path. */
int data_prep_text(const char *text_path, const char *out_path, double val_fraction);

/* The same with tokenizer tok (tokenizer.h; NULL: bytes, as data_prep_text): the whole text is
 * encoded, the last val_fraction of the tokens go to /val, and the attributes are tok's: vocab,
 * tokenizer, and for gpt2 tokenizer_sha256. /train and /val are uint16 when tok's vocab is at most
 * 65536, else uint32 (hf's Llama-3 or Qwen2 vocabularies). Refused, naming the file, when the text makes fewer
 * than 2 tokens. */
int data_prep_tokenized(const char *text_path, const char *out_path, double val_fraction, const tokenizer_t *tok);

#endif
