/* Softmax cross-entropy over the vocabulary on the CPU, in place on the logits. */
#include "kernels.h"
#include "math_softmax.h"

void crossentropy_forward(float *losses, float *probs_logits, const int *targets, int N, int V)
{
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *x = probs_logits + (size_t)i * V;
        float max = x[0];
#pragma omp simd reduction(max : max)
        for (int j = 1; j < V; j++) max = x[j] > max ? x[j] : max;
        const float logit_t = x[targets[i]];
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < V; j++) {
            x[j] = mp_softmax_exp(x[j], max);
            sum += x[j];
        }
        const float inv = 1.0f / sum;
#pragma omp simd
        for (int j = 0; j < V; j++) x[j] *= inv;
        losses[i] = mp_xent_loss(max, sum, logit_t);
    }
}

void crossentropy_backward(float *dlogits, const float *probs, const int *targets, float dloss, int N, int V, int v0)
{
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *p = probs + (size_t)i * V;
        float *d = dlogits + (size_t)i * V;
        const int t = targets[i] - v0;
        /* the target's column after the loop: a compare-and-select inside it kept AVX2 code scalar;
         * reading p[t] before d[t] is written keeps dlogits aliasing probs correct */
        const float pt = t >= 0 && t < V ? p[t] : 0.0f;
#pragma omp simd
        for (int j = 0; j < V; j++) d[j] = mp_xent_dlogit(p[j], 0, dloss);
        if (t >= 0 && t < V) d[t] = mp_xent_dlogit(pt, 1, dloss);
    }
}

/* The fused classifier (llm.c's): crossentropy_forward then crossentropy_backward in one pass over
 * each row, the probabilities never stored: the max, then Σ exp(x − max) reading the logits, then
 * dlogits written over them. Each element is the two calls' formula on the same float values in
 * the same order (exp rounded, then times 1/Σ, then the dlogit), so the bits are theirs. */
void crossentropy_fused(float *losses, float *logits_dlogits, const int *targets, float dloss, int N, int V)
{
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *x = logits_dlogits + (size_t)i * V;
        float max = x[0];
#pragma omp simd reduction(max : max)
        for (int j = 1; j < V; j++) max = x[j] > max ? x[j] : max;
        const int t = targets[i];
        const float logit_t = x[t];
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < V; j++) sum += mp_softmax_exp(x[j], max);
        const float inv = 1.0f / sum;
        losses[i] = mp_xent_loss(max, sum, logit_t);
        const float pt = mp_softmax_exp(logit_t, max) * inv;
#pragma omp simd
        for (int j = 0; j < V; j++) x[j] = mp_xent_dlogit(mp_softmax_exp(x[j], max) * inv, 0, dloss);
        x[t] = mp_xent_dlogit(pt, 1, dloss);
    }
}

void xent_local_max(float *max, float *tlogit, const float *logits, const int *targets, int N, int Vl, int v0,
                    int valid)
{
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *x = logits + (size_t)i * Vl;
        float m = -INFINITY;
#pragma omp simd reduction(max : m)
        for (int j = 0; j < valid; j++) m = x[j] > m ? x[j] : m;
        const int t = targets[i] - v0;
        max[i] = m;
        tlogit[i] = t >= 0 && t < valid ? x[t] : 0.0f;
    }
}

void xent_local_expsum(float *sum, float *logits, const float *max, int N, int Vl, int valid)
{
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *x = logits + (size_t)i * Vl, s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int j = 0; j < valid; j++) {
            x[j] = mp_softmax_exp(x[j], max[i]);
            s += x[j];
        }
        for (int j = valid; j < Vl; j++) x[j] = 0.0f; /* padding rows of the vocabulary */
        sum[i] = s;
    }
}

void xent_finish(float *losses, float *probs, const float *max, const float *sum, const float *tlogit, int N, int Vl)
{
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *x = probs + (size_t)i * Vl;
        const float inv = 1.0f / sum[i];
#pragma omp simd
        for (int j = 0; j < Vl; j++) x[j] *= inv;
        losses[i] = mp_xent_loss(max[i], sum[i], tlogit[i]);
    }
}
