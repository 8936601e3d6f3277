/* SHA-256 (FIPS 180-4), for identifying files by their contents: the tokenizer's vocabulary files a
 * token dataset was prepared with are recorded by their digest, which `sha256sum` reproduces. */
#ifndef MP_SHA256_H
#define MP_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_BYTES 32
#define SHA256_HEX (2 * SHA256_BYTES + 1) /* the digest in lower-case hex, with its NUL */

typedef struct {
    uint32_t h[8];       /* the chaining state */
    uint64_t total;      /* bytes hashed so far */
    unsigned char buf[64];
    size_t nbuf;         /* bytes waiting in buf */
} sha256_t;

void sha256_init(sha256_t *s);
/* Adds n bytes; may be called any number of times. */
void sha256_update(sha256_t *s, const void *data, size_t n);
/* The digest of everything added, as bytes (out) and, when hex is not NULL, as text. s is spent. */
void sha256_final(sha256_t *s, unsigned char out[SHA256_BYTES], char hex[SHA256_HEX]);

#endif
