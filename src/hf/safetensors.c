/* The safetensors format, written and read (contract in safetensors.h). */
#include "safetensors.h"

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "publish.h"

/* The header is read whole into memory: a bound against a corrupt length field. */
#define ST_HEADER_MAX (100u << 20)

static int st_little_endian(void)
{
    const uint16_t one = 1;
    return *(const unsigned char *)&one == 1;
}

/* ---- the element types: bfloat16 is a float's upper half, half is IEEE 754 binary16 ---- */

uint16_t st_bf16_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1u); /* to nearest, ties to even (finite weights: no NaN to keep) */
    return (uint16_t)(u >> 16);
}

float st_bf16_float(uint16_t b)
{
    const uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

static float st_f16_float(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | man << 13; /* infinity or NaN: found by the finite check */
    } else if (exp) {
        u = sign | (exp + 112) << 23 | man << 13;
    } else if (!man) {
        u = sign;
    } else { /* subnormal: man · 2^-24, normalised */
        int e = -1;
        uint32_t m = man;
        do e++, m <<= 1; while (!(m & 0x400u));
        u = sign | (uint32_t)(112 - e) << 23 | (m & 0x3ffu) << 13;
    }
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* Bytes per element written for t (F32 or BF16). */
static int st_out_size(const st_out_t *t) { return t->dtype && !strcmp(t->dtype, "BF16") ? 2 : 4; }

/* ---- writing ---- */

/* Appends the header JSON of t[0..n) to buf (cap bytes); the bytes used, or 0 when it did not fit. */
static size_t st_header_text(char *buf, size_t cap, const st_out_t *t, int n)
{
    size_t len = 0;
    uint64_t off = 0;
    int k = snprintf(buf, cap, "{\"__metadata__\":{\"format\":\"pt\"}");
    if (k < 0 || (size_t)k >= cap) return 0;
    len = (size_t)k;
    for (int i = 0; i < n; i++) {
        uint64_t numel = 1;
        for (int d = 0; d < t[i].ndim; d++) numel *= (uint64_t)t[i].shape[d];
        k = snprintf(buf + len, cap - len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", t[i].name,
                     st_out_size(&t[i]) == 2 ? "BF16" : "F32");
        if (k < 0 || (size_t)k >= cap - len) return 0;
        len += (size_t)k;
        for (int d = 0; d < t[i].ndim; d++) {
            k = snprintf(buf + len, cap - len, "%s%lld", d ? "," : "", t[i].shape[d]);
            if (k < 0 || (size_t)k >= cap - len) return 0;
            len += (size_t)k;
        }
        const uint64_t bytes = numel * (uint64_t)st_out_size(&t[i]);
        k = snprintf(buf + len, cap - len, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                     (unsigned long long)(off + bytes));
        if (k < 0 || (size_t)k >= cap - len) return 0;
        len += (size_t)k;
        off += bytes;
    }
    if (len + 1 >= cap) return 0;
    buf[len++] = '}';
    while (len % 8) { /* the data starts 8-aligned: 8 + len is then a multiple of 8 */
        if (len >= cap) return 0;
        buf[len++] = ' ';
    }
    return len;
}

/* Names written into the header as they are: no character JSON would need to escape. MP_OK or MP_ERR
 * naming path and the tensor. */
static int st_check_out(const char *path, const st_out_t *t, int n)
{
    for (int i = 0; i < n; i++) {
        if (!t[i].name[0] || strlen(t[i].name) >= ST_NAME_MAX || t[i].ndim < 0 || t[i].ndim > ST_MAX_DIMS)
            return MP_FAIL("%s: tensor '%s': empty or too long a name, or %d dimensions (a bug)", path, t[i].name,
                           t[i].ndim);
        for (const char *s = t[i].name; *s; s++)
            if (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20)
                return MP_FAIL("%s: tensor '%s': a name with a quote, backslash or control character (a bug)", path,
                               t[i].name);
        for (int d = 0; d < t[i].ndim; d++)
            if (t[i].shape[d] < 0) return MP_FAIL("%s: tensor %s: negative dimension (a bug)", path, t[i].name);
        if (t[i].dtype && strcmp(t[i].dtype, "F32") && strcmp(t[i].dtype, "BF16"))
            return MP_FAIL("%s: tensor %s: dtype %s, written are F32 and BF16 (a bug)", path, t[i].name, t[i].dtype);
        if (st_out_size(&t[i]) != 2) continue;
        size_t numel = 1;
        for (int d = 0; d < t[i].ndim; d++) numel *= (size_t)t[i].shape[d];
        for (size_t j = 0; j < numel; j++) /* an exponent of all ones: an infinity or NaN in bfloat16 */
            if ((st_bf16_round(t[i].data[j]) & 0x7f80u) == 0x7f80u)
                return MP_FAIL("%s: tensor %s: element %zu is %g, which bfloat16 cannot hold (beyond 3.3895e38, or "
                               "not finite): export it as F32", path, t[i].name, j, (double)t[i].data[j]);
    }
    return MP_OK;
}

/* Header and data into the open temporary f. MP_OK, or MP_ERR naming tmp. */
static int st_write_stream(FILE *f, const char *tmp, const char *hdr, size_t hlen, const st_out_t *t, int n)
{
    unsigned char len8[8];
    for (int b = 0; b < 8; b++) len8[b] = (unsigned char)((uint64_t)hlen >> (8 * b));
    if (fwrite(len8, 1, 8, f) != 8 || fwrite(hdr, 1, hlen, f) != hlen) goto err;
    for (int i = 0; i < n; i++) {
        size_t numel = 1;
        for (int d = 0; d < t[i].ndim; d++) numel *= (size_t)t[i].shape[d];
        if (st_out_size(&t[i]) == 4) {
            if (numel && fwrite(t[i].data, sizeof(float), numel, f) != numel) goto err;
            continue;
        }
        uint16_t piece[4096];
        for (size_t j = 0; j < numel;) {
            const size_t m = numel - j < 4096 ? numel - j : 4096;
            for (size_t q = 0; q < m; q++) piece[q] = st_bf16_round(t[i].data[j + q]);
            if (fwrite(piece, sizeof piece[0], m, f) != m) goto err;
            j += m;
        }
    }
    if (fflush(f) != 0 || ferror(f)) goto err;
    return MP_OK;
err:
    return MP_FAIL("cannot write %s: %s", tmp, strerror(errno));
}

int st_write(const char *path, const st_out_t *t, int n)
{
    if (!st_little_endian()) return MP_FAIL("%s: safetensors is little-endian and this host is not", path);
    if (st_check_out(path, t, n) != MP_OK) return MP_ERR;
    size_t cap = 64 + (size_t)n * (ST_NAME_MAX + 96 + ST_MAX_DIMS * 24);
    char *hdr = MP_CALLOC(cap, 1), tmp[4200];
    if (!hdr) return MP_ERR;
    const size_t hlen = st_header_text(hdr, cap, t, n);
    int rc = hlen ? MP_OK : MP_FAIL("%s: the header does not fit its buffer (a bug)", path);
    if (rc == MP_OK && (publish_tmp_name(path, tmp, sizeof tmp) != MP_OK || publish_tmp_prepare(tmp) != MP_OK))
        rc = MP_ERR;
    FILE *f = NULL;
    if (rc == MP_OK && !(f = publish_tmp_fopen(tmp))) rc = MP_FAIL("cannot create %s: %s", tmp, strerror(errno));
    if (rc == MP_OK) rc = st_write_stream(f, tmp, hdr, hlen, t, n);
    if (f && fclose(f) != 0 && rc == MP_OK) rc = MP_FAIL("cannot write %s: %s", tmp, strerror(errno));
    free(hdr);
    if (f && rc != MP_OK) publish_discard(tmp);
    if (rc == MP_OK) rc = publish_commit(tmp, path);
    return rc;
}

/* ---- reading: a JSON reader of what the header holds, nothing more ---- */

typedef struct {
    const char *s, *end;
    const char *s0;        /* the header's first byte (file offset 8) */
    const char *path;
    char key[ST_NAME_MAX]; /* the tensor being read, for messages */
} st_json_t;

static void st_ws(st_json_t *j)
{
    while (j->s < j->end && (*j->s == ' ' || *j->s == '\t' || *j->s == '\n' || *j->s == '\r')) j->s++;
}

static int st_expect(st_json_t *j, char c)
{
    st_ws(j);
    if (j->s >= j->end || *j->s != c)
        return MP_FAIL("%s: malformed safetensors header at byte %ld%s%s: expected '%c'", j->path,
                       (long)(8 + (j->s - j->s0)), j->key[0] ? ", key " : "",
                       j->key, c);
    j->s++;
    return MP_OK;
}

/* A JSON string into out (n bytes): the escapes \" \\ \/ \b \f \n \r \t and \u00XX (ASCII); a
 * longer string, another \u or a control character is refused. */
static int st_string(st_json_t *j, char *out, size_t n)
{
    if (st_expect(j, '"') != MP_OK) return MP_ERR;
    size_t k = 0;
    while (j->s < j->end && *j->s != '"') {
        char c = *j->s++;
        if ((unsigned char)c < 0x20) goto bad;
        if (c == '\\') {
            if (j->s >= j->end) goto bad;
            const char e = *j->s++;
            const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t", *p = strchr(from, e);
            if (e == 'u') {
                unsigned v = 0;
                for (int i = 0; i < 4; i++, j->s++) {
                    if (j->s >= j->end) goto bad;
                    const char h = *j->s;
                    v = v * 16 + (unsigned)(h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                                            : h >= 'A' && h <= 'F' ? h - 'A' + 10 : 99);
                    if (v > 0xffff) goto bad;
                }
                if (v == 0 || v > 0x7f) goto bad;
                c = (char)v;
            } else if (e && p) {
                c = to[p - from];
            } else {
                goto bad;
            }
        }
        if (k + 1 >= n) return MP_FAIL("%s: a name in the safetensors header is longer than %zu bytes", j->path, n - 1);
        out[k++] = c;
    }
    if (j->s >= j->end) goto bad;
    j->s++;
    out[k] = 0;
    return MP_OK;
bad:
    return MP_FAIL("%s: malformed safetensors header: a bad string%s%s", j->path, j->key[0] ? " in key " : "", j->key);
}

/* A non-negative JSON integer (no sign, fraction or exponent) below 2^63. */
static int st_uint(st_json_t *j, uint64_t *v_p, const char *what)
{
    st_ws(j);
    uint64_t v = 0;
    const char *s0 = j->s;
    while (j->s < j->end && *j->s >= '0' && *j->s <= '9') {
        if (v > ((uint64_t)1 << 62) / 5) return MP_FAIL("%s: key %s: %s out of range", j->path, j->key, what);
        v = v * 10 + (uint64_t)(*j->s++ - '0');
    }
    if (j->s == s0 || (j->s < j->end && (*j->s == '.' || *j->s == 'e' || *j->s == 'E')))
        return MP_FAIL("%s: key %s: %s is not a non-negative integer", j->path, j->key, what);
    *v_p = v;
    return MP_OK;
}

/* [a, b, ...] of at most max integers into v, their count into *n_p. */
static int st_uint_array(st_json_t *j, uint64_t *v, int max, int *n_p, const char *what)
{
    if (st_expect(j, '[') != MP_OK) return MP_ERR;
    int n = 0;
    st_ws(j);
    if (j->s < j->end && *j->s == ']') {
        j->s++;
        *n_p = 0;
        return MP_OK;
    }
    for (;;) {
        if (n == max) return MP_FAIL("%s: key %s: %s has more than %d entries", j->path, j->key, what, max);
        if (st_uint(j, &v[n++], what) != MP_OK) return MP_ERR;
        st_ws(j);
        if (j->s < j->end && *j->s == ',') {
            j->s++;
            continue;
        }
        if (st_expect(j, ']') != MP_OK) return MP_ERR;
        *n_p = n;
        return MP_OK;
    }
}

/* {"k": "v", ...}: __metadata__, whose values are strings by the format. */
static int st_metadata(st_json_t *j)
{
    char k[ST_NAME_MAX], v[4096];
    if (st_expect(j, '{') != MP_OK) return MP_ERR;
    st_ws(j);
    if (j->s < j->end && *j->s == '}') return j->s++, MP_OK;
    for (;;) {
        if (st_string(j, k, sizeof k) != MP_OK || st_expect(j, ':') != MP_OK || st_string(j, v, sizeof v) != MP_OK)
            return MP_ERR;
        st_ws(j);
        if (j->s < j->end && *j->s == ',') {
            j->s++;
            continue;
        }
        return st_expect(j, '}');
    }
}

/* Bytes per element of a dtype the format names; 0 for one it does not. */
static int st_dtype_size(const char *dt)
{
    static const struct {
        const char *name;
        int size;
    } tab[] = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1},
               {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (!strcmp(tab[i].name, dt)) return tab[i].size;
    return 0;
}

/* One tensor's {"dtype": ..., "shape": [...], "data_offsets": [b, e]} into e (its name set). */
static int st_entry(st_json_t *j, st_entry_t *e)
{
    int have = 0; /* bits: dtype, shape, data_offsets */
    char k[32];
    if (st_expect(j, '{') != MP_OK) return MP_ERR;
    for (;;) {
        if (st_string(j, k, sizeof k) != MP_OK || st_expect(j, ':') != MP_OK) return MP_ERR;
        uint64_t v[ST_MAX_DIMS];
        int n = 0;
        if (!strcmp(k, "dtype") && !(have & 1)) {
            if (st_string(j, e->dtype, sizeof e->dtype) != MP_OK) return MP_ERR;
            have |= 1;
        } else if (!strcmp(k, "shape") && !(have & 2)) {
            if (st_uint_array(j, v, ST_MAX_DIMS, &n, "shape") != MP_OK) return MP_ERR;
            e->ndim = n;
            for (int d = 0; d < n; d++) e->shape[d] = (long long)v[d];
            have |= 2;
        } else if (!strcmp(k, "data_offsets") && !(have & 4)) {
            if (st_uint_array(j, v, 2, &n, "data_offsets") != MP_OK) return MP_ERR;
            if (n != 2) return MP_FAIL("%s: key %s: data_offsets has %d entries, not 2", j->path, e->name, n);
            e->begin = v[0], e->end = v[1];
            have |= 4;
        } else {
            return MP_FAIL("%s: key %s: unexpected or repeated field '%s'", j->path, e->name, k);
        }
        st_ws(j);
        if (j->s < j->end && *j->s == ',') {
            j->s++;
            continue;
        }
        if (st_expect(j, '}') != MP_OK) return MP_ERR;
        break;
    }
    if (have != 7)
        return MP_FAIL("%s: key %s: lacks %s", j->path, e->name,
                       !(have & 1) ? "dtype" : !(have & 2) ? "shape" : "data_offsets");
    return MP_OK;
}

/* The whole header: the top-level object into f->e. */
static int st_header_parse(st_json_t *j, st_file_t *f)
{
    int cap = 0;
    if (st_expect(j, '{') != MP_OK) return MP_ERR;
    st_ws(j);
    if (j->s < j->end && *j->s == '}') return j->s++, MP_OK;
    for (;;) {
        char name[ST_NAME_MAX];
        j->key[0] = 0;
        if (st_string(j, name, sizeof name) != MP_OK || st_expect(j, ':') != MP_OK) return MP_ERR;
        snprintf(j->key, sizeof j->key, "%s", name);
        if (!strcmp(name, "__metadata__")) {
            if (st_metadata(j) != MP_OK) return MP_ERR;
        } else {
            if (st_find(f, name)) return MP_FAIL("%s: key %s appears twice in the safetensors header", j->path, name);
            if (f->count == cap) {
                cap = cap ? 2 * cap : 64;
                st_entry_t *e = realloc(f->e, (size_t)cap * sizeof *e);
                if (!e) return MP_FAIL("out of memory reading %s", j->path);
                f->e = e;
            }
            st_entry_t *e = &f->e[f->count++];
            memset(e, 0, sizeof *e);
            snprintf(e->name, sizeof e->name, "%s", name);
            if (st_entry(j, e) != MP_OK) return MP_ERR;
        }
        st_ws(j);
        if (j->s < j->end && *j->s == ',') {
            j->s++;
            continue;
        }
        j->key[0] = 0;
        if (st_expect(j, '}') != MP_OK) return MP_ERR;
        st_ws(j);
        if (j->s != j->end) return MP_FAIL("%s: malformed safetensors header: text after its object", j->path);
        return MP_OK;
    }
}

static int st_cmp_begin(const void *a, const void *b)
{
    const st_entry_t *x = *(const st_entry_t *const *)a, *y = *(const st_entry_t *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* What the offsets promise: each tensor's bytes match its shape and dtype, lie within the data, and
 * no two tensors overlap. */
static int st_offsets_check(const st_file_t *f)
{
    for (int i = 0; i < f->count; i++) {
        const st_entry_t *e = &f->e[i];
        const int size = st_dtype_size(e->dtype);
        if (!size) return MP_FAIL("%s: key %s: unknown dtype '%s'", f->path, e->name, e->dtype);
        uint64_t bytes = (uint64_t)size;
        for (int d = 0; d < e->ndim; d++) {
            if (e->shape[d] && bytes > UINT64_MAX / 2 / (uint64_t)e->shape[d])
                return MP_FAIL("%s: key %s: shape too large", f->path, e->name);
            bytes *= (uint64_t)e->shape[d];
        }
        if (e->end < e->begin || e->end - e->begin != bytes)
            return MP_FAIL("%s: key %s: data_offsets [%llu, %llu] hold %llu bytes; its shape and dtype %s need %llu",
                           f->path, e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                           (unsigned long long)(e->end - e->begin), e->dtype, (unsigned long long)bytes);
        if (e->end > f->data_len)
            return MP_FAIL("%s: key %s: data_offsets end at byte %llu of the data, past the file's %llu (truncated?)",
                           f->path, e->name, (unsigned long long)e->end, (unsigned long long)f->data_len);
    }
    const st_entry_t **by = MP_CALLOC(f->count ? (size_t)f->count : 1, sizeof *by);
    if (!by) return MP_ERR;
    for (int i = 0; i < f->count; i++) by[i] = &f->e[i];
    qsort(by, (size_t)f->count, sizeof *by, st_cmp_begin);
    int rc = MP_OK;
    for (int i = 1; i < f->count && rc == MP_OK; i++)
        if (by[i]->begin < by[i - 1]->end)
            rc = MP_FAIL("%s: keys %s and %s overlap (data_offsets [%llu, %llu] and [%llu, %llu])", f->path,
                         by[i - 1]->name, by[i]->name, (unsigned long long)by[i - 1]->begin,
                         (unsigned long long)by[i - 1]->end, (unsigned long long)by[i]->begin,
                         (unsigned long long)by[i]->end);
    /* the format: the tensors index the whole data buffer, with no hole. A header length cut short
     * (only its padding lost, so the JSON still parses) moves the data's start: every tensor would be
     * read shifted, and the last would end before the file does, which this finds */
    uint64_t at = 0;
    for (int i = 0; i < f->count && rc == MP_OK; i++) {
        if (by[i]->begin != at)
            rc = MP_FAIL("%s: key %s begins at byte %llu of the data, where %s: the tensors must cover the data "
                         "buffer with no hole (a damaged header length or offsets)", f->path, by[i]->name,
                         (unsigned long long)by[i]->begin, i ? "the one before ends" : "the data begins, at 0");
        at = by[i]->end;
    }
    if (rc == MP_OK && at != f->data_len)
        rc = MP_FAIL("%s: the tensors cover %llu bytes of data and the file holds %llu after its %llu-byte header: "
                     "the header length or the file is damaged (the data must be covered exactly)", f->path,
                     (unsigned long long)at, (unsigned long long)f->data_len, (unsigned long long)(f->data0 - 8));
    free(by);
    return rc;
}

/* The header's length and bytes: hdr_p malloc'd (hlen_p bytes), the file's size in size_p. */
static int st_header_read(int fd, const char *path, char **hdr_p, uint64_t *hlen_p, uint64_t *size_p)
{
    struct stat sb;
    unsigned char len8[8];
    if (fstat(fd, &sb) != 0) return MP_FAIL("cannot stat %s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return MP_FAIL("%s is not a regular file", path);
    const uint64_t size = (uint64_t)sb.st_size;
    if (size < 8 || pread(fd, len8, 8, 0) != 8)
        return MP_FAIL("%s: %llu bytes, too short for a safetensors file (8-byte header length first)", path,
                       (unsigned long long)size);
    uint64_t n = 0;
    for (int b = 7; b >= 0; b--) n = n << 8 | len8[b];
    if (n < 2 || n > size - 8 || n > ST_HEADER_MAX)
        return MP_FAIL("%s: header length %llu is beyond the file's %llu bytes (or over %u): truncated or not "
                       "safetensors", path, (unsigned long long)n, (unsigned long long)size, ST_HEADER_MAX);
    char *hdr = malloc(n);
    if (!hdr) return MP_FAIL("out of memory reading %s", path);
    if (pread(fd, hdr, n, 8) != (ssize_t)n) {
        free(hdr);
        return MP_FAIL("cannot read %s's header: %s", path, strerror(errno));
    }
    *hdr_p = hdr, *hlen_p = n, *size_p = size;
    return MP_OK;
}

int st_open(const char *path, st_file_t *f_p)
{
    st_file_t f = {.count = 0};
    snprintf(f.path, sizeof f.path, "%s", path);
    char why[160];
    const int fd = publish_open_regular(path, O_RDONLY, NULL, why, sizeof why); /* a planted FIFO: refused */
    if (fd < 0) return MP_FAIL("%s: %s", path, why);
    char *hdr = NULL;
    uint64_t n = 0, size = 0;
    int rc = st_header_read(fd, path, &hdr, &n, &size);
    close(fd);
    if (rc != MP_OK) return MP_ERR;
    f.data0 = 8 + n, f.data_len = size - 8 - n;
    st_json_t j = {.s = hdr, .end = hdr + n, .s0 = hdr, .path = f.path};
    rc = st_header_parse(&j, &f);
    if (rc == MP_OK) rc = st_offsets_check(&f);
    free(hdr);
    if (rc != MP_OK) {
        st_close(&f);
        return MP_ERR;
    }
    *f_p = f;
    return MP_OK;
}

const st_entry_t *st_find(const st_file_t *f, const char *name)
{
    for (int i = 0; i < f->count; i++)
        if (!strcmp(f->e[i].name, name)) return &f->e[i];
    return NULL;
}

int st_read_f32(const st_file_t *f, const st_entry_t *e, float *dst) { return st_read_float(f, e, dst); }

int st_read_float(const st_file_t *f, const st_entry_t *e, float *dst)
{
    if (!st_little_endian()) return MP_FAIL("%s: safetensors is little-endian and this host is not", f->path);
    const int size = !strcmp(e->dtype, "F32") ? 4 : !strcmp(e->dtype, "BF16") || !strcmp(e->dtype, "F16") ? 2 : 0;
    if (!size) return MP_FAIL("%s: key %s: dtype %s, read are F32, BF16 and F16", f->path, e->name, e->dtype);
    const int fd = open(f->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return MP_FAIL("cannot open %s: %s", f->path, strerror(errno));
    const size_t want = (size_t)(e->end - e->begin);
    size_t got = 0;
    while (got < want) {
        const ssize_t k = pread(fd, (char *)dst + got, want - got, (off_t)(f->data0 + e->begin + got));
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(fd);
    if (got != want)
        return MP_FAIL("%s: key %s: read %zu of its %zu bytes (the file changed since its header was read?)", f->path,
                       e->name, got, want);
    const size_t n = want / (size_t)size;
    if (size == 2) { /* widened in place from the end: element i's 2 bytes lie below its 4 */
        const int bf = e->dtype[0] == 'B';
        for (size_t i = n; i-- > 0;) {
            uint16_t b; /* memcpy: the bytes are read as what they are, whatever dst's type */
            memcpy(&b, (const char *)dst + 2 * i, 2);
            dst[i] = bf ? st_bf16_float(b) : st_f16_float(b);
        }
    }
    /* imported weights are finite: a NaN or an infinity is damage, never a model */
    for (size_t i = 0; i < n; i++)
        if (!isfinite(dst[i]))
            return MP_FAIL("%s: key %s: element %zu is %s: weights must be finite (a damaged file, or offsets that "
                           "point elsewhere)", f->path, e->name, i, isnan(dst[i]) ? "NaN" : "infinite");
    return MP_OK;
}

void st_close(st_file_t *f)
{
    free(f->e);
    f->e = NULL;
    f->count = 0;
}
