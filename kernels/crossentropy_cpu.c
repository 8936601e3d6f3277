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

void crossentropy_backward(float *dlogits, const float *probs, const int *targets, float dloss, int N, int V)
{
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *p = probs + (size_t)i * V;
        float *d = dlogits + (size_t)i * V;
#pragma omp simd
        for (int j = 0; j < V; j++) d[j] = mp_xent_dlogit(p[j], j == targets[i], dloss);
    }
}
