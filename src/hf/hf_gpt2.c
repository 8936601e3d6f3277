/* Hugging Face's GPT-2 directory, written and read (contract and the name table in hf_gpt2.h). */
#include "hf_gpt2.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "block_kind.h"
#include "check.h"
#include "hf_config.h"
#include "publish.h"
#include "safetensors.h"

#define HF_PREFIX "transformer."

/* HF's name of canonical tensor e (without the "transformer." prefix) and whether its matrix is
 * stored transposed (Conv1D's (in, out) against our (out, in)). */
static void hf_name(const param_entry_t *e, char *name_p, size_t n, int *transpose_p)
{
    static const char *const block[PK_COUNT] = {
        [PK_LN1_W] = "ln_1.weight", [PK_LN1_B] = "ln_1.bias", [PK_QKV_W] = "attn.c_attn.weight",
        [PK_QKV_B] = "attn.c_attn.bias", [PK_PROJ_W] = "attn.c_proj.weight", [PK_PROJ_B] = "attn.c_proj.bias",
        [PK_LN2_W] = "ln_2.weight", [PK_LN2_B] = "ln_2.bias", [PK_FC_W] = "mlp.c_fc.weight",
        [PK_FC_B] = "mlp.c_fc.bias", [PK_FCPROJ_W] = "mlp.c_proj.weight", [PK_FCPROJ_B] = "mlp.c_proj.bias"};
    static const char *const model[PK_COUNT] = {[PK_WTE] = "wte.weight", [PK_WPE] = "wpe.weight",
                                                [PK_LNF_W] = "ln_f.weight", [PK_LNF_B] = "ln_f.bias"};
    if (e->layer >= 0) snprintf(name_p, n, "h.%d.%s", e->layer, block[e->kind]);
    else snprintf(name_p, n, "%s", model[e->kind]);
    *transpose_p = e->ndim == 2 && e->kind != PK_WTE && e->kind != PK_WPE;
}

int hf_gpt2_fits(const model_cfg_t *cfg, char *why_p, size_t n)
{
    if (cfg->arch != ARCH_GPT2) {
        snprintf(why_p, n, "model.arch=%s is no GPT2LMHeadModel (llama's is LlamaForCausalLM: hf_llama.h)",
                 block_kind_of(cfg)->name);
        return MP_ERR;
    }
    if (cfg->choice || cfg->ncand) {
        snprintf(why_p, n, "a supernet is no GPT2LMHeadModel: export a subnet first (mindpipe export --subnet)");
        return MP_ERR;
    }
    for (int l = 0; l < cfg->layers; l++) {
        if (block_is_skip(cfg, l)) {
            snprintf(why_p, n, "block %d is skip: GPT2LMHeadModel has no identity blocks", l);
            return MP_ERR;
        }
        if (cfg_heads(cfg, l) != cfg->heads || cfg_ratio(cfg, l) != cfg->mlp_ratio) {
            snprintf(why_p, n, "block %d is h%dm%d, the model h%dm%d: GPT2LMHeadModel has one n_head and one n_inner "
                     "for every block", l, cfg_heads(cfg, l), cfg_ratio(cfg, l), cfg->heads, cfg->mlp_ratio);
            return MP_ERR;
        }
    }
    return MP_OK;
}


/* config.json's text of cfg into buf (n bytes). */
static void hf_config_text(const model_cfg_t *c, char *buf, size_t n)
{
    char inner[32];
    if (c->mlp_ratio == 4) snprintf(inner, sizeof inner, "null");
    else snprintf(inner, sizeof inner, "%d", c->mlp_ratio * c->dim);
    snprintf(buf, n,
             "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
             "  \"vocab_size\": %d,\n  \"n_positions\": %d,\n  \"n_ctx\": %d,\n  \"n_embd\": %d,\n"
             "  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_inner\": %s,\n"
             "  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": 1e-05,\n"
             "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n"
             "  \"initializer_range\": 0.02,\n  \"scale_attn_weights\": true,\n"
             "  \"scale_attn_by_inverse_layer_idx\": false,\n  \"reorder_and_upcast_attn\": false,\n"
             "  \"tie_word_embeddings\": true,\n  \"use_cache\": true,\n  \"torch_dtype\": \"float32\"\n}\n",
             c->vocab, c->seq_len, c->seq_len, c->dim, c->layers, c->heads, inner);
}

/* Canonical (r, c) into HF's (c, r). */
static void hf_transpose(float *dst, const float *src, int r, int c)
{
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++) dst[(size_t)j * r + i] = src[(size_t)i * c + j];
}

