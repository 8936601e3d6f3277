/* libFuzzer harness for the safetensors reader (src/hf/safetensors.c), which --init-from hf: runs on
 * files from the internet: the input is the file's bytes. st_open must refuse what the format does
 * not promise (issue 45 item 4: a header length cut short, offsets outside the data or overlapping,
 * a hole, a dtype or shape that does not match its bytes) and, where it accepts, its entries must
 * keep that promise, which this harness asserts: every tensor's bytes inside the data, matching its
 * shape and dtype, the tensors covering the data exactly. Every F32, BF16 and F16 tensor is then
 * read into exactly its elements' floats (st_read_float, which widens the 2-byte types in place and
 * refuses a NaN or infinity); nothing may be read or written beyond the file's end or the buffer
 * (ASan).
 *
 * Build and run: bash validation/fuzz/run.sh SECONDS build fuzz_safetensors (seeds: corpus_safetensors/). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "safetensors.h"

static char st_path[64];

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_safetensors: %s\n", what);
    abort();
}

static void remove_file(void) { unlink(st_path); }

static uint64_t elems(const st_entry_t *e)
{
    uint64_t n = 1;
    for (int d = 0; d < e->ndim; d++) n *= (uint64_t)e->shape[d];
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!st_path[0]) {
        snprintf(st_path, sizeof st_path, "/tmp/fuzz_st.%ld.XXXXXX", (long)getpid());
        const int fd = mkstemp(st_path);
        if (fd < 0) fail("mkstemp");
        close(fd);
        atexit(remove_file);
    }
    FILE *f = fopen(st_path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) fail("cannot write the input file");
    st_file_t st;
    if (st_open(st_path, &st) != MP_OK) return 0;
    if (st.data0 + st.data_len != (uint64_t)size) fail("accepted: the header and data do not add up to the file");
    uint64_t covered = 0;
    for (int i = 0; i < st.count; i++) {
        const st_entry_t *e = &st.e[i];
        if (e->end < e->begin || e->end > st.data_len) fail("accepted: a tensor outside the data");
        covered += e->end - e->begin;
        const int size = !strcmp(e->dtype, "F32") ? 4 : !strcmp(e->dtype, "BF16") || !strcmp(e->dtype, "F16") ? 2 : 0;
        if (size) {
            if (e->end - e->begin != size * elems(e)) fail("accepted: a float tensor whose bytes are not its shape's");
            if (e->end - e->begin > ((uint64_t)1 << 24)) continue; /* the input is smaller: cannot be */
            float *buf = malloc(4 * elems(e) + 1); /* its elements' floats, no more: ASan sees an overflow */
            if (!buf) fail("out of memory");
            (void)st_read_float(&st, e, buf); /* a NaN or infinity is refused, not a fault */
            free(buf);
        }
    }
    if (covered != st.data_len) fail("accepted: the tensors do not cover the data exactly");
    st_close(&st);
    return 0;
}
