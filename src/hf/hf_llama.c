/* Hugging Face's Llama directory, written and read (contract and the name table in hf_llama.h). */
#include "hf_llama.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block_kind.h"
#include "check.h"
#include "hf_config.h"
#include "hf_gpt2.h" /* HF_WEIGHTS_FILE, HF_CONFIG_FILE */
#include "publish.h"
#include "safetensors.h"

#define HF_LLAMA_PARTS 3 /* q, k, v: the most HF tensors one of ours is made of */

/* One HF tensor of a canonical one: rows [row0, row0 + shape[0]) of it (all of a vector). */
typedef struct {
    char name[ST_NAME_MAX];
    int ndim;
    long long shape[2];
    size_t off; /* its first element in the canonical tensor */
} hf_part_t;

/* HF's tensors of canonical tensor e of model c into p; their count. */
static int hf_llama_parts(const model_cfg_t *c, const param_entry_t *e, hf_part_t *p)
{
    static const char *const block[PK_COUNT] = {[PK_LN1_W] = "input_layernorm.weight",
                                                [PK_PROJ_W] = "self_attn.o_proj.weight",
                                                [PK_LN2_W] = "post_attention_layernorm.weight",
                                                [PK_FCPROJ_W] = "mlp.down_proj.weight"};
    static const char *const model[PK_COUNT] = {
        [PK_WTE] = "model.embed_tokens.weight", [PK_LNF_W] = "model.norm.weight", [PK_HEAD_W] = "lm_head.weight"};
    const int hs = c->dim / c->heads, a = c->heads * hs, ka = cfg_kv_heads(c) * hs, f = c->ffn_dim;
    const long long cols = e->ndim == 2 ? e->gshape[1] : 1;
    const char *sub[HF_LLAMA_PARTS] = {NULL};
    int rows[HF_LLAMA_PARTS] = {e->gshape[0]}, n = 1;
    if (e->kind == PK_QKV_W) {
        sub[0] = "self_attn.q_proj.weight", sub[1] = "self_attn.k_proj.weight", sub[2] = "self_attn.v_proj.weight";
        rows[0] = a, rows[1] = ka, rows[2] = ka, n = 3;
    } else if (e->kind == PK_FC_W) {
        sub[0] = "mlp.gate_proj.weight", sub[1] = "mlp.up_proj.weight";
        rows[0] = f, rows[1] = f, n = 2;
    } else {
        sub[0] = e->layer >= 0 ? block[e->kind] : model[e->kind];
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        if (e->layer >= 0) snprintf(p[i].name, ST_NAME_MAX, "model.layers.%d.%s", e->layer, sub[i] ? sub[i] : "?");
        else snprintf(p[i].name, ST_NAME_MAX, "%s", sub[i] ? sub[i] : "?");
        p[i].ndim = e->ndim;
        p[i].shape[0] = rows[i], p[i].shape[1] = cols;
        p[i].off = off;
        off += (size_t)rows[i] * (size_t)cols;
    }
    return n;
}

int hf_llama_fits(const model_cfg_t *cfg, char *why_p, size_t n)
{
    if (cfg->arch != ARCH_LLAMA) {
        snprintf(why_p, n, "model.arch=%s is no LlamaForCausalLM", block_kind_of(cfg)->name);
        return MP_ERR;
    }
    if (cfg->choice || cfg->ncand) {
        snprintf(why_p, n, "a supernet is no LlamaForCausalLM: export a subnet first (mindpipe export --subnet)");
        return MP_ERR;
    }
    for (int l = 0; l < cfg->layers; l++)
        if (block_is_skip(cfg, l) || cfg_heads(cfg, l) != cfg->heads || cfg_ratio(cfg, l) != cfg->mlp_ratio) {
            snprintf(why_p, n, "block %d is %s, the model h%dm%d: LlamaForCausalLM has no identity blocks and one "
                     "num_attention_heads and intermediate_size for every block", l,
                     block_is_skip(cfg, l) ? "skip" : "of another shape", cfg->heads, cfg->mlp_ratio);
            return MP_ERR;
        }
    return MP_OK;
}

