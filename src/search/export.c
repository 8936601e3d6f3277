/* `mindpipe export`: a subnet of a supernet checkpoint as a plain model checkpoint (export.h). One process,
 * no MPI (commands.h): the supernet's whole table read with ckpt_read, no run context, no data. */
#include "export.h"

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
#include "publish.h"
#include "sha256.h"
#include "supernet.h"
#include "tokenizer.h"

/* The exported model's deck: the supernet's, its shapes as model.blocks, no supernet. */
static int export_deck(const deck_t *sup, const int *sel, deck_t *d)
{
    *d = *sup;
    const int L = d->model.layers;
    if (L > DECK_LIST_MAX) return MP_FAIL("export: %d layers, more than model.blocks can list (%d)", L, DECK_LIST_MAX);
    for (int l = 0; l < L; l++)
        d->model.shapes.shape[l] = sel[l] >= 0 ? sup->supernet.cands.shape[sel[l]]
                                               : (block_shape_t){d->model.heads, d->model.mlp_ratio};
    d->model.shapes.n = L;
    const model_cfg_t cfg = deck_model_cfg(d, NULL); /* the subnet: model.blocks, no candidates */
    char text[DECK_LIST_MAX * 12];
    param_blocks_text(&cfg, text, sizeof text);
    if (strlen(text) >= DECK_STR)
        return MP_FAIL("export: model.blocks of %d layers is longer than a deck value (%d)", L, DECK_STR - 1);
    snprintf(d->model.blocks, DECK_STR, "%s", text);
    d->supernet.enabled = 0;
    d->supernet.candidates[0] = d->supernet.blocks[0] = 0;
    d->supernet.cands.n = d->supernet.choice.n = 0;
    return MP_OK;
}

/* The subnet's tensors out of the supernet's buffer (whole model in stab's layout) into tab's layout. */
static int export_tensors(const param_table_t *stab, const int *sel, const float *src, const param_table_t *tab,
                          float *dst)
{
    for (int i = 0; i < tab->count; i++) {
        const param_entry_t *e = &tab->entries[i];
        char name[PARAM_NAME_MAX + 16];
        if (e->layer >= 0 && sel[e->layer] >= 0) { /* h.{l}.X is candidate sel[l]'s h.{l}.c{k}.X */
            const char *suffix = strchr(strchr(e->name, '.') + 1, '.') + 1;
            snprintf(name, sizeof name, "h.%d.c%d.%s", e->layer, sel[e->layer], suffix);
        } else {
            snprintf(name, sizeof name, "%s", e->name);
        }
        const param_entry_t *s = param_table_find(stab, name);
        if (!s || s->numel != e->numel) return MP_FAIL("export: the supernet has no tensor %s of %zu floats (a bug)", name, e->numel);
        memcpy(dst + e->offset, src + s->offset, e->numel * sizeof(float));
    }
    return MP_OK;
}

/* The supernet's whole model: its table (every candidate, one process) into stab_p and its weights,
 * read from ckpt, into *buf_p (malloc'd); the checkpoint's step into *step_p, its tokenizer into
 * *tok_p (the exported file carries it on). */
static int export_read(const deck_t *d, const unsigned char *choice, const char *ckpt, param_table_t *stab_p,
                       float **buf_p, long *step_p, tok_ident_t *tok_p)
{
    const model_cfg_t cfg = deck_model_cfg(d, choice);
    if (param_table_build(stab_p, &cfg, 0, cfg.layers, 1, 1, 1, 0) != MP_OK) return MP_ERR;
    float *buf = MP_CALLOC(stab_p->total ? stab_p->total : 1, sizeof *buf);
    ckpt_state_t st;
    if (!buf || ckpt_read(ckpt, stab_p, buf, NULL, NULL, &st) != MP_OK) {
        free(buf);
        return MP_ERR;
    }
    free(st.deck);
    *buf_p = buf, *step_p = st.step, *tok_p = st.tok;
    return MP_OK;
}

