/* Encoding with a tokenizer.json (contract in tok_hf.h), in the `tokenizers` library's order: the
 * added tokens are found in the text first; each stretch between them is normalized (U+2581 for
 * ' ', prefixed with one: Prepend or Metaspace), split at the normalized added tokens found in it
 * (their contents normalized too), and each part cut by the pre-tokenizer's
 * steps, one after another (each cuts the pieces of the one before); each final piece is merged by
 * BPE: from its bytes (ByteLevel) or characters, the adjacent pair of lowest merge rank merges, the
 * leftmost of equals, until no adjacent pair has a merge (the library's priority queue of (rank,
 * position) pops the same pairs in the same order). */
#include "tok_hf_impl.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "merge_heap.h"
#include "pretok_gpt2.h"
#include "pretok_llama3.h"
#include "unicode_gpt2.h"

/* Where the encoded ids go. */
typedef struct {
    const tok_hf_t *hf;
    uint32_t *ids;
    size_t m;
    uint32_t *sym; /* scratch: a piece's symbols (room for the longest piece) */
    size_t at;     /* the piece's offset in the text, for messages */
} hf_out_t;

/* A piece's first symbols into o->sym: its bytes' tokens (ByteLevel) or its characters' (else), with
 * the byte fallback or unk_token for a character that is no token. Returns how many, or 0 (reported). */
static size_t hf_symbols(hf_out_t *o, const unsigned char *s, size_t n)
{
    const tok_hf_t *hf = o->hf;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        int cls;
        const size_t len = hf->byte_level ? 1 : pretok_gpt2_char(s + i, n - i, &cls);
        const int id = tok_hf_find(hf, s + i, len);
        if (id >= 0) o->sym[k++] = (uint32_t)id;
        else if (hf->byte_fallback)
            for (size_t b = 0; b < len; b++) o->sym[k++] = (uint32_t)hf->fallback[s[i + b]];
        else if (hf->unk >= 0) o->sym[k++] = (uint32_t)hf->unk;
        else {
            MP_ERROR("tokenizer hf: the %zu byte(s) at byte %zu are no token, and the tokenizer.json has neither "
                     "byte_fallback nor unk_token", len, o->at + i);
            return 0;
        }
        i += len;
    }
    return k;
}

/* Above this many symbols a piece merges through a heap (hf_merge_long): the scan's passes are
 * quadratic, and a line of 100k '=' is one piece. */
#define HF_SCAN_MAX 64

/* Merges sym[0..k) by scanning every adjacent pair for the lowest rank; the count left. */
static size_t hf_merge_scan(const tok_hf_t *hf, uint32_t *sym, size_t k)
{
    for (;;) {
        uint32_t best = UINT32_MAX, merged = 0;
        size_t at = 0;
        for (size_t i = 0; i + 1 < k; i++) {
            const tok_hf_merge_t *m = tok_hf_merge(hf, sym[i], sym[i + 1]);
            if (m && m->rank < best) best = m->rank, merged = m->merged, at = i;
        }
        if (best == UINT32_MAX) return k;
        sym[at] = merged;
        memmove(sym + at + 1, sym + at + 2, (k - at - 2) * sizeof *sym);
        k--;
    }
}

/* The same merges as hf_merge_scan, in the same order, through a heap of (rank, position) over a
 * linked list of the symbols (a symbol keeps its position when it absorbs its right neighbour, so
 * positions keep the text's order and the leftmost of equal ranks pops first); an entry whose pair
 * has changed since is skipped. The count left, or 0 when scratch could not be allocated. */