/* The shortest decimal text that reads back as float x (config.json's rope_theta, rms_norm_eps). */
static void hf_float_text(float x, char *buf, size_t n)
{
    if (x == floorf(x) && fabsf(x) < 1e15f) { /* 10000.0, 500000.0: as Python writes a whole float */
        snprintf(buf, n, "%.1f", (double)x);
        return;
    }
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, n, "%.*g", p, (double)x);
        if (strtof(buf, NULL) == x) break;
    }
    if (!strpbrk(buf, ".en")) snprintf(buf + strlen(buf), n - strlen(buf), ".0"); /* a float, as Python writes it */
}

/* config.json's text of c into buf (n bytes). */
static void hf_llama_config_text(const model_cfg_t *c, const char *dtype, char *buf, size_t n)
{
    char theta[32], eps[32];
    hf_float_text(c->rope_theta, theta, sizeof theta);
    hf_float_text(c->norm_eps, eps, sizeof eps);
    snprintf(buf, n,
             "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
             "  \"vocab_size\": %d,\n  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n"
             "  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n"
             "  \"head_dim\": %d,\n  \"max_position_embeddings\": %d,\n  \"rope_theta\": %s,\n"
             "  \"rope_scaling\": null,\n  \"rms_norm_eps\": %s,\n  \"hidden_act\": \"silu\",\n"
             "  \"attention_bias\": false,\n  \"mlp_bias\": false,\n  \"attention_dropout\": 0.0,\n"
             "  \"initializer_range\": 0.02,\n  \"pretraining_tp\": 1,\n  \"bos_token_id\": null,\n"
             "  \"eos_token_id\": null,\n  \"tie_word_embeddings\": %s,\n  \"use_cache\": true,\n"
             "  \"torch_dtype\": \"%s\"\n}\n",
             c->vocab, c->dim, c->ffn_dim, c->layers, c->heads, cfg_kv_heads(c), c->dim / c->heads, c->seq_len, theta,
             eps, c->untied ? "false" : "true", strcmp(dtype, "BF16") ? "float32" : "bfloat16");
}

int hf_llama_write(const char *dir, const param_table_t *gtab, const float *buf, const char *dtype)
{
    char why[256], path[4200];
    if (hf_llama_fits(&gtab->cfg, why, sizeof why) != MP_OK) return MP_FAIL("export to %s refused: %s", dir, why);
    if (strcmp(dtype, "F32") && strcmp(dtype, "BF16")) return MP_FAIL("export to %s: dtype %s (a bug)", dir, dtype);
    if (hf_mkdir(dir) != MP_OK) return MP_ERR;
    const int cap = gtab->count * HF_LLAMA_PARTS;
    st_out_t *t = MP_CALLOC((size_t)cap, sizeof *t);
    hf_part_t *parts = MP_CALLOC((size_t)cap, sizeof *parts);
    int rc = t && parts ? MP_OK : MP_ERR, n = 0;
    for (int i = 0; i < gtab->count && rc == MP_OK; i++) {
        const param_entry_t *e = &gtab->entries[i];
        const int k = hf_llama_parts(&gtab->cfg, e, parts + n);
        for (int j = 0; j < k; j++, n++)
            t[n] = (st_out_t){.name = parts[n].name, .ndim = parts[n].ndim, .shape = {parts[n].shape[0],
                              parts[n].shape[1]}, .data = buf + e->offset + parts[n].off, .dtype = dtype};
    }
    snprintf(path, sizeof path, "%s/" HF_WEIGHTS_FILE, dir);
    if (rc == MP_OK) rc = st_write(path, t, n);
    free(parts), free(t);
    if (rc != MP_OK) return MP_ERR;
    char text[2048];
    hf_llama_config_text(&gtab->cfg, dtype, text, sizeof text);
    snprintf(path, sizeof path, "%s/" HF_CONFIG_FILE, dir);
    return publish_text(path, text);
}

/* ---- reading ---- */

