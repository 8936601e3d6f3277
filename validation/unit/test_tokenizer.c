/* Tokenizers (src/tok/tokenizer.c, bpe_gpt2.c, pretok_gpt2.c): GPT-2's pre-tokenizer on cases worked
 * out from its pattern (each also checked with node's RegExp, which runs the same pattern with the
 * same backtracking rules), the character classes at their edges and across Unicode versions, ids
 * of known texts as tiktoken gives them, decode(encode(x)) == x byte for byte (the adversarial
 * corpora, invalid UTF-8 included, random bytes, every pair of bytes), the bytes tokenizer, refusals
 * of missing and corrupt vocabulary files naming the file, and `prep`'s gpt2 token files.
 * validation/test_tokenizer.sh compares whole corpora with tiktoken itself.
 *
 * Needs GPT-2's encoder.json and vocab.bpe where tok_default_dir looks ($MINDPIPE_GPT2_DIR, else
 * ~/.cache/mindpipe/gpt2; bash .ci/deps.sh puts them there): without them, one failing line. */
#include <dirent.h>
#include <hdf5.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "data.h"
#include "pretok_gpt2.h"
#include "rng.h"
#include "tap.h"
#include "tok_files.h"
#include "tokenizer.h"
#include "unicode_gpt2.h"

static char tmpdir[] = "/tmp/test_tokenizer.XXXXXX";
#include "capture.h"

/* The whole of path (malloc'd), or NULL. */
static unsigned char *slurp(const char *path, size_t *n_p)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n + 16); /* room for an edit's few more bytes */
    *n_p = fread(buf, 1, (size_t)n, f);
    fclose(f);
    return buf;
}

static void spill(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
}

/* ---- the pre-tokenizer ---- */