static size_t hf_merge_long(const tok_hf_t *hf, uint32_t *sym, size_t k)
{
    int32_t *next = MP_MALLOC(k * sizeof *next), *prev = MP_MALLOC(k * sizeof *prev);
    uint64_t *heap = MP_MALLOC(3 * k * sizeof *heap); /* k - 1 pairs, then two a merge */
    size_t nh = 0, left = k;
    if (!next || !prev || !heap) return free(next), free(prev), free(heap), 0;
    for (size_t i = 0; i < k; i++) {
        next[i] = i + 1 < k ? (int32_t)(i + 1) : -1, prev[i] = (int32_t)i - 1;
        const tok_hf_merge_t *m = i + 1 < k ? tok_hf_merge(hf, sym[i], sym[i + 1]) : NULL;
        if (m) merge_heap_push(heap, &nh, (uint64_t)m->rank << 32 | i);
    }
    while (nh) {
        const uint64_t e = merge_heap_pop(heap, &nh);
        const uint32_t rank = (uint32_t)(e >> 32), at = (uint32_t)e;
        if (prev[at] == -2 || next[at] < 0) continue; /* gone, or last */
        const int32_t b = next[at];
        const tok_hf_merge_t *m = tok_hf_merge(hf, sym[at], sym[b]);
        if (!m || m->rank != rank) continue; /* the pair changed */
        sym[at] = m->merged;
        next[at] = next[b];
        if (next[b] >= 0) prev[next[b]] = (int32_t)at;
        prev[b] = -2;
        left--;
        const tok_hf_merge_t *l = prev[at] >= 0 ? tok_hf_merge(hf, sym[prev[at]], sym[at]) : NULL;
        if (l) merge_heap_push(heap, &nh, (uint64_t)l->rank << 32 | (uint32_t)prev[at]);
        const tok_hf_merge_t *r = next[at] >= 0 ? tok_hf_merge(hf, sym[at], sym[next[at]]) : NULL;
        if (r) merge_heap_push(heap, &nh, (uint64_t)r->rank << 32 | at);
    }
    size_t j = 0;
    for (int32_t i = 0; i >= 0; i = next[i]) sym[j++] = sym[i];
    free(next), free(prev), free(heap);
    return left;
}

/* BPE on one piece s[0..n), n > 0. */
static int hf_bpe(hf_out_t *o, const unsigned char *s, size_t n)
{
    const tok_hf_t *hf = o->hf;
    if (hf->ignore_merges) {
        const int id = tok_hf_find(hf, s, n);
        if (id >= 0) return o->ids[o->m++] = (uint32_t)id, MP_OK;
    }
    size_t k = hf_symbols(o, s, n);
    if (!k) return MP_ERR;
    k = k <= HF_SCAN_MAX ? hf_merge_scan(hf, o->sym, k) : hf_merge_long(hf, o->sym, k);
    if (!k) return MP_FAIL("tokenizer hf: no memory to merge the piece of %zu bytes at byte %zu", n, o->at);
    memcpy(o->ids + o->m, o->sym, k * sizeof *o->sym);
    o->m += k;
    return MP_OK;
}

/* The length of the piece at s[0..n) under a Digits step: one number (individual) or a run of
 * numbers, or a run of anything else. */
static size_t hf_digits_next(const unsigned char *s, size_t n, int individual)
{
    int cls, c;
    size_t i = pretok_gpt2_char(s, n, &cls);
    if (cls == UNI_NUMBER && individual) return i;
    const int numbers = cls == UNI_NUMBER;
    while (i < n) {
        const size_t len = pretok_gpt2_char(s + i, n - i, &c);
        if ((c == UNI_NUMBER) != numbers) break;
        i += len;
    }
    return i;
}

/* Cuts s[0..n) by step `step` and each piece by the steps after it; the last pieces to hf_bpe. */
static int hf_cut(hf_out_t *o, int step, const unsigned char *s, size_t n)
{
    if (step == o->hf->ncuts) return hf_bpe(o, s, n);
    const size_t base = o->at;
    for (size_t i = 0; i < n;) {
        size_t len;
        switch (o->hf->cuts[step]) {
        case HF_CUT_GPT2: len = pretok_gpt2_next(s + i, n - i); break;
        case HF_CUT_LLAMA3: len = pretok_llama3_next(s + i, n - i, 3); break;
        case HF_CUT_QWEN2: len = pretok_llama3_next(s + i, n - i, 1); break;
        case HF_CUT_DIGITS: len = hf_digits_next(s + i, n - i, 1); break;
        default: len = hf_digits_next(s + i, n - i, 0); break;
        }
        o->at = base + i;
        if (hf_cut(o, step + 1, s + i, len) != MP_OK) return MP_ERR;
        i += len;
    }
    o->at = base;
    return MP_OK;
}