/* Key key of path: absent (*have_p 0), or a number (true/false for a switch) into *x_p. */
static int hf_num(const char *path, const hf_val_t *v, int n, const char *key, int boolean, double *x_p, int *have_p)
{
    const hf_val_t *x = hf_key(v, n, key);
    char w[96];
    *have_p = x != NULL;
    if (!x) return MP_OK;
    if (boolean && (x->kind == 't' || x->kind == 'f')) return *x_p = x->kind == 't', MP_OK;
    if (!boolean && x->kind == 'n') return *x_p = x->num, MP_OK;
    return MP_FAIL("%s: key %s is %s, not %s", path, key, hf_what(x, w, sizeof w), boolean ? "true or false" :
                                                                                            "a number");
}

/* The switches and names of a config.json that MindPipe's llama has one value of: each, where
 * present, must be that value. */
static int hf_llama_config_fixed(const char *path, const hf_val_t *v, int n, const model_cfg_t *c)
{
    static const struct { const char *key, *want; char kind; } fixed[] = {
        {"model_type", "llama", 's'}, {"hidden_act", "silu", 's'}, {"attention_bias", "false", 'f'},
        {"mlp_bias", "false", 'f'},   {"rope_scaling", "null", 'z'}};
    char w[96];
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        const hf_val_t *x = hf_key(v, n, fixed[i].key);
        if (x && (x->kind != fixed[i].kind || (x->kind == 's' && strcmp(x->str, fixed[i].want))))
            return MP_FAIL("%s: key %s is %s: MindPipe's llama has %s%s%s", path, fixed[i].key,
                           hf_what(x, w, sizeof w), fixed[i].kind == 's' ? "\"" : "", fixed[i].want,
                           fixed[i].kind == 's' ? "\"" : "");
    }
    const hf_val_t *x = hf_key(v, n, "head_dim");
    if (x && x->kind != 'z' && (x->kind != 'n' || x->num != (double)(c->dim / c->heads)))
        return MP_FAIL("%s: key head_dim is %s, the deck's model.dim / model.heads is %d", path,
                       hf_what(x, w, sizeof w), c->dim / c->heads);
    return MP_OK;
}

/* dir/config.json against the deck's model c (hf_llama.h). */
static int hf_llama_config_check(const char *dir, const model_cfg_t *c)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/" HF_CONFIG_FILE, dir);
    hf_val_t *v = MP_CALLOC(HF_KEYS_MAX, sizeof *v);
    int n = 0, rc = MP_OK, have;
    if (!v || hf_config_read(path, v, &n) != MP_OK) return free(v), MP_ERR;
    const struct { const char *key, *deck; long want; } same[] = {
        {"num_hidden_layers", "model.layers", c->layers}, {"hidden_size", "model.dim", c->dim},
        {"num_attention_heads", "model.heads", c->heads}, {"intermediate_size", "model.ffn_dim", c->ffn_dim},
        {"vocab_size", "model.vocab (the vocabulary without padding rows)", c->vocab}};
    long x = 0;
    for (size_t i = 0; i < sizeof same / sizeof same[0] && rc == MP_OK; i++)
        if ((rc = hf_int(path, v, n, same[i].key, &x)) == MP_OK && x != same[i].want)
            rc = MP_FAIL("%s: key %s is %ld, the deck's %s is %ld", path, same[i].key, x, same[i].deck, same[i].want);
    const hf_val_t *kv = hf_key(v, n, "num_key_value_heads");
    if (rc == MP_OK && kv && kv->kind != 'z' && (rc = hf_int(path, v, n, "num_key_value_heads", &x)) == MP_OK &&
        x != cfg_kv_heads(c))
        rc = MP_FAIL("%s: key num_key_value_heads is %ld, the deck's model.kv_heads is %d (0: model.heads)", path, x,
                     cfg_kv_heads(c));
    if (rc == MP_OK && (!kv || kv->kind == 'z') && cfg_kv_heads(c) != c->heads)
        rc = MP_FAIL("%s: key num_key_value_heads is absent (num_attention_heads, %d), the deck's model.kv_heads is %d",
                     path, c->heads, cfg_kv_heads(c));
    /* absent keys take LlamaConfig's defaults */
    const struct { const char *key, *deck; int boolean; double dflt; float want; } num[] = {
        {"rope_theta", "model.rope_theta", 0, 10000.0, c->rope_theta},
        {"rms_norm_eps", "model.norm_eps", 0, 1e-6, c->norm_eps},
        {"tie_word_embeddings", "model.tie_embeddings", 1, 0, (float)!c->untied}};
    for (size_t i = 0; i < sizeof num / sizeof num[0] && rc == MP_OK; i++) {
        double y = num[i].dflt;
        if ((rc = hf_num(path, v, n, num[i].key, num[i].boolean, &y, &have)) != MP_OK) break;
        if ((float)y == num[i].want) continue;
        if (num[i].boolean)
            rc = MP_FAIL("%s: key %s is %s%s, the deck's %s is %s", path, num[i].key, y ? "true" : "false",
                         have ? "" : " (absent: LlamaConfig's default)", num[i].deck, num[i].want ? "true" : "false");
        else
            rc = MP_FAIL("%s: key %s is %g%s, the deck's %s is %g", path, num[i].key, y,
                         have ? "" : " (absent: LlamaConfig's default)", num[i].deck, (double)num[i].want);
    }
    if (rc == MP_OK) rc = hf_llama_config_fixed(path, v, n, c);
    free(v);
    return rc;
}

