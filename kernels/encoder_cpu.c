/* Token + position embedding on the CPU, vocab-parallel aware. Legend in kernels.h.
 *
 * gcc -O2 vectorises a loop of unknown length only under `omp simd` (its default cost model at -O2
 * refuses loops that need a scalar remainder), and not at all with a select on a row pointer
 * inside, so every inner loop here is branch-free and marked. */
#include <string.h>

#include "kernels.h"

void encoder_forward(float *out, const int *tokens, const float *wte, const float *wpe, int B, int T, int C, int v0,
                     int vn)
{
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        const int tok = tokens[bt] - v0;
        const float *e = tok >= 0 && tok < vn ? wte + (size_t)tok * C : NULL;
        const float *p = wpe ? wpe + (size_t)(bt % T) * C : NULL;
        float *o = out + (size_t)bt * C;
        if (e && p) {
#pragma omp simd
            for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
        } else if (e || p) { /* + 0.0f, not a copy: -0.0f becomes +0.0f as in the sum of both halves */
            const float *q = e ? e : p;
#pragma omp simd
            for (int c = 0; c < C; c++) o[c] = q[c] + 0.0f;
        } else {
            memset(o, 0, (size_t)C * sizeof(float));
        }
    }
}

void position_forward(float *out, const float *wpe, int B, int T, int C)
{
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        const float *p = wpe + (size_t)(bt % T) * C;
        float *o = out + (size_t)bt * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] += p[c];
    }
}

/* Threads own disjoint channel blocks and walk the tokens in order, so repeated tokens add up in
 * the same order every run (no atomics). */
void encoder_backward(float *dwte, float *dwpe, const float *dout, const int *tokens, int B, int T, int C, int v0,
                      int vn)
{
    enum { CB = 32 };
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += CB) {
        const int c1 = c0 + CB < C ? c0 + CB : C;
        for (int bt = 0; bt < B * T; bt++) {
            const float *d = dout + (size_t)bt * C;
            const int tok = tokens[bt] - v0;
            if (tok >= 0 && tok < vn) {
                float *e = dwte + (size_t)tok * C;
#pragma omp simd
                for (int c = c0; c < c1; c++) e[c] += d[c];
            }
            if (!dwpe) continue; /* a model without a position table (llama) */
            float *p = dwpe + (size_t)(bt % T) * C;
#pragma omp simd
            for (int c = c0; c < c1; c++) p[c] += d[c];
        }
    }
}
