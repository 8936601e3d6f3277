/* Causal multi-head attention on the CPU. Legend in kernels.h.
 *
 * Each (batch, head) pair is independent: OpenMP runs pairs in parallel and every BLAS call
 * inside runs single-threaded (OpenBLAS's OpenMP build does that inside a parallel region). The
 * products read q, k, v straight out of the (B,T,3C) qkv buffer with leading dimension 3C, so
 * nothing is copied or transposed. Rows are processed in blocks of RB: block [r0, r1) only needs
 * keys [0, r1), so the masked upper triangle is skipped except inside the diagonal blocks. */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "kernels.h"
#include "attention_rows.h"

enum { RB = 64 };

void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH)
{
    const int hs = C / NH, ld = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        const int b = bh / NH, h = bh % NH;
        const float *q = qkv + (size_t)b * T * ld + (size_t)h * hs, *k = q + C, *v = q + 2 * C;
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

void attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv, const float *att,
                        int B, int T, int C, int NH)
{
    const int hs = C / NH, ld = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        const int b = bh / NH, h = bh % NH;
        const float *q = qkv + (size_t)b * T * ld + (size_t)h * hs, *k = q + C, *v = q + 2 * C;
        const float *a = att + (size_t)bh * T * T, *dO = dout + (size_t)b * T * C + (size_t)h * hs;
        float *dq = dqkv + (size_t)b * T * ld + (size_t)h * hs, *dk = dq + C, *dv = dq + 2 * C;
        float *ds = datt + (size_t)bh * T * T;
        for (int t = 0; t < T; t++) { /* dk, dv accumulate over row blocks */
            memset(dk + (size_t)t * ld, 0, (size_t)hs * sizeof(float));
            memset(dv + (size_t)t * ld, 0, (size_t)hs * sizeof(float));
        }
        for (int r0 = 0; r0 < T; r0 += RB) {
            const int r1 = r0 + RB < T ? r0 + RB : T, rb = r1 - r0;
            float *dsb = ds + (size_t)r0 * T;
            const float *ab = a + (size_t)r0 * T;
            /* dP = dO vᵀ ; dv += Pᵀ dO */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rb, r1, hs, 1.0f, dO + (size_t)r0 * C, C, v, ld,
                        0.0f, dsb, T);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, rb, 1.0f, ab, T, dO + (size_t)r0 * C, C,
                        1.0f, dv, ld);
            for (int i = r0; i < r1; i++) /* dS */
                attn_softmax_causal_row_backward(ds + (size_t)i * T, a + (size_t)i * T, i, r1, scale);
            /* dq = dS k ; dk += dSᵀ q */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rb, hs, r1, 1.0f, dsb, T, k, ld, 0.0f,
                        dq + (size_t)r0 * ld, ld);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, rb, 1.0f, dsb, T, q + (size_t)r0 * ld, ld,
                        1.0f, dk, ld);
        }
    }
}
