/* The file checksum header of checkpoints (filesum.h): XXH64, sealing, checking; POSIX I/O only. */
#include "filesum.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "publish.h"

/* ---- XXH64 (Yann Collet's xxHash, 64-bit variant; public-domain algorithm, written here) --------- */

#define P1 0x9E3779B185EBCA87ull
#define P2 0xC2B2AE3D27D4EB4Full
#define P3 0x165667B19E3779F9ull
#define P4 0x85EBCA77C2B2AE63ull
#define P5 0x27D4EB2F165667C5ull

static uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static uint32_t le32(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t xxh_round(uint64_t acc, uint64_t in) { return rotl64(acc + in * P2, 31) * P1; }

static uint64_t xxh_merge(uint64_t h, uint64_t v) { return (h ^ xxh_round(0, v)) * P1 + P4; }

uint64_t filesum_xxh64(const void *data, size_t n, uint64_t seed)
{
    const unsigned char *p = data, *const end = p + n;
    uint64_t h;
    if (n >= 32) {
        uint64_t v1 = seed + P1 + P2, v2 = seed + P2, v3 = seed, v4 = seed - P1;
        for (; end - p >= 32; p += 32) {
            v1 = xxh_round(v1, le64(p));
            v2 = xxh_round(v2, le64(p + 8));
            v3 = xxh_round(v3, le64(p + 16));
            v4 = xxh_round(v4, le64(p + 24));
        }
        h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
        h = xxh_merge(xxh_merge(xxh_merge(xxh_merge(h, v1), v2), v3), v4);
    } else {
        h = seed + P5;
    }
    h += (uint64_t)n;
    for (; end - p >= 8; p += 8) h = rotl64(h ^ xxh_round(0, le64(p)), 27) * P1 + P4;
    if (end - p >= 4) h = rotl64(h ^ (uint64_t)le32(p) * P1, 23) * P2 + P3, p += 4;
    for (; p < end; p++) h = rotl64(h ^ *p * P5, 11) * P1;
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    h ^= h >> 32;
    return h;
}

/* ---- the header --------------------------------------------------------------------------------- */

typedef struct {
    uint64_t ub, length, chunk, hash;
    size_t n;
    filesum_ext_t *ext; /* malloc'd */
} filesum_head_t;

static int is_pow2(uint64_t x) { return x && !(x & (x - 1)); }

uint64_t filesum_userblock_size(size_t n_ext)
{
    uint64_t need = FILESUM_HEADER + 16 * (uint64_t)n_ext, ub = 512;
    while (ub < need && ub <= FILESUM_UB_MAX) ub <<= 1;
    return ub <= FILESUM_UB_MAX ? ub : 0;
}

/* pread of exactly n bytes at off; 0, or -1 with why set (a short read: the file is shorter). */
static int read_at(int fd, void *buf, size_t n, uint64_t off, char *why, size_t wn)
{
    for (size_t got = 0; got < n;) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            snprintf(why, wn, "cannot read %zu bytes at offset %llu: %s", n, (unsigned long long)off,
                     r < 0 ? strerror(errno) : "the file ended");
            return -1;
        }
        got += (size_t)r;
    }
    return 0;
}

