/* Hugging Face's Llama directory, written and read (contract and the name table in hf_llama.h). */
#include "hf_llama.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "block_kind.h"
#include "check.h"
#include "hf_config.h"
#include "hf_gpt2.h" /* HF_WEIGHTS_FILE, HF_CONFIG_FILE */
#include "publish.h"
#include "safetensors.h"

#define HF_LLAMA_PARTS 3 /* q, k, v: the most HF tensors one of ours is made of */

/* One HF tensor of a canonical one: shape[0] of its rows from element off on (all of a vector). */
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

/* Bytes of tensor t as written. */
static uint64_t hf_out_bytes(const st_out_t *t)
{
    uint64_t n = !strcmp(t->dtype, "BF16") ? 2 : 4;
    for (int d = 0; d < t->ndim; d++) n *= (uint64_t)t->shape[d];
    return n;
}

/* The tensors t[0..n) as shards of at most max bytes (hf_llama.h) and the index naming them. */
static int hf_llama_write_shards(const char *dir, const st_out_t *t, int n, uint64_t max)
{
    int nshard = 0, *first = MP_CALLOC((size_t)n + 1, sizeof *first); /* shard s is t[first[s] .. first[s+1]) */
    if (!first) return MP_ERR;
    uint64_t at = 0, total = 0;
    for (int i = 0; i < n; i++) {
        const uint64_t b = hf_out_bytes(&t[i]);
        if (i == 0 || at + b > max) first[nshard++] = i, at = 0;
        at += b, total += b;
    }
    first[nshard] = n;
    size_t cap = 256 + (size_t)n * (ST_NAME_MAX + 64), len = 0;
    char *idx = MP_MALLOC(cap), path[4200], name[64];
    int rc = idx ? MP_OK : MP_ERR;
    if (rc == MP_OK)
        len = (size_t)snprintf(idx, cap, "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n  \"weight_map\": {",
                               (unsigned long long)total);
    for (int s = 0; s < nshard && rc == MP_OK; s++) {
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, nshard);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        rc = st_write(path, t + first[s], first[s + 1] - first[s]);
        for (int i = first[s]; i < first[s + 1] && rc == MP_OK; i++)
            len += (size_t)snprintf(idx + len, cap - len, "%s\n    \"%s\": \"%s\"", i ? "," : "", t[i].name, name);
    }
    if (rc == MP_OK) {
        snprintf(idx + len, cap - len, "\n  }\n}\n");
        snprintf(path, sizeof path, "%s/" HF_INDEX_FILE, dir);
        rc = publish_text(path, idx);
    }
    snprintf(path, sizeof path, "%s/" HF_WEIGHTS_FILE, dir);
    if (rc == MP_OK && unlink(path) != 0 && errno != ENOENT)
        rc = MP_FAIL("cannot remove %s (an earlier export's, which loaders would take instead of the shards): %s", path,
                     strerror(errno));
    free(idx), free(first);
    return rc;
}

/* The tensors t[0..n) as dir/model.safetensors, an earlier export's index removed. */
static int hf_llama_write_one(const char *dir, const st_out_t *t, int n)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/" HF_WEIGHTS_FILE, dir);
    if (st_write(path, t, n) != MP_OK) return MP_ERR;
    snprintf(path, sizeof path, "%s/" HF_INDEX_FILE, dir);
    if (unlink(path) != 0 && errno != ENOENT)
        return MP_FAIL("cannot remove %s (an earlier export's index): %s", path, strerror(errno));
    return MP_OK;
}

int hf_llama_write(const char *dir, const param_table_t *gtab, const float *buf, const char *dtype,
                   uint64_t shard_bytes)
{
    char why[256], path[4200];
    if (hf_llama_fits(&gtab->cfg, why, sizeof why) != MP_OK) return MP_FAIL("export to %s refused: %s", dir, why);
    if (strcmp(dtype, "F32") && strcmp(dtype, "BF16")) return MP_FAIL("export to %s: dtype %s (a bug)", dir, dtype);
    if (hf_mkdir(dir) != MP_OK) return MP_ERR;
    const int cap = gtab->count * HF_LLAMA_PARTS;
    st_out_t *t = MP_CALLOC((size_t)cap, sizeof *t);
    hf_part_t *parts = MP_CALLOC((size_t)cap, sizeof *parts);
    int rc = t && parts ? MP_OK : MP_ERR, n = 0;
    uint64_t total = 0;
    for (int i = 0; i < gtab->count && rc == MP_OK; i++) {
        const param_entry_t *e = &gtab->entries[i];
        const int k = hf_llama_parts(&gtab->cfg, e, parts + n);
        for (int j = 0; j < k; j++, n++) {
            t[n] = (st_out_t){.name = parts[n].name, .ndim = parts[n].ndim, .shape = {parts[n].shape[0],
                              parts[n].shape[1]}, .data = buf + e->offset + parts[n].off, .dtype = dtype};
            total += hf_out_bytes(&t[n]);
        }
    }
    if (rc == MP_OK)
        rc = shard_bytes && total > shard_bytes ? hf_llama_write_shards(dir, t, n, shard_bytes)
                                                : hf_llama_write_one(dir, t, n);
    free(parts), free(t);
    if (rc != MP_OK) return MP_ERR;
    char text[2048];
    hf_llama_config_text(&gtab->cfg, dtype, text, sizeof text);
    snprintf(path, sizeof path, "%s/" HF_CONFIG_FILE, dir);
    return publish_text(path, text);
}

