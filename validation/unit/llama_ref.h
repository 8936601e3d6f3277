/* Naive double-precision references for the Llama family's kernels (kernels.h: rmsnorm, rope,
 * swiglu, attention_gqa), written from the formulas, not from the kernels: one loop per sum, no
 * blocking, no tables. Same shapes and layouts as the kernels; every output is assigned (=). */
#ifndef MP_LLAMA_REF_H
#define MP_LLAMA_REF_H

void ref_rmsnorm_forward(double *out, double *rstd, const double *inp, const double *w, int N, int C, double eps);
void ref_rmsnorm_backward(double *dinp, double *dw, const double *dout, const double *inp, const double *w, int N,
                          int C, double eps);
/* out = qkv with the q and k heads rotated by sign · pos·theta^(−2i/hs) (sign −1: the transpose). */
void ref_rope(double *out, const double *qkv, int pos0, int B, int T, int NH, int KVH, int hs, double theta, int sign);
void ref_swiglu_forward(double *out, const double *inp, int N, int F);
void ref_swiglu_backward(double *dinp, const double *dout, const double *inp, int N, int F);
/* att may be NULL. */
void ref_gqa_forward(double *out, double *att, const double *qkv, int B, int T, int C, int NH, int KVH);
void ref_gqa_backward(double *dqkv, const double *dout, const double *qkv, int B, int T, int C, int NH, int KVH);

#endif
