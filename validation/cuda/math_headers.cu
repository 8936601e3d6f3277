// Compiled (not run) by .ci/run with nvcc: every per-element math header that the CPU kernels use
// must also compile as __host__ __device__ code, warning-free, so both backends share one formula.
#include "math_exp.h"
#include "math_gelu.h"
#include "math_layernorm.h"
#include "math_softmax.h"
#include "math_adamw.h"
__global__ void k(float *x, float *m, float *v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float d, g = mp_gelu(x[i]) + mp_gelu_grad(x[i]) + mp_expf(x[i]) + mp_tanhf(x[i]);
        g += mp_gelu_pair(x[i], &d) + d;
        g += mp_ln_out(x[i], 0.1f, mp_ln_rstd(1.0f), 1.0f, 0.0f) + mp_ln_dx(g, 0.5f, 1.0f, 0.1f, 0.2f);
        g += mp_softmax_exp(x[i], 1.0f) + mp_xent_loss(1.0f, 2.0f, 0.5f) + mp_xent_dlogit(0.3f, i == 0, 1.0f) + mp_softmax_dx(0.2f, g, 0.1f);
        mp_adamw(&x[i], &m[i], &v[i], g, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.1f, 0.05f);
    }
}
