/* The file checksum of a checkpoint (ARCHITECTURE.md §7), checked with plain POSIX I/O before libhdf5
 * ever parses the file: libhdf5 trusts its metadata and can crash (SIGSEGV, SIGABRT) on a damaged
 * file, and we cannot fix libhdf5. A checkpoint is created with an HDF5 user block (bytes HDF5
 * leaves alone; the superblock follows it), and once the file is closed the writer seals it: the
 * header below goes into the user block. Little-endian, fixed offsets:
 *
 *     0   16  magic "MINDPIPE-FILESUM"
 *     16   4  version (1)
 *     20   4  user block size U (a power of two, 512 .. 16 MiB)
 *     24   8  file length in bytes
 *     32   8  chunk size C (a power of two, 4 KiB .. 64 MiB)
 *     40   8  n: extents left out of the hash
 *     48   8  hash (below)
 *     56 16n  the extents, (offset, length) each, sorted, disjoint, inside [U, file length)
 *     ..      zeros up to U
 *
 * The extents are the raw data of the float datasets: each carries its own checksum, verified on
 * every read, which names the tensor. Everything else is hashed: the user block itself (hash field
 * as zeros), the superblock, every object header (all of /state's attributes), B-trees, heaps,
 * free space. Hash: the bytes [U, length) cut into chunks of C bytes by file offset; chunk j's hash
 * is xxh64(its bytes outside the extents, seed j); the file's is xxh64(user block ‖ chunk hashes
 * as u64 LE, seed 0). Chunks are independent so the work can be spread later; the reader reads only
 * the hashed bytes, the metadata, not the tensors (a few KB to MB, whatever the model's size). */
#ifndef MP_FILESUM_H
#define MP_FILESUM_H

#include <stddef.h>
#include <stdint.h>

#define FILESUM_MAGIC "MINDPIPE-FILESUM" /* 16 bytes, no NUL in the file */
#define FILESUM_VERSION 1
#define FILESUM_HEADER 56                /* bytes before the extent table */
#define FILESUM_CHUNK ((uint64_t)1 << 20)
#define FILESUM_UB_MAX ((uint64_t)1 << 24)

/* filesum_check's verdicts besides MP_ERR (damaged) */
enum { FILESUM_OK = 0, FILESUM_NONE = 1 };

typedef struct {
    uint64_t offset, length; /* bytes [offset, offset + length) of the file */
} filesum_ext_t;

/* XXH64 (xxHash's 64-bit hash, bit-exact with the reference) of n bytes. */
uint64_t filesum_xxh64(const void *data, size_t n, uint64_t seed);

/* The user block a file with n_ext extents needs: the smallest power of two >= 512 that holds the
 * header and the table; 0 when it would exceed FILESUM_UB_MAX. */
uint64_t filesum_userblock_size(size_t n_ext);

/* Seals the closed file path, created with a user block of ub bytes: writes the header with the
 * extents ext (n_ext, any order; left out of the hash) and syncs nothing (publish_commit does).
 * MP_OK, or MP_ERR with a message naming path (overlapping or outside extents, I/O errors). */
int filesum_seal(const char *path, uint64_t ub, const filesum_ext_t *ext, size_t n_ext);

/* Seals again a file changed after sealing (datasets appended by HDF5 leave the sealed extents
 * where they were): the header's user block size and extents are kept, the length and hash
 * recomputed. MP_OK, or MP_ERR naming path (no header, a damaged one, I/O errors). */
int filesum_reseal(const char *path);

/* Checks path's header and hash with open/pread only. FILESUM_OK; FILESUM_NONE: no header (the
 * file was not written by a MindPipe with file checksums); MP_ERR: damaged, truncated or unreadable.
 * why_p (n bytes) says what, without the path, for the caller's message. Prints nothing. */
int filesum_check(const char *path, char *why_p, size_t n);

#endif