static int ext_cmp(const void *a, const void *b)
{
    const filesum_ext_t *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Sorted, disjoint, non-empty and inside [ub, len)? 0, or -1 with why. */
static int ext_valid(const filesum_ext_t *ext, size_t n, uint64_t ub, uint64_t len, char *why, size_t wn)
{
    uint64_t prev_end = ub;
    for (size_t i = 0; i < n; i++) {
        const filesum_ext_t *e = &ext[i];
        if (e->length == 0 || e->offset < prev_end || e->offset > len || e->length > len - e->offset) {
            snprintf(why, wn, "extent %zu (offset %llu, %llu bytes) overlaps another or lies outside the file's "
                     "%llu bytes", i, (unsigned long long)e->offset, (unsigned long long)e->length,
                     (unsigned long long)len);
            return -1;
        }
        prev_end = e->offset + e->length;
    }
    return 0;
}

/* The hash of the file open as fd (filesum.h) given its user block ubuf (ub bytes, hash field
 * zeroed) and the header's fields. 0, or -1 with why. Reads only the bytes outside the extents. */
static int filesum_hash(int fd, const unsigned char *ubuf, const filesum_head_t *h, uint64_t *hash_p, char *why,
                        size_t wn)
{
    const uint64_t nchunks = (h->length - h->ub + h->chunk - 1) / h->chunk;
    unsigned char *buf = malloc(h->chunk), *all = malloc(h->ub + 8 * nchunks);
    int rc = -1;
    if (!buf || !all) {
        snprintf(why, wn, "out of memory hashing it");
        goto out;
    }
    memcpy(all, ubuf, h->ub);
    size_t k = 0; /* the first extent that may still reach the current position */
    for (uint64_t j = 0; j < nchunks; j++) {
        const uint64_t start = h->ub + j * h->chunk, end = start + h->chunk < h->length ? start + h->chunk : h->length;
        size_t fill = 0;
        for (uint64_t pos = start; pos < end;) {
            while (k < h->n && h->ext[k].offset + h->ext[k].length <= pos) k++;
            const uint64_t ex = k < h->n ? h->ext[k].offset : h->length;
            if (pos >= ex) { /* inside extent k: skip it */
                pos = ex + h->ext[k].length < end ? ex + h->ext[k].length : end;
                continue;
            }
            const uint64_t seg = (ex < end ? ex : end) - pos;
            if (read_at(fd, buf + fill, (size_t)seg, pos, why, wn) != 0) goto out;
            fill += (size_t)seg;
            pos += seg;
        }
        put64(all + h->ub + 8 * j, filesum_xxh64(buf, fill, j));
    }
    *hash_p = filesum_xxh64(all, h->ub + 8 * nchunks, 0);
    rc = 0;
out:
    free(buf);
    free(all);
    return rc;
}

/* The user block image of h (hash field zeroed; ubuf holds h->ub bytes). */
static void head_encode(const filesum_head_t *h, unsigned char *ubuf)
{
    memset(ubuf, 0, h->ub);
    memcpy(ubuf, FILESUM_MAGIC, 16);
    put32(ubuf + 16, FILESUM_VERSION);
    put32(ubuf + 20, (uint32_t)h->ub);
    put64(ubuf + 24, h->length);
    put64(ubuf + 32, h->chunk);
    put64(ubuf + 40, (uint64_t)h->n);
    for (size_t i = 0; i < h->n; i++) {
        put64(ubuf + FILESUM_HEADER + 16 * i, h->ext[i].offset);
        put64(ubuf + FILESUM_HEADER + 16 * i + 8, h->ext[i].length);
    }
}

/* Reads and checks the header of fd (size bytes) into h (h->ext malloc'd) and the user block into
 * *ubuf_p (malloc'd, hash field zeroed). FILESUM_OK, FILESUM_NONE or MP_ERR, with why. With
 * any_length, a length other than size is accepted (resealing a changed file). */
static int head_read(int fd, uint64_t size, filesum_head_t *h, unsigned char **ubuf_p, int any_length, char *why,
                     size_t wn)
{
    unsigned char fixed[FILESUM_HEADER];
    *h = (filesum_head_t){0};
    if (size < 16 || read_at(fd, fixed, 16, 0, why, wn) != 0 || memcmp(fixed, FILESUM_MAGIC, 16)) {
        snprintf(why, wn, "not a MindPipe checkpoint of this version (no file checksum: written by an older "
                 "MindPipe or by another program)");
        return FILESUM_NONE;
    }
    if (size < FILESUM_HEADER) {
        snprintf(why, wn, "truncated: %llu bytes, shorter than its checksum header", (unsigned long long)size);
        return MP_ERR;
    }
    if (read_at(fd, fixed, FILESUM_HEADER, 0, why, wn) != 0) return MP_ERR;
    const uint32_t version = le32(fixed + 16);
    h->ub = le32(fixed + 20), h->length = le64(fixed + 24), h->chunk = le64(fixed + 32), h->hash = le64(fixed + 48);
    const uint64_t n = le64(fixed + 40);
    if (version != FILESUM_VERSION) {
        snprintf(why, wn, "file checksum header version %u; this build reads version %d (corrupt, or written by a "
                 "newer MindPipe)", version, FILESUM_VERSION);
        return MP_ERR;
    }
    if (!any_length && size != h->length) {
        if (size < h->length)
            snprintf(why, wn, "truncated: %llu bytes, header says %llu", (unsigned long long)size,
                     (unsigned long long)h->length);
        else
            snprintf(why, wn, "corrupt file: %llu bytes, header says %llu (bytes appended, or a damaged header)",
                     (unsigned long long)size, (unsigned long long)h->length);
        return MP_ERR;
    }
    if (any_length) h->length = size;
    if (!is_pow2(h->ub) || h->ub < 512 || h->ub > FILESUM_UB_MAX || h->ub >= h->length || !is_pow2(h->chunk) ||
        h->chunk < 4096 || h->chunk > ((uint64_t)64 << 20) || n > (h->ub - FILESUM_HEADER) / 16) {
        snprintf(why, wn, "corrupt file: its checksum header is damaged (user block %llu, chunk %llu, %llu extents)",
                 (unsigned long long)h->ub, (unsigned long long)h->chunk, (unsigned long long)n);
        return MP_ERR;
    }
    h->n = (size_t)n;
    unsigned char *ubuf = malloc(h->ub);
    h->ext = malloc((h->n ? h->n : 1) * sizeof *h->ext);
    if (!ubuf || !h->ext) {
        snprintf(why, wn, "out of memory reading its checksum header");
        goto err;
    }
    if (read_at(fd, ubuf, h->ub, 0, why, wn) != 0) goto err;
    memset(ubuf + 48, 0, 8);
    for (size_t i = 0; i < h->n; i++)
        h->ext[i] = (filesum_ext_t){le64(ubuf + FILESUM_HEADER + 16 * i), le64(ubuf + FILESUM_HEADER + 16 * i + 8)};
    if (ext_valid(h->ext, h->n, h->ub, h->length, why, wn) != 0) {
        char inner[300];
        snprintf(inner, sizeof inner, "%s", why);
        snprintf(why, wn, "corrupt file: its checksum header is damaged (%s)", inner);
        goto err;
    }
    *ubuf_p = ubuf;
    return FILESUM_OK;
err:
    free(ubuf);
    free(h->ext);
    h->ext = NULL;
    return MP_ERR;
}

/* ---- sealing and checking ----------------------------------------------------------------------- */

/* Writes h's header (hash computed now) over fd's user block. 0, or -1 with why. */
static int head_write(int fd, filesum_head_t *h, char *why, size_t wn)
{
    unsigned char *ubuf = malloc(h->ub);
    int rc = -1;
    if (!ubuf) {
        snprintf(why, wn, "out of memory");
        return -1;
    }
    head_encode(h, ubuf);
    if (filesum_hash(fd, ubuf, h, &h->hash, why, wn) != 0) goto out;
    put64(ubuf + 48, h->hash);
    for (size_t put = 0; put < h->ub;) {
        ssize_t w = pwrite(fd, ubuf + put, h->ub - put, (off_t)put);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            snprintf(why, wn, "cannot write its checksum header: %s", w < 0 ? strerror(errno) : "no progress");
            goto out;
        }
        put += (size_t)w;
    }
    rc = 0;
out:
    free(ubuf);
    return rc;
}

