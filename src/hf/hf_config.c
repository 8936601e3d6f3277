/* config.json read, and the export's directory made (contract in hf_config.h). */
#include "hf_config.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "publish.h"

/* dir and its parents, as mkdir -p. */
int hf_mkdir(const char *dir)
{
    char p[4096];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) return MP_FAIL("%s: path too long", dir);
    for (char *s = p + 1;; s++) {
        if (*s && *s != '/') continue;
        const char c = *s;
        *s = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) return MP_FAIL("cannot create %s: %s", p, strerror(errno));
        *s = c;
        if (!c) break;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return MP_FAIL("%s is not a directory", dir);
    return MP_OK;
}

/* ---- config.json: the top-level keys of a JSON object, their values where they are scalars ----
 * The reader is strict where Python's json (what Hugging Face reads it with) is, so that what
 * MindPipe checks is what the model is loaded as: UTF-8 text, RFC 8259's grammar (no "+1", "01",
 * ".5", NaN, no trailing comma), and unlike Python no key given twice (Python keeps the last one,
 * other readers the first: a file that means two models to two readers is refused). */

#define HF_CONFIG_MAX (1u << 20) /* a config.json is a few kB: a bound against reading a wrong file */
#define HF_DEPTH_MAX 64
#define HF_INT_MAX 2147483647.0 /* the deck's sizes are ints */


typedef struct {
    const char *s, *s0, *end, *path;
} hf_json_t;

static void hf_ws(hf_json_t *j)
{
    while (j->s < j->end && (*j->s == ' ' || *j->s == '\t' || *j->s == '\n' || *j->s == '\r')) j->s++;
}

static int hf_bad(const hf_json_t *j, const char *what)
{
    return MP_FAIL("%s: malformed JSON at byte %ld: %s", j->path, (long)(j->s - j->s0), what);
}

/* The offset of the first byte of s[0..n) that does not belong to well-formed UTF-8 (RFC 3629: no
 * overlong forms, no surrogates, nothing above U+10FFFF), or n. */
static size_t hf_utf8_bad(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        const unsigned c = s[i];
        unsigned lo = 0x80, hi = 0xbf;
        size_t k;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf) k = 1;
        else if (c == 0xe0) k = 2, lo = 0xa0;
        else if (c == 0xed) k = 2, hi = 0x9f;
        else if (c >= 0xe1 && c <= 0xef) k = 2;
        else if (c == 0xf0) k = 3, lo = 0x90;
        else if (c == 0xf4) k = 3, hi = 0x8f;
        else if (c >= 0xf1 && c <= 0xf3) k = 3;
        else return i;
        if (k > n - i - 1 || s[i + 1] < lo || s[i + 1] > hi) return i;
        for (size_t m = 2; m <= k; m++)
            if ((s[i + m] & 0xc0) != 0x80) return i;
        i += k + 1;
    }
    return n;
}

/* A JSON string into out (n bytes, cut to fit; *cut_p says whether it was). A \\u escape outside
 * ASCII and any control character an escape makes become '?', which no expected value contains
 * and which messages can print. */