static void test_pretok(void)
{
    static const struct {
        const char *text;
        const char *pieces[16]; /* NULL-ended */
    } cases[] = {
        {"Hello world", {"Hello", " world"}},
        {"I'm here", {"I", "'m", " here"}},
        {"I'M HERE", {"I", "'", "M", " HERE"}},
        {"they'll we've you're she'd it's don't",
         {"they", "'ll", " we", "'ve", " you", "'re", " she", "'d", " it", "'s", " don", "'t"}},
        {"'s's", {"'s", "'s"}},
        {"''s", {"''", "s"}},
        {" 's", {" '", "s"}},
        {"' s", {"'", " s"}},
        {"a'", {"a", "'"}},
        {"a  b", {"a", " ", " b"}},
        {"a   \n\nb", {"a", "   \n", "\n", "b"}},
        {"end   ", {"end", "   "}},
        {"x ", {"x", " "}},
        {"x\r\ny", {"x", "\r", "\n", "y"}},
        {"\t\tfoo", {"\t", "\t", "foo"}},
        {"  foo", {" ", " foo"}},
        {"123456 789", {"123456", " 789"}},
        {"abc123def", {"abc", "123", "def"}},
        {"hello!!! world?", {"hello", "!!!", " world", "?"}},
        {"x 1 ! \xc3\xa9", {"x", " 1", " !", " \xc3\xa9"}},
        {"e\xcc\x81", {"e", "\xcc\x81"}},                                  /* a combining mark is "other" */
        {"\xe4\xb8\xad\xe6\x96\x87 \xe5\xad\x97", {"\xe4\xb8\xad\xe6\x96\x87", " \xe5\xad\x97"}},
        {"\xc2\xa0\xc2\xa0x", {"\xc2\xa0", "\xc2\xa0", "x"}},               /* NBSP is white space */
        {"\xd9\xa3\xd9\xa4\xd9\xa5", {"\xd9\xa3\xd9\xa4\xd9\xa5"}},         /* Arabic-Indic digits */
        {"\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd\xf0\x9f\x91\x8d", {"\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd\xf0\x9f\x91\x8d"}},
        {"a\xff" "b", {"a", "\xff", "b"}},                                  /* an invalid byte is "other" */
        {" \xff\xfe!", {" \xff\xfe!"}},
        {"\xe4\xb8", {"\xe4\xb8"}},                                         /* a truncated sequence */
        {"\xed\xa0\x80x", {"\xed\xa0\x80", "x"}},                           /* a surrogate's bytes */
        {"\xc0\xaf" "a", {"\xc0\xaf", "a"}},                                /* an overlong form */
        {"'", {"'"}},
        {" ", {" "}},
        {"  ", {"  "}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const unsigned char *s = (const unsigned char *)cases[k].text;
        const size_t n = strlen(cases[k].text);
        size_t at = 0, i = 0;
        int same = 1;
        for (; at < n; i++) {
            const size_t len = pretok_gpt2_next(s + at, n - at);
            const char *want = cases[k].pieces[i];
            if (!want || len < 1 || len > n - at || strlen(want) != len || memcmp(want, s + at, len)) same = 0;
            if (!same) break;
            at += len;
        }
        tap_ok(same && !cases[k].pieces[i], "pieces of case %zu are GPT-2's (%zu of them)", k, i);
    }
}

static void test_classes(void)
{
    static const struct {
        uint32_t cp;
        int cls;
        const char *what;
    } cases[] = {
        {'A', UNI_LETTER, "A"}, {'z', UNI_LETTER, "z"}, {'0', UNI_NUMBER, "0"}, {' ', UNI_SPACE, "space"},
        {'\t', UNI_SPACE, "tab"}, {0x0b, UNI_SPACE, "vertical tab"}, {0x1c, UNI_OTHER, "file separator (Cc, not White_Space)"},
        {0x85, UNI_SPACE, "NEL"}, {0xa0, UNI_SPACE, "NBSP"}, {0xad, UNI_OTHER, "soft hyphen"},
        {0x200b, UNI_OTHER, "zero-width space (Cf)"}, {0xfeff, UNI_OTHER, "BOM (Cf)"}, {0x3000, UNI_SPACE, "ideographic space"},
        {0x2028, UNI_SPACE, "line separator"}, {0x301, UNI_OTHER, "combining acute"}, {0x4e00, UNI_LETTER, "CJK"},
        {0x663, UNI_NUMBER, "Arabic-Indic three"}, {0xbd, UNI_NUMBER, "one half (No)"}, {0x216b, UNI_NUMBER, "Roman twelve (Nl)"},
        {0x11f04, UNI_LETTER, "Kawi A (Unicode 15.0)"}, {0x105c0, UNI_LETTER, "Todhri A (Unicode 16.0)"},
        {0x10940, UNI_OTHER, "Sidetic (Unicode 17.0: not in tiktoken's tables)"}, {0x1f600, UNI_OTHER, "emoji"},
        {0x10ffff, UNI_OTHER, "U+10FFFF"}, {0x110000, UNI_OTHER, "beyond Unicode"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        tap_ok(pretok_class(cases[k].cp) == cases[k].cls, "U+%04X %s: class %d", (unsigned)cases[k].cp, cases[k].what,
               cases[k].cls);
    int sorted = 1;
    for (size_t i = 0; i < uni_gpt2_nranges; i++)
        if (uni_gpt2_ranges[i].lo > uni_gpt2_ranges[i].hi || (i && uni_gpt2_ranges[i].lo <= uni_gpt2_ranges[i - 1].hi)) sorted = 0;
    tap_ok(sorted && uni_gpt2_nranges > 500, "the %zu ranges are sorted and disjoint", uni_gpt2_nranges);
}

/* ---- GPT-2's BPE ---- */

/* encode(text) == want (n_want ids). */
static void expect_ids(const tokenizer_t *tok, const char *what, const char *text, const uint32_t *want, size_t n_want)
{
    const size_t n = strlen(text);
    uint32_t *ids = malloc((n + 1) * sizeof *ids);
    size_t got = 0;
    const int rc = tok_encode(tok, (const unsigned char *)text, n, ids, &got);
    tap_ok(rc == MP_OK && got == n_want && !memcmp(ids, want, n_want * sizeof *ids), "%s: %zu ids, tiktoken's", what, n_want);
    free(ids);
}

static void test_known_ids(const tokenizer_t *tok)
{
    /* from tiktoken 1.0.22, get_encoding("gpt2").encode_ordinary */
    expect_ids(tok, "Hello world", "Hello world", (const uint32_t[]){15496, 995}, 2);
    expect_ids(tok, "\" the\" is one token", " the", (const uint32_t[]){262}, 1);
    expect_ids(tok, "<|endoftext|> is plain text", "<|endoftext|>", (const uint32_t[]){27, 91, 437, 1659, 5239, 91, 29}, 7);
    expect_ids(tok, "I'M here", "I'M here", (const uint32_t[]){40, 6, 44, 994}, 4);
    expect_ids(tok, "NBSPs", "a\xc2\xa0\xc2\xa0" "b", (const uint32_t[]){64, 1849, 1849, 65}, 4);
    expect_ids(tok, "numbers", "1234567890 3.14159", (const uint32_t[]){10163, 2231, 30924, 3829, 513, 13, 1415, 19707}, 8);
    expect_ids(tok, "CJK", "\xe4\xb8\xad\xe6\x96\x87", (const uint32_t[]){40792, 23877, 229}, 3);
    expect_ids(tok, "white space before a word", "   \n\n  x", (const uint32_t[]){220, 220, 220, 628, 220, 2124}, 6);
    expect_ids(tok, "a family emoji (ZWJ)",
               "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7\xe2\x80\x8d\xf0\x9f\x91\xa6",
               (const uint32_t[]){41840, 101, 447, 235, 41840, 102, 447, 235, 41840, 100, 447, 235, 41840, 99}, 14);
    char as[101];
    memset(as, 'a', 100);
    as[100] = 0;
    uint32_t a25[25];
    for (int i = 0; i < 25; i++) a25[i] = 24794;
    expect_ids(tok, "100 a's (a long piece: the heap's merges)", as, a25, 25);
}

/* decode(encode(data)) == data. */
static int roundtrip(const tokenizer_t *tok, const unsigned char *data, size_t n, size_t *n_ids_p)
{
    uint32_t *ids = malloc((n + 1) * sizeof *ids);
    int *wide = malloc((n + 1) * sizeof *wide);
    unsigned char *back = NULL;
    size_t m = 0, n_back = 0;
    int same = tok_encode(tok, data, n, ids, &m) == MP_OK;
    for (size_t i = 0; same && i < m; i++) wide[i] = ids[i];
    same = same && tok_decode(tok, wide, m, &back, &n_back) == MP_OK && n_back == n && !memcmp(back, data, n);
    if (n_ids_p) *n_ids_p = m;
    free(back);
    free(wide);
    free(ids);
    return same;
}

static void test_roundtrip(const tokenizer_t *tok)
{
    const char *src = getenv("MP_SRCDIR") ? getenv("MP_SRCDIR") : MP_SRCDIR_DEFAULT;
    static const char *const corpora[] = {"adversarial.txt", "adversarial_invalid.bin"};
    for (size_t k = 0; k < 2; k++) {
        char path[4096];
        size_t n = 0, m = 0;
        snprintf(path, sizeof path, "%s/validation/tokenizer/%s", src, corpora[k]);
        unsigned char *data = slurp(path, &n);
        const int same = data && n > 1000 && roundtrip(tok, data, n, &m);
        tap_ok(same, "decode(encode(%s)) is its %zu bytes (%zu ids)", corpora[k], n, m);
        free(data);
    }
    const size_t n = 1 << 20;
    unsigned char *noise = malloc(n);
    for (size_t i = 0; i < n; i++) noise[i] = (unsigned char)(rng_key(34, 1, i / 8, 0) >> (8 * (i % 8)));
    size_t m = 0;
    const int same = roundtrip(tok, noise, n, &m);
    tap_ok(same, "decode(encode(x)) is x for 1 MiB of random bytes (%zu ids)", m);
    free(noise);
    int all = 1;
    for (int a = 0; a < 256; a++)
        for (int b = 0; b < 256; b++) all &= roundtrip(tok, (const unsigned char[]){(unsigned char)a, (unsigned char)b}, 2, NULL);
    tap_ok(all, "decode(encode(x)) is x for each of the 65536 two-byte strings");
}

static void test_decode(const tokenizer_t *tok)
{
    size_t n = 0;
    const unsigned char *b = tok_token_bytes(tok, 50256, &n);
    tap_ok(b && n == 13 && !memcmp(b, "<|endoftext|>", 13), "token 50256 decodes to <|endoftext|>");
    b = tok_token_bytes(tok, 15496, &n);
    tap_ok(b && n == 5 && !memcmp(b, "Hello", 5), "token 15496 is Hello");
    tap_ok(!tok_token_bytes(tok, 50257, &n) && !tok_token_bytes(tok, -1, &n), "ids -1 and 50257 have no bytes");
    unsigned char *out = NULL;
    capture_begin();
    int rc = tok_decode(tok, (const int[]){15496, 995, 50257}, 3, &out, &n);
    capture_end();
    show_errtext();
    tap_ok(rc == MP_ERR && strstr(errtext, "id 50257 at index 2"), "decoding id 50257 is refused, naming it and its index");
    rc = tok_decode(tok, (const int[]){15496, 995}, 2, &out, &n);
    tap_ok(rc == MP_OK && n == 11 && !strcmp((char *)out, "Hello world"), "decode(15496, 995) is \"Hello world\", NUL-ended");
    free(out);
}

/* ---- refusals ---- */

/* Copies of GPT-2's files in tmpdir/name, encoder.json changed by enc_edit and vocab.bpe by voc_edit
 * (each may be NULL: copied as it is; or drop the file). */
typedef void (*edit_fn)(unsigned char *buf, size_t *n);

static void make_dir(const char *gpt2_dir, const char *name, edit_fn enc_edit, edit_fn voc_edit, int drop_enc, int drop_voc)
{
    static const char *const files[2] = {"encoder.json", "vocab.bpe"};
    const edit_fn edits[2] = {enc_edit, voc_edit};
    const int drops[2] = {drop_enc, drop_voc};
    char dir[1024], path[2048];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
    mkdir(dir, 0700);
    for (int k = 0; k < 2; k++) {
        if (drops[k]) continue;
        size_t n = 0;
        snprintf(path, sizeof path, "%s/%s", gpt2_dir, files[k]);
        unsigned char *buf = slurp(path, &n);
        if (!buf) continue;
        if (edits[k]) edits[k](buf, &n);
        snprintf(path, sizeof path, "%s/%s", dir, files[k]);
        spill(path, buf, n);
        free(buf);
    }
}

static void cut_1000(unsigned char *buf, size_t *n) { (void)buf, *n = 1000; }
static void cut_half_lines(unsigned char *buf, size_t *n) /* vocab.bpe ending after a whole line, half its merges */
{
    size_t at = *n / 2;
    while (buf[at - 1] != '\n') at--;
    *n = at;
}
static void dup_id(unsigned char *buf, size_t *n) /* "\"": 1 becomes "\"": 0, the id of "!" */
{
    (void)n;
    char *p = strstr((char *)buf, "\"\\\"\": 1,");
    if (p) p[6] = '0';
}
static void swap_lines(unsigned char *buf, size_t *n) /* merges 0 and 1 trade places */
{
    (void)n;
    char *l1 = strchr((char *)buf, '\n') + 1, *l2 = strchr(l1, '\n') + 1, *l3 = strchr(l2, '\n') + 1;
    char a[64], b[64];
    const size_t na = (size_t)(l2 - l1), nb = (size_t)(l3 - l2);
    memcpy(a, l1, na), memcpy(b, l2, nb);
    memcpy(l1, b, nb), memcpy(l1 + nb, a, na);
}
static void bad_char(unsigned char *buf, size_t *n) /* a raw space inside a token: it stands for no byte */
{
    (void)n;
    char *p = strstr((char *)buf, "\"Hello\"");
    if (p) p[3] = ' ';
}

static void pad_space(unsigned char *buf, size_t *n) /* "{ " for "{": the same vocabulary, another file */
{
    memmove(buf + 1, buf, *n);
    buf[0] = '{', buf[1] = ' ', ++*n;
}

static void expect_open_refused(const char *what, const char *name, const char *want1, const char *want2)
{
    tokenizer_t t;
    capture_begin();
    int rc = tok_open(&t, TOK_GPT2, tpath(name));
    capture_end();
    show_errtext();
    tap_ok(rc == MP_ERR && strstr(errtext, want1) && strstr(errtext, want2), "%s: refused, naming %s and \"%s\"", what,
           want1, want2);
    if (rc == MP_OK) tok_close(&t);
}

static void test_refusals(const char *gpt2_dir)
{
    make_dir(gpt2_dir, "empty", NULL, NULL, 1, 1);
    expect_open_refused("an empty directory", "empty", "empty/encoder.json", "No such file");
    make_dir(gpt2_dir, "novocab", NULL, NULL, 0, 1);
    expect_open_refused("vocab.bpe missing", "novocab", "novocab/vocab.bpe", "No such file");
    make_dir(gpt2_dir, "cutenc", cut_1000, NULL, 0, 0);
    expect_open_refused("encoder.json cut at 1000 bytes", "cutenc", "cutenc/encoder.json", "byte 1000");
    make_dir(gpt2_dir, "dupid", dup_id, NULL, 0, 0);
    expect_open_refused("encoder.json giving id 0 twice", "dupid", "dupid/encoder.json", "an id given twice");
    make_dir(gpt2_dir, "badchar", bad_char, NULL, 0, 0);
    expect_open_refused("encoder.json with a raw space in a token", "badchar", "badchar/encoder.json", "stands for no byte");
    make_dir(gpt2_dir, "swapped", NULL, swap_lines, 0, 0);
    expect_open_refused("vocab.bpe with two merges swapped", "swapped", "swapped/vocab.bpe", "line 2: merge 0 makes token 257");
    make_dir(gpt2_dir, "halfbpe", NULL, cut_half_lines, 0, 0);
    expect_open_refused("vocab.bpe with half its merges", "halfbpe", "halfbpe/vocab.bpe", "is made by no merge");
    tap_ok(!strstr(errtext, "warning"), "... with no warning before the error");
    make_dir(gpt2_dir, "padded", pad_space, NULL, 0, 0);
    tokenizer_t t;
    capture_begin();
    int rc = tok_open(&t, TOK_GPT2, tpath("padded"));
    capture_end();
    show_errtext();
    tap_ok(rc == MP_OK && strstr(errtext, "padded/encoder.json is not GPT-2's published file") &&
               strcmp(tok_digest(&t), "00f404d36600411e497efb3df08d3b4e094f0820e2595afcb7cbd0c4353d4fcb"),
           "encoder.json reformatted: read, with a warning naming it, and another digest");
    if (rc == MP_OK) tok_close(&t);
    tok_kind_t kind;
    capture_begin();
    rc = tok_kind_parse("gpt3", &kind);
    capture_end();
    tap_ok(rc == MP_ERR && strstr(errtext, "bytes, gpt2, sp or hf:DIR"), "--tokenizer gpt3 is refused, naming the choices");
}

/* ---- the bytes tokenizer, prep ---- */

static void test_bytes(void)
{
    tokenizer_t t;
    const unsigned char text[] = "a\xff\0z";
    uint32_t ids[4];
    size_t n = 0;
    int ok = tok_open(&t, TOK_BYTES, NULL) == MP_OK && tok_encode(&t, text, 4, ids, &n) == MP_OK && n == 4 &&
             ids[0] == 'a' && ids[1] == 0xff && ids[2] == 0 && ids[3] == 'z';
    tap_ok(ok && !strcmp(tok_name(&t), "byte") && tok_vocab(&t) == 256 && !tok_digest(&t),
           "bytes: each byte its token; tokenizer byte, vocab 256, no digest");
    tap_ok(roundtrip(&t, text, 4, NULL), "bytes: decode(encode(x)) is x");
    tok_close(&t);
}

static const char *read_attr_string(const char *path, const char *name)
{
    static char text[256];
    text[0] = 0;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    hid_t t = H5Aget_type(a);
    size_t size = H5Tget_size(t);
    if (size < sizeof text) {
        H5Aread(a, t, text);
        text[size] = 0;
    }
    H5Tclose(t);
    H5Aclose(a);
    H5Fclose(f);
    return text;
}

static void test_prep(const tokenizer_t *tok)
{
    const char *text = "In the beginning God created the heaven and the earth. \xe2\x80\x9cLet there be light\xe2\x80\x9d";
    spill(tpath("gen.txt"), text, strlen(text));
    uint32_t ids[128];
    size_t n = 0;
    tok_encode(tok, (const unsigned char *)text, strlen(text), ids, &n);
    dataset_t ds;
    int ok = data_prep_tokenized(tpath("gen.txt"), tpath("gen.h5"), 0.1, tok) == MP_OK && data_load(&ds, tpath("gen.h5")) == MP_OK;
    int got[128] = {0}, same = ok && ds.n_train + ds.n_val == n && n <= 128 &&
                                 data_window(&ds.train, 0, (int)ds.n_train, got) == MP_OK &&
                                 data_window(&ds.val, 0, (int)ds.n_val, got + ds.n_train) == MP_OK;
    for (size_t i = 0; same && i < n; i++) same &= (uint32_t)got[i] == ids[i];
    tap_ok(ok && ds.vocab == 50257 && same,
           "prep --tokenizer gpt2: /train then /val are the text's %zu ids, vocab 50257", n);
    if (ok) data_free(&ds);
    tap_ok(!strcmp(read_attr_string(tpath("gen.h5"), "tokenizer"), "gpt2"), "attribute tokenizer = gpt2");
    tap_ok(!strcmp(read_attr_string(tpath("gen.h5"), "tokenizer_sha256"), tok_digest(tok)),
           "attribute tokenizer_sha256 = the vocabulary's digest");
    spill(tpath("one.txt"), "Hello", 5);
    capture_begin();
    int rc = data_prep_tokenized(tpath("one.txt"), tpath("one.h5"), 0.1, tok);
    capture_end();
    tap_ok(rc == MP_ERR && strstr(errtext, "one.txt makes one gpt2 token") && access(tpath("one.h5"), F_OK) != 0,
           "a text of one gpt2 token (Hello) is refused, naming it; no file written");
}

/* ---- identities: what token files and checkpoints record ---- */

/* A token file as `prep` wrote it before tokenizers: a vocab attribute and nothing else. */
static void write_old_file(const char *path)
{
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, "vocab", H5T_STD_I32LE, s, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT, &(int){256});
    H5Aclose(a), H5Sclose(s), H5Fclose(f);
}

/* After test_prep (gen.h5) and test_refusals (the directory "padded": another digest). */
static void test_idents(const tokenizer_t *tok)
{
    tok_ident_t id, mine, byte;
    char why[200], text[120];
    int vocab = 0;
    tok_ident_of(tok, &mine);
    tap_ok(tok_of_data_file(tpath("gen.h5"), &id, &vocab) == MP_OK && tok_ident_same(&id, &mine) && vocab == 50257 &&
               !strcmp(tok_ident_text(&id, text, sizeof text), "gpt2 (tokenizer_sha256 00f404d36600411e497efb3df08d3b4e094f0820e2595afcb7cbd0c4353d4fcb)"),
           "a gpt2 token file: %s, vocab 50257", text);
    write_old_file(tpath("old.h5"));
    tap_ok(tok_of_data_file(tpath("old.h5"), &byte, &vocab) == MP_OK && !strcmp(byte.name, "byte") && !byte.sha256[0] &&
               vocab == 256 && !tok_ident_same(&byte, &mine),
           "a token file from before tokenizers (no attribute tokenizer) is byte, vocab 256");
    static const struct {
        const char *name, *sha, *want;
    } bad[] = {{"gpt3", NULL, "knows \"byte\", \"gpt2\", \"sp\", \"hf\" and \"none\""},
               {"gpt2", NULL, "without tokenizer_sha256"},
               {"byte", "00f404d36600411e497efb3df08d3b4e094f0820e2595afcb7cbd0c4353d4fcb", "has no files"},
               {"gpt2", "00F404D36600411E497EFB3DF08D3B4E094F0820E2595AFCB7CBD0C4353D4FCB", "not 64 lowercase hex"},
               {"gpt2", "00f404", "not 64 lowercase hex"}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        why[0] = 0;
        tap_ok(tok_ident_set(&id, bad[k].name, bad[k].sha, why, sizeof why) == MP_ERR && strstr(why, bad[k].want),
               "identity %s / %.8s refused: %s", bad[k].name, bad[k].sha ? bad[k].sha : "(none)", why);
    }
    tokenizer_t t;
    capture_begin();
    int rc = tok_open_ident(&t, &mine, tpath("padded"), "CK.h5");
    capture_end();
    tap_ok(rc == MP_ERR && strstr(errtext, "CK.h5") && strstr(errtext, mine.sha256) && strstr(errtext, "padded"),
           "a vocabulary of another digest is refused, naming the checkpoint, the directory and both digests");
    rc = tok_open_ident(&t, &byte, "/nonexistent", "CK.h5");
    tap_ok(rc == MP_OK && t.kind == TOK_BYTES, "a byte identity opens the bytes tokenizer (no files read)");
    if (rc == MP_OK) tok_close(&t);
}

static void cleanup(const char *dir)
{
    DIR *dh = opendir(dir);
    char path[2048];
    for (struct dirent *e; dh && (e = readdir(dh));) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) != 0) cleanup(path);
    }
    if (dh) closedir(dh);
    rmdir(dir);
}

