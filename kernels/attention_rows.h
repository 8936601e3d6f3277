/* The per-row steps of causal attention on the CPU that attention_cpu.c and attention_gqa_cpu.c
 * share, so that GQA with as many kv heads as query heads is attention_forward/_backward's bits.
 * Rows are processed in blocks ending at r1: row i's live entries are 0..i, and i+1..r1-1 (inside
 * the block's product, above the diagonal) are zeroed. CPU only (static functions, no MP_HD). */
#ifndef MP_ATTENTION_ROWS_H
#define MP_ATTENTION_ROWS_H

#include "math_softmax.h"

/* In place on row i of the scores: softmax. */
static inline void attn_softmax_causal_row(float *row, int i, int r1)
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
static inline void attn_softmax_causal_row_backward(float *dp, const float *p, int i, int r1, float scale)
{
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int j = 0; j <= i; j++) dot += p[j] * dp[j];
#pragma omp simd
    for (int j = 0; j <= i; j++) dp[j] = scale * mp_softmax_dx(p[j], dp[j], dot);
    for (int j = i + 1; j < r1; j++) dp[j] = 0.0f;
}

#endif
