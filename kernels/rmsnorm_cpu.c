/* RMSNorm on the CPU; per-element math in math_rmsnorm.h. Legend in kernels.h. */
#include "kernels.h"
#include "math_rmsnorm.h"

void rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps)
{
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C;
        float *y = out + (size_t)i * C;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int c = 0; c < C; c++) s += x[c] * x[c];
        const float r = mp_rms_rstd(s / C, eps);
#pragma omp simd
        for (int c = 0; c < C; c++) y[c] = mp_rms_out(x[c], r, w[c]);
        rstd[i] = r;
    }
}

/* As layernorm_backward: the rows go in RMS_CHUNKS fixed chunks (a function of N alone), each
 * chunk adds its rows' dinp and sums its own partial dw, and the calling thread adds the partials
 * in chunk order, so dw is the same bits for any thread count. The partials live on the stack,
 * hence channel tiles of RMS_CT; with several tiles a row's mean(dn·n) is taken again per tile. */
enum { RMS_CHUNKS = 8, RMS_CT = 1024 };

/* Rows [i0, i1), channels [c0, c1): dinp += ; pw (c1 - c0) = Σ over the rows of dy·n. */
static void rms_chunk_backward(float *pw, float *dinp, const float *dout, const float *inp, const float *w,
                               const float *rstd, int i0, int i1, int c0, int c1, int C)
{
    for (int c = 0; c < c1 - c0; c++) pw[c] = 0.0f;
    for (int i = i0; i < i1; i++) {
        const float *x = inp + (size_t)i * C, *dy = dout + (size_t)i * C;
        float *dx = dinp + (size_t)i * C;
        const float r = rstd[i];
        float sdnn = 0.0f;
#pragma omp simd reduction(+ : sdnn)
        for (int c = 0; c < C; c++) sdnn += dy[c] * w[c] * (x[c] * r);
        const float a = sdnn / C;
#pragma omp simd
        for (int c = c0; c < c1; c++) {
            const float n = x[c] * r;
            dx[c] += mp_rms_dx(dy[c] * w[c], n, r, a);
            pw[c - c0] += dy[c] * n;
        }
    }
}

void rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w, const float *rstd,
                      int N, int C)
{
    if (N <= 0) return; /* nothing to add, and no chunk size to divide by */
    const int RB = (N + RMS_CHUNKS - 1) / RMS_CHUNKS, K = (N + RB - 1) / RB;
    float part[RMS_CHUNKS][RMS_CT]; /* 32 KiB */
    for (int c0 = 0; c0 < C; c0 += RMS_CT) {
        const int c1 = c0 + RMS_CT < C ? c0 + RMS_CT : C;
#pragma omp parallel for schedule(static)
        for (int k = 0; k < K; k++)
            rms_chunk_backward(part[k], dinp, dout, inp, w, rstd, k * RB, (k + 1) * RB < N ? (k + 1) * RB : N, c0, c1,
                               C);
        for (int k = 0; k < K; k++) {
#pragma omp simd
            for (int c = c0; c < c1; c++) dw[c] += part[k][c - c0];
        }
    }
}
