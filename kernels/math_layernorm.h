/* LayerNorm per element: y = (x − mean)·rstd·w + b, rstd = 1/√(var + eps), biased variance.
 * Backward of one element given the row sums of the normalised gradient:
 *   dx = rstd · (dn − mean(dn) − n · mean(dn · n)), with n = (x − mean)·rstd and dn = dy · w. */
#ifndef MP_MATH_LAYERNORM_H
#define MP_MATH_LAYERNORM_H

#include <math.h>

#include "hd.h"

#define MP_LN_EPS 1e-5f

MP_HD float mp_ln_rstd(float var) { return 1.0f / sqrtf(var + MP_LN_EPS); }

MP_HD float mp_ln_norm(float x, float mean, float rstd) { return (x - mean) * rstd; }

MP_HD float mp_ln_out(float x, float mean, float rstd, float w, float b) { return mp_ln_norm(x, mean, rstd) * w + b; }

/* dx for one element; dn_mean = mean of dn over the row, dnn_mean = mean of dn·n over the row. */
MP_HD float mp_ln_dx(float dn, float n, float rstd, float dn_mean, float dnn_mean)
{
    return rstd * (dn - dn_mean - n * dnn_mean);
}

#endif
