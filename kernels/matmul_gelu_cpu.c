/* The MLP's GELU fused with the products beside it, on the CPU. Legend in kernels.h.
 *
 * The forward (fc product, then GELU) and the backward (fcproj's input gradient, then GELU's
 * backward) each run their product in blocks of rows: OpenMP hands blocks to threads, every BLAS
 * call inside runs single-threaded (OpenBLAS's OpenMP build does that inside a parallel region),
 * and the block is transformed while it is still in the core's cache instead of in a second pass
 * over the whole tensor. The forward also saves GELU's derivative, so the backward evaluates no
 * tanh at all: it multiplies. */
#include <cblas.h>

#include "kernels.h"
#include "math_gelu.h"

/* Rows per block: a function of N alone, never of the thread count, so the blocks and hence the
 * bits are the same for any number of threads. Large blocks: OpenBLAS packs the whole weight for
 * every call, a cost the block's product must dwarf (at N = 1024, C = 256, OC = 1024 the forward
 * with 64-row blocks measured 8-9% slower than with 256). At most 256 rows (1 MiB of output at
 * OC = 1024: a Zen 4 core's L2) and about N/4, so 2 or 4 threads get equal shares at the usual N. */
static int mlp_block_rows(int N)
{
    const int rb = (N / 4 + 15) / 16 * 16;
    return rb < 64 ? 64 : rb > 256 ? 256 : rb;
}

void matmul_gelu_forward(float *out, float *dgelu, const float *inp, const float *w, const float *bias, int N, int C,
                         int OC)
{
    const int RB = mlp_block_rows(N);
#pragma omp parallel for schedule(static)
    for (int r0 = 0; r0 < N; r0 += RB) {
        const int rb = r0 + RB < N ? RB : N - r0;
        float *pre = dgelu + (size_t)r0 * OC, *g = out + (size_t)r0 * OC;
        if (bias) /* the block starts as the bias and the product accumulates onto it */
            for (int i = 0; i < rb; i++) {
#pragma omp simd
                for (int o = 0; o < OC; o++) pre[(size_t)i * OC + o] = bias[o];
            }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rb, OC, C, 1.0f, inp + (size_t)r0 * C, C, w, C,
                    bias ? 1.0f : 0.0f, pre, OC);
        const size_t n = (size_t)rb * OC;
#pragma omp simd
        for (size_t i = 0; i < n; i++) {
            float d;
            g[i] = mp_gelu_pair(pre[i], &d);
            pre[i] = d;
        }
    }
}

void matmul_backward_gelu(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                          const float *dgelu, int N, int C, int OC)
{
    if (dinp) {
        const int RB = mlp_block_rows(N);
#pragma omp parallel for schedule(static)
        for (int r0 = 0; r0 < N; r0 += RB) {
            const int rb = r0 + RB < N ? RB : N - r0;
            float *d = dinp + (size_t)r0 * C;
            const float *dg = dgelu + (size_t)r0 * C;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rb, C, OC, 1.0f, dout + (size_t)r0 * OC, OC, w, C,
                        0.0f, d, C);
            const size_t n = (size_t)rb * C;
#pragma omp simd
            for (size_t i = 0; i < n; i++) d[i] *= dg[i];
        }
    }
    matmul_backward_weight(dw, dbias, dout, inp, N, C, OC);
}

void mlp_proj_forward(float *out, const float *res, const float *inp, const float *w, const float *bias, int N, int C,
                      int OC)
{
    if (res) matmul_residual_forward(out, res, inp, w, bias, N, C, OC);
    else matmul_forward(out, inp, w, bias, N, C, OC);
}

void mlp_proj_backward_weight(float *dw, float *dbias, const float *dout, const float *inp, int N, int C, int OC)
{
    matmul_backward_weight(dw, dbias, dout, inp, N, C, OC);
}

void mlp_fc_backward(float *dinp, float *dw, float *dbias, const float *dhidden, const float *inp, const float *w,
                     int N, int C, int OC)
{
    matmul_backward(dinp, dw, dbias, dhidden, inp, w, N, C, OC);
}

void mlp_fc_backward_weight(float *dw, float *dbias, const float *dhidden, const float *inp, int N, int C, int OC)
{
    matmul_backward_weight(dw, dbias, dhidden, inp, N, C, OC);
}