static int hf_string(hf_json_t *j, char *out, size_t n, int *cut_p)
{
    size_t k = 0;
    *cut_p = 0;
    if (j->s >= j->end || *j->s != '"') return hf_bad(j, "expected a string");
    for (j->s++; j->s < j->end && *j->s != '"'; j->s++) {
        char c = *j->s;
        if ((unsigned char)c < 0x20) return hf_bad(j, "a control character in a string");
        if (c == '\\') {
            if (++j->s >= j->end) break;
            const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t", *p = *j->s ? strchr(from, *j->s) : NULL;
            if (*j->s == 'u') {
                unsigned v = 0;
                for (int i = 0; i < 4; i++) {
                    const char h = ++j->s < j->end ? *j->s : 0;
                    if (!h || !strchr("0123456789abcdefABCDEF", h)) return hf_bad(j, "a bad \\u escape");
                    v = v * 16 + (unsigned)(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
                }
                c = v >= 0x20 && v < 0x80 ? (char)v : '?';
            } else if (p) {
                c = (unsigned char)to[p - from] < 0x20 ? '?' : to[p - from];
            } else {
                return hf_bad(j, "a bad escape");
            }
        }
        if (k + 1 < n) out[k++] = c;
        else *cut_p = 1;
    }
    if (j->s >= j->end) return hf_bad(j, "an unterminated string");
    j->s++;
    out[k] = 0;
    return MP_OK;
}

/* The digits [0-9]+ at j->s: MP_OK if there is at least one. */
static int hf_digits(hf_json_t *j)
{
    const char *d = j->s;
    while (j->s < j->end && *j->s >= '0' && *j->s <= '9') j->s++;
    return j->s > d ? MP_OK : MP_ERR;
}

/* true, false, null or a number at j->s into x (kind; a number's value, text, integral), by RFC
 * 8259's grammar exactly. */
static int hf_scalar(hf_json_t *j, hf_val_t *x)
{
    static const char *const lit[3] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        const size_t k = strlen(lit[i]);
        if ((size_t)(j->end - j->s) >= k && !memcmp(j->s, lit[i], k)) {
            j->s += k;
            x->kind = "tfz"[i];
            return MP_OK;
        }
    }
    const char *s0 = j->s;
    if (j->s < j->end && *j->s == '-') j->s++;
    if (j->s < j->end && *j->s == '0') j->s++;
    else if (j->s >= j->end || *j->s < '1' || *j->s > '9') return j->s = s0, hf_bad(j, "expected a value");
    else hf_digits(j);
    x->integral = 1;
    if (j->s < j->end && *j->s == '.') {
        j->s++, x->integral = 0;
        if (hf_digits(j) != MP_OK) return hf_bad(j, "a number without digits after its '.'");
    }
    if (j->s < j->end && (*j->s == 'e' || *j->s == 'E')) {
        j->s++, x->integral = 0;
        if (j->s < j->end && (*j->s == '+' || *j->s == '-')) j->s++;
        if (hf_digits(j) != MP_OK) return hf_bad(j, "a number without digits in its exponent");
    }
    char text[128];
    const size_t len = (size_t)(j->s - s0);
    if (len >= sizeof text) return j->s = s0, hf_bad(j, "a number of more than 127 characters");
    memcpy(text, s0, len);
    text[len] = 0;
    x->kind = 'n';
    x->num = strtod(text, NULL);
    if (!isfinite(x->num)) return j->s = s0, hf_bad(j, "a number beyond a double's range");
    snprintf(x->str, sizeof x->str, "%.*s", (int)sizeof x->str - 1, text);
    return MP_OK;
}

static int hf_value(hf_json_t *j, int depth, hf_val_t *x);

/* The array or object at j->s, every member checked by the grammar (depth: how deep it is). */
static int hf_container(hf_json_t *j, int depth)
{
    const char close = *j->s == '[' ? ']' : '}';
    if (depth >= HF_DEPTH_MAX) return hf_bad(j, "nested more than 64 deep");
    j->s++;
    hf_ws(j);
    if (j->s < j->end && *j->s == close) return j->s++, MP_OK;
    for (;;) {
        hf_val_t member = {.kind = 'o'};
        int cut;
        hf_ws(j);
        if (close == '}') {
            if (hf_string(j, member.str, sizeof member.str, &cut) != MP_OK) return MP_ERR;
            hf_ws(j);
            if (j->s >= j->end || *j->s != ':') return hf_bad(j, "expected ':'");
            j->s++;
        }
        if (hf_value(j, depth + 1, &member) != MP_OK) return MP_ERR;
        hf_ws(j);
        if (j->s < j->end && *j->s == ',') j->s++;
        else if (j->s < j->end && *j->s == close) return j->s++, MP_OK;
        else return hf_bad(j, close == ']' ? "expected ',' or ']'" : "expected ',' or '}'");
    }
}

/* Any JSON value at j->s (after white space) into x; arrays and objects are checked, kind 'o'. */
static int hf_value(hf_json_t *j, int depth, hf_val_t *x)
{
    int cut;
    hf_ws(j);
    if (j->s >= j->end) return hf_bad(j, "the file ends where a value should be");
    if (*j->s == '"') return x->kind = 's', hf_string(j, x->str, sizeof x->str, &cut);
    if (*j->s == '[' || *j->s == '{') return x->kind = 'o', hf_container(j, depth);
    return hf_scalar(j, x);
}

/* path's whole text into a malloc'd *buf_p (*n_p bytes): a regular file of at most HF_CONFIG_MAX
 * bytes, UTF-8. MP_OK, or MP_ERR naming path and what is wrong. */
