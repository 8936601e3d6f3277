/* GPT-2's pre-tokenizer (contract and the pattern in pretok_gpt2.h). */
#include "pretok_gpt2.h"

#include "unicode_gpt2.h"

/* ASCII's classes, the common case, without a search: white space is 9..13 and 32, letters A-Z
 * a-z, numbers 0-9. */
#define S UNI_SPACE
#define L UNI_LETTER
#define N UNI_NUMBER
static const unsigned char ascii_class[128] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, S, S, S, S, S, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    S, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, N, N, N, N, N, N, N, N, N, N, 0, 0, 0, 0, 0, 0,
    0, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, 0, 0, 0, 0, 0,
    0, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, 0, 0, 0, 0, 0,
};
#undef S
#undef L
#undef N

int pretok_class(uint32_t cp)
{
    if (cp < 128) return ascii_class[cp];
    size_t lo = 0, hi = uni_gpt2_nranges; /* the range holding cp, if any, is in [lo, hi) */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (uni_gpt2_ranges[mid].lo <= cp) lo = mid;
        else hi = mid;
    }
    const uni_range_t *r = &uni_gpt2_ranges[lo];
    return r->lo <= cp && cp <= r->hi ? (int)r->cls : UNI_OTHER;
}

/* The length of the well-formed UTF-8 sequence at s[0..n) (s[0] >= 0x80) and its code point in
 * *cp_p, or 0 when s[0] does not start one (RFC 3629: no overlong forms, no surrogates, nothing
 * above U+10FFFF). */
static size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp_p)
{
    const unsigned c = s[0];
    size_t len;
    unsigned lo = 0x80, hi = 0xbf; /* the range of the second byte */
    if (c >= 0xc2 && c <= 0xdf) len = 2;
    else if (c >= 0xe0 && c <= 0xef) len = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
    else return 0;
    if (n < len || s[1] < lo || s[1] > hi) return 0;
    uint32_t cp = c & (0x7f >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    *cp_p = cp;
    return len;
}

/* One character at s[0..n), n > 0: its length in bytes; its class in *cls_p. A byte that starts no
 * well-formed sequence is a character of one byte, class other. */
static inline size_t pretok_char(const unsigned char *s, size_t n, int *cls_p)
{
    if (s[0] < 0x80) {
        *cls_p = ascii_class[s[0]];
        return 1;
    }
    uint32_t cp;
    size_t len = utf8_decode(s, n, &cp);
    *cls_p = len ? pretok_class(cp) : UNI_OTHER;
    return len ? len : 1;
}

size_t pretok_gpt2_char(const unsigned char *s, size_t n, int *cls_p) { return pretok_char(s, n, cls_p); }

/* Where the run of characters of class cls that starts at s[i] ends (i <= n). */
static size_t pretok_run(const unsigned char *s, size_t n, size_t i, int cls)
{
    while (i < n) {
        if (s[i] < 0x80) {
            if (ascii_class[s[i]] != cls) break;
            i++;
            continue;
        }
        int c;
        size_t len = pretok_char(s + i, n - i, &c);
        if (c != cls) break;
        i += len;
    }
    return i;
}

size_t pretok_gpt2_next(const unsigned char *s, size_t n)
{
    /* 's|'t|'re|'ve|'m|'ll|'d */
    if (s[0] == '\'' && n >= 2) {
        const unsigned char a = s[1];
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
        if (n >= 3 && (((a == 'r' || a == 'v') && s[2] == 'e') || (a == 'l' && s[2] == 'l'))) return 3;
    }
    /* ' ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+': with the space when a non-space follows it */
    int cls;
    const size_t len = pretok_char(s, n, &cls);
    if (s[0] == ' ' && n > 1) {
        int next;
        const size_t len2 = pretok_char(s + 1, n - 1, &next);
        if (next != UNI_SPACE) return pretok_run(s, n, 1 + len2, next);
    }
    if (cls != UNI_SPACE) return pretok_run(s, n, len, cls);
    /* \s+(?!\S)|\s+: the run, less its last character when something follows and it has two or more */
    size_t end = len, last = len;
    while (end < n) {
        int c;
        const size_t l = pretok_char(s + end, n - end, &c);
        if (c != UNI_SPACE) break;
        last = l;
        end += l;
    }
    return end < n && end > last ? end - last : end;
}
