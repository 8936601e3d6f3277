/* libFuzzer harness for the llm.c/nanoGPT .bin shard reader (src/data/data.c): the input is a shard's
 * bytes (a header of 256 little-endian int32: magic, version, token count; then the tokens), opened
 * as data.path and data.val_path with the scan on. data_open must refuse a bad magic or version, a
 * file shorter or longer than its token count says; where it accepts, every training and validation
 * window is read (data_window, data_val_sample) and each token must be at most the scan's largest
 * (ASan: nothing read beyond the mapping).
 *
 * Build and run: bash validation/fuzz/run.sh SECONDS build fuzz_shard (seeds: corpus_shard/). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "data.h"

static char dir[64], shard[96];

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_shard: %s\n", what);
    abort();
}

static void remove_files(void)
{
    unlink(shard);
    rmdir(dir);
}

/* Every window of split s of length T: each token at most ds's largest. */
static void read_split(const dataset_t *ds, const data_split_t *s, int T)
{
    int buf[65];
    if (s->tokens < (uint64_t)T) return;
    const uint64_t step = s->tokens / 64 + 1; /* at most about 64 windows a split */
    for (uint64_t off = 0; off + (uint64_t)T <= s->tokens; off += step) {
        if (data_window(s, off, T, buf) != MP_OK) fail("a window inside the split did not read");
        /* a uint32 shard's token may pass INT_MAX: out holds its bits (the run refuses such a
         * vocabulary against model.vocab at start), so compared as unsigned */
        for (int i = 0; i < T; i++)
            if (ds->scanned && (unsigned)buf[i] > ds->max_token) fail("a token above the scan's largest");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/fuzz_shard.%ld.XXXXXX", (long)getpid());
        if (!mkdtemp(dir)) fail("mkdtemp");
        snprintf(shard, sizeof shard, "%s/train_000.bin", dir);
        atexit(remove_files);
    }
    FILE *f = fopen(shard, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) fail("cannot write the shard");
    dataset_t ds;
    const data_opts_t o = {.val_path = shard, .order = DATA_ORDER_RANDOM, .scan = 1};
    if (data_open(&ds, shard, &o) != MP_OK) return 0;
    if (size < 1024) fail("accepted a shard shorter than its header");
    for (int T = 1; T <= 64; T *= 4) {
        read_split(&ds, &ds.train, T);
        read_split(&ds, &ds.val, T);
        int inp[64], tgt[64];
        const long nv = data_val_windows(&ds, T);
        for (long w = 0; w < nv && w < 8; w++)
            if (data_val_sample(&ds, w, T, inp, tgt) != MP_OK) fail("a counted validation window did not read");
        (void)data_check_windows(&ds, T);
    }
    data_free(&ds);
    return 0;
}
