/* SentencePiece as a MindPipe tokenizer (tokenizer.h's kind sp): a model trained on the text
 * (`prep --tokenizer sp --vocab-size N [--sp-model unigram|bpe]`) or read from a .model file
 * (--sp-model-file), through the C++ shim sp_shim.h. The model is kept as its serialized bytes, which
 * the data file stores (/tokenizer/sp_model, with their SHA-256 as tokenizer_sha256), so that a
 * later command rebuilds the same tokenizer from the data file alone (tok_sp_load_bytes).
 * Trained models keep the text byte for byte (sp_shim_train); every encoding is checked to decode
 * back to its text, so a model that normalizes, or text holding U+2581 (SentencePiece's own mark for
 * a space), is refused rather than silently changed. Ids fit the data file's uint16: at most
 * TOK_SP_VOCAB_MAX pieces. */
#ifndef MP_TOK_SP_H
#define MP_TOK_SP_H

#include <stddef.h>
#include <stdint.h>

#define TOK_SP_VOCAB_MIN 260   /* 256 byte pieces, <unk>, <s>, </s> and one piece of text */
#define TOK_SP_VOCAB_MAX 65536 /* ids are stored as uint16 */
#define TOK_SP_MODEL_MAX ((size_t)64 << 20) /* the largest .model read (65536 pieces take a few MiB) */

typedef struct tok_sp tok_sp_t;

/* 1 when this build has SentencePiece. */
int tok_sp_available(void);

/* A model of vocab pieces (TOK_SP_VOCAB_MIN..TOK_SP_VOCAB_MAX) of model_type "unigram" or "bpe",
 * trained on the text file text_path. MP_OK, or MP_ERR (reported, naming the file, with
 * SentencePiece's reason: a vocab larger than the text supports, a build without SentencePiece). */
int tok_sp_train(tok_sp_t **sp_p, const char *text_path, int vocab, const char *model_type);

/* The model in the .model file path. MP_OK, or MP_ERR (reported, naming the file: unreadable, not a
 * SentencePiece model, bytes after its last field (naming their offset), more than TOK_SP_VOCAB_MAX
 * pieces). */
int tok_sp_load_file(tok_sp_t **sp_p, const char *path);

/* The model from its serialized bytes model[0..n) (copied), e.g. a data file's /tokenizer/sp_model;
 * what names their origin in errors. MP_OK, or MP_ERR (reported) as tok_sp_load_file. */
int tok_sp_load_bytes(tok_sp_t **sp_p, const void *model, size_t n, const char *what);

void tok_sp_free(tok_sp_t *sp);

/* Its number of pieces (the data file's vocab), its serialized bytes, their SHA-256 in hex. */
int tok_sp_vocab(const tok_sp_t *sp);
const unsigned char *tok_sp_model(const tok_sp_t *sp, size_t *n_p);
const char *tok_sp_digest(const tok_sp_t *sp);

/* The ids of text[0..n) into ids (room for n), their count in *n_ids_p. MP_OK, or MP_ERR (reported,
 * naming the byte offset) when SentencePiece fails or the ids do not decode back to the text. */
int tok_sp_encode(const tok_sp_t *sp, const unsigned char *text, size_t n, uint32_t *ids, size_t *n_ids_p);

/* The bytes of token id (*n_p of them; none for <unk>, <s>, </s>), or NULL when id is not below its
 * vocabulary's size. The pointer lives as long as sp. */
const unsigned char *tok_sp_token(const tok_sp_t *sp, int id, size_t *n_p);

#endif
