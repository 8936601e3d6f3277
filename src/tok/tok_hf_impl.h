/* tok_hf's state, shared by its reader (tok_hf_load.c) and its encoder (tok_hf_encode.c) only. */
#ifndef MP_TOK_HF_IMPL_H
#define MP_TOK_HF_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "deck.h" /* DECK_VOCAB_MAX */
#include "tok_hf.h"

#define TOK_HF_MAX_VOCAB DECK_VOCAB_MAX /* what a deck's model.vocab can hold */
#define TOK_HF_MAX_STEPS 8

/* One pre-tokenizer step: each piece is cut again by it. */
typedef enum { HF_CUT_GPT2, HF_CUT_LLAMA3, HF_CUT_QWEN2, HF_CUT_DIGITS, HF_CUT_DIGIT_RUNS } tok_hf_cut_t;

/* How each stretch between added tokens is prefixed with U+2581 before it is cut (SentencePiece's
 * space, "\xe2\x96\x81"): the Prepend normalizer always; Metaspace's prepend_scheme "always" unless the
 * stretch already starts with it, "first" only for a stretch at the text's first byte, "never" not. */
typedef enum { HF_PREPEND_NONE, HF_PREPEND_EVERY, HF_PREPEND_ALWAYS, HF_PREPEND_FIRST } tok_hf_prepend_t;

typedef struct {
    uint32_t a, b;    /* the pair's ids */
    uint32_t rank;    /* the merge's index */
    uint32_t merged;  /* the id of a+b */
} tok_hf_merge_t;

typedef struct {
    unsigned char *content; /* as matched: a normalized token's as the normalizer makes it */
    size_t n;
    int id;
    int normalized; /* found in each stretch after the normalizer ran, not in the text as it is */
} tok_hf_added_t;

struct tok_hf {
    unsigned char *json; /* the file's bytes */
    size_t json_n;
    unsigned char *config; /* tokenizer_config.json's bytes, or NULL */
    size_t config_n;
    int eos;               /* its eos_token's id, or -1 */
    char digest[65];
    int vocab;                /* V */
    unsigned char *bytes;     /* every token's bytes, laid end to end */
    size_t *start;            /* (V + 1): token id is bytes[start[id] .. start[id + 1]) */
    int32_t *slots;           /* open-addressing table of ids by their bytes (nslots, -1 empty) */
    size_t nslots;
    tok_hf_merge_t *merges;   /* open-addressing table of merges by pair (nmerge_slots; rank UINT32_MAX empty) */
    size_t nmerge_slots;
    tok_hf_added_t *added;
    size_t nadded;
    unsigned char added_first[256]; /* 1 for a byte that starts an added token matched in the text */
    unsigned char norm_first[256];  /* 1 for a byte that starts a normalized one (in a normalized stretch) */
    size_t nnorm;                   /* how many added tokens are normalized */
    tok_hf_cut_t cuts[TOK_HF_MAX_STEPS];
    int ncuts;
    int byte_level;           /* pieces start as bytes (else as characters) */
    int ignore_merges, byte_fallback, unk;  /* unk: the unk_token's id or -1 */
    int fallback[256];        /* byte_fallback: the id of <0xXX> */
    int16_t *fallback_byte;   /* byte_fallback: (V) the byte token id decodes to, or -1 (its text) */
    int fuse_unk;             /* consecutive unk_tokens of a stretch are one */
    int space_mark;           /* each ' ' of a stretch becomes U+2581 (Replace, or Metaspace) */
    tok_hf_prepend_t prepend; /* and the stretch is prefixed with U+2581 so */
    int normalized;           /* a normalizer is set (normalized added tokens are found after it) */
    unsigned char *dec_bytes; /* the decoder's Replace (or Metaspace): every token's bytes with U+2581 as ' ', */
    size_t *dec_start;        /* (V + 1) laid out as bytes and start; NULL when the decoder keeps U+2581 */
    int strip;                /* the decoder strips this many leading ' ' of the whole text (Strip, Metaspace) */
};

/* The id of the token whose bytes are s[0..n), or -1. */
int tok_hf_find(const tok_hf_t *hf, const unsigned char *s, size_t n);
/* The stretch s[0..n), n > 0 (at byte `from` of the text), as the normalizer or Metaspace makes it,
 * into out (room for 3n + 3); its length. */
size_t tok_hf_mark(const tok_hf_t *hf, const unsigned char *s, size_t n, size_t from, unsigned char *out);
/* The merge of the pair (a, b), or NULL. */
const tok_hf_merge_t *tok_hf_merge(const tok_hf_t *hf, uint32_t a, uint32_t b);

#endif
