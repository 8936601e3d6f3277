/* Causal attention on the CPU, with grouped-query heads (Llama 2 70B, Llama 3): NH query heads share
 * KVH key and value heads, query head h reading kv head h / (NH/KVH). Multi-head attention (GPT-2)
 * is KVH = NH: attention_forward/_backward are these with KVH = NH, one code path for both families.
 * Legend in kernels.h.
 *
 * The packed row is [q (NH·hs) | k (KVH·hs) | v (KVH·hs)] (KVH = NH: [q | k | v] of C each), and the
 * products read q, k, v straight out of it with its row length as leading dimension, so nothing is
 * copied or transposed. Each (batch, head) pair is independent: OpenMP runs pairs in parallel and
 * every BLAS call inside runs single-threaded (OpenBLAS's OpenMP build does that inside a parallel
 * region). Rows are processed in blocks of RB: block [r0, r1) only needs keys [0, r1), so the
 * masked upper triangle is skipped except inside the diagonal blocks; row i's live entries are
 * 0..i, and i+1..r1-1 (inside the block's product, above the diagonal) are zeroed. */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "kernels.h"
#include "math_softmax.h"

enum { RB = 64 };

/* In place on row i of the scores: softmax. */
static void attn_softmax_causal_row(float *row, int i, int r1)
{
    float max = row[0];
#pragma omp simd reduction(max : max)
    for (int j = 1; j <= i; j++) max = row[j] > max ? row[j] : max;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j <= i; j++) {
        row[j] = mp_softmax_exp(row[j], max);
        sum += row[j];
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int j = 0; j <= i; j++) row[j] *= inv;
    for (int j = i + 1; j < r1; j++) row[j] = 0.0f;
}

/* In place on row i of dP (p: the probabilities' row): the softmax backward, with the score
 * scale folded in, giving dS. */
static void attn_softmax_causal_row_backward(float *dp, const float *p, int i, int r1, float scale)
{
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int j = 0; j <= i; j++) dot += p[j] * dp[j];
#pragma omp simd
    for (int j = 0; j <= i; j++) dp[j] = scale * mp_softmax_dx(p[j], dp[j], dot);
    for (int j = i + 1; j < r1; j++) dp[j] = 0.0f;
}

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

void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH)
{
    attention_gqa_forward(out, att, qkv, B, T, C, NH, NH);
}

void attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv, const float *att,
                        int B, int T, int C, int NH)
{
    attention_gqa_backward(dqkv, datt, dout, qkv, att, B, T, C, NH, NH);
}