static int hf_config_text_read(const char *path, char **buf_p, size_t *n_p)
{
    char why[160];
    uint64_t size = 0;
    const int fd = publish_open_regular(path, O_RDONLY, &size, why, sizeof why); /* a planted FIFO: refused */
    if (fd < 0)
        return MP_FAIL("%s: %s%s", path, why,
                       errno == ENOENT ? " (a Hugging Face model directory has one: it says which model the weights are)"
                                       : "");
    if (size > HF_CONFIG_MAX)
        return close(fd), MP_FAIL("%s: %llu bytes, longer than 1 MiB: not a model's config.json (a few kB)", path,
                                  (unsigned long long)size);
    const size_t n = (size_t)size;
    char *buf = MP_MALLOC(n + 1);
    size_t got = 0;
    for (ssize_t k = 1; buf && got < n && k > 0; got += k > 0 ? (size_t)k : 0) k = read(fd, buf + got, n - got);
    close(fd);
    if (!buf) return MP_ERR;
    if (got != n) return free(buf), MP_FAIL("%s: read %zu of its %zu bytes", path, got, n);
    const size_t bad = hf_utf8_bad((const unsigned char *)buf, n);
    if (bad < n) {
        const unsigned byte = (unsigned char)buf[bad];
        free(buf);
        return MP_FAIL("%s: byte %zu (0x%02x) is not UTF-8: JSON is UTF-8 text", path, bad, byte);
    }
    *buf_p = buf, *n_p = n;
    return MP_OK;
}

/* ---- objects: the walk over members that config.json, its index and the index's weight_map share ---- */

/* Reads one member at j->s (after white space: its key, ':' and value), ctx its reader's state. */
typedef int (*hf_member_fn)(hf_json_t *j, void *ctx);

/* The object at j->s, or hf_bad(not_object) when there is none: member() reads each member, this the
 * ',' between them and the closing '}' (an empty object allowed, a trailing comma not). */
static int hf_object(hf_json_t *j, const char *not_object, hf_member_fn member, void *ctx)
{
    if (j->s >= j->end || *j->s != '{') return hf_bad(j, not_object);
    j->s++;
    hf_ws(j);
    if (j->s < j->end && *j->s == '}') return j->s++, MP_OK;
    for (;;) {
        hf_ws(j);
        if (member(j, ctx) != MP_OK) return MP_ERR;
        hf_ws(j);
        if (j->s < j->end && *j->s == ',') j->s++;
        else if (j->s < j->end && *j->s == '}') return j->s++, MP_OK;
        else return hf_bad(j, "expected ',' or '}'");
    }
}

/* The ':' after a member's key, and the white space around it. */
static int hf_colon(hf_json_t *j)
{
    hf_ws(j);
    if (j->s >= j->end || *j->s != ':') return hf_bad(j, "expected ':'");
    j->s++;
    hf_ws(j);
    return MP_OK;
}

/* path's text as one object, member() reading its members; nothing but white space after it. */
static int hf_file_object(const char *path, const char *not_object, hf_member_fn member, void *ctx)
{
    char *buf;
    size_t len;
    if (hf_config_text_read(path, &buf, &len) != MP_OK) return MP_ERR;
    hf_json_t j = {buf, buf, buf + len, path};
    hf_ws(&j);
    int rc = hf_object(&j, not_object, member, ctx);
    if (rc == MP_OK) {
        hf_ws(&j);
        if (j.s != j.end) rc = hf_bad(&j, "text after the object");
    }
    free(buf);
    return rc;
}

/* config.json's reader: its keys so far. */
typedef struct {
    hf_val_t *v;
    int n;
} hf_keys_t;

/* One top-level key of config.json and its value into ctx (an hf_keys_t). */
static int hf_config_member(hf_json_t *j, void *ctx)
{
    hf_keys_t *k = ctx;
    hf_val_t x = {.kind = 'o'};
    const char *k0 = j->s;
    int cut;
    if (hf_string(j, x.key, sizeof x.key, &cut) != MP_OK) return MP_ERR;
    if (cut) return j->s = k0, hf_bad(j, "a key of more than 255 bytes: not a model's config.json");
    for (int i = 0; i < k->n; i++)
        if (!strcmp(k->v[i].key, x.key))
            return MP_FAIL("%s: key %s is given twice: which one counts depends on the reader (Python's json takes "
                           "the last): refused as ambiguous", j->path, x.key);
    if (hf_colon(j) != MP_OK || hf_value(j, 1, &x) != MP_OK) return MP_ERR;
    if (k->n == HF_KEYS_MAX) return MP_FAIL("%s: more than %d keys: not a model's config.json", j->path, HF_KEYS_MAX);
    k->v[k->n++] = x;
    return MP_OK;
}

