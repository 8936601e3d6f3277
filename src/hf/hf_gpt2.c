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
        snprintf(why_p, n, "model.arch=%s is no GPT2LMHeadModel: the Hugging Face export and import of llama "
                 "(LlamaForCausalLM) are not built yet (issue 48)", block_kind_of(cfg)->name);
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

/* dir and its parents, as mkdir -p. */
static int hf_mkdir(const char *dir)
{
    char p[4096];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) return MP_FAIL("%s: path too long", dir);
    for (char *s = p + 1;; s++) {
        if (*s && *s != '/') continue;
        const char c = *s;
        *s = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) return MP_FAIL("cannot create %s: %s", p, strerror(errno));
        *s = c;
        if (!c) break;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return MP_FAIL("%s is not a directory", dir);
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

/* ---- config.json: the top-level keys of a JSON object, their values where they are scalars ----
 * The reader is strict where Python's json (what Hugging Face reads it with) is, so that what
 * MindPipe checks is what the model is loaded as: UTF-8 text, RFC 8259's grammar (no "+1", "01",
 * ".5", NaN, no trailing comma), and unlike Python no key given twice (Python keeps the last one,
 * other readers the first: a file that means two models to two readers is refused). */

#define HF_CONFIG_MAX (1u << 20) /* a GPT-2 config.json is about 1 kB: a bound against reading a wrong file */
#define HF_KEYS_MAX 256
#define HF_DEPTH_MAX 64
#define HF_INT_MAX 2147483647.0 /* the deck's sizes are ints */

/* One top-level key: its value's kind ('n' number, 's' string, 'z' null, 't' true, 'f' false, 'o' an
 * array or object, which no check reads), the value; a number's text in str and whether it is written
 * as an integer (no fraction, no exponent: what Python's json gives an int). */
typedef struct {
    char key[256];
    char kind;
    int integral;
    double num;
    char str[64]; /* a string cut to fit (no value a check reads is long), or a number's text */
} hf_val_t;

typedef struct {
    const char *s, *s0, *end, *path;
} hf_json_t;

static void hf_ws(hf_json_t *j)
{
    while (j->s < j->end && (*j->s == ' ' || *j->s == '\t' || *j->s == '\n' || *j->s == '\r')) j->s++;
}

static int hf_bad(const hf_json_t *j, const char *what)
{
    return MP_FAIL("%s: malformed JSON at byte %ld: %s", j->path, (long)(j->s - j->s0), what);
}

/* The offset of the first byte of s[0..n) that does not belong to well-formed UTF-8 (RFC 3629: no
 * overlong forms, no surrogates, nothing above U+10FFFF), or n. */
static size_t hf_utf8_bad(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        const unsigned c = s[i];
        unsigned lo = 0x80, hi = 0xbf;
        size_t k;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf) k = 1;
        else if (c == 0xe0) k = 2, lo = 0xa0;
        else if (c == 0xed) k = 2, hi = 0x9f;
        else if (c >= 0xe1 && c <= 0xef) k = 2;
        else if (c == 0xf0) k = 3, lo = 0x90;
        else if (c == 0xf4) k = 3, hi = 0x8f;
        else if (c >= 0xf1 && c <= 0xf3) k = 3;
        else return i;
        if (k > n - i - 1 || s[i + 1] < lo || s[i + 1] > hi) return i;
        for (size_t m = 2; m <= k; m++)
            if ((s[i + m] & 0xc0) != 0x80) return i;
        i += k + 1;
    }
    return n;
}

/* A JSON string into out (n bytes, cut to fit; *cut_p says whether it was). A \\u escape outside
 * ASCII and any control character an escape makes become '?', which no expected value contains
 * and which messages can print. */
