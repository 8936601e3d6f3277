/* MindPipe compute kernels: one C API, implemented for the CPU (the kernels/..._cpu.c files: BLAS for
 * products, OpenMP for the rest) and, in the CUDA build, for the GPU (kernels/....cu). The
 * per-element math both use lives in kernels/math_*.h, so the CPU tests check what the GPU runs.
 *
 * Dimension legend:
 *   B  micro-batch size (sequences)     T  sequence length         C  channels (model dim)
 *   NH attention heads                  hs head size = C / NH      V  vocabulary size
 *   N  rows = B * T                     OC output channels of a product
 *   KVH key/value heads (grouped-query attention; NH a multiple of KVH)
 *   F  SwiGLU hidden width (Llama's intermediate_size)
 * Layouts are row-major. Weights are (OC, C), as in PyTorch's Linear: out = inp · wᵀ + bias.
 * qkv rows hold all of q, then all of k, then all of v, heads contiguous within each: (N, 3C).
 *
 * Every function says which outputs it assigns (=) and which it accumulates into (+=).
 * Forward and backward of a layer sit side by side; backward arguments mirror forward ones,
 * outputs (gradients) first. No kernel allocates memory: scratch is passed in.
 * Results are deterministic: reductions run in a fixed order for a fixed thread count. */
#ifndef MP_KERNELS_H
#define MP_KERNELS_H

#include <stddef.h>

/* ---- token + position embedding (vocab-parallel: this rank holds rows [v0, v0+vn) of wte) ---- */
/* out (B,T,C) = (wte[tok - v0] if v0 <= tok < v0+vn else 0) + (wpe[t] if wpe). tokens (B,T).
 * wte (vn,C), wpe (T,C) or NULL. One rank: v0 = 0, vn = V. */
void encoder_forward(float *out, const int *tokens, const float *wte, const float *wpe, int B, int T, int C, int v0,
                     int vn);
/* out (B,T,C) += wpe[t]: the position half, added after the vocab-parallel halves are summed. */
void position_forward(float *out, const float *wpe, int B, int T, int C);
/* dwte (vn,C) += for tokens in [v0, v0+vn), dwpe (T,C) += (dwpe NULL: no position table) ; dout (B,T,C).
 * Deterministic. */
void encoder_backward(float *dwte, float *dwpe, const float *dout, const int *tokens, int B, int T, int C, int v0,
                      int vn);

/* ---- LayerNorm over the last dimension (eps 1e-5) ---- */
/* out (N,C) =, mean (N) =, rstd (N) = ; inp (N,C), w (C), b (C). */
void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                       int N, int C);
/* dinp (N,C) +=, dw (C) +=, db (C) += ; dout (N,C), inp (N,C), w, mean, rstd as saved by forward. */
void layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                        const float *mean, const float *rstd, int N, int C);

/* ---- dense product ---- */
/* out (N,OC) = inp (N,C) · w(OC,C)ᵀ + bias (OC); bias may be NULL. */
void matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC);
/* out (N,OC) = res (N,OC) + inp · wᵀ + bias: the residual add fused into the product (one pass over
 * out fewer). out may alias res; bias may be NULL. Its backward is matmul_backward (d res = d out). */
void matmul_residual_forward(float *out, const float *res, const float *inp, const float *w, const float *bias,
                             int N, int C, int OC);
/* dinp (N,C) = dout · w ; dw (OC,C) += doutᵀ · inp ; dbias (OC) += column sums of dout. Each output
 * is skipped when NULL: a split backward (zero-bubble pipelines) computes dinp alone first and the
 * weight half later with matmul_backward_weight, which is exactly this function's weight half. */
void matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                     int N, int C, int OC);
/* dw (OC,C) += doutᵀ · inp ; dbias (OC) += column sums of dout (each skipped when NULL): the weight
 * half of matmul_backward and of matmul_backward_gelu alone, the same bits as theirs for the same
 * dout and inp (they call it). */
