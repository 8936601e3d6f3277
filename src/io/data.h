/* Token datasets (ARCHITECTURE.md §3): an HDF5 file with uint16 arrays /train and /val and attributes
 * vocab (int), tokenizer (string: "byte", "gpt2" or "sp"), source (string) and, for gpt2 and sp,
 * tokenizer_sha256 (string: the vocabulary files' SHA-256; sp: of its model), and for sp the model
 * (uint8 dataset /tokenizer/sp_model: the .model file's bytes), written by `mindpipe prep`.
 *
 * Training samples are windows of T+1 tokens at offsets drawn from (seed, step, global sample
 * index): offset = rng_key(seed, RNG_STREAM_DATA, step, index) mod (n_train - T). The same sample
 * whatever the layout. Validation windows are fixed: window w starts at w*T in /val. */
#ifndef MP_DATA_H
#define MP_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

typedef struct {
    uint16_t *train; size_t n_train;
    uint16_t *val;   size_t n_val;
    int vocab;
    char path[4096];
} dataset_t;

/* Reads the whole file (both splits) into memory. Errors name the file and what is wrong with it
 * (missing, not HDF5, missing /train or /val, wrong type, a token >= vocab). */
int data_load(dataset_t *ds_p, const char *path);
void data_free(dataset_t *ds);

/* Training window for (step, global sample index): inp (T) and tgt (T) = the next tokens. */
void data_train_sample(const dataset_t *ds, uint64_t seed, long step, long index, int T, int *inp, int *tgt);
/* Validation window w (0-based): tokens [w*T, w*T+T] of /val. Returns MP_ERR if it does not fit. */
int data_val_sample(const dataset_t *ds, long w, int T, int *inp, int *tgt);
/* How many full validation windows /val holds for sequence length T. */
long data_val_windows(const dataset_t *ds, int T);
/* Setup's check of a loaded dataset against seq_len T. MP_ERR (reported, naming the file) when
 * /train holds no training window (fewer than T+2 tokens). When /val holds no validation window
 * (fewer than T+1 tokens) a warning names the file, /val's token count and T, and MP_OK: the run
 * trains, and its metrics carry no val_loss (train_val_loss is NaN; `mindpipe eval` refuses). */
int data_check_windows(const dataset_t *ds, int T);

/* `mindpipe prep`: bytes of text_path -> byte-level tokens (vocab 256); the last val_fraction of
 * the text (at least one window's worth) goes to /val. Written to a temporary name, fsynced and
 * renamed over out_path. */
int data_prep_text(const char *text_path, const char *out_path, double val_fraction);

/* The same with tokenizer tok (tokenizer.h; NULL: bytes, as data_prep_text): the whole text is
 * encoded, the last val_fraction of the tokens go to /val, and the attributes are tok's: vocab,
 * tokenizer, and for gpt2 tokenizer_sha256. Refused, naming the file, when the text makes fewer
 * than 2 tokens. */
int data_prep_tokenized(const char *text_path, const char *out_path, double val_fraction, const tokenizer_t *tok);

#endif
