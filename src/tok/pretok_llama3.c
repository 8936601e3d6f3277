/* Llama-3's pre-tokenizer (contract and the pattern in pretok_llama3.h). */
#include "pretok_llama3.h"

#include "pretok_gpt2.h"
#include "unicode_gpt2.h"

static inline int is_newline(unsigned char c) { return c == '\r' || c == '\n'; }

/* Where the run of characters of class cls from s[i] ends, at most max characters (i <= n). */
static size_t run_of(const unsigned char *s, size_t n, size_t i, int cls, size_t max)
{
    for (size_t k = 0; i < n && k < max; k++) {
        int c;
        const size_t len = pretok_gpt2_char(s + i, n - i, &c);
        if (c != cls) break;
        i += len;
    }
    return i;
}

static size_t newlines_from(const unsigned char *s, size_t n, size_t i)
{
    while (i < n && is_newline(s[i])) i++;
    return i;
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d): its length at s, or 0. */
static size_t contraction(const unsigned char *s, size_t n)
{
    if (s[0] != '\'' || n < 2) return 0;
    const unsigned char a = s[1] | 0x20, b = n >= 3 ? s[2] | 0x20 : 0; /* ASCII letters to lower case */
    if (s[1] >= 0x80) return 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (n >= 3 && s[2] < 0x80 && (((a == 'r' || a == 'v') && b == 'e') || (a == 'l' && b == 'l'))) return 3;
    return 0;
}

/* White space from s[0] (which is white space): \s*[\r\n]+, else \s+(?!\S), else \s+. */
static size_t space_piece(const unsigned char *s, size_t n, size_t first)
{
    size_t end = first, last = first, newline_end = is_newline(s[0]) ? 1 : 0;
    while (end < n) {
        int c;
        const size_t l = pretok_gpt2_char(s + end, n - end, &c);
        if (c != UNI_SPACE) break;
        last = l;
        end += l;
        if (is_newline(s[end - 1])) newline_end = end;
    }
    if (newline_end) return newline_end;
    return end < n && end > last ? end - last : end;
}

size_t pretok_llama3_next(const unsigned char *s, size_t n, size_t numbers)
{
    size_t len = contraction(s, n);
    if (len) return len;
    int cls, next = -1;
    len = pretok_gpt2_char(s, n, &cls);
    size_t len2 = 0;
    if (len < n) len2 = pretok_gpt2_char(s + len, n - len, &next);
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (cls == UNI_LETTER) return run_of(s, n, len, UNI_LETTER, (size_t)-1);
    if (cls != UNI_NUMBER && !is_newline(s[0]) && next == UNI_LETTER) return run_of(s, n, len + len2, UNI_LETTER, (size_t)-1);
    /* \p{N}{1,3} (Qwen2: \p{N}) */
    if (cls == UNI_NUMBER) return run_of(s, n, len, UNI_NUMBER, numbers - 1);
    /* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
    if (s[0] == ' ' && next == UNI_OTHER) return newlines_from(s, n, run_of(s, n, len + len2, UNI_OTHER, (size_t)-1));
    if (cls == UNI_OTHER) return newlines_from(s, n, run_of(s, n, len, UNI_OTHER, (size_t)-1));
    return space_piece(s, n, len);
}
