/* The kernels every backend runs, one entry each. The list makes be_<name> (declared in backend.h,
 * defined in backend.c), the entry of every backend's table and its wrappers (backend_cpu.c,
 * backend_emu.c, backend_cuda.c):
 *
 *   X(void, name, (parameters), (arguments))     a kernel that writes its outputs through pointers
 *   XR(type, name, (parameters), (arguments))    one that returns its value to the host (it waits)
 *
 * name is the kernels.h function and, with a cu_ prefix and the context first, its kernels_cuda.h
 * twin; the parameters are theirs (be_<name> takes the backend before them) and the arguments
 * their names. The cpu and cuda backends check every line against those headers at compile time.
 * Shapes and which outputs are assigned (=) or accumulated (+=): kernels.h.
 *
 * A new kernel: write it in kernels/ (CPU and CUDA), add its line here, test it in
 * validation/unit/test_kernels.c. */
#ifndef MP_BE_KERNELS_H
#define MP_BE_KERNELS_H

/* BE_ARGS (a, b) → a, b: a list's parenthesised parameters or arguments, opened. */
#define BE_ARGS(...) __VA_ARGS__

#define BE_KERNELS(X, XR)                                                                                             \
    X(void, encoder_forward,                                                                                          \
      (float *out, const int *tokens, const float *wte, const float *wpe, int B, int T, int C, int v0, int vn),       \
      (out, tokens, wte, wpe, B, T, C, v0, vn))                                                                       \
    X(void, position_forward, (float *out, const float *wpe, int B, int T, int C), (out, wpe, B, T, C))               \
    X(void, encoder_backward,                                                                                         \
      (float *dwte, float *dwpe, const float *dout, const int *tokens, int B, int T, int C, int v0, int vn),          \
      (dwte, dwpe, dout, tokens, B, T, C, v0, vn))                                                                    \
    X(void, layernorm_forward,                                                                                        \
      (float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b, int N, int C),         \
      (out, mean, rstd, inp, w, b, N, C))                                                                             \
    X(void, layernorm_backward,                                                                                       \
      (float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w, const float *mean,     \
       const float *rstd, int N, int C),                                                                              \
      (dinp, dw, db, dout, inp, w, mean, rstd, N, C))                                                                 \
    X(void, matmul_forward, (float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC),  \
      (out, inp, w, bias, N, C, OC))                                                                                  \
    X(void, matmul_residual_forward,                                                                                  \
      (float *out, const float *res, const float *inp, const float *w, const float *bias, int N, int C, int OC),      \
      (out, res, inp, w, bias, N, C, OC))                                                                             \
    X(void, matmul_backward,                                                                                          \
      (float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w, int N, int C,       \
       int OC),                                                                                                       \
      (dinp, dw, dbias, dout, inp, w, N, C, OC))                                                                      \
    X(void, matmul_backward_weight,                                                                                   \
      (float *dw, float *dbias, const float *dout, const float *inp, int N, int C, int OC),                           \
      (dw, dbias, dout, inp, N, C, OC))                                                                               \
    X(void, attention_forward, (float *out, float *att, const float *qkv, int B, int T, int C, int NH),               \
      (out, att, qkv, B, T, C, NH))                                                                                   \
    X(void, attention_backward,                                                                                       \
      (float *dqkv, float *datt, const float *dout, const float *qkv, const float *att, int B, int T, int C, int NH), \
      (dqkv, datt, dout, qkv, att, B, T, C, NH))                                                                      \
    X(void, attention_gqa_forward,                                                                                    \
      (float *out, float *att, const float *qkv, int B, int T, int C, int NH, int KVH),                               \
      (out, att, qkv, B, T, C, NH, KVH))                                                                              \
    X(void, attention_gqa_backward,                                                                                   \
      (float *dqkv, float *datt, const float *dout, const float *qkv, const float *att, int B, int T, int C, int NH,  \
       int KVH),                                                                                                      \
      (dqkv, datt, dout, qkv, att, B, T, C, NH, KVH))                                                                 \
    X(void, attention_flash_forward, (float *out, float *att, const float *qkv, int B, int T, int C, int NH),         \
      (out, att, qkv, B, T, C, NH))                                                                                   \
    X(void, attention_flash_backward,                                                                                 \
      (float *dqkv, float *datt, const float *dout, const float *qkv, const float *att, int B, int T, int C, int NH), \
      (dqkv, datt, dout, qkv, att, B, T, C, NH))                                                                      \
    X(void, rmsnorm_forward, (float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps),     \
      (out, rstd, inp, w, N, C, eps))                                                                                 \
    X(void, rmsnorm_backward,                                                                                         \
      (float *dinp, float *dw, const float *dout, const float *inp, const float *w, const float *rstd, int N, int C), \
      (dinp, dw, dout, inp, w, rstd, N, C))                                                                           \
    X(void, rope_forward, (float *qkv, const float *cs, int pos0, int B, int T, int NH, int KVH, int hs),             \
      (qkv, cs, pos0, B, T, NH, KVH, hs))                                                                             \
    X(void, rope_backward, (float *dqkv, const float *cs, int pos0, int B, int T, int NH, int KVH, int hs),           \
      (dqkv, cs, pos0, B, T, NH, KVH, hs))                                                                            \
    X(void, swiglu_forward, (float *out, const float *inp, int N, int F), (out, inp, N, F))                           \
    X(void, swiglu_backward, (float *dinp, const float *dout, const float *inp, int N, int F),                        \
      (dinp, dout, inp, N, F))                                                                                        \
    X(void, matmul_gelu_forward,                                                                                      \
      (float *out, float *dgelu, const float *inp, const float *w, const float *bias, int N, int C, int OC),          \
      (out, dgelu, inp, w, bias, N, C, OC))                                                                           \
    X(void, matmul_backward_gelu,                                                                                     \
      (float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w, const float *dgelu, \
       int N, int C, int OC),                                                                                         \
      (dinp, dw, dbias, dout, inp, w, dgelu, N, C, OC))                                                               \
    X(void, mlp_proj_forward,                                                                                         \
      (float *out, const float *res, const float *inp, const float *w, const float *bias, int N, int C, int OC),      \
      (out, res, inp, w, bias, N, C, OC))                                                                             \
    X(void, mlp_proj_backward_weight,                                                                                 \
      (float *dw, float *dbias, const float *dout, const float *inp, int N, int C, int OC),                           \
      (dw, dbias, dout, inp, N, C, OC))                                                                               \
    X(void, mlp_fc_backward,                                                                                          \
      (float *dinp, float *dw, float *dbias, const float *dhidden, const float *inp, const float *w, int N, int C,    \
       int OC),                                                                                                       \
      (dinp, dw, dbias, dhidden, inp, w, N, C, OC))                                                                   \
    X(void, mlp_fc_backward_weight,                                                                                   \
      (float *dw, float *dbias, const float *dhidden, const float *inp, int N, int C, int OC),                        \
      (dw, dbias, dhidden, inp, N, C, OC))                                                                            \
    X(void, crossentropy_forward, (float *losses, float *probs_logits, const int *targets, int N, int V),             \
      (losses, probs_logits, targets, N, V))                                                                          \
    X(void, crossentropy_backward,                                                                                    \
      (float *dlogits, const float *probs, const int *targets, float dloss, int N, int V, int v0),                    \
      (dlogits, probs, targets, dloss, N, V, v0))                                                                     \
    X(void, head_forward,                                                                                             \
      (float *losses, float *store, const float *inp, const float *w, const int *targets, int N, int C, int V),       \
      (losses, store, inp, w, targets, N, C, V))                                                                      \
    X(void, head_backward,                                                                                            \
      (float *dinp, float *dw, float *store, const float *inp, const float *w, const int *targets, float dloss,       \
       int N, int C, int V),                                                                                          \
      (dinp, dw, store, inp, w, targets, dloss, N, C, V))                                                             \
    X(void, head_backward_weight, (float *dw, const float *store, const float *inp, int N, int C, int V),             \
      (dw, store, inp, N, C, V))                                                                                      \
    X(void, xent_local_max,                                                                                           \
      (float *max, float *tlogit, const float *logits, const int *targets, int N, int Vl, int v0, int valid),         \
      (max, tlogit, logits, targets, N, Vl, v0, valid))                                                               \
    X(void, xent_local_expsum, (float *sum, float *logits, const float *max, int N, int Vl, int valid),               \
      (sum, logits, max, N, Vl, valid))                                                                               \
    X(void, xent_finish,                                                                                              \
      (float *losses, float *probs, const float *max, const float *sum, const float *tlogit, int N, int Vl),          \
      (losses, probs, max, sum, tlogit, N, Vl))                                                                       \
    X(void, adamw_each,                                                                                               \
      (float *param, const float *grad, float *m, float *v, const size_t *off, const size_t *n, const float *wd,      \
       int count, float lr, float beta1, float beta2, float eps, int t, float grad_scale),                             \
      (param, grad, m, v, off, n, wd, count, lr, beta1, beta2, eps, t, grad_scale))                                   \
    X(void, sumsq_each, (double *out, const float *const *x, const size_t *n, int count), (out, x, n, count))          \
    X(void, vec_add, (float *out, const float *a, const float *b, size_t n), (out, a, b, n))

#endif