int hf_gpt2_write(const char *dir, const param_table_t *gtab, const float *buf)
{
    char why[256], path[4200];
    if (hf_gpt2_fits(&gtab->cfg, why, sizeof why) != MP_OK) return MP_FAIL("export to %s refused: %s", dir, why);
    if (hf_mkdir(dir) != MP_OK) return MP_ERR;
    st_out_t *t = MP_CALLOC((size_t)gtab->count, sizeof *t);
    char (*names)[ST_NAME_MAX] = MP_CALLOC((size_t)gtab->count, sizeof *names);
    float *tr = MP_CALLOC(gtab->total ? gtab->total : 1, sizeof *tr); /* the transposed matrices */
    int rc = t && names && tr ? MP_OK : MP_ERR;
    for (int i = 0; i < gtab->count && rc == MP_OK; i++) {
        const param_entry_t *e = &gtab->entries[i];
        int transpose;
        char n[96];
        hf_name(e, n, sizeof n, &transpose);
        snprintf(names[i], ST_NAME_MAX, HF_PREFIX "%s", n);
        t[i] = (st_out_t){.name = names[i], .ndim = e->ndim, .data = buf + e->offset};
        for (int d = 0; d < e->ndim; d++) t[i].shape[d] = e->gshape[transpose ? e->ndim - 1 - d : d];
        if (transpose) {
            hf_transpose(tr + e->offset, buf + e->offset, e->gshape[0], e->gshape[1]);
            t[i].data = tr + e->offset;
        }
    }
    snprintf(path, sizeof path, "%s/" HF_WEIGHTS_FILE, dir);
    if (rc == MP_OK) rc = st_write(path, t, gtab->count);
    free(tr), free(names), free(t);
    if (rc != MP_OK) return MP_ERR;
    char text[2048];
    hf_config_text(&gtab->cfg, text, sizeof text);
    snprintf(path, sizeof path, "%s/" HF_CONFIG_FILE, dir);
    return publish_text(path, text);
}

/* The entry of f for canonical e: HF's name with the prefix, else without it; NULL if neither. */
static const st_entry_t *hf_find(const st_file_t *f, const param_entry_t *e, int *transpose_p)
{
    char n[96], full[ST_NAME_MAX];
    hf_name(e, n, sizeof n, transpose_p);
    snprintf(full, sizeof full, HF_PREFIX "%s", n);
    const st_entry_t *s = st_find(f, full);
    return s ? s : st_find(f, n);
}

/* Whether f's entry s is one the model knows: a tensor of gtab, a mask buffer, lm_head.weight. */
static int hf_known(const st_file_t *f, const param_table_t *gtab, const st_entry_t *s)
{
    const char *dot = strrchr(s->name, '.');
    if (dot && (!strcmp(dot, ".bias") || !strcmp(dot, ".masked_bias")) && dot - s->name >= 5 &&
        !strncmp(dot - 5, ".attn", 5))
        return 1;
    if (!strcmp(s->name, "lm_head.weight")) return 1;
    for (int i = 0; i < gtab->count; i++) {
        int tr;
        if (hf_find(f, &gtab->entries[i], &tr) == s) return 1;
    }
    return 0;
}

/* e's entry s: F32 at e's canonical shape, transposed where HF's is; wpe with npos rows (config.json's
 * n_positions, at least seq_len: hf_config_check). */
static int hf_entry_check(const st_file_t *f, const model_cfg_t *c, const param_entry_t *e, const st_entry_t *s,
                          int transpose, long npos)
{
    if (strcmp(s->dtype, "F32"))
        return MP_FAIL("%s: key %s: dtype %s, MindPipe loads F32 only (convert it: model.float())", f->path, s->name,
                       s->dtype);
    long long shape[PARAM_MAX_DIMS];
    for (int d = 0; d < e->ndim; d++) shape[d] = e->gshape[transpose ? e->ndim - 1 - d : d];
    if (e->kind == PK_WPE) shape[0] = npos;
    int ok = s->ndim == e->ndim;
    for (int d = 0; ok && d < e->ndim; d++) ok = s->shape[d] == shape[d];
    if (ok) return MP_OK;
    char have[128] = "", want[64] = "";
    for (int d = 0; d < s->ndim; d++)
        snprintf(have + strlen(have), sizeof have - strlen(have), "%s%lld", d ? ", " : "", s->shape[d]);
    for (int d = 0; d < e->ndim; d++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? ", " : "", shape[d]);
    return MP_FAIL("%s: key %s: shape (%s), the deck's model (layers %d, dim %d, seq_len %d, vocab %d, mlp_ratio %d) "
                   "needs (%s)", f->path, s->name, have, c->layers, c->dim, c->seq_len, c->vocab, c->mlp_ratio, want);
}