static int hf_string(hf_json_t *j, char *out, size_t n, int *cut_p)
{
    size_t k = 0;
    *cut_p = 0;
    if (j->s >= j->end || *j->s != '"') return hf_bad(j, "expected a string");
    for (j->s++; j->s < j->end && *j->s != '"'; j->s++) {
        char c = *j->s;
        if ((unsigned char)c < 0x20) return hf_bad(j, "a control character in a string");
        if (c == '\\') {
            if (++j->s >= j->end) break;
            const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t", *p = *j->s ? strchr(from, *j->s) : NULL;
            if (*j->s == 'u') {
                unsigned v = 0;
                for (int i = 0; i < 4; i++) {
                    const char h = ++j->s < j->end ? *j->s : 0;
                    if (!h || !strchr("0123456789abcdefABCDEF", h)) return hf_bad(j, "a bad \\u escape");
                    v = v * 16 + (unsigned)(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
                }
                c = v >= 0x20 && v < 0x80 ? (char)v : '?';
            } else if (p) {
                c = (unsigned char)to[p - from] < 0x20 ? '?' : to[p - from];
            } else {
                return hf_bad(j, "a bad escape");
            }
        }
        if (k + 1 < n) out[k++] = c;
        else *cut_p = 1;
    }
    if (j->s >= j->end) return hf_bad(j, "an unterminated string");
    j->s++;
    out[k] = 0;
    return MP_OK;
}

/* The digits [0-9]+ at j->s: MP_OK if there is at least one. */
static int hf_digits(hf_json_t *j)
{
    const char *d = j->s;
    while (j->s < j->end && *j->s >= '0' && *j->s <= '9') j->s++;
    return j->s > d ? MP_OK : MP_ERR;
}

/* true, false, null or a number at j->s into x (kind; a number's value, text, integral), by RFC
 * 8259's grammar exactly. */
static int hf_scalar(hf_json_t *j, hf_val_t *x)
{
    static const char *const lit[3] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        const size_t k = strlen(lit[i]);
        if ((size_t)(j->end - j->s) >= k && !memcmp(j->s, lit[i], k)) {
            j->s += k;
            x->kind = "tfz"[i];
            return MP_OK;
        }
    }
    const char *s0 = j->s;
    if (j->s < j->end && *j->s == '-') j->s++;
    if (j->s < j->end && *j->s == '0') j->s++;
    else if (j->s >= j->end || *j->s < '1' || *j->s > '9') return j->s = s0, hf_bad(j, "expected a value");
    else hf_digits(j);
    x->integral = 1;
    if (j->s < j->end && *j->s == '.') {
        j->s++, x->integral = 0;
        if (hf_digits(j) != MP_OK) return hf_bad(j, "a number without digits after its '.'");
    }
    if (j->s < j->end && (*j->s == 'e' || *j->s == 'E')) {
        j->s++, x->integral = 0;
        if (j->s < j->end && (*j->s == '+' || *j->s == '-')) j->s++;
        if (hf_digits(j) != MP_OK) return hf_bad(j, "a number without digits in its exponent");
    }
    char text[128];
    const size_t len = (size_t)(j->s - s0);
    if (len >= sizeof text) return j->s = s0, hf_bad(j, "a number of more than 127 characters");
    memcpy(text, s0, len);
    text[len] = 0;
    x->kind = 'n';
    x->num = strtod(text, NULL);
    if (!isfinite(x->num)) return j->s = s0, hf_bad(j, "a number beyond a double's range");
    snprintf(x->str, sizeof x->str, "%.*s", (int)sizeof x->str - 1, text);
    return MP_OK;
}

static int hf_value(hf_json_t *j, int depth, hf_val_t *x);

/* The array or object at j->s, every member checked by the grammar (depth: how deep it is). */
static int hf_container(hf_json_t *j, int depth)
{
    const char close = *j->s == '[' ? ']' : '}';
    if (depth >= HF_DEPTH_MAX) return hf_bad(j, "nested more than 64 deep");
    j->s++;
    hf_ws(j);
    if (j->s < j->end && *j->s == close) return j->s++, MP_OK;
    for (;;) {
        hf_val_t member = {.kind = 'o'};
        int cut;
        hf_ws(j);
        if (close == '}') {
            if (hf_string(j, member.str, sizeof member.str, &cut) != MP_OK) return MP_ERR;
            hf_ws(j);
            if (j->s >= j->end || *j->s != ':') return hf_bad(j, "expected ':'");
            j->s++;
        }
        if (hf_value(j, depth + 1, &member) != MP_OK) return MP_ERR;
        hf_ws(j);
        if (j->s < j->end && *j->s == ',') j->s++;
        else if (j->s < j->end && *j->s == close) return j->s++, MP_OK;
        else return hf_bad(j, close == ']' ? "expected ',' or ']'" : "expected ',' or '}'");
    }
}

/* Any JSON value at j->s (after white space) into x; arrays and objects are checked, kind 'o'. */
static int hf_value(hf_json_t *j, int depth, hf_val_t *x)
{
    int cut;
    hf_ws(j);
    if (j->s >= j->end) return hf_bad(j, "the file ends where a value should be");
    if (*j->s == '"') return x->kind = 's', hf_string(j, x->str, sizeof x->str, &cut);
    if (*j->s == '[' || *j->s == '{') return x->kind = 'o', hf_container(j, depth);
    return hf_scalar(j, x);
}

/* path's whole text into a malloc'd *buf_p (*n_p bytes): a regular file of at most HF_CONFIG_MAX
 * bytes, UTF-8. MP_OK, or MP_ERR naming path and what is wrong. */
