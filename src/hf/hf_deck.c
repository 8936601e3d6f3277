/* config.json's model keys as deck values (contract and table in hf_deck.h). */
#include "hf_deck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "hf_config.h"
#include "hf_gpt2.h"

/* One import: deck key, value, its other spelling, the file's key and what the file says. */
static void hf_deck_add(deck_imports_t *imp, const char *key, const char *value, const char *same, const char *from,
                        const char *shown)
{
    if (imp->n == DECK_IMPORTS_MAX) MP_ABORT("hf_deck: more than %d imports", DECK_IMPORTS_MAX);
    deck_import_t *x = &imp->v[imp->n++];
    snprintf(x->key, sizeof x->key, "%s", key);
    snprintf(x->value, sizeof x->value, "%s", value);
    snprintf(x->same, sizeof x->same, "%s", same);
    snprintf(x->from, sizeof x->from, "%s", from);
    snprintf(x->shown, sizeof x->shown, "%s", shown);
}

/* The context: model.seq_len, where the deck does not set it, from the file's key from (a deck's own
 * is kept: GPT-2 loads wpe's first model.seq_len rows, and llama's rotary positions have no table). */
static void hf_deck_context(deck_imports_t *imp, const hf_val_t *x, const char *from)
{
    if (!x || x->kind != 'n' || !x->integral || x->num < 1 || x->num > 2147483647.0) return;
    hf_deck_add(imp, "model.seq_len", x->str, "", from, x->str);
    imp->v[imp->n - 1].fill = 1;
}

/* x, an integer of the deck's range written as one (what hf_int accepts), or NULL. */
static const hf_val_t *hf_deck_int(const hf_val_t *x)
{
    return x && x->kind == 'n' && x->integral && fabs(x->num) <= 2147483647.0 ? x : NULL;
}

/* The integer keys of one family: each, when an integer, imported with its own text. */
static void hf_deck_ints(deck_imports_t *imp, const hf_val_t *v, int n, const char *const (*map)[2], int nmap)
{
    for (int i = 0; i < nmap; i++) {
        const hf_val_t *x = hf_deck_int(hf_key(v, n, map[i][0]));
        if (x) hf_deck_add(imp, map[i][1], x->str, "", map[i][0], x->str);
    }
}

/* A number or a switch of a llama config, absent: LlamaConfig's default (dflt, as text). */
static void hf_deck_llama_num(deck_imports_t *imp, const hf_val_t *v, int n, const char *from, const char *key,
                              const char *dflt)
{
    const hf_val_t *x = hf_key(v, n, from);
    char shown[160], val[64];
    if (!x) {
        snprintf(shown, sizeof shown, "absent (LlamaConfig's default, %s)", dflt);
        hf_deck_add(imp, key, dflt, "", from, shown);
    } else if (x->kind == 'n') {
        snprintf(shown, sizeof shown, "%g", x->num);
        snprintf(val, sizeof val, "%s", x->str);
        hf_deck_add(imp, key, val, "", from, shown);
    } else if (x->kind == 't' || x->kind == 'f') {
        hf_deck_add(imp, key, x->kind == 't' ? "true" : "false", "", from, x->kind == 't' ? "true" : "false");
    }
}

static void hf_deck_llama(deck_imports_t *imp, const hf_val_t *v, int n)
{
    static const char *const ints[][2] = {{"num_hidden_layers", "model.layers"}, {"hidden_size", "model.dim"},
                                          {"num_attention_heads", "model.heads"},
                                          {"intermediate_size", "model.ffn_dim"}, {"vocab_size", "model.vocab"}};
    hf_deck_add(imp, "model.arch", "llama", "", "model_type", "the string \"llama\"");
    hf_deck_ints(imp, v, n, ints, (int)(sizeof ints / sizeof ints[0]));
    /* model.kv_heads 0 means model.heads: the same model as num_key_value_heads = num_attention_heads */
    const hf_val_t *kv = hf_key(v, n, "num_key_value_heads"), *h = hf_deck_int(hf_key(v, n, "num_attention_heads"));
    char shown[160];
    if (hf_deck_int(kv))
        hf_deck_add(imp, "model.kv_heads", kv->str, h && h->num == kv->num ? "0" : "", "num_key_value_heads", kv->str);
    else if ((!kv || kv->kind == 'z') && h) {
        snprintf(shown, sizeof shown, "%s (num_attention_heads, %s)", kv ? "null" : "absent", h->str);
        hf_deck_add(imp, "model.kv_heads", h->str, "0", "num_key_value_heads", shown);
    }
    hf_deck_llama_num(imp, v, n, "rope_theta", "model.rope_theta", "10000");
    hf_deck_llama_num(imp, v, n, "rms_norm_eps", "model.norm_eps", "1e-6");
    hf_deck_llama_num(imp, v, n, "tie_word_embeddings", "model.tie_embeddings", "false");
    hf_deck_context(imp, hf_key(v, n, "max_position_embeddings"), "max_position_embeddings");
}

static void hf_deck_gpt2(deck_imports_t *imp, const hf_val_t *v, int n)
{
    static const char *const ints[][2] = {{"n_layer", "model.layers"}, {"n_embd", "model.dim"},
                                          {"n_head", "model.heads"}, {"vocab_size", "model.vocab"}};
    hf_deck_add(imp, "model.arch", "gpt2", "", "model_type", "the string \"gpt2\"");
    hf_deck_ints(imp, v, n, ints, (int)(sizeof ints / sizeof ints[0]));
    /* n_inner null (or absent) is 4 · n_embd; another width a whole multiple of n_embd is a ratio */
    const hf_val_t *in = hf_key(v, n, "n_inner"), *c = hf_deck_int(hf_key(v, n, "n_embd"));
    char shown[160], val[64];
    if (!in || in->kind == 'z') {
        snprintf(shown, sizeof shown, "%s (4 * n_embd)", in ? "null" : "absent");
        hf_deck_add(imp, "model.mlp_ratio", "4", "", "n_inner", shown);
    } else if (hf_deck_int(in) && c && c->num > 0 && fmod(in->num, c->num) == 0 && in->num > 0) {
        snprintf(val, sizeof val, "%.0f", in->num / c->num);
        snprintf(shown, sizeof shown, "%s (%s * n_embd)", in->str, val);
        hf_deck_add(imp, "model.mlp_ratio", val, "", "n_inner", shown);
    }
    hf_deck_context(imp, hf_key(v, n, "n_positions"), "n_positions");
}

int hf_deck_imports(const char *dir, deck_imports_t *imp)
{
    memset(imp, 0, sizeof *imp);
    snprintf(imp->source, sizeof imp->source, "%s/" HF_CONFIG_FILE, dir);
    hf_val_t *v = MP_CALLOC(HF_KEYS_MAX, sizeof *v);
    int n = 0;
    if (!v || hf_config_read(imp->source, v, &n) != MP_OK) return free(v), MP_ERR;
    const hf_val_t *t = hf_key(v, n, "model_type");
    if (t && t->kind == 's' && !strcmp(t->str, "llama")) hf_deck_llama(imp, v, n);
    else if (t && t->kind == 's' && !strcmp(t->str, "gpt2")) hf_deck_gpt2(imp, v, n);
    free(v);
    return MP_OK;
}