void matmul_backward_weight(float *dw, float *dbias, const float *dout, const float *inp, int N, int C, int OC);

/* ---- causal multi-head self-attention (softmax scale 1/sqrt(hs)) ---- */
/* out (B,T,C) = per head softmax(q kᵀ/√hs, causal) · v, heads concatenated ;
 * att (B,NH,T,T) = the softmax probabilities (0 above the diagonal up to the end of the row's block
 * of 64 rows; past it not written, and never read by the backward) ; qkv (B,T,3C). */
void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
/* dqkv (B,T,3C) = ; datt (B,NH,T,T) is scratch (overwritten) ; dout (B,T,C) ; qkv, att from forward. */
void attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv, const float *att,
                        int B, int T, int C, int NH);
/* The fused path's contract (attention_fused_layout.h; the CUDA bf16 kernels keep the same): out
 * (B,T,C) = as attention_forward's, the same bits; att (mp_att_fused_floats) = the log-sum-exp of
 * each (b, h, query) row at [0, B·NH·T) and a copy of out at mp_att_fused_o_offset, no (T,T)
 * probabilities; qkv (B,T,3C). Multi-head only. */
void attention_flash_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
/* dqkv (B,T,3C) = ; datt (B·NH·T) = D_i = Σ dO·O, scratch ; dout (B,T,C) ; qkv, att from
 * attention_flash_forward. The probabilities recomputed from the log-sum-exps: attention_backward's
 * gradients up to rounding. */
void attention_flash_backward(float *dqkv, float *datt, const float *dout, const float *qkv, const float *att, int B,
                              int T, int C, int NH);

/* The decode step (generation with a key/value cache): row b's query attends to the keys and values
 * of positions 0..pos[b] of its own sequence. out (B,C) = per head softmax(q kᵀ/√hs) · v, heads
 * concatenated, query head h reading kv head h / (NH/KVH) (grouped-query attention; KVH = NH:
 * multi-head); att (B,NH,Tmax) is scratch (overwritten); q row b at q + b·ldq (C floats: the q part
 * of a qkv row, ldq = C + 2·KVH·hs); kcache[b], vcache[b] (≥ pos[b]+1, KVH·hs) row-major: sequence b's
 * cache, which holds the kv heads only.
 * CPU only: serving decodes on the CPU (no cu_ twin, not in be_kernels.h). */
void attention_decode_forward(float *out, float *att, const float *q, int ldq, const float *const *kcache,
                              const float *const *vcache, const int *pos, int B, int C, int NH, int KVH, int Tmax);
/* The decode step's products: out (N,OC) = [res (N,OC) +] inp (N,C) · w(OC,C)ᵀ [+ bias]; res and bias
 * may be NULL, out may alias res. A row's result is the same bits whatever N and the thread count
 * (a completion must not depend on its batch); for the few rows of a step it reads each weight once
 * per 4 rows instead of BLAS packing it per call. CPU only, as attention_decode_forward. */
void matmul_decode_forward(float *out, const float *res, const float *inp, const float *w, const float *bias, int N,
                           int C, int OC);

/* ---- GELU, tanh approximation ---- */
/* out (n) = gelu(inp) */
void gelu_forward(float *out, const float *inp, size_t n);
/* dinp (n) = gelu'(inp) * dout ; dinp may alias dout. */
void gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);

/* ---- the Llama family's layers (Hugging Face's conventions: LlamaRMSNorm, rotate_half, silu(gate)·up,
 * repeat_kv) ---- */
/* RMSNorm over the last dimension: out (N,C) = inp · rstd · w, rstd (N) = 1/√(mean(inp²) + eps) ;
 * w (C). eps is the model's (model.norm_eps). */
void rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps);
/* dinp (N,C) +=, dw (C) += ; dout (N,C), inp (N,C), w, rstd as saved by forward. As
 * layernorm_backward: dw is summed in fixed row chunks, the same bits for any thread count. */
void rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w, const float *rstd,
                      int N, int C);

/* Rotary position embeddings, rotate-half pairs (i, i + hs/2) at angle pos·theta^(−2i/hs).
 * cs (Tmax, hs) = the table, row pos holding cos of the hs/2 angles, then their sin: computed in
 * double and rounded to float once, so forward and backward (and a device's copy) use the same
 * values. Tmax is the longest position + 1 the caller will ask for (model.seq_len for training). */
void rope_table_init(float *cs, int Tmax, int hs, float theta);
/* In place on the q and k heads of qkv (B,T,(NH+2·KVH)·hs) = [q (NH·hs) | k (KVH·hs) | v (KVH·hs)]
 * per row (v untouched): row (b,t) is rotated for position pos0 + t; cs as above with
 * Tmax ≥ pos0 + T. pos0 = 0 in training; a decode step with a key/value cache passes its position
 * with T = 1 (one call per sequence when the batch's positions differ). */
void rope_forward(float *qkv, const float *cs, int pos0, int B, int T, int NH, int KVH, int hs);
/* In place on dqkv (B,T,(NH+2·KVH)·hs): dq and dk rotated back (the transpose: angle −a), dv
 * untouched; the same pos0 and cs as forward. */
void rope_backward(float *dqkv, const float *cs, int pos0, int B, int T, int NH, int KVH, int hs);

/* SwiGLU on a packed row [gate (F) | up (F)], so that gate_proj and up_proj are one product with
 * weight (2F, C), gate rows first: out (N,F) = silu(gate) · up ; inp (N,2F). */
void swiglu_forward(float *out, const float *inp, int N, int F);
/* dinp (N,2F) = [dgate | dup] ; dout (N,F), inp (N,2F) as given to forward. */
void swiglu_backward(float *dinp, const float *dout, const float *inp, int N, int F);

/* Causal grouped-query attention (softmax scale 1/sqrt(hs), hs = C/NH): query head h uses kv head
 * h / (NH/KVH). qkv (B,T,C+2·KVH·hs) = [q (C) | k (KVH·hs) | v (KVH·hs)] per row ;
 * out (B,T,C) = per head softmax(q kᵀ/√hs, causal) · v, heads concatenated ; att (B,NH,T,T) = the
 * probabilities (0 above the diagonal up to the end of the row's block of 64 rows; past it not
 * written and never read, as attention_forward). With KVH = NH: attention_forward's layout and bits. */
void attention_gqa_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH, int KVH);
/* dqkv (B,T,C+2·KVH·hs) = (dk, dv summed over a group's query heads in head order) ; datt
 * (B,NH,T,T) is scratch (overwritten) ; dout (B,T,C) ; qkv, att from forward. With KVH = NH:
 * attention_backward's bits. */
void attention_gqa_backward(float *dqkv, float *datt, const float *dout, const float *qkv, const float *att, int B,
                            int T, int C, int NH, int KVH);

/* ---- the MLP's GELU fused with its products (training uses these; the two above serve generation
 * and are the unfused reference in the tests) ----
 * Forward:  fc = matmul_gelu_forward, fcproj = mlp_proj_forward.
 * Backward: fcproj = matmul_backward_gelu (its input gradient goes through GELU's backward),
 *           fc = matmul_backward. */
/* out (N,OC) = gelu(pre), in the backend's form (mlp_proj_forward says which calls read it);
 * dgelu (N,OC) = gelu'(pre), with pre = inp (N,C) · w(OC,C)ᵀ + bias (OC):
 * the activation and the derivative its backward needs (saved instead of pre: the backward then
 * evaluates no tanh). bias may be NULL. The same bits as matmul_forward then mp_gelu, mp_gelu_grad
 * per element, up to the product's own rounding. */
void matmul_gelu_forward(float *out, float *dgelu, const float *inp, const float *w, const float *bias, int N, int C,
                         int OC);
