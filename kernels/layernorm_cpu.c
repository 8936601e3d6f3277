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

/* One pass over dout and inp: the rows go in LN_CHUNKS fixed chunks, in parallel; each chunk adds
 * its rows' dinp and sums its own partial dw/db, and the calling thread adds the partials to dw/db
 * in chunk order. The chunks depend on N alone, so the result is the same bits for any thread
 * count, as before, without the second pass over both tensors by channel blocks. The partials live
 * on the caller's stack, so channels go in tiles of LN_CT; with more than one tile a row's two
 * means (which need the whole row) are taken again for every tile. */
enum { LN_CHUNKS = 8, LN_CT = 1024 };

/* The row means of dn = dy·w and of dn·n that dx needs (mp_ln_dx). */
static void ln_row_means(float *sdn_p, float *sdnn_p, const float *dy, const float *x, const float *w, float m,
                         float r, int C)
{
    float sdn = 0.0f, sdnn = 0.0f;
#pragma omp simd reduction(+ : sdn, sdnn)
    for (int c = 0; c < C; c++) {
        float dn = dy[c] * w[c];
        sdn += dn;
        sdnn += dn * mp_ln_norm(x[c], m, r);
    }
    *sdn_p = sdn / C;
    *sdnn_p = sdnn / C;
}

/* Rows [i0, i1), channels [c0, c1): dinp += ; pw, pb (c1 - c0) = Σ over the rows of dy·n and dy. */
static void ln_chunk_backward(float *pw, float *pb, float *dinp, const float *dout, const float *inp, const float *w,
                              const float *mean, const float *rstd, int i0, int i1, int c0, int c1, int C)
{
    for (int c = 0; c < c1 - c0; c++) pw[c] = pb[c] = 0.0f;
    for (int i = i0; i < i1; i++) {
        const float *x = inp + (size_t)i * C, *dy = dout + (size_t)i * C;
        float *dx = dinp + (size_t)i * C;
        const float m = mean[i], r = rstd[i];
        float a, b;
        ln_row_means(&a, &b, dy, x, w, m, r, C); /* the row is then in L1 for the pass below */
#pragma omp simd
        for (int c = c0; c < c1; c++) {
            const float n = mp_ln_norm(x[c], m, r);
            dx[c] += mp_ln_dx(dy[c] * w[c], n, r, a, b);
            pw[c - c0] += dy[c] * n;
            pb[c - c0] += dy[c];
        }
    }
}

void layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                        const float *mean, const float *rstd, int N, int C)
{
    if (N <= 0) return; /* nothing to add, and no chunk size to divide by */
    const int RB = (N + LN_CHUNKS - 1) / LN_CHUNKS, K = (N + RB - 1) / RB;
    float part[LN_CHUNKS][2][LN_CT]; /* 64 KiB */
    for (int c0 = 0; c0 < C; c0 += LN_CT) {
        const int c1 = c0 + LN_CT < C ? c0 + LN_CT : C;
#pragma omp parallel for schedule(static)
        for (int k = 0; k < K; k++)
            ln_chunk_backward(part[k][0], part[k][1], dinp, dout, inp, w, mean, rstd, k * RB,
                              (k + 1) * RB < N ? (k + 1) * RB : N, c0, c1, C);
        for (int k = 0; k < K; k++) {
#pragma omp simd
            for (int c = c0; c < c1; c++) {
                dw[c] += part[k][0][c - c0];
                db[c] += part[k][1][c - c0];
            }
        }
    }
}
