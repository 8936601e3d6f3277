/* One query row of causal attention against a key/value cache: the decode step of generation.
 * Legend in kernels.h. The training kernel (attention_cpu.c) computes every row of a sequence at
 * once through BLAS; a decode step has one new row per sequence, so the products here are dot
 * products over the cache, and the softmax is the same per-element math (math_softmax.h). Rows of
 * a batch are independent: OpenMP runs (row, head) pairs in parallel, each reduction in a fixed
 * order, so the result does not depend on the thread count or on the other rows of the batch. The
 * dot products over a head's channels are vector reductions (omp simd: lanes, then the lanes
 * added; one order for every row, chosen by the compiler once). */
#include <math.h>

#include "kernels.h"
#include "math_softmax.h"

void attention_decode_forward(float *out, float *att, const float *q, int ldq, const float *const *kcache,
                              const float *const *vcache, const int *pos, int B, int C, int NH, int KVH, int Tmax)
{
    const int hs = C / NH, group = NH / KVH, KC = KVH * hs;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        const int b = bh / NH, h = bh % NH, n = pos[b] + 1;
        const float *qh = q + (size_t)b * ldq + (size_t)h * hs;
        const float *K = kcache[b] + (size_t)(h / group) * hs, *V = vcache[b] + (size_t)(h / group) * hs;
        float *a = att + (size_t)bh * Tmax, *o = out + (size_t)b * C + (size_t)h * hs;
        float max = -INFINITY;
        for (int j = 0; j < n; j++) {
            float s = 0.0f;
            const float *kj = K + (size_t)j * KC;
#pragma omp simd reduction(+ : s)
            for (int d = 0; d < hs; d++) s += qh[d] * kj[d];
            a[j] = s * scale;
            max = a[j] > max ? a[j] : max;
        }
        float sum = 0.0f;
        for (int j = 0; j < n; j++) {
            a[j] = mp_softmax_exp(a[j], max);
            sum += a[j];
        }
        const float inv = 1.0f / sum;
        for (int d = 0; d < hs; d++) o[d] = 0.0f;
        for (int j = 0; j < n; j++) {
            const float p = a[j] * inv, *vj = V + (size_t)j * KC;
#pragma omp simd
            for (int d = 0; d < hs; d++) o[d] += p * vj[d];
        }
    }
}