/* lm_head.weight, when the file has one, must be wte: MindPipe's head is tied. */
static int hf_head_check(const st_file_t *f, const param_table_t *gtab)
{
    const st_entry_t *h = st_find(f, "lm_head.weight");
    if (!h) return MP_OK;
    const param_entry_t *e = param_table_find(gtab, "wte");
    int tr;
    const st_entry_t *w = hf_find(f, e, &tr);
    if (hf_entry_check(f, &gtab->cfg, e, h, 0, 0) != MP_OK) return MP_ERR;
    float *a = MP_CALLOC(e->numel, sizeof *a), *b = MP_CALLOC(e->numel, sizeof *b);
    int rc = a && b ? MP_OK : MP_ERR;
    if (rc == MP_OK) rc = st_read_f32(f, h, a);
    if (rc == MP_OK) rc = st_read_f32(f, w, b);
    if (rc == MP_OK && memcmp(a, b, e->numel * sizeof *a))
        rc = MP_FAIL("%s: key lm_head.weight differs from %s: an untied head, and MindPipe's is tied to wte", f->path,
                     w->name);
    free(a), free(b);
    return rc;
}


/* dir/config.json against the deck's model c: the model it describes must be c's (every disagreement
 * refused naming the key), and its n_positions, the rows of wpe, into *npos_p. n_positions may exceed
 * seq_len: positions past seq_len are never used, so the first seq_len rows of wpe are loaded (GPT-2's
 * 1024 positions fine-tuned at a shorter context); fewer would leave positions without an embedding. */
static int hf_config_check(const char *dir, const model_cfg_t *c, long *npos_p)
{
    char path[4200], w[96];
    snprintf(path, sizeof path, "%s/" HF_CONFIG_FILE, dir);
    hf_val_t *v = MP_CALLOC(HF_KEYS_MAX, sizeof *v);
    int n = 0;
    if (!v || hf_config_read(path, v, &n) != MP_OK) return free(v), MP_ERR;
    const struct { const char *key, *deck; long want; } same[] = {
        {"n_layer", "model.layers", c->layers}, {"n_embd", "model.dim", c->dim}, {"n_head", "model.heads", c->heads},
        {"vocab_size", "model.vocab (the vocabulary without padding rows)", c->vocab}};
    int rc = MP_OK;
    long x = 0;
    for (size_t i = 0; i < sizeof same / sizeof same[0] && rc == MP_OK; i++)
        if ((rc = hf_int(path, v, n, same[i].key, &x)) == MP_OK && x != same[i].want)
            rc = MP_FAIL("%s: key %s is %ld, the deck's %s is %ld", path, same[i].key, x, same[i].deck, same[i].want);
    if (rc == MP_OK && (rc = hf_int(path, v, n, "n_positions", npos_p)) == MP_OK && *npos_p < c->seq_len)
        rc = MP_FAIL("%s: key n_positions is %ld, below the deck's model.seq_len %d: positions from %ld on would have "
                     "no embedding", path, *npos_p, c->seq_len, *npos_p < 0 ? 0 : *npos_p);
    const hf_val_t *k;
    if (rc == MP_OK && (k = hf_key(v, n, "model_type")) && (k->kind != 's' || strcmp(k->str, "gpt2")))
        rc = MP_FAIL("%s: key model_type is %s, not \"gpt2\": not a GPT-2 model", path, hf_what(k, w, sizeof w));
    /* absent keys take GPT2Config's defaults: gelu_new, n_inner null (4 * n_embd), 1e-5 */
    if (rc == MP_OK && (k = hf_key(v, n, "activation_function")) &&
        (k->kind != 's' || (strcmp(k->str, "gelu_new") && strcmp(k->str, "gelu_pytorch_tanh"))))
        rc = MP_FAIL("%s: key activation_function is %s: MindPipe's GELU is the tanh approximation (gelu_new or "
                     "gelu_pytorch_tanh)", path, k->kind == 's' ? k->str : hf_what(k, w, sizeof w));
    if (rc == MP_OK && (k = hf_key(v, n, "n_inner")) && k->kind != 'z' &&
        (k->kind != 'n' || !k->integral || k->num != (double)c->mlp_ratio * c->dim))
        rc = MP_FAIL("%s: key n_inner is %s, the deck's model.mlp_ratio * model.dim is %d", path,
                     hf_what(k, w, sizeof w), c->mlp_ratio * c->dim);
    if (rc == MP_OK && (!(k = hf_key(v, n, "n_inner")) || k->kind == 'z') && c->mlp_ratio != 4)
        rc = MP_FAIL("%s: key n_inner is null (4 * n_embd), the deck's model.mlp_ratio is %d", path, c->mlp_ratio);
    if (rc == MP_OK && (k = hf_key(v, n, "layer_norm_epsilon")) && (k->kind != 'n' || fabs(k->num - 1e-5) > 1e-12))
        rc = MP_FAIL("%s: key layer_norm_epsilon is %s, MindPipe's LayerNorm has 1e-05", path, hf_what(k, w, sizeof w));
    if (rc == MP_OK && (k = hf_key(v, n, "scale_attn_weights")) && k->kind != 't')
        rc = MP_FAIL("%s: key scale_attn_weights is %s, MindPipe's attention is scaled by 1/sqrt(head size)", path,
                     hf_what(k, w, sizeof w));
    if (rc == MP_OK && (k = hf_key(v, n, "scale_attn_by_inverse_layer_idx")) && k->kind != 'f')
        rc = MP_FAIL("%s: key scale_attn_by_inverse_layer_idx is %s, MindPipe's attention has no such scale", path,
                     hf_what(k, w, sizeof w));
    free(v);
    return rc;
}

