/* GPT-2's pre-tokenizer: the text cut into pieces, each then encoded on its own by byte-pair merges
 * (bpe_gpt2.h). The pieces are the matches, left to right, of GPT-2's pattern
 *
 *     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *
 * under a backtracking engine's rules (the first alternative that matches wins; + is greedy), as
 * tiktoken's gpt2 encoding runs it, written out by hand:
 *   - an apostrophe followed by s, t, m, d, re, ve or ll (lower case only) is a piece;
 *   - else an optional space (U+0020 only) and a run of letters, or of numbers, or of "others"
 *     (neither white space, letter nor number);
 *   - else white space: a run that ends the text is one piece; a run followed by something else
 *     leaves its last character to the next piece (which then starts with it: " word" when it is a
 *     space), unless the run is that one character.
 * Classes come from unicode_gpt2.h. The text is bytes: valid UTF-8 is read as code points, and any
 * byte that does not start a valid UTF-8 sequence (a stray continuation byte, an overlong form, a
 * surrogate, a truncated sequence) is one character of class other on its own. Every byte of the
 * text is in exactly one piece, in order, so the pieces' bytes are the text. */
#ifndef MP_PRETOK_GPT2_H
#define MP_PRETOK_GPT2_H

#include <stddef.h>
#include <stdint.h>

/* The class (UNI_OTHER, UNI_LETTER, UNI_NUMBER, UNI_SPACE) of code point cp. */
int pretok_class(uint32_t cp);

/* One character at s[0..n), n > 0: its length in bytes, its class in *cls_p (a byte that starts no
 * well-formed UTF-8 sequence is a character of one byte, class other). For the other patterns
 * written out by hand (pretok_llama3.h), which read text the same way. */
size_t pretok_gpt2_char(const unsigned char *s, size_t n, int *cls_p);

/* The length in bytes (1..n) of the piece at the start of s[0..n), n > 0. */
size_t pretok_gpt2_next(const unsigned char *s, size_t n);

#endif
