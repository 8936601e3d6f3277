/* Causal grouped-query attention on the CPU (Llama 2 70B, Llama 3): NH query heads share KVH key and
 * value heads, query head h reading kv head h / (NH/KVH). Legend in kernels.h.
 *
 * The packed row is [q (NH·hs) | k (KVH·hs) | v (KVH·hs)]: with KVH = NH it is attention_cpu.c's
 * [q | k | v] of C each, and these loops are its loops with k and v found at their own offsets, the
 * same BLAS calls and the same row steps (attention_rows.h): the same bits. */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "attention_rows.h"
#include "kernels.h"

enum { RB = 64 };

void attention_gqa_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH, int KVH)
{
    const int hs = C / NH, G = NH / KVH, ld = C + 2 * KVH * hs;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        const int b = bh / NH, h = bh % NH;
        const float *row0 = qkv + (size_t)b * T * ld, *q = row0 + (size_t)h * hs;
        const float *k = row0 + C + (size_t)(h / G) * hs, *v = k + (size_t)KVH * hs;
        float *a = att + (size_t)bh * T * T, *o = out + (size_t)b * T * C + (size_t)h * hs;
        for (int r0 = 0; r0 < T; r0 += RB) {
            const int r1 = r0 + RB < T ? r0 + RB : T, rb = r1 - r0;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rb, r1, hs, scale, q + (size_t)r0 * ld, ld, k, ld,
                        0.0f, a + (size_t)r0 * T, T);
            for (int i = r0; i < r1; i++) attn_softmax_causal_row(a + (size_t)i * T, i, r1);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rb, hs, r1, 1.0f, a + (size_t)r0 * T, T, v, ld,
                        0.0f, o + (size_t)r0 * C, C);
        }
    }
}

/* One query head h of sequence b: dq = ; dk, dv (its group's kv head) += over the row blocks. */
static void gqa_head_backward(float *dqkv, float *datt, const float *dout, const float *qkv, const float *att, int b,
                              int h, int T, int C, int NH, int KVH)
{
    const int hs = C / NH, G = NH / KVH, ld = C + 2 * KVH * hs;
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t bh = (size_t)b * NH + h, kvo = C + (size_t)(h / G) * hs;
    const float *row0 = qkv + (size_t)b * T * ld, *q = row0 + (size_t)h * hs, *k = row0 + kvo,
                *v = k + (size_t)KVH * hs;
    const float *a = att + bh * T * T, *dO = dout + (size_t)b * T * C + (size_t)h * hs;
    float *drow0 = dqkv + (size_t)b * T * ld, *dq = drow0 + (size_t)h * hs, *dk = drow0 + kvo,
          *dv = dk + (size_t)KVH * hs;
    float *ds = datt + bh * T * T;
    for (int r0 = 0; r0 < T; r0 += RB) {
        const int r1 = r0 + RB < T ? r0 + RB : T, rb = r1 - r0;
        float *dsb = ds + (size_t)r0 * T;
        const float *ab = a + (size_t)r0 * T;
        /* dP = dO vᵀ ; dv += Pᵀ dO */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rb, r1, hs, 1.0f, dO + (size_t)r0 * C, C, v, ld, 0.0f,
                    dsb, T);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, rb, 1.0f, ab, T, dO + (size_t)r0 * C, C, 1.0f,
                    dv, ld);
        for (int i = r0; i < r1; i++) /* dS */
            attn_softmax_causal_row_backward(ds + (size_t)i * T, a + (size_t)i * T, i, r1, scale);
        /* dq = dS k ; dk += dSᵀ q */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rb, hs, r1, 1.0f, dsb, T, k, ld, 0.0f,
                    dq + (size_t)r0 * ld, ld);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, rb, 1.0f, dsb, T, q + (size_t)r0 * ld, ld, 1.0f,
                    dk, ld);
    }
}

/* A kv head's dk and dv are sums over its G query heads, so the parallel loop is over (sequence,
 * kv head) pairs and each adds its query heads in order h = g·G, ..., g·G + G − 1: no two threads
 * write one element, and the order does not depend on the thread count. */
void attention_gqa_backward(float *dqkv, float *datt, const float *dout, const float *qkv, const float *att, int B,
                            int T, int C, int NH, int KVH)
{
    const int hs = C / NH, G = NH / KVH, ld = C + 2 * KVH * hs;
#pragma omp parallel for schedule(static)
    for (int bg = 0; bg < B * KVH; bg++) {
        const int b = bg / KVH, g = bg % KVH;
        float *dk = dqkv + (size_t)b * T * ld + C + (size_t)g * hs, *dv = dk + (size_t)KVH * hs;
        for (int t = 0; t < T; t++) {
            memset(dk + (size_t)t * ld, 0, (size_t)hs * sizeof(float));
            memset(dv + (size_t)t * ld, 0, (size_t)hs * sizeof(float));
        }
        for (int h = g * G; h < (g + 1) * G; h++) gqa_head_backward(dqkv, datt, dout, qkv, att, b, h, T, C, NH, KVH);
    }
}