/* The longest added token at s[0..n) of those normalized or not (`normalized`), its index in
 * hf->added, or -1. */
static long hf_added_at(const tok_hf_t *hf, const unsigned char *s, size_t n, int normalized)
{
    long best = -1;
    for (size_t i = 0; i < hf->nadded; i++) {
        const tok_hf_added_t *a = &hf->added[i];
        if (a->normalized == normalized && a->n <= n && (best < 0 || a->n > hf->added[best].n) &&
            !memcmp(a->content, s, a->n))
            best = (long)i;
    }
    return best;
}

/* ids[from..*m_p) with each run of unk_tokens made one (fuse_unk). */
static void hf_fuse_unk(const tok_hf_t *hf, uint32_t *ids, size_t from, size_t *m_p)
{
    size_t k = from;
    for (size_t i = from; i < *m_p; i++)
        if (!(i > from && ids[i] == (uint32_t)hf->unk && ids[i - 1] == (uint32_t)hf->unk)) ids[k++] = ids[i];
    *m_p = k;
}

/* s[0..n) cut, merged and its unk_tokens fused, into o. */
static int hf_piece(hf_out_t *o, const unsigned char *s, size_t n)
{
    const size_t first = o->m;
    if (hf_cut(o, 0, s, n) != MP_OK) return MP_ERR;
    if (o->hf->fuse_unk && o->hf->unk >= 0) hf_fuse_unk(o->hf, o->ids, first, &o->m);
    return MP_OK;
}

/* One stretch between added tokens, text[from..end), into o: normalized (marked), then split at the
 * normalized added tokens found in it, each part between them cut and merged. */
static int hf_stretch(hf_out_t *o, const unsigned char *text, size_t from, size_t end, unsigned char *marked)
{
    const tok_hf_t *hf = o->hf;
    o->at = from;
    if (!marked) return hf_piece(o, text + from, end - from);
    const size_t len = tok_hf_mark(hf, text + from, end - from, from, marked);
    size_t part = 0; /* the start of the part not yet encoded */
    for (size_t i = 0; hf->nnorm && i < len; i++) {
        long a;
        if (!hf->norm_first[marked[i]] || (a = hf_added_at(hf, marked + i, len - i, 1)) < 0) continue;
        if (i > part && hf_piece(o, marked + part, i - part) != MP_OK) return MP_ERR;
        o->ids[o->m++] = (uint32_t)hf->added[a].id;
        i += hf->added[a].n - 1;
        part = i + 1;
    }
    return part < len ? hf_piece(o, marked + part, len - part) : MP_OK;
}

int tok_hf_encode(const tok_hf_t *hf, const unsigned char *text, size_t n, uint32_t *ids, size_t *n_ids_p)
{
    hf_out_t o = {hf, ids, 0, NULL, 0};
    /* a piece has at most as many symbols as bytes (the fallback gives one a byte), and one U+2581 more */
    const int mark = hf->space_mark || hf->prepend != HF_PREPEND_NONE;
    unsigned char *marked = mark ? MP_MALLOC(3 * n + 3) : NULL; /* a U+2581 is 3 bytes: 3 fallback symbols */
    o.sym = MP_MALLOC((mark ? 3 * n + 3 : n + 1) * sizeof *o.sym);
    if (!o.sym || (mark && !marked)) return free(o.sym), free(marked), MP_ERR;
    size_t from = 0; /* the start of the stretch not yet encoded */
    for (size_t i = 0; i <= n; i++) {
        long a = -1;
        if (i < n && !hf->added_first[text[i]]) continue;
        if (i < n && (a = hf_added_at(hf, text + i, n - i, 0)) < 0) continue;
        if (i > from && hf_stretch(&o, text, from, i, marked) != MP_OK) return free(o.sym), free(marked), MP_ERR;
        if (a < 0) break; /* the end of the text */
        ids[o.m++] = (uint32_t)hf->added[a].id;
        i += hf->added[a].n - 1;
        from = i + 1;
    }
    free(o.sym), free(marked);
    *n_ids_p = o.m;
    return MP_OK;
}
