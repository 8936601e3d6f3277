/* `mindpipe export --format hf` (hf_export.h): a plain model's checkpoint as Hugging Face's
 * GPT2LMHeadModel with its tokenizer files, beside the formats it writes (hf_gpt2.c). */
#include "hf_export.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "ckpt.h"
#include "ckpt_files.h"
#include "deck_model.h"
#include "hf_gpt2.h"
#include "hf_llama.h"
#include "publish.h"
#include "sha256.h"
#include "tok_files.h"
#include "tokenizer.h"

/* ---- --format hf: the tokenizer files beside the weights ------------------------------------------ */

/* The bytes an export writes as tokenizer files, held in memory: read and checked before any file is
 * written, so a missing or different vocabulary leaves the directory untouched. */
typedef struct {
    tok_ident_t ident;
    unsigned char *enc, *voc; /* gpt2: encoder.json and vocab.bpe, as they are */
    size_t n_enc, n_voc;
    unsigned char *model;     /* sp: the SentencePiece model */
    size_t n_model;
    unsigned char *json, *config; /* hf: tokenizer.json and (NULL: none stored) tokenizer_config.json */
    size_t n_json, n_config;
} hf_tok_t;

static void hf_tok_free(hf_tok_t *t)
{
    free(t->enc), free(t->voc), free(t->model), free(t->json), free(t->config);
    t->enc = t->voc = t->model = t->json = t->config = NULL;
}

/* The whole of dir/name into a malloc'd buffer, its bytes added to sum. */
static int hf_tok_slurp(const char *dir, const char *name, sha256_t *sum, unsigned char **buf_p, size_t *n_p)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return MP_FAIL("cannot open GPT-2 vocabulary file %s: %s", path, strerror(errno));
    size_t cap = 1 << 20, n = 0, got;
    unsigned char *buf = MP_MALLOC(cap);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            unsigned char *grown = realloc(buf, cap *= 2);
            if (!grown) free(buf);
            buf = grown;
        }
    }
    const int bad = !buf || ferror(f);
    fclose(f);
    if (bad) return free(buf), MP_FAIL("cannot read GPT-2 vocabulary file %s", path);
    sha256_update(sum, buf, n);
    *buf_p = buf, *n_p = n;
    return MP_OK;
}

/* The tokenizer of checkpoint ckpt, as files to write: gpt2's two vocabulary files from dir (NULL:
 * tok_default_dir), sp's model or hf's tokenizer.json and tokenizer_config.json (from dir, else the
 * token file the deck's data.path names), nothing for byte and none. The vocabulary is opened with tok_open_ident (which refuses another digest); the bytes
 * copied are hashed again, because the files are read a second time and could have changed since. */
