/* The tokenizer an HDF5 token file or checkpoint records, and opening it: what `mindpipe prep`
 * wrote into a token file's attributes, and the tokenizer a checkpoint names (tok_ident_t,
 * tokenizer.h) opened from its files. These read HDF5, so they live with the checkpoints; the
 * tokenizers themselves (tokenizer.h) need no HDF5. */
#ifndef MP_TOK_FILES_H
#define MP_TOK_FILES_H

#include <hdf5.h>

#include "tokenizer.h"

/* The vocab attribute of the open token file f (path names it): one integer, at least 1. MP_OK, or
 * MP_ERR naming the file (missing, not one value, not an integer, less than 1). The token readers
 * (tok_of_data_file, data.h's) both read it here. */
int tok_file_vocab(hid_t f, const char *path, int *vocab_p);

/* The tokenizer attributes of a token file written by `mindpipe prep` (its root's tokenizer,
 * tokenizer_sha256, vocab): *ident_p, and *vocab_p its vocab attribute. A file written before the
 * tokenizer attribute is "byte". One process; reads the attributes only (data.h reads the tokens).
 * MP_OK, or MP_ERR naming the file and the attribute that is missing or wrong. */
int tok_of_data_file(const char *path, tok_ident_t *ident_p, int *vocab_p);

/* Opens the tokenizer that made whose's tokens (ident; whose names the checkpoint or file in
 * messages): byte; gpt2 with its files from dir (NULL: tok_default_dir); sp with its model from dir
 * read as a path: an sp token file (its /tokenizer/sp_model) or a SentencePiece .model file (NULL:
 * refused, asking for one). gpt2 and sp are refused unless their SHA-256 is ident's. MP_OK, or
 * MP_ERR naming whose, the directory or file and both digests. */
int tok_open_ident(tokenizer_t *tok_p, const tok_ident_t *ident, const char *dir, const char *whose);

#endif