int export_main(const run_opts_t *opts, const char *ckpt, const char *subnet, const char *out)
{
    run_t r; /* the deck and the supernet's choice blocks only (supernet_layers, supernet_parse_subnet) */
    memset(&r, 0, sizeof r);
    if (deck_load_model(&r.deck, opts->deck_path, opts->sets, opts->nsets) != MP_OK) return 1;
    int rc = MP_OK;
    long step = 0;
    if (!r.deck.supernet.enabled) rc = MP_FAIL("export needs the supernet's deck (supernet.enabled=1) in -c");
    if (rc == MP_OK) rc = supernet_layers(&r);
    if (rc == MP_OK) rc = supernet_parse_subnet(&r, subnet, supernet_of(&r)->sel);
    deck_t d;
    param_table_t stab = {0}, tab = {0};
    float *buf = NULL, *src = NULL;
    char *text = NULL;
    tok_ident_t tok = {{0}, {0}};
    if (rc == MP_OK) rc = export_read(&r.deck, supernet_of(&r)->choice, ckpt, &stab, &src, &step, &tok);
    if (rc == MP_OK) rc = export_deck(&r.deck, supernet_of(&r)->sel, &d);
    if (rc == MP_OK) {
        const model_cfg_t cfg = deck_model_cfg(&d, NULL);
        rc = param_table_build(&tab, &cfg, 0, cfg.layers, 1, 1, 1, 0);
    }
    if (rc == MP_OK && (!(buf = MP_CALLOC(tab.total ? tab.total : 1, sizeof *buf)) || !(text = deck_to_string(&d))))
        rc = MP_FAIL("out of memory exporting %s", ckpt);
    if (rc == MP_OK) rc = export_tensors(&stab, supernet_of(&r)->sel, src, &tab, buf);
    if (rc == MP_OK) {
        ckpt_state_t st = {.step = step, .adam_t = 0, .seed = r.deck.train.seed, .deck = NULL, .tok = tok};
        snprintf(st.layout, sizeof st.layout, "dp=1 tp=1 pp=1 sp=1");
        rc = ckpt_write(out, &tab, buf, NULL, NULL, &st, text);
    }
    if (rc == MP_OK)
        printf("exported subnet %s of %s (step %ld) to %s: a plain model with\n[model]\nblocks = %s\n", subnet, ckpt, step,
               out, d.model.blocks);
    free(buf), free(src), free(text);
    param_table_free(&tab), param_table_free(&stab);
    supernet_free(&r);
    return rc == MP_OK ? 0 : 1;
}

/* ---- --format hf: the tokenizer files beside the weights ------------------------------------------ */

/* The bytes an export writes as tokenizer files, held in memory: read and checked before any file is
 * written, so a missing or different vocabulary leaves the directory untouched. */
typedef struct {
    tok_ident_t ident;
    unsigned char *enc, *voc; /* gpt2: encoder.json and vocab.bpe, as they are */
    size_t n_enc, n_voc;
    unsigned char *model;     /* sp: the SentencePiece model */
    size_t n_model;
} hf_tok_t;

static void hf_tok_free(hf_tok_t *t)
{
    free(t->enc), free(t->voc), free(t->model);
    t->enc = t->voc = t->model = NULL;
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
 * tok_default_dir), sp's model (from dir, else the token file the deck's data.path names), nothing for
 * byte and none. The vocabulary is opened with tok_open_ident (which refuses another digest); the bytes
 * copied are hashed again, because the files are read a second time and could have changed since. */
static int hf_tok_read(const char *ckpt, const char *dir, hf_tok_t *t)
{
    ckpt_head_info_t h;
    char why[600], def[4096];
    if (ckpt_file_head(ckpt, &h, why, sizeof why) != MP_OK) return MP_FAIL("%s: %s", ckpt, why);
    t->ident = h.tok;
    ckpt_file_head_free(&h);
    const int gpt2 = !strcmp(t->ident.name, "gpt2"), sp = !strcmp(t->ident.name, "sp");
    if (!gpt2 && !sp) return MP_OK;
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
    if (sp) {
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
                     hex, t->ident.sha256, gpt2 ? dir : "the sp source");
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
    static const char *const names[] = {"vocab.json", "merges.txt", "tokenizer_config.json", "tokenizer.model"};
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
    for (int i = 0; i < 4 && rc == MP_OK; i++) {
        if (i < 3 ? t->enc != NULL : t->model != NULL) continue;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (unlink(path) != 0 && errno != ENOENT)
            rc = MP_FAIL("cannot remove %s (an earlier export's tokenizer file): %s", path, strerror(errno));
    }
    return rc;
}

int export_hf_main(const run_opts_t *opts, const char *ckpt, const char *tokenizer_dir, const char *out)
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
    if (hf_gpt2_fits(&cfg, why, sizeof why) != MP_OK) {
        MP_ERROR("export --format hf of %s refused: %s", ckpt, why);
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
        rc = hf_gpt2_write(out, &tab, buf);
    }
    if (rc == MP_OK) rc = hf_tok_write(out, &tk, cfg.seq_len);
    if (rc == MP_OK && !opts->quiet) {
        char toks[160];
        if (tk.enc) snprintf(toks, sizeof toks, "vocab.json, merges.txt and tokenizer_config.json (GPT-2's BPE)");
        else if (tk.model) snprintf(toks, sizeof toks, "tokenizer.model (SentencePiece)");
        else snprintf(toks, sizeof toks, "no tokenizer files (the checkpoint's tokenizer is %s)", tk.ident.name);
        printf("exported %s (step %ld) to %s/" HF_WEIGHTS_FILE " and %s/" HF_CONFIG_FILE " (GPT2LMHeadModel); %s\n",
               ckpt, st.step, out, out, toks);
    }
    hf_tok_free(&tk);
    free(buf);
    param_table_free(&tab);
    return rc == MP_OK ? 0 : 1;
}