static int hf_tok_read(const char *ckpt, const char *dir, hf_tok_t *t)
{
    ckpt_head_info_t h;
    char why[600], def[4096];
    if (ckpt_file_head(ckpt, &h, why, sizeof why) != MP_OK) return MP_FAIL("%s: %s", ckpt, why);
    t->ident = h.tok;
    ckpt_file_head_free(&h);
    const int gpt2 = !strcmp(t->ident.name, "gpt2"), sp = !strcmp(t->ident.name, "sp"), hf = !strcmp(t->ident.name, "hf");
    if (!gpt2 && !sp && !hf) return MP_OK;
    tokenizer_t tok;
    if (gpt2 && !dir) {
        if (tok_default_dir(def, sizeof def) != MP_OK) return MP_ERR;
        dir = def;
    }
    if ((gpt2 ? tok_open_ident(&tok, &t->ident, dir, ckpt) : ckpt_file_tokenizer(ckpt, dir, &tok)) != MP_OK)
        return MP_FAIL("export --format hf of %s: its tokenizer (%s) is needed beside the weights", ckpt,
                       t->ident.name);
    sha256_t sum;
    sha256_init(&sum);
    int rc = MP_OK;
    if (hf) { /* the digest is tokenizer.json's; tokenizer_config.json rides along */
        const unsigned char *m = tok_model(&tok, &t->n_json), *c = tok_hf_config(tok.hf, &t->n_config);
        if (!m || !(t->json = MP_MALLOC(t->n_json ? t->n_json : 1)) || (c && !(t->config = MP_MALLOC(t->n_config ? t->n_config : 1))))
            rc = MP_FAIL("%s: no tokenizer.json bytes", ckpt);
        else {
            memcpy(t->json, m, t->n_json), sha256_update(&sum, t->json, t->n_json);
            if (c) memcpy(t->config, c, t->n_config);
        }
    } else if (sp) {
        const unsigned char *m = tok_model(&tok, &t->n_model);
        if (!m || !(t->model = MP_MALLOC(t->n_model ? t->n_model : 1))) rc = MP_FAIL("%s: no sp model bytes", ckpt);
        else memcpy(t->model, m, t->n_model), sha256_update(&sum, t->model, t->n_model);
    } else if (hf_tok_slurp(dir, "encoder.json", &sum, &t->enc, &t->n_enc) != MP_OK ||
               hf_tok_slurp(dir, "vocab.bpe", &sum, &t->voc, &t->n_voc) != MP_OK) {
        rc = MP_ERR;
    }
    tok_close(&tok);
    unsigned char raw[SHA256_BYTES];
    char hex[SHA256_HEX];
    sha256_final(&sum, raw, hex);
    if (rc == MP_OK && strcmp(hex, t->ident.sha256))
        rc = MP_FAIL("export --format hf of %s: the %s tokenizer's bytes copied have SHA-256 %s, the checkpoint's "
                     "tokenizer_sha256 is %s (the files in %s changed while they were read?)", ckpt, t->ident.name,
                     hex, t->ident.sha256, gpt2 ? dir : "the token file");
    if (rc != MP_OK) hf_tok_free(t);
    return rc;
}

/* n bytes to dir/name, atomically (publish.h). */
static int hf_tok_put(const char *dir, const char *name, const unsigned char *buf, size_t n)
{
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (publish_tmp_name_pid(path, tmp, sizeof tmp) != MP_OK || publish_tmp_prepare(tmp) != MP_OK) return MP_ERR;
    FILE *f = publish_tmp_fopen(tmp);
    if (!f) return MP_FAIL("cannot create %s: %s", tmp, strerror(errno));
    int rc = fwrite(buf, 1, n, f) == n && fflush(f) == 0 ? MP_OK : MP_FAIL("cannot write %s: %s", tmp, strerror(errno));
    if (fclose(f) != 0 && rc == MP_OK) rc = MP_FAIL("cannot write %s: %s", tmp, strerror(errno));
    if (rc != MP_OK) return publish_discard(tmp), MP_ERR;
    return publish_commit(tmp, path);
}

/* The tokenizer files of t into dir; those of another tokenizer, left by an earlier export into the same
 * directory, removed: a loader would otherwise pair these weights with a vocabulary they never saw. */
static int hf_tok_write(const char *dir, const hf_tok_t *t, int seq_len)
{
    static const char *const names[] = {"vocab.json", "merges.txt", "tokenizer_config.json", "tokenizer.model",
                                        "tokenizer.json"};
    const int keep[] = {t->enc != NULL, t->enc != NULL, t->enc || t->config, t->model != NULL, t->json != NULL};
    char path[4200], text[1024];
    int rc = MP_OK;
    if (t->enc) {
        snprintf(text, sizeof text,
                 "{\n  \"tokenizer_class\": \"GPT2Tokenizer\",\n  \"model_max_length\": %d,\n"
                 "  \"bos_token\": \"<|endoftext|>\",\n  \"eos_token\": \"<|endoftext|>\",\n"
                 "  \"unk_token\": \"<|endoftext|>\",\n  \"add_prefix_space\": false,\n  \"errors\": \"replace\"\n}\n",
                 seq_len);
        snprintf(path, sizeof path, "%s/%s", dir, names[2]);
        if (hf_tok_put(dir, names[0], t->enc, t->n_enc) != MP_OK ||
            hf_tok_put(dir, names[1], t->voc, t->n_voc) != MP_OK || publish_text(path, text) != MP_OK)
            return MP_ERR;
    }
    if (t->model && hf_tok_put(dir, names[3], t->model, t->n_model) != MP_OK) return MP_ERR;
    if (t->json && (hf_tok_put(dir, names[4], t->json, t->n_json) != MP_OK ||
                    (t->config && hf_tok_put(dir, names[2], t->config, t->n_config) != MP_OK)))
        return MP_ERR;
    for (int i = 0; i < 5 && rc == MP_OK; i++) {
        if (keep[i]) continue;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (unlink(path) != 0 && errno != ENOENT)
            rc = MP_FAIL("cannot remove %s (an earlier export's tokenizer file): %s", path, strerror(errno));
    }
    return rc;
}