/* dinp (N,C) = (dout · w) ⊙ dgelu (in the backend's form: mlp_fc_backward reads it) ; dw (OC,C) += doutᵀ · inp ; dbias (OC) += column sums of dout
 * (each skipped when NULL; the weight half is matmul_backward_weight). matmul_backward followed by
 * GELU's backward on dinp, dgelu as saved by matmul_gelu_forward (for the product whose output was
 * this product's inp). */
void matmul_backward_gelu(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                          const float *dgelu, int N, int C, int OC);
/* The MLP's projection (fcproj) on matmul_gelu_forward's out, whose form is the backend's: a device
 * backend may keep that hidden activation in a narrower type (CUDA under the bf16 handoff: bf16, see
 * kernels_cuda.h), so it goes only to matmul_backward_gelu (as inp) and to these two. On the CPU it
 * is fp32 and they are the plain products, the same bits:
 * mlp_proj_forward: out (N,OC) = res + inp · wᵀ + bias, res and bias each NULL for none (a TP peer's
 *   partial sum); out may alias res. = matmul_residual_forward, or matmul_forward when res is NULL.
 * mlp_proj_backward_weight: dw += doutᵀ · inp, dbias += column sums of dout (each skipped when NULL):
 *   matmul_backward_weight, for a split backward's W of fcproj. */
void mlp_proj_forward(float *out, const float *res, const float *inp, const float *w, const float *bias, int N, int C,
                      int OC);
void mlp_proj_backward_weight(float *dw, float *dbias, const float *dout, const float *inp, int N, int C, int OC);
/* The fc product's backward on matmul_backward_gelu's dinp (the hidden activation's gradient),
 * whose form is the backend's likewise (CUDA under the bf16 handoff: bf16 with its column sums'
 * partials), so it goes only to these two. On the CPU: matmul_backward and matmul_backward_weight
 * with dout = dhidden (N,OC), the same bits. */
void mlp_fc_backward(float *dinp, float *dw, float *dbias, const float *dhidden, const float *inp, const float *w,
                     int N, int C, int OC);
void mlp_fc_backward_weight(float *dw, float *dbias, const float *dhidden, const float *inp, int N, int C, int OC);

/* ---- softmax cross-entropy over the vocabulary ---- */
/* In place on logits (N,V): probs = softmax(logits) overwrites them; losses (N) = -log probs[target].
 * Vocab-parallel TP splits the same math into crossentropy_row_stats + an all-reduce (later issue). */
void crossentropy_forward(float *losses, float *probs_logits, const int *targets, int N, int V);
/* dlogits (N,V) = (probs - onehot(target - v0)) * dloss ; dlogits may alias probs. dloss is the
 * gradient of the total loss with respect to each row's loss (1 / tokens in the global batch).
 * Vocab-parallel: V columns of this rank starting at vocabulary index v0 (one rank: v0 = 0). */
void crossentropy_backward(float *dlogits, const float *probs, const int *targets, float dloss, int N, int V, int v0);
/* The fused classifier (issue 44, item 4; llm.c's): losses (N) = as crossentropy_forward's and
 * logits_dlogits (N,V) = (softmax − onehot(target)) · dloss in place, in one call that reads the
 * logits once per row pass and never stores the probabilities: crossentropy_forward then
 * crossentropy_backward (v0 = 0), the same bits. One rank's whole vocabulary (no v0). CPU only so far:
 * no CUDA twin, not in be_kernels.h, not called by the model (its head_forward does not know dloss). */
void crossentropy_fused(float *losses, float *logits_dlogits, const int *targets, float dloss, int N, int V);

