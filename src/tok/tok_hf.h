/* A Hugging Face tokenizer.json of BPE, byte-level (Llama-3, SmolLM2, GPT-2 and Qwen-style files) or
 * SentencePiece-style (Llama 2, TinyLlama, Mistral: U+2581 for ' ', byte_fallback):
 * read in C, and encoding and decoding as the `tokenizers` library does it (validation/
 * test_tokenizer_hf.sh compares id for id with @huggingface/tokenizers under node).
 *
 * What is read (anything else that changes the tokens is refused naming the key):
 *   model         type BPE: vocab (token -> id), merges (each "a b" or ["a", "b"]; merge k has rank
 *                 k and makes the token a+b, which must be in the vocabulary), ignore_merges,
 *                 byte_fallback (a character not in the vocabulary becomes the tokens <0xXX> of its
 *                 UTF-8 bytes), unk_token, fuse_unk (consecutive unk_tokens of a stretch between
 *                 added tokens are one, as the reference library fuses); dropout, continuing_subword_prefix and
 *                 end_of_word_suffix must be null or empty;
 *   added_tokens  ids and contents; found in the text first, leftmost and longest, special or not,
 *                 each then its own token (single_word, lstrip and rstrip must be false; with a
 *                 normalizer, normalized too);
 *   normalizer    null, or SentencePiece-style (tokenizers < 0.14): Prepend of U+2581 and Replace of
 *                 " " by U+2581, alone or in a Sequence: each stretch between added tokens becomes
 *                 U+2581 then its text with ' ' as U+2581 (pre_tokenizer null: the stretch is one
 *                 piece); any other normalizer (NFC, NFKC, Lowercase, ...) is refused naming it;
 *   pre_tokenizer ByteLevel (add_prefix_space false; use_regex: GPT-2's pattern), Split (pattern
 *                 {"Regex": GPT-2's, Llama-3's or Qwen2's pattern, pretok_llama3.h}, behaviour Isolated,
 *                 invert false), Digits (individual_digits or not) and a Sequence of these; or
 *                 Metaspace alone (replacement U+2581, split false, prepend_scheme "first": U+2581
 *                 before the stretch at the text's first byte unless it starts with one; "always":
 *                 before every stretch so; "never"; ' ' as U+2581);
 *   decoder       ByteLevel with a ByteLevel pre-tokenizer; otherwise null, ByteFallback, Fuse,
 *                 Metaspace (U+2581 as ' ', one leading ' ' of the text stripped) or Sequence
 *                 [Replace U+2581 by ' ', ByteFallback, Fuse, Strip ' ' start n stop 0] (n leading
 *                 ' ' stripped); <0xXX> always decodes to its byte.
 *   post_processor is not applied: prep adds no BOS or EOS of its own.
 * With ByteLevel the vocabulary's strings are bytes written through GPT-2's byte-to-character map
 * (bpe_gpt2.h) and a piece starts as its bytes; without, they are UTF-8 and a piece starts as its
 * characters. Ids are 0..V-1, each with a token (V at most DECK_VOCAB_MAX, 1048576, what a deck's
 * model.vocab can hold; prep stores them as uint16 up to V = 65536, as uint32 above).
 * The tokenizer's identity is the SHA-256 of tokenizer.json's bytes, which the data file stores
 * (tok_hf_json) so that the tokenizer can be rebuilt from the file alone. */
#ifndef MP_TOK_HF_H
#define MP_TOK_HF_H

#include <stddef.h>
#include <stdint.h>

typedef struct tok_hf tok_hf_t;

/* Reads the tokenizer.json at path and, when config_path is not NULL, the tokenizer_config.json
 * there (its eos_token: a string or {"content": ...}, naming a token: tok_hf_eos). MP_OK, or MP_ERR
 * with a message naming the file and what is wrong (missing, not JSON, a key missing or of the wrong
 * type, an unsupported type or option, an eos_token that is no token). */
int tok_hf_load(tok_hf_t **hf_p, const char *path, const char *config_path);
/* The same from the files' bytes json[0..n) and config[0..n_config) (NULL: none), copied; whose
 * names them in messages. */
int tok_hf_load_bytes(tok_hf_t **hf_p, const unsigned char *json, size_t n, const unsigned char *config,
                      size_t n_config, const char *whose);
void tok_hf_free(tok_hf_t *hf);

int tok_hf_vocab(const tok_hf_t *hf);
/* SHA-256 of tokenizer.json's bytes, in hex. */
const char *tok_hf_digest(const tok_hf_t *hf);
/* tokenizer.json's bytes (*n_p of them). */
const unsigned char *tok_hf_json(const tok_hf_t *hf, size_t *n_p);
/* tokenizer_config.json's bytes (*n_p of them), or NULL when none was read. */
const unsigned char *tok_hf_config(const tok_hf_t *hf, size_t *n_p);
/* The end-of-sequence token's id (tokenizer_config.json's eos_token), or -1 when none is known. */
int tok_hf_eos(const tok_hf_t *hf);

/* At most this many ids for n bytes of text: one a byte, and a U+2581 before each stretch. */
#define TOK_HF_IDS_ROOM(n) (2 * (n) + 1)

/* The tokens of text[0..n) into ids (room for TOK_HF_IDS_ROOM(n)); their count in *n_ids_p. MP_OK, or MP_ERR
 * (reported: a character with no token, no byte fallback and no unk_token; out of memory). */
int tok_hf_encode(const tok_hf_t *hf, const unsigned char *text, size_t n, uint32_t *ids, size_t *n_ids_p);

/* The bytes of token id as the decoder gives them (*n_p of them: <0xXX> its byte, U+2581 as ' ' with a
 * SentencePiece-style decoder), or NULL when id is not below V. */
const unsigned char *tok_hf_token(const tok_hf_t *hf, int id, size_t *n_p);
/* How many leading ' ' the decoder strips from a decoded text (Strip's start; Metaspace 1; else 0). */
int tok_hf_strip(const tok_hf_t *hf);

#endif