/* ---- the weights of a directory: model.safetensors, or the shards its index names ---- */

typedef struct {
    int nfiles;
    st_file_t *f;      /* each file's header, read and checked by st_open */
    hf_map_t *map;     /* sharded: the index's weight_map; NULL: one file */
    int *shard;        /* map[i]'s file, an index into f */
    int nmap;
    char index[4200];  /* the index's path, for messages */
} hf_src_t;

static void hf_src_close(hf_src_t *s)
{
    for (int i = 0; i < s->nfiles; i++) st_close(&s->f[i]);
    free(s->f), free(s->map), free(s->shard);
    memset(s, 0, sizeof *s);
}

static int hf_exists(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0;
}

/* Each shard the index names opened once (a plain file name in dir: no path), map[i]'s in shard[i]. */
static int hf_src_shards(const char *dir, hf_src_t *s)
{
    char path[4600];
    s->f = MP_CALLOC((size_t)s->nmap + 1, sizeof *s->f);
    s->shard = MP_CALLOC((size_t)s->nmap + 1, sizeof *s->shard);
    if (!s->f || !s->shard) return MP_ERR;
    for (int i = 0; i < s->nmap; i++) {
        const char *fn = s->map[i].file;
        int k = 0;
        while (k < s->nfiles && strcmp(strrchr(s->f[k].path, '/') + 1, fn)) k++;
        s->shard[i] = k;
        if (k < s->nfiles) continue;
        if (!fn[0] || strchr(fn, '/') || !strcmp(fn, ".") || !strcmp(fn, ".."))
            return MP_FAIL("%s: tensor %s's shard is \"%s\": a shard is a file name in the model's directory",
                           s->index, s->map[i].name, fn);
        snprintf(path, sizeof path, "%s/%s", dir, fn);
        if (!hf_exists(path))
            return MP_FAIL("%s: tensor %s is in shard %s, and %s does not exist", s->index, s->map[i].name, fn, path);
        if (st_open(path, &s->f[s->nfiles]) != MP_OK) return MP_ERR;
        s->nfiles++;
    }
    /* the index and the shards agree: each tensor it maps is in its shard, each tensor of a shard is
     * mapped there (a tensor in two shards is so refused in the one the index does not name) */
    for (int i = 0; i < s->nmap; i++)
        if (!st_find(&s->f[s->shard[i]], s->map[i].name))
            return MP_FAIL("%s: key %s is missing (%s maps it to this shard)", s->f[s->shard[i]].path, s->map[i].name,
                           s->index);
    for (int k = 0; k < s->nfiles; k++)
        for (int j = 0; j < s->f[k].count; j++) {
            int i = 0;
            while (i < s->nmap && strcmp(s->map[i].name, s->f[k].e[j].name)) i++;
            if (i == s->nmap || s->shard[i] != k)
                return MP_FAIL("%s: key %s is here, and %s %s%s", s->f[k].path, s->f[k].e[j].name, s->index,
                               i == s->nmap ? "does not name it" : "maps it to ", i == s->nmap ? "" : s->map[i].file);
        }
    return MP_OK;
}

/* dir's weights: model.safetensors, or model.safetensors.index.json and its shards (never both: a
 * loader's choice between them would be a guess). MP_OK, or MP_ERR naming the file at fault. */
static int hf_src_open(const char *dir, hf_src_t *s_p)
{
    hf_src_t s = {0};
    char one[4200];
    snprintf(one, sizeof one, "%s/" HF_WEIGHTS_FILE, dir);
    snprintf(s.index, sizeof s.index, "%s/" HF_INDEX_FILE, dir);
    const int single = hf_exists(one), sharded = hf_exists(s.index);
    if (single && sharded)
        return MP_FAIL("%s holds both " HF_WEIGHTS_FILE " and " HF_INDEX_FILE ": which is the model? (remove the other)",
                       dir);
    if (!sharded) {
        if (!(s.f = MP_CALLOC(1, sizeof *s.f))) return MP_ERR;
        if (st_open(one, &s.f[0]) != MP_OK) return free(s.f), MP_ERR;
        s.nfiles = 1;
        *s_p = s;
        return MP_OK;
    }
    if (hf_index_read(s.index, &s.map, &s.nmap) != MP_OK || hf_src_shards(dir, &s) != MP_OK) {
        hf_src_close(&s);
        return MP_ERR;
    }
    *s_p = s;
    return MP_OK;
}

