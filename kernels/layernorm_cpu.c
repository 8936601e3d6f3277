/* LayerNorm on the CPU; per-element math in math_layernorm.h. Legend in kernels.h. */
#include "kernels.h"
#include "math_layernorm.h"

void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                       int N, int C)
{
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C;
        float *y = out + (size_t)i * C;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int c = 0; c < C; c++) s += x[c];
        float m = s / C, v = 0.0f;
#pragma omp simd reduction(+ : v)
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        float r = mp_ln_rstd(v / C);
#pragma omp simd
        for (int c = 0; c < C; c++) y[c] = mp_ln_out(x[c], m, r, w[c], b[c]);
        mean[i] = m;
        rstd[i] = r;
    }
}

/* Two passes: rows in parallel for dinp, then channel blocks in parallel for dw/db (each thread
 * owns its channels and sums rows in order: deterministic without atomics). */
void layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                        const float *mean, const float *rstd, int N, int C)
{
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C, *dy = dout + (size_t)i * C;
        float *dx = dinp + (size_t)i * C;
        const float m = mean[i], r = rstd[i];
        float sdn = 0.0f, sdnn = 0.0f;
#pragma omp simd reduction(+ : sdn, sdnn)
        for (int c = 0; c < C; c++) {
            float dn = dy[c] * w[c];
            sdn += dn;
            sdnn += dn * mp_ln_norm(x[c], m, r);
        }
        sdn /= C;
        sdnn /= C;
#pragma omp simd
        for (int c = 0; c < C; c++) dx[c] += mp_ln_dx(dy[c] * w[c], mp_ln_norm(x[c], m, r), r, sdn, sdnn);
    }
    enum { CB = 64 };
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += CB) {
        int c1 = c0 + CB < C ? c0 + CB : C;
        for (int i = 0; i < N; i++) {
            const float *x = inp + (size_t)i * C, *dy = dout + (size_t)i * C;
#pragma omp simd
            for (int c = c0; c < c1; c++) {
                dw[c] += dy[c] * mp_ln_norm(x[c], mean[i], rstd[i]);
                db[c] += dy[c];
            }
        }
    }
}
