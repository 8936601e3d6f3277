/* The SentencePiece tokenizer (src/tok/tok_sp.c through sp_shim.cc): trained on a text made here (the
 * same every run), unigram and bpe, it has the vocabulary asked for, its ids decode back to the text
 * byte for byte (tabs, runs of spaces, UTF-8 and a byte it has no piece for included), two trainings
 * give the same model bytes, the model rebuilt from its bytes gives the same ids, and refusals name
 * what they refuse: a vocabulary outside [260, 65536], a corrupt model file, text holding U+2581.
 * A build without SentencePiece fails here (CI installs it: this test must not pass without it). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "tap.h"
#include "tokenizer.h"

static char tmpdir[] = "/tmp/test_tok_sp.XXXXXX";
#include "capture.h"

/* The training text: sentences from a fixed pseudo-random walk over a few words, one per line, with
 * the awkward cases at the end; written to tpath("text.txt"). Its length in *n_p. */
static unsigned char *make_text(size_t *n_p)
{
    static const char *const words[] = {"the", "LORD", "said", "unto", "Moses", "and", "of", "in", "land",
                                        "Egypt", "children", "Israel", "for", "ever", "caf\xc3\xa9", "na\xc3\xafve"};
    size_t cap = 1 << 20, n = 0;
    unsigned char *t = malloc(cap);
    unsigned x = 12345;
    for (int line = 0; line < 3000; line++) {
        for (int w = 0; w < 12; w++) {
            x = x * 1103515245u + 12345u;
            n += (size_t)snprintf((char *)t + n, cap - n, "%s%s", w ? " " : "", words[(x >> 16) % 16]);
        }
        n += (size_t)snprintf((char *)t + n, cap - n, "%s\n", line % 7 ? "." : ",  \tand so on");
    }
    /* a character no piece covers (byte fallback), an emoji, an empty line, no final newline */
    n += (size_t)snprintf((char *)t + n, cap - n, "\x01 odd \xf0\x9f\x98\x80\n\nend");
    FILE *f = fopen(tpath("text.txt"), "wb");
    fwrite(t, 1, n, f);
    fclose(f);
    *n_p = n;
    return t;
}

/* Trains a model_type model of vocab pieces on text.txt and checks it on text[0..n). */
static void check_model(const char *model_type, const unsigned char *text, size_t n)
{
    tok_sp_t *a, *b, *c;
    int ok = tok_sp_train(&a, tpath("text.txt"), 300, model_type) == MP_OK;
    tap_ok(ok, "%s: trained, 300 pieces", model_type);
    if (!ok) return;
    tap_ok(tok_sp_vocab(a) == 300, "%s: vocab %d", model_type, tok_sp_vocab(a));
    size_t na, nb, n_ids, n_out;
    ok = tok_sp_train(&b, tpath("text.txt"), 300, model_type) == MP_OK;
    const unsigned char *ma = tok_sp_model(a, &na), *mb = ok ? tok_sp_model(b, &nb) : NULL;
    tap_ok(ok && na == nb && !memcmp(ma, mb, na) && !strcmp(tok_sp_digest(a), tok_sp_digest(b)),
           "%s: a second training gives the same %zu model bytes (sha256 %.16s...)", model_type, na, tok_sp_digest(a));
    if (ok) tok_sp_free(b);

    tokenizer_t tok = tok_from_sp(a);
    uint32_t *ids = malloc(n * sizeof *ids), *ids2 = malloc(n * sizeof *ids2);
    int *wide = malloc(n * sizeof *wide);
    unsigned char *out = NULL;
    ok = tok_encode(&tok, text, n, ids, &n_ids) == MP_OK;
    tap_ok(ok && n_ids < n, "%s: %zu bytes make %zu ids (fewer: pieces longer than a byte)", model_type, n, n_ids);
    for (size_t i = 0; ok && i < n_ids; i++) wide[i] = ids[i];
    ok = ok && tok_decode(&tok, wide, n_ids, &out, &n_out) == MP_OK;
    tap_ok(ok && n_out == n && !memcmp(out, text, n), "%s: the ids decode back to the text byte for byte",
           model_type);
    free(out);

    const unsigned char *model = tok_sp_model(a, &na);
    ok = tok_sp_load_bytes(&c, model, na, "test bytes") == MP_OK;
    size_t n_ids2 = 0;
    ok = ok && tok_sp_encode(c, text, n, ids2, &n_ids2) == MP_OK;
    tap_ok(ok && n_ids2 == n_ids && !memcmp(ids, ids2, n_ids * sizeof *ids),
           "%s: the model rebuilt from its bytes gives the same ids", model_type);
    if (ok) tok_sp_free(c);

    capture_begin();
    static const unsigned char mark[] = "a \xe2\x96\x81 b";
    int rc = tok_encode(&tok, mark, sizeof mark - 1, ids, &n_ids);
    capture_end();
    tap_ok(rc == MP_ERR && strstr(errtext, "at byte 2") && strstr(errtext, "U+2581"),
           "%s: text holding U+2581 is refused, naming the byte", model_type);
    show_errtext();
    tok_close(&tok);
    free(ids);
    free(ids2);
    free(wide);
}

static void check_refusals(void)
{
    tok_sp_t *sp;
    capture_begin();
    int rc = tok_sp_train(&sp, tpath("text.txt"), 65537, "unigram");
    capture_end();
    tap_ok(rc == MP_ERR && strstr(errtext, "65536") && strstr(errtext, "uint16"), "vocab 65537 refused naming the limit");
    show_errtext();
    capture_begin();
    rc = tok_sp_train(&sp, tpath("text.txt"), 259, "unigram");
    capture_end();
    tap_ok(rc == MP_ERR && strstr(errtext, "260"), "vocab 259 refused naming the least");
    show_errtext();
    FILE *f = fopen(tpath("bad.model"), "wb");
    fputs("not a model at all", f);
    fclose(f);
    capture_begin();
    rc = tok_sp_load_file(&sp, tpath("bad.model"));
    capture_end();
    tap_ok(rc == MP_ERR && strstr(errtext, tpath("bad.model")) && strstr(errtext, "not a SentencePiece model"),
           "a corrupt model file refused, naming the file");
    show_errtext();
    capture_begin();
    rc = tok_sp_load_file(&sp, tpath("missing.model"));
    capture_end();
    tap_ok(rc == MP_ERR && strstr(errtext, tpath("missing.model")), "a missing model file refused, naming it");
    show_errtext();
}

int main(void)
{
    if (!mkdtemp(tmpdir)) return perror("mkdtemp"), 1;
    if (!tap_ok(tok_sp_available(), "this build has SentencePiece (configure found libsentencepiece-dev)"))
        return tap_done();
    size_t n;
    unsigned char *text = make_text(&n);
    check_model("unigram", text, n);
    check_model("bpe", text, n);
    check_refusals();
    free(text);
    return tap_done();
}
