/* The safetensors format (Hugging Face's), written (F32 or BF16) and read (F32, BF16, F16 into
 * floats) without its library:
 *   8 bytes   N, the header's length, unsigned little-endian
 *   N bytes   a JSON object: {"__metadata__": {"k": "v", ...},
 *                             "NAME": {"dtype": "F32", "shape": [d0, d1], "data_offsets": [b, e]}, ...}
 *             padded with spaces to a multiple of 8 bytes (so the data is aligned)
 *   the data  each tensor's elements row-major, little-endian, at [8 + N + b, 8 + N + e)
 * The reader takes any dtype the format names into its entries (a caller refuses what it cannot
 * use), and checks what the format promises: the header within the file, valid JSON of that shape,
 * each tensor's bytes = its elements × its dtype's size, offsets inside the data, no two tensors
 * overlapping and the tensors covering the data exactly (no hole, nothing after the last). Only the core room is used: no HDF5, no MPI. The host must be little-endian (checked). */
#ifndef MP_SAFETENSORS_H
#define MP_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define ST_NAME_MAX 128
#define ST_MAX_DIMS 8

/* One tensor to write: its name, shape and ndim floats' worth of elements at data, stored as dtype:
 * "F32" (NULL: the default) or "BF16" (each float rounded to the nearest bfloat16, ties to even, as
 * PyTorch's .to(torch.bfloat16) does). */
typedef struct {
    const char *name;
    int ndim;
    long long shape[ST_MAX_DIMS];
    const float *data;
    const char *dtype;
} st_out_t;

/* Writes the n tensors (in this order) to path atomically (path.tmp, fsync, rename, fsync of the
 * directory: publish.h), with __metadata__ {"format": "pt"} (what transformers' loader asks for).
 * MP_OK, or MP_ERR with a message naming path (and the tensor, for a bad name or shape, or a BF16
 * tensor's element that bfloat16 cannot hold: an infinity or NaN, or a float that rounds to one);
 * on error path is as it was. */
int st_write(const char *path, const st_out_t *t, int n);

/* One tensor of a file read. */
typedef struct {
    char name[ST_NAME_MAX];
    char dtype[16];
    int ndim;
    long long shape[ST_MAX_DIMS];
    uint64_t begin, end; /* data_offsets: bytes, from the start of the data */
} st_entry_t;

typedef struct {
    char path[4096];
    int count;
    st_entry_t *e;
    uint64_t data0;      /* file offset of the data: 8 + N */
    uint64_t data_len;   /* bytes of data in the file */
} st_file_t;

/* Reads and checks path's header (above). MP_OK with the entries in *f_p (st_close frees them), or
 * MP_ERR with a message naming path and, where there is one, the key at fault. */
int st_open(const char *path, st_file_t *f_p);

/* The entry called name, or NULL. */
const st_entry_t *st_find(const st_file_t *f, const char *name);

/* Reads entry e (dtype F32, checked by the caller) into dst (its elements). MP_OK, or MP_ERR naming
 * the file and the tensor (a short read: the file changed since st_open; an element that is NaN or
 * infinite, named by its index). */
int st_read_f32(const st_file_t *f, const st_entry_t *e, float *dst);

/* The same for an entry of dtype F32, BF16 or F16, each element converted to float exactly (every
 * bfloat16 and half is a float); another dtype is refused naming the file and the tensor. */
int st_read_float(const st_file_t *f, const st_entry_t *e, float *dst);

/* x rounded to the nearest bfloat16 (ties to even), as its 16 bits; and those bits as a float. */
uint16_t st_bf16_round(float x);
float st_bf16_float(uint16_t b);

void st_close(st_file_t *f);

#endif