/* Part p's entry s: F32, BF16 or F16 at p's shape. */
static int hf_llama_entry_check(const st_file_t *f, const model_cfg_t *c, const hf_part_t *p, const st_entry_t *s)
{
    if (strcmp(s->dtype, "F32") && strcmp(s->dtype, "BF16") && strcmp(s->dtype, "F16"))
        return MP_FAIL("%s: key %s: dtype %s, MindPipe loads F32, BF16 and F16", f->path, s->name, s->dtype);
    int ok = s->ndim == p->ndim;
    for (int d = 0; ok && d < p->ndim; d++) ok = s->shape[d] == p->shape[d];
    if (ok) return MP_OK;
    char have[128] = "", want[64] = "";
    for (int d = 0; d < s->ndim; d++)
        snprintf(have + strlen(have), sizeof have - strlen(have), "%s%lld", d ? ", " : "", s->shape[d]);
    for (int d = 0; d < p->ndim; d++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? ", " : "", p->shape[d]);
    return MP_FAIL("%s: key %s: shape (%s), config.json's model (and the deck's: layers %d, dim %d, heads %d, kv_heads "
                   "%d, ffn_dim %d, vocab %d) needs (%s)", f->path, s->name, have, c->layers, c->dim, c->heads,
                   cfg_kv_heads(c), c->ffn_dim, c->vocab, want);
}

/* Whether f's entry s is a part of a tensor of gtab, a tied model's lm_head.weight or a rotary buffer. */
static int hf_llama_known(const param_table_t *gtab, const st_entry_t *s)
{
    const char *dot = strstr(s->name, ".rotary_emb.inv_freq");
    if (dot && !dot[strlen(".rotary_emb.inv_freq")]) return 1;
    if (!strcmp(s->name, "lm_head.weight")) return 1; /* untied: a part below; tied: hf_llama_head_check */
    hf_part_t p[HF_LLAMA_PARTS];
    for (int i = 0; i < gtab->count; i++) {
        const int k = hf_llama_parts(&gtab->cfg, &gtab->entries[i], p);
        for (int j = 0; j < k; j++)
            if (!strcmp(p[j].name, s->name)) return 1;
    }
    return 0;
}

