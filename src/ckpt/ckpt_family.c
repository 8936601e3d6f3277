/* The model family in a checkpoint's /state (ckpt_family.h). */
#include "ckpt_family.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block_kind.h"
#include "check.h"
#include "deck.h"
#include "h5util.h"

ckpt_family_t ckpt_family_of(const model_cfg_t *cfg)
{
    const int llama = cfg->arch == ARCH_LLAMA;
    return (ckpt_family_t){.arch = cfg->arch, .kv_heads = cfg_kv_heads(cfg), .ffn_dim = cfg->ffn_dim,
                           .tie_embeddings = !cfg->untied, .rope_theta = llama ? cfg->rope_theta : 0.0f,
                           .norm_eps = llama ? cfg->norm_eps : 0.0f};
}

void ckpt_family_apply(const ckpt_family_t *f, model_cfg_t *cfg)
{
    cfg->arch = f->arch;
    cfg->kv_heads = f->kv_heads;
    cfg->ffn_dim = f->ffn_dim;
    cfg->rope_theta = f->rope_theta;
    cfg->norm_eps = f->norm_eps;
    cfg->untied = !f->tie_embeddings;
}

static const char *family_name(model_arch_t arch) { return block_kind_of(&(model_cfg_t){.arch = arch})->name; }

/* x as a message shows it: the shortest of %.7g and %.9g that tells a and b apart. */
static void float_text(float x, float other, char *out, size_t n)
{
    char a[32], b[32];
    snprintf(a, sizeof a, "%.7g", (double)x);
    snprintf(b, sizeof b, "%.7g", (double)other);
    snprintf(out, n, strcmp(a, b) || x == other ? "%.7g" : "%.9g", (double)x);
}

int ckpt_family_differs(const ckpt_family_t *have, const ckpt_family_t *want, const char *who, char *why_p, size_t n)
{
    if (have->arch != want->arch)
        return snprintf(why_p, n, "model.arch=%s, %s says %s", family_name(have->arch), who, family_name(want->arch)), 1;
    const struct {
        const char *key;
        int have, want;
    } ints[] = {{"kv_heads", have->kv_heads, want->kv_heads},
                {"ffn_dim", have->ffn_dim, want->ffn_dim},
                {"tie_embeddings", have->tie_embeddings, want->tie_embeddings}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (ints[i].have != ints[i].want)
            return snprintf(why_p, n, "model.%s=%d, %s says %d", ints[i].key, ints[i].have, who, ints[i].want), 1;
    if (have->arch != ARCH_LLAMA) return 0;
    const struct {
        const char *key;
        float have, want;
    } floats[] = {{"rope_theta", have->rope_theta, want->rope_theta}, {"norm_eps", have->norm_eps, want->norm_eps}};
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++)
        if (floats[i].have != floats[i].want) {
            char h[32], w[32];
            float_text(floats[i].have, floats[i].want, h, sizeof h);
            float_text(floats[i].want, floats[i].have, w, sizeof w);
            return snprintf(why_p, n, "model.%s=%s, %s says %s", floats[i].key, h, who, w), 1;
        }
    return 0;
}

/* x within model.key's deck range: MP_OK, or MP_ERR with why. */
static int family_in_range(const char *key, double x, char *why_p, size_t n)
{
    double lo = 0, hi = 0;
    if (deck_key_range("model", key, &lo, &hi) == MP_OK && x >= lo && x <= hi) return MP_OK;
    return snprintf(why_p, n, "/state has %s %g, outside model.%s's range %g to %g", key, x, key, lo, hi), MP_ERR;
}

int ckpt_family_valid(const ckpt_family_t *f, int heads, char *why_p, size_t n)
{
    if (f->kv_heads < 1 || heads % f->kv_heads)
        return snprintf(why_p, n, "/state has kv_heads %d, which does not divide its heads %d", f->kv_heads, heads),
               MP_ERR;
    if (family_in_range("kv_heads", f->kv_heads, why_p, n) != MP_OK ||
        family_in_range("ffn_dim", f->ffn_dim, why_p, n) != MP_OK)
        return MP_ERR;
    if (f->tie_embeddings != 0 && f->tie_embeddings != 1)
        return snprintf(why_p, n, "/state has tie_embeddings %d, not 0 or 1", f->tie_embeddings), MP_ERR;
    if (f->arch != ARCH_LLAMA) return MP_OK;
    if (!(f->ffn_dim > 0 && f->rope_theta > 0.0f && f->norm_eps > 0.0f) || !isfinite(f->rope_theta) ||
        !isfinite(f->norm_eps))
        return snprintf(why_p, n, "/state has arch llama with ffn_dim %d, rope_theta %g, norm_eps %g: a llama model has "
                        "each positive (and finite)", f->ffn_dim, (double)f->rope_theta, (double)f->norm_eps), MP_ERR;
    return MP_OK;
}