int main(void)
{
    MPI_Init(NULL, NULL);
    if (!mkdtemp(tmpdir)) return perror("mkdtemp"), 1;
    test_pretok();
    test_classes();
    test_bytes();
    char dir[4096];
    tokenizer_t tok;
    capture_begin();
    int rc = tok_default_dir(dir, sizeof dir) == MP_OK ? tok_open(&tok, TOK_GPT2, NULL) : MP_ERR;
    capture_end();
    show_errtext();
    if (tap_ok(rc == MP_OK, "GPT-2's vocabulary loads from %s (bash .ci/deps.sh fetches it)", dir)) {
        tap_ok(tok_vocab(&tok) == 50257 && !strcmp(tok_name(&tok), "gpt2"), "gpt2: vocab 50257, tokenizer gpt2");
        tap_ok(!strcmp(tok_digest(&tok), "00f404d36600411e497efb3df08d3b4e094f0820e2595afcb7cbd0c4353d4fcb"),
               "its digest is sha256sum of encoder.json then vocab.bpe (00f404d3...)");
        test_known_ids(&tok);
        test_roundtrip(&tok);
        test_decode(&tok);
        test_prep(&tok);
        test_refusals(dir);
        test_idents(&tok);
        tok_close(&tok);
    }
    cleanup(tmpdir);
    MPI_Finalize();
    return tap_done();
}
