// AdamW on the GPU; per-element math in math_adamw.h, the same update the CPU runs.
#include <math.h>

#include "cuda_check.h"
#include "kernels_cuda.h"
#include "math_adamw.h"

enum { THREADS = 256 };

__global__ void adamw_kernel(float *param, const float *grad, float *m, float *v, size_t n, float lr, float beta1,
                             float beta2, float eps, float wd, float bc1, float bc2, float grad_scale)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float p = param[i], mm = m[i], vv = v[i]; // registers, then one store each
        mp_adamw(&p, &mm, &vv, grad[i] * grad_scale, lr, beta1, beta2, eps, wd, bc1, bc2);
        param[i] = p;
        m[i] = mm;
        v[i] = vv;
    }
}

void cu_adamw_update(cu_ctx_t *ctx, float *param, const float *grad, float *m, float *v, size_t n, float lr,
                     float beta1, float beta2, float eps, float wd, int t, float grad_scale)
{
    // Bias corrections on the host with the CPU's expression: both backends see the same constants.
    const float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
    const size_t b = (n + THREADS - 1) / THREADS;
    adamw_kernel<<<(unsigned)(b < 65536 ? b : 65536), THREADS, 0, ctx->compute>>>(param, grad, m, v, n, lr, beta1,
                                                                                   beta2, eps, wd, bc1, bc2,
                                                                                   grad_scale);
    CUDA_CHECK_LAUNCH();
}