/* path's top-level keys into v (HF_KEYS_MAX), their count into *n_p. MP_OK, or MP_ERR naming path. */
int hf_config_read(const char *path, hf_val_t *v, int *n_p)
{
    hf_keys_t k = {v, 0};
    const int rc = hf_file_object(path, "expected '{' (config.json is one object)", hf_config_member, &k);
    *n_p = k.n;
    return rc;
}

/* The index's reader: the weight_map so far (n < 0: none yet). */
typedef struct {
    hf_map_t *m;
    int n, cap;
} hf_index_t;

/* One entry of weight_map, tensor name: shard file, into ctx (an hf_index_t, grown). */
static int hf_map_member(hf_json_t *j, void *ctx)
{
    hf_index_t *x = ctx;
    int cut;
    if (x->n == x->cap) {
        hf_map_t *g = realloc(x->m, (size_t)(x->cap = x->cap ? 2 * x->cap : 256) * sizeof *g);
        if (!g) return MP_FAIL("%s: out of memory", j->path);
        x->m = g;
    }
    hf_map_t *e = &x->m[x->n];
    if (hf_string(j, e->name, sizeof e->name, &cut) != MP_OK) return MP_ERR;
    if (cut) return hf_bad(j, "a tensor name of more than 127 bytes in weight_map");
    for (int i = 0; i < x->n; i++)
        if (!strcmp(x->m[i].name, e->name)) return MP_FAIL("%s: weight_map names tensor %s twice", j->path, e->name);
    if (hf_colon(j) != MP_OK || hf_string(j, e->file, sizeof e->file, &cut) != MP_OK) return MP_ERR;
    if (cut) return hf_bad(j, "a file name of more than 255 bytes in weight_map");
    x->n++;
    return MP_OK;
}

/* One top-level key of the index: weight_map read into ctx (an hf_index_t), any other checked. */
static int hf_index_member(hf_json_t *j, void *ctx)
{
    hf_index_t *x = ctx;
    char key[256];
    int cut;
    if (hf_string(j, key, sizeof key, &cut) != MP_OK || hf_colon(j) != MP_OK) return MP_ERR;
    if (strcmp(key, "weight_map")) {
        hf_val_t v = {.kind = 'o'};
        return hf_value(j, 1, &v);
    }
    if (x->n >= 0) return MP_FAIL("%s: key weight_map is given twice: refused as ambiguous", j->path);
    x->n = 0;
    return hf_object(j, "weight_map is not an object", hf_map_member, x);
}

int hf_index_read(const char *path, hf_map_t **map_p, int *n_p)
{
    hf_index_t x = {NULL, -1, 0};
    int rc = hf_file_object(path, "expected '{' (an index is one object)", hf_index_member, &x);
    if (rc == MP_OK && x.n < 0) rc = MP_FAIL("%s: no weight_map: not a safetensors index", path);
    if (rc != MP_OK) return free(x.m), MP_ERR;
    if (!x.n) free(x.m), x.m = NULL; /* an empty weight_map: no map, as before */
    *map_p = x.m, *n_p = x.n;
    return MP_OK;
}

const hf_val_t *hf_key(const hf_val_t *v, int n, const char *key)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(v[i].key, key)) return &v[i]; /* one at most: hf_config_read refuses a key twice */
    return NULL;
}

/* x's value as a message shows it: a number's text, a string quoted, null, true, false, or what it is. */
const char *hf_what(const hf_val_t *x, char *buf, size_t n)
{
    if (x->kind == 'n') snprintf(buf, n, "%s", x->str);
    else if (x->kind == 's') snprintf(buf, n, "the string \"%s\"", x->str);
    else snprintf(buf, n, "%s", x->kind == 'z' ? "null" : x->kind == 't' ? "true" : x->kind == 'f' ? "false" :
                                                                                        "an array or object");
    return buf;
}

/* Key key of path, an integer of at most 2^31 - 1 in magnitude (written as one: "2", not "2.0"), into
 * *x_p; MP_ERR naming the key and what it is when it is missing or no such integer. */
int hf_int(const char *path, const hf_val_t *v, int n, const char *key, long *x_p)
{
    const hf_val_t *x = hf_key(v, n, key);
    char w[96];
    if (!x) return MP_FAIL("%s: key %s is missing (the deck's model cannot be checked against it)", path, key);
    if (x->kind != 'n' || !x->integral)
        return MP_FAIL("%s: key %s is %s, not an integer", path, key, hf_what(x, w, sizeof w));
    if (fabs(x->num) > HF_INT_MAX)
        return MP_FAIL("%s: key %s is %s, beyond any model's size (2^31 - 1 at most)", path, key, x->str);
    *x_p = (long)x->num;
    return MP_OK;
}
