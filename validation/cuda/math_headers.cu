// Compiled (not run) by .ci/run with nvcc: every per-element math header that the CPU kernels use
// must also compile as __host__ __device__ code, warning-free, so both backends share one formula.
#include "math_exp.h"
#include "math_gelu.h"
#include "math_layernorm.h"
#include "math_softmax.h"
#include "math_adamw.h"
#include "math_rmsnorm.h"
#include "math_rope.h"
#include "math_swiglu.h"
__global__ void k(float *x, float *m, float *v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float d, g = mp_gelu(x[i]) + mp_gelu_grad(x[i]) + mp_expf(x[i]) + mp_tanhf(x[i]);
        g += mp_gelu_pair(x[i], &d) + d;
        g += mp_ln_out(x[i], 0.1f, mp_ln_rstd(1.0f), 1.0f, 0.0f) + mp_ln_dx(g, 0.5f, 1.0f, 0.1f, 0.2f);
        g += mp_softmax_exp(x[i], 1.0f) + mp_xent_loss(1.0f, 2.0f, 0.5f) + mp_xent_dlogit(0.3f, i == 0, 1.0f) + mp_softmax_dx(0.2f, g, 0.1f);
        g += mp_rms_out(x[i], mp_rms_rstd(g, 1e-6f), 1.0f) + mp_rms_dx(g, 0.5f, 1.0f, 0.2f);
        g += mp_rope_lo(x[i], g, 0.6f, 0.8f) + mp_rope_hi(x[i], g, 0.6f, 0.8f) + (float)mp_rope_angle(i, 1, 8, 1e4);
        float dg, du;
        mp_swiglu_grad(x[i], g, 1.0f, &dg, &du);
        g += mp_swiglu(x[i], g) + dg + du + mp_sigmoid(g);
        mp_adamw(&x[i], &m[i], &v[i], g, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.1f, 0.05f);
    }
}