void ckpt_family_text(const ckpt_family_t *f, char *out_p, size_t n)
{
    if (f->arch != ARCH_LLAMA) {
        snprintf(out_p, n, "arch=%s", family_name(f->arch));
        return;
    }
    snprintf(out_p, n, "arch=%s kv_heads=%d ffn_dim=%d rope_theta=%.7g norm_eps=%.7g tie_embeddings=%d",
             family_name(f->arch), f->kv_heads, f->ffn_dim, (double)f->rope_theta, (double)f->norm_eps,
             f->tie_embeddings);
}

int ckpt_family_write(hid_t g, const ckpt_family_t *f, const char *where)
{
    if (h5_attr_write_string(g, "arch", family_name(f->arch), where) != MP_OK ||
        h5_attr_write(g, "kv_heads", H5T_STD_I32LE, H5T_NATIVE_INT, &f->kv_heads, where) != MP_OK ||
        h5_attr_write(g, "ffn_dim", H5T_STD_I32LE, H5T_NATIVE_INT, &f->ffn_dim, where) != MP_OK ||
        h5_attr_write(g, "tie_embeddings", H5T_STD_I32LE, H5T_NATIVE_INT, &f->tie_embeddings, where) != MP_OK)
        return MP_ERR;
    if (f->arch != ARCH_LLAMA) return MP_OK; /* gpt2 has neither */
    if (h5_attr_write(g, "rope_theta", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, &f->rope_theta, where) != MP_OK ||
        h5_attr_write(g, "norm_eps", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, &f->norm_eps, where) != MP_OK)
        return MP_ERR;
    return MP_OK;
}

/* A numeric attribute into *x: left as it is when absent. MP_OK, or MP_ERR with why. */
static int family_get(hid_t g, const char *name, hid_t mem_type, void *x, char *why_p, size_t n)
{
    char why[300];
    if (h5_attr_get(g, name, mem_type, x, why, sizeof why) != MP_ERR) return MP_OK;
    return snprintf(why_p, n, "/state %s %s", name, why), MP_ERR;
}

int ckpt_family_read(hid_t g, int heads, ckpt_family_t *f_p, char *why_p, size_t n)
{
    ckpt_family_t f = {.arch = ARCH_GPT2, .kv_heads = heads, .ffn_dim = 0, .tie_embeddings = 1};
    char *name = NULL, why[300];
    const int has = h5_attr_get_alloc(g, "arch", &name, why, sizeof why);
    if (has == MP_ERR) return snprintf(why_p, n, "/state arch %s", why), MP_ERR;
    if (has == 1 && !block_kind_named(name, &f.arch)) {
        char shown[80];
        deck_text_show(name, shown, sizeof shown);
        snprintf(why_p, n, "/state has arch '%s', not a model family this build knows (model.arch)", shown);
        free(name);
        return MP_ERR;
    }
    free(name);
    if (family_get(g, "kv_heads", H5T_NATIVE_INT, &f.kv_heads, why_p, n) != MP_OK ||
        family_get(g, "ffn_dim", H5T_NATIVE_INT, &f.ffn_dim, why_p, n) != MP_OK ||
        family_get(g, "tie_embeddings", H5T_NATIVE_INT, &f.tie_embeddings, why_p, n) != MP_OK ||
        family_get(g, "rope_theta", H5T_NATIVE_FLOAT, &f.rope_theta, why_p, n) != MP_OK ||
        family_get(g, "norm_eps", H5T_NATIVE_FLOAT, &f.norm_eps, why_p, n) != MP_OK)
        return MP_ERR;
    if (f.arch != ARCH_LLAMA) f.rope_theta = f.norm_eps = 0.0f; /* not gpt2's: not compared, not shown */
    *f_p = f;
    return MP_OK;
}
