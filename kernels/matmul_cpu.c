/* Dense products on the CPU through cblas_sgemm (row-major; weights (OC, C) as in PyTorch, so the
 * forward product uses wᵀ without copying it). Legend in kernels.h. */
#include <cblas.h>

#include "kernels.h"

void matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC)
{
    if (bias) { /* out starts as the bias, then the product accumulates: no second pass */
#pragma omp parallel for schedule(static)
        for (int i = 0; i < N; i++) {
            float *orow = out + (size_t)i * OC;
#pragma omp simd
            for (int o = 0; o < OC; o++) orow[o] = bias[o];
        }
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, w, C, bias ? 1.0f : 0.0f, out, OC);
}

void matmul_residual_forward(float *out, const float *res, const float *inp, const float *w, const float *bias,
                             int N, int C, int OC)
{
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *o = out + (size_t)i * OC;
        const float *r = res + (size_t)i * OC;
#pragma omp simd
        for (int k = 0; k < OC; k++) o[k] = r[k] + (bias ? bias[k] : 0.0f);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, w, C, 1.0f, out, OC);
}

void matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                     int N, int C, int OC)
{
    if (dinp) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, w, C, 0.0f, dinp, C);
    matmul_backward_weight(dw, dbias, dout, inp, N, C, OC);
}

void matmul_backward_weight(float *dw, float *dbias, const float *dout, const float *inp, int N, int C, int OC)
{
    if (dw) cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dw, C);
    if (dbias) {
        enum { OB = 64 };
#pragma omp parallel for schedule(static)
        for (int o0 = 0; o0 < OC; o0 += OB) {
            int o1 = o0 + OB < OC ? o0 + OB : OC;
            for (int i = 0; i < N; i++) {
                const float *drow = dout + (size_t)i * OC;
#pragma omp simd
                for (int o = o0; o < o1; o++) dbias[o] += drow[o];
            }
        }
    }
}