static int hf_config_text_read(const char *path, char **buf_p, size_t *n_p)
{
    char why[160];
    uint64_t size = 0;
    const int fd = publish_open_regular(path, O_RDONLY, &size, why, sizeof why); /* a planted FIFO: refused */
    if (fd < 0)
        return MP_FAIL("%s: %s%s", path, why,
                       errno == ENOENT ? " (a Hugging Face model directory has one: it says which model the weights are)"
                                       : "");
    if (size > HF_CONFIG_MAX)
        return close(fd), MP_FAIL("%s: %llu bytes, longer than 1 MiB: not a GPT-2 config.json (about 1 kB)", path,
                                  (unsigned long long)size);
    const size_t n = (size_t)size;
    char *buf = MP_MALLOC(n + 1);
    size_t got = 0;
    for (ssize_t k = 1; buf && got < n && k > 0; got += k > 0 ? (size_t)k : 0) k = read(fd, buf + got, n - got);
    close(fd);
    if (!buf) return MP_ERR;
    if (got != n) return free(buf), MP_FAIL("%s: read %zu of its %zu bytes", path, got, n);
    const size_t bad = hf_utf8_bad((const unsigned char *)buf, n);
    if (bad < n) {
        const unsigned byte = (unsigned char)buf[bad];
        free(buf);
        return MP_FAIL("%s: byte %zu (0x%02x) is not UTF-8: JSON is UTF-8 text", path, bad, byte);
    }
    *buf_p = buf, *n_p = n;
    return MP_OK;
}

/* path's top-level keys into v (HF_KEYS_MAX), their count into *n_p. MP_OK, or MP_ERR naming path. */
static int hf_config_read(const char *path, hf_val_t *v, int *n_p)
{
    char *buf;
    size_t len;
    if (hf_config_text_read(path, &buf, &len) != MP_OK) return MP_ERR;
    hf_json_t j = {buf, buf, buf + len, path};
    int n = 0, rc = MP_OK, cut;
    hf_ws(&j);
    if (j.s >= j.end || *j.s != '{') rc = hf_bad(&j, "expected '{' (config.json is one object)");
    else j.s++;
    for (int first = 1; rc == MP_OK; first = 0) {
        hf_ws(&j);
        if (j.s < j.end && *j.s == '}' && first) break;
        hf_val_t x = {.kind = 'o'};
        const char *k0 = j.s;
        if ((rc = hf_string(&j, x.key, sizeof x.key, &cut)) != MP_OK) break;
        if (cut) {
            j.s = k0;
            rc = hf_bad(&j, "a key of more than 255 bytes: not a GPT-2 config.json");
            break;
        }
        for (int i = 0; i < n && rc == MP_OK; i++)
            if (!strcmp(v[i].key, x.key))
                rc = MP_FAIL("%s: key %s is given twice: which one counts depends on the reader (Python's json takes "
                             "the last): refused as ambiguous", path, x.key);
        hf_ws(&j);
        if (rc == MP_OK && (j.s >= j.end || *j.s != ':')) rc = hf_bad(&j, "expected ':'");
        if (rc != MP_OK) break;
        j.s++;
        if ((rc = hf_value(&j, 1, &x)) != MP_OK) break;
        if (n == HF_KEYS_MAX) {
            rc = MP_FAIL("%s: more than %d keys: not a GPT-2 config.json", path, HF_KEYS_MAX);
            break;
        }
        v[n++] = x;
        hf_ws(&j);
        if (j.s < j.end && *j.s == ',') j.s++;
        else if (j.s < j.end && *j.s == '}') break;
        else rc = hf_bad(&j, "expected ',' or '}'");
    }
    if (rc == MP_OK) {
        j.s++;
        hf_ws(&j);
        if (j.s != j.end) rc = hf_bad(&j, "text after the object");
    }
    free(buf);
    *n_p = n;
    return rc;
}

static const hf_val_t *hf_key(const hf_val_t *v, int n, const char *key)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(v[i].key, key)) return &v[i]; /* one at most: hf_config_read refuses a key twice */
    return NULL;
}

/* x's value as a message shows it: a number's text, a string quoted, null, true, false, or what it is. */
static const char *hf_what(const hf_val_t *x, char *buf, size_t n)
{
    if (x->kind == 'n') snprintf(buf, n, "%s", x->str);
    else if (x->kind == 's') snprintf(buf, n, "the string \"%s\"", x->str);
    else snprintf(buf, n, "%s", x->kind == 'z' ? "null" : x->kind == 't' ? "true" : x->kind == 'f' ? "false" :
                                                                                        "an array or object");
    return buf;
}

/* Key key of path, an integer of at most 2^31 - 1 in magnitude (written as one: "2", not "2.0"), into
 * *x_p; MP_ERR naming the key and what it is when it is missing or no such integer. */
static int hf_int(const char *path, const hf_val_t *v, int n, const char *key, long *x_p)
{
    const hf_val_t *x = hf_key(v, n, key);
    char w[96];
    if (!x) return MP_FAIL("%s: key %s is missing (the deck's model cannot be checked against it)", path, key);
    if (x->kind != 'n' || !x->integral)
        return MP_FAIL("%s: key %s is %s, not an integer", path, key, hf_what(x, w, sizeof w));
    if (fabs(x->num) > HF_INT_MAX)
        return MP_FAIL("%s: key %s is %s, beyond any model's size (2^31 - 1 at most)", path, key, x->str);
    *x_p = (long)x->num;
    return MP_OK;
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