int filesum_seal(const char *path, uint64_t ub, const filesum_ext_t *ext, size_t n_ext)
{
    char why[512];
    uint64_t size;
    filesum_head_t h = {.ub = ub, .chunk = FILESUM_CHUNK, .n = n_ext};
    if (!is_pow2(ub) || ub < 512 || ub > FILESUM_UB_MAX || FILESUM_HEADER + 16 * (uint64_t)n_ext > ub)
        return MP_FAIL("cannot seal %s: a user block of %llu bytes cannot hold %zu extents", path,
                       (unsigned long long)ub, n_ext);
    int fd = publish_open_regular(path, O_RDWR, &size, why, sizeof why);
    if (fd < 0) return MP_FAIL("cannot seal %s: %s", path, why);
    int rc = MP_ERR;
    h.length = size;
    if (!(h.ext = MP_MALLOC((n_ext ? n_ext : 1) * sizeof *h.ext))) goto out;
    if (n_ext) memcpy(h.ext, ext, n_ext * sizeof *ext);
    qsort(h.ext, n_ext, sizeof *h.ext, ext_cmp);
    if (size <= ub) snprintf(why, sizeof why, "it has %llu bytes, no more than its user block", (unsigned long long)size);
    else if (ext_valid(h.ext, n_ext, ub, size, why, sizeof why) == 0 && head_write(fd, &h, why, sizeof why) == 0)
        rc = MP_OK;
    if (rc != MP_OK) MP_ERROR("cannot seal %s: %s", path, why);
out:
    free(h.ext);
    if (close(fd) != 0 && rc == MP_OK) rc = MP_FAIL("cannot seal %s: close: %s", path, strerror(errno));
    return rc;
}

int filesum_reseal(const char *path)
{
    char why[512];
    uint64_t size;
    int fd = publish_open_regular(path, O_RDWR, &size, why, sizeof why);
    if (fd < 0) return MP_FAIL("cannot seal %s again: %s", path, why);
    filesum_head_t h;
    unsigned char *ubuf = NULL;
    int rc = head_read(fd, size, &h, &ubuf, 1, why, sizeof why) == FILESUM_OK ? MP_OK : MP_ERR;
    if (rc == MP_OK && head_write(fd, &h, why, sizeof why) != 0) rc = MP_ERR;
    if (rc != MP_OK) MP_ERROR("cannot seal %s again: %s", path, why);
    free(ubuf);
    free(h.ext);
    if (close(fd) != 0 && rc == MP_OK) rc = MP_FAIL("cannot seal %s again: close: %s", path, strerror(errno));
    return rc;
}

int filesum_check(const char *path, char *why_p, size_t n)
{
    uint64_t size, hash = 0;
    int fd = publish_open_regular(path, O_RDONLY, &size, why_p, n);
    if (fd < 0) return MP_ERR;
    filesum_head_t h;
    unsigned char *ubuf = NULL;
    int rc = head_read(fd, size, &h, &ubuf, 0, why_p, n);
    if (rc == FILESUM_OK && filesum_hash(fd, ubuf, &h, &hash, why_p, n) != 0) rc = MP_ERR;
    if (rc == FILESUM_OK && hash != h.hash) {
        snprintf(why_p, n, "corrupt file: its checksum %016llx does not match the header's %016llx (damaged HDF5 "
                 "metadata, /state or header)", (unsigned long long)hash, (unsigned long long)h.hash);
        rc = MP_ERR;
    }
    free(ubuf);
    free(h.ext);
    close(fd);
    return rc;
}