int hf_gpt2_check(const char *dir, const param_table_t *gtab)
{
    char path[4200], why[256];
    if (hf_gpt2_fits(&gtab->cfg, why, sizeof why) != MP_OK) return MP_FAIL("--init-from hf:%s refused: %s", dir, why);
    long npos = 0;
    if (hf_config_check(dir, &gtab->cfg, &npos) != MP_OK) return MP_ERR;
    snprintf(path, sizeof path, "%s/" HF_WEIGHTS_FILE, dir);
    st_file_t f;
    if (st_open(path, &f) != MP_OK) return MP_ERR;
    int rc = MP_OK;
    for (int i = 0; i < gtab->count && rc == MP_OK; i++) {
        const param_entry_t *e = &gtab->entries[i];
        int tr;
        const st_entry_t *s = hf_find(&f, e, &tr);
        if (!s) {
            char n[96];
            hf_name(e, n, sizeof n, &tr);
            rc = MP_FAIL("%s: key " HF_PREFIX "%s is missing (MindPipe's %s)", path, n, e->name);
        } else {
            rc = hf_entry_check(&f, &gtab->cfg, e, s, tr, npos);
        }
    }
    for (int i = 0; i < f.count && rc == MP_OK; i++)
        if (!hf_known(&f, gtab, &f.e[i]))
            rc = MP_FAIL("%s: key %s is no tensor of the deck's model (%d layers): another model's file?", path,
                         f.e[i].name, gtab->cfg.layers);
    if (rc == MP_OK) rc = hf_head_check(&f, gtab);
    st_close(&f);
    return rc;
}

int hf_gpt2_load(const char *dir, const param_table_t *gtab, const param_table_t *local, float *buf)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/" HF_WEIGHTS_FILE, dir);
    st_file_t f;
    if (st_open(path, &f) != MP_OK) return MP_ERR;
    size_t most = 1; /* the file's largest tensor: its wpe may have more rows than the model uses */
    for (int i = 0; i < gtab->count; i++) most = gtab->entries[i].numel > most ? gtab->entries[i].numel : most;
    for (int i = 0; i < f.count; i++) {
        const size_t n = (size_t)((f.e[i].end - f.e[i].begin) / 4);
        most = n > most ? n : most;
    }
    float *hf = MP_CALLOC(most, sizeof *hf), *canon = MP_CALLOC(most, sizeof *canon);
    int rc = hf && canon ? MP_OK : MP_ERR;
    for (int i = 0; i < local->count && rc == MP_OK; i++) {
        const param_entry_t *e = &local->entries[i];
        const param_entry_t *g = param_table_find(gtab, e->name);
        int tr;
        const st_entry_t *s = g ? hf_find(&f, g, &tr) : NULL;
        if (!s) {
            rc = MP_FAIL("%s: no tensor for MindPipe's %s (the file changed since it was checked?)", path, e->name);
            break;
        }
        if ((rc = st_read_f32(&f, s, hf)) != MP_OK) break;
        if (tr) hf_transpose(canon, hf, g->gshape[1], g->gshape[0]); /* HF's (c, r) back into (r, c) */
        const float *src = tr ? canon : hf;
        for (size_t j = 0; j < e->numel; j++) { /* this rank's shard, by canonical index (ckpt.c's way) */
            const size_t k = param_global_index(local, e, j, local->tp_rank);
            buf[e->offset + j] = k == (size_t)-1 ? 0.0f : src[k];
        }
    }
    free(hf), free(canon);
    st_close(&f);
    return rc;
}
