/* libFuzzer harness for Hugging Face's config.json reader (src/hf/hf_gpt2.c), which --init-from hf:
 * runs on files from the internet: the input is config.json's bytes, beside a genuine
 * model.safetensors of a tiny model (L 1, C 8, NH 2, T 4, V 16) written once by hf_gpt2_write. The
 * reader must refuse what Python's json would not read the same way (issue 45 item 4) and any
 * disagreement with the deck's model; where it accepts, this harness asserts:
 *   - the input is a JSON text's bytes: at most 1 MiB, UTF-8 with no raw control character but
 *     white space (an accepted NUL or stray byte means the reader skipped what it never parsed);
 *   - the accepted config pins the model: a deck of NH 4, which the weights' shapes cannot tell
 *     from NH 2, is refused (a reader that lost n_head, to a key given twice or a parse that
 *     dropped it, would take it);
 *   - hf_gpt2_load then gives the written weights bitwise.
 * Nothing may be read beyond the input (ASan).
 *
 * Build and run: bash validation/fuzz/run.sh SECONDS build fuzz_hfconfig (seeds: corpus_hfconfig/). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "hf_gpt2.h"
#include "params.h"

static char dir[64], cfg_path[128], st_path[128];
static param_table_t tab, tab_h4; /* the model written, and one that differs in n_head alone */
static float *genuine, *loaded;

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_hfconfig: %s\n", what);
    abort();
}

static void remove_dir(void)
{
    unlink(cfg_path);
    unlink(st_path);
    rmdir(dir);
}

static void setup(void)
{
    model_cfg_t c = {.layers = 1, .dim = 8, .heads = 2, .seq_len = 4, .vocab = 16, .mlp_ratio = 4};
    snprintf(dir, sizeof dir, "/tmp/fuzz_hf.%ld.XXXXXX", (long)getpid());
    if (!mkdtemp(dir)) fail("mkdtemp");
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
    snprintf(st_path, sizeof st_path, "%s/model.safetensors", dir);
    atexit(remove_dir);
    if (param_table_build(&tab, &c, 0, c.layers, 1, 1, 1, 0) != MP_OK) fail("param_table_build");
    c.heads = 4;
    if (param_table_build(&tab_h4, &c, 0, c.layers, 1, 1, 1, 0) != MP_OK) fail("param_table_build (NH 4)");
    genuine = malloc(tab.total * sizeof *genuine);
    loaded = malloc(tab.total * sizeof *loaded);
    if (!genuine || !loaded) fail("out of memory");
    param_init(&tab, genuine, 7);
    if (hf_gpt2_write(dir, &tab, genuine) != MP_OK) fail("hf_gpt2_write");
}

/* Whether s[0..n) is UTF-8 (RFC 3629) whose only bytes below 0x20 are JSON's white space. */
static int json_bytes(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        const unsigned c = s[i];
        if (c < 0x20 && c != ' ' && c != '\t' && c != '\n' && c != '\r') return 0;
        if (c < 0x80) {
            i++;
            continue;
        }
        const size_t k = c >= 0xc2 && c <= 0xdf ? 1 : c >= 0xe0 && c <= 0xef ? 2 : c >= 0xf0 && c <= 0xf4 ? 3 : 0;
        if (!k || k > n - i - 1) return 0;
        uint32_t cp = c & (0x3fu >> k);
        for (size_t m = 1; m <= k; m++) {
            if ((s[i + m] & 0xc0) != 0x80) return 0;
            cp = cp << 6 | (s[i + m] & 0x3f);
        }
        if ((k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += k + 1;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0]) setup();
    FILE *f = fopen(cfg_path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) fail("cannot write the input file");
    if (hf_gpt2_check(dir, &tab) != MP_OK) return 0;
    if (size > (1u << 20)) fail("accepted: a config.json over 1 MiB");
    if (!json_bytes(data, size)) fail("accepted: bytes that are not UTF-8 JSON text (a NUL, a control byte, bad UTF-8)");
    if (hf_gpt2_check(dir, &tab_h4) == MP_OK) fail("accepted for NH 2 and for NH 4: the reader lost n_head");
    memset(loaded, 0xff, tab.total * sizeof *loaded);
    if (hf_gpt2_load(dir, &tab, &tab, loaded) != MP_OK) fail("accepted, but hf_gpt2_load failed");
    if (memcmp(loaded, genuine, tab.total * sizeof *loaded)) fail("accepted: the loaded weights are not the written ones");
    return 0;
}
