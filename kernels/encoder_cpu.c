/* Token + position embedding on the CPU, vocab-parallel aware. Legend in kernels.h. */
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
        for (int c = 0; c < C; c++) o[c] = (e ? e[c] : 0.0f) + (p ? p[c] : 0.0f);
    }
}

void position_forward(float *out, const float *wpe, int B, int T, int C)
{
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        const float *p = wpe + (size_t)(bt % T) * C;
        float *o = out + (size_t)bt * C;
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
        int c1 = c0 + CB < C ? c0 + CB : C;
        for (int bt = 0; bt < B * T; bt++) {
            const float *d = dout + (size_t)bt * C;
            const int tok = tokens[bt] - v0;
            if (tok >= 0 && tok < vn) {
                float *e = dwte + (size_t)tok * C;
                for (int c = c0; c < c1; c++) e[c] += d[c];
            }
            float *p = dwpe + (size_t)(bt % T) * C;
            for (int c = c0; c < c1; c++) p[c] += d[c];
        }
    }
}
