/* Tokenizers: text (bytes) to token ids and back, for `mindpipe prep` and, later, for generation,
 * serving and evaluation. Two kinds:
 *   bytes  each byte is its token (V = 256); the data file records tokenizer "byte";
 *   gpt2   GPT-2's byte-level BPE with its own vocabulary and merges (V = 50257): the text is cut
 *          into pieces by GPT-2's pattern (pretok_gpt2.h), each piece merged (bpe_gpt2.h); token for
 *          token what tiktoken's gpt2 encoding gives (encode_ordinary: <|endoftext|> in the text is
 *          plain text). The data file records tokenizer "gpt2" and the SHA-256 of the vocabulary
 *          files (tokenizer_sha256), so that a later command can refuse another vocabulary;
 *   sp     a SentencePiece model (tok_sp.h), trained by prep or read from a .model file; the data
 *          file records tokenizer "sp", the model's bytes and their SHA-256 (tok_model);
 *   hf     a Hugging Face tokenizer.json of BPE, byte-level or SentencePiece-style (tok_hf.h); the data file records tokenizer
 *          "hf", the file's bytes and their SHA-256 (tok_model).
 * Ids are uint32_t: bytes', gpt2's and sp's stay below 65536, hf's below DECK_VOCAB_MAX (model.vocab's
 * largest); a data file stores them as uint16 when the vocabulary has at most 65536 ids, else as
 * uint32 (data_prep_tokenized). */
#ifndef MP_TOKENIZER_H
#define MP_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "bpe_gpt2.h"
#include "tok_hf.h"
#include "tok_sp.h"

typedef enum { TOK_BYTES = 0, TOK_GPT2 = 1, TOK_SP = 2, TOK_HF = 3 } tok_kind_t;

typedef struct {
    tok_kind_t kind;
    bpe_gpt2_t *bpe; /* gpt2 */
    tok_sp_t *sp;    /* sp */
    tok_hf_t *hf;    /* hf */
} tokenizer_t;

/* "bytes", "gpt2", "sp" or "hf:DIR" (what prep's --tokenizer takes; hf's directory: tok_open_hf_dir).
 * MP_OK, or MP_ERR naming the choices. */
int tok_kind_parse(const char *name, tok_kind_t *kind_p);

/* Where gpt2's encoder.json and vocab.bpe are looked for without --tokenizer-dir:
 * $MINDPIPE_GPT2_DIR, else $HOME/.cache/mindpipe/gpt2 (where .ci/deps.sh puts them). MP_ERR
 * (reported) when neither is set or the path does not fit n bytes. */
int tok_default_dir(char *dir, size_t n);

/* A tokenizer of the kind; gpt2 reads its files from dir (NULL: tok_default_dir). MP_OK, or MP_ERR
 * with a message naming the file that is missing or wrong; MP_ERR for sp, whose model comes from
 * tok_sp.h and tok_from_sp. */
int tok_open(tokenizer_t *tok_p, tok_kind_t kind, const char *dir);
/* The sp tokenizer of model sp, which it owns from then on (tok_close frees it). */
tokenizer_t tok_from_sp(tok_sp_t *sp);
/* The hf tokenizer of hf, which it owns from then on. */
tokenizer_t tok_from_hf(tok_hf_t *hf);
/* The tokenizer of a Hugging Face model directory: dir/tokenizer.json (hf), else dir/tokenizer.model
 * through SentencePiece (sp). MP_OK, or MP_ERR naming the directory or the file that is wrong. */
int tok_open_hf_dir(tokenizer_t *tok_p, const char *dir);
void tok_close(tokenizer_t *tok);

/* The token generation stops at: hf's end-of-sequence token (tokenizer_config.json's eos_token),
 * else -1 (bytes, gpt2 and sp generate to --max-tokens, as before). */
int tok_eos(const tokenizer_t *tok);

/* The data file's attributes: tokenizer ("byte", "gpt2", "sp", "hf"), vocab, and the vocabulary's SHA-256
 * in hex (NULL for bytes, which has no files; sp: of tok_model's bytes). */
const char *tok_name(const tokenizer_t *tok);
int tok_vocab(const tokenizer_t *tok);
const char *tok_digest(const tokenizer_t *tok);
/* The bytes the data file stores so that the tokenizer can be rebuilt from it alone (*n_p of them:
 * sp's serialized model, dataset /tokenizer/sp_model; hf's tokenizer.json, /tokenizer/hf_json), or
 * NULL (bytes, gpt2). tok_model_dataset: that dataset's name under /tokenizer, or NULL. */
const unsigned char *tok_model(const tokenizer_t *tok, size_t *n_p);
const char *tok_model_dataset(const tokenizer_t *tok);

/* At most this many ids for n bytes of text: no token is shorter than a byte, but an hf tokenizer of
 * SentencePiece's style puts a U+2581 of its own before each stretch between added tokens. */
#define TOK_IDS_ROOM(n) TOK_HF_IDS_ROOM(n)

/* The tokens of text[0..n) into ids, which has room for TOK_IDS_ROOM(n); their count in *n_ids_p. MP_OK, or MP_ERR (reported: out of memory for a long piece's merges). */
int tok_encode(const tokenizer_t *tok, const unsigned char *text, size_t n, uint32_t *ids, size_t *n_ids_p);

/* The bytes of token id (*n_p of them), or NULL when id is not below the vocabulary's size. The
 * pointer lives as long as tok. */
const unsigned char *tok_token_bytes(const tokenizer_t *tok, int id, size_t *n_p);

/* The bytes of ids[0..n), concatenated, less the leading spaces an hf decoder strips (tok_hf_strip),
 * into a malloc'd buffer (*bytes_p, *n_bytes_p; one byte more is allocated and set to 0, so text can
 * be printed). MP_OK, or MP_ERR naming the first id that is
 * not below the vocabulary's size, and its index. */
int tok_decode(const tokenizer_t *tok, const int *ids, size_t n, unsigned char **bytes_p, size_t *n_bytes_p);

/* ---- a tokenizer's identity: what data files and checkpoints record ----------------------------- */
/* (reading it from a token file, and opening the tokenizer it names: tok_files.h, with the HDF5 code) */

#define TOK_SHA256_HEX 64

/* Which tokenizer made a file's tokens: the kind as files write it ("byte" or "gpt2") and, for gpt2,
 * the SHA-256 of its vocabulary (tok_digest; "" for byte, which has no files). Two files agree when
 * both fields are equal. */
typedef struct {
    char name[8];
    char sha256[TOK_SHA256_HEX + 1];
} tok_ident_t;

/* The identity of an open tokenizer. */
void tok_ident_of(const tokenizer_t *tok, tok_ident_t *ident_p);

/* An identity from a file's attributes: name "byte" or "none" (sha256 NULL), or "gpt2", "sp" or "hf"
 * (sha256: 64 lowercase hex digits). MP_OK, or MP_ERR with what is wrong in why_p (n bytes: another name, a digest missing or
 * malformed, a digest on byte), printing nothing. */
int tok_ident_set(tok_ident_t *ident_p, const char *name, const char *sha256, char *why_p, size_t n);

/* 1 when a and b are the same tokenizer, else 0. */
int tok_ident_same(const tok_ident_t *a, const tok_ident_t *b);

/* "byte", or "gpt2 (tokenizer_sha256 HEX)", into buf (n bytes, cut if shorter). Returns buf. */
const char *tok_ident_text(const tok_ident_t *ident, char *buf, size_t n);

#endif
