/* AdamW, the squared norm and a vector add on the CPU. */
#include <math.h>

#include "kernels.h"
#include "math_adamw.h"

void adamw_update(float *param, const float *grad, float *m, float *v, size_t n, float lr, float beta1,
                  float beta2, float eps, float wd, int t, float grad_scale)
{
    const float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        mp_adamw(&param[i], &m[i], &v[i], grad[i] * grad_scale, lr, beta1, beta2, eps, wd, bc1, bc2);
}

/* Chunks of a fixed size, summed in chunk order: the result does not depend on the thread count. */
double sumsq(const float *x, size_t n)
{
    enum { CHUNK = 4096, MAXC = 1024 };
    double total = 0.0;
    for (size_t base = 0; base < n; base += (size_t)CHUNK * MAXC) {
        double part[MAXC];
        size_t left = n - base;
        int chunks = (int)((left + CHUNK - 1) / CHUNK);
        if (chunks > MAXC) chunks = MAXC;
#pragma omp parallel for schedule(static)
        for (int c = 0; c < chunks; c++) {
            size_t i0 = base + (size_t)c * CHUNK, i1 = i0 + CHUNK < n ? i0 + CHUNK : n;
            double s = 0.0;
            for (size_t i = i0; i < i1; i++) s += (double)x[i] * x[i];
            part[c] = s;
        }
        for (int c = 0; c < chunks; c++) total += part[c];
    }
    return total;
}

void vec_add(float *out, const float *a, const float *b, size_t n)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}
