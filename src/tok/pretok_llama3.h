/* Llama-3's pre-tokenizer pattern, as Hugging Face tokenizer.json files give it to a Split
 * pre-tokenizer (behaviour Isolated):
 *
 *     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
 *     \s*[\r\n]+|\s+(?!\S)|\s+
 *
 * (one line in the files; PRETOK_LLAMA3_PATTERN below, byte for byte) under a backtracking
 * engine's rules (the first alternative that matches wins; quantifiers greedy), written out by hand
 * as pretok_gpt2.h does GPT-2's: only these two patterns are recognised, and a tokenizer.json with
 * any other is refused naming it (tok_hf.h). The alternatives, in order:
 *   - an apostrophe and s, t, m, d, re, ve or ll, ASCII letters of either case;
 *   - letters, after at most one character that is neither \r, \n, a letter nor a number;
 *   - one to three numbers;
 *   - an optional space, a run of "others" (neither white space, letter nor number), then any \r
 *     and \n that follow;
 *   - white space up to and including the last \r or \n of its run;
 *   - white space as in GPT-2's pattern (the run, less its last character when something follows
 *     and the run has two or more).
 * Classes and the reading of bytes (an invalid UTF-8 byte is one character of class other) are
 * pretok_gpt2.h's. Every byte of the text is in exactly one piece. */
#ifndef MP_PRETOK_LLAMA3_H
#define MP_PRETOK_LLAMA3_H

#include <stddef.h>

#define PRETOK_LLAMA3_PATTERN                                                                              \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Qwen2's: Llama-3's with one number a piece (\p{N} for \p{N}{1,3}). */
#define PRETOK_QWEN2_PATTERN                                                                              \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"   \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define PRETOK_GPT2_PATTERN "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

/* The length in bytes (1..n) of the piece at the start of s[0..n), n > 0; numbers: the most numbers
 * a piece has (3 for Llama-3, 1 for Qwen2). */
size_t pretok_llama3_next(const unsigned char *s, size_t n, size_t numbers);

#endif