int export_hf_main(const run_opts_t *opts, const char *ckpt, const char *tokenizer_dir, const char *out, int bf16,
                   uint64_t shard_bytes)
{
    deck_t d;
    if (deck_load_model(&d, opts->deck_path, opts->sets, opts->nsets) != MP_OK) return 1;
    if (d.supernet.enabled) {
        MP_ERROR("export --format hf of a supernet (supernet.enabled=1 in the deck): export a subnet first "
                 "(--format mindpipe --subnet ...), then export that checkpoint with its deck");
        return 1;
    }
    const model_cfg_t cfg = deck_model_cfg(&d, NULL);
    char why[256];
    const int llama = cfg.arch == ARCH_LLAMA;
    if ((llama ? hf_llama_fits(&cfg, why, sizeof why) : hf_gpt2_fits(&cfg, why, sizeof why)) != MP_OK) {
        MP_ERROR("export --format hf of %s refused: %s", ckpt, why);
        return 1;
    }
    if ((bf16 || shard_bytes) && !llama) {
        MP_ERROR("export --format hf %s of %s refused: GPT-2's export is one fp32 file (its import reads no other)",
                 bf16 ? "--dtype bf16" : "--max-shard-size", ckpt);
        return 1;
    }
    hf_tok_t tk = {0};
    if (hf_tok_read(ckpt, tokenizer_dir, &tk) != MP_OK) return 1;
    param_table_t tab = {0};
    if (param_table_build(&tab, &cfg, 0, cfg.layers, 1, 1, 1, 0) != MP_OK) return hf_tok_free(&tk), 1;
    float *buf = MP_CALLOC(tab.total ? tab.total : 1, sizeof *buf);
    ckpt_state_t st = {0};
    int rc = buf ? ckpt_read(ckpt, &tab, buf, NULL, NULL, &st) : MP_ERR;
    if (rc == MP_OK) {
        free(st.deck);
        rc = llama ? hf_llama_write(out, &tab, buf, bf16 ? "BF16" : "F32", shard_bytes) : hf_gpt2_write(out, &tab, buf);
    }
    if (rc == MP_OK) rc = hf_tok_write(out, &tk, cfg.seq_len);
    if (rc == MP_OK && !opts->quiet) {
        char toks[160];
        if (tk.enc) snprintf(toks, sizeof toks, "vocab.json, merges.txt and tokenizer_config.json (GPT-2's BPE)");
        else if (tk.model) snprintf(toks, sizeof toks, "tokenizer.model (SentencePiece)");
        else if (tk.json) snprintf(toks, sizeof toks, "tokenizer.json%s", tk.config ? " and tokenizer_config.json" : "");
        else snprintf(toks, sizeof toks, "no tokenizer files (the checkpoint's tokenizer is %s)", tk.ident.name);
        char idx[4200], wts[4300];
        snprintf(idx, sizeof idx, "%s/" HF_INDEX_FILE, out);
        if (llama && shard_bytes && access(idx, F_OK) == 0) snprintf(wts, sizeof wts, "%s and its shards", idx);
        else snprintf(wts, sizeof wts, "%s/" HF_WEIGHTS_FILE, out);
        printf("exported %s (step %ld) to %s and %s/" HF_CONFIG_FILE " (%s%s); %s\n", ckpt, st.step, wts, out,
               llama ? "LlamaForCausalLM" : "GPT2LMHeadModel", bf16 ? ", bf16" : "", toks);
    }
    hf_tok_free(&tk);
    free(buf);
    param_table_free(&tab);
    return rc == MP_OK ? 0 : 1;
}
