/* AdamW for one element, decoupled weight decay, bias-corrected moments (see kernels.h). */
#ifndef MP_MATH_ADAMW_H
#define MP_MATH_ADAMW_H

#include <math.h>

#include "hd.h"

/* Updates *p, *m, *v in place. bc1 = 1 − β1^t, bc2 = 1 − β2^t are computed once per tensor. */
MP_HD void mp_adamw(float *p, float *m, float *v, float g, float lr, float beta1, float beta2, float eps, float wd,
                    float bc1, float bc2)
{
    float mm = beta1 * *m + (1.0f - beta1) * g;
    float vv = beta2 * *v + (1.0f - beta2) * g * g;
    *m = mm;
    *v = vv;
    float mhat = mm / bc1, vhat = vv / bc2;
    *p -= lr * (mhat / (sqrtf(vhat) + eps) + wd * *p);
}

#endif