/* The entry called name, its file in *f_p; NULL if none. */
static const st_entry_t *hf_src_find(const hf_src_t *s, const char *name, const st_file_t **f_p)
{
    int k = 0;
    if (s->map) {
        int i = 0;
        while (i < s->nmap && strcmp(s->map[i].name, name)) i++;
        if (i == s->nmap) return NULL;
        k = s->shard[i];
    }
    *f_p = &s->f[k];
    return st_find(&s->f[k], name);
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

/* A tied model's lm_head.weight, when the files have one, must be the embedding. */
static int hf_llama_head_check(const hf_src_t *src, const param_table_t *gtab)
{
    const st_file_t *fh = NULL, *fw = NULL;
    const st_entry_t *h = hf_src_find(src, "lm_head.weight", &fh), *w = hf_src_find(src, "model.embed_tokens.weight", &fw);
    if (gtab->cfg.untied || !h) return MP_OK;
    const param_entry_t *e = param_table_find(gtab, "wte");
    hf_part_t p;
    hf_llama_parts(&gtab->cfg, e, &p);
    if (hf_llama_entry_check(fh, &gtab->cfg, &p, h) != MP_OK) return MP_ERR;
    float *a = MP_CALLOC(e->numel, sizeof *a), *b = MP_CALLOC(e->numel, sizeof *b);
    int rc = a && b ? MP_OK : MP_ERR;
    if (rc == MP_OK) rc = st_read_float(fh, h, a);
    if (rc == MP_OK) rc = st_read_float(fw, w, b);
    if (rc == MP_OK && memcmp(a, b, e->numel * sizeof *a))
        rc = MP_FAIL("%s: key lm_head.weight differs from model.embed_tokens.weight: an untied head, and the deck's "
                     "model.tie_embeddings is true", fh->path);
    free(a), free(b);
    return rc;
}

int hf_llama_check(const char *dir, const param_table_t *gtab)
{
    char why[256];
    if (hf_llama_fits(&gtab->cfg, why, sizeof why) != MP_OK) return MP_FAIL("--init-from hf:%s refused: %s", dir, why);
    if (hf_llama_config_check(dir, &gtab->cfg) != MP_OK) return MP_ERR;
    hf_src_t src;
    if (hf_src_open(dir, &src) != MP_OK) return MP_ERR;
    int rc = MP_OK;
    hf_part_t p[HF_LLAMA_PARTS];
    for (int i = 0; i < gtab->count && rc == MP_OK; i++) {
        const param_entry_t *e = &gtab->entries[i];
        const int k = hf_llama_parts(&gtab->cfg, e, p);
        for (int j = 0; j < k && rc == MP_OK; j++) {
            const st_file_t *f = &src.f[0];
            const st_entry_t *s = hf_src_find(&src, p[j].name, &f);
            rc = s ? hf_llama_entry_check(f, &gtab->cfg, &p[j], s)
                   : MP_FAIL("%s: key %s is missing (MindPipe's %s)", src.map ? src.index : f->path, p[j].name,
                             e->name);
        }
    }
    for (int k = 0; k < src.nfiles && rc == MP_OK; k++)
        for (int i = 0; i < src.f[k].count && rc == MP_OK; i++)
            if (!hf_llama_known(gtab, &src.f[k].e[i]))
                rc = MP_FAIL("%s: key %s is no tensor of the deck's model (%d layers, %s head): another model's file?",
                             src.f[k].path, src.f[k].e[i].name, gtab->cfg.layers, gtab->cfg.untied ? "untied" : "tied");
    if (rc == MP_OK) rc = hf_llama_head_check(&src, gtab);
    hf_src_close(&src);
    return rc;
}

int hf_llama_load(const char *dir, const param_table_t *gtab, const param_table_t *local, float *buf)
{
    hf_src_t src;
    if (hf_src_open(dir, &src) != MP_OK) return MP_ERR;
    size_t most = 1;
    for (int i = 0; i < gtab->count; i++) most = gtab->entries[i].numel > most ? gtab->entries[i].numel : most;
    float *canon = MP_CALLOC(most, sizeof *canon);
    int rc = canon ? MP_OK : MP_ERR;
    hf_part_t p[HF_LLAMA_PARTS];
    for (int i = 0; i < local->count && rc == MP_OK; i++) {
        const param_entry_t *e = &local->entries[i];
        const param_entry_t *g = param_table_find(gtab, e->name);
        const int k = g ? hf_llama_parts(&gtab->cfg, g, p) : 0;
        if (!g) rc = MP_FAIL("%s: MindPipe's %s is not in the canonical model (a bug)", dir, e->name);
        for (int j = 0; j < k && rc == MP_OK; j++) { /* the stacked tensor, part by part, in canonical order */
            const st_file_t *f = &src.f[0];
            const st_entry_t *s = hf_src_find(&src, p[j].name, &f);
            rc = s ? st_read_float(f, s, canon + p[j].off)
                   : MP_FAIL("%s: no tensor %s (the files changed since they were checked?)", dir, p[j].name);
        }
        for (size_t j = 0; j < e->numel && rc == MP_OK; j++) { /* this rank's shard, by canonical index */
            const size_t q = param_global_index(local, e, j, local->tp_rank);
            buf[e->offset + j] = q == (size_t)-1 ? 0.0f : canon[q];
        }
    }
    free(canon);
    hf_src_close(&src);
    return rc;
}