/* ---- the head at tp = 1: the logits' product and their cross-entropy as one unit, so that a
 * backend keeps the (N,V) logits between forward and backward in the form it reads fastest ----
 * `store` (N·V floats) holds that state and is read only by the head's own backward: the CPU keeps
 * what matmul_forward then crossentropy_forward leave (the fp32 probabilities, then dlogits: these
 * three are those calls, the same bits); CUDA with bf16 products keeps the logits in bf16 and each
 * row's softmax max and 1/Σexp (kernels_cuda.h). Forward and backward must run on one backend, in
 * one precision; the bytes may be copied between (offload moves them unchanged).
 * head_forward: losses (N) = −log softmax(inp (N,C) · w(V,C)ᵀ)[target] ; store = the state.
 * head_backward: dlogits = (softmax − onehot(target)) · dloss, left in store for
 *   head_backward_weight; dinp (N,C) = dlogits · w ; dw (V,C) += dlogitsᵀ · inp (each skipped
 *   when NULL: a split backward takes dinp first and the weight half later).
 * head_backward_weight: dw (V,C) += dlogitsᵀ · inp, from the store head_backward left. */
void head_forward(float *losses, float *store, const float *inp, const float *w, const int *targets, int N, int C,
                  int V);
void head_backward(float *dinp, float *dw, float *store, const float *inp, const float *w, const int *targets,
                   float dloss, int N, int C, int V);
void head_backward_weight(float *dw, const float *store, const float *inp, int N, int C, int V);

/* Vocab-parallel cross-entropy forward (Megatron): each TP rank holds logits (N,Vl) for vocabulary
 * [v0, v0+Vl), of which the first `valid` are real (the rest padding). The caller all-reduces between
 * the steps: MAX over max, then SUM over sum and tlogit.
 *   1. xent_local_max: max (N) = row max over valid columns; tlogit (N) = logit of the target if this
 *      rank holds it, else 0.
 *   2. xent_local_expsum: logits := exp(logits − max) (padding: 0); sum (N) = row sums.
 *   3. xent_finish: probs = logits / sum; losses (N) = log(sum) + max − tlogit. */
void xent_local_max(float *max, float *tlogit, const float *logits, const int *targets, int N, int Vl, int v0,
                    int valid);
void xent_local_expsum(float *sum, float *logits, const float *max, int N, int Vl, int valid);
void xent_finish(float *losses, float *probs, const float *max, const float *sum, const float *tlogit, int N, int Vl);

/* ---- optimizer ---- */
/* AdamW on n elements, decoupled weight decay, bias-corrected moments; t is the 1-based step.
 * grad_scale multiplies every gradient first (global-norm clipping). param, m, v updated in place:
 *   g = grad*grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g²;
 *   param -= lr * ( (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps) + wd * param ). */
void adamw_update(float *param, const float *grad, float *m, float *v, size_t n, float lr, float beta1,
                  float beta2, float eps, float wd, int t, float grad_scale);
/* adamw_update on count tensors that lie in the same flat buffers: tensor i is elements
 * [off[i], off[i] + n[i]) of param, grad, m and v, with weight decay wd[i]; off, n and wd are host
 * arrays. The bits of calling adamw_update on each in turn, in one call, so a device backend
 * launches a few kernels for the whole model instead of one per tensor. */
void adamw_each(float *param, const float *grad, float *m, float *v, const size_t *off, const size_t *n,
                const float *wd, int count, float lr, float beta1, float beta2, float eps, int t, float grad_scale);

/* Σ x² in double, summed in fixed 4096-element chunks then in chunk order: the same value for
 * any thread count. */
double sumsq(const float *x, size_t n);
/* out[i] (host) = sumsq(x[i], n[i]) for i < count, the same bits: many tensors' norms in one call,
 * so a device backend waits for the host once, not once per tensor. */
void sumsq_each(double *out, const float *const *x, const size_t *n, int count);

/* out (n) = a (n) + b (n) ; used to add the tied embedding's two gradient parts once. */
void vec_add(float *out, const float *a, const float *b, size_t n);

/* Threads for the OpenMP loops and the BLAS (one pool with Debian's OpenMP OpenBLAS). */
void kernels_set_threads(int n);

#endif