/* A tied model's lm_head.weight, when the file has one, must be the embedding. */
static int hf_llama_head_check(const st_file_t *f, const param_table_t *gtab)
{
    const st_entry_t *h = st_find(f, "lm_head.weight"), *w = st_find(f, "model.embed_tokens.weight");
    if (gtab->cfg.untied || !h) return MP_OK;
    const param_entry_t *e = param_table_find(gtab, "wte");
    hf_part_t p;
    hf_llama_parts(&gtab->cfg, e, &p);
    if (hf_llama_entry_check(f, &gtab->cfg, &p, h) != MP_OK) return MP_ERR;
    float *a = MP_CALLOC(e->numel, sizeof *a), *b = MP_CALLOC(e->numel, sizeof *b);
    int rc = a && b ? MP_OK : MP_ERR;
    if (rc == MP_OK) rc = st_read_float(f, h, a);
    if (rc == MP_OK) rc = st_read_float(f, w, b);
    if (rc == MP_OK && memcmp(a, b, e->numel * sizeof *a))
        rc = MP_FAIL("%s: key lm_head.weight differs from model.embed_tokens.weight: an untied head, and the deck's "
                     "model.tie_embeddings is true", f->path);
    free(a), free(b);
    return rc;
}

int hf_llama_check(const char *dir, const param_table_t *gtab)
{
    char path[4200], why[256];
    if (hf_llama_fits(&gtab->cfg, why, sizeof why) != MP_OK) return MP_FAIL("--init-from hf:%s refused: %s", dir, why);
    if (hf_llama_config_check(dir, &gtab->cfg) != MP_OK) return MP_ERR;
    snprintf(path, sizeof path, "%s/" HF_WEIGHTS_FILE, dir);
    st_file_t f;
    if (st_open(path, &f) != MP_OK) return MP_ERR;
    int rc = MP_OK;
    hf_part_t p[HF_LLAMA_PARTS];
    for (int i = 0; i < gtab->count && rc == MP_OK; i++) {
        const param_entry_t *e = &gtab->entries[i];
        const int k = hf_llama_parts(&gtab->cfg, e, p);
        for (int j = 0; j < k && rc == MP_OK; j++) {
            const st_entry_t *s = st_find(&f, p[j].name);
            rc = s ? hf_llama_entry_check(&f, &gtab->cfg, &p[j], s)
                   : MP_FAIL("%s: key %s is missing (MindPipe's %s)", path, p[j].name, e->name);
        }
    }
    for (int i = 0; i < f.count && rc == MP_OK; i++)
        if (!hf_llama_known(gtab, &f.e[i]))
            rc = MP_FAIL("%s: key %s is no tensor of the deck's model (%d layers, %s head): another model's file?",
                         path, f.e[i].name, gtab->cfg.layers, gtab->cfg.untied ? "untied" : "tied");
    if (rc == MP_OK) rc = hf_llama_head_check(&f, gtab);
    st_close(&f);
    return rc;
}

int hf_llama_load(const char *dir, const param_table_t *gtab, const param_table_t *local, float *buf)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/" HF_WEIGHTS_FILE, dir);
    st_file_t f;
    if (st_open(path, &f) != MP_OK) return MP_ERR;
    size_t most = 1;
    for (int i = 0; i < gtab->count; i++) most = gtab->entries[i].numel > most ? gtab->entries[i].numel : most;
    float *canon = MP_CALLOC(most, sizeof *canon);
    int rc = canon ? MP_OK : MP_ERR;
    hf_part_t p[HF_LLAMA_PARTS];
    for (int i = 0; i < local->count && rc == MP_OK; i++) {
        const param_entry_t *e = &local->entries[i];
        const param_entry_t *g = param_table_find(gtab, e->name);
        const int k = g ? hf_llama_parts(&gtab->cfg, g, p) : 0;
        if (!g) rc = MP_FAIL("%s: MindPipe's %s is not in the canonical model (a bug)", path, e->name);
        for (int j = 0; j < k && rc == MP_OK; j++) { /* the stacked tensor, part by part, in canonical order */
            const st_entry_t *s = st_find(&f, p[j].name);
            rc = s ? st_read_float(&f, s, canon + p[j].off)
                   : MP_FAIL("%s: no tensor %s (the file changed since it was checked?)", path, p[j].name);
        }
        for (size_t j = 0; j < e->numel && rc == MP_OK; j++) { /* this rank's shard, by canonical index */
            const size_t q = param_global_index(local, e, j, local->tp_rank);
            buf[e->offset + j] = q == (size_t)-1 ? 0.0f : canon[q];
        }
    }
    free(canon);
    st_close(&f);
    return rc;
}
