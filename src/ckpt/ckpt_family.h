/* The model family as a checkpoint's /state records it, beside the shape (layers, dim, heads, ...):
 *   arch            string: the block kind's name (model.arch: gpt2, llama)
 *   kv_heads        int: key/value heads (model.heads without grouped-query attention)
 *   ffn_dim         int: llama's SwiGLU width (model.ffn_dim); 0 for gpt2
 *   tie_embeddings  int: 1 when the LM head is wte (model.tie_embeddings)
 *   rope_theta, norm_eps   float32, llama only: the model's own values (model.rope_theta,
 *                   model.norm_eps as the model holds them); gpt2 has neither, and its files omit them
 * A file written before these attributes has none of them: it reads as gpt2 with kv_heads = heads,
 * ffn_dim 0 and the head tied, which every such file was, so every older checkpoint still resumes.
 * Readers compare a file's family with the deck's key by key (ckpt_family_differs), as they compare
 * the shape. */
#ifndef MP_CKPT_FAMILY_H
#define MP_CKPT_FAMILY_H

#include <hdf5.h>
#include <stddef.h>

#include "params.h"

typedef struct {
    model_arch_t arch;
    int kv_heads;               /* resolved: cfg_kv_heads */
    int ffn_dim;
    int tie_embeddings;
    float rope_theta, norm_eps; /* llama's; 0 under gpt2 */
} ckpt_family_t;

/* cfg's family as /state records it (a zero-initialised cfg is gpt2's, params.h). */
ckpt_family_t ckpt_family_of(const model_cfg_t *cfg);
/* Sets cfg's family fields (arch, kv_heads, ffn_dim, rope_theta, norm_eps, untied) from f. */
void ckpt_family_apply(const ckpt_family_t *f, model_cfg_t *cfg);

/* 1 when have (a checkpoint's) and want differ, with the first key that does in why_p (n bytes):
 * "model.KEY=HAVE, WHO says WANT" (who: "the deck", ...); 0 when they are one family. rope_theta
 * and norm_eps are compared under llama only (gpt2's are not the model's). */
int ckpt_family_differs(const ckpt_family_t *have, const ckpt_family_t *want, const char *who, char *why_p, size_t n);

/* Whether f is a family a checkpoint of `heads` query heads can have (kv_heads divides heads; llama's
 * ffn_dim, rope_theta and norm_eps positive; each within its deck key's range). MP_OK, or MP_ERR
 * with why in why_p (n bytes), printing nothing. */
int ckpt_family_valid(const ckpt_family_t *f, int heads, char *why_p, size_t n);

/* "arch=gpt2", or under llama "arch=llama kv_heads=K ffn_dim=F rope_theta=R norm_eps=E
 * tie_embeddings=1": what inspect prints beside the shape. */
void ckpt_family_text(const ckpt_family_t *f, char *out_p, size_t n);

/* Writes f's attributes on the open /state group g. MP_OK, or MP_ERR (reported, naming where). */
int ckpt_family_write(hid_t g, const ckpt_family_t *f, const char *where);
/* Reads f from the open /state group g of a checkpoint of `heads` query heads (absent attributes:
 * an older file's gpt2, as above). MP_OK, or MP_ERR with why in why_p (n bytes: "/state arch is not
 * a string", an unknown family), printing nothing. *f_p is set only on MP_OK. */
int ckpt_family_read(hid_t g, int heads, ckpt_family_t *f_p, char *why_p, size_t n);

#endif
